/*
 * virtio-scsi tests (docs/test-guest.md, "virtio-scsi"): probing as Linux does it, pattern-checked
 * reads and FUA writes, CD-ROM reads and TOC, two request queues at once, interrupt-driven
 * completion, error senses, a medium change driven by the host through @@ markers, and a polled
 * 4 KiB random-write benchmark. All of it runs in ring 3; only the MSI-X handlers (which count)
 * run in ring 0.
 *
 * Common arguments: indirect=0|1 event_idx=0|1 msix=0|1 qsize=N max_queues=N device=N
 * scan_targets=N disk=T:L cd=T:L verbose=1.
 */
#include "tests/guest/guest.h"
#include "tests/guest/pattern.h"
#include "tests/guest/scsi.h"
#include "tests/guest/virtio_scsi.h"

static struct vscsi host;
static struct scsi_lun disk, cd;
static char text[192]; /* scratch for result strings (boot CPU) */

#define RES(r) scsi_result_str((r), text, sizeof(text))

static void setup(bool verbose) {
  struct vscsi_options opt;
  vscsi_default_options(&opt);
  opt.verbose = verbose;
  vscsi_options_from_args(&opt);
  (void)tsc_hz(); /* calibrate on the boot CPU before anyone else uses deadlines */
  vscsi_init(&host, &opt);
  if (opt.verbose) vscsi_print_info(&host);
  scsi_discover(&host, &disk, &cd, opt.verbose);
}

static void need_disk(void) {
  if (!disk.present) test_fail("no disk (peripheral type 0) found; give disk=T:L");
}
static void need_cd(void) {
  if (!cd.present) test_fail("no CD-ROM (peripheral type 5) found; give cd=T:L");
}

static uint32_t arg_seed(const char *key, bool *given) {
  const char *v = arg_get(key);
  uint64_t seed = 0;
  if (given) *given = v != NULL;
  if (v && (!parse_u64(v, &seed) || seed > 0xffffffffull)) {
    printf("TEST %s: FAIL %s=%s is not a 32-bit number\n", test_name(), key, v);
    guest_exit(GUEST_EXIT_USAGE);
  }
  return (uint32_t)seed;
}

/* Seed of an image's block 0 header, for when the command line does not give one. */
static uint32_t header_seed(const uint8_t *block) {
  return (uint32_t)block[8] | (uint32_t)block[9] << 8 | (uint32_t)block[10] << 16 |
         (uint32_t)block[11] << 24;
}

static uint64_t xorshift64(uint64_t *state) {
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *state = x;
}

/* ============================================================================================
 * scsi-probe
 */

static uint8_t vpd_list[256];
static unsigned vpd_count;

/* INQUIRY VPD page the way Linux asks: 4-byte header first, then the whole page. */
static struct vscsi_req *vpd_page(struct scsi_lun *l, uint8_t page, unsigned *length) {
  uint8_t cdb[6];
  memset(l->buf, 0, 512);
  struct vscsi_req *r =
      scsi_cmd(l, cdb, scsi_cdb_inquiry(cdb, true, page, 4), VSCSI_DIR_FROM_DEVICE, l->buf, 4);
  if (!scsi_good(r)) return r;
  unsigned len = be16(l->buf + 2) + 4u;
  if (len > 512) len = 512;
  memset(l->buf, 0, 512);
  r = scsi_cmd(l, cdb, scsi_cdb_inquiry(cdb, true, page, (uint16_t)len), VSCSI_DIR_FROM_DEVICE,
               l->buf, len);
  *length = len;
  return r;
}

static bool vpd_listed(uint8_t page) {
  for (unsigned i = 0; i < vpd_count; i++) {
    if (vpd_list[i] == page) return true;
  }
  return false;
}

static void print_vpd(uint8_t page, const uint8_t *b, unsigned len) {
  char line[256];
  size_t n = 0;
  switch (page) {
    case 0x80: {
      unsigned slen = be16(b + 2);
      if (slen > len - 4) slen = len - 4;
      printf("scsi-probe: disk VPD 0x80 unit serial number \"%.*s\"\n", (int)slen,
             (const char *)b + 4);
      break;
    }
    case 0x83: {
      n += snprintf(line + n, sizeof(line) - n, "scsi-probe: disk VPD 0x83 device identification:");
      unsigned end = 4 + be16(b + 2);
      if (end > len) end = len;
      for (unsigned off = 4; off + 4 <= end && n < sizeof(line) - 40;) {
        static const char *const types[] = {"vendor-specific",
                                            "T10",
                                            "EUI-64",
                                            "NAA",
                                            "relative-port",
                                            "target-port-group",
                                            "LU-group",
                                            "MD5",
                                            "SCSI-name",
                                            "protocol-port",
                                            "UUID"};
        unsigned type = b[off + 1] & 0xf, assoc = (b[off + 1] >> 4) & 3, dlen = b[off + 3];
        n += snprintf(line + n, sizeof(line) - n, " [%s%s %u bytes]",
                      type < 11 ? types[type] : "reserved",
                      assoc == 0   ? ""
                      : assoc == 1 ? " port"
                                   : " target",
                      dlen);
        off += 4 + dlen;
      }
      printf("%s\n", line);
      break;
    }
    case 0xb0:
      printf(
          "scsi-probe: disk VPD 0xb0 block limits: max transfer %u blocks, optimal transfer %u, "
          "max unmap LBA count %u, max WRITE SAME length %lu\n",
          len >= 12 ? be32(b + 8) : 0, len >= 16 ? be32(b + 12) : 0, len >= 24 ? be32(b + 20) : 0,
          len >= 44 ? be64(b + 36) : 0);
      break;
    case 0xb1:
      printf(
          "scsi-probe: disk VPD 0xb1 block device characteristics: rotation rate %u (%s), form "
          "factor %u\n",
          be16(b + 4),
          be16(b + 4) == 1   ? "non-rotating"
          : be16(b + 4) == 0 ? "not reported"
                             : "rpm",
          len > 7 ? b[7] & 0xf : 0);
      break;
    case 0xb2:
      printf(
          "scsi-probe: disk VPD 0xb2 logical block provisioning: LBPU=%u LBPWS=%u LBPWS10=%u "
          "provisioning type %u\n",
          (b[5] >> 7) & 1, (b[5] >> 6) & 1, (b[5] >> 5) & 1, b[6] & 7);
      break;
    default: break;
  }
}

static void probe_disk(struct scsi_lun *l) {
  uint8_t cdb[16];
  struct vscsi_req *r;
  /* 1. standard INQUIRY */
  if (!scsi_inquiry_std(l)) test_fail("disk: standard INQUIRY failed: %s", RES(&l->req));
  printf(
      "scsi-probe: disk %u:%u INQUIRY: type 0x%02x, %s, vendor \"%s\" product \"%s\" revision "
      "\"%s\", version 0x%02x, response format %u\n",
      l->target, l->lun, l->type, l->removable ? "removable" : "not removable", l->vendor,
      l->product, l->revision, l->buf[2], l->buf[3] & 0xf);
  if (l->type != SCSI_TYPE_DISK) test_fail("disk: peripheral type 0x%02x", l->type);

  /* 2. VPD pages: 0x00 (twice, as Linux), then each page of interest */
  unsigned len = 0;
  r = vpd_page(l, 0x00, &len);
  if (!scsi_good(r)) test_fail("disk: INQUIRY VPD 0x00: %s", RES(r));
  if (l->buf[1] != 0x00) test_fail("disk: VPD 0x00 answer has page code 0x%02x", l->buf[1]);
  vpd_count = 0;
  char list[256];
  size_t n = 0;
  for (unsigned i = 4; i < len && vpd_count < sizeof(vpd_list); i++) {
    vpd_list[vpd_count++] = l->buf[i];
    n += snprintf(list + n, sizeof(list) - n, " %02x", l->buf[i]);
  }
  printf("scsi-probe: disk VPD 0x00 supported pages:%s\n", list);
  char vpd_text[256];
  memcpy(vpd_text, list, sizeof(vpd_text));
  if (!vpd_listed(0x00)) test_fail("disk: VPD 0x00 does not list itself");
  static const uint8_t pages[] = {0x80, 0x83, 0xb0, 0xb1, 0xb2};
  for (unsigned i = 0; i < sizeof(pages); i++) {
    uint8_t page = pages[i];
    r = vpd_page(l, page, &len);
    if (!vpd_listed(page)) {
      printf("scsi-probe: disk VPD 0x%02x not listed; asking anyway -> %s\n", page, RES(r));
      continue;
    }
    if (!scsi_good(r)) test_fail("disk: listed VPD page 0x%02x: %s", page, RES(r));
    if (l->buf[1] != page)
      test_fail("disk: VPD 0x%02x answer has page code 0x%02x", page, l->buf[1]);
    print_vpd(page, l->buf, len);
  }

  /* 3. REPORT LUNS */
  memset(cdb, 0, sizeof(cdb));
  cdb[0] = SCSI_REPORT_LUNS;
  put_be32(cdb + 6, 4096);
  uint8_t *luns = dma_alloc(4096);
  r = scsi_cmd(l, cdb, 12, VSCSI_DIR_FROM_DEVICE, luns, 4096);
  if (!scsi_good(r)) test_fail("disk: REPORT LUNS: %s", RES(r));
  n = 0;
  unsigned count = be32(luns) / 8;
  for (unsigned i = 0; i < count && i < 16; i++) {
    n += snprintf(list + n, sizeof(list) - n, " %02x%02x", luns[8 + 8 * i], luns[9 + 8 * i]);
  }
  printf("scsi-probe: target %u REPORT LUNS: %u LUN(s):%s\n", l->target, count, list);

  /* 4. TEST UNIT READY: the first one reports the reset's UNIT ATTENTION */
  memset(cdb, 0, sizeof(cdb));
  for (unsigned i = 0; i < 4; i++) {
    r = scsi_cmd(l, cdb, 6, VSCSI_DIR_NONE, NULL, 0);
    printf("scsi-probe: disk TEST UNIT READY -> %s\n", RES(r));
    if (scsi_good(r)) break;
    if (!scsi_check(r, SENSE_UNIT_ATTENTION, 0x29, -1) &&
        !scsi_check(r, SENSE_UNIT_ATTENTION, 0x2a, -1)) {
      test_fail("disk: TEST UNIT READY: %s", RES(r));
    }
  }
  if (!scsi_good(r)) test_fail("disk: not ready");

  /* 5. READ CAPACITY(16) */
  scsi_read_capacity(l, true);
  uint8_t prot = l->buf[12], exp = l->buf[13] & 0xf;
  printf(
      "scsi-probe: disk READ CAPACITY(16): %lu blocks of %u bytes (%lu MiB), protection 0x%02x, "
      "%u logical per physical, LBPME=%u\n",
      l->blocks, l->block_size, (l->blocks * l->block_size) >> 20, prot, 1u << exp,
      (l->buf[14] >> 7) & 1);
  uint64_t want_blocks = arg_u64("disk_blocks", 0);
  if (want_blocks && l->blocks != want_blocks) {
    test_fail("disk: %lu blocks, expected %lu", l->blocks, want_blocks);
  }

  /* 6. MODE SENSE(6): all pages header (write protect), caching page (header, then the page) */
  memset(cdb, 0, sizeof(cdb));
  cdb[0] = SCSI_MODE_SENSE_6;
  cdb[2] = 0x3f;
  cdb[4] = 4;
  r = scsi_cmd(l, cdb, 6, VSCSI_DIR_FROM_DEVICE, l->buf, 4);
  if (!scsi_good(r)) test_fail("disk: MODE SENSE(6) page 0x3f: %s", RES(r));
  printf("scsi-probe: disk Mode Sense: %02x %02x %02x %02x\n", l->buf[0], l->buf[1], l->buf[2],
         l->buf[3]);
  bool wp = l->buf[2] & 0x80, dpofua = l->buf[2] & 0x10;
  cdb[2] = 0x08;
  r = scsi_cmd(l, cdb, 6, VSCSI_DIR_FROM_DEVICE, l->buf, 4);
  if (!scsi_good(r)) test_fail("disk: MODE SENSE(6) page 0x08 (4 bytes): %s", RES(r));
  cdb[4] = 32;
  memset(l->buf, 0, 32);
  r = scsi_cmd(l, cdb, 6, VSCSI_DIR_FROM_DEVICE, l->buf, 32);
  if (!scsi_good(r)) test_fail("disk: MODE SENSE(6) page 0x08: %s", RES(r));
  unsigned bdlen = l->buf[3];
  const uint8_t *page = l->buf + 4 + bdlen;
  if (4 + bdlen + 3 > 32 || (page[0] & 0x3f) != 0x08) {
    test_fail("disk: caching mode page missing (block descriptors %u bytes, page code 0x%02x)",
              bdlen, page[0] & 0x3f);
  }
  bool wce = page[2] & 0x04, rcd = page[2] & 0x01;
  printf("scsi-probe: disk caching page: length %u, WCE=%u RCD=%u; header: WP=%u DPOFUA=%u\n",
         page[1], wce, rcd, wp, dpofua);
  if (l->buf[2] & 0x10) dpofua = true;
  const char *want;
  if ((want = arg_get("dpofua")) && (want[0] == '1') != dpofua)
    test_fail("disk: DPOFUA=%u, expected %s", dpofua, want);
  if ((want = arg_get("wce")) && (want[0] == '1') != wce)
    test_fail("disk: WCE=%u, expected %s", wce, want);

  /* 7. REPORT SUPPORTED OPERATION CODES for INQUIRY (Linux asks; QEMU rejects) */
  memset(cdb, 0, sizeof(cdb));
  cdb[0] = SCSI_MAINTENANCE_IN;
  cdb[1] = SCSI_MI_REPORT_SUPPORTED_OPCODES;
  cdb[2] = 1;
  cdb[3] = SCSI_INQUIRY;
  put_be32(cdb + 6, 10);
  r = scsi_cmd(l, cdb, 12, VSCSI_DIR_FROM_DEVICE, l->buf, 10);
  printf("scsi-probe: disk REPORT SUPPORTED OPERATION CODES (INQUIRY) -> %s\n", RES(r));

  printf(
      "scsi-probe: disk %u:%u \"%s\" \"%s\": %lu x %u-byte blocks, WCE=%u, DPOFUA=%u, WP=%u, VPD "
      "pages:%s\n",
      l->target, l->lun, l->vendor, l->product, l->blocks, l->block_size, wce, dpofua, wp,
      vpd_text);
}

