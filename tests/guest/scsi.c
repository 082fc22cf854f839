/*
 * SCSI command helpers over virtio-scsi (see scsi.h).
 */
#include "tests/guest/scsi.h"

#include "tests/guest/guest.h"

struct scsi_sense scsi_sense_of(const struct vscsi_req *req) {
  struct scsi_sense s = {false, 0, 0, 0};
  if (req->sense_len < 2) return s;
  uint8_t code = req->sense[0] & 0x7f;
  if (code == 0x70 || code == 0x71) { /* fixed format (SPC-4 4.5.3) */
    s.valid = true;
    s.key = req->sense[2] & 0x0f;
    if (req->sense_len > 12) s.asc = req->sense[12];
    if (req->sense_len > 13) s.ascq = req->sense[13];
  } else if (code == 0x72 || code == 0x73) { /* descriptor format (4.5.2) */
    s.valid = true;
    s.key = req->sense[1] & 0x0f;
    if (req->sense_len > 2) s.asc = req->sense[2];
    if (req->sense_len > 3) s.ascq = req->sense[3];
  }
  return s;
}

bool scsi_good(const struct vscsi_req *req) {
  return req->response == VIRTIO_SCSI_S_OK && req->status == SCSI_STATUS_GOOD;
}

bool scsi_check(const struct vscsi_req *req, uint8_t key, uint8_t asc, int ascq) {
  if (req->response != VIRTIO_SCSI_S_OK || req->status != SCSI_STATUS_CHECK_CONDITION) return false;
  struct scsi_sense s = scsi_sense_of(req);
  return s.valid && s.key == key && s.asc == asc && (ascq < 0 || s.ascq == ascq);
}

static const char *key_name(uint8_t key) {
  static const char *const names[16] = {
      "NO SENSE",       "RECOVERED ERROR", "NOT READY",      "MEDIUM ERROR",
      "HARDWARE ERROR", "ILLEGAL REQUEST", "UNIT ATTENTION", "DATA PROTECT",
      "BLANK CHECK",    "VENDOR SPECIFIC", "COPY ABORTED",   "ABORTED COMMAND",
      "reserved",       "VOLUME OVERFLOW", "MISCOMPARE",     "COMPLETED"};
  return names[key & 15];
}

static const char *asc_name(uint8_t asc, uint8_t ascq) {
  switch (asc) {
    case 0x00: return "NO ADDITIONAL SENSE INFORMATION";
    case 0x04: return "LOGICAL UNIT NOT READY";
    case 0x0c: return "WRITE ERROR";
    case 0x11: return "UNRECOVERED READ ERROR";
    case 0x1a: return "PARAMETER LIST LENGTH ERROR";
    case 0x20: return "INVALID COMMAND OPERATION CODE";
    case 0x21: return "LOGICAL BLOCK ADDRESS OUT OF RANGE";
    case 0x24: return "INVALID FIELD IN CDB";
    case 0x25: return "LOGICAL UNIT NOT SUPPORTED";
    case 0x26: return "INVALID FIELD IN PARAMETER LIST";
    case 0x27: return "WRITE PROTECTED";
    case 0x28: return "NOT READY TO READY CHANGE, MEDIUM MAY HAVE CHANGED";
    case 0x29:
      return ascq == 0 ? "POWER ON, RESET, OR BUS DEVICE RESET OCCURRED"
                       : "POWER ON OR RESET OCCURRED";
    case 0x2a: return "PARAMETERS CHANGED";
    case 0x3a:
      return ascq == 1   ? "MEDIUM NOT PRESENT - TRAY CLOSED"
             : ascq == 2 ? "MEDIUM NOT PRESENT - TRAY OPEN"
                         : "MEDIUM NOT PRESENT";
    case 0x3f: return "TARGET OPERATING CONDITIONS HAVE CHANGED";
    case 0x4b: return "DATA PHASE ERROR";
    case 0x53: return "MEDIA LOAD OR EJECT FAILED / MEDIUM REMOVAL PREVENTED";
    case 0x64: return "ILLEGAL MODE FOR THIS TRACK";
    default: return "";
  }
}

const char *scsi_sense_str(const struct vscsi_req *req, char *buf, size_t size) {
  struct scsi_sense s = scsi_sense_of(req);
  if (!s.valid) {
    snprintf(buf, size, "no sense (%u bytes)", req->sense_len);
  } else {
    snprintf(buf, size, "%02X/%02X/%02X", s.key, s.asc, s.ascq);
  }
  return buf;
}

