/*
 * IDE tests (docs/test-guest.md, "IDE"): the ATA/ATAPI driver of ata.c against a PIIX3 IDE
 * function with an ATA disk and an ATAPI CD-ROM: probing as Linux's ata_piix does it, CD reads by
 * DMA and PIO, disk writes with WRITE DMA FUA EXT and LBA48, error answers, a medium change driven
 * by the host through @@ markers, and a 32 KiB sequential-read benchmark.
 *
 * Common arguments: device=N (N-th IDE function), disk=C:U, cd=C:U (channel:unit; default: the
 * first ATA / ATAPI device found), xfer=MODE (SET FEATURES transfer mode, default 0x22 = MWDMA2,
 * the PIIX3's best; 0 = leave it), verbose=1.
 */
#include "tests/guest/ata.h"
#include "tests/guest/guest.h"
#include "tests/guest/pattern.h"

static struct ata_ctrl ctrl;
static struct ata_dev *disk, *cd;
static bool verbose;

static inline uint16_t get_be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t get_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static __attribute__((noreturn, format(printf, 1, 2))) void usage(const char *fmt, ...) {
  char msg[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  printf("TEST %s: FAIL %s\n", test_name(), msg);
  guest_exit(GUEST_EXIT_USAGE);
}

static uint32_t arg_seed(const char *key, bool *given) {
  const char *v = arg_get(key);
  uint64_t seed = 0;
  if (given) *given = v != NULL;
  if (v && (!parse_u64(v, &seed) || seed > 0xffffffffull))
    usage("%s=%s is not a 32-bit number", key, v);
  return (uint32_t)seed;
}

/* "C:U" -> channel, unit. */
static bool parse_pos(const char *s, unsigned *chan, unsigned *unit) {
  if (!s || (s[0] != '0' && s[0] != '1') || s[1] != ':' || (s[2] != '0' && s[2] != '1') ||
      (s[3] != 0 && s[3] != ',' && s[3] != ' ')) {
    return false;
  }
  *chan = (unsigned)(s[0] - '0');
  *unit = (unsigned)(s[2] - '0');
  return true;
}

static struct ata_dev *dev_at(unsigned chan, unsigned unit) { return &ctrl.ch[chan].dev[unit]; }

static struct ata_dev *arg_dev(const char *key) {
  const char *v = arg_get(key);
  if (!v) return NULL;
  unsigned c, u;
  if (!parse_pos(v, &c, &u)) usage("%s=%s: expected CHANNEL:UNIT (0:0 .. 1:1)", key, v);
  return dev_at(c, u);
}

/* Seed of a pattern image's block 0 header. */
static uint32_t header_seed(const uint8_t *b) {
  return (uint32_t)b[8] | (uint32_t)b[9] << 8 | (uint32_t)b[10] << 16 | (uint32_t)b[11] << 24;
}

static uint64_t kib_per_s(uint64_t bytes, uint64_t us) {
  return us ? bytes * 1000000ull / us / 1024 : 0;
}

#define RES(r) ata_result_str(r)

static void print_device_line(const char *tag, const struct ata_dev *d) {
  printf(
      "%s: %u:%u %s (%s): signature %02x/%02x/%02x/%02x status 0x%02x error 0x%02x, registers %s\n",
      tag, d->ch->index, d->unit, ata_class_str(d->cls), d->why, d->sig_count, d->sig_lbal,
      d->sig_lbam, d->sig_lbah, d->sig_status, d->sig_error, d->devchk ? "latch" : "do not latch");
}

/* Finds the controller, probes both channels, identifies what is there and sets the transfer
 * mode, as Linux's ata_piix does (SRST, signature, IDENTIFY, SET FEATURES 03h, IDENTIFY again). */
static void setup(bool print_probe) {
  (void)tsc_hz();
  verbose = arg_u64("verbose", 0) != 0;
  const char *err = ata_init(&ctrl, (unsigned)arg_u64("device", 0), verbose);
  if (err) test_fail("%s", err);
  uint64_t t0 = rdtsc();
  uint64_t r0 = ata_port_reads, w0 = ata_port_writes;
  for (unsigned c = 0; c < 2; c++) ata_probe_channel(&ctrl.ch[c]);
  uint64_t xfer = arg_u64("xfer", 0x22);
  for (unsigned c = 0; c < 2; c++) {
    for (unsigned u = 0; u < 2; u++) {
      struct ata_dev *d = dev_at(c, u);
      if (print_probe || verbose) print_device_line("ata", d);
      if (d->cls != ATA_CLASS_ATA && d->cls != ATA_CLASS_ATAPI) continue;
      struct ata_result r;
      if (!ata_identify(d, &r)) {
        printf("ata: %u:%u IDENTIFY%s DEVICE failed: %s\n", c, u,
               d->cls == ATA_CLASS_ATAPI ? " PACKET" : "", RES(&r));
        continue;
      }
      if (xfer && d->dma) {
        if (!ata_set_xfer_mode(d, (uint8_t)xfer, &r)) {
          printf("ata: %u:%u SET FEATURES transfer mode 0x%02lx: %s\n", c, u, xfer, RES(&r));
        } else {
          struct ata_result r2;
          ata_identify(d, &r2); /* revalidate: the selected mode shows in words 63/88 */
        }
      }
    }
  }
  if (print_probe || verbose) {
    printf("ata: probe took %lu ms, %lu port reads, %lu port writes\n",
           tsc_to_us(rdtsc() - t0) / 1000, ata_port_reads - r0, ata_port_writes - w0);
  }
  disk = arg_dev("disk");
  cd = arg_dev("cd");
  for (unsigned i = 0; i < 4; i++) {
    struct ata_dev *d = dev_at(i / 2, i % 2);
    if (!d->identified) continue;
    if (!disk && d->cls == ATA_CLASS_ATA) disk = d;
    if (!cd && d->cls == ATA_CLASS_ATAPI) cd = d;
  }
}

static void need_disk(void) {
  if (!disk || disk->cls != ATA_CLASS_ATA || !disk->identified)
    test_fail("no identified ATA disk (give disk=C:U)");
}
static void need_cd(void) {
  if (!cd || cd->cls != ATA_CLASS_ATAPI || !cd->identified)
    test_fail("no identified ATAPI device (give cd=C:U)");
}

static const char *mode_list(uint8_t modes, char *buf, size_t size) {
  size_t n = 0;
  buf[0] = 0;
  for (unsigned m = 0; m < 8; m++) {
    if (modes & (1u << m)) n += (size_t)snprintf(buf + n, size - n, "%s%u", n ? "," : "", m);
  }
  if (!n) snprintf(buf, size, "none");
  return buf;
}

static const char *selected_mode(uint8_t bits, char *buf, size_t size) {
  for (unsigned m = 0; m < 8; m++) {
    if (bits & (1u << m)) {
      snprintf(buf, size, "%u", m);
      return buf;
    }
  }
  snprintf(buf, size, "none");
  return buf;
}

static void print_identity(const char *tag, const struct ata_dev *d) {
  char a[40], b[40], c[40], e[40];
  const uint16_t *id = d->id;
  printf("%s: %u:%u model \"%s\" serial \"%s\" firmware \"%s\"\n", tag, d->ch->index, d->unit,
         d->model, d->serial, d->firmware);
  if (d->cls == ATA_CLASS_ATA) {
    uint64_t s28 = (uint64_t)id[60] | (uint64_t)id[61] << 16;
    printf(
        "%s: %u:%u capacity %lu sectors x %u bytes (%lu MiB), LBA %s, LBA48 %s (LBA28 capacity "
        "%lu), ATA major %u\n",
        tag, d->ch->index, d->unit, d->sectors, d->logical_size, d->sectors * d->logical_size >> 20,
        d->lba ? "yes" : "no", d->lba48 ? "yes" : "no", s28, d->major);
    printf(
        "%s: %u:%u UDMA modes %s (selected %s), MWDMA modes %s (selected %s), FUA %s (w84 0x%04x "
        "w87 0x%04x), "
        "write cache %s/%s (w82 0x%04x w85 0x%04x), FLUSH CACHE %s, FLUSH CACHE EXT %s\n",
        tag, d->ch->index, d->unit, mode_list(d->udma_modes, a, sizeof(a)),
        selected_mode(d->udma_selected, b, sizeof(b)), mode_list(d->mwdma_modes, c, sizeof(c)),
        selected_mode(d->mwdma_selected, e, sizeof(e)), d->fua ? "yes" : "no", id[84], id[87],
        d->wcache_supported ? "supported" : "not supported", d->wcache ? "enabled" : "disabled",
        id[82], id[85], d->flush ? "yes" : "no", d->flush_ext ? "yes" : "no");
  } else {
    printf(
        "%s: %u:%u ATAPI device type 0x%02x%s, %u-byte packets, DMA %s, DMADIR %s, UDMA modes %s "
        "(selected %s), "
        "MWDMA modes %s (selected %s), word 0 0x%04x, 49 0x%04x, 53 0x%04x, 62 0x%04x, 63 0x%04x, "
        "88 0x%04x\n",
        tag, d->ch->index, d->unit, d->atapi_type, d->atapi_type == 5 ? " (CD/DVD)" : "",
        d->packet_len, d->dma ? "yes" : "no", d->dmadir ? "required" : "no",
        mode_list(d->udma_modes, a, sizeof(a)), selected_mode(d->udma_selected, b, sizeof(b)),
        mode_list(d->mwdma_modes, c, sizeof(c)), selected_mode(d->mwdma_selected, e, sizeof(e)),
        id[0], id[49], id[53], id[62], id[63], id[88]);
  }
  if ((id[255] & 0xff) == 0xa5) {
    uint8_t sum = 0;
    const uint8_t *p = (const uint8_t *)id;
    for (unsigned i = 0; i < 512; i++) sum = (uint8_t)(sum + p[i]);
    printf("%s: %u:%u IDENTIFY integrity word 0x%04x: checksum %s\n", tag, d->ch->index, d->unit,
           id[255], sum == 0 ? "ok" : "BAD");
  }
}

/* ============================================================================================
 * ATAPI helpers
 */

static uint8_t *scratch; /* 64 KiB DMA-able scratch */

static void ensure_scratch(void) {
  if (!scratch) scratch = dma_alloc_aligned(65536, 65536);
}

/* TEST UNIT READY until GOOD: a unit attention is consumed by the REQUEST SENSE that follows
 * every CHECK CONDITION (as libata does); NOT READY 02/04 is waited out. */
static bool cd_wait_ready(const char *tag, struct ata_dev *d, uint64_t timeout_us) {
  uint8_t tur[12] = {ATAPI_TEST_UNIT_READY};
  uint64_t deadline = deadline_after_us(timeout_us);
  for (;;) {
    struct ata_result r;
    if (atapi_cmd(d, tur, ATA_NODATA, NULL, 0, 0, &r)) {
      printf("%s: TEST UNIT READY -> GOOD\n", tag);
      return true;
    }
    printf("%s: TEST UNIT READY -> %s\n", tag, RES(&r));
    if (r.sense_valid && r.sense_key == 2 && r.asc == 0x3a) return false;
    if (deadline_passed(deadline)) return false;
    if (!(r.sense_valid && r.sense_key == 6)) udelay(50000);
  }
}

static const char *profile_name(unsigned p) {
  switch (p) {
    case 0x0000: return "none";
    case 0x0008: return "CD-ROM";
    case 0x0009: return "CD-R";
    case 0x000a: return "CD-RW";
    case 0x0010: return "DVD-ROM";
    default: return "other";
  }
}

static void lba_to_msf(uint32_t lba, unsigned *m, unsigned *s, unsigned *f) {
  uint32_t x = lba + 150;
  *m = x / (75 * 60);
  *s = (x / 75) % 60;
  *f = x % 75;
}

/* The CD part of the probe: what Linux's sr/libata ask (docs/linux-commands.md 3.2), in its
 * order, trimmed to what the tests use. Returns false when something essential failed. */
static bool cd_probe(const char *tag, struct ata_dev *d) {
  ensure_scratch();
  bool ok = true;
  struct ata_result r;
  if (!cd_wait_ready(tag, d, 10000000)) {
    printf("%s: the CD does not become ready\n", tag);
    return false;
  }
  /* INQUIRY (PIO, alloc 36). */
  uint8_t inq[12] = {ATAPI_INQUIRY, 0, 0, 0, 36, 0};
  memset(scratch, 0, 96);
  if (atapi_cmd(d, inq, ATA_PIO_IN, scratch, 36, 0, &r) && r.bytes >= 36) {
    printf(
        "%s: INQUIRY: type 0x%02x, %s, version 0x%02x, response format %u, \"%.8s\" \"%.16s\" "
        "\"%.4s\" (%u bytes)\n",
        tag, scratch[0] & 0x1f, (scratch[1] & 0x80) ? "removable" : "not removable", scratch[2],
        scratch[3] & 0xf, (const char *)scratch + 8, (const char *)scratch + 16,
        (const char *)scratch + 32, r.bytes);
    if ((scratch[0] & 0x1f) != 5)
      printf("%s: INQUIRY peripheral type is not 5 (CD/DVD)\n", tag), ok = false;
  } else {
    printf("%s: INQUIRY -> %s (%u bytes)\n", tag, RES(&r), r.bytes);
    ok = false;
  }
  /* MODE SENSE(10) page 0x2A, alloc 128, by DMA as Linux does (the device sends less: the PRD
   * table is longer than the transfer, SFF-8038i's Interrupt=1 Active=1 case). */
  uint8_t ms[12] = {ATAPI_MODE_SENSE_10, 0, 0x2a, 0, 0, 0, 0, 0, 128, 0};
  memset(scratch, 0, 128);
  if (atapi_cmd(d, ms, ATA_DMA_IN, scratch, 128, 128, &r)) {
    unsigned len = get_be16(scratch) + 2u, bdl = get_be16(scratch + 6);
    const uint8_t *pg = scratch + 8 + bdl;
    printf("%s: MODE SENSE(10) page 0x2A (DMA): %u bytes, page 0x%02x length %u, %s%s%s, bm %s\n",
           tag, len, pg[0] & 0x3f, pg[1], (pg[6] & 0x08) ? "eject" : "no eject",
           (pg[6] & 0x01) ? ", lock" : "", (pg[6] & 0x02) ? " (locked)" : "",
           ata_bm_str(r.bm_status));
  } else {
    printf("%s: MODE SENSE(10) page 0x2A (DMA) -> %s\n", tag, RES(&r));
  }
  /* GET CONFIGURATION RT=0 start 0 alloc 32 (DMA; Linux at every open): current profile. */
  uint8_t gc[12] = {ATAPI_GET_CONFIGURATION, 0, 0, 0, 0, 0, 0, 0, 32, 0};
  memset(scratch, 0, 32);
  if (atapi_cmd(d, gc, ATA_DMA_IN, scratch, 32, 32, &r)) {
    unsigned prof = get_be16(scratch + 6);
    printf("%s: GET CONFIGURATION (DMA): current profile 0x%04x (%s)\n", tag, prof,
           profile_name(prof));
  } else {
    printf("%s: GET CONFIGURATION (DMA) -> %s\n", tag, RES(&r));
  }
  /* READ CAPACITY. */
  if (atapi_read_capacity(d, &r)) {
    printf("%s: READ CAPACITY: %u blocks x %u bytes\n", tag, d->cd_blocks, d->cd_block_size);
    if (d->cd_block_size != 2048) printf("%s: block size is not 2048\n", tag), ok = false;
  } else {
    printf("%s: READ CAPACITY -> %s\n", tag, RES(&r));
    ok = false;
  }
  /* READ TOC format 0, LBA form, from track 1 (track 1 + lead-out), then the lead-out in MSF. */
  uint8_t toc[12] = {ATAPI_READ_TOC, 0, 0, 0, 0, 0, 1, 0, 20, 0};
  memset(scratch, 0, 32);
  if (atapi_cmd(d, toc, ATA_PIO_IN, scratch, 20, 20, &r) && r.bytes >= 20) {
    unsigned first = scratch[2], last = scratch[3];
    uint32_t t1 = get_be32(scratch + 8), leadout = get_be32(scratch + 16);
    printf(
        "%s: READ TOC: length %u, tracks %u-%u, track %u (ADR/control 0x%02x) at LBA %u, lead-out "
        "(track 0x%02x) at LBA %u\n",
        tag, get_be16(scratch), first, last, scratch[6], scratch[5], t1, scratch[14], leadout);
    if (d->cd_blocks && leadout != d->cd_blocks) {
      printf("%s: lead-out %u != capacity %u\n", tag, leadout, d->cd_blocks);
      ok = false;
    }
  } else {
    printf("%s: READ TOC -> %s (%u bytes)\n", tag, RES(&r), r.bytes);
    ok = false;
  }
  uint8_t tocm[12] = {ATAPI_READ_TOC, 0x02, 0, 0, 0, 0, 0xaa, 0, 12, 0};
  memset(scratch, 0, 32);
  if (atapi_cmd(d, tocm, ATA_PIO_IN, scratch, 12, 12, &r) && r.bytes >= 12) {
    unsigned m, s, f;
    lba_to_msf(d->cd_blocks, &m, &s, &f);
    printf("%s: READ TOC MSF lead-out: %02u:%02u:%02u (expected %02u:%02u:%02u)\n", tag, scratch[9],
           scratch[10], scratch[11], m, s, f);
  } else {
    printf("%s: READ TOC MSF track 0xAA -> %s\n", tag, RES(&r));
  }
  /* GET EVENT STATUS NOTIFICATION, polled, media class (Linux's poll). */
  uint8_t gesn[12] = {ATAPI_GESN, 1, 0, 0, 0x10, 0, 0, 0, 8, 0};
  memset(scratch, 0, 8);
  if (atapi_cmd(d, gesn, ATA_PIO_IN, scratch, 8, 8, &r)) {
    printf("%s: GESN: %02x %02x %02x %02x %02x %02x %02x %02x\n", tag, scratch[0], scratch[1],
           scratch[2], scratch[3], scratch[4], scratch[5], scratch[6], scratch[7]);
  } else {
    printf("%s: GESN -> %s\n", tag, RES(&r));
  }
  return ok;
}

/* ============================================================================================
 * ide-probe
 */

static bool dev_in_list(const char *list, unsigned c, unsigned u) {
  if (!list) return false;
  for (const char *p = list; *p;) {
    unsigned pc, pu;
    if (parse_pos(p, &pc, &pu) && pc == c && pu == u) return true;
    while (*p && *p != ',') p++;
    if (*p == ',') p++;
  }
  return false;
}

GUEST_TEST_NAMED(ide_probe, "ide-probe",
                 "IDE: find the controller, reset, classify, identify both channels; CD probe") {
  setup(true);
  unsigned found = 0;
  for (unsigned c = 0; c < 2; c++) {
    for (unsigned u = 0; u < 2; u++) {
      struct ata_dev *d = dev_at(c, u);
      if (d->cls == ATA_CLASS_NONE) continue;
      found++;
      if (d->identified) print_identity("ide-probe", d);
    }
  }
  bool ok = true;
  const char *none = arg_get("none");
  struct ata_dev *want_disk = arg_dev("disk"), *want_cd = arg_dev("cd");
  if (want_disk && !(want_disk->cls == ATA_CLASS_ATA && want_disk->identified)) {
    printf("ide-probe: expected an ATA disk at %s, found %s\n", arg_get("disk"),
           ata_class_str(want_disk->cls));
    ok = false;
  }
  if (want_cd && !(want_cd->cls == ATA_CLASS_ATAPI && want_cd->identified)) {
    printf("ide-probe: expected an ATAPI device at %s, found %s\n", arg_get("cd"),
           ata_class_str(want_cd->cls));
    ok = false;
  }
  for (unsigned i = 0; i < 4; i++) {
    struct ata_dev *d = dev_at(i / 2, i % 2);
    if (dev_in_list(none, i / 2, i % 2) && d->cls != ATA_CLASS_NONE) {
      printf("ide-probe: expected nothing at %u:%u, found %s\n", i / 2, i % 2,
             ata_class_str(d->cls));
      ok = false;
    }
  }
  if (cd) {
    if (!cd_probe("ide-probe: cd", cd)) ok = false;
  }
  if (arg_get("devices") && arg_u64("devices", 0) != found) {
    printf("ide-probe: found %u devices, expected %lu\n", found, arg_u64("devices", 0));
    ok = false;
  }
  printf(
      "ide-probe: %u device(s): disk %s, cd %s; %lu port reads, %lu port writes, %lu string "
      "transfers\n",
      found,
      disk ? (disk == dev_at(0, 0)   ? "0:0"
              : disk == dev_at(0, 1) ? "0:1"
              : disk == dev_at(1, 0) ? "1:0"
                                     : "1:1")
           : "none",
      cd ? (cd == dev_at(0, 0)   ? "0:0"
            : cd == dev_at(0, 1) ? "0:1"
            : cd == dev_at(1, 0) ? "1:0"
                                 : "1:1")
         : "none",
      ata_port_reads, ata_port_writes, ata_string_ops);
  if (!found) test_fail("no device found");
  if (!ok) test_fail("probe did not find what was expected");
}

/* ============================================================================================
 * CD reads
 */

struct cd_pass {
  uint64_t sectors, commands, drq_blocks, us;
  uint32_t min_block, max_block;
  uint64_t port_io;
};

/* Reads [start, start + count) in chunks of bs sectors, optionally pattern-checked. */
static bool cd_read_range(struct ata_dev *d, bool dma, uint16_t bcl, uint32_t start, uint32_t count,
                          uint32_t bs, uint8_t *buf, const struct pattern_key *key,
                          struct cd_pass *p, char *why, size_t why_size) {
  memset(p, 0, sizeof(*p));
  p->min_block = 0xffffffffu;
  uint64_t io0 = ata_port_reads + ata_port_writes + ata_string_ops;
  uint64_t t0 = rdtsc();
  for (uint32_t lba = start; lba < start + count;) {
    uint32_t n = start + count - lba;
    if (n > bs) n = bs;
    struct ata_result r;
    if (!atapi_read(d, dma, lba, n, buf, bcl, &r) || r.bytes != n * 2048u) {
      snprintf(why, why_size, "READ(10) %s LBA %u x%u: %s, %u bytes", dma ? "DMA" : "PIO", lba, n,
               RES(&r), r.bytes);
      return false;
    }
    p->commands++;
    p->drq_blocks += r.drq_blocks;
    if (r.drq_blocks) {
      if (r.min_block < p->min_block) p->min_block = r.min_block;
      if (r.max_block > p->max_block) p->max_block = r.max_block;
    }
    if (key && !pattern_check(key, buf, (uint64_t)lba * 4, (uint64_t)n * 4, why, why_size))
      return false;
    lba += n;
    p->sectors += n;
  }
  p->us = tsc_to_us(rdtsc() - t0);
  p->port_io = ata_port_reads + ata_port_writes + ata_string_ops - io0;
  return true;
}

/* Parses "a,b,c" numbers; returns how many. */
static unsigned parse_list(const char *s, uint64_t *out, unsigned max) {
  unsigned n = 0;
  char tmp[24];
  while (s && *s && n < max) {
    unsigned k = 0;
    while (*s && *s != ',' && *s != ' ' && k < sizeof(tmp) - 1) tmp[k++] = *s++;
    tmp[k] = 0;
    if (!parse_u64(tmp, &out[n])) usage("bad number '%s' in a list", tmp);
    n++;
    if (*s == ',') s++;
    else break;
  }
  return n;
}

static uint32_t cd_seed_from_block0(struct ata_dev *d, uint8_t *buf) {
  struct ata_result r;
  if (!atapi_read(d, true, 0, 1, buf, 0, &r)) test_fail("READ(10) DMA LBA 0: %s", RES(&r));
  return header_seed(buf);
}

static void cd_ready_or_fail(const char *tag, struct ata_dev *d) {
  if (!cd_wait_ready(tag, d, 10000000)) test_fail("the CD does not become ready");
  struct ata_result r;
  if (!atapi_read_capacity(d, &r)) test_fail("READ CAPACITY: %s", RES(&r));
  if (d->cd_block_size != 2048) test_fail("block size %u, expected 2048", d->cd_block_size);
}

GUEST_TEST_NAMED(ide_cd, "ide-cd",
                 "IDE: read the CD by DMA (32 KiB commands) and PIO (several byte count limits), "
                 "pattern-checked") {
  setup(false);
  need_cd();
  cd_ready_or_fail("ide-cd", cd);
  uint32_t bs = (uint32_t)arg_u64("bs", 16);
  if (bs == 0 || bs > 128) usage("bs=%s: 1..128 sectors", arg_get("bs"));
  uint8_t *buf = dma_alloc_aligned((size_t)bs * 2048, 65536);
  bool have_seed;
  uint32_t seed = arg_seed("seed", &have_seed);
  if (!have_seed) {
    seed = cd_seed_from_block0(cd, buf);
    printf("ide-cd: seed %u (from block 0)\n", seed);
  }
  struct pattern_key key;
  pattern_key_init(&key, seed);
  uint32_t start = (uint32_t)arg_u64("start", 0);
  if (start >= cd->cd_blocks) usage("start=%s beyond the capacity", arg_get("start"));
  uint32_t count = (uint32_t)arg_u64("count", cd->cd_blocks - start);
  if (count > cd->cd_blocks - start) count = cd->cd_blocks - start;
  const char *mode = arg_get("mode");
  if (!mode) mode = "both";
  bool do_dma = !strcmp(mode, "dma") || !strcmp(mode, "both");
  bool do_pio = !strcmp(mode, "pio") || !strcmp(mode, "both");
  if (!do_dma && !do_pio) usage("mode=%s: dma, pio or both", mode);
  char why[200];
  struct cd_pass p;
  printf(
      "ide-cd: %u blocks of %u bytes; reading %u sectors from LBA %u, %u sectors (%u KiB) per "
      "command\n",
      cd->cd_blocks, cd->cd_block_size, count, start, bs, bs * 2);
  if (do_dma) {
    if (!cd_read_range(cd, true, 0, start, count, bs, buf, &key, &p, why, sizeof(why)))
      test_fail("DMA: %s", why);
    printf(
        "ide-cd: DMA: read and verified %lu sectors (%lu KiB) from LBA %u in %lu ms (%lu KiB/s), "
        "%lu commands, "
        "%lu port accesses per command, seed %u\n",
        p.sectors, p.sectors * 2, start, p.us / 1000, kib_per_s(p.sectors * 2048, p.us), p.commands,
        p.commands ? p.port_io / p.commands : 0, seed);
  }
  if (do_pio) {
    uint64_t bcls[8];
    unsigned nb = parse_list(arg_get("pio_bcl") ? arg_get("pio_bcl") : "0xfffe,4096", bcls, 8);
    uint32_t pio_count = (uint32_t)arg_u64("pio_count", count);
    if (pio_count > count) pio_count = count;
    for (unsigned i = 0; i < nb; i++) {
      if (bcls[i] == 0 || bcls[i] > 0xffff)
        usage("pio_bcl=%s: values 1..0xffff", arg_get("pio_bcl"));
      if (!cd_read_range(cd, false, (uint16_t)bcls[i], start, pio_count, bs, buf, &key, &p, why,
                         sizeof(why))) {
        test_fail("PIO bcl=0x%lx: %s", bcls[i], why);
      }
      printf(
          "ide-cd: PIO bcl=0x%lx: read and verified %lu sectors (%lu KiB) from LBA %u in %lu ms "
          "(%lu KiB/s), "
          "%lu commands, %lu DRQ blocks of %u-%u bytes, %lu port accesses per command, seed %u\n",
          bcls[i], p.sectors, p.sectors * 2, start, p.us / 1000, kib_per_s(p.sectors * 2048, p.us),
          p.commands, p.drq_blocks, p.min_block, p.max_block,
          p.commands ? p.port_io / p.commands : 0, seed);
    }
  }
}

GUEST_TEST_NAMED(ide_bench, "ide-bench",
                 "IDE: sequential 32 KiB reads of the whole CD (dd bs=32K style), KiB/s") {
  setup(false);
  need_cd();
  cd_ready_or_fail("ide-bench", cd);
  uint32_t bs = (uint32_t)arg_u64("bs", 16);
  if (bs == 0 || bs > 128) usage("bs=%s: 1..128 sectors", arg_get("bs"));
  const char *mode = arg_get("mode");
  bool dma = !mode || !strcmp(mode, "dma");
  if (!dma && strcmp(mode, "pio")) usage("mode=%s: dma or pio", mode);
  uint16_t bcl = (uint16_t)arg_u64("bcl", 0xfffe);
  unsigned passes = (unsigned)arg_u64("passes", 1);
  bool verify = arg_u64("verify", 0) != 0;
  uint8_t *buf = dma_alloc_aligned((size_t)bs * 2048, 65536);
  struct pattern_key key;
  if (verify) {
    bool have;
    uint32_t seed = arg_seed("seed", &have);
    if (!have) seed = cd_seed_from_block0(cd, buf);
    pattern_key_init(&key, seed);
  }
  for (unsigned i = 0; i < passes; i++) {
    struct cd_pass p;
    char why[200];
    if (!cd_read_range(cd, dma, bcl, 0, cd->cd_blocks, bs, buf, verify ? &key : NULL, &p, why,
                       sizeof(why))) {
      test_fail("%s", why);
    }
    printf(
        "ide-bench: %s bs=%u reads=%lu sectors=%lu bytes=%lu elapsed_ms=%lu kib_per_s=%lu "
        "us_per_read=%lu "
        "port_io_per_read=%lu%s\n",
        dma ? "dma" : "pio", bs * 2048, p.commands, p.sectors, p.sectors * 2048, p.us / 1000,
        kib_per_s(p.sectors * 2048, p.us), p.commands ? p.us / p.commands : 0,
        p.commands ? p.port_io / p.commands : 0, verify ? " verified" : "");
  }
}

/* ============================================================================================
 * ide-disk
 */

struct range {
  uint64_t lba, count;
};
static struct range written[32];
static unsigned nwritten;

static bool overlaps_written(uint64_t lba, uint64_t count) {
  for (unsigned i = 0; i < nwritten; i++) {
    if (lba < written[i].lba + written[i].count && written[i].lba < lba + count) return true;
  }
  return false;
}

static struct pattern_key image_key, write_key;
static bool have_image_seed;
static uint64_t pattern_blocks;

/* The sectors right before and after a written range still hold the image. */
static void check_neighbours(uint64_t lba, uint64_t count, uint8_t *buf) {
  if (!have_image_seed) return;
  uint64_t around[2] = {lba - 1, lba + count};
  for (unsigned i = 0; i < 2; i++) {
    uint64_t s = around[i];
    if ((i == 0 && lba == 0) || s >= pattern_blocks || s >= disk->sectors || overlaps_written(s, 1))
      continue;
    struct ata_result r;
    if (!ata_rw_dma(disk, false, false, false, s, 1, buf, &r))
      test_fail("READ DMA LBA %lu: %s", s, RES(&r));
    char why[200];
    if (!pattern_check(&image_key, buf, s, 1, why, sizeof(why)))
      test_fail("neighbour of LBA %lu x%lu: %s", lba, count, why);
  }
}

static const char *cmd_name(bool write, bool fua, bool ext, bool dma) {
  if (dma) {
    if (write) return fua ? "WRITE DMA FUA EXT" : ext ? "WRITE DMA EXT" : "WRITE DMA";
    return ext ? "READ DMA EXT" : "READ DMA";
  }
  if (write) return ext ? "WRITE SECTORS EXT" : "WRITE SECTORS";
  return ext ? "READ SECTORS EXT" : "READ SECTORS";
}

static bool needs_ext(uint64_t lba, uint64_t count) {
  return count > 256 || lba + count > 0x0fffffffull;
}

/* Writes the write pattern at [lba, lba + count) and reads it back (optionally through the other
 * transfer mode), verifying it. */
static void disk_case(uint64_t lba, uint32_t count, bool dma_write, bool use_fua, bool force48,
                      bool dma_read, uint8_t *buf, unsigned offset) {
  bool force48_read = force48;
  uint8_t *b = buf + offset;
  struct ata_result r;
  pattern_fill(&write_key, b, lba, count);
  unsigned prd_entries = 0;
  if (dma_write) {
    uint32_t tmp[1024];
    prd_entries = ata_prd_build(tmp, 512, dma_addr(b), count * 512);
  }
  bool wext = use_fua || force48 || needs_ext(lba, count);
  bool ok = dma_write ? ata_rw_dma(disk, true, use_fua, force48, lba, count, b, &r)
                      : ata_rw_pio(disk, true, force48, lba, count, b, &r);
  if (!ok)
    test_fail("%s LBA %lu x%u: %s", cmd_name(true, use_fua, wext, dma_write), lba, count, RES(&r));
  bool flushed = false;
  if (dma_write && !use_fua) {
    struct ata_result rf;
    if (!ata_flush(disk, disk->flush_ext, &rf))
      test_fail("FLUSH CACHE%s: %s", disk->flush_ext ? " EXT" : "", RES(&rf));
    flushed = true;
  }
  written[nwritten].lba = lba;
  written[nwritten].count = count;
  if (nwritten < 31) nwritten++;
  memset(b, 0xa5, (size_t)count * 512);
  bool rext = force48_read || needs_ext(lba, count);
  ok = dma_read ? ata_rw_dma(disk, false, false, force48_read, lba, count, b, &r)
                : ata_rw_pio(disk, false, force48_read, lba, count, b, &r);
  if (!ok)
    test_fail("%s LBA %lu x%u: %s", cmd_name(false, false, rext, dma_read), lba, count, RES(&r));
  char why[200];
  if (!pattern_check(&write_key, b, lba, count, why, sizeof(why))) {
    test_fail("%s LBA %lu x%u read back: %s", cmd_name(false, false, rext, dma_read), lba, count,
              why);
  }
  char prd[32] = "";
  if (dma_write)
    snprintf(prd, sizeof(prd), " (%u PRD entr%s)", prd_entries, prd_entries == 1 ? "y" : "ies");
  printf("ide-disk: %s LBA %lu x%u%s%s, %s: verified\n", cmd_name(true, use_fua, wext, dma_write),
         lba, count, prd, flushed ? disk->flush_ext ? " + FLUSH CACHE EXT" : " + FLUSH CACHE" : "",
         cmd_name(false, false, rext, dma_read));
  check_neighbours(lba, count, buf);
}

GUEST_TEST_NAMED(ide_disk, "ide-disk",
                 "IDE: WRITE DMA FUA EXT / LBA48 / PIO writes to the disk, read back and verified; "
                 "FLUSH CACHE EXT") {
  setup(false);
  need_disk();
  if (disk->logical_size != 512)
    test_fail("logical sector size %u (only 512 handled)", disk->logical_size);
  if (!disk->lba || !disk->dma) test_fail("the disk lacks LBA or DMA");
  uint32_t seed = arg_seed("seed", &have_image_seed);
  bool have_wseed;
  uint32_t wseed = arg_seed("wseed", &have_wseed);
  if (!have_wseed) wseed = 0x1de5eed;
  pattern_key_init(&write_key, wseed);
  if (have_image_seed) pattern_key_init(&image_key, seed);
  pattern_blocks = arg_u64("pattern_blocks", disk->sectors);
  uint64_t cap = disk->sectors;
  printf(
      "ide-disk: %u:%u \"%s\": %lu sectors, LBA48 %s, FUA %s, write cache %s, FLUSH CACHE EXT %s\n",
      disk->ch->index, disk->unit, disk->model, cap, disk->lba48 ? "yes" : "no",
      disk->fua ? "yes" : "no", disk->wcache ? "enabled" : "disabled",
      disk->flush_ext ? "yes" : "no");
  const char *want_fua = arg_get("fua");
  if (want_fua && (arg_u64("fua", 0) != 0) != disk->fua) {
    test_fail("IDENTIFY says FUA %s, expected %s", disk->fua ? "supported" : "not supported",
              want_fua);
  }
  if (arg_u64("need48", 0) && cap <= (1ull << 28) + 4096)
    test_fail("need48=1 but the disk has only %lu sectors", cap);
  uint8_t *buf = dma_alloc_aligned(768 * 1024, 65536);
  struct ata_result r;
  char why[200];

  if (have_image_seed) {
    if (!ata_rw_dma(disk, false, false, false, 0, 8, buf, &r))
      test_fail("READ DMA LBA 0 x8: %s", RES(&r));
    if (!pattern_check(&image_key, buf, 0, 8, why, sizeof(why))) test_fail("image: %s", why);
    printf("ide-disk: image pattern (seed %u) present at LBA 0\n", seed);
  }
  if (!disk->fua) {
    /* Not advertised: the spec answer to the opcode is ABRT. */
    pattern_fill(&write_key, buf, 5000, 8);
    bool ok = ata_rw_dma(disk, true, true, true, 5000, 8, buf, &r);
    printf("ide-disk: WRITE DMA FUA EXT (not advertised) LBA 5000 x8 -> %s%s\n", RES(&r),
           ok ? " (accepted although not advertised)" : "");
    if (!ok && !((r.status & ATA_ERR) && (r.error & ATA_ER_ABRT)))
      test_fail("WRITE DMA FUA EXT without FUA support: expected ABRT");
    if (ok) {
      written[nwritten].lba = 5000;
      written[nwritten++].count = 8;
    }
  }
  bool fua = disk->fua;
  /* DMA cases: small, 32 KiB, 128 KiB across 64 KiB boundaries (several PRD entries), 512 KiB,
   * the last sectors, and (big disks) around LBA 2^28 and 2^32. */
  disk_case(1, 8, true, fua, false, true, buf, 0);            /* read back with READ DMA (28-bit) */
  disk_case(20, 8, true, false, false, true, buf, 0);         /* WRITE DMA (28-bit) + flush */
  disk_case(100, 64, true, fua, true, true, buf, 0);          /* READ DMA EXT */
  disk_case(1000, 256, true, fua, true, true, buf, 0xf000);   /* 3 PRD entries */
  disk_case(2048, 1024, true, fua, false, true, buf, 0x1000); /* 512 KiB, 9 PRD entries */
  disk_case(cap - 8, 8, true, fua, true, true, buf, 0);
  if (cap > (1ull << 28) + 4096) {
    disk_case((1ull << 28) - 4, 8, true, fua, true, true, buf, 0);
    disk_case((1ull << 28) + 100, 64, true, fua, true, true, buf, 0);
  } else {
    printf(
        "ide-disk: disk too small for LBAs above 2^28 (%lu sectors); 48-bit commands used below "
        "it\n",
        cap);
  }
  if (cap > (1ull << 32) + 4096) disk_case((1ull << 32) - 4, 8, true, fua, true, true, buf, 0);
  /* PIO: 28-bit and 48-bit, read back by PIO and by DMA; a DMA-written range read by PIO. */
  disk_case(3000, 8, false, false, false, false, buf, 0);
  disk_case(3100, 16, false, false, false, true, buf, 0);
  uint64_t hi = cap > (1ull << 28) + 4096 ? (1ull << 28) + 2000 : 4000;
  disk_case(hi, 16, false, false, true, false, buf, 0);
  /* READ/WRITE MULTIPLE (EXT): SET MULTIPLE MODE, then DRQ blocks of several sectors. */
  unsigned max_multiple = disk->id[47] & 0xff;
  if (max_multiple >= 2) {
    unsigned m = max_multiple < 16 ? max_multiple : 16;
    struct ata_cmd c = {0};
    c.command = 0xc6; /* SET MULTIPLE MODE */
    c.count = (uint16_t)m;
    c.proto = ATA_NODATA;
    if (!ata_exec(disk, &c, &r)) test_fail("SET MULTIPLE MODE %u: %s", m, RES(&r));
    const uint64_t mlba = 3200;
    const uint32_t mcount = 2 * m + m / 2; /* the last block is partial */
    for (unsigned pass = 0; pass < 2; pass++) {
      bool write = pass == 0;
      if (write) pattern_fill(&write_key, buf, mlba, mcount);
      else memset(buf, 0xa5, mcount * 512);
      c = (struct ata_cmd){0};
      c.command = write ? 0xc5 : 0x29; /* WRITE MULTIPLE, READ MULTIPLE EXT */
      c.ext = !write;
      c.lba_mode = true;
      c.lba = mlba;
      c.count = (uint16_t)mcount;
      c.proto = write ? ATA_PIO_OUT : ATA_PIO_IN;
      c.buf = buf;
      c.len = mcount * 512;
      c.block = m * 512;
      if (!ata_exec(disk, &c, &r))
        test_fail("%s LBA %lu x%u: %s", write ? "WRITE MULTIPLE" : "READ MULTIPLE EXT", mlba,
                  mcount, RES(&r));
      if (r.drq_blocks != (mcount + m - 1) / m) {
        test_fail("%s: %u DRQ blocks for %u sectors with %u per block",
                  write ? "WRITE MULTIPLE" : "READ MULTIPLE EXT", r.drq_blocks, mcount, m);
      }
    }
    if (!pattern_check(&write_key, buf, mlba, mcount, why, sizeof(why)))
      test_fail("READ MULTIPLE EXT: %s", why);
    written[nwritten].lba = mlba;
    written[nwritten++].count = mcount;
    printf(
        "ide-disk: SET MULTIPLE MODE %u (max %u), WRITE MULTIPLE LBA %lu x%u, READ MULTIPLE EXT: "
        "verified, %u DRQ blocks\n",
        m, max_multiple, mlba, mcount, r.drq_blocks);
    check_neighbours(mlba, mcount, buf);
  } else {
    printf("ide-disk: no READ/WRITE MULTIPLE (IDENTIFY word 47 0x%04x)\n", disk->id[47]);
  }
  if (!ata_rw_pio(disk, false, false, 100, 64, buf, &r))
    test_fail("READ SECTORS LBA 100 x64: %s", RES(&r));
  if (!pattern_check(&write_key, buf, 100, 64, why, sizeof(why)))
    test_fail("READ SECTORS of the DMA-written LBA 100: %s", why);
  printf("ide-disk: READ SECTORS LBA 100 x64 (written by DMA): verified, %u DRQ blocks\n",
         r.drq_blocks);
  /* Flushes. */
  if (disk->flush_ext) {
    bool ok = ata_flush(disk, true, &r);
    printf("ide-disk: FLUSH CACHE EXT -> %s\n", RES(&r));
    if (!ok) test_fail("FLUSH CACHE EXT failed");
  }
  bool ok = ata_flush(disk, false, &r);
  printf("ide-disk: FLUSH CACHE -> %s\n", RES(&r));
  if (!ok && disk->flush) test_fail("FLUSH CACHE failed");
  /* Optionally the whole image (nothing else changed). */
  if (have_image_seed && arg_u64("full", 0)) {
    uint64_t n = pattern_blocks < cap ? pattern_blocks : cap, checked = 0;
    uint64_t t0 = rdtsc();
    for (uint64_t lba = 0; lba < n;) {
      uint32_t c = n - lba > 256 ? 256 : (uint32_t)(n - lba);
      if (!ata_rw_dma(disk, false, false, false, lba, c, buf, &r))
        test_fail("READ DMA LBA %lu x%u: %s", lba, c, RES(&r));
      for (uint32_t i = 0; i < c; i++) {
        const struct pattern_key *k = overlaps_written(lba + i, 1) ? &write_key : &image_key;
        if (!pattern_check(k, buf + i * 512, lba + i, 1, why, sizeof(why)))
          test_fail("full check: %s", why);
      }
      lba += c;
      checked += c;
    }
    uint64_t us = tsc_to_us(rdtsc() - t0);
    printf("ide-disk: full check: %lu sectors verified in %lu ms (%lu KiB/s)\n", checked, us / 1000,
           kib_per_s(checked * 512, us));
  }
}

/* ============================================================================================
 * ide-errors
 */

static unsigned failures;

static void report(const char *what, const struct ata_result *r) {
  printf("ide-errors: %s -> %s\n", what, RES(r));
}

static void judge(const char *what, bool accepted, const char *why) {
  if (accepted) return;
  printf("ide-errors: %s: UNEXPECTED: %s\n", what, why);
  failures++;
}

static uint32_t cd_seed;
static bool have_cd_seed;

/* The controller still works: IDENTIFY and a verified read on each device. */
static void alive(const char *after) {
  struct ata_result r;
  char why[200];
  ensure_scratch();
  if (disk) {
    uint16_t saved[256];
    memcpy(saved, disk->id, sizeof(saved));
    if (!ata_identify(disk, &r) || memcmp(saved, disk->id, sizeof(saved)) != 0) {
      printf("ide-errors: after %s: disk IDENTIFY DEVICE -> %s%s\n", after, RES(&r),
             memcmp(saved, disk->id, sizeof(saved)) ? " (data differs)" : "");
      failures++;
    }
    if (!ata_rw_dma(disk, false, false, true, 0, 8, scratch, &r)) {
      printf("ide-errors: after %s: disk READ DMA EXT LBA 0 x8 -> %s\n", after, RES(&r));
      failures++;
    } else if (have_image_seed && !pattern_check(&image_key, scratch, 0, 8, why, sizeof(why))) {
      printf("ide-errors: after %s: disk READ DMA EXT LBA 0: %s\n", after, why);
      failures++;
    }
  }
  if (cd) {
    uint8_t tur[12] = {ATAPI_TEST_UNIT_READY};
    bool ok = false;
    for (unsigned i = 0; i < 4 && !ok; i++) ok = atapi_cmd(cd, tur, ATA_NODATA, NULL, 0, 0, &r);
    if (!ok) {
      printf("ide-errors: after %s: cd TEST UNIT READY -> %s\n", after, RES(&r));
      failures++;
    }
    if (!atapi_read(cd, true, 1, 1, scratch, 0, &r)) {
      printf("ide-errors: after %s: cd READ(10) DMA LBA 1 -> %s\n", after, RES(&r));
      failures++;
    } else if (have_cd_seed) {
      struct pattern_key k;
      pattern_key_init(&k, cd_seed);
      if (!pattern_check(&k, scratch, 4, 4, why, sizeof(why))) {
        printf("ide-errors: after %s: cd READ(10) LBA 1: %s\n", after, why);
        failures++;
      }
    }
  }
  if (verbose) printf("ide-errors: after %s: controller alive\n", after);
}

static bool err_abrt(const struct ata_result *r) {
  return (r->status & ATA_ERR) && (r->error & ATA_ER_ABRT);
}
static bool err_idnf_or_abrt(const struct ata_result *r) {
  return (r->status & ATA_ERR) && (r->error & (ATA_ER_IDNF | ATA_ER_ABRT));
}
static bool sense_is(const struct ata_result *r, uint8_t key, int asc) {
  return r->check && r->sense_key == key && (asc < 0 || (r->sense_valid && r->asc == asc));
}

/* A DMA read with a hand-made PRD table. */
static bool dma_read_with(struct ata_dev *d, uint64_t lba, uint32_t count, uint32_t *prd, void *buf,
                          bool wrong_dir, struct ata_result *r) {
  struct ata_cmd c = {0};
  c.command = ATA_CMD_READ_DMA_EXT;
  c.ext = true;
  c.lba_mode = true;
  c.lba = lba;
  c.count = (uint16_t)count;
  c.proto = ATA_DMA_IN;
  c.buf = buf;
  c.len = count * 512;
  c.prd_addr = prd ? (uint32_t)dma_addr(prd) : 0;
  c.wrong_direction = wrong_dir;
  c.timeout_us = 2000000;
  return ata_exec(d, &c, r);
}

static bool cd_dma_read_with(struct ata_dev *d, uint32_t lba, uint32_t count, uint32_t *prd,
                             void *buf, struct ata_result *r) {
  uint8_t cdb[12] = {
      ATAPI_READ_10, 0, (uint8_t)(lba >> 24),  (uint8_t)(lba >> 16), (uint8_t)(lba >> 8),
      (uint8_t)lba,  0, (uint8_t)(count >> 8), (uint8_t)count,       0};
  struct ata_cmd c = {0};
  c.packet = cdb;
  c.proto = ATA_DMA_IN;
  c.buf = buf;
  c.len = count * 2048;
  c.prd_addr = (uint32_t)dma_addr(prd);
  c.timeout_us = 2000000;
  return ata_exec(d, &c, r);
}

/* An address no RAM backs: past the top of RAM below 4 GiB (or bad_addr=). */
static uint32_t outside_ram(void) {
  if (arg_get("bad_addr")) return (uint32_t)arg_u64("bad_addr", 0);
  const struct ram_region *regions;
  unsigned n = ram_regions(&regions);
  uint64_t top = 0;
  for (unsigned i = 0; i < n; i++) {
    uint64_t end = regions[i].base + regions[i].size;
    if (regions[i].base < 0xc0000000ull && end > top) top = end;
  }
  /* docs/machine.md: RAM below 3 GiB, device MMIO from 0xc0000000 (allocated from its start). */
  uint64_t a = (top + 0x0fffffffull) & ~0x0fffffffull;
  if (a >= 0xc0000000ull) a = 0xe0000000ull;
  return (uint32_t)a;
}

static void errors_absent(void) {
  for (unsigned i = 0; i < 4; i++) {
    struct ata_dev *d = dev_at(i / 2, i % 2);
    if (d->cls != ATA_CLASS_NONE) continue;
    char what[80];
    struct ata_result r;
    /* IDENTIFY DEVICE: no device may deliver data. */
    struct ata_cmd c = {0};
    uint16_t id[256];
    c.command = ATA_CMD_IDENTIFY;
    c.proto = ATA_PIO_IN;
    c.buf = id;
    c.len = 512;
    c.timeout_us = 2000000;
    c.read_back = true;
    ata_exec(d, &c, &r);
    snprintf(what, sizeof(what), "IDENTIFY DEVICE to absent %u:%u", i / 2, i % 2);
    printf("ide-errors: %s -> %s, %u data bytes\n", what, RES(&r), r.bytes);
    judge(what, r.bytes == 0, "an absent device delivered data");
    /* READ SECTORS: no data either. */
    uint8_t sec[512];
    struct ata_cmd rs = {0};
    rs.command = ATA_CMD_READ_SECTORS;
    rs.lba_mode = true;
    rs.count = 1;
    rs.proto = ATA_PIO_IN;
    rs.buf = sec;
    rs.len = 512;
    rs.timeout_us = 2000000;
    ata_exec(d, &rs, &r);
    snprintf(what, sizeof(what), "READ SECTORS to absent %u:%u", i / 2, i % 2);
    printf("ide-errors: %s -> %s, %u data bytes\n", what, RES(&r), r.bytes);
    judge(what, r.bytes == 0, "an absent device delivered data");
    /* PACKET TEST UNIT READY: nobody may take the CDB. */
    uint8_t tur[12] = {ATAPI_TEST_UNIT_READY};
    struct ata_cmd p = {0};
    p.packet = tur;
    p.proto = ATA_NODATA;
    p.timeout_us = 2000000;
    p.no_auto_sense = true;
    ata_exec(d, &p, &r);
    snprintf(what, sizeof(what), "PACKET (TEST UNIT READY) to absent %u:%u", i / 2, i % 2);
    printf("ide-errors: %s -> %s, CDB %s\n", what, RES(&r), r.packet_sent ? "taken" : "not taken");
    judge(what, !r.packet_sent, "an absent device took a CDB");
    alive(what);
  }
}

static void errors_unknown_commands(void) {
  struct ata_result r;
  if (disk) {
    struct ata_cmd c = {0};
    c.command = 0x01; /* reserved in ATA-8 ACS */
    c.proto = ATA_NODATA;
    ata_exec(disk, &c, &r);
    report("disk ATA command 0x01 (reserved)", &r);
    judge("disk ATA command 0x01", err_abrt(&r), "expected ERR with ABRT");
    c.command = ATA_CMD_NOP; /* NOP subcommand 0: ACS says abort */
    bool ok = ata_exec(disk, &c, &r);
    report("disk NOP (0x00, subcommand 0)", &r);
    judge("disk NOP", err_abrt(&r) || ok, "expected ABRT (ACS) or completion");
    c.command = ATA_CMD_IDENTIFY_PACKET;
    c.proto = ATA_PIO_IN;
    c.buf = scratch;
    c.len = 512;
    ata_exec(disk, &c, &r);
    report("disk IDENTIFY PACKET DEVICE (ATA device)", &r);
    judge("disk IDENTIFY PACKET DEVICE", err_abrt(&r) && r.bytes == 0,
          "expected ABRT without data");
    uint8_t tur[12] = {ATAPI_TEST_UNIT_READY};
    struct ata_cmd p = {0};
    p.packet = tur;
    p.proto = ATA_NODATA;
    p.no_auto_sense = true;
    ata_exec(disk, &p, &r);
    printf("ide-errors: disk PACKET (ATA device) -> %s, CDB %s\n", RES(&r),
           r.packet_sent ? "taken" : "not taken");
    judge("disk PACKET", err_abrt(&r) && !r.packet_sent, "expected ABRT before the CDB");
    alive("unknown commands to the disk");
  }
  if (cd) {
    struct ata_cmd c = {0};
    c.command = ATA_CMD_IDENTIFY;
    c.proto = ATA_PIO_IN;
    c.buf = scratch;
    c.len = 512;
    c.read_back = true;
    ata_exec(cd, &c, &r);
    printf(
        "ide-errors: cd IDENTIFY DEVICE (PACKET device) -> %s, signature %02x/%02x/%02x/%02x, %u "
        "data bytes\n",
        RES(&r), r.tf[0], r.tf[1], r.tf[2], r.tf[3], r.bytes);
    judge("cd IDENTIFY DEVICE", err_abrt(&r) && r.bytes == 0 && r.tf[2] == 0x14 && r.tf[3] == 0xeb,
          "expected ABRT with the PACKET signature 14/EB (ACS 7.16)");
    struct ata_cmd u = {0};
    u.command = 0x01;
    u.proto = ATA_NODATA;
    ata_exec(cd, &u, &r);
    report("cd ATA command 0x01 (reserved)", &r);
    judge("cd ATA command 0x01", err_abrt(&r), "expected ERR with ABRT");
    uint8_t bad[12] = {0xff};
    atapi_cmd(cd, bad, ATA_NODATA, NULL, 0, 0, &r);
    report("cd PACKET opcode 0xff", &r);
    judge("cd PACKET opcode 0xff", sense_is(&r, 5, -1),
          "expected CHECK CONDITION, ILLEGAL REQUEST");
    uint8_t w10[12] = {0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0};
    memset(scratch, 0, 2048);
    struct ata_cmd w = {0};
    w.packet = w10;
    w.proto = ATA_PIO_OUT;
    w.buf = scratch;
    w.len = 2048;
    ata_exec(cd, &w, &r);
    printf("ide-errors: cd WRITE(10) LBA 0 x1 (PIO) -> %s, %u bytes taken\n", RES(&r), r.bytes);
    judge("cd WRITE(10)", r.check && (r.sense_key == 5 || r.sense_key == 7),
          "expected ILLEGAL REQUEST or DATA PROTECT");
    alive("unknown commands to the cd");
  }
}

static void errors_out_of_range(void) {
  struct ata_result r;
  if (disk) {
    uint64_t cap = disk->sectors;
    char what[96];
    snprintf(what, sizeof(what), "disk READ DMA EXT LBA %lu (= capacity) x1", cap);
    ata_rw_dma(disk, false, false, true, cap, 1, scratch, &r);
    report(what, &r);
    judge(what, err_idnf_or_abrt(&r), "expected ERR with IDNF or ABRT");
    snprintf(what, sizeof(what), "disk READ SECTORS EXT LBA %lu x2 (crossing the end)", cap - 1);
    ata_rw_pio(disk, false, true, cap - 1, 2, scratch, &r);
    printf("ide-errors: %s -> %s, %u bytes\n", what, RES(&r), r.bytes);
    judge(what, err_idnf_or_abrt(&r), "expected ERR with IDNF or ABRT");
    snprintf(what, sizeof(what), "disk READ DMA EXT LBA 0xffffffffffff x1");
    ata_rw_dma(disk, false, false, true, 0xffffffffffffull, 1, scratch, &r);
    report(what, &r);
    judge(what, err_idnf_or_abrt(&r), "expected ERR with IDNF or ABRT");
    snprintf(what, sizeof(what), "disk WRITE DMA EXT LBA %lu (= capacity) x1", cap);
    ata_rw_dma(disk, true, false, true, cap, 1, scratch, &r);
    report(what, &r);
    judge(what, err_idnf_or_abrt(&r), "expected ERR with IDNF or ABRT");
    if (cap < 0x0fffffffull) {
      snprintf(what, sizeof(what), "disk READ DMA (28-bit) LBA %lu (= capacity) x1", cap);
      ata_rw_dma(disk, false, false, false, cap, 1, scratch, &r);
      report(what, &r);
      judge(what, err_idnf_or_abrt(&r), "expected ERR with IDNF or ABRT");
    }
    alive("out-of-range disk commands");
  }
  if (cd) {
    struct ata_result rc;
    if (atapi_read_capacity(cd, &rc)) {
      char what[96];
      snprintf(what, sizeof(what), "cd READ(10) DMA LBA %u (= capacity) x1", cd->cd_blocks);
      atapi_read(cd, true, cd->cd_blocks, 1, scratch, 0, &r);
      report(what, &r);
      judge(what, sense_is(&r, 5, 0x21), "expected CHECK CONDITION 05/21");
      snprintf(what, sizeof(what), "cd READ(10) PIO LBA %u x2 (crossing the end)",
               cd->cd_blocks - 1);
      atapi_read(cd, false, cd->cd_blocks - 1, 2, scratch, 0, &r);
      printf("ide-errors: %s -> %s, %u bytes\n", what, RES(&r), r.bytes);
      judge(what, sense_is(&r, 5, 0x21), "expected CHECK CONDITION 05/21");
      alive("out-of-range cd reads");
    }
  }
}

static void errors_prd(void) {
  struct ata_result r;
  char why[200];
  uint32_t *prd = dma_alloc(4096);
  uint8_t *buf = dma_alloc_aligned(256 * 1024, 65536);
  uint32_t bad = outside_ram();
  if (disk) {
    const uint64_t lba = 64;
    /* 1. No EOT bit, but exactly the transfer's size (the rest of the page is zero). */
    memset(prd, 0, 4096);
    memset(buf, 0x5a, 4096);
    prd[0] = (uint32_t)dma_addr(buf);
    prd[1] = 4096;
    bool ok = dma_read_with(disk, lba, 8, prd, buf, false, &r);
    bool data_ok =
        ok && (!have_image_seed || pattern_check(&image_key, buf, lba, 8, why, sizeof(why)));
    printf("ide-errors: disk READ DMA EXT x8, PRD without EOT (exact size) -> %s, data %s\n",
           RES(&r),
           !ok       ? "-"
           : data_ok ? "verified"
                     : why);
    judge("PRD without EOT", ok ? data_ok : (r.recovered || !(r.status & (ATA_BSY | ATA_DRQ))),
          "completed with wrong data, or left the channel hung");
    alive("PRD without EOT");

    /* 2. An entry pointing where no RAM is. */
    memset(prd, 0, 16);
    prd[0] = bad;
    prd[1] = PRD_EOT | 4096;
    ok = dma_read_with(disk, lba, 8, prd, buf, false, &r);
    printf("ide-errors: disk READ DMA EXT x8, PRD entry at 0x%08x (no RAM) -> %s\n", bad, RES(&r));
    judge("PRD outside RAM",
          ok || (r.bm_status & BM_ST_ERROR) || (r.status & ATA_ERR) || r.recovered ||
              !(r.status & ATA_BSY),
          "no defined outcome");
    alive("PRD outside RAM");

    /* 3. Byte count shorter than the transfer: 2 KiB of PRD for 4 KiB of data. */
    prd[0] = (uint32_t)dma_addr(buf);
    prd[1] = PRD_EOT | 2048;
    memset(buf, 0x5a, 4096);
    ok = dma_read_with(disk, lba, 8, prd, buf, false, &r);
    printf(
        "ide-errors: disk READ DMA EXT x8 (4096 bytes), PRD of 2048 bytes -> %s, first bytes %02x "
        "%02x\n",
        RES(&r), buf[0], buf[1]);
    judge("PRD shorter than the transfer", !ok, "reported a complete transfer");
    alive("short PRD");

    /* 4. Byte count 0 means 64 KiB (SFF-8038i). */
    prd[0] = (uint32_t)dma_addr(buf);
    prd[1] = PRD_EOT | 0;
    memset(buf, 0x5a, 65536);
    ok = dma_read_with(disk, 0, 128, prd, buf, false, &r);
    data_ok = ok && (!have_image_seed || pattern_check(&image_key, buf, 0, 128, why, sizeof(why)));
    printf(
        "ide-errors: disk READ DMA EXT x128 (64 KiB), one PRD entry with byte count 0 -> %s, data "
        "%s\n",
        RES(&r),
        !ok       ? "-"
        : data_ok ? "verified"
                  : why);
    judge("PRD byte count 0 = 64 KiB", ok && data_ok, "expected a good 64 KiB transfer");
    alive("PRD byte count 0");

    /* 5. Odd byte count (bit 0 is reserved). */
    prd[0] = (uint32_t)dma_addr(buf);
    prd[1] = PRD_EOT | 4097;
    memset(buf, 0x5a, 8192);
    ok = dma_read_with(disk, lba, 8, prd, buf, false, &r);
    data_ok = ok && (!have_image_seed || pattern_check(&image_key, buf, lba, 8, why, sizeof(why)));
    printf(
        "ide-errors: disk READ DMA EXT x8, PRD byte count 4097 (odd) -> %s, data %s, byte 4096 "
        "0x%02x\n",
        RES(&r),
        !ok       ? "-"
        : data_ok ? "verified"
                  : why,
        buf[4096]);
    judge("odd PRD byte count", ok ? data_ok : true, "completed with wrong data");
    alive("odd PRD byte count");

    /* 6. An entry crossing a 64 KiB boundary (SFF-8038i forbids it). */
    prd[0] = (uint32_t)dma_addr(buf) + 0xf000;
    prd[1] = PRD_EOT | 8192;
    memset(buf, 0x5a, 0x12000);
    ok = dma_read_with(disk, lba, 16, prd, buf, false, &r);
    const char *where = "-";
    if (ok && have_image_seed) {
      if (pattern_check(&image_key, buf + 0xf000, lba, 16, why, sizeof(why))) {
        where = "linear (crossed the boundary)";
      } else if (pattern_check(&image_key, buf + 0xf000, lba, 8, why, sizeof(why)) &&
                 pattern_check(&image_key, buf, lba + 8, 8, why, sizeof(why))) {
        where = "wrapped within the 64 KiB block";
      } else {
        where = "neither linear nor wrapped";
      }
    }
    printf(
        "ide-errors: disk READ DMA EXT x16, PRD entry crossing a 64 KiB boundary -> %s, data %s\n",
        RES(&r), where);
    judge("PRD crossing 64 KiB",
          !ok || !have_image_seed || strcmp(where, "neither linear nor wrapped") != 0,
          "data went somewhere else");
    alive("PRD crossing 64 KiB");
  }
  if (cd) {
    /* 7. ATAPI: 2 KiB of PRD for a 4-sector READ(10). */
    memset(prd, 0, 16);
    prd[0] = (uint32_t)dma_addr(buf);
    prd[1] = PRD_EOT | 2048;
    bool ok = cd_dma_read_with(cd, 0, 4, prd, buf, &r);
    report("cd READ(10) DMA x4 (8192 bytes), PRD of 2048 bytes", &r);
    judge("cd short PRD", !ok, "reported a complete transfer");
    alive("cd short PRD");
    /* 8. ATAPI: no EOT, exact size. */
    memset(prd, 0, 4096);
    prd[0] = (uint32_t)dma_addr(buf);
    prd[1] = 4096;
    memset(buf, 0x5a, 4096);
    ok = cd_dma_read_with(cd, 0, 2, prd, buf, &r);
    bool data_ok = true;
    if (ok && have_cd_seed) {
      struct pattern_key k;
      pattern_key_init(&k, cd_seed);
      data_ok = pattern_check(&k, buf, 0, 8, why, sizeof(why));
    }
    printf("ide-errors: cd READ(10) DMA x2, PRD without EOT (exact size) -> %s, data %s\n", RES(&r),
           !ok       ? "-"
           : data_ok ? "verified"
                     : why);
    judge("cd PRD without EOT", ok ? data_ok : true, "completed with wrong data");
    alive("cd PRD without EOT");
  }
}

static void errors_direction(void) {
  if (!disk) return;
  struct ata_result r;
  char why[200];
  uint8_t *buf = dma_alloc_aligned(65536, 65536);
  /* READ DMA EXT with the bus master set to read memory. */
  memset(buf, 0x5a, 4096);
  bool ok = dma_read_with(disk, 64, 8, NULL, buf, true, &r);
  bool changed = false;
  for (unsigned i = 0; i < 4096; i++) changed |= buf[i] != 0x5a;
  bool data_ok = have_image_seed && pattern_check(&image_key, buf, 64, 8, why, sizeof(why));
  printf(
      "ide-errors: disk READ DMA EXT x8 with the bus master reading memory (wrong direction) -> "
      "%s, buffer %s\n",
      RES(&r),
      !changed  ? "untouched"
      : data_ok ? "holds the data"
                : "changed");
  alive("READ DMA in the wrong direction");

  /* WRITE DMA EXT with the bus master writing memory, to a scratch range. */
  const uint64_t lba = arg_u64("scratch_lba", 60000);
  pattern_fill(&write_key, buf, lba, 8);
  struct ata_cmd c = {0};
  c.command = ATA_CMD_WRITE_DMA_EXT;
  c.ext = true;
  c.lba_mode = true;
  c.lba = lba;
  c.count = 8;
  c.proto = ATA_DMA_OUT;
  c.buf = buf;
  c.len = 4096;
  c.wrong_direction = true;
  c.timeout_us = 2000000;
  ok = ata_exec(disk, &c, &r);
  bool buf_same = pattern_check(&write_key, buf, lba, 8, why, sizeof(why));
  struct ata_result r2;
  uint8_t *back = buf + 8192;
  const char *on_disk = "unreadable";
  if (ata_rw_dma(disk, false, false, true, lba, 8, back, &r2)) {
    on_disk = pattern_check(&write_key, back, lba, 8, why, sizeof(why)) ? "the written data"
              : (have_image_seed && pattern_check(&image_key, back, lba, 8, why, sizeof(why)))
                  ? "the old data"
                  : "other data";
  }
  printf(
      "ide-errors: disk WRITE DMA EXT x8 with the bus master writing memory (wrong direction) -> "
      "%s, buffer %s, disk holds %s\n",
      RES(&r), buf_same ? "untouched" : "overwritten", on_disk);
  written[nwritten].lba = lba;
  written[nwritten++].count = 8;
  (void)ok;
  alive("WRITE DMA in the wrong direction");

  /* READ DMA EXT whose bus master is never started: the device waits; SRST must clear it. */
  c = (struct ata_cmd){0};
  c.command = ATA_CMD_READ_DMA_EXT;
  c.ext = true;
  c.lba_mode = true;
  c.lba = 64;
  c.count = 8;
  c.proto = ATA_DMA_IN;
  c.buf = buf;
  c.len = 4096;
  c.no_bm_start = true;
  c.timeout_us = 300000;
  ok = ata_exec(disk, &c, &r);
  report("disk READ DMA EXT x8, bus master never started (300 ms)", &r);
  judge("bus master never started", !ok, "the command claims success without a transfer");
  alive("a DMA command without the bus master");

  /* Start bit set with no DMA command pending. */
  struct ata_chan *ch = disk->ch;
  outb((uint16_t)(ch->bm + BM_CMD), BM_CMD_WRITE_MEM | BM_CMD_START);
  udelay(20000);
  uint8_t bms = inb((uint16_t)(ch->bm + BM_STATUS));
  outb((uint16_t)(ch->bm + BM_CMD), 0);
  uint8_t bms2 = inb((uint16_t)(ch->bm + BM_STATUS));
  uint8_t st = inb((uint16_t)(ch->cmd + ATA_REG_STATUS));
  printf(
      "ide-errors: bus master started with no command: BM status %s, after stop %s, device status "
      "%s\n",
      ata_bm_str(bms), ata_bm_str(bms2), ata_status_str(st));
  ch->bm_dirty = true;
  alive("a bus master started without a command");

  /* PIO read abandoned after one of eight DRQ blocks, then SRST. */
  c = (struct ata_cmd){0};
  c.command = ATA_CMD_READ_SECTORS;
  c.lba_mode = true;
  c.lba = 64;
  c.count = 8;
  c.proto = ATA_PIO_IN;
  c.buf = buf;
  c.len = 4096;
  c.stop_after_blocks = 1;
  ata_exec(disk, &c, &r);
  report("disk READ SECTORS x8 abandoned after 1 DRQ block, then SRST", &r);
  alive("an abandoned PIO read");
}

GUEST_TEST_NAMED(ide_errors, "ide-errors",
                 "IDE: absent unit, unknown commands, out-of-range reads, malformed PRD tables, "
                 "wrong DMA direction") {
  setup(false);
  ensure_scratch();
  have_image_seed = false;
  uint32_t seed = arg_seed("seed", &have_image_seed);
  if (have_image_seed) pattern_key_init(&image_key, seed);
  cd_seed = arg_seed("cd_seed", &have_cd_seed);
  bool have_w;
  uint32_t wseed = arg_seed("wseed", &have_w);
  pattern_key_init(&write_key, have_w ? wseed : 0x1de5eed);
  if (cd && !cd_wait_ready("ide-errors: cd", cd, 10000000))
    test_fail("the CD does not become ready");
  alive("set-up");
  if (failures) test_fail("the controller does not work to begin with");
  errors_absent();
  errors_unknown_commands();
  errors_out_of_range();
  errors_prd();
  errors_direction();
  alive("all cases");
  printf("ide-errors: %u unexpected answer(s)\n", failures);
  if (failures) test_fail("%u unexpected answer(s)", failures);
}

/* ============================================================================================
 * ide-media
 */

/* Prints the marker for the harness that drives the VMM (our control API, QEMU's monitor), which
 * ejects or inserts the disc when it reads it. */
static void request_host_action(const char *marker) { printf("%s\n", marker); }

static const char *tur_state(const struct ata_result *r, bool good, char *buf, size_t size) {
  if (good) {
    snprintf(buf, size, "GOOD");
  } else if (r->sense_valid) {
    snprintf(buf, size, "CHECK CONDITION %s (status 0x%02x error 0x%02x)",
             ata_sense_str(r->sense_key, r->asc, r->ascq), r->status, r->error);
  } else {
    snprintf(buf, size, "%s", RES(r));
  }
  return buf;
}

enum want { WANT_NOT_READY, WANT_CHANGED, WANT_GOOD };

static void poll_tur(struct ata_dev *d, enum want want, uint64_t t_start, uint64_t timeout_us,
                     uint64_t poll_us, const char *what) {
  uint8_t tur[12] = {ATAPI_TEST_UNIT_READY};
  uint64_t deadline = deadline_after_us(timeout_us);
  char last[200] = "", now[200];
  for (;;) {
    struct ata_result r;
    bool good = atapi_cmd(d, tur, ATA_NODATA, NULL, 0, 0, &r);
    tur_state(&r, good, now, sizeof(now));
    if (strcmp(now, last) != 0) {
      printf("ide-media: +%lu ms TEST UNIT READY -> %s\n", tsc_to_us(rdtsc() - t_start) / 1000,
             now);
      memcpy(last, now, sizeof(last));
    }
    if (want == WANT_GOOD && good) return;
    if (want == WANT_NOT_READY && r.sense_valid && r.sense_key == 2 && r.asc == 0x3a) return;
    if (want == WANT_CHANGED && r.sense_valid && r.sense_key == 6 && r.asc == 0x28) return;
    if (deadline_passed(deadline)) test_fail("timeout waiting for %s (last: %s)", what, now);
    udelay(poll_us);
  }
}

static void print_gesn(struct ata_dev *d, const char *when) {
  uint8_t gesn[12] = {ATAPI_GESN, 1, 0, 0, 0x10, 0, 0, 0, 8, 0};
  uint8_t b[8] = {0};
  struct ata_result r;
  if (atapi_cmd(d, gesn, ATA_PIO_IN, b, 8, 8, &r)) {
    static const char *const events[] = {"NoChg", "EjectRequest", "NewMedia", "MediaRemoval",
                                         "MediaChanged"};
    unsigned ev = b[4] & 0xf;
    printf("ide-media: GESN %s: %02x %02x %02x %02x %02x %02x %02x %02x (event %s, %s, %s)\n", when,
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], ev < 5 ? events[ev] : "other",
           (b[5] & 2) ? "medium present" : "no medium", (b[5] & 1) ? "tray open" : "tray closed");
  } else {
    printf("ide-media: GESN %s -> %s\n", when, RES(&r));
  }
}

