/*
 * ATA/ATAPI host driver (see ata.h): PCI IDE function set-up, reset and signature classification
 * (ATA-8 ACS 9.12 / ATA8-APT), IDENTIFY parsing, the PIO data-in/out, DMA and PACKET protocols,
 * and the SFF-8038i bus master with PRD tables. Polled, ring 3.
 */
#include "tests/guest/ata.h"

#include "tests/guest/guest.h"

uint64_t ata_port_reads, ata_port_writes, ata_string_ops;

/* ============================================================================================
 * Register access (each one is a VM exit, and under PVM a #GP round trip: count them)
 */

static inline uint8_t rd(const struct ata_chan *ch, unsigned reg) {
  ata_port_reads++;
  return inb((uint16_t)(ch->cmd + reg));
}
static inline void wr(const struct ata_chan *ch, unsigned reg, uint8_t v) {
  ata_port_writes++;
  outb((uint16_t)(ch->cmd + reg), v);
}
static inline void wr_ctl(struct ata_chan *ch, uint8_t v) {
  ata_port_writes++;
  ch->devctl = v;
  outb(ch->ctl, v);
}
static inline uint8_t rd_alt(const struct ata_chan *ch) {
  ata_port_reads++;
  return inb(ch->ctl);
}
static inline uint8_t bm_rd(const struct ata_chan *ch, unsigned reg) {
  ata_port_reads++;
  return inb((uint16_t)(ch->bm + reg));
}
static inline void bm_wr(const struct ata_chan *ch, unsigned reg, uint8_t v) {
  ata_port_writes++;
  outb((uint16_t)(ch->bm + reg), v);
}
static inline void bm_wr32(const struct ata_chan *ch, unsigned reg, uint32_t v) {
  ata_port_writes++;
  outl((uint16_t)(ch->bm + reg), v);
}

/* REP INSW / OUTSW on the data register: one instruction (one #GP under PVM) per block. */
static void data_in(const struct ata_chan *ch, void *buf, size_t words) {
  ata_string_ops++;
  uint16_t port = ch->cmd;
  __asm__ volatile("rep insw" : "+D"(buf), "+c"(words) : "d"(port) : "memory");
}
static void data_out(const struct ata_chan *ch, const void *buf, size_t words) {
  ata_string_ops++;
  uint16_t port = ch->cmd;
  __asm__ volatile("rep outsw" : "+S"(buf), "+c"(words) : "d"(port) : "memory");
}

/* Scratch for data a device offers beyond the caller's buffer (read and dropped). */
static uint16_t discard_buf[1024];

static void data_in_discard(const struct ata_chan *ch, size_t words) {
  while (words) {
    size_t n = words > 1024 ? 1024 : words;
    data_in(ch, discard_buf, n);
    words -= n;
  }
}

/* Polls the Status register until (status & mask) == want. Every read is ~100 us under PVM, so
 * the first reads go back to back; after that it backs off to 200 us, then 1 ms. */
static uint8_t wait_status(const struct ata_chan *ch, uint8_t mask, uint8_t want, uint64_t deadline,
                           bool *timed_out) {
  for (unsigned polls = 0;; polls++) {
    uint8_t st = rd(ch, ATA_REG_STATUS);
    if ((st & mask) == want) return st;
    if (deadline_passed(deadline)) {
      *timed_out = true;
      return st;
    }
    if (polls > 64) udelay(polls > 500 ? 1000 : 200);
  }
}

/* ============================================================================================
 * Text
 */

#define TEXT_SIZE 320
static char text_ring[8][TEXT_SIZE];
static unsigned text_next;
static char *text_buf(void) {
  char *b = text_ring[text_next++ % 8];
  b[0] = 0;
  return b;
}