static void cd_cmd(struct scsi_lun *l, const char *what, const uint8_t *cdb, unsigned len,
                   uint32_t alloc, bool must_succeed) {
  memset(l->buf, 0, alloc ? alloc : 1);
  struct vscsi_req *r =
      scsi_cmd(l, cdb, len, alloc ? VSCSI_DIR_FROM_DEVICE : VSCSI_DIR_NONE, l->buf, alloc);
  char hex[3 * 16 + 1];
  size_t n = 0;
  uint32_t shown = alloc - r->residual;
  if (shown > alloc) shown = alloc;
  for (uint32_t i = 0; i < shown && i < 16; i++)
    n += snprintf(hex + n, sizeof(hex) - n, " %02x", l->buf[i]);
  hex[n] = 0;
  printf("scsi-cd: %s -> %s%s%s\n", what, RES(r), scsi_good(r) && alloc ? ":" : "",
         scsi_good(r) && alloc ? hex : "");
  if (must_succeed && !scsi_good(r)) test_fail("CD: %s: %s", what, RES(r));
}

/* The MMC probe sequence of Linux's sr driver, and the TOC checked against the capacity. */
static void probe_cd(struct scsi_lun *l, bool verbose_sequence) {
  uint8_t cdb[12];
  if (!scsi_inquiry_std(l)) test_fail("CD: standard INQUIRY failed: %s", RES(&l->req));
  printf(
      "scsi-probe: cd %u:%u INQUIRY: type 0x%02x, %s, vendor \"%s\" product \"%s\" revision "
      "\"%s\"\n",
      l->target, l->lun, l->type, l->removable ? "removable" : "not removable", l->vendor,
      l->product, l->revision);
  if (l->type != SCSI_TYPE_ROM) test_fail("CD: peripheral type 0x%02x, expected 0x05", l->type);
  if (!l->removable) test_fail("CD: RMB is not set");
  scsi_wait_ready(l, 5000000, verbose_sequence);

  memset(cdb, 0, sizeof(cdb));
  cdb[0] = SCSI_MODE_SENSE_6;
  cdb[2] = 0x2a;
  cdb[4] = 128;
  memset(l->buf, 0, 128);
  struct vscsi_req *r = scsi_cmd(l, cdb, 6, VSCSI_DIR_FROM_DEVICE, l->buf, 128);
  if (scsi_good(r)) {
    const uint8_t *p = l->buf + 4 + l->buf[3];
    printf(
        "scsi-cd: MODE SENSE(6) page 0x2a -> GOOD: page 0x%02x length %u, read CD-R/RW %u/%u, "
        "lock %u, eject %u, loading mechanism %u\n",
        p[0] & 0x3f, p[1], p[2] & 1, (p[2] >> 1) & 1, p[6] & 1, (p[6] >> 3) & 1, p[6] >> 5);
  } else {
    printf("scsi-cd: MODE SENSE(6) page 0x2a -> %s\n", RES(r));
  }
  uint8_t gc28[10] = {SCSI_GET_CONFIGURATION, 0, 0, 0x28, 0, 0, 0, 0, 16, 0};
  cd_cmd(l, "GET CONFIGURATION start 0x28", gc28, 10, 16, false);
  uint8_t gc20[10] = {SCSI_GET_CONFIGURATION, 0, 0, 0x20, 0, 0, 0, 0, 24, 0};
  cd_cmd(l, "GET CONFIGURATION start 0x20", gc20, 10, 24, false);

  /* READ TOC: format 1 (session info, old-style ctl 0x40), format 0 track 0/1, MSF lead-out */
  uint8_t toc1[10] = {SCSI_READ_TOC, 0, 0, 0, 0, 0, 0, 0, 12, 0x40};
  cd_cmd(l, "READ TOC format 1", toc1, 10, 12, true);
  uint8_t toc0[10] = {SCSI_READ_TOC, 0, 0, 0, 0, 0, 0, 0, 12, 0};
  cd_cmd(l, "READ TOC format 0 track 0", toc0, 10, 12, true);
  unsigned first = l->buf[2], last = l->buf[3];
  uint32_t track1_lba = be32(l->buf + 8);
  unsigned track1 = l->buf[6], adr_ctl = l->buf[5];
  toc0[6] = 1;
  cd_cmd(l, "READ TOC format 0 track 1", toc0, 10, 12, true);
  scsi_read_capacity(l, false);
  printf("scsi-cd: READ CAPACITY(10): %lu blocks of %u bytes (%lu KiB)\n", l->blocks, l->block_size,
         (l->blocks * l->block_size) >> 10);
  if (l->block_size != 2048) test_fail("CD: block size %u, expected 2048", l->block_size);
  uint8_t di[10] = {0x51, 0, 0, 0, 0, 0, 0, 0, 34, 0};
  cd_cmd(l, "READ DISC INFORMATION", di, 10, 34, false);
  uint8_t ti[10] = {0x52, 1, 0, 0, 0, 1, 0, 0, 8, 0};
  cd_cmd(l, "READ TRACK INFORMATION track 1", ti, 10, 8, false);
  /* Lead-out in LBA form (format 0, track 0xAA) and MSF form. */
  uint8_t toc_lo[10] = {SCSI_READ_TOC, 0, 0, 0, 0, 0, 0xaa, 0, 12, 0};
  cd_cmd(l, "READ TOC format 0 track 0xaa", toc_lo, 10, 12, true);
  uint32_t leadout = be32(l->buf + 8);
  toc_lo[1] = 0x02;
  cd_cmd(l, "READ TOC format 0 MSF track 0xaa", toc_lo, 10, 12, true);
  unsigned m = l->buf[9], s = l->buf[10], f = l->buf[11];
  printf(
      "scsi-cd: TOC: tracks %u-%u, track %u (ADR/control 0x%02x) at LBA %u, lead-out at LBA %u "
      "= MSF %02u:%02u:%02u\n",
      first, last, track1, adr_ctl, track1_lba, leadout, m, s, f);
  if (first != 1 || last < 1 || track1 != 1 || track1_lba != 0) {
    test_fail("CD: TOC track 1 is not a first track at LBA 0 (tracks %u-%u, track %u at %u)", first,
              last, track1, track1_lba);
  }
  if (leadout != l->blocks) test_fail("CD: TOC lead-out %u != capacity %lu", leadout, l->blocks);
  if ((m * 60 + s) * 75 + f != leadout + 150) {
    test_fail("CD: MSF lead-out %u:%u:%u is not LBA %u + 150 frames", m, s, f, leadout);
  }

  uint8_t gesn[10] = {SCSI_GET_EVENT_STATUS, 1, 0, 0, 0x10, 0, 0, 0, 8, 0};
  cd_cmd(l, "GET EVENT STATUS NOTIFICATION (media)", gesn, 10, 8, true);
  printf("scsi-cd: GESN media: event %u, status 0x%02x (door %s, medium %s)\n", l->buf[4] & 0xf,
         l->buf[5], (l->buf[5] & 1) ? "open" : "closed", (l->buf[5] & 2) ? "present" : "absent");
  if (!(l->buf[5] & 2)) test_fail("CD: GESN says no medium present");
  uint8_t gc0[10] = {SCSI_GET_CONFIGURATION, 0, 0, 0, 0, 0, 0, 0, 32, 0};
  cd_cmd(l, "GET CONFIGURATION start 0", gc0, 10, 32, true);
  unsigned profile = be16(l->buf + 6);
  printf("scsi-cd: current profile 0x%04x (%s)\n", profile,
         profile == 0x0008   ? "CD-ROM"
         : profile == 0x0010 ? "DVD-ROM"
                             : "other");
  if (profile != 0x0008 && profile != 0x0010) test_fail("CD: current profile 0x%04x", profile);
}

GUEST_TEST_NAMED(scsi_probe, "scsi-probe",
                 "virtio-scsi: probes the disk and the CD the way Linux does") {
  setup(true);
  bool want_disk = arg_u64("expect_disk", 1), want_cd = arg_u64("expect_cd", 1);
  if (want_disk) need_disk();
  if (want_cd) need_cd();
  if (disk.present) probe_disk(&disk);
  if (cd.present) probe_cd(&cd, true);
  if (cd.present) {
    printf("scsi-probe: cd %u:%u \"%s\" \"%s\": %lu x %u-byte blocks\n", cd.target, cd.lun,
           cd.vendor, cd.product, cd.blocks, cd.block_size);
  }
}

/* ============================================================================================
 * scsi-rw
 */

struct rw_case {
  uint64_t lba; /* < 0 from the end: see resolve */
  uint32_t blocks;
  unsigned wsize; /* WRITE(10) or (16) */
  bool wfua;
  unsigned rsize;
  bool rfua;
  int sync;          /* 0, 10 or 16: SYNCHRONIZE CACHE after the write */
  unsigned segments; /* data split into this many separate buffers */
};

static bool overlaps(uint64_t a, uint64_t an, uint64_t b, uint64_t bn) {
  return a < b + bn && b < a + an;
}

/* Verifies `blocks` device blocks at `lba` hold the pre-existing pattern. */
static void check_existing(struct scsi_lun *l, const struct pattern_key *key, uint64_t lba,
                           uint32_t blocks, uint8_t *buf) {
  unsigned per = l->block_size / PATTERN_BLOCK;
  struct vscsi_req *r = scsi_rw(l, false, 10, lba, blocks, false, buf);
  if (!scsi_good(r)) test_fail("READ(10) at %lu x%u: %s", lba, blocks, RES(r));
  char why[160];
  if (!pattern_check(key, buf, lba * per, (uint64_t)blocks * per, why, sizeof(why))) {
    test_fail("pre-existing data at LBA %lu: %s", lba, why);
  }
}