/* Polls GESN (media class) until it reports a medium. GESN is allowed during a unit attention
 * (MMC) and does not consume one, so the TEST UNIT READYs that follow show exactly what the device
 * reports after the change. Returns false when GESN is not supported (CHECK CONDITION). */
static bool poll_gesn_present(struct ata_dev *d, uint64_t t_start, uint64_t timeout_us,
                              uint64_t poll_us) {
  uint8_t gesn[12] = {ATAPI_GESN, 1, 0, 0, 0x10, 0, 0, 0, 8, 0};
  uint64_t deadline = deadline_after_us(timeout_us);
  uint8_t last[8] = {0xff};
  for (;;) {
    uint8_t b[8] = {0};
    struct ata_result r;
    if (!atapi_cmd(d, gesn, ATA_PIO_IN, b, 8, 8, &r)) {
      printf("ide-media: GESN -> %s; polling TEST UNIT READY only\n", RES(&r));
      return false;
    }
    if (memcmp(b, last, 8) != 0) {
      printf("ide-media: +%lu ms GESN: %02x %02x %02x %02x %02x %02x %02x %02x\n",
             tsc_to_us(rdtsc() - t_start) / 1000, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]);
      memcpy(last, b, 8);
    }
    if (b[5] & 2) return true;
    if (deadline_passed(deadline)) test_fail("timeout waiting for GESN to report a medium");
    udelay(poll_us);
  }
}