const char *scsi_result_str(const struct vscsi_req *req, char *buf, size_t size) {
  if (req->response != VIRTIO_SCSI_S_OK) {
    snprintf(buf, size, "virtio response %s (%u)", vscsi_response_name(req->response),
             req->response);
  } else if (req->status == SCSI_STATUS_GOOD) {
    snprintf(buf, size, "GOOD");
  } else if (req->status == SCSI_STATUS_CHECK_CONDITION) {
    struct scsi_sense s = scsi_sense_of(req);
    if (s.valid) {
      const char *asc = asc_name(s.asc, s.ascq);
      snprintf(buf, size, "CHECK CONDITION %02X/%02X/%02X (%s%s%s)", s.key, s.asc, s.ascq,
               key_name(s.key), asc[0] ? ": " : "", asc);
    } else {
      snprintf(buf, size, "CHECK CONDITION without valid sense (%u bytes)", req->sense_len);
    }
  } else {
    snprintf(buf, size, "status 0x%02x", req->status);
  }
  return buf;
}

unsigned scsi_cdb_rw(uint8_t *cdb, bool write, unsigned size, uint64_t lba, uint32_t blocks,
                     bool fua) {
  memset(cdb, 0, 16);
  if (size == 10) {
    cdb[0] = write ? SCSI_WRITE_10 : SCSI_READ_10;
    cdb[1] = fua ? 0x08 : 0;
    put_be32(cdb + 2, (uint32_t)lba);
    put_be16(cdb + 7, (uint16_t)blocks);
    return 10;
  }
  cdb[0] = write ? SCSI_WRITE_16 : SCSI_READ_16;
  cdb[1] = fua ? 0x08 : 0;
  put_be64(cdb + 2, lba);
  put_be32(cdb + 10, blocks);
  return 16;
}

unsigned scsi_cdb_sync_cache(uint8_t *cdb, unsigned size, uint64_t lba, uint32_t blocks) {
  memset(cdb, 0, 16);
  if (size == 10) {
    cdb[0] = SCSI_SYNCHRONIZE_CACHE_10;
    put_be32(cdb + 2, (uint32_t)lba);
    put_be16(cdb + 7, (uint16_t)blocks);
    return 10;
  }
  cdb[0] = SCSI_SYNCHRONIZE_CACHE_16;
  put_be64(cdb + 2, lba);
  put_be32(cdb + 10, blocks);
  return 16;
}

unsigned scsi_cdb_inquiry(uint8_t *cdb, bool evpd, uint8_t page, uint16_t alloc) {
  memset(cdb, 0, 6);
  cdb[0] = SCSI_INQUIRY;
  cdb[1] = evpd ? 1 : 0;
  cdb[2] = page;
  put_be16(cdb + 3, alloc);
  return 6;
}

void scsi_lun_init(struct scsi_lun *l, struct vscsi *h, uint8_t target, uint16_t lun, unsigned vq) {
  memset(l, 0, sizeof(*l));
  l->h = h;
  l->present = true;
  l->target = target;
  l->lun = lun;
  l->vq = vq;
  vscsi_req_init(h, &l->req);
  l->buf = dma_alloc(SCSI_SCRATCH_SIZE);
}

struct vscsi_req *scsi_cmd_at(struct vscsi *h, struct vscsi_req *req, unsigned vq, uint8_t target,
                              uint16_t lun, const uint8_t *cdb, unsigned cdb_len,
                              enum vscsi_dir dir, void *data, uint32_t len) {
  vscsi_req_set(req, target, lun, cdb, cdb_len, dir, data, len);
  vscsi_exec(h, vq, req, SCSI_TIMEOUT_US);
  return req;
}

struct vscsi_req *scsi_cmd(struct scsi_lun *l, const uint8_t *cdb, unsigned cdb_len,
                           enum vscsi_dir dir, void *data, uint32_t len) {
  return scsi_cmd_at(l->h, &l->req, l->vq, l->target, l->lun, cdb, cdb_len, dir, data, len);
}