GUEST_TEST_NAMED(
    scsi_rw, "scsi-rw",
    "virtio-scsi: patterned writes (with/without FUA), read back, pre-existing pattern") {
  setup(arg_u64("verbose", 0) != 0);
  need_disk();
  struct scsi_lun *l = &disk;
  scsi_wait_ready(l, 5000000, false);
  scsi_read_capacity(l, true);
  bool have_seed;
  uint32_t seed = arg_seed("seed", &have_seed);
  uint32_t wseed = have_seed ? seed ^ 0x5a5a0000u : 0x5a5a0001u;
  if (arg_get("wseed")) wseed = arg_seed("wseed", NULL);
  unsigned per = l->block_size / PATTERN_BLOCK;
  uint64_t cap = l->blocks;
  if (cap < 4096) test_fail("disk too small for the test (%lu blocks)", cap);
  printf("scsi-rw: disk %u:%u, %lu blocks of %u bytes, write seed %u%s\n", l->target, l->lun, cap,
         l->block_size, wseed, have_seed ? "" : " (no seed=: pre-existing data not checked)");
  struct rw_case cases[] = {
      {1, 1, 10, false, 10, false, 10, 1},         {8, 8, 10, true, 10, false, 0, 1},
      {100, 64, 16, false, 16, false, 16, 1},      {1000, 256, 16, true, 10, true, 0, 32},
      {cap / 2 - 3, 7, 10, true, 16, false, 0, 7}, {cap - 8, 8, 16, true, 16, true, 0, 2},
      {2048, 128, 10, false, 10, false, 10, 4},
  };
  unsigned ncases = sizeof(cases) / sizeof(cases[0]);
  uint32_t max_blocks = 256;
  if (host.cfg.max_sectors && (uint64_t)max_blocks * per > host.cfg.max_sectors) {
    max_blocks = host.cfg.max_sectors / per;
  }
  uint8_t *wbuf = dma_alloc((size_t)256 * l->block_size * 2); /* room for gaps between segments */
  uint8_t *rbuf = dma_alloc((size_t)256 * l->block_size);
  struct pattern_key wkey, okey;
  pattern_key_init(&wkey, wseed);
  pattern_key_init(&okey, seed);
  char why[160];
  uint8_t cdb[16];

  for (unsigned c = 0; c < ncases; c++) {
    struct rw_case *k = &cases[c];
    if (k->blocks > max_blocks) k->blocks = max_blocks;
    if (k->lba + k->blocks > cap) test_fail("case %u beyond the disk", c);
    /* Pattern into wbuf, then scatter it over `segments` buffers with a page gap between them. */
    uint32_t bytes = k->blocks * l->block_size;
    uint8_t *staging = rbuf;
    pattern_fill(&wkey, staging, k->lba * per, (uint64_t)k->blocks * per);
    struct vscsi_req *req = &l->req;
    unsigned segs = k->segments;
    if (segs > k->blocks) segs = k->blocks;
    if (segs > vscsi_max_segments(&host, l->vq)) segs = vscsi_max_segments(&host, l->vq);
    uint32_t seg_blocks = (k->blocks + segs - 1) / segs;
    unsigned cdb_len = scsi_cdb_rw(cdb, true, k->wsize, k->lba, k->blocks, k->wfua);
    vscsi_req_set(req, l->target, l->lun, cdb, cdb_len, VSCSI_DIR_TO_DEVICE, wbuf, bytes);
    req->nsg = 0;
    uint8_t *dst = wbuf;
    for (uint32_t done = 0; done < k->blocks; done += seg_blocks) {
      uint32_t nb = k->blocks - done < seg_blocks ? k->blocks - done : seg_blocks;
      uint32_t nbytes = nb * l->block_size;
      memcpy(dst, staging + (size_t)done * l->block_size, nbytes);
      req->sg[req->nsg].addr = dst;
      req->sg[req->nsg].len = nbytes;
      req->nsg++;
      dst += ((nbytes + 4095) & ~4095u) + (segs > 1 ? 4096 : 0);
    }
    unsigned used_segs = req->nsg;
    vscsi_exec(&host, l->vq, req, SCSI_TIMEOUT_US);
    if (!scsi_good(req))
      test_fail("WRITE(%u)%s at %lu x%u: %s", k->wsize, k->wfua ? " FUA" : "", k->lba, k->blocks,
                RES(req));
    if (k->sync) {
      struct vscsi_req *r =
          scsi_cmd(l, cdb, scsi_cdb_sync_cache(cdb, (unsigned)k->sync, k->lba, k->blocks),
                   VSCSI_DIR_NONE, NULL, 0);
      if (k->sync == 16 && scsi_check(r, SENSE_ILLEGAL_REQUEST, 0x20, 0x00) &&
          !arg_u64("need_sync16", 0)) {
        /* QEMU 7.2's scsi-hd has no SYNCHRONIZE CACHE(16); Linux only sends the 10-byte one. */
        printf("scsi-rw: SYNCHRONIZE CACHE(16) -> %s; using SYNCHRONIZE CACHE(10)\n", RES(r));
        k->sync = 10;
        r = scsi_cmd(l, cdb, scsi_cdb_sync_cache(cdb, 10, k->lba, k->blocks), VSCSI_DIR_NONE, NULL,
                     0);
      }
      if (!scsi_good(r)) test_fail("SYNCHRONIZE CACHE(%d): %s", k->sync, RES(r));
    }
    memset(rbuf, 0xee, bytes);
    struct vscsi_req *r = scsi_rw(l, false, k->rsize, k->lba, k->blocks, k->rfua, rbuf);
    if (!scsi_good(r)) test_fail("READ(%u) at %lu x%u: %s", k->rsize, k->lba, k->blocks, RES(r));
    if (r->residual)
      test_fail("READ(%u) at %lu x%u: residual %u", k->rsize, k->lba, k->blocks, r->residual);
    if (!pattern_check(&wkey, rbuf, k->lba * per, (uint64_t)k->blocks * per, why, sizeof(why))) {
      test_fail("read back after WRITE(%u) at %lu: %s", k->wsize, k->lba, why);
    }
    printf("scsi-rw: WRITE(%u)%s LBA %lu x%u in %u segment(s)%s, READ(%u)%s: verified\n", k->wsize,
           k->wfua ? " FUA" : "", k->lba, k->blocks, used_segs,
           k->sync == 10   ? " + SYNCHRONIZE CACHE(10)"
           : k->sync == 16 ? " + SYNCHRONIZE CACHE(16)"
                           : "",
           k->rsize, k->rfua ? " FUA" : "");
  }
  /* Whole-device flush, as Linux sends it (LBA 0, 0 blocks). */
  struct vscsi_req *r =
      scsi_cmd(l, cdb, scsi_cdb_sync_cache(cdb, 10, 0, 0), VSCSI_DIR_NONE, NULL, 0);
  if (!scsi_good(r)) test_fail("SYNCHRONIZE CACHE(10) of the whole device: %s", RES(r));

  if (have_seed) {
    /* Neighbours of every written range still hold the image's pattern... */
    unsigned checked = 0;
    for (unsigned c = 0; c < ncases; c++) {
      uint64_t around[2] = {cases[c].lba - 1, cases[c].lba + cases[c].blocks};
      for (unsigned i = 0; i < 2; i++) {
        uint64_t lba = around[i];
        if (cases[c].lba == 0 && i == 0) continue;
        if (lba >= cap) continue;
        bool written = false;
        for (unsigned o = 0; o < ncases; o++)
          written |= overlaps(lba, 1, cases[o].lba, cases[o].blocks);
        if (written) continue;
        check_existing(l, &okey, lba, 1, rbuf);
        checked++;
      }
    }
    /* ...and so do 32 spread-out 4 KiB pieces. */
    uint64_t state = 0x9e3779b97f4a7c15ull ^ seed;
    uint32_t nb = 4096 / l->block_size ? 4096 / l->block_size : 1;
    for (unsigned i = 0; i < 32; i++) {
      uint64_t lba = (xorshift64(&state) % (cap - nb));
      bool written = false;
      for (unsigned o = 0; o < ncases; o++)
        written |= overlaps(lba, nb, cases[o].lba, cases[o].blocks);
      if (written) continue;
      check_existing(l, &okey, lba, nb, rbuf);
      checked++;
    }
    /* LBA 0 of the image. */
    check_existing(l, &okey, 0, 1, rbuf);
    printf("scsi-rw: pre-existing pattern (seed %u) verified in %u places\n", seed, checked + 1);
    if (arg_u64("full", 0)) {
      uint64_t t0 = rdtsc();
      uint64_t verified = 0;
      for (uint64_t lba = 0; lba < cap; lba += max_blocks) {
        uint32_t n = cap - lba < max_blocks ? (uint32_t)(cap - lba) : max_blocks;
        r = scsi_rw(l, false, 16, lba, n, false, rbuf);
        if (!scsi_good(r)) test_fail("READ(16) at %lu x%u: %s", lba, n, RES(r));
        for (uint32_t b = 0; b < n; b++) {
          bool written = false;
          for (unsigned o = 0; o < ncases; o++)
            written |= overlaps(lba + b, 1, cases[o].lba, cases[o].blocks);
          const struct pattern_key *key = written ? &wkey : &okey;
          if (!pattern_check(key, rbuf + (size_t)b * l->block_size, (lba + b) * per, per, why,
                             sizeof(why))) {
            test_fail("full check: %s", why);
          }
          verified++;
        }
      }
      printf("scsi-rw: full check: %lu blocks verified in %lu ms\n", verified,
             tsc_to_us(rdtsc() - t0) / 1000);
    }
  }
  printf("scsi-rw: queue %u: %lu requests, %lu notifications, %lu suppressed\n", l->vq,
         host.q[l->vq].vq.completed, host.q[l->vq].vq.notifications,
         host.q[l->vq].vq.notifications_suppressed);
}

/* ============================================================================================
 * scsi-cd
 */

/* Reads `count` 2048-byte sectors from `start` and checks the pattern; returns the seed used. */
static uint32_t cd_read_verify(struct scsi_lun *l, uint64_t start, uint64_t count, bool have_seed,
                               uint32_t seed, const char *who) {
  uint32_t chunk = (uint32_t)arg_u64("chunk", 64);
  if (chunk == 0) chunk = 1;
  if (host.cfg.max_sectors && (uint64_t)chunk * 4 > host.cfg.max_sectors)
    chunk = host.cfg.max_sectors / 4;
  if (chunk > 64) chunk = 64;
  static uint8_t *buf;
  if (!buf) buf = dma_alloc(64 * 2048);
  struct pattern_key key;
  char why[160];
  uint64_t t0 = rdtsc();
  for (uint64_t lba = start; lba < start + count; lba += chunk) {
    uint32_t n = start + count - lba < chunk ? (uint32_t)(start + count - lba) : chunk;
    memset(buf, 0, (size_t)n * 2048);
    struct vscsi_req *r = scsi_rw(l, false, 10, lba, n, false, buf);
    if (!scsi_good(r)) test_fail("%s: READ(10) LBA %lu x%u: %s", who, lba, n, RES(r));
    if (lba == start) {
      if (!have_seed) {
        seed = header_seed(buf);
        printf("%s: no seed given: using seed %u from the header of block %lu\n", who, seed,
               lba * 4);
      }
      pattern_key_init(&key, seed);
    }
    if (!pattern_check(&key, buf, lba * 4, (uint64_t)n * 4, why, sizeof(why))) {
      test_fail("%s: sector %lu: %s", who, lba, why);
    }
  }
  uint64_t us = tsc_to_us(rdtsc() - t0);
  printf(
      "%s: read and verified %lu sectors (%lu KiB) from LBA %lu in %lu ms (%lu KiB/s), seed %u\n",
      who, count, count * 2, start, us / 1000, us ? count * 2 * 1000000 / us : 0, seed);
  return seed;
}

GUEST_TEST_NAMED(
    scsi_cd, "scsi-cd",
    "virtio-scsi: reads the CD (all sectors or count=N) and verifies the pattern and TOC") {
  setup(arg_u64("verbose", 0) != 0);
  need_cd();
  struct scsi_lun *l = &cd;
  probe_cd(l, false);
  bool have_seed;
  uint32_t seed = arg_seed("seed", &have_seed);
  uint64_t start = arg_u64("start", 0);
  uint64_t count = arg_u64("count", l->blocks);
  if (start >= l->blocks) test_fail("start=%lu beyond %lu sectors", start, l->blocks);
  if (count > l->blocks - start) count = l->blocks - start;
  cd_read_verify(l, start, count, have_seed, seed, "scsi-cd");

  /* Medium lock and spin-up commands a CD driver sends (no eject). */
  uint8_t prevent[6] = {SCSI_PREVENT_ALLOW, 0, 0, 0, 1, 0};
  struct vscsi_req *r = scsi_cmd(l, prevent, 6, VSCSI_DIR_NONE, NULL, 0);
  printf("scsi-cd: PREVENT ALLOW MEDIUM REMOVAL (prevent) -> %s\n", RES(r));
  if (!scsi_good(r)) test_fail("PREVENT MEDIUM REMOVAL: %s", RES(r));
  prevent[4] = 0;
  r = scsi_cmd(l, prevent, 6, VSCSI_DIR_NONE, NULL, 0);
  printf("scsi-cd: PREVENT ALLOW MEDIUM REMOVAL (allow) -> %s\n", RES(r));
  if (!scsi_good(r)) test_fail("ALLOW MEDIUM REMOVAL: %s", RES(r));
  uint8_t start_unit[6] = {SCSI_START_STOP_UNIT, 0, 0, 0, 0x01, 0};
  r = scsi_cmd(l, start_unit, 6, VSCSI_DIR_NONE, NULL, 0);
  printf("scsi-cd: START STOP UNIT (start, no eject) -> %s\n", RES(r));
  if (!scsi_good(r)) test_fail("START STOP UNIT: %s", RES(r));
  scsi_wait_ready(l, 2000000, true);
}