static uint32_t cd_verify(struct ata_dev *d, uint32_t count, bool have_seed, uint32_t seed,
                          uint8_t *buf) {
  if (!have_seed) seed = cd_seed_from_block0(d, buf);
  struct pattern_key key;
  pattern_key_init(&key, seed);
  struct cd_pass p;
  char why[200];
  if (!cd_read_range(d, true, 0, 0, count, 16, buf, &key, &p, why, sizeof(why)))
    test_fail("%s", why);
  printf("ide-media: read and verified %lu sectors by DMA in %lu ms, seed %u\n", p.sectors,
         p.us / 1000, seed);
  return seed;
}

GUEST_TEST_NAMED(ide_media, "ide-media",
                 "IDE: CD medium change (@@EJECT cd / @@INSERT cd markers for the host)") {
  setup(false);
  need_cd();
  uint64_t timeout_us = arg_u64("timeout_ms", 30000) * 1000,
           poll_us = arg_u64("poll_ms", 20) * 1000;
  cd_ready_or_fail("ide-media", cd);
  bool have_seed, have_new;
  uint32_t seed = arg_seed("seed", &have_seed);
  uint32_t newseed = arg_seed("newseed", &have_new);
  uint8_t *buf = dma_alloc_aligned(32768, 65536);
  uint32_t count = (uint32_t)arg_u64("count", 64);
  if (count > cd->cd_blocks) count = cd->cd_blocks;
  printf("ide-media: old medium: %u sectors\n", cd->cd_blocks);
  uint32_t old_seed = cd_verify(cd, count, have_seed, seed, buf);
  print_gesn(cd, "before eject");
  uint8_t prevent[12] = {ATAPI_PREVENT_ALLOW, 0, 0, 0, 1, 0};
  struct ata_result r;
  bool ok = atapi_cmd(cd, prevent, ATA_NODATA, NULL, 0, 0, &r);
  printf("ide-media: PREVENT MEDIUM REMOVAL -> %s\n", ok ? "GOOD" : RES(&r));
  prevent[4] = 0;
  ok = atapi_cmd(cd, prevent, ATA_NODATA, NULL, 0, 0, &r);
  printf("ide-media: ALLOW MEDIUM REMOVAL -> %s\n", ok ? "GOOD" : RES(&r));
  if (!ok) test_fail("ALLOW MEDIUM REMOVAL failed");

  uint64_t t0 = rdtsc();
  request_host_action("@@EJECT cd");
  poll_tur(cd, WANT_NOT_READY, t0, timeout_us, poll_us, "NOT READY 02/3A after the eject");
  print_gesn(cd, "while empty");
  request_host_action("@@INSERT cd");
  if (arg_u64("gesn_wait", 1)) poll_gesn_present(cd, t0, timeout_us, poll_us);
  poll_tur(cd, WANT_CHANGED, t0, timeout_us, poll_us, "UNIT ATTENTION 06/28 after the insert");
  poll_tur(cd, WANT_GOOD, t0, timeout_us, poll_us, "GOOD after the medium change");
  print_gesn(cd, "after insert");
  uint32_t old_blocks = cd->cd_blocks;
  if (!atapi_read_capacity(cd, &r)) test_fail("READ CAPACITY: %s", RES(&r));
  printf("ide-media: new medium: %u sectors (was %u)\n", cd->cd_blocks, old_blocks);
  uint32_t n = (uint32_t)arg_u64("newcount", cd->cd_blocks);
  if (n > cd->cd_blocks) n = cd->cd_blocks;
  uint32_t used = cd_verify(cd, n, have_new, newseed, buf);
  if (!have_new && used == old_seed)
    test_fail("the new medium has the old medium's seed %u", old_seed);
}