static void copy_trimmed(char *out, const uint8_t *in, unsigned n) {
  memcpy(out, in, n);
  out[n] = 0;
  for (int i = (int)n - 1; i >= 0 && (out[i] == ' ' || out[i] == 0); i--) out[i] = 0;
  for (unsigned i = 0; i < n && out[i]; i++) {
    if (out[i] < 0x20 || out[i] > 0x7e) out[i] = '?';
  }
}

bool scsi_inquiry_std(struct scsi_lun *l) {
  uint8_t cdb[6];
  memset(l->buf, 0, 96);
  struct vscsi_req *r =
      scsi_cmd(l, cdb, scsi_cdb_inquiry(cdb, false, 0, 36), VSCSI_DIR_FROM_DEVICE, l->buf, 36);
  if (!scsi_good(r)) return false;
  l->type = l->buf[0] & 0x1f;
  l->removable = (l->buf[1] & 0x80) != 0;
  copy_trimmed(l->vendor, l->buf + 8, 8);
  copy_trimmed(l->product, l->buf + 16, 16);
  copy_trimmed(l->revision, l->buf + 32, 4);
  return (l->buf[0] >> 5) == 0;
}

void scsi_wait_ready(struct scsi_lun *l, uint64_t timeout_us, bool verbose) {
  uint8_t cdb[6] = {SCSI_TEST_UNIT_READY};
  uint64_t deadline = deadline_after_us(timeout_us);
  char text[160];
  for (;;) {
    struct vscsi_req *r = scsi_cmd(l, cdb, 6, VSCSI_DIR_NONE, NULL, 0);
    if (scsi_good(r)) return;
    struct scsi_sense s = scsi_sense_of(r);
    bool retry = r->response == VIRTIO_SCSI_S_OK && r->status == SCSI_STATUS_CHECK_CONDITION &&
                 s.valid &&
                 (s.key == SENSE_UNIT_ATTENTION ||
                  (s.key == SENSE_NOT_READY && s.asc == 0x04 && s.ascq == 0x01));
    if (r->response == VIRTIO_SCSI_S_OK && r->status == SCSI_STATUS_BUSY) retry = true;
    if (verbose || !retry) {
      printf("scsi %u:%u: TEST UNIT READY -> %s\n", l->target, l->lun,
             scsi_result_str(r, text, sizeof(text)));
    }
    if (!retry)
      test_fail("%u:%u not ready: %s", l->target, l->lun, scsi_result_str(r, text, sizeof(text)));
    if (deadline_passed(deadline))
      test_fail("%u:%u: still not ready after %lu ms", l->target, l->lun, timeout_us / 1000);
    udelay(1000);
  }
}

void scsi_read_capacity(struct scsi_lun *l, bool use16) {
  uint8_t cdb[16] = {0};
  char text[160];
  struct vscsi_req *r;
  memset(l->buf, 0, 32);
  if (use16) {
    cdb[0] = SCSI_SERVICE_ACTION_IN_16;
    cdb[1] = SCSI_SAI_READ_CAPACITY_16;
    put_be32(cdb + 10, 32);
    r = scsi_cmd(l, cdb, 16, VSCSI_DIR_FROM_DEVICE, l->buf, 32);
    if (!scsi_good(r))
      test_fail("READ CAPACITY(16) on %u:%u: %s", l->target, l->lun,
                scsi_result_str(r, text, sizeof(text)));
    l->blocks = be64(l->buf) + 1;
    l->block_size = be32(l->buf + 8);
  } else {
    cdb[0] = SCSI_READ_CAPACITY_10;
    r = scsi_cmd(l, cdb, 10, VSCSI_DIR_FROM_DEVICE, l->buf, 8);
    if (!scsi_good(r))
      test_fail("READ CAPACITY(10) on %u:%u: %s", l->target, l->lun,
                scsi_result_str(r, text, sizeof(text)));
    l->blocks = (uint64_t)be32(l->buf) + 1;
    l->block_size = be32(l->buf + 4);
  }
  if (l->block_size == 0 || (l->block_size & 511)) {
    test_fail("%u:%u reports a block size of %u", l->target, l->lun, l->block_size);
  }
}

struct vscsi_req *scsi_rw(struct scsi_lun *l, bool write, unsigned cdb_size, uint64_t lba,
                          uint32_t blocks, bool fua, void *buf) {
  uint8_t cdb[16];
  unsigned n = scsi_cdb_rw(cdb, write, cdb_size, lba, blocks, fua);
  return scsi_cmd(l, cdb, n, write ? VSCSI_DIR_TO_DEVICE : VSCSI_DIR_FROM_DEVICE, buf,
                  blocks * l->block_size);
}