/* ============================================================================================
 * scsi-queues: two request queues at once
 */

#define QW_MAX_QD 32

struct qworker {
  unsigned r, vq;
  unsigned qd, count, blocks, per;
  uint64_t base;
  uint32_t seed;
  bool irq;
  struct pattern_key key;
  struct vscsi_req reqs[QW_MAX_QD];
  uint8_t *bufs[QW_MAX_QD];
  int slot_op[QW_MAX_QD];
  uint8_t *done; /* per op: completions seen */
  unsigned submitted, completed;
  bool write;
  uint64_t start_tsc, end_tsc;
  uint64_t irqs_before;
  volatile bool finished;
};

static struct qworker qworkers[2];

static void qw_prepare(struct qworker *w, unsigned r, unsigned qd, unsigned count, unsigned blocks,
                       uint64_t base, uint32_t seed, bool irq) {
  w->r = r;
  w->vq = vscsi_request_vq(r);
  w->qd = qd;
  w->count = count;
  w->blocks = blocks;
  w->per = disk.block_size / PATTERN_BLOCK;
  w->base = base;
  w->seed = seed;
  w->irq = irq;
  pattern_key_init(&w->key, seed);
  for (unsigned s = 0; s < qd; s++) {
    vscsi_req_init(&host, &w->reqs[s]);
    w->reqs[s].user_index = s;
    w->bufs[s] = dma_alloc((size_t)blocks * disk.block_size);
  }
  w->done = dma_alloc(count);
}

static void qw_start_phase(struct qworker *w, bool write) {
  w->write = write;
  w->end_tsc = 0;
  w->submitted = w->completed = 0;
  memset(w->done, 0, w->count);
  for (unsigned s = 0; s < w->qd; s++) w->slot_op[s] = -1;
}

static bool qw_fill(struct qworker *w) {
  bool any = false;
  for (unsigned s = 0; s < w->qd && w->submitted < w->count; s++) {
    if (w->slot_op[s] >= 0) continue;
    unsigned op = w->submitted;
    uint64_t lba = w->base + (uint64_t)op * w->blocks;
    uint8_t cdb[16];
    unsigned n =
        scsi_cdb_rw(cdb, w->write, (op & 1) ? 16 : 10, lba, w->blocks, w->write && (op % 3 == 0));
    if (w->write) {
      pattern_fill(&w->key, w->bufs[s], lba * w->per, (uint64_t)w->blocks * w->per);
    } else {
      memset(w->bufs[s], 0, (size_t)w->blocks * disk.block_size);
    }
    struct vscsi_req *req = &w->reqs[s];
    vscsi_req_set(req, disk.target, disk.lun, cdb, n,
                  w->write ? VSCSI_DIR_TO_DEVICE : VSCSI_DIR_FROM_DEVICE, w->bufs[s],
                  w->blocks * disk.block_size);
    if (!vscsi_submit(&host, w->vq, req)) break;
    w->slot_op[s] = (int)op;
    w->submitted++;
    any = true;
  }
  if (any) vscsi_kick(&host, w->vq);
  return any;
}

static void qw_complete(struct qworker *w, struct vscsi_req *req) {
  char result[160], why[160];
  unsigned s = req->user_index;
  if (s >= w->qd || req != &w->reqs[s])
    test_fail("queue %u: completion of a request that is not ours", w->vq);
  if (w->slot_op[s] < 0) test_fail("queue %u: slot %u completed twice", w->vq, s);
  unsigned op = (unsigned)w->slot_op[s];
  w->slot_op[s] = -1;
  if (w->done[op]++) test_fail("queue %u: op %u completed twice", w->vq, op);
  w->completed++;
  uint64_t lba = w->base + (uint64_t)op * w->blocks;
  if (!scsi_good(req)) {
    test_fail("queue %u: %s LBA %lu: %s", w->vq, w->write ? "WRITE" : "READ", lba,
              scsi_result_str(req, result, sizeof(result)));
  }
  if (!w->write && !pattern_check(&w->key, w->bufs[s], lba * w->per, (uint64_t)w->blocks * w->per,
                                  why, sizeof(why))) {
    test_fail("queue %u: READ LBA %lu returned the wrong data: %s", w->vq, lba, why);
  }
}

/* Drives the given workers (all on this CPU) through one phase. */
static void qw_run(struct qworker **ws, unsigned nw, bool write, uint64_t timeout_us) {
  for (unsigned i = 0; i < nw; i++) {
    qw_start_phase(ws[i], write);
    ws[i]->start_tsc = rdtsc();
  }
  uint64_t deadline = deadline_after_us(timeout_us);
  for (;;) {
    bool all_done = true;
    for (unsigned i = 0; i < nw; i++) {
      qw_fill(ws[i]);
      if (ws[i]->completed < ws[i]->count) all_done = false;
    }
    if (all_done) break;
    bool progressed = false;
    for (unsigned i = 0; i < nw; i++) {
      struct vscsi_req *req;
      while ((req = vscsi_poll(&host, ws[i]->vq)) != NULL) {
        qw_complete(ws[i], req);
        progressed = true;
      }
      if (ws[i]->completed == ws[i]->count && !ws[i]->end_tsc) ws[i]->end_tsc = rdtsc();
    }
    if (progressed) continue;
    if (deadline_passed(deadline)) {
      for (unsigned i = 0; i < nw; i++) {
        printf("scsi-queues: queue %u: %u submitted, %u completed, %u in flight\n", ws[i]->vq,
               ws[i]->submitted, ws[i]->completed, virtq_in_flight(&host.q[ws[i]->vq].vq));
      }
      test_fail("completions missing after %lu ms", timeout_us / 1000);
    }
    if (ws[0]->irq) {
      bool pending = false;
      for (unsigned i = 0; i < nw; i++) pending |= virtq_enable_interrupts(&host.q[ws[i]->vq].vq);
      if (!pending) {
        host.q[ws[0]->vq].waits++;
        cpu_wait_for_interrupt();
      }
    } else {
      cpu_relax();
    }
  }
  for (unsigned i = 0; i < nw; i++) {
    struct qworker *w = ws[i];
    if (!w->end_tsc) w->end_tsc = rdtsc();
    for (unsigned op = 0; op < w->count; op++) {
      if (w->done[op] != 1) test_fail("queue %u: op %u completed %u times", w->vq, op, w->done[op]);
    }
    if (virtq_in_flight(&host.q[w->vq].vq)) test_fail("queue %u: requests left in flight", w->vq);
  }
}

static uint64_t qw_timeout_us;

static void qw_cpu_main(struct qworker *w) {
  if (w->irq) {
    vscsi_wake_timer_start(20000);
    vscsi_set_irq_mode(&host, w->vq, true);
  }
  struct qworker *list[1] = {w};
  uint64_t t0 = rdtsc();
  qw_run(list, 1, true, qw_timeout_us);
  qw_run(list, 1, false, qw_timeout_us);
  w->start_tsc = t0;
  if (w->irq) vscsi_wake_timer_stop();
  __atomic_store_n(&w->finished, true, __ATOMIC_RELEASE);
}

static void qw_ap_entry(unsigned apic_id) {
  if (apic_id != cpu_apic_id(1)) return; /* only one helper CPU */
  qw_cpu_main(&qworkers[1]);
}

GUEST_TEST_NAMED(scsi_queues, "scsi-queues",
                 "virtio-scsi: two request queues at once (two CPUs, or one alternating)") {
  setup(arg_u64("verbose", 0) != 0);
  need_disk();
  scsi_wait_ready(&disk, 5000000, false);
  scsi_read_capacity(&disk, true);
  if (host.request_queues < 2)
    test_fail("the device has %u request queue(s); need 2", host.request_queues);
  unsigned qd = (unsigned)arg_u64("qd", 8), count = (unsigned)arg_u64("count", 1000);
  unsigned blocks =
      (unsigned)arg_u64("blocks", 4096 / disk.block_size ? 4096 / disk.block_size : 1);
  bool irq = arg_u64("irq", 0) != 0;
  if (qd == 0 || qd > QW_MAX_QD) test_fail("qd must be 1..%u", QW_MAX_QD);
  uint64_t span = (uint64_t)count * blocks;
  if (disk.blocks < 2 * span + 1) test_fail("disk too small for count=%u blocks=%u", count, blocks);
  uint64_t base0 = disk.blocks - 2 * span; /* the end of the disk, away from scsi-rw's LBAs */
  uint32_t seed = arg_seed("wseed", NULL);
  if (!arg_get("wseed")) seed = 0x0e0e0000u;
  qw_prepare(&qworkers[0], 0, qd, count, blocks, base0, seed, irq);
  qw_prepare(&qworkers[1], 1, qd, count, blocks, base0 + span, seed + 1, irq);
  qw_timeout_us = arg_u64("timeout_ms", 60000) * 1000;
  unsigned cpus = cpu_count();
  bool smp = cpus >= 2 && arg_u64("smp", 1);
  printf(
      "scsi-queues: queues %u and %u, qd %u each, %u x %u-block writes then reads per queue, %s, "
      "%s\n",
      qworkers[0].vq, qworkers[1].vq, qd, count, blocks,
      smp ? "one CPU per queue" : "one CPU alternating", irq ? "interrupt-driven" : "polled");
  uint64_t irqs0 = host.q[qworkers[0].vq].irqs, irqs1 = host.q[qworkers[1].vq].irqs;
  uint64_t t0 = rdtsc();
  if (smp) {
    /* Queue 1's interrupts go to CPU 1 (APIC ID 1 under QEMU; the FDT's under our VMM). */
    unsigned ap = cpu_apic_id(1);
    if (irq) vscsi_route_queue(&host, qworkers[1].vq, ap);
    unsigned started = smp_start_aps(qw_ap_entry, 10000000);
    if (started < 1) test_fail("no AP started");
    qw_cpu_main(&qworkers[0]);
    uint64_t deadline = deadline_after_us(qw_timeout_us * 2);
    while (!__atomic_load_n(&qworkers[1].finished, __ATOMIC_ACQUIRE)) {
      if (deadline_passed(deadline)) test_fail("CPU 1 did not finish queue %u", qworkers[1].vq);
      cpu_relax();
    }
  } else {
    if (irq) {
      vscsi_wake_timer_start(20000);
      vscsi_set_irq_mode(&host, qworkers[0].vq, true);
      vscsi_set_irq_mode(&host, qworkers[1].vq, true);
    }
    struct qworker *both[2] = {&qworkers[0], &qworkers[1]};
    qw_run(both, 2, true, qw_timeout_us);
    qw_run(both, 2, false, qw_timeout_us);
    if (irq) vscsi_wake_timer_stop();
    qworkers[0].start_tsc = qworkers[1].start_tsc = t0;
  }
  uint64_t total_us = tsc_to_us(rdtsc() - t0);
  for (unsigned i = 0; i < 2; i++) {
    struct qworker *w = &qworkers[i];
    struct vscsi_queue *q = &host.q[w->vq];
    printf(
        "scsi-queues: queue %u: %u writes + %u reads verified, %lu notifications (%lu suppressed), "
        "%lu interrupts, %lu waits\n",
        w->vq, w->count, w->count, q->vq.notifications, q->vq.notifications_suppressed,
        q->irqs - (i ? irqs1 : irqs0), q->waits);
  }
  /* Overlap of the two queues' busy periods (they must have been in use at the same time). */
  uint64_t s =
      qworkers[0].start_tsc > qworkers[1].start_tsc ? qworkers[0].start_tsc : qworkers[1].start_tsc;
  uint64_t e =
      qworkers[0].end_tsc < qworkers[1].end_tsc ? qworkers[0].end_tsc : qworkers[1].end_tsc;
  uint64_t overlap_us = e > s ? tsc_to_us(e - s) : 0;
  printf("scsi-queues: %u requests in %lu ms (%lu per second), queues busy together for %lu ms\n",
         4 * count, total_us / 1000, total_us ? (uint64_t)4 * count * 1000000 / total_us : 0,
         overlap_us / 1000);
  if (irq && (host.q[qworkers[0].vq].irqs == irqs0 || host.q[qworkers[1].vq].irqs == irqs1)) {
    test_fail("a queue completed without any interrupt in irq mode");
  }
  for (unsigned i = 0; i < 2; i++) {
    const struct vscsi_queue *q = &host.q[qworkers[i].vq];
    if (q->misrouted)
      test_fail("queue %u: %lu interrupts arrived on another CPU than APIC %u", qworkers[i].vq,
                q->misrouted, q->apic_id);
  }
  if (overlap_us == 0) test_fail("the two queues were never busy at the same time");
}