/* ============================================================================================
 * ide-strio: the string I/O forms through the data register (checks the runtime's #GP
 * emulation of INS/OUTS under PVM; native elsewhere)
 */

enum strio_form {
  F_REP_INSW,
  F_REP_INSL,
  F_INSW,
  F_INSL,
  F_REP_OUTSW,
  F_REP_OUTSL,
  F_OUTSW,
  F_OUTSL
};
static const char *const strio_names[] = {"rep insw",  "rep insl",  "insw x256",  "insl x128",
                                          "rep outsw", "rep outsl", "outsw x256", "outsl x128"};

static void strio_move(uint16_t port, void *buf, enum strio_form f) {
  size_t n;
  void *p = buf;
  switch (f) {
    case F_REP_INSW:
      n = 256;
      __asm__ volatile("rep insw" : "+D"(p), "+c"(n) : "d"(port) : "memory");
      break;
    case F_REP_INSL:
      n = 128;
      __asm__ volatile("rep insl" : "+D"(p), "+c"(n) : "d"(port) : "memory");
      break;
    case F_INSW:
      for (unsigned i = 0; i < 256; i++) __asm__ volatile("insw" : "+D"(p) : "d"(port) : "memory");
      break;
    case F_INSL:
      for (unsigned i = 0; i < 128; i++) __asm__ volatile("insl" : "+D"(p) : "d"(port) : "memory");
      break;
    case F_REP_OUTSW:
      n = 256;
      __asm__ volatile("rep outsw" : "+S"(p), "+c"(n) : "d"(port) : "memory");
      break;
    case F_REP_OUTSL:
      n = 128;
      __asm__ volatile("rep outsl" : "+S"(p), "+c"(n) : "d"(port) : "memory");
      break;
    case F_OUTSW:
      for (unsigned i = 0; i < 256; i++) __asm__ volatile("outsw" : "+S"(p) : "d"(port) : "memory");
      break;
    case F_OUTSL:
      for (unsigned i = 0; i < 128; i++) __asm__ volatile("outsl" : "+S"(p) : "d"(port) : "memory");
      break;
  }
  if ((uint8_t *)p != (uint8_t *)buf + 512)
    test_fail("%s: pointer advanced by %ld bytes, expected 512", strio_names[f],
              (long)((uint8_t *)p - (uint8_t *)buf));
}