static bool parse_tl(const char *s, uint8_t *target, uint16_t *lun) {
  /* "T:L" */
  char tmp[24];
  size_t n = strnlen(s, sizeof(tmp) - 1);
  memcpy(tmp, s, n);
  tmp[n] = 0;
  char *colon = strchr(tmp, ':');
  if (!colon) return false;
  *colon = 0;
  uint64_t t, l;
  if (!parse_u64(tmp, &t) || !parse_u64(colon + 1, &l) || t > 255 || l > 16383) return false;
  *target = (uint8_t)t;
  *lun = (uint16_t)l;
  return true;
}

void scsi_discover(struct vscsi *h, struct scsi_lun *disk, struct scsi_lun *cd, bool verbose) {
  disk->present = cd->present = false;
  unsigned vq = vscsi_request_vq(0);
  static struct vscsi_req req;
  static uint8_t *buf;
  if (!buf) {
    vscsi_req_init(h, &req);
    buf = dma_alloc(4096);
  }
  char text[160];
  uint8_t target;
  uint16_t lun;
  const char *arg;
  if ((arg = arg_get("disk")) != NULL) {
    if (!parse_tl(arg, &target, &lun)) test_fail("disk=T:L expected, got '%s'", arg);
    scsi_lun_init(disk, h, target, lun, vq);
  }
  if ((arg = arg_get("cd")) != NULL) {
    if (!parse_tl(arg, &target, &lun)) test_fail("cd=T:L expected, got '%s'", arg);
    scsi_lun_init(cd, h, target, lun, vq);
  }
  unsigned max_scan = (unsigned)arg_u64("scan_targets", 8);
  if (max_scan > (unsigned)h->cfg.max_target + 1) max_scan = h->cfg.max_target + 1u;
  for (unsigned t = 0; t < max_scan && !(disk->present && cd->present); t++) {
    uint8_t cdb[12] = {SCSI_REPORT_LUNS};
    put_be32(cdb + 6, 4096);
    memset(buf, 0, 4096);
    struct vscsi_req *r =
        scsi_cmd_at(h, &req, vq, (uint8_t)t, 0, cdb, 12, VSCSI_DIR_FROM_DEVICE, buf, 4096);
    uint16_t luns[64];
    unsigned nluns = 0;
    if (r->response == VIRTIO_SCSI_S_BAD_TARGET) continue;
    if (scsi_good(r)) {
      uint32_t bytes = be32(buf);
      for (uint32_t off = 8; off + 8 <= 8 + bytes && off + 8 <= 4096 && nluns < 64; off += 8) {
        unsigned method = buf[off] >> 6;
        if (method == 0) {
          luns[nluns++] = buf[off + 1];
        } else if (method == 1) {
          luns[nluns++] = (uint16_t)(((buf[off] & 0x3f) << 8) | buf[off + 1]);
        }
      }
      if (verbose) printf("scsi: target %u: REPORT LUNS lists %u LUN(s)\n", t, nluns);
    } else {
      if (verbose)
        printf("scsi: target %u: REPORT LUNS -> %s; trying LUN 0\n", t,
               scsi_result_str(r, text, sizeof(text)));
      luns[nluns++] = 0;
    }
    for (unsigned i = 0; i < nluns; i++) {
      struct scsi_lun probe;
      scsi_lun_init(&probe, h, (uint8_t)t, luns[i], vq);
      if (!scsi_inquiry_std(&probe)) continue;
      if (verbose) {
        printf("scsi: %u:%u type 0x%02x%s \"%s\" \"%s\" \"%s\"\n", t, luns[i], probe.type,
               probe.removable ? " removable" : "", probe.vendor, probe.product, probe.revision);
      }
      if (probe.type == SCSI_TYPE_DISK && !disk->present) {
        *disk = probe;
        vscsi_req_init(h, &disk->req);
      } else if (probe.type == SCSI_TYPE_ROM && !cd->present) {
        *cd = probe;
        vscsi_req_init(h, &cd->req);
      }
    }
  }
  /* Explicit ones still need their INQUIRY data. */
  if (disk->present && !disk->vendor[0]) scsi_inquiry_std(disk);
  if (cd->present && !cd->vendor[0]) scsi_inquiry_std(cd);
}