/* ============================================================================================
 * scsi-irq
 */

GUEST_TEST_NAMED(scsi_irq, "scsi-irq",
                 "virtio-scsi: interrupt-driven completions (MSI-X), masking and the PBA") {
  setup(arg_u64("verbose", 0) != 0);
  need_disk();
  struct scsi_lun *l = &disk;
  scsi_wait_ready(l, 5000000, false);
  scsi_read_capacity(l, true);
  if (!host.vp.has_msix) test_fail("the device has no usable MSI-X");
  unsigned vq = l->vq;
  struct vscsi_queue *q = &host.q[vq];
  vscsi_wake_timer_start(arg_u64("wake_ms", 20) * 1000);
  vscsi_set_irq_mode(&host, vq, true);
  unsigned count = (unsigned)arg_u64("count", 40);
  uint32_t per = l->block_size / PATTERN_BLOCK,
           nb = 4096 / l->block_size ? 4096 / l->block_size : 1;
  uint64_t base = l->blocks / 4;
  struct pattern_key key;
  pattern_key_init(&key, 0x1e0e0000u);
  uint8_t *buf = dma_alloc(4096 * 16);
  char why[160];
  uint64_t irqs0 = q->irqs, wake0 = q->wakeups;
  uint64_t t0 = rdtsc();
  /* 1. one command at a time: write FUA, read back */
  for (unsigned i = 0; i < count; i++) {
    uint64_t lba = base + (uint64_t)i * nb;
    pattern_fill(&key, buf, lba * per, (uint64_t)nb * per);
    struct vscsi_req *r = scsi_rw(l, true, 10, lba, nb, true, buf);
    if (!scsi_good(r)) test_fail("WRITE(10) FUA LBA %lu: %s", lba, RES(r));
    memset(buf, 0, 4096);
    r = scsi_rw(l, false, 10, lba, nb, false, buf);
    if (!scsi_good(r)) test_fail("READ(10) LBA %lu: %s", lba, RES(r));
    if (!pattern_check(&key, buf, lba * per, (uint64_t)nb * per, why, sizeof(why)))
      test_fail("%s", why);
  }
  uint64_t us = tsc_to_us(rdtsc() - t0);
  uint64_t irqs1 = q->irqs;
  printf(
      "scsi-irq: %u writes + %u reads one at a time: %lu interrupts, %lu HLT waits, %lu woken by "
      "the device, %lu us per command\n",
      count, count, irqs1 - irqs0, q->waits, q->wakeups - wake0, us / (count ? 2 * count : 1));
  if (irqs1 == irqs0) test_fail("no MSI-X interrupt arrived for queue %u", vq);
  if (q->misrouted)
    test_fail("queue %u: %lu interrupts arrived on another CPU than APIC %u", vq, q->misrouted,
              q->apic_id);

  /* 2. a burst of 16 reads completed by interrupts */
  static struct vscsi_req burst[16];
  for (unsigned i = 0; i < 16; i++) {
    if (!burst[i].hdr) vscsi_req_init(&host, &burst[i]);
    uint8_t cdb[16];
    unsigned n = scsi_cdb_rw(cdb, false, 10, base + (uint64_t)(i % count) * nb, nb, false);
    vscsi_req_set(&burst[i], l->target, l->lun, cdb, n, VSCSI_DIR_FROM_DEVICE, buf + 4096 * i,
                  4096);
    burst[i].user_index = i;
    if (!vscsi_submit(&host, vq, &burst[i])) test_fail("queue full");
  }
  vscsi_kick(&host, vq);
  unsigned seen = 0, mask = 0;
  uint64_t deadline = deadline_after_us(10000000);
  while (seen < 16) {
    struct vscsi_req *r = vscsi_wait(&host, vq, deadline);
    if (r->user_index >= 16 || (mask & (1u << r->user_index)))
      test_fail("burst: bad or duplicate completion");
    mask |= 1u << r->user_index;
    seen++;
    if (!scsi_good(r)) test_fail("burst READ: %s", RES(r));
    uint64_t lba = base + (uint64_t)(r->user_index % count) * nb;
    if (!pattern_check(&key, buf + 4096 * r->user_index, lba * per, (uint64_t)nb * per, why,
                       sizeof(why))) {
      test_fail("burst: %s", why);
    }
  }
  printf("scsi-irq: burst of 16 reads: %lu interrupts\n", q->irqs - irqs1);

  /* 3. masked vector: the completion sets the PBA bit, the message comes on unmask */
  const struct pci_msix *msix = &host.vp.msix;
  uint8_t tur[6] = {SCSI_TEST_UNIT_READY};
  vscsi_req_set(&l->req, l->target, l->lun, tur, 6, VSCSI_DIR_NONE, NULL, 0);
  pci_msix_mask_entry(msix, q->msix_entry, true);
  (void)virtq_enable_interrupts(&q->vq);
  /* A message the device sent for the burst just before the mask may still be on its way (an
   * irqfd injects asynchronously; PCI 3.0 6.8.3.4 only stops messages generated after the mask).
   * Let it land (HLT, bounded by the wake timer) before counting. */
  cpu_wait_for_interrupt();
  uint64_t before = q->irqs;
  if (!vscsi_submit(&host, vq, &l->req)) test_fail("queue full");
  vscsi_kick(&host, vq);
  deadline = deadline_after_us(5000000);
  while (!virtq_has_used(&q->vq)) {
    if (deadline_passed(deadline))
      test_fail("TEST UNIT READY did not complete while the vector was masked");
    cpu_relax();
  }
  udelay(2000);
  bool pending = pci_msix_pending(msix, q->msix_entry);
  /* Let any wrongly delivered interrupt in (HLT with the wake timer as a bound). */
  cpu_wait_for_interrupt();
  uint64_t while_masked = q->irqs - before;
  struct vscsi_req *r = vscsi_poll(&host, vq);
  if (r != &l->req || !scsi_good(r))
    test_fail("TEST UNIT READY while masked: %s", r ? RES(r) : "lost");
  pci_msix_mask_entry(msix, q->msix_entry, false);
  deadline = deadline_after_us(2000000);
  while (q->irqs == before + while_masked) {
    if (deadline_passed(deadline)) break;
    cpu_wait_for_interrupt();
  }
  uint64_t after_unmask = q->irqs - before - while_masked;
  printf(
      "scsi-irq: masked vector: %lu interrupts while masked, PBA pending bit %s, %lu delivered "
      "after unmask\n",
      while_masked, pending ? "set" : "clear", after_unmask);
  vscsi_set_irq_mode(&host, vq, false);
  vscsi_wake_timer_stop();
  if (while_masked) test_fail("an interrupt arrived through a masked MSI-X entry");
  if (!pending) test_fail("the PBA pending bit was not set for the masked entry");
  if (!after_unmask) test_fail("the pending message was not sent after unmasking");
}

/* ============================================================================================
 * scsi-errors
 */

static unsigned error_failures;

static void expect(const char *what, struct vscsi_req *r, bool ok, const char *expected) {
  printf("scsi-errors: %s -> %s%s%s\n", what, RES(r), ok ? "" : "   <-- expected ",
         ok ? "" : expected);
  if (!ok) error_failures++;
}