/* One 512-byte PIO command with the data moved by `form`; LBA 28-bit, 1 sector. */
static void strio_cmd(struct ata_dev *d, uint8_t command, uint64_t lba, void *buf,
                      enum strio_form form) {
  struct ata_chan *ch = d->ch;
  uint16_t base = ch->cmd;
  outb(base + ATA_REG_DEVICE, (uint8_t)(0xe0 | d->unit << 4 | ((lba >> 24) & 0xf)));
  ch->selected = (int)d->unit;
  ch->devreg = -1;
  uint64_t deadline = deadline_after_us(5000000);
  while (inb(base + ATA_REG_STATUS) & (ATA_BSY | ATA_DRQ)) {
    if (deadline_passed(deadline)) test_fail("%s: device not idle", strio_names[form]);
  }
  outb(base + ATA_REG_FEATURES, 0);
  outb(base + ATA_REG_COUNT, 1);
  outb(base + ATA_REG_LBAL, (uint8_t)lba);
  outb(base + ATA_REG_LBAM, (uint8_t)(lba >> 8));
  outb(base + ATA_REG_LBAH, (uint8_t)(lba >> 16));
  outb(base + ATA_REG_COMMAND, command);
  uint8_t st;
  while ((st = inb(base + ATA_REG_STATUS)) & ATA_BSY) {
    if (deadline_passed(deadline)) test_fail("%s: BSY", strio_names[form]);
  }
  if (!(st & ATA_DRQ))
    test_fail("%s: command 0x%02x: no DRQ, status %s", strio_names[form], command,
              ata_status_str(st));
  strio_move(base, buf, form);
  while ((st = inb(base + ATA_REG_STATUS)) & ATA_BSY) {
    if (deadline_passed(deadline)) test_fail("%s: BSY after the data", strio_names[form]);
  }
  if (st & (ATA_ERR | ATA_DRQ))
    test_fail("%s: command 0x%02x ended with status %s", strio_names[form], command,
              ata_status_str(st));
  ch->idle = true;
  ch->bm_dirty = true;
}