/* snprintf at b + *n that never runs past TEXT_SIZE. */
__attribute__((format(printf, 3, 4))) static void append(char *b, size_t *n, const char *fmt, ...) {
  if (*n >= TEXT_SIZE - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(b + *n, TEXT_SIZE - *n, fmt, ap);
  va_end(ap);
  if (w > 0) *n += (size_t)w;
  if (*n > TEXT_SIZE - 1) *n = TEXT_SIZE - 1;
}

static const char *bits_str(uint8_t v, const char *const names[8]) {
  char *b = text_buf();
  size_t n = 0;
  append(b, &n, "0x%02x", v);
  bool any = false;
  for (int i = 7; i >= 0; i--) {
    if ((v & (1u << i)) && names[i]) {
      append(b, &n, "%s%s", any ? " " : " (", names[i]);
      any = true;
    }
  }
  if (any) append(b, &n, ")");
  return b;
}

const char *ata_status_str(uint8_t s) {
  static const char *const names[8] = {"ERR", "IDX", "CORR", "DRQ", "DSC", "DF", "DRDY", "BSY"};
  return bits_str(s, names);
}
const char *ata_error_str(uint8_t e) {
  static const char *const names[8] = {"AMNF", "NM", "ABRT", "MCR", "IDNF", "MC", "UNC", "ICRC"};
  return bits_str(e, names);
}
const char *ata_bm_str(uint8_t bm) {
  static const char *const names[8] = {"ACTIVE", "ERROR", "INTR", NULL,
                                       NULL,     "DRV0",  "DRV1", "SIMPLEX"};
  return bits_str(bm, names);
}
const char *ata_class_str(enum ata_class c) {
  switch (c) {
    case ATA_CLASS_NONE: return "none";
    case ATA_CLASS_ATA: return "ATA";
    case ATA_CLASS_ATAPI: return "ATAPI";
    default: return "unknown";
  }
}

const char *ata_sense_str(uint8_t key, uint8_t asc, uint8_t ascq) {
  static const char *const keys[16] = {
      "NO SENSE",       "RECOVERED ERROR", "NOT READY",      "MEDIUM ERROR",
      "HARDWARE ERROR", "ILLEGAL REQUEST", "UNIT ATTENTION", "DATA PROTECT",
      "BLANK CHECK",    "VENDOR SPECIFIC", "COPY ABORTED",   "ABORTED COMMAND",
      "KEY 0xC",        "VOLUME OVERFLOW", "MISCOMPARE",     "KEY 0xF"};
  const char *what = NULL;
  switch (asc) {
    case 0x00: what = ascq == 0 ? "NO ADDITIONAL SENSE INFORMATION" : NULL; break;
    case 0x04: what = "LOGICAL UNIT NOT READY"; break;
    case 0x11: what = "UNRECOVERED READ ERROR"; break;
    case 0x1a: what = "PARAMETER LIST LENGTH ERROR"; break;
    case 0x20: what = "INVALID COMMAND OPERATION CODE"; break;
    case 0x21: what = "LOGICAL BLOCK ADDRESS OUT OF RANGE"; break;
    case 0x24: what = "INVALID FIELD IN CDB"; break;
    case 0x27: what = "WRITE PROTECTED"; break;
    case 0x28: what = "NOT READY TO READY CHANGE, MEDIUM MAY HAVE CHANGED"; break;
    case 0x29: what = "POWER ON, RESET, OR BUS DEVICE RESET OCCURRED"; break;
    case 0x30: what = "INCOMPATIBLE MEDIUM INSTALLED"; break;
    case 0x3a:
      what = ascq == 1   ? "MEDIUM NOT PRESENT - TRAY CLOSED"
             : ascq == 2 ? "MEDIUM NOT PRESENT - TRAY OPEN"
                         : "MEDIUM NOT PRESENT";
      break;
    case 0x4b: what = "DATA PHASE ERROR"; break;
    case 0x53: what = "MEDIA LOAD OR EJECT FAILED / MEDIUM REMOVAL PREVENTED"; break;
    case 0x64: what = "ILLEGAL MODE FOR THIS TRACK"; break;
    default: break;
  }
  char *b = text_buf();
  size_t n = 0;
  append(b, &n, "%02X/%02X/%02X (%s%s%s)", key, asc, ascq, keys[key & 15], what ? ": " : "",
         what ? what : "");
  return b;
}

const char *ata_result_str(const struct ata_result *r) {
  char *b = text_buf();
  size_t n = 0;
  append(b, &n, "status %s", ata_status_str(r->status));
  if ((r->status & ATA_ERR) && r->packet_sent) {
    /* ATA8-APT: sense key in bits 7:4, then ABRT, EOM, ILI. */
    append(b, &n, " error 0x%02x (sense key %X%s%s%s)", r->error, r->error >> 4,
           (r->error & 4) ? " ABRT" : "", (r->error & 2) ? " EOM" : "",
           (r->error & 1) ? " ILI" : "");
  } else if (r->status & ATA_ERR) {
    append(b, &n, " error %s", ata_error_str(r->error));
  }
  if (r->dma || r->bm_status) append(b, &n, " bm %s", ata_bm_str(r->bm_status));
  if (r->sense_valid) {
    append(b, &n, " sense %s", ata_sense_str(r->sense_key, r->asc, r->ascq));
  } else if (r->check) {
    append(b, &n, " sense key %X (no REQUEST SENSE data)", r->sense_key);
  }
  if (r->stuck) append(b, &n, " %s%s", r->timeout ? "TIMEOUT " : "", r->stuck);
  if (r->recovered) append(b, &n, " [channel reset]");
  return b;
}

/* ============================================================================================
 * Controller set-up
 */

struct find_ide {
  unsigned index, seen;
  bool found, found_intel;
  struct pci_device dev;
};

static void find_ide_fn(const struct pci_device *d, void *context) {
  struct find_ide *f = context;
  if ((d->class_code >> 8) != 0x0101) return;
  if (f->seen++ != f->index) return;
  f->dev = *d;
  f->found = true;
}

const char *ata_init(struct ata_ctrl *c, unsigned index, bool verbose) {
  memset(c, 0, sizeof(*c));
  c->verbose = verbose;
  struct find_ide f = {index, 0, false, false, {0}};
  pci_scan_bus0(find_ide_fn, &f);
  if (!f.found) return "no IDE function (class 01 01) on PCI bus 0";
  c->pci = f.dev;
  struct pci_device *d = &c->pci;
  c->prog_if = (uint8_t)d->class_code;
  bool piix = d->vendor_id == 0x8086 &&
              (d->device_id == 0x7010 || d->device_id == 0x7111 || d->device_id == 0x1230);
  printf(
      "ata: IDE function %02x:%02x.%x %04x:%04x%s class %06x (prog-if 0x%02x: primary %s, "
      "secondary %s%s)\n",
      d->bus, d->dev, d->fn, d->vendor_id, d->device_id,
      d->vendor_id == 0x8086 && d->device_id == 0x7010 ? " (PIIX3)" : "", d->class_code, c->prog_if,
      (c->prog_if & 1) ? "native" : "compatibility", (c->prog_if & 4) ? "native" : "compatibility",
      (c->prog_if & 0x80) ? ", bus master" : "");

  /* BAR4: the bus-master block, 16 bytes of I/O space (SFF-8038i). */
  c->bar4 = pci_cfg_read32(d->bus, d->dev, d->fn, PCI_CFG_BAR0 + 16);
  if (!(c->bar4 & 1)) return "BAR4 is not an I/O BAR";
  c->bm_base = (uint16_t)(c->bar4 & 0xfff0);
  if (c->bm_base == 0) {
    uint64_t base = arg_u64("bm_base", 0xc000);
    printf("ata: BAR4 unassigned (0x%08x): assigning 0x%lx\n", c->bar4, base);
    pci_cfg_write32(d->bus, d->dev, d->fn, PCI_CFG_BAR0 + 16, (uint32_t)base | 1);
    c->bar4 = pci_cfg_read32(d->bus, d->dev, d->fn, PCI_CFG_BAR0 + 16);
    c->bm_base = (uint16_t)(c->bar4 & 0xfff0);
    if (c->bm_base == 0) return "BAR4 does not take an address";
  }
  uint16_t before = pci_cfg_read16(d->bus, d->dev, d->fn, PCI_CFG_COMMAND);
  pci_command_set(d, PCI_COMMAND_IO | PCI_COMMAND_MASTER, 0);
  uint16_t after = pci_cfg_read16(d->bus, d->dev, d->fn, PCI_CFG_COMMAND);
  printf("ata: BAR4 0x%08x -> bus master at 0x%04x; PCI command 0x%04x -> 0x%04x\n", c->bar4,
         c->bm_base, before, after);
  if ((after & (PCI_COMMAND_IO | PCI_COMMAND_MASTER)) != (PCI_COMMAND_IO | PCI_COMMAND_MASTER)) {
    return "PCI command register does not keep I/O space + bus master enabled";
  }
  if (piix) {
    /* PIIX IDETIM (0x40 primary, 0x42 secondary) bit 15: IDE decode enable. Firmware normally
     * sets it; nothing guarantees there was firmware. */
    for (unsigned i = 0; i < 2; i++) {
      uint16_t t = pci_cfg_read16(d->bus, d->dev, d->fn, 0x40 + 2 * i);
      if (!(t & 0x8000)) {
        pci_cfg_write16(d->bus, d->dev, d->fn, 0x40 + 2 * i, (uint16_t)(t | 0x8000));
        printf("ata: IDETIM %s 0x%04x: decode was off, enabled (now 0x%04x)\n",
               i ? "secondary" : "primary", t, pci_cfg_read16(d->bus, d->dev, d->fn, 0x40 + 2 * i));
      } else if (verbose) {
        printf("ata: IDETIM %s 0x%04x (decode enabled)\n", i ? "secondary" : "primary", t);
      }
    }
  }

  for (unsigned i = 0; i < 2; i++) {
    struct ata_chan *ch = &c->ch[i];
    ch->ctrl = c;
    ch->index = i;
    if (c->prog_if & (1u << (2 * i))) {
      uint32_t b0 = pci_cfg_read32(d->bus, d->dev, d->fn, PCI_CFG_BAR0 + 8 * i);
      uint32_t b1 = pci_cfg_read32(d->bus, d->dev, d->fn, PCI_CFG_BAR0 + 8 * i + 4);
      ch->cmd = (uint16_t)(b0 & 0xfffc);
      ch->ctl = (uint16_t)((b1 & 0xfffc) + 2);
    } else {
      ch->cmd = i ? 0x170 : 0x1f0;
      ch->ctl = i ? 0x376 : 0x3f6;
    }
    ch->bm = (uint16_t)(c->bm_base + 8 * i);
    ch->selected = -1;
    ch->devreg = -1;
    ch->prd = dma_alloc(4096);
    for (unsigned u = 0; u < 2; u++) {
      ch->dev[u].ch = ch;
      ch->dev[u].unit = u;
    }
    /* Bus master stopped, stale Interrupt/Error cleared, drive-capable bits kept. */
    bm_wr(ch, BM_CMD, 0);
    uint8_t st = bm_rd(ch, BM_STATUS);
    ch->bm_keep = st & (BM_ST_DRV0_DMA | BM_ST_DRV1_DMA);
    bm_wr(ch, BM_STATUS, (uint8_t)(ch->bm_keep | BM_ST_INTR | BM_ST_ERROR));
    ch->bm_dirty = false;
    printf("ata: channel %u: command 0x%03x control 0x%03x bus master 0x%04x (status %s)\n", i,
           ch->cmd, ch->ctl, ch->bm, ata_bm_str(st));
  }
  return NULL;
}

/* ============================================================================================
 * Reset and classification
 */

/* After SRST every device that is there shows BSY until its reset is done, then Sector Count =
 * LBA Low = 01h (ATA-8 ACS 9.12: the diagnostic signature). Waits for that on each unit in `mask`
 * (select it while the visible status is not BSY, then read): a reset that completes
 * asynchronously (QEMU runs it in a bottom half, leaving the previous selection in place until then)
 * cannot be mistaken for a finished one. Returns the units that never came back. */
static unsigned reset_wait(struct ata_chan *ch, unsigned mask, uint64_t timeout_us) {
  unsigned failed = 0;
  for (unsigned u = 0; u < 2; u++) {
    if (!(mask & (1u << u))) continue;
    uint64_t deadline = deadline_after_us(timeout_us), settle = 0;
    for (unsigned polls = 0;; polls++) {
      uint8_t st = rd_alt(ch);
      if (st == 0xff || st == 0x7f) break; /* nothing drives the bus */
      if (!(st & ATA_BSY)) {
        wr(ch, ATA_REG_DEVICE, (uint8_t)(0xa0 | u << 4));
        st = rd_alt(ch);
        if (st == 0xff || st == 0x7f) break;
        if (!(st & ATA_BSY)) {
          uint8_t n = rd(ch, ATA_REG_COUNT), l = rd(ch, ATA_REG_LBAL);
          if (n == 1 && l == 1) break;
          /* Not BSY but no signature: a device that does not set it, or the reset is still
           * pending. Give it 500 ms. */
          if (!settle) {
            settle = deadline_after_us(500000);
          } else if (deadline_passed(settle)) {
            break;
          }
        }
      }
      if (deadline_passed(deadline)) {
        failed |= 1u << u;
        break;
      }
      udelay(polls > 20 ? 5000 : 500);
    }
  }
  ch->selected = -1;
  ch->devreg = -1;
  return failed;
}

unsigned ata_soft_reset(struct ata_chan *ch, unsigned mask, uint64_t timeout_us) {
  /* ATA-8 ACS 11.2 / ATA8-APT: SRST for >= 5 us, clear it, wait >= 2 ms, then the devices. */
  wr_ctl(ch, ATA_CTL_OBS | ATA_CTL_SRST);
  udelay(10);
  wr_ctl(ch, ATA_CTL_OBS);
  udelay(2000);
  ch->idle = false;
  ch->bm_dirty = true;
  return reset_wait(ch, mask, timeout_us);
}

static void select_unit(struct ata_chan *ch, unsigned unit) {
  wr(ch, ATA_REG_DEVICE, (uint8_t)(0xa0 | unit << 4));
  ch->devreg = 0xa0 | (int)unit << 4;
  ch->selected = (int)unit;
  ch->idle = false;
}

static bool devchk(struct ata_chan *ch, unsigned unit) {
  /* Linux's ata_devchk: alternate patterns so a floating bus cannot echo the last write. */
  select_unit(ch, unit);
  wr(ch, ATA_REG_COUNT, 0x55);
  wr(ch, ATA_REG_LBAL, 0xaa);
  wr(ch, ATA_REG_COUNT, 0xaa);
  wr(ch, ATA_REG_LBAL, 0x55);
  wr(ch, ATA_REG_COUNT, 0x55);
  wr(ch, ATA_REG_LBAL, 0xaa);
  uint8_t n = rd(ch, ATA_REG_COUNT), l = rd(ch, ATA_REG_LBAL);
  return n == 0x55 && l == 0xaa;
}

unsigned ata_probe_channel(struct ata_chan *ch) {
  const uint64_t reset_timeout = arg_u64("reset_timeout_ms", 10000) * 1000;
  wr_ctl(ch, ATA_CTL_OBS);
  for (unsigned u = 0; u < 2; u++) {
    struct ata_dev *d = &ch->dev[u];
    memset(d, 0, sizeof(*d));
    d->ch = ch;
    d->unit = u;
    d->devchk = devchk(ch, u);
  }
  /* As Linux: wait only for the units whose registers latch (an empty channel reads 0x00 or
   * floats). */
  unsigned mask = (ch->dev[0].devchk ? 1u : 0) | (ch->dev[1].devchk ? 2u : 0);
  unsigned failed = ata_soft_reset(ch, mask, reset_timeout);
  unsigned found = 0;
  for (unsigned u = 0; u < 2; u++) {
    struct ata_dev *d = &ch->dev[u];
    bool bsy_timeout = (failed >> u) & 1;
    select_unit(ch, u);
    d->sig_status = rd(ch, ATA_REG_STATUS);
    d->sig_error = rd(ch, ATA_REG_ERROR);
    d->sig_count = rd(ch, ATA_REG_COUNT);
    d->sig_lbal = rd(ch, ATA_REG_LBAL);
    d->sig_lbam = rd(ch, ATA_REG_LBAM);
    d->sig_lbah = rd(ch, ATA_REG_LBAH);
    if (d->sig_status == 0xff || d->sig_status == 0x7f) {
      d->cls = ATA_CLASS_NONE;
      d->why = "status reads 0x7f/0xff (nothing drives the bus)";
    } else if (bsy_timeout) {
      d->cls = ATA_CLASS_NONE;
      d->why = "BSY did not clear after the reset";
    } else if (d->sig_lbam == 0x14 && d->sig_lbah == 0xeb) {
      d->cls = ATA_CLASS_ATAPI;
      d->why = "PACKET signature 14/EB";
    } else if (d->sig_status == 0) {
      /* ATA-8: with device 1 absent, device 0 answers for it with status 00h. (A PACKET device
       * may show 00h after a reset too, but it has the 14/EB signature, handled above.) */
      d->cls = ATA_CLASS_NONE;
      d->why = d->devchk ? "status 0x00 without the PACKET signature: device 0 answering for an "
                           "absent device 1"
                         : "status 0x00 and the registers do not latch: nothing there";
    } else if (d->sig_lbam == 0 && d->sig_lbah == 0) {
      d->cls = ATA_CLASS_ATA;
      d->why = "ATA signature 00/00";
    } else if (!d->devchk) {
      d->cls = ATA_CLASS_NONE;
      d->why = "registers do not latch";
    } else {
      d->cls = ATA_CLASS_UNKNOWN;
      d->why = (d->sig_lbam == 0x69 && d->sig_lbah == 0x96)   ? "port multiplier signature 69/96"
               : (d->sig_lbam == 0x3c && d->sig_lbah == 0xc3) ? "SEMB signature 3C/C3"
                                                              : "unrecognised signature";
    }
    if (d->cls != ATA_CLASS_NONE) found++;
  }
  ch->idle = false;
  return found;
}

/* ============================================================================================
 * Commands
 */

static void result_begin(struct ata_result *r) {
  memset(r, 0, sizeof(*r));
  r->min_block = 0xffffffffu;
}

unsigned ata_prd_build(uint32_t *prd, unsigned max, uint64_t addr, uint32_t len) {
  unsigned n = 0;
  while (len) {
    if (n == max) return 0;
    uint32_t chunk = 0x10000u - (uint32_t)(addr & 0xffff);
    if (chunk > len) chunk = len;
    prd[2 * n] = (uint32_t)addr;
    prd[2 * n + 1] = chunk & 0xffff; /* 0 = 64 KiB */
    addr += chunk;
    len -= chunk;
    n++;
  }
  if (n) prd[2 * n - 1] |= PRD_EOT;
  return n;
}

void ata_recover(struct ata_chan *ch) {
  bm_wr(ch, BM_CMD, 0);
  bm_wr(ch, BM_STATUS, (uint8_t)(ch->bm_keep | BM_ST_INTR | BM_ST_ERROR));
  unsigned mask =
      (ch->dev[0].cls != ATA_CLASS_NONE ? 1u : 0) | (ch->dev[1].cls != ATA_CLASS_NONE ? 2u : 0);
  unsigned failed = ata_soft_reset(ch, mask, 10000000);
  if (failed)
    printf("ata: channel %u: unit mask 0x%x still busy 10 s after SRST\n", ch->index, failed);
  ch->bm_dirty = true;
}

/* Ends a command: final status (and error), idle tracking. */
static void finish(struct ata_chan *ch, struct ata_result *r, uint8_t st) {
  r->status = st;
  if (st & ATA_ERR) r->error = rd(ch, ATA_REG_ERROR);
  ch->idle = !(st & (ATA_BSY | ATA_DRQ));
}

/* Waits for the end of a DMA transfer (SFF-8038i 3.2): Interrupt set = the device finished;
 * Active clear without Interrupt while the device still waits = the PRD table was shorter than
 * the transfer (or the controller gave up: Error). */
static uint8_t dma_wait(struct ata_chan *ch, uint64_t deadline, struct ata_result *r,
                        bool *have_status, uint8_t *status) {
  uint64_t inactive_since = 0;
  uint8_t bms = 0;
  *have_status = false;
  for (unsigned polls = 0;; polls++) {
    bms = bm_rd(ch, BM_STATUS);
    if (bms & BM_ST_INTR) break;
    if (!(bms & BM_ST_ACTIVE)) {
      uint8_t st = rd(ch, ATA_REG_STATUS);
      *status = st;
      *have_status = true;
      if (!(st & (ATA_BSY | ATA_DRQ))) {
        /* Idle device and no interrupt: look once more (the interrupt may be just behind). */
        bms = bm_rd(ch, BM_STATUS);
        break;
      }
      if (!inactive_since) {
        inactive_since = rdtsc();
      } else if (tsc_to_us(rdtsc() - inactive_since) > 100000) {
        r->dma_short = true;
        r->stuck = "bus master inactive without interrupt while the device still waits";
        break;
      }
    }
    if (deadline_passed(deadline)) {
      r->timeout = true;
      r->stuck = "waiting for the DMA to end";
      break;
    }
    if (polls > 64) udelay(polls > 500 ? 1000 : 200);
  }
  return bms;
}

bool ata_exec(struct ata_dev *d, const struct ata_cmd *c, struct ata_result *r) {
  struct ata_chan *ch = d->ch;
  result_begin(r);
  uint64_t t0 = rdtsc();
  uint64_t deadline = deadline_after_us(c->timeout_us ? c->timeout_us : ATA_DEFAULT_TIMEOUT_US);
  bool packet = c->packet != NULL;
  bool dma = c->proto == ATA_DMA_IN || c->proto == ATA_DMA_OUT;
  r->dma = dma;
  bool to_host = c->proto == ATA_PIO_IN || c->proto == ATA_DMA_IN;
  uint8_t devreg;
  if (packet) {
    devreg = (uint8_t)(0xa0 | d->unit << 4);
  } else {
    devreg = (uint8_t)(0xa0 | d->unit << 4 | (c->lba_mode ? 0x40 : 0));
    if (c->lba_mode && !c->ext) devreg |= (uint8_t)((c->lba >> 24) & 0x0f);
  }
  uint8_t st;
  bool devreg_written = false;

  /* 1. Device selection (ATA-8 ACS: BSY = 0 and DRQ = 0 before writing the task file). */
  if (ch->selected != (int)d->unit || !ch->idle) {
    if (ch->selected != (int)d->unit) {
      wr(ch, ATA_REG_DEVICE, devreg);
      ch->selected = (int)d->unit;
      ch->devreg = devreg;
      devreg_written = true;
    }
    st = wait_status(ch, ATA_BSY | ATA_DRQ, 0, deadline, &r->timeout);
    if (r->timeout) {
      r->stuck = "device not idle before the command";
      goto fail;
    }
  }

  /* 2. Bus master: PRD table, direction (the bus master is stopped here). */
  uint8_t bm_dir = 0;
  if (dma) {
    uint32_t prd = c->prd_addr;
    if (!prd) {
      if (!ata_prd_build(ch->prd, 512, dma_addr(c->buf), c->len)) test_fail("PRD table overflow");
      prd = (uint32_t)dma_addr(ch->prd);
    }
    if (prd != ch->prd_loaded) {
      bm_wr32(ch, BM_PRD, prd);
      ch->prd_loaded = prd;
    }
    if (ch->bm_dirty) {
      bm_wr(ch, BM_STATUS, (uint8_t)(ch->bm_keep | BM_ST_INTR | BM_ST_ERROR));
      ch->bm_dirty = false;
    }
    bm_dir = (to_host != c->wrong_direction) ? BM_CMD_WRITE_MEM : 0;
    bm_wr(ch, BM_CMD, bm_dir);
  }

  /* 3. Task file and command. */
  if (packet) {
    uint8_t features = 0;
    if (dma) features = (uint8_t)(0x01 | (d->dmadir && to_host ? 0x04 : 0));
    uint16_t bcl = c->bcl ? c->bcl : 0xfffe;
    wr(ch, ATA_REG_FEATURES, features);
    wr(ch, ATA_REG_LBAM, (uint8_t)bcl);
    wr(ch, ATA_REG_LBAH, (uint8_t)(bcl >> 8));
    if (!devreg_written && ch->devreg != devreg) wr(ch, ATA_REG_DEVICE, devreg);
    ch->devreg = devreg;
    wr(ch, ATA_REG_COMMAND, ATA_CMD_PACKET);
  } else {
    if (c->ext) {
      wr(ch, ATA_REG_FEATURES, 0);
      wr(ch, ATA_REG_COUNT, (uint8_t)(c->count >> 8));
      wr(ch, ATA_REG_LBAL, (uint8_t)(c->lba >> 24));
      wr(ch, ATA_REG_LBAM, (uint8_t)(c->lba >> 32));
      wr(ch, ATA_REG_LBAH, (uint8_t)(c->lba >> 40));
    }
    wr(ch, ATA_REG_FEATURES, c->features);
    wr(ch, ATA_REG_COUNT, (uint8_t)c->count);
    wr(ch, ATA_REG_LBAL, (uint8_t)c->lba);
    wr(ch, ATA_REG_LBAM, (uint8_t)(c->lba >> 8));
    wr(ch, ATA_REG_LBAH, (uint8_t)(c->lba >> 16));
    if (!devreg_written && ch->devreg != devreg) wr(ch, ATA_REG_DEVICE, devreg);
    ch->devreg = devreg;
    wr(ch, ATA_REG_COMMAND, c->command);
  }
  ch->idle = false;

  /* 4. PACKET: the CDB goes out at the first DRQ (CoD = 1, IO = 0). */
  if (packet) {
    st = wait_status(ch, ATA_BSY, 0, deadline, &r->timeout);
    if (r->timeout) {
      r->stuck = "BSY after PACKET";
      goto fail;
    }
    if (!(st & ATA_DRQ)) {
      /* Aborted before the packet (e.g. not a PACKET device, or absent). */
      ch->bm_dirty = true;
      finish(ch, r, st);
      goto done;
    }
    if (ch->ctrl->verbose) {
      /* ATA8-APT: the CDB phase has CoD = 1, IO = 0 (checked only when verbose: one more access). */
      r->ireason = rd(ch, ATA_REG_COUNT);
      if ((r->ireason & (ATAPI_IR_COD | ATAPI_IR_IO)) != ATAPI_IR_COD) {
        printf("ata: %u:%u: CDB phase with interrupt reason 0x%02x (expected CoD=1 IO=0)\n",
               ch->index, d->unit, r->ireason);
      }
    }
    unsigned words = (d->packet_len == 16 ? 16u : 12u) / 2;
    uint8_t cdb[16] = {0};
    memcpy(cdb, c->packet, words * 2);
    data_out(ch, cdb, words);
    r->packet_sent = true;
  }

  /* 5. Data phase. */
  if (dma) {
    if (c->no_bm_start) {
      /* The device waits for a transfer that never starts: watch it until the deadline. */
      st = wait_status(ch, ATA_BSY | ATA_DRQ, 0, deadline, &r->timeout);
      r->bm_status = bm_rd(ch, BM_STATUS);
      if (r->timeout) {
        r->stuck = "bus master never started";
        goto fail;
      }
      finish(ch, r, st);
      goto done;
    }
    bm_wr(ch, BM_CMD, (uint8_t)(bm_dir | BM_CMD_START));
    bool have_status;
    uint8_t bms = dma_wait(ch, deadline, r, &have_status, &st);
    bm_wr(ch, BM_CMD, bm_dir); /* stop */
    r->bm_status = bms;
    if (r->timeout || r->dma_short) {
      bm_wr(ch, BM_STATUS, (uint8_t)(ch->bm_keep | BM_ST_INTR | BM_ST_ERROR));
      goto fail_with_status;
    }
    if (!have_status || (st & ATA_BSY)) st = rd(ch, ATA_REG_STATUS);
    if (st & ATA_BSY) st = wait_status(ch, ATA_BSY, 0, deadline, &r->timeout);
    bm_wr(ch, BM_STATUS, (uint8_t)(ch->bm_keep | BM_ST_INTR | BM_ST_ERROR));
    if (r->timeout) {
      r->stuck = "BSY after the DMA";
      goto fail;
    }
    finish(ch, r, st);
    if (!(st & (ATA_ERR | ATA_DF)) && (bms & BM_ST_INTR) && !(bms & BM_ST_ERROR)) r->bytes = c->len;
  } else {
    ch->bm_dirty = true; /* INTRQ may latch the BM Interrupt bit on any command */
    uint8_t *p = c->buf;
    uint32_t left = c->len;
    bool first = true;
    for (;;) {
      st = wait_status(ch, ATA_BSY, 0, deadline, &r->timeout);
      if (r->timeout) {
        r->stuck = r->drq_blocks ? "BSY between data blocks" : "BSY after the command";
        goto fail;
      }
      if (!(st & ATA_DRQ)) break;
      if (!packet && (st & (ATA_ERR | ATA_DF))) break;
      if (c->stop_after_blocks && r->drq_blocks == c->stop_after_blocks) {
        r->stuck = "command abandoned with DRQ set";
        goto fail;
      }
      uint32_t n;
      bool write_phase;
      if (packet) {
        n = (uint32_t)rd(ch, ATA_REG_LBAM) | (uint32_t)rd(ch, ATA_REG_LBAH) << 8;
        if (first) {
          uint8_t ir = rd(ch, ATA_REG_COUNT);
          if ((ir & (ATAPI_IR_COD | ATAPI_IR_IO)) != (to_host ? ATAPI_IR_IO : 0)) {
            printf("ata: %u:%u: data phase with interrupt reason 0x%02x (expected IO=%u CoD=0)\n",
                   ch->index, d->unit, ir, to_host);
          }
          first = false;
        }
        if (n == 0) {
          r->stuck = "DRQ with byte count 0";
          goto fail_with_status;
        }
        write_phase = c->proto == ATA_PIO_OUT;
      } else {
        n = c->block ? c->block : 512;
        write_phase = c->proto == ATA_PIO_OUT;
      }
      if (n < r->min_block) r->min_block = n;
      if (n > r->max_block) r->max_block = n;
      r->drq_blocks++;
      uint32_t take = n < left ? n : left;
      uint32_t words = (n + 1) / 2, take_words = (take + 1) / 2;
      if (write_phase) {
        if (take_words) data_out(ch, p, take_words);
        for (uint32_t i = take_words; i < words; i++) data_out(ch, "\0\0", 1);
        if (words > take_words) r->overflow = true;
      } else {
        if (take_words) data_in(ch, p, take_words);
        if (words > take_words) {
          data_in_discard(ch, words - take_words);
          r->overflow = true;
        }
      }
      p += take;
      left -= take;
      r->bytes += take;
      if (c->proto == ATA_NODATA) r->overflow = true;
    }
    finish(ch, r, st);
  }

done:
  if (c->read_back) {
    r->tf[0] = rd(ch, ATA_REG_COUNT);
    r->tf[1] = rd(ch, ATA_REG_LBAL);
    r->tf[2] = rd(ch, ATA_REG_LBAM);
    r->tf[3] = rd(ch, ATA_REG_LBAH);
  }
  r->elapsed_us = tsc_to_us(rdtsc() - t0);
  if (r->packet_sent && (r->status & ATA_ERR)) {
    r->check = true;
    r->sense_key = r->error >> 4;
    if (!c->no_auto_sense && d->cls == ATA_CLASS_ATAPI) {
      struct ata_result rs;
      atapi_request_sense(d, &rs);
      r->sense_valid = rs.sense_valid;
      r->asc = rs.asc;
      r->ascq = rs.ascq;
      r->sense_status = rs.status;
      if (rs.sense_valid) r->sense_key = rs.sense_key;
    }
  }
  if (r->status & (ATA_ERR | ATA_DF | ATA_BSY | ATA_DRQ)) return false;
  if (packet && !r->packet_sent) return false;
  if (dma && (!(r->bm_status & BM_ST_INTR) || (r->bm_status & BM_ST_ERROR))) return false;
  if (!dma && c->proto != ATA_NODATA && r->bytes < c->len && !packet) return false;
  return true;

fail_with_status:
  st = rd(ch, ATA_REG_STATUS);
  r->status = st;
  if (st & ATA_ERR) r->error = rd(ch, ATA_REG_ERROR);
  goto fail_status_known;
fail:
  r->status = st;
fail_status_known:
  r->elapsed_us = tsc_to_us(rdtsc() - t0);
  ch->idle = false;
  if (!c->no_recover) {
    ata_recover(ch);
    r->recovered = true;
  }
  return false;
}

/* ============================================================================================
 * IDENTIFY and SET FEATURES
 */

static void id_string(const uint16_t *id, unsigned first, unsigned words, char *out) {
  for (unsigned i = 0; i < words; i++) {
    out[2 * i] = (char)(id[first + i] >> 8);
    out[2 * i + 1] = (char)id[first + i];
  }
  unsigned n = 2 * words;
  out[n] = 0;
  while (n && (out[n - 1] == ' ' || out[n - 1] == 0)) out[--n] = 0;
  for (unsigned i = 0; i < n; i++) {
    if (out[i] < 0x20 || out[i] > 0x7e) out[i] = '?';
  }
}

static void parse_identify(struct ata_dev *d) {
  const uint16_t *id = d->id;
  id_string(id, 27, 20, d->model);
  id_string(id, 10, 10, d->serial);
  id_string(id, 23, 4, d->firmware);
  d->lba = (id[49] >> 9) & 1;
  d->dma = (id[49] >> 8) & 1;
  d->mwdma_modes = id[63] & 7;
  d->mwdma_selected = (id[63] >> 8) & 7;
  if (id[53] & 4) {
    d->udma_modes = id[88] & 0x7f;
    d->udma_selected = (id[88] >> 8) & 0x7f;
  }
  d->major = 0;
  if (id[80] != 0 && id[80] != 0xffff) {
    for (unsigned b = 14; b >= 1; b--) {
      if (id[80] & (1u << b)) {
        d->major = b;
        break;
      }
    }
  }
  bool w83_valid = (id[83] >> 14) == 1, w84_valid = (id[84] >> 14) == 1,
       w87_valid = (id[87] >> 14) == 1;
  d->wcache_supported = (id[82] >> 5) & 1;
  d->wcache = (id[85] >> 5) & 1;
  d->flush = w83_valid && ((id[83] >> 12) & 1);
  d->flush_ext = w83_valid && ((id[83] >> 13) & 1);
  d->lba48 = w83_valid && ((id[83] >> 10) & 1);
  d->fua = (w84_valid && ((id[84] >> 6) & 1)) || (w87_valid && ((id[87] >> 6) & 1));
  uint64_t s28 = (uint64_t)id[60] | (uint64_t)id[61] << 16;
  uint64_t s48 = (uint64_t)id[100] | (uint64_t)id[101] << 16 | (uint64_t)id[102] << 32 |
                 (uint64_t)id[103] << 48;
  d->sectors = (d->lba48 && s48) ? s48 : s28;
  d->logical_size = 512;
  if ((id[106] >> 14) == 1 && (id[106] & (1u << 12))) {
    d->logical_size = 2 * ((uint32_t)id[117] | (uint32_t)id[118] << 16);
  }
  d->packet_len = (id[0] & 3) == 1 ? 16 : 12;
  d->atapi_type = (id[0] >> 8) & 0x1f;
  d->dmadir = (id[62] >> 15) & 1;
}

bool ata_identify(struct ata_dev *d, struct ata_result *r) {
  struct ata_cmd c = {0};
  c.command = d->cls == ATA_CLASS_ATAPI ? ATA_CMD_IDENTIFY_PACKET : ATA_CMD_IDENTIFY;
  c.proto = ATA_PIO_IN;
  c.buf = d->id;
  c.len = 512;
  c.timeout_us = 5000000;
  memset(d->id, 0, sizeof(d->id));
  bool ok = ata_exec(d, &c, r);
  d->identified = ok && r->bytes == 512;
  if (d->identified) parse_identify(d);
  return d->identified;
}

bool ata_set_xfer_mode(struct ata_dev *d, uint8_t mode, struct ata_result *r) {
  struct ata_cmd c = {0};
  c.command = ATA_CMD_SET_FEATURES;
  c.features = ATA_SF_XFER_MODE;
  c.count = mode;
  c.proto = ATA_NODATA;
  return ata_exec(d, &c, r);
}

/* ============================================================================================
 * Block commands (ATA) and MMC helpers (ATAPI)
 */

bool ata_rw_dma(struct ata_dev *d, bool write, bool fua, bool force48, uint64_t lba, uint32_t count,
                void *buf, struct ata_result *r) {
  struct ata_cmd c = {0};
  bool ext = force48 || fua || count > 256 || lba + count > 0x0fffffffull;
  if (write) {
    c.command = fua ? ATA_CMD_WRITE_DMA_FUA_EXT : ext ? ATA_CMD_WRITE_DMA_EXT : ATA_CMD_WRITE_DMA;
  } else {
    c.command = ext ? ATA_CMD_READ_DMA_EXT : ATA_CMD_READ_DMA;
  }
  c.ext = ext;
  c.lba_mode = true;
  c.lba = lba;
  c.count = (uint16_t)count; /* 256 (28-bit) / 65536 (48-bit) encode as 0 */
  c.proto = write ? ATA_DMA_OUT : ATA_DMA_IN;
  c.buf = buf;
  c.len = count * 512;
  return ata_exec(d, &c, r);
}

bool ata_rw_pio(struct ata_dev *d, bool write, bool force48, uint64_t lba, uint32_t count,
                void *buf, struct ata_result *r) {
  struct ata_cmd c = {0};
  bool ext = force48 || count > 256 || lba + count > 0x0fffffffull;
  if (write) {
    c.command = ext ? ATA_CMD_WRITE_SECTORS_EXT : ATA_CMD_WRITE_SECTORS;
  } else {
    c.command = ext ? ATA_CMD_READ_SECTORS_EXT : ATA_CMD_READ_SECTORS;
  }
  c.ext = ext;
  c.lba_mode = true;
  c.lba = lba;
  c.count = (uint16_t)count;
  c.proto = write ? ATA_PIO_OUT : ATA_PIO_IN;
  c.buf = buf;
  c.len = count * 512;
  c.block = 512;
  return ata_exec(d, &c, r);
}

bool ata_flush(struct ata_dev *d, bool ext, struct ata_result *r) {
  struct ata_cmd c = {0};
  c.command = ext ? ATA_CMD_FLUSH_CACHE_EXT : ATA_CMD_FLUSH_CACHE;
  c.proto = ATA_NODATA;
  c.timeout_us = 30000000;
  return ata_exec(d, &c, r);
}

bool atapi_cmd(struct ata_dev *d, const uint8_t *cdb, enum ata_proto proto, void *buf, uint32_t len,
               uint16_t bcl, struct ata_result *r) {
  struct ata_cmd c = {0};
  c.packet = cdb;
  c.proto = proto;
  c.buf = buf;
  c.len = len;
  c.bcl = bcl;
  return ata_exec(d, &c, r);
}

static uint8_t sense_buf[32] __attribute__((aligned(16)));

bool atapi_request_sense(struct ata_dev *d, struct ata_result *r) {
  uint8_t cdb[16] = {ATAPI_REQUEST_SENSE, 0, 0, 0, 18, 0};
  struct ata_cmd c = {0};
  c.packet = cdb;
  c.proto = ATA_PIO_IN;
  c.buf = sense_buf;
  c.len = 18;
  c.bcl = 18;
  c.no_auto_sense = true;
  memset(sense_buf, 0, sizeof(sense_buf));
  bool ok = ata_exec(d, &c, r);
  uint8_t code = sense_buf[0] & 0x7f;
  if (ok && r->bytes >= 14 && (code == 0x70 || code == 0x71)) {
    r->sense_valid = true;
    r->sense_key = sense_buf[2] & 0x0f;
    r->asc = sense_buf[12];
    r->ascq = sense_buf[13];
  }
  return ok;
}

bool atapi_read(struct ata_dev *d, bool dma, uint32_t lba, uint32_t count, void *buf, uint16_t bcl,
                struct ata_result *r) {
  uint8_t cdb[16] = {
      ATAPI_READ_10, 0, (uint8_t)(lba >> 24),  (uint8_t)(lba >> 16), (uint8_t)(lba >> 8),
      (uint8_t)lba,  0, (uint8_t)(count >> 8), (uint8_t)count,       0};
  return atapi_cmd(d, cdb, dma ? ATA_DMA_IN : ATA_PIO_IN, buf, count * 2048, bcl, r);
}

bool atapi_read_capacity(struct ata_dev *d, struct ata_result *r) {
  uint8_t cdb[16] = {ATAPI_READ_CAPACITY};
  uint8_t data[8] = {0};
  if (!atapi_cmd(d, cdb, ATA_PIO_IN, data, 8, 8, r) || r->bytes < 8) return false;
  uint32_t last =
      (uint32_t)data[0] << 24 | (uint32_t)data[1] << 16 | (uint32_t)data[2] << 8 | data[3];
  d->cd_blocks = last + 1;
  d->cd_block_size =
      (uint32_t)data[4] << 24 | (uint32_t)data[5] << 16 | (uint32_t)data[6] << 8 | data[7];
  return true;
}