GUEST_TEST_NAMED(
    scsi_errors, "scsi-errors",
    "virtio-scsi: error senses (out of range, bad opcode, read-only CD, bad LUN/target, TMF)") {
  setup(arg_u64("verbose", 0) != 0);
  need_disk();
  struct scsi_lun *l = &disk;
  scsi_wait_ready(l, 5000000, false);
  scsi_read_capacity(l, true);
  uint64_t cap = l->blocks;
  uint8_t *buf = dma_alloc(65536);
  uint8_t cdb[16];
  struct vscsi_req *r;
  char what[96];

  r = scsi_rw(l, false, 10, cap, 1, false, buf);
  snprintf(what, sizeof(what), "disk READ(10) LBA %lu (= capacity)", cap);
  expect(what, r, scsi_check(r, SENSE_ILLEGAL_REQUEST, 0x21, 0x00), "05/21/00");
  r = scsi_rw(l, false, 16, cap - 1, 2, false, buf);
  snprintf(what, sizeof(what), "disk READ(16) LBA %lu x2 (crosses the end)", cap - 1);
  expect(what, r, scsi_check(r, SENSE_ILLEGAL_REQUEST, 0x21, 0x00), "05/21/00");
  r = scsi_rw(l, true, 10, cap, 1, true, buf);
  snprintf(what, sizeof(what), "disk WRITE(10) FUA LBA %lu", cap);
  expect(what, r, scsi_check(r, SENSE_ILLEGAL_REQUEST, 0x21, 0x00), "05/21/00");
  r = scsi_rw(l, false, 16, 0xffffffff00000000ull, 1, false, buf);
  expect("disk READ(16) LBA 0xffffffff00000000", r,
         scsi_check(r, SENSE_ILLEGAL_REQUEST, 0x21, 0x00), "05/21/00");

  static const uint8_t opcodes[] = {0xff, 0x0c, 0xc0};
  for (unsigned i = 0; i < sizeof(opcodes); i++) {
    memset(cdb, 0, sizeof(cdb));
    cdb[0] = opcodes[i];
    r = scsi_cmd(l, cdb, 16, VSCSI_DIR_NONE, NULL, 0);
    snprintf(what, sizeof(what), "disk opcode 0x%02x", opcodes[i]);
    expect(what, r, scsi_check(r, SENSE_ILLEGAL_REQUEST, 0x20, 0x00), "05/20/00");
  }
  /* INQUIRY with EVPD = 0 and a page code: invalid field in CDB. */
  r = scsi_cmd(l, cdb, scsi_cdb_inquiry(cdb, false, 0x83, 36), VSCSI_DIR_FROM_DEVICE, buf, 36);
  expect("disk INQUIRY EVPD=0 page 0x83", r, scsi_check(r, SENSE_ILLEGAL_REQUEST, 0x24, 0x00),
         "05/24/00");
  memset(cdb, 0, sizeof(cdb));
  cdb[0] = SCSI_MODE_SENSE_6;
  cdb[2] = 0x3e; /* vendor page nobody implements */
  cdb[4] = 64;
  r = scsi_cmd(l, cdb, 6, VSCSI_DIR_FROM_DEVICE, buf, 64);
  expect("disk MODE SENSE(6) page 0x3e", r, scsi_check(r, SENSE_ILLEGAL_REQUEST, 0x24, 0x00),
         "05/24/00");

  /* After a CHECK CONDITION the sense came with the response (autosense). REQUEST SENSE then
   * returns either NO SENSE (the sense was consumed) or the same sense again (QEMU 7.2 keeps the
   * last sense until it is asked for). */
  memset(cdb, 0, sizeof(cdb));
  cdb[0] = SCSI_REQUEST_SENSE;
  cdb[4] = 18;
  memset(buf, 0xcc, 18);
  r = scsi_cmd(l, cdb, 6, VSCSI_DIR_FROM_DEVICE, buf, 18);
  printf(
      "scsi-errors: disk REQUEST SENSE after the 05/24/00 -> %s: response code 0x%02x, sense "
      "%02X/%02X/%02X (%u bytes)\n",
      RES(r), buf[0], buf[2] & 0xf, buf[12], buf[13], 18 - r->residual);
  bool no_sense = (buf[2] & 0xf) == SENSE_NO_SENSE && buf[12] == 0;
  bool same = (buf[2] & 0xf) == SENSE_ILLEGAL_REQUEST && buf[12] == 0x24;
  if (!scsi_good(r) || (buf[0] & 0x7f) != 0x70 || !(no_sense || same)) {
    printf("scsi-errors:   <-- expected GOOD with fixed-format NO SENSE or 05/24/00\n");
    error_failures++;
  }
  memset(buf, 0xcc, 18);
  r = scsi_cmd(l, cdb, 6, VSCSI_DIR_FROM_DEVICE, buf, 18);
  printf("scsi-errors: disk REQUEST SENSE again -> %s: sense %02X/%02X/%02X\n", RES(r),
         buf[2] & 0xf, buf[12], buf[13]);
  if (!scsi_good(r) || (buf[2] & 0xf) != SENSE_NO_SENSE) {
    printf("scsi-errors:   <-- expected NO SENSE\n");
    error_failures++;
  }

  /* Residual: VPD page 0x00 is shorter than a 255-byte allocation. */
  memset(buf, 0, 255);
  r = scsi_cmd(l, cdb, scsi_cdb_inquiry(cdb, true, 0x00, 255), VSCSI_DIR_FROM_DEVICE, buf, 255);
  unsigned page_len = be16(buf + 2) + 4u;
  printf("scsi-errors: disk INQUIRY VPD 0x00 alloc 255 -> %s, page %u bytes, residual %u\n", RES(r),
         page_len, r->residual);
  /* virtio 1.2 5.6.6.1: residual = data length - bytes transferred. QEMU 7.2 reports 0 for
   * short answers of emulated commands, so 0 is accepted too. */
  if (!scsi_good(r) ||
      (r->residual != 255 - (page_len > 255 ? 255 : page_len) && r->residual != 0)) {
    printf("scsi-errors:   <-- expected GOOD with residual = 255 - page length (or 0)\n");
    error_failures++;
  }

  /* Data buffers smaller than the transfer length (5.6.6.1: VIRTIO_SCSI_S_OVERRUN). */
  vscsi_req_set(&l->req, l->target, l->lun, cdb, scsi_cdb_rw(cdb, false, 10, 0, 8, false),
                VSCSI_DIR_FROM_DEVICE, buf, 2048);
  vscsi_exec(&host, l->vq, &l->req, SCSI_TIMEOUT_US);
  r = &l->req;
  expect("disk READ(10) 8 blocks into a 2048-byte buffer", r, r->response == VIRTIO_SCSI_S_OVERRUN,
         "virtio OVERRUN");
  uint64_t scratch_lba = cap - 64;
  vscsi_req_set(&l->req, l->target, l->lun, cdb, scsi_cdb_rw(cdb, true, 10, scratch_lba, 8, false),
                VSCSI_DIR_TO_DEVICE, buf, 2048);
  vscsi_exec(&host, l->vq, &l->req, SCSI_TIMEOUT_US);
  r = &l->req;
  snprintf(what, sizeof(what), "disk WRITE(10) 8 blocks at %lu from a 2048-byte buffer",
           scratch_lba);
  expect(what, r, r->response == VIRTIO_SCSI_S_OVERRUN, "virtio OVERRUN");

  /* A LUN that does not exist on the disk's target, and a target that does not exist. */
  static struct vscsi_req other;
  if (!other.hdr) vscsi_req_init(&host, &other);
  uint16_t nolun = 7;
  while (nolun == disk.lun || (cd.present && cd.target == disk.target && nolun == cd.lun)) nolun++;
  memset(buf, 0, 36);
  r = scsi_cmd_at(&host, &other, l->vq, l->target, nolun, cdb, scsi_cdb_inquiry(cdb, false, 0, 36),
                  VSCSI_DIR_FROM_DEVICE, buf, 36);
  printf("scsi-errors: INQUIRY %u:%u (no such LUN) -> %s, peripheral byte 0x%02x\n", l->target,
         nolun, RES(r), buf[0]);
  if (scsi_good(r) && (buf[0] >> 5) == 0) {
    printf("scsi-errors:   <-- expected peripheral qualifier 3 (or an error)\n");
    error_failures++;
  }
  memset(cdb, 0, sizeof(cdb));
  for (unsigned i = 0; i < 4; i++) { /* a phantom LUN may report its own power-on UA first */
    r = scsi_cmd_at(&host, &other, l->vq, l->target, nolun, cdb, 6, VSCSI_DIR_NONE, NULL, 0);
    if (!scsi_check(r, SENSE_UNIT_ATTENTION, 0x29, -1)) break;
    printf("scsi-errors: TEST UNIT READY %u:%u (no such LUN) -> %s\n", l->target, nolun, RES(r));
  }
  snprintf(what, sizeof(what), "TEST UNIT READY %u:%u (no such LUN)", l->target, nolun);
  expect(what, r,
         scsi_check(r, SENSE_ILLEGAL_REQUEST, 0x25, 0x00) ||
             r->response == VIRTIO_SCSI_S_INCORRECT_LUN || r->response == VIRTIO_SCSI_S_BAD_TARGET,
         "05/25/00 or virtio INCORRECT_LUN/BAD_TARGET");
  unsigned notarget = l->target + 1;
  while (cd.present && notarget == cd.target) notarget++;
  if (notarget <= host.cfg.max_target) {
    r = scsi_cmd_at(&host, &other, l->vq, (uint8_t)notarget, 0, cdb, 6, VSCSI_DIR_NONE, NULL, 0);
    snprintf(what, sizeof(what), "TEST UNIT READY %u:0 (no such target)", notarget);
    expect(what, r, r->response == VIRTIO_SCSI_S_BAD_TARGET, "virtio BAD_TARGET");
  }

  /* The CD: writes to a read-only medium, reads past its end. */
  if (cd.present) {
    scsi_wait_ready(&cd, 5000000, false);
    scsi_read_capacity(&cd, false);
    memset(buf, 0, 2048);
    r = scsi_rw(&cd, true, 10, 0, 1, false, buf);
    expect("cd WRITE(10) LBA 0", r,
           scsi_check(r, SENSE_DATA_PROTECT, 0x27, 0x00) ||
               scsi_check(r, SENSE_ILLEGAL_REQUEST, 0x20, 0x00),
           "07/27/00 or 05/20/00");
    r = scsi_rw(&cd, false, 10, cd.blocks, 1, false, buf);
    snprintf(what, sizeof(what), "cd READ(10) LBA %lu (= capacity)", cd.blocks);
    expect(what, r, scsi_check(r, SENSE_ILLEGAL_REQUEST, 0x21, 0x00), "05/21/00");
  }

  /* Task management on the control queue. */
  uint8_t resp = vscsi_tmf(&host, VIRTIO_SCSI_T_TMF_ABORT_TASK, l->target, l->lun, 0x7fffffff);
  printf("scsi-errors: TMF ABORT TASK (unknown tag) -> %s (%u)\n",
         resp == 0 ? "FUNCTION_COMPLETE" : vscsi_response_name(resp), resp);
  if (resp != VIRTIO_SCSI_S_FUNCTION_COMPLETE && resp != VIRTIO_SCSI_S_FUNCTION_SUCCEEDED)
    error_failures++;
  resp = vscsi_tmf(&host, VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET, l->target, l->lun, 0);
  printf("scsi-errors: TMF LOGICAL UNIT RESET -> %s (%u)\n",
         resp == 0 ? "FUNCTION_COMPLETE" : vscsi_response_name(resp), resp);
  if (resp != VIRTIO_SCSI_S_FUNCTION_COMPLETE && resp != VIRTIO_SCSI_S_FUNCTION_SUCCEEDED)
    error_failures++;
  memset(cdb, 0, sizeof(cdb));
  r = scsi_cmd(l, cdb, 6, VSCSI_DIR_NONE, NULL, 0);
  expect("disk TEST UNIT READY after the LU reset", r,
         scsi_check(r, SENSE_UNIT_ATTENTION, 0x29, -1), "06/29/xx");
  scsi_wait_ready(l, 2000000, false);
  printf("scsi-errors: disk ready again after the reset\n");
  if (error_failures)
    test_fail("%u error case(s) answered differently than expected", error_failures);
}

/* ============================================================================================
 * scsi-media: medium change driven by the host
 */

struct tur_state {
  uint8_t response, status, key, asc, ascq;
};

static struct tur_state tur_once(struct scsi_lun *l) {
  uint8_t cdb[6] = {SCSI_TEST_UNIT_READY};
  struct vscsi_req *r = scsi_cmd(l, cdb, 6, VSCSI_DIR_NONE, NULL, 0);
  struct scsi_sense s = scsi_sense_of(r);
  struct tur_state t = {r->response, r->status, s.key, s.asc, s.ascq};
  return t;
}

/* Polls TEST UNIT READY, printing every change, until done(state) or the timeout. */
static struct tur_state poll_tur(struct scsi_lun *l, bool (*done)(const struct tur_state *),
                                 uint64_t timeout_us, uint64_t poll_us, const char *waiting_for) {
  uint64_t deadline = deadline_after_us(timeout_us), t0 = rdtsc();
  struct tur_state last = {0xff, 0xff, 0xff, 0xff, 0xff};
  for (;;) {
    struct tur_state t = tur_once(l);
    if (memcmp(&t, &last, sizeof(t)) != 0) {
      printf("scsi-media: +%lu ms TEST UNIT READY -> %s\n", tsc_to_us(rdtsc() - t0) / 1000,
             RES(&l->req));
      last = t;
    }
    if (done(&t)) return t;
    if (deadline_passed(deadline)) test_fail("no %s within %lu ms", waiting_for, timeout_us / 1000);
    udelay(poll_us);
  }
}

static bool is_not_ready_no_medium(const struct tur_state *t) {
  return t->response == 0 && t->status == SCSI_STATUS_CHECK_CONDITION &&
         t->key == SENSE_NOT_READY && t->asc == 0x3a;
}
static bool is_medium_changed(const struct tur_state *t) {
  return t->response == 0 && t->status == SCSI_STATUS_CHECK_CONDITION &&
         t->key == SENSE_UNIT_ATTENTION && t->asc == 0x28;
}
static bool is_good(const struct tur_state *t) {
  return t->response == 0 && t->status == SCSI_STATUS_GOOD;
}

static void print_gesn(struct scsi_lun *l, const char *when) {
  uint8_t gesn[10] = {SCSI_GET_EVENT_STATUS, 1, 0, 0, 0x10, 0, 0, 0, 8, 0};
  memset(l->buf, 0, 8);
  struct vscsi_req *r = scsi_cmd(l, gesn, 10, VSCSI_DIR_FROM_DEVICE, l->buf, 8);
  if (scsi_good(r)) {
    printf("scsi-media: GESN %s: event %u, media status 0x%02x (door %s, medium %s)\n", when,
           l->buf[4] & 0xf, l->buf[5], (l->buf[5] & 1) ? "open" : "closed",
           (l->buf[5] & 2) ? "present" : "absent");
  } else {
    printf("scsi-media: GESN %s -> %s\n", when, RES(r));
  }
}

/* The host side of a media change: the marker is for the harness that drives the VMM (our control
 * API, QEMU's monitor), which ejects or inserts the disc when it reads it. */
static void request_media_change(const char *marker) { printf("%s\n", marker); }

static void drain_events(const char *when) {
  struct vscsi_event ev;
  while (vscsi_get_event(&host, &ev)) {
    printf("scsi-media: event queue %s: event 0x%x reason %u lun %02x %02x %02x %02x\n", when,
           ev.event, ev.reason, ev.lun[0], ev.lun[1], ev.lun[2], ev.lun[3]);
  }
}

GUEST_TEST_NAMED(scsi_media, "scsi-media",
                 "virtio-scsi: CD medium change (@@EJECT cd / @@INSERT cd markers for the host)") {
  setup(arg_u64("verbose", 0) != 0);
  need_cd();
  struct scsi_lun *l = &cd;
  uint64_t timeout_us = arg_u64("timeout_ms", 30000) * 1000,
           poll_us = arg_u64("poll_ms", 20) * 1000;
  scsi_wait_ready(l, 5000000, true);
  scsi_read_capacity(l, false);
  bool have_seed, have_new;
  uint32_t seed = arg_seed("seed", &have_seed);
  uint32_t newseed = arg_seed("newseed", &have_new);
  uint64_t count = arg_u64("count", 64);
  printf("scsi-media: old medium: %lu sectors\n", l->blocks);
  cd_read_verify(l, 0, count < l->blocks ? count : l->blocks, have_seed, seed, "scsi-media");
  print_gesn(l, "before eject");
  /* Lock and unlock once (a forced eject ignores the lock anyway). */
  uint8_t prevent[6] = {SCSI_PREVENT_ALLOW, 0, 0, 0, 1, 0};
  scsi_cmd(l, prevent, 6, VSCSI_DIR_NONE, NULL, 0);
  prevent[4] = 0;
  struct vscsi_req *r = scsi_cmd(l, prevent, 6, VSCSI_DIR_NONE, NULL, 0);
  if (!scsi_good(r)) test_fail("ALLOW MEDIUM REMOVAL: %s", RES(r));

  request_media_change("@@EJECT cd");
  poll_tur(l, is_not_ready_no_medium, timeout_us, poll_us, "NOT READY 02/3A/xx after the eject");
  print_gesn(l, "while empty");
  drain_events("after eject");

  request_media_change("@@INSERT cd");
  poll_tur(l, is_medium_changed, timeout_us, poll_us, "UNIT ATTENTION 06/28/00 after the insert");
  poll_tur(l, is_good, timeout_us, poll_us, "GOOD after the medium change");
  print_gesn(l, "after insert");
  drain_events("after insert");
  uint64_t old_blocks = l->blocks;
  scsi_read_capacity(l, false);
  printf("scsi-media: new medium: %lu sectors (was %lu)\n", l->blocks, old_blocks);
  uint64_t n = arg_u64("newcount", l->blocks);
  if (n > l->blocks) n = l->blocks;
  uint32_t used = cd_read_verify(l, 0, n, have_new, newseed, "scsi-media");
  if (have_seed && !have_new && used == seed)
    test_fail("the new medium has the old medium's seed %u", seed);
}