GUEST_TEST_NAMED(
    ide_strio, "ide-strio",
    "IDE: every INS/OUTS form on the data register (16/32-bit, with and without REP)") {
  setup(false);
  need_disk();
  uint16_t *ref = dma_alloc(4096), *got = ref + 256, *out = ref + 512;
  memcpy(ref, disk->id, 512);
  for (enum strio_form f = F_REP_INSW; f <= F_INSL; f++) {
    memset(got, 0xee, 512);
    uint64_t t0 = rdtsc();
    strio_cmd(disk, ATA_CMD_IDENTIFY, 0, got, f);
    uint64_t us = tsc_to_us(rdtsc() - t0);
    if (memcmp(ref, got, 512) != 0)
      test_fail("IDENTIFY DEVICE read with %s differs", strio_names[f]);
    printf("ide-strio: IDENTIFY DEVICE read with %s: identical, %lu us\n", strio_names[f], us);
  }
  uint64_t lba = arg_u64("scratch_lba", 60000);
  uint8_t *o = (uint8_t *)out;
  for (enum strio_form f = F_REP_OUTSW; f <= F_OUTSL; f++) {
    for (unsigned i = 0; i < 512; i++) o[i] = (uint8_t)(i * 7 + f);
    uint64_t t0 = rdtsc();
    strio_cmd(disk, ATA_CMD_WRITE_SECTORS, lba, out, f);
    uint64_t us = tsc_to_us(rdtsc() - t0);
    memset(got, 0, 512);
    strio_cmd(disk, ATA_CMD_READ_SECTORS, lba, got, F_REP_INSW);
    if (memcmp(out, got, 512) != 0)
      test_fail("WRITE SECTORS with %s: read back differs", strio_names[f]);
    printf("ide-strio: WRITE SECTORS with %s: read back identical, %lu us\n", strio_names[f], us);
  }
  /* Byte forms on the UART scratch register (16550 SCR, base + 7), if there is one. */
  uint16_t scr = 0x3f8 + 7;
  uint8_t bytes[4] = {0x5a, 0xa5, 0x3c, 0xc3}, back[4] = {0};
  void *p = bytes;
  __asm__ volatile("outsb" : "+S"(p) : "d"(scr) : "memory");
  p = back;
  __asm__ volatile("insb" : "+D"(p) : "d"(scr) : "memory");
  size_t n = 4;
  p = bytes;
  __asm__ volatile("rep outsb" : "+S"(p), "+c"(n) : "d"(scr) : "memory");
  n = 3;
  p = back + 1;
  __asm__ volatile("rep insb" : "+D"(p), "+c"(n) : "d"(scr) : "memory");
  printf(
      "ide-strio: UART scratch register: outsb/insb 0x%02x, rep outsb x4 / rep insb x3 0x%02x "
      "0x%02x 0x%02x%s\n",
      back[0], back[1], back[2], back[3],
      back[0] == 0x5a && back[1] == 0xc3 && back[2] == 0xc3 && back[3] == 0xc3
          ? ""
          : " (no scratch register?)");
}