/* ============================================================================================
 * scsi-lock: the guest holds the medium lock while the host acts (the control API's eject while
 * locked, and guest-initiated ejects). Driven by one command per line on the serial input.
 */

static bool is_not_ready(const struct tur_state *t) { return is_not_ready_no_medium(t); }

GUEST_TEST_NAMED(scsi_lock, "scsi-lock",
                 "virtio-scsi: PREVENT MEDIUM REMOVAL, prints @@LOCKED cd, then runs host commands "
                 "from the serial input") {
  setup(arg_u64("verbose", 0) != 0);
  need_cd();
  struct scsi_lun *l = &cd;
  uint64_t hold_us = arg_u64("hold_ms", 30000) * 1000,
           timeout_us = arg_u64("timeout_ms", 10000) * 1000;
  uint64_t poll_us = arg_u64("poll_ms", 10) * 1000;
  scsi_wait_ready(l, 5000000, false);
  uint8_t prevent[6] = {SCSI_PREVENT_ALLOW, 0, 0, 0, 1, 0};
  struct vscsi_req *r = scsi_cmd(l, prevent, 6, VSCSI_DIR_NONE, NULL, 0);
  if (!scsi_good(r)) test_fail("PREVENT MEDIUM REMOVAL: %s", RES(r));
  printf("@@LOCKED cd\n");
  /* Host commands, one per line, each answered with "scsi-lock: CMD -> RESULT":
   *   loej / load   START STOP UNIT with LoEj, START=0 (eject: open the tray) / START=1 (load)
   *   tur           one TEST UNIT READY
   *   gone          poll TEST UNIT READY until NOT READY 02/3A (the medium is out)
   *   ready         poll until GOOD (a medium is in; unit attentions are consumed on the way)
   *   read          READ(10) of the first 16 sectors, pattern-checked (seed from block 0)
   *   lock / unlock PREVENT / ALLOW MEDIUM REMOVAL
   *   done          ALLOW MEDIUM REMOVAL and PASS */
  char line[64];
  for (;;) {
    int n = serial_read_line(line, sizeof(line), hold_us);
    if (n < 0) test_fail("no host command within %lu ms", hold_us / 1000);
    if (n == 0) continue;
    if (!strcmp(line, "loej") || !strcmp(line, "load")) {
      uint8_t ssu[6] = {
          SCSI_START_STOP_UNIT, 0, 0, 0, (uint8_t)(!strcmp(line, "load") ? 0x03 : 0x02), 0};
      r = scsi_cmd(l, ssu, 6, VSCSI_DIR_NONE, NULL, 0);
      printf("scsi-lock: %s -> %s\n", line, RES(r));
    } else if (!strcmp(line, "tur")) {
      struct tur_state t = tur_once(l);
      (void)t;
      printf("scsi-lock: tur -> %s\n", RES(&l->req));
    } else if (!strcmp(line, "gone")) {
      poll_tur(l, is_not_ready, timeout_us, poll_us, "NOT READY 02/3A/xx (medium gone)");
      printf("scsi-lock: gone -> %s\n", RES(&l->req));
    } else if (!strcmp(line, "ready")) {
      poll_tur(l, is_good, timeout_us, poll_us, "GOOD (a medium)");
      printf("scsi-lock: ready -> GOOD\n");
    } else if (!strcmp(line, "read")) {
      scsi_read_capacity(l, false); /* the block size, and the medium may have changed */
      cd_read_verify(l, 0, 16 < l->blocks ? 16 : l->blocks, false, 0, "scsi-lock");
      printf("scsi-lock: read -> GOOD\n");
    } else if (!strcmp(line, "lock") || !strcmp(line, "unlock") || !strcmp(line, "done")) {
      prevent[4] = !strcmp(line, "lock") ? 1 : 0;
      r = scsi_cmd(l, prevent, 6, VSCSI_DIR_NONE, NULL, 0);
      printf("scsi-lock: %s -> %s\n", line, RES(r));
      if (!scsi_good(r)) test_fail("PREVENT ALLOW MEDIUM REMOVAL: %s", RES(r));
      if (!strcmp(line, "done")) return;
    } else {
      printf("scsi-lock: %s -> unknown command\n", line);
    }
  }
}

/* ============================================================================================
 * scsi-bench: polled 4 KiB random writes, or reads (random or sequential) of the disk or the CD
 */

#define BENCH_MAX_QD 64
#define BENCH_HIST \
  (1u << 20) /* 1-us latency buckets (about 1 s); the last one collects everything above */

struct bench_worker {
  unsigned vq, qd;
  uint64_t ops, target_ops;
  uint64_t deadline; /* 0: count mode */
  uint64_t rng;
  struct vscsi_req reqs[BENCH_MAX_QD];
  uint8_t *bufs[BENCH_MAX_QD];
  uint8_t phase[BENCH_MAX_QD];     /* 1 write in flight, 2 its flush in flight */
  uint64_t op_start[BENCH_MAX_QD]; /* TSC when the slot's write was queued */
  uint32_t *hist;
  uint64_t lat_sum_us, lat_max_us, lat_min_us;
  uint64_t start_tsc, end_tsc;
  volatile bool finished;
};

static struct bench_worker bench_workers[2];
static unsigned bench_nb;   /* blocks per write */
static uint64_t bench_span; /* random LBAs in [bench_base, bench_base + bench_span * nb) */
static uint64_t bench_base;
static uint64_t bench_next; /* sequential reads: the next slot of the region (shared by workers) */
static struct scsi_lun *bench_lun;
/* 0 FUA, 1 write + SYNCHRONIZE CACHE, 2 plain write, 3 random read, 4 sequential read */
static int bench_mode;
#define BENCH_READS(mode) ((mode) >= 3)

static void bench_submit(struct bench_worker *w, unsigned s, bool flush) {
  uint8_t cdb[16];
  struct vscsi_req *req = &w->reqs[s];
  if (flush) {
    vscsi_req_set(req, bench_lun->target, bench_lun->lun, cdb, scsi_cdb_sync_cache(cdb, 10, 0, 0),
                  VSCSI_DIR_NONE, NULL, 0);
    w->phase[s] = 2;
  } else {
    uint64_t slot = bench_mode == 4
                        ? __atomic_fetch_add(&bench_next, 1, __ATOMIC_RELAXED) % bench_span
                        : xorshift64(&w->rng) % bench_span;
    uint64_t lba = bench_base + slot * bench_nb;
    bool read = BENCH_READS(bench_mode);
    unsigned n = scsi_cdb_rw(cdb, !read, 10, lba, bench_nb, bench_mode == 0);
    vscsi_req_set(req, bench_lun->target, bench_lun->lun, cdb, n,
                  read ? VSCSI_DIR_FROM_DEVICE : VSCSI_DIR_TO_DEVICE, w->bufs[s],
                  bench_nb * bench_lun->block_size);
    w->phase[s] = 1;
    w->op_start[s] = rdtsc();
  }
  if (!vscsi_submit(&host, w->vq, req)) test_fail("bench: queue %u full", w->vq);
}

/* Keeps qd writes in flight on one queue, polling the used ring; rings the doorbell once per
 * batch of completions. */
static void bench_run(struct bench_worker *w) {
  char result[160];
  w->lat_min_us = ~0ull;
  uint64_t issued = 0;
  w->start_tsc = rdtsc();
  for (unsigned s = 0; s < w->qd && (w->deadline || issued < w->target_ops); s++) {
    bench_submit(w, s, false);
    issued++;
  }
  vscsi_kick(&host, w->vq);
  uint64_t stall = deadline_after_us(30000000);
  for (;;) {
    bool submitted = false, reaped = false;
    struct vscsi_req *req;
    while ((req = vscsi_poll(&host, w->vq)) != NULL) {
      reaped = true;
      unsigned s = req->user_index;
      if (!scsi_good(req)) {
        test_fail("bench: %s: %s",
                  w->phase[s] == 2          ? "SYNCHRONIZE CACHE"
                  : BENCH_READS(bench_mode) ? "READ"
                                            : "WRITE",
                  scsi_result_str(req, result, sizeof(result)));
      }
      if (w->phase[s] == 1 && bench_mode == 1) {
        bench_submit(w, s, true); /* emulated FUA: the op ends when its flush does */
        submitted = true;
        continue;
      }
      uint64_t us = tsc_to_us(req->complete_tsc - w->op_start[s]);
      w->hist[us < BENCH_HIST - 1 ? us : BENCH_HIST - 1]++;
      w->lat_sum_us += us;
      if (us > w->lat_max_us) w->lat_max_us = us;
      if (us < w->lat_min_us) w->lat_min_us = us;
      w->ops++;
      w->phase[s] = 0;
      if (w->deadline ? !deadline_passed(w->deadline) : issued < w->target_ops) {
        bench_submit(w, s, false);
        issued++;
        submitted = true;
      }
    }
    if (submitted) vscsi_kick(&host, w->vq);
    if (reaped) {
      stall = deadline_after_us(30000000);
    } else {
      if (virtq_in_flight(&host.q[w->vq].vq) == 0) break;
      if (deadline_passed(stall)) test_fail("bench: queue %u: no completion for 30 s", w->vq);
      cpu_relax();
    }
  }
  w->end_tsc = rdtsc();
  __atomic_store_n(&w->finished, true, __ATOMIC_RELEASE);
}

static void bench_ap_entry(unsigned apic_id) {
  if (apic_id != cpu_apic_id(1)) return;
  bench_run(&bench_workers[1]);
}

static uint64_t percentile(const uint32_t *hist, uint64_t total, unsigned pct) {
  uint64_t want = (total * pct + 99) / 100, seen = 0;
  for (unsigned i = 0; i < BENCH_HIST; i++) {
    seen += hist[i];
    if (seen >= want && want) return i;
  }
  return BENCH_HIST - 1;
}

GUEST_TEST_NAMED(scsi_bench, "scsi-bench",
                 "virtio-scsi: polled 4 KiB random FUA writes (mode=fua|flush|none) or reads "
                 "(mode=read|seqread, device=disk|cd) at qd=N for count=N or seconds=S") {
  setup(arg_u64("verbose", 0) != 0);
  const char *device = arg_get("device");
  if (device && strcmp(device, "disk") && strcmp(device, "cd"))
    test_fail("device must be disk or cd");
  bench_lun = device && !strcmp(device, "cd") ? &cd : &disk;
  if (bench_lun == &cd) need_cd();
  else need_disk();
  scsi_wait_ready(bench_lun, 5000000, false);
  scsi_read_capacity(bench_lun, bench_lun == &disk); /* MMC-6 has READ CAPACITY(10) only */
  unsigned qd = (unsigned)arg_u64("qd", 1);
  unsigned queues = (unsigned)arg_u64("queues", 1);
  uint64_t seconds = arg_u64("seconds", 0), count = arg_u64("count", 2000);
  unsigned bs = (unsigned)arg_u64("bs", 4096);
  const char *mode = arg_get("mode");
  bench_mode = !mode || !strcmp(mode, "fua") ? 0
               : !strcmp(mode, "flush")      ? 1
               : !strcmp(mode, "none")       ? 2
               : !strcmp(mode, "read")       ? 3
               : !strcmp(mode, "seqread")    ? 4
                                             : -1;
  if (arg_get("fua") && !mode) bench_mode = arg_u64("fua", 1) ? 0 : 2;
  if (bench_mode < 0) test_fail("mode must be fua, flush, none, read or seqread");
  /* A CD takes no writes (MMC-6: a read-only medium answers DATA PROTECT). */
  if (bench_lun == &cd && !BENCH_READS(bench_mode))
    test_fail("device=cd needs mode=read or seqread");
  if (qd == 0 || qd > BENCH_MAX_QD) test_fail("qd must be 1..%u", BENCH_MAX_QD);
  if (queues < 1 || queues > 2 || queues > host.request_queues)
    test_fail("queues must be 1..%u", host.request_queues < 2 ? host.request_queues : 2);
  /* 128 KiB: what Linux's sr sends for a sequential read of a CD (bench-linux's runs). */
  if (bs % bench_lun->block_size || bs == 0 || bs > 131072)
    test_fail("bs must be a multiple of %u up to 128 KiB", bench_lun->block_size);
  bench_nb = bs / bench_lun->block_size;
  bench_base = arg_u64("start", 0);
  bench_next = 0;
  uint64_t region = arg_u64("span", bench_lun->blocks - bench_base);
  if (bench_base + region > bench_lun->blocks) region = bench_lun->blocks - bench_base;
  bench_span = region / bench_nb;
  if (bench_span == 0) test_fail("empty region");
  bool smp = queues == 2 && cpu_count() >= 2 && arg_u64("smp", 1);
  if (queues == 2 && !smp) test_fail("queues=2 needs two CPUs (cpus=2 under QEMU)");
  for (unsigned i = 0; i < queues; i++) {
    struct bench_worker *w = &bench_workers[i];
    w->vq = vscsi_request_vq(i);
    w->qd = qd;
    w->rng = 0x2545f4914f6cdd1dull + i * 0x9e3779b97f4a7c15ull + arg_u64("rngseed", 1);
    w->hist = dma_alloc(sizeof(uint32_t) * BENCH_HIST);
    for (unsigned s = 0; s < qd; s++) {
      vscsi_req_init(&host, &w->reqs[s]);
      w->reqs[s].user_index = s;
      w->bufs[s] = dma_alloc(bs);
      memset(w->bufs[s], (int)(0xa0 + s), bs);
    }
    w->target_ops = count / queues;
  }
  static const char *const kModeNames[] = {"fua", "flush", "none", "read", "seqread"};
  const char *mode_name = kModeNames[bench_mode];
  printf(
      "scsi-bench: %u-byte %s (%s) of the %s, qd %u per queue, %u queue(s)%s, %s, LBA %lu + %lu x "
      "%u blocks\n",
      bs,
      bench_mode == 4   ? "sequential reads"
      : bench_mode == 3 ? "random reads"
                        : "random writes",
      mode_name, bench_lun == &cd ? "CD" : "disk", qd, queues, smp ? " on 2 CPUs" : "",
      seconds ? "timed" : "counted", bench_base, bench_span, bench_nb);
  uint64_t now_deadline = seconds ? deadline_after_us(seconds * 1000000 + (smp ? 200000 : 0)) : 0;
  for (unsigned i = 0; i < queues; i++) bench_workers[i].deadline = now_deadline;
  uint64_t t0 = rdtsc();
  if (smp) {
    if (smp_start_aps(bench_ap_entry, 10000000) < 1) test_fail("no AP started");
  }
  bench_run(&bench_workers[0]);
  if (smp) {
    uint64_t deadline = deadline_after_us(seconds ? seconds * 2000000 + 10000000 : 600000000ull);
    while (!__atomic_load_n(&bench_workers[1].finished, __ATOMIC_ACQUIRE)) {
      if (deadline_passed(deadline)) test_fail("CPU 1 did not finish");
      cpu_relax();
    }
  }
  uint64_t end = bench_workers[0].end_tsc;
  uint64_t start = bench_workers[0].start_tsc;
  uint64_t ops = 0, sum = 0, max = 0, min = ~0ull, notif = 0, supp = 0;
  uint32_t *hist = dma_alloc(sizeof(uint32_t) * BENCH_HIST);
  for (unsigned i = 0; i < queues; i++) {
    struct bench_worker *w = &bench_workers[i];
    if (w->end_tsc > end) end = w->end_tsc;
    if (w->start_tsc < start) start = w->start_tsc;
    ops += w->ops;
    sum += w->lat_sum_us;
    if (w->lat_max_us > max) max = w->lat_max_us;
    if (w->lat_min_us < min) min = w->lat_min_us;
    for (unsigned b = 0; b < BENCH_HIST; b++) hist[b] += w->hist[b];
    notif += host.q[w->vq].vq.notifications;
    supp += host.q[w->vq].vq.notifications_suppressed;
  }
  (void)t0;
  uint64_t us = tsc_to_us(end - start);
  if (!us) us = 1;
  printf(
      "scsi-bench: qd=%u queues=%u mode=%s bs=%u ops=%lu iops=%lu lat_avg_us=%lu lat_min_us=%lu "
      "lat_p50_us=%lu lat_p99_us=%lu lat_max_us=%lu elapsed_ms=%lu notifications=%lu "
      "suppressed=%lu\n",
      qd, queues, mode_name, bs, ops, ops * 1000000 / us, ops ? sum / ops : 0, ops ? min : 0,
      percentile(hist, ops, 50), percentile(hist, ops, 99), max, us / 1000, notif, supp);
}

/* ============================================================================================
 * scsi-restart
 *
 * The VMM's --on-reboot=restart seen from the guest. The disk's last block counts this guest's
 * boots (a marker and a number). Every boot must meet a disk in its power-on state: the first
 * command that is not exempt (TEST UNIT READY) gets the power-on unit attention (SPC-4: 06/29/xx).
 * The first boot writes 1 (FUA) and resets through the i8042, as Linux's reboot=k does; the VMM
 * builds the machine again and boots the guest anew, which reads 1 from the same disk, writes 2
 * and passes. boots=N (default 2) is how many boots the test expects in all.
 */
GUEST_TEST_NAMED(
    scsi_restart, "scsi-restart",
    "virtio-scsi: boots counted on the disk; resets until boots=N (--on-reboot=restart)") {
  static const char kMarker[16] = "microvm-restart";
  setup(false);
  need_disk();
  struct scsi_lun *l = &disk;
  uint8_t cdb[16] = {0}; /* TEST UNIT READY */
  struct vscsi_req *r = scsi_cmd(l, cdb, 6, VSCSI_DIR_NONE, NULL, 0);
  if (!scsi_check(r, 0x6, 0x29, -1))
    test_fail("the first TEST UNIT READY gave %s, not the power-on unit attention 06/29", RES(r));
  scsi_wait_ready(l, 5000000, false);
  scsi_read_capacity(l, true);
  uint8_t *buf = dma_alloc(l->block_size);
  const uint64_t lba = l->blocks - 1;
  r = scsi_rw(l, false, 16, lba, 1, false, buf);
  if (!scsi_good(r)) test_fail("READ(16) of the counter block: %s", RES(r));
  unsigned boots = 0;
  if (memcmp(buf, kMarker, sizeof(kMarker)) == 0) boots = buf[sizeof(kMarker)];
  boots++;
  const unsigned want = (unsigned)arg_u64("boots", 2);
  printf("scsi-restart: boot %u of %u\n", boots, want);
  memset(buf, 0, l->block_size);
  memcpy(buf, kMarker, sizeof(kMarker));
  buf[sizeof(kMarker)] = (uint8_t)boots;
  r = scsi_rw(l, true, 16, lba, 1, true, buf);
  if (!scsi_good(r)) test_fail("WRITE(16) FUA of the counter block: %s", RES(r));
  if (boots >= want) return;
  i8042_reset("scsi-restart: resetting through the i8042");
}

/* ============================================================================================
 * scsi-big-writes
 */

#define BIG_MAX_PER_QUEUE 16

/* Large writes from one guest buffer, per_queue=N (default 4) of them in flight on every request
 * queue at once, mib=M (default 8) each, all to the same blocks from lba=L (default 8192).
 * misaligned=1 (the default) puts the buffer one byte past a page: a cache=none disk (O_DIRECT)
 * must copy every byte through the queue's bounce memory, which the VMM bounds per queue (H6 of
 * docs/security.md: such a guest once drove the VMM's peak RSS to 0.7-0.9 GB).
 * misaligned=0 sends the same writes page-aligned, with nothing to bounce: the integration test
 * compares the VMM's peak RSS of the two runs. Every write must complete GOOD, and the first and
 * last block read back as written. */
GUEST_TEST_NAMED(scsi_big_writes, "scsi-big-writes",
                 "virtio-scsi: large writes from a misaligned buffer on every request queue at "
                 "once (per_queue=N mib=M misaligned=0|1)") {
  setup(arg_u64("verbose", 0) != 0);
  need_disk();
  scsi_wait_ready(&disk, 5000000, false);
  scsi_read_capacity(&disk, true);
  const bool misaligned = arg_u64("misaligned", 1) != 0;
  const unsigned per_queue = (unsigned)arg_u64("per_queue", 4);
  const uint64_t mib = arg_u64("mib", 8);
  const uint64_t lba = arg_u64("lba", 8192);
  if (per_queue == 0 || per_queue > BIG_MAX_PER_QUEUE)
    test_fail("per_queue must be 1..%u", BIG_MAX_PER_QUEUE);
  if (mib == 0 || mib > 31) test_fail("mib must be 1..31 (a WRITE(10) of 512-byte blocks)");
  const uint32_t bytes = (uint32_t)(mib << 20), blocks = bytes / disk.block_size;
  if (lba + blocks > disk.blocks)
    test_fail("the disk (%lu blocks) is too small for lba=%lu mib=%lu", disk.blocks, lba, mib);
  static struct vscsi_req reqs[VSCSI_MAX_REQUEST_QUEUES][BIG_MAX_PER_QUEUE];
  uint8_t *area = dma_alloc(bytes + 4096);
  uint8_t *data = area + (misaligned ? 1 : 0);
  struct pattern_key key;
  pattern_key_init(&key, 0xb1b10000u);
  pattern_fill(&key, data, lba, blocks);
  unsigned submitted = 0;
  for (unsigned r = 0; r < host.request_queues; r++) {
    const unsigned vq = vscsi_request_vq(r);
    for (unsigned i = 0; i < per_queue; i++) {
      struct vscsi_req *req = &reqs[r][i];
      if (!req->hdr) vscsi_req_init(&host, req);
      uint8_t cdb[16];
      unsigned n = scsi_cdb_rw(cdb, true, 10, lba, blocks, false);
      vscsi_req_set(req, disk.target, disk.lun, cdb, n, VSCSI_DIR_TO_DEVICE, data, bytes);
      if (!vscsi_submit(&host, vq, req)) test_fail("queue %u is full after %u requests", vq, i);
      submitted++;
    }
    vscsi_kick(&host, vq);
  }
  printf(
      "scsi-big-writes: %u WRITE(10) of %lu MiB from a %s buffer, %u on each of %u request "
      "queue(s)\n",
      submitted, mib, misaligned ? "misaligned (page + 1)" : "page-aligned", per_queue,
      host.request_queues);
  const uint64_t deadline = deadline_after_us(arg_u64("timeout_ms", 240000) * 1000);
  unsigned good = 0;
  for (unsigned r = 0; r < host.request_queues; r++) {
    const unsigned vq = vscsi_request_vq(r);
    for (unsigned i = 0; i < per_queue; i++) {
      struct vscsi_req *done = vscsi_wait(&host, vq, deadline);
      if (scsi_good(done)) {
        good++;
      } else {
        printf("scsi-big-writes: queue %u: %s\n", vq, RES(done));
      }
    }
  }
  if (good != submitted) test_fail("%u of %u writes completed GOOD", good, submitted);
  uint8_t *check = dma_alloc(disk.block_size);
  const uint64_t ends[2] = {lba, lba + blocks - 1};
  for (unsigned e = 0; e < 2; e++) {
    struct vscsi_req *req = scsi_rw(&disk, false, 10, ends[e], 1, false, check);
    char why[160];
    if (!scsi_good(req)) test_fail("READ(10) of block %lu: %s", ends[e], RES(req));
    if (!pattern_check(&key, check, ends[e], 1, why, sizeof(why)))
      test_fail("block %lu: %s", ends[e], why);
  }
  printf("scsi-big-writes: %u writes GOOD; first and last block read back as written\n", good);
}
