/*
 * scsi-hostile: a guest that breaks the virtio-scsi rules on purpose. Each case does one wrong
 * thing and checks what the device does about it:
 *
 *   - a broken ring or chain (loops, a chain longer than the queue, head or avail idx out of range,
 *     buffers outside RAM or wrapping 2^64, more than 4 GiB in one chain, bad indirect tables, a
 *     readable buffer after a writable one, a response buffer too short for the response, a chain
 *     made available twice) must end in DEVICE_NEEDS_RESET (virtio 1.2 2.1.2, read from
 *     device_status; the configuration-change MSI-X interrupt and the ISR are reported), the device
 *     must not touch the broken queue any more (no used entry), the other request queue and the
 *     control queue must keep working, and after a reset (status 0, full re-init) a WRITE FUA and a
 *     READ must work again;
 *   - bad set-up (queue sizes 0, 3, twice the maximum; rings misaligned, outside RAM, in MMIO,
 *     across the end of RAM; DRIVER_OK without FEATURES_OK, cleared status bits, unoffered
 *     features, a queue enabled after DRIVER_OK) is refused (queue_enable reads 0, FEATURES_OK does
 *     not stick, NEEDS_RESET);
 *   - a malformed request whose response buffer is usable gets a virtio-scsi error response
 *     (FAILURE for a short header or data both ways, BAD_TARGET for a bad LUN field) and the queue
 *     goes on; a transfer longer than the buffer gets OVERRUN or CHECK CONDITION 05/24/00;
 *   - malformed CDBs (every opcode 0x00-0xff, garbage/zeros/0xff, data in, out or none, on the
 *     disk and the CD) get GOOD, OVERRUN or CHECK CONDITION with a sensible sense key, and nothing
 *     hangs or writes outside its buffers;
 *   - odd control-queue requests (bad LUNs, unknown types and subtypes) get an answer;
 *   - junk that must change nothing: transport registers, doorbells, MSI-X entries, PCI config.
 *   - legal but unusual requests: driver-set cdb_size/sense_size (5.6.4), tiny scatter lists.
 *
 * Arguments: case=NAME (default all; case=list prints the names), seed=N (the disk image's pattern
 * seed: reads of untouched blocks are pattern-checked, else only their headers), fuzz_seed=N
 * (garbage CDBs, default 1), nr_timeout_ms=N (how long to wait for DEVICE_NEEDS_RESET, default
 * 2000), verbose=1 (every fuzzed CDB), and the common scsi-* arguments (indirect=, event_idx=,
 * qsize=, msix=, ...). Prints one line per case, "hostile: <case>: <what happened>", and for a case
 * that went wrong "UNEXPECTED: ..." in it and "hostile: <case>: FAIL"; "NOTE:" marks what is odd
 * but tolerated. Writes only at disk LBAs capacity * 3/8 .. + 4400 (and garbage where a fuzzed WRITE
 * lands); reads capacity * 5/8 .. + 8 as the untouched reference. Meant for --scsi-queues=2 (one request
 * queue works too: the other-queue checks then say they were skipped).
 */
#include "tests/guest/guest.h"
#include "tests/guest/pattern.h"
#include "tests/guest/scsi.h"
#include "tests/guest/virtio_pci.h"
#include "tests/guest/virtio_scsi.h"
#include "tests/guest/virtqueue.h"

#define REQ_HDR_FIXED 19  /* lun[8] id task_attr prio crn */
#define RESP_HDR_FIXED 12 /* sense_len resid status_qualifier status response */
#define CMD_TIMEOUT_US 5000000ull
#define POISON 0xff

static struct vscsi host;
static struct vscsi_options base_opts;
static struct scsi_lun disk, cd;
static bool have_seed;
static uint32_t image_seed;
static struct pattern_key image_key;
static uint64_t nr_timeout_us;
static bool verbose;
static unsigned case_failures;
static unsigned case_number;

/* DMA scratch: raw request pieces, data buffers, indirect tables. */
static uint8_t *raw_hdr, *raw_resp, *raw_data, *raw_data2;
static struct virtq_desc *raw_table, *raw_table2;
static uint8_t *ctrl_req, *ctrl_resp;
static uint8_t *check_buf;
static struct vscsi_req hreq, other_req, check_req;

static uint64_t ram_top;            /* first byte past the highest RAM region */
static uint64_t big_base, big_size; /* the largest RAM region (for the 4 GiB chain) */

/* Text of the current case's report, built up piece by piece and printed at the end. */
static char report[4096];
static size_t report_len;
static bool case_failed;
static bool tolerate_slow_reset;
/* A reset that takes longer than this hung (it waited on the broken ring). Shorter ones pass: how
 * long a reset takes is a benchmark's business, and under nested emulation (tests run in L1 on
 * hosts without KVM, docs/testing.md) a busy moment lasts seconds. Over 50 ms gets a NOTE. */
#define RESET_HANG_US 10000000ull

__attribute__((format(printf, 1, 2))) static void note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (report_len < sizeof(report)) {
    report_len += (size_t)vsnprintf(report + report_len, sizeof(report) - report_len, fmt, ap);
    if (report_len > sizeof(report)) report_len = sizeof(report);
  }
  va_end(ap);
}

__attribute__((format(printf, 1, 2))) static void bad(const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  note("%sUNEXPECTED: %s", report_len ? "; " : "", buf);
  case_failed = true;
}

static const char *result_str(const struct vscsi_req *r) {
  static char text[192];
  return scsi_result_str(r, text, sizeof(text));
}

static void put_le(uint8_t *p, uint64_t v, unsigned n) {
  for (unsigned i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le(const uint8_t *p, unsigned n) {
  uint64_t v = 0;
  for (unsigned i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static uint64_t xorshift64(uint64_t *state) {
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *state = x;
}

/* ============================================================================================
 * Device state
 */

static uint64_t common_addr(unsigned off) { return host.vp.common.address + off; }
static uint8_t dev_status(void) { return virtio_pci_status(&host.vp); }
static bool needs_reset(void) { return dev_status() & VIRTIO_STATUS_DEVICE_NEEDS_RESET; }

static void write64(unsigned lo, uint64_t value);
static void raw_to_features_ok(void);

static unsigned main_vq(void) { return vscsi_request_vq(0); }
static bool have_other(void) { return host.request_queues >= 2; }
static unsigned other_vq(void) { return vscsi_request_vq(1); }

/* (Re)initialises the device as the scsi-* tests do; the LUNs found at first keep working. */
static void device_init(const struct vscsi_options *opt) {
  vscsi_init(&host, opt);
  disk.req.in_flight = cd.req.in_flight = false;
  hreq.in_flight = other_req.in_flight = check_req.in_flight = false;
}

/* ============================================================================================
 * Requests with chosen buffers, through the driver's own ring bookkeeping (the chain itself is
 * well-formed, its contents are not).
 */

static void fill_hdr(uint8_t *hdr, uint8_t target, uint16_t lun, const uint8_t *cdb,
                     unsigned cdb_len) {
  memset(hdr, 0, host.hdr_size);
  hdr[0] = 1;
  hdr[1] = target;
  hdr[2] = (uint8_t)(0x40 | ((lun >> 8) & 0x3f));
  hdr[3] = (uint8_t)lun;
  put_le(hdr + 8, host.next_tag++, 8);
  if (cdb_len > host.cfg.cdb_size) cdb_len = host.cfg.cdb_size;
  memcpy(hdr + REQ_HDR_FIXED, cdb, cdb_len);
}

/* Decodes req->resp after the device returned it (no test_fail: the caller judges). */
static void decode_resp(struct vscsi_req *req, uint32_t len) {
  const uint8_t *r = req->resp;
  req->in_flight = false;
  req->complete_tsc = rdtsc();
  req->used_len = len;
  req->sense_len = (uint32_t)get_le(r, 4);
  req->residual = (uint32_t)get_le(r + 4, 4);
  req->status_qualifier = (uint16_t)get_le(r + 8, 2);
  req->status = r[10];
  req->response = r[11];
  uint32_t copy = req->sense_len < VSCSI_MAX_SENSE ? req->sense_len : VSCSI_MAX_SENSE;
  if (copy > host.cfg.sense_size) copy = host.cfg.sense_size;
  memset(req->sense, 0, sizeof(req->sense));
  memcpy(req->sense, r + RESP_HDR_FIXED, copy);
}

static bool resp_unwritten(const struct vscsi_req *req) {
  return req->sense_len == 0xffffffffu && req->response == POISON;
}

/* Queues `req` (cookie) with these buffers and notifies. */
static bool submit_bufs(unsigned vq, struct vscsi_req *req, const struct virtq_buf *bufs,
                        unsigned n_out, unsigned n_in) {
  memset(req->resp, POISON, RESP_HDR_FIXED);
  req->submit_tsc = rdtsc();
  if (!virtq_add(&host.q[vq].vq, bufs, n_out, n_in, req)) return false;
  req->in_flight = true;
  virtq_kick(&host.q[vq].vq);
  return true;
}

/* Waits for `req` on this queue; false on timeout (then it stays in flight). */
static bool wait_req(unsigned vq, struct vscsi_req *req, uint64_t timeout_us) {
  uint64_t deadline = deadline_after_us(timeout_us);
  for (;;) {
    uint32_t len;
    struct vscsi_req *done = virtq_get(&host.q[vq].vq, &len);
    if (done) {
      decode_resp(done, len);
      if (done == req) return true;
      continue; /* not ours (cannot happen: one at a time) */
    }
    if (deadline_passed(deadline)) return false;
    cpu_relax();
  }
}

/* A normal command (header, optional data) with a chosen queue; false on timeout. */
static bool exec_cmd(unsigned vq, struct vscsi_req *req, uint8_t target, uint16_t lun,
                     const uint8_t *cdb, unsigned cdb_len, enum vscsi_dir dir, void *data,
                     uint32_t len, uint64_t timeout_us) {
  fill_hdr(req->hdr, target, lun, cdb, cdb_len);
  struct virtq_buf bufs[4];
  unsigned n = 0, n_out;
  bufs[n++] = (struct virtq_buf){dma_addr(req->hdr), host.hdr_size, false};
  if (dir == VSCSI_DIR_TO_DEVICE && len) bufs[n++] = (struct virtq_buf){dma_addr(data), len, false};
  n_out = n;
  bufs[n++] = (struct virtq_buf){dma_addr(req->resp), host.resp_size, true};
  if (dir == VSCSI_DIR_FROM_DEVICE && len)
    bufs[n++] = (struct virtq_buf){dma_addr(data), len, true};
  if (!submit_bufs(vq, req, bufs, n_out, n - n_out)) return false;
  return wait_req(vq, req, timeout_us);
}

/* ============================================================================================
 * Health checks
 */

static uint64_t check_lba_write(void) { return disk.blocks * 3 / 8; } /* rewritten after resets */
static uint64_t check_lba_read(void) { return disk.blocks * 5 / 8; }  /* never written: pattern */
#define CHECK_BLOCKS 8u

/* READ of untouched blocks on `vq`, pattern-checked (with seed=) or header-checked. */
static bool read_check(unsigned vq, struct vscsi_req *req, const char *who) {
  uint8_t cdb[16];
  uint32_t per = disk.block_size / PATTERN_BLOCK;
  uint64_t lba = check_lba_read();
  unsigned n = scsi_cdb_rw(cdb, false, 10, lba, CHECK_BLOCKS, false);
  memset(check_buf, 0, CHECK_BLOCKS * disk.block_size);
  if (!exec_cmd(vq, req, disk.target, disk.lun, cdb, n, VSCSI_DIR_FROM_DEVICE, check_buf,
                CHECK_BLOCKS * disk.block_size, CMD_TIMEOUT_US)) {
    bad("%s: READ on queue %u did not complete", who, vq);
    return false;
  }
  /* A reset (or an LU reset) leaves a unit attention: take it and retry once. */
  if (scsi_check(req, SENSE_UNIT_ATTENTION, 0x29, -1) ||
      scsi_check(req, SENSE_UNIT_ATTENTION, 0x2a, -1)) {
    if (!exec_cmd(vq, req, disk.target, disk.lun, cdb, n, VSCSI_DIR_FROM_DEVICE, check_buf,
                  CHECK_BLOCKS * disk.block_size, CMD_TIMEOUT_US)) {
      bad("%s: READ on queue %u did not complete", who, vq);
      return false;
    }
  }
  if (!scsi_good(req)) {
    bad("%s: READ on queue %u: %s", who, vq, result_str(req));
    return false;
  }
  char why[160];
  if (have_seed) {
    if (!pattern_check(&image_key, check_buf, lba * per, (uint64_t)CHECK_BLOCKS * per, why,
                       sizeof(why))) {
      bad("%s: READ on queue %u returned wrong data: %s", who, vq, why);
      return false;
    }
  } else if (memcmp(check_buf, "MVMPATRN", 8) != 0 || get_le(check_buf + 12, 8) != lba * per) {
    bad("%s: READ on queue %u: block %lu has no pattern header", who, vq, lba);
    return false;
  }
  return true;
}

/* A TMF that changes nothing (QUERY TASK SET) on the control queue; returns the response byte or
 * -1 when no answer came. */
static int ctrl_query(void) {
  uint8_t req[24] = {0};
  put_le(req, VIRTIO_SCSI_T_TMF, 4);
  put_le(req + 4, VIRTIO_SCSI_T_TMF_QUERY_TASK_SET, 4);
  req[8] = 1;
  req[9] = disk.target;
  req[10] = (uint8_t)(0x40 | ((disk.lun >> 8) & 0x3f));
  req[11] = (uint8_t)disk.lun;
  memcpy(ctrl_req, req, sizeof(req));
  ctrl_resp[0] = POISON;
  struct virtq_buf bufs[2] = {{dma_addr(ctrl_req), 24, false}, {dma_addr(ctrl_resp), 1, true}};
  struct virtq *vq = &host.q[VSCSI_CONTROL_QUEUE].vq;
  if (!virtq_add(vq, bufs, 1, 1, ctrl_req)) return -1;
  virtq_kick(vq);
  uint64_t deadline = deadline_after_us(CMD_TIMEOUT_US);
  uint32_t len;
  while (!virtq_get(vq, &len)) {
    if (deadline_passed(deadline)) return -1;
    cpu_relax();
  }
  return ctrl_resp[0];
}

/* Whether the parts of the device that were not broken still work (`broken`: the broken queue's
 * index, or -1). */
static void check_survivors(int broken) {
  if (broken != (int)main_vq()) {
    if (read_check(main_vq(), &check_req, "first request queue"))
      note("; queue %u READ verified", main_vq());
  }
  if (have_other() && broken != (int)other_vq()) {
    if (read_check(other_vq(), &other_req, "other request queue"))
      note("; queue %u READ verified", other_vq());
  } else if (!have_other()) {
    note("; (one request queue: no other request queue to check)");
  }
  if (broken != VSCSI_CONTROL_QUEUE) {
    int r = ctrl_query();
    if (r < 0) {
      bad("control queue: QUERY TASK SET got no answer");
    } else {
      note("; control queue QUERY TASK SET -> %d", r);
    }
  }
}

/* Reset (status 0), full re-initialisation, then WRITE FUA + READ on the first request queue and a
 * READ on the second. */
static void reset_and_verify(void) {
  /* The reset (status 0) drains the device: time it, a stuck request shows as a slow reset. */
  uint64_t t0 = rdtsc();
  virtio_pci_reset(&host.vp);
  uint64_t reset_us = tsc_to_us(rdtsc() - t0);
  device_init(&base_opts);
  uint8_t st = dev_status();
  if (st & (VIRTIO_STATUS_DEVICE_NEEDS_RESET | VIRTIO_STATUS_FAILED)) {
    bad("status 0x%02x right after the re-initialisation", st);
    return;
  }
  /* The reset is a bus reset for the LUNs: swallow the unit attention. */
  uint8_t tur[6] = {SCSI_TEST_UNIT_READY};
  for (unsigned i = 0; i < 4; i++) {
    if (!exec_cmd(main_vq(), &check_req, disk.target, disk.lun, tur, 6, VSCSI_DIR_NONE, NULL, 0,
                  CMD_TIMEOUT_US)) {
      bad("after reset: TEST UNIT READY did not complete");
      return;
    }
    if (scsi_good(&check_req)) break;
  }
  if (!scsi_good(&check_req)) {
    bad("after reset: TEST UNIT READY: %s", result_str(&check_req));
    return;
  }
  struct pattern_key key;
  pattern_key_init(&key, 0x40571100u + case_number);
  uint32_t per = disk.block_size / PATTERN_BLOCK;
  uint64_t lba = check_lba_write();
  uint8_t cdb[16];
  unsigned n = scsi_cdb_rw(cdb, true, 10, lba, CHECK_BLOCKS, true);
  pattern_fill(&key, check_buf, lba * per, (uint64_t)CHECK_BLOCKS * per);
  if (!exec_cmd(main_vq(), &check_req, disk.target, disk.lun, cdb, n, VSCSI_DIR_TO_DEVICE,
                check_buf, CHECK_BLOCKS * disk.block_size, CMD_TIMEOUT_US) ||
      !scsi_good(&check_req)) {
    bad("after reset: WRITE(10) FUA: %s",
        check_req.in_flight ? "no completion" : result_str(&check_req));
    return;
  }
  memset(check_buf, 0, CHECK_BLOCKS * disk.block_size);
  n = scsi_cdb_rw(cdb, false, 10, lba, CHECK_BLOCKS, false);
  if (!exec_cmd(main_vq(), &check_req, disk.target, disk.lun, cdb, n, VSCSI_DIR_FROM_DEVICE,
                check_buf, CHECK_BLOCKS * disk.block_size, CMD_TIMEOUT_US) ||
      !scsi_good(&check_req)) {
    bad("after reset: READ(10): %s",
        check_req.in_flight ? "no completion" : result_str(&check_req));
    return;
  }
  char why[160];
  if (!pattern_check(&key, check_buf, lba * per, (uint64_t)CHECK_BLOCKS * per, why, sizeof(why))) {
    bad("after reset: read back: %s", why);
    return;
  }
  note("; after reset (%lu ms): WRITE FUA + READ verified", reset_us / 1000);
  if (reset_us > RESET_HANG_US && !tolerate_slow_reset) {
    bad("the reset took %lu ms: it hung", reset_us / 1000);
  } else if (reset_us > 50000) {
    note("; NOTE: the reset took %lu ms%s", reset_us / 1000,
         tolerate_slow_reset ? " (it waited for a request the device had not submitted)" : "");
  }
  if (have_other() && read_check(other_vq(), &other_req, "after reset"))
    note(", queue %u READ verified", other_vq());
}

/* Waits for DEVICE_NEEDS_RESET; notes the status, the configuration-change interrupt and ISR. */
static bool expect_needs_reset(uint64_t irqs_before) {
  uint64_t t0 = rdtsc(), deadline = deadline_after_us(nr_timeout_us);
  uint8_t st;
  while (!((st = dev_status()) & VIRTIO_STATUS_DEVICE_NEEDS_RESET)) {
    if (deadline_passed(deadline)) {
      bad("no DEVICE_NEEDS_RESET within %lu ms (status 0x%02x)", nr_timeout_us / 1000, st);
      return false;
    }
    udelay(200);
  }
  uint64_t ms = tsc_to_us(rdtsc() - t0) / 1000;
  /* Let the configuration-change MSI-X message in (the handler counts it). */
  irq_enable();
  udelay(3000);
  irq_disable();
  uint8_t isr = mmio_read8(host.vp.isr.address);
  note("NEEDS_RESET after %lu ms (status 0x%02x, config interrupt %s, ISR 0x%02x)", ms, st,
       host.config_msix_entry == VIRTIO_MSI_NO_VECTOR ? "n/a (no MSI-X)"
       : host.config_irqs != irqs_before              ? "yes"
                                                      : "no",
       isr);
  return true;
}

/* ============================================================================================
 * Raw ring writes: descriptors and the available ring written directly, bypassing the driver's
 * free list (the queue is thrown away by the reset that follows).
 */

static void set_desc(struct virtq_desc *d, uint64_t addr, uint32_t len, uint16_t flags,
                     uint16_t next) {
  d->addr = addr;
  d->len = len;
  d->flags = flags;
  d->next = next;
}

/* Publishes `head` in the next available slot, moves avail idx by `advance` and rings the doorbell
 * unconditionally. */
static void raw_publish(struct virtq *vq, uint16_t head, uint16_t advance) {
  vq->avail->ring[vq->avail_idx & (vq->size - 1)] = head;
  wmb();
  vq->avail_idx = (uint16_t)(vq->avail_idx + advance);
  *(volatile uint16_t *)&vq->avail->idx = vq->avail_idx;
  mb();
  mmio_write16(vq->notify_addr, vq->index);
}

static uint16_t used_idx(const struct virtq *vq) {
  return *(volatile const uint16_t *)&vq->used->idx;
}

/* A TEST UNIT READY header for the disk in raw_hdr (the body of every raw chain). */
static void raw_tur_hdr(void) {
  uint8_t tur[6] = {SCSI_TEST_UNIT_READY};
  fill_hdr(raw_hdr, disk.target, disk.lun, tur, 6);
  memset(raw_resp, POISON, 512);
}
/* A READ(10) of one block header in raw_hdr. */
static void raw_read_hdr(uint32_t blocks) {
  uint8_t cdb[16];
  unsigned n = scsi_cdb_rw(cdb, false, 10, check_lba_read(), blocks, false);
  fill_hdr(raw_hdr, disk.target, disk.lun, cdb, n);
  memset(raw_resp, POISON, 512);
}

/* The common end of a ring-breaking case on queue `vq`: NEEDS_RESET, no used entry, the other
 * queues still work, reset, WRITE/READ. */
static void finish_broken(struct virtq *vq, uint16_t used_before, uint64_t irqs_before) {
  if (expect_needs_reset(irqs_before)) {
    uint16_t u = used_idx(vq);
    if (u != used_before) {
      bad("queue %u: used idx moved %u -> %u after the break", vq->index, used_before, u);
    } else {
      note("; queue %u: no used entry", vq->index);
    }
    check_survivors(vq->index);
  }
  reset_and_verify();
}

/* Builds a chain with `build` on the first request queue and expects NEEDS_RESET. */
#define BROKEN_CASE_BEGIN                   \
  struct virtq *vq = &host.q[main_vq()].vq; \
  uint16_t used_before = used_idx(vq);      \
  uint64_t irqs_before = host.config_irqs;  \
  struct virtq_desc *d = vq->desc;          \
  (void)d;                                  \
  raw_tur_hdr();
#define BROKEN_CASE_END finish_broken(vq, used_before, irqs_before)

static void case_desc_loop_self(void) {
  BROKEN_CASE_BEGIN
  set_desc(&d[0], dma_addr(raw_hdr), host.hdr_size, VIRTQ_DESC_F_NEXT, 0);
  raw_publish(vq, 0, 1);
  BROKEN_CASE_END;
}

static void case_desc_loop_pair(void) {
  BROKEN_CASE_BEGIN
  set_desc(&d[0], dma_addr(raw_hdr), host.hdr_size, VIRTQ_DESC_F_NEXT, 1);
  set_desc(&d[1], dma_addr(raw_resp), host.resp_size, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 2);
  set_desc(&d[2], dma_addr(raw_data), 512, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 1);
  raw_publish(vq, 0, 1);
  BROKEN_CASE_END;
}

/* Every descriptor of the table in one chain, and the last one pointing back at the first. */
static void case_chain_too_long(void) {
  BROKEN_CASE_BEGIN
  uint16_t n = vq->size;
  set_desc(&d[0], dma_addr(raw_hdr), host.hdr_size, VIRTQ_DESC_F_NEXT, 1);
  for (uint16_t i = 1; i < n; i++) {
    set_desc(&d[i], dma_addr(raw_data), 16, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT,
             (uint16_t)((i + 1) % n));
  }
  set_desc(&d[1], dma_addr(raw_resp), host.resp_size, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 2);
  raw_publish(vq, 0, 1);
  BROKEN_CASE_END;
}

/* An indirect table of queue size + 1 entries, linear (no loop). */
static void case_indirect_too_long(void) {
  BROKEN_CASE_BEGIN
  uint32_t n = vq->size + 1u;
  struct virtq_desc *t = raw_table;
  set_desc(&t[0], dma_addr(raw_hdr), host.hdr_size, VIRTQ_DESC_F_NEXT, 1);
  set_desc(&t[1], dma_addr(raw_resp), host.resp_size, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 2);
  for (uint32_t i = 2; i < n; i++) {
    set_desc(&t[i], dma_addr(raw_data), 16,
             (uint16_t)(VIRTQ_DESC_F_WRITE | (i + 1 < n ? VIRTQ_DESC_F_NEXT : 0)),
             (uint16_t)(i + 1 < n ? i + 1 : 0));
  }
  set_desc(&d[0], dma_addr(t), n * 16, VIRTQ_DESC_F_INDIRECT, 0);
  raw_publish(vq, 0, 1);
  BROKEN_CASE_END;
}

static void case_head_out_of_range(void) {
  BROKEN_CASE_BEGIN
  set_desc(&d[0], dma_addr(raw_hdr), host.hdr_size, VIRTQ_DESC_F_NEXT, 1);
  set_desc(&d[1], dma_addr(raw_resp), host.resp_size, VIRTQ_DESC_F_WRITE, 0);
  raw_publish(vq, vq->size, 1); /* head == queue size */
  BROKEN_CASE_END;
}

/* A valid chain, but avail idx moved by queue size + 1. */
static void case_avail_idx_jump(void) {
  BROKEN_CASE_BEGIN
  set_desc(&d[0], dma_addr(raw_hdr), host.hdr_size, VIRTQ_DESC_F_NEXT, 1);
  set_desc(&d[1], dma_addr(raw_resp), host.resp_size, VIRTQ_DESC_F_WRITE, 0);
  for (uint16_t i = 0; i < vq->size; i++) vq->avail->ring[i] = 0;
  raw_publish(vq, 0, (uint16_t)(vq->size + 1));
  BROKEN_CASE_END;
}

/* A READ whose data buffer (or header) is somewhere the guest has no RAM. */
static void broken_buffer(uint64_t addr, uint32_t len, bool header) {
  BROKEN_CASE_BEGIN
  raw_read_hdr(1);
  if (header) {
    set_desc(&d[0], addr, host.hdr_size, VIRTQ_DESC_F_NEXT, 1);
    set_desc(&d[1], dma_addr(raw_resp), host.resp_size, VIRTQ_DESC_F_WRITE, 0);
  } else {
    set_desc(&d[0], dma_addr(raw_hdr), host.hdr_size, VIRTQ_DESC_F_NEXT, 1);
    set_desc(&d[1], dma_addr(raw_resp), host.resp_size, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 2);
    set_desc(&d[2], addr, len, VIRTQ_DESC_F_WRITE, 0);
  }
  raw_publish(vq, 0, 1);
  BROKEN_CASE_END;
}

static void case_addr_high(void) { broken_buffer(1ull << 48, 512, false); }
static void case_addr_mmio(void) { broken_buffer(host.vp.common.address & ~0xfffull, 512, true); }
static void case_addr_ram_end(void) { broken_buffer(ram_top - 256, 512, false); }
static void case_addr_wrap(void) { broken_buffer(0xfffffffffffff000ull, 0x2000, false); }
static void case_len_huge(void) { broken_buffer(dma_addr(raw_data), 0xfffff000u, false); }

/* 65 readable descriptors of 64 MiB each (all inside RAM): more than 4 GiB in one chain. */
static void case_len_total_4g(void) {
  const uint32_t chunk = 64u << 20;
  if (big_size < chunk) {
    note("skipped: no RAM region of 64 MiB (give --memory=128M or more)");
    return;
  }
  BROKEN_CASE_BEGIN
  const unsigned n = 65;
  if (vq->size < n + 1) {
    note("skipped: queue size %u < %u", vq->size, n + 1);
    return;
  }
  set_desc(&d[0], dma_addr(raw_hdr), host.hdr_size, VIRTQ_DESC_F_NEXT, 1);
  for (unsigned i = 1; i <= n; i++)
    set_desc(&d[i], big_base, chunk, VIRTQ_DESC_F_NEXT, (uint16_t)(i + 1));
  set_desc(&d[n + 1], dma_addr(raw_resp), host.resp_size, VIRTQ_DESC_F_WRITE, 0);
  raw_publish(vq, 0, 1);
  BROKEN_CASE_END;
}

static void indirect_chain(struct virtq_desc *t) {
  set_desc(&t[0], dma_addr(raw_hdr), host.hdr_size, VIRTQ_DESC_F_NEXT, 1);
  set_desc(&t[1], dma_addr(raw_resp), host.resp_size, VIRTQ_DESC_F_WRITE, 0);
}

static void case_indirect_next(void) {
  BROKEN_CASE_BEGIN
  indirect_chain(raw_table);
  set_desc(&d[0], dma_addr(raw_table), 32, VIRTQ_DESC_F_INDIRECT | VIRTQ_DESC_F_NEXT, 1);
  set_desc(&d[1], dma_addr(raw_data), 16, VIRTQ_DESC_F_WRITE, 0);
  raw_publish(vq, 0, 1);
  BROKEN_CASE_END;
}

static void case_indirect_nested(void) {
  BROKEN_CASE_BEGIN
  indirect_chain(raw_table2);
  set_desc(&raw_table[0], dma_addr(raw_table2), 32, VIRTQ_DESC_F_INDIRECT, 0);
  set_desc(&d[0], dma_addr(raw_table), 16, VIRTQ_DESC_F_INDIRECT, 0);
  raw_publish(vq, 0, 1);
  BROKEN_CASE_END;
}

static void case_indirect_len_odd(void) {
  BROKEN_CASE_BEGIN
  indirect_chain(raw_table);
  set_desc(&d[0], dma_addr(raw_table), 40, VIRTQ_DESC_F_INDIRECT, 0); /* 2.5 descriptors */
  raw_publish(vq, 0, 1);
  BROKEN_CASE_END;
}

static void case_indirect_len_zero(void) {
  BROKEN_CASE_BEGIN
  indirect_chain(raw_table);
  set_desc(&d[0], dma_addr(raw_table), 0, VIRTQ_DESC_F_INDIRECT, 0);
  raw_publish(vq, 0, 1);
  BROKEN_CASE_END;
}

static void case_indirect_addr_bad(void) {
  BROKEN_CASE_BEGIN
  set_desc(&d[0], 1ull << 47, 32, VIRTQ_DESC_F_INDIRECT, 0);
  raw_publish(vq, 0, 1);
  BROKEN_CASE_END;
}

/* Indirect descriptors without VIRTIO_F_INDIRECT_DESC negotiated. */
static void case_indirect_unnegotiated(void) {
  struct vscsi_options o = base_opts;
  o.indirect = false;
  device_init(&o);
  if (host.vp.driver_features & (1ull << VIRTIO_F_INDIRECT_DESC)) {
    bad("INDIRECT_DESC negotiated although not accepted");
  }
  BROKEN_CASE_BEGIN
  indirect_chain(raw_table);
  set_desc(&d[0], dma_addr(raw_table), 32, VIRTQ_DESC_F_INDIRECT, 0);
  raw_publish(vq, 0, 1);
  BROKEN_CASE_END;
}

/* A device-readable buffer after a device-writable one (2.7.4.2). */
static void case_readable_after_writable(void) {
  BROKEN_CASE_BEGIN
  set_desc(&d[0], dma_addr(raw_hdr), host.hdr_size, VIRTQ_DESC_F_NEXT, 1);
  set_desc(&d[1], dma_addr(raw_resp), host.resp_size, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 2);
  set_desc(&d[2], dma_addr(raw_data), 512, 0, 0);
  raw_publish(vq, 0, 1);
  BROKEN_CASE_END;
}

/* The same head made available twice in one batch while its first use is still in flight (a READ
 * goes to the backend asynchronously). The device may complete the first use; the second must end
 * in NEEDS_RESET. */
static void case_head_twice(void) {
  struct virtq *vq = &host.q[main_vq()].vq;
  uint16_t used_before = used_idx(vq);
  uint64_t irqs_before = host.config_irqs;
  struct virtq_desc *d = vq->desc;
  raw_read_hdr(CHECK_BLOCKS);
  set_desc(&d[0], dma_addr(raw_hdr), host.hdr_size, VIRTQ_DESC_F_NEXT, 1);
  set_desc(&d[1], dma_addr(raw_resp), host.resp_size, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 2);
  set_desc(&d[2], dma_addr(check_buf), CHECK_BLOCKS * disk.block_size, VIRTQ_DESC_F_WRITE, 0);
  vq->avail->ring[vq->avail_idx & (vq->size - 1)] = 0;
  vq->avail->ring[(vq->avail_idx + 1) & (vq->size - 1)] = 0;
  wmb();
  vq->avail_idx = (uint16_t)(vq->avail_idx + 2);
  *(volatile uint16_t *)&vq->avail->idx = vq->avail_idx;
  mb();
  mmio_write16(vq->notify_addr, vq->index);
  if (expect_needs_reset(irqs_before)) {
    /* The first use may still complete: give it the time a READ takes. */
    uint64_t deadline = deadline_after_us(500000);
    while (used_idx(vq) == used_before && !deadline_passed(deadline)) udelay(1000);
    uint16_t u = used_idx(vq);
    uint16_t moved = (uint16_t)(u - used_before);
    if (moved > 1) {
      bad("queue %u: %u used entries for one chain made available twice", vq->index, moved);
    } else if (moved == 1) {
      uint32_t id = vq->used->ring[used_before & (vq->size - 1)].id;
      note("; the first use completed (used id %u, response %u)", id, raw_resp[11]);
      if (id != 0) bad("used id %u, expected 0", id);
    } else {
      note("; queue %u: no used entry within 500 ms (the first READ is stuck)", vq->index);
    }
    /* Only the other request queue here: a task management function drains every queue and would
     * hide a request left unsubmitted; the reset below shows it (it waits for it). */
    if (have_other() && read_check(other_vq(), &other_req, "other request queue")) {
      note("; queue %u READ verified", other_vq());
    }
    uint16_t later = used_idx(vq);
    if (later != u) note("; queue %u: used idx %u -> %u meanwhile", vq->index, u, later);
  }
  volatile uint16_t *old_used_idx = &vq->used->idx; /* the ring the reset throws away */
  uint16_t before_reset = *old_used_idx;
  tolerate_slow_reset = true;
  reset_and_verify();
  tolerate_slow_reset = false;
  if (*old_used_idx != before_reset) {
    note("; the reset completed the first READ into the old ring (used idx %u -> %u)", before_reset,
         *old_used_idx);
  }
  if (have_other() && ctrl_query() < 0) bad("control queue: no answer after the reset");
}

/* DMA into the rings themselves: a READ whose data-in buffer is the queue's own descriptor table
 * (then its available ring). The chain was parsed before the data arrived; what the device finds
 * in the ring afterwards is disk data. Any orderly outcome will do: an answer, NEEDS_RESET. */
static void case_dma_into_ring(void) {
  for (unsigned part = 0; part < 2; part++) {
    struct virtq *vq = &host.q[main_vq()].vq;
    uint16_t used_before = used_idx(vq);
    struct virtq_desc *d = vq->desc;
    uint64_t target = part == 0 ? dma_addr(vq->desc) : dma_addr(vq->avail);
    raw_read_hdr(CHECK_BLOCKS); /* 4 KiB of the image's pattern: "MVMPATRN..." */
    set_desc(&d[0], dma_addr(raw_hdr), host.hdr_size, VIRTQ_DESC_F_NEXT, 1);
    set_desc(&d[1], dma_addr(raw_resp), host.resp_size, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 2);
    set_desc(&d[2], target, 4096, VIRTQ_DESC_F_WRITE, 0);
    raw_publish(vq, 0, 1);
    uint64_t deadline = deadline_after_us(nr_timeout_us);
    while (used_idx(vq) == used_before && !needs_reset() && !deadline_passed(deadline)) udelay(200);
    bool answered = used_idx(vq) != used_before;
    note("%sREAD into the %s: %s", part ? "; " : "",
         part == 0 ? "descriptor table" : "available ring",
         answered        ? "completed"
         : needs_reset() ? "NEEDS_RESET"
                         : "nothing");
    if (answered) note(" (response %u status 0x%02x)", raw_resp[11], raw_resp[10]);
    if (answered && needs_reset()) note(", then NEEDS_RESET at once (status 0x%02x)", dev_status());
    if (!answered && !needs_reset()) bad("neither an answer nor NEEDS_RESET");
    /* Now the ring holds disk data: make "head 0" available again. */
    if (!needs_reset()) {
      raw_publish(vq, 0, 1);
      deadline = deadline_after_us(nr_timeout_us);
      while (!needs_reset() && !deadline_passed(deadline)) udelay(200);
      note(", then head 0 again: %s (status 0x%02x)", needs_reset() ? "NEEDS_RESET" : "no reaction",
           dev_status());
    }
    reset_and_verify();
  }
}

/* Queue 2 set up by hand with overlapping rings (used ring = available ring, then = descriptor
 * table), DRIVER_OK, three TEST UNIT READYs. The device cannot tell; it must not crash, and the
 * reset must clean up. */
static void case_ring_overlap(void) {
  for (unsigned part = 0; part < 2; part++) {
    raw_to_features_ok();
    uint16_t q = (uint16_t)main_vq();
    mmio_write16(common_addr(VIRTIO_COMMON_Q_SELECT), q);
    uint16_t size = mmio_read16(common_addr(VIRTIO_COMMON_Q_SIZE));
    struct virtq_desc *desc = dma_alloc(16ull * size);
    struct virtq_avail *avail = dma_alloc(4096 + 8ull * size);
    uint64_t used = part == 0 ? dma_addr(avail) : dma_addr(desc);
    mmio_write16(common_addr(VIRTIO_COMMON_Q_MSIX), VIRTIO_MSI_NO_VECTOR);
    write64(VIRTIO_COMMON_Q_DESCLO, dma_addr(desc));
    write64(VIRTIO_COMMON_Q_AVAILLO, dma_addr(avail));
    write64(VIRTIO_COMMON_Q_USEDLO, used);
    mmio_write16(common_addr(VIRTIO_COMMON_Q_ENABLE), 1);
    uint16_t enabled = mmio_read16(common_addr(VIRTIO_COMMON_Q_ENABLE));
    uint64_t notify =
        host.vp.notify.address +
        (uint64_t)mmio_read16(common_addr(VIRTIO_COMMON_Q_NOFF)) * host.vp.notify_off_multiplier;
    virtio_pci_add_status(&host.vp, VIRTIO_STATUS_DRIVER_OK);
    note("%sused ring = %s: queue_enable %u, status 0x%02x", part ? "; " : "",
         part == 0 ? "available ring" : "descriptor table", enabled, dev_status());
    uint16_t idx = 0;
    for (unsigned i = 0; i < 3 && enabled && !needs_reset(); i++) {
      raw_tur_hdr();
      set_desc(&desc[0], dma_addr(raw_hdr), host.hdr_size, VIRTQ_DESC_F_NEXT, 1);
      set_desc(&desc[1], dma_addr(raw_resp), host.resp_size, VIRTQ_DESC_F_WRITE, 0);
      avail->ring[idx & (size - 1)] = 0;
      wmb();
      idx++;
      *(volatile uint16_t *)&avail->idx = idx;
      mb();
      mmio_write16(notify, q);
      uint64_t deadline = deadline_after_us(200000);
      while (raw_resp[11] == POISON && !needs_reset() && !deadline_passed(deadline)) udelay(200);
      note(", TUR %u: %s", i,
           raw_resp[11] != POISON ? (raw_resp[11] == 0 && raw_resp[10] == 0 ? "GOOD" : "answered")
           : needs_reset()        ? "NEEDS_RESET"
                                  : "no answer");
    }
    note(" (status 0x%02x)", dev_status());
    reset_and_verify();
  }
}

/* MSI-X junk: a queue's table entry with an address that is no LAPIC and a bogus data word,
 * unmasked, while the device wants to interrupt; the PBA written; then the proper entry back and an
 * interrupt that must arrive. */
static void case_msix_junk(void) {
  if (!host.vp.has_msix || host.q[main_vq()].msix_entry == VIRTIO_MSI_NO_VECTOR) {
    note("skipped: no MSI-X");
    return;
  }
  struct vscsi_queue *q = &host.q[main_vq()];
  const struct pci_msix *m = &host.vp.msix;
  uint64_t e = m->table + (uint64_t)q->msix_entry * 16;
  mmio_write32(e + 12, 1);
  mmio_write32(e + 0, 0x12345678u);
  mmio_write32(e + 4, 0xdeadbeefu);
  mmio_write32(e + 8, 0xffffffffu);
  mmio_write32(e + 12, 0);
  mmio_write32(m->pba, 0xffffffffu); /* read-only */
  (void)virtq_enable_interrupts(&q->vq);
  bool ok1 = read_check(main_vq(), &check_req, "junk MSI-X entry");
  /* Entry beyond the table, and the whole capability toggled. */
  mmio_write32(m->table + (uint64_t)m->table_size * 16 + 12, 0);
  pci_msix_disable(&host.vp.pci, m);
  pci_msix_enable_masked(&host.vp.pci, m);
  pci_msix_unmask_function(&host.vp.pci, m);
  note("READ with queue %u's MSI-X entry at address 0xdeadbeef12345678 data 0xffffffff: %s",
       main_vq(), ok1 ? "verified" : "failed");
  /* The proper entry again: the next completion must interrupt. */
  pci_msix_set_entry(m, q->msix_entry, q->apic_id, q->vector, false);
  uint64_t irqs = q->irqs;
  (void)virtq_enable_interrupts(&q->vq);
  bool ok2 = read_check(main_vq(), &check_req, "restored MSI-X entry");
  irq_enable();
  udelay(3000);
  irq_disable();
  virtq_disable_interrupts(&q->vq);
  note("; entry restored: READ %s, %lu interrupt(s)", ok2 ? "verified" : "failed", q->irqs - irqs);
  if (q->irqs == irqs) bad("no interrupt after the MSI-X entry was restored");
  uint8_t st = dev_status();
  if (st & VIRTIO_STATUS_DEVICE_NEEDS_RESET) bad("status 0x%02x", st);
  check_survivors(-1);
}

/* PCI configuration junk: BAR 0 sized, moved onto the MSI-X BAR, moved into RAM, decoding off and
 * on, then everything restored; the device must work as before. */
static void case_pci_junk(void) {
  const struct pci_device *p = &host.vp.pci;
  const struct pci_bar *bar0 = &host.vp.bars[host.vp.common.bar];
  const struct pci_bar *msix_bar = &host.vp.bars[host.vp.msix.table_bar];
  unsigned off = PCI_CFG_BAR0 + 4 * host.vp.common.bar;
  uint32_t lo = pci_cfg_read32(p->bus, p->dev, p->fn, off);
  uint32_t hi = bar0->is64 ? pci_cfg_read32(p->bus, p->dev, p->fn, off + 4) : 0;
  uint16_t command = pci_cfg_read16(p->bus, p->dev, p->fn, PCI_CFG_COMMAND);
  /* Sizing with decoding on (a careless driver). */
  pci_cfg_write32(p->bus, p->dev, p->fn, off, 0xffffffffu);
  if (bar0->is64) pci_cfg_write32(p->bus, p->dev, p->fn, off + 4, 0xffffffffu);
  uint32_t mask = pci_cfg_read32(p->bus, p->dev, p->fn, off);
  /* Onto the MSI-X BAR (a conflict), then into RAM. */
  pci_cfg_write32(p->bus, p->dev, p->fn, off, (uint32_t)msix_bar->address | (lo & 0xf));
  if (bar0->is64) pci_cfg_write32(p->bus, p->dev, p->fn, off + 4, 0);
  uint32_t msix_word = mmio_read32(host.vp.msix.table + 8); /* what answers there now */
  pci_cfg_write32(p->bus, p->dev, p->fn, off, 0x00200000u | (lo & 0xf));
  /* Decoding off and on; the command register with junk in reserved bits. */
  pci_cfg_write16(p->bus, p->dev, p->fn, PCI_CFG_COMMAND, 0);
  pci_cfg_write16(p->bus, p->dev, p->fn, PCI_CFG_COMMAND, 0xffff);
  pci_cfg_write16(p->bus, p->dev, p->fn, PCI_CFG_COMMAND, 0);
  /* Writes to read-only header fields and past the capabilities. */
  pci_cfg_write32(p->bus, p->dev, p->fn, PCI_CFG_VENDOR_ID, 0x12345678u);
  pci_cfg_write32(p->bus, p->dev, p->fn, 0xfc, 0xffffffffu);
  pci_cfg_write32(p->bus, p->dev, p->fn, 0x100, 0xffffffffu); /* extended space: none */
  uint32_t id = pci_cfg_read32(p->bus, p->dev, p->fn, PCI_CFG_VENDOR_ID);
  /* Restore. */
  pci_cfg_write32(p->bus, p->dev, p->fn, off, lo);
  if (bar0->is64) pci_cfg_write32(p->bus, p->dev, p->fn, off + 4, hi);
  pci_cfg_write16(p->bus, p->dev, p->fn, PCI_CFG_COMMAND, command);
  note(
      "BAR %u sized (mask 0x%08x), moved onto the MSI-X BAR (table word 2 reads 0x%08x), into RAM "
      "at "
      "0x200000, decoding off/on, ID register written (reads 0x%08x); restored",
      host.vp.common.bar, mask, msix_word, id);
  if (id != ((uint32_t)p->device_id << 16 | p->vendor_id))
    bad("vendor/device ID changed to 0x%08x", id);
  uint8_t st = dev_status();
  note("; status 0x%02x", st);
  if (st & VIRTIO_STATUS_DEVICE_NEEDS_RESET) bad("NEEDS_RESET after PCI junk");
  check_survivors(-1);
}

/* ============================================================================================
 * Malformed requests the device can answer
 */

/* Sends TEST UNIT READY with the given buffers on the first request queue; returns whether it
 * completed (results in hreq). */
static bool send_custom(const struct virtq_buf *bufs, unsigned n_out, unsigned n_in) {
  if (!submit_bufs(main_vq(), &hreq, bufs, n_out, n_in)) {
    bad("queue %u full", main_vq());
    return false;
  }
  return wait_req(main_vq(), &hreq, CMD_TIMEOUT_US);
}

/* After an answered malformed request: the same queue still works, no NEEDS_RESET. */
static void still_working(void) {
  uint8_t st = dev_status();
  if (st & VIRTIO_STATUS_DEVICE_NEEDS_RESET)
    bad("status 0x%02x: NEEDS_RESET after an answerable request", st);
  if (read_check(main_vq(), &check_req, "same queue"))
    note("; queue %u still works (READ verified)", main_vq());
}

static void expect_response(const char *what, uint8_t want) {
  if (hreq.in_flight) {
    bad("%s: no completion", what);
  } else if (resp_unwritten(&hreq)) {
    bad("%s: completed (len %u) without a response", what, hreq.used_len);
  } else if (hreq.response != want) {
    bad("%s: %s, expected virtio response %s", what, result_str(&hreq), vscsi_response_name(want));
  } else {
    note("%s%s -> %s (used len %u)", report_len ? "; " : "", what, result_str(&hreq),
         hreq.used_len);
  }
}

static void case_short_header(void) {
  uint8_t tur[6] = {SCSI_TEST_UNIT_READY};
  const uint32_t lens[3] = {0, REQ_HDR_FIXED - 1, host.hdr_size - 1};
  char what[64];
  for (unsigned i = 0; i < 3; i++) {
    fill_hdr(hreq.hdr, disk.target, disk.lun, tur, 6);
    struct virtq_buf bufs[2] = {{dma_addr(hreq.hdr), lens[i], false},
                                {dma_addr(hreq.resp), host.resp_size, true}};
    if (lens[i] == 0) {
      /* A chain without any device-readable byte: only the response buffer. */
      snprintf(what, sizeof(what), "no header at all");
      send_custom(bufs + 1, 0, 1);
    } else {
      snprintf(what, sizeof(what), "%u-byte header (need %u)", lens[i], host.hdr_size);
      send_custom(bufs, 1, 1);
    }
    expect_response(what, VIRTIO_SCSI_S_FAILURE);
    if (hreq.in_flight) break;
  }
  still_working();
}

/* A response buffer too short for struct virtio_scsi_resp_cmd: nothing can be answered. */
static void broken_response(uint32_t resp_len) {
  struct virtq *vq = &host.q[main_vq()].vq;
  uint16_t used_before = used_idx(vq);
  uint64_t irqs_before = host.config_irqs;
  uint8_t tur[6] = {SCSI_TEST_UNIT_READY};
  fill_hdr(hreq.hdr, disk.target, disk.lun, tur, 6);
  memset(hreq.resp, POISON, 128);
  struct virtq_buf bufs[2] = {{dma_addr(hreq.hdr), host.hdr_size, false},
                              {dma_addr(hreq.resp), resp_len, true}};
  if (!virtq_add(vq, bufs, 1, 1, &hreq)) bad("queue full");
  virtq_kick(vq);
  /* Either NEEDS_RESET, or (tolerated) an answer that fits. */
  uint64_t deadline = deadline_after_us(nr_timeout_us);
  while (!needs_reset() && used_idx(vq) == used_before && !deadline_passed(deadline)) udelay(200);
  if (used_idx(vq) != used_before && !needs_reset()) {
    uint32_t len;
    virtq_get(vq, &len);
    decode_resp(&hreq, len);
    bad("%u-byte response buffer answered (used len %u, bytes %02x %02x ...) instead of "
        "NEEDS_RESET",
        resp_len, len, hreq.resp[0], hreq.resp[1]);
    for (unsigned i = resp_len; i < 128; i++) {
      if (hreq.resp[i] != POISON) {
        bad("device wrote byte %u past the %u-byte response buffer", i, resp_len);
        break;
      }
    }
    reset_and_verify();
    return;
  }
  finish_broken(vq, used_before, irqs_before);
  for (unsigned i = resp_len; i < 128; i++) {
    if (hreq.resp[i] != POISON) {
      bad("device wrote byte %u past the %u-byte response buffer", i, resp_len);
      break;
    }
  }
}

static void case_resp_short(void) { broken_response(8); }
static void case_resp_no_sense(void) { broken_response(RESP_HDR_FIXED); }

static void case_bad_lun(void) {
  uint8_t tur[6] = {SCSI_TEST_UNIT_READY};
  struct {
    const char *what;
    uint8_t byte0, target;
  } variants[] = {
      {"lun[0]=0", 0, 0},
      {"lun[0]=2", 2, 0},
      {"lun[0]=0xff", 0xff, 0},
      {"unknown target 9", 1, 9},
      {"unknown target 255", 1, 255},
  };
  for (unsigned i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
    fill_hdr(hreq.hdr, variants[i].target, disk.lun, tur, 6);
    hreq.hdr[0] = variants[i].byte0;
    struct virtq_buf bufs[2] = {{dma_addr(hreq.hdr), host.hdr_size, false},
                                {dma_addr(hreq.resp), host.resp_size, true}};
    send_custom(bufs, 1, 1);
    expect_response(variants[i].what, VIRTIO_SCSI_S_BAD_TARGET);
    if (hreq.in_flight) break;
  }
  /* A READ with data buffers to a bad target: nothing may be written into them. */
  uint8_t cdb[16];
  unsigned n = scsi_cdb_rw(cdb, false, 10, 0, 1, false);
  fill_hdr(hreq.hdr, 9, 0, cdb, n);
  memset(raw_data, 0x5a, 512);
  struct virtq_buf bufs[3] = {{dma_addr(hreq.hdr), host.hdr_size, false},
                              {dma_addr(hreq.resp), host.resp_size, true},
                              {dma_addr(raw_data), 512, true}};
  if (send_custom(bufs, 1, 2)) {
    expect_response("READ(10) to target 9", VIRTIO_SCSI_S_BAD_TARGET);
    for (unsigned i = 0; i < 512; i++) {
      if (raw_data[i] != 0x5a) {
        bad("READ to a bad target wrote into the data buffer");
        break;
      }
    }
  } else {
    expect_response("READ(10) to target 9", VIRTIO_SCSI_S_BAD_TARGET);
  }
  still_working();
}

/* Data in both directions without VIRTIO_SCSI_F_INOUT. */
static void case_bidirectional(void) {
  uint8_t cdb[16];
  unsigned n = scsi_cdb_rw(cdb, false, 10, check_lba_read(), 1, false);
  fill_hdr(hreq.hdr, disk.target, disk.lun, cdb, n);
  struct virtq_buf bufs[4] = {{dma_addr(hreq.hdr), host.hdr_size, false},
                              {dma_addr(raw_data2), 512, false},
                              {dma_addr(hreq.resp), host.resp_size, true},
                              {dma_addr(raw_data), 512, true}};
  send_custom(bufs, 2, 2);
  expect_response("READ(10) with data-out and data-in buffers", VIRTIO_SCSI_S_FAILURE);
  still_working();
}

/* Legal but nasty scatter lists: one block written from 128 four-byte pieces at odd addresses with
 * empty descriptors in between, then read back into the same kind of list (with cache=none the
 * backend has to bounce them), and compared with a plain READ. */
static void case_sg_tiny(void) {
  struct virtq *vq = &host.q[main_vq()].vq;
  const unsigned pieces = 128, piece = 4; /* 512 bytes */
  const unsigned needed = pieces + pieces / 16 + 2;
  if (disk.block_size != 512 || vq->num_free < needed) {
    note("skipped: needs 512-byte blocks and %u free descriptors", needed);
    return;
  }
  static struct virtq_buf bufs[128 + 128 / 16 + 2];
  struct pattern_key key;
  pattern_key_init(&key, 0x5c5c0000u + case_number);
  uint8_t block[512];
  uint64_t lba = check_lba_write() + 64;
  pattern_fill(&key, block, lba, 1);
  uint8_t *area = (uint8_t *)raw_table2; /* 4 KiB: piece i at 8 * i + 1 */
  for (unsigned dir = 0; dir < 2; dir++) {
    bool write = dir == 0;
    uint8_t cdb[16];
    unsigned n = scsi_cdb_rw(cdb, write, 10, lba, 1, write);
    fill_hdr(hreq.hdr, disk.target, disk.lun, cdb, n);
    memset(area, 0xee, 4096);
    unsigned nb = 0, n_out;
    bufs[nb++] = (struct virtq_buf){dma_addr(hreq.hdr), host.hdr_size, false};
    if (write) {
      for (unsigned i = 0; i < pieces; i++) {
        memcpy(area + 8 * i + 1, block + piece * i, piece);
        bufs[nb++] = (struct virtq_buf){dma_addr(area + 8 * i + 1), piece, false};
        if (i % 16 == 7) bufs[nb++] = (struct virtq_buf){dma_addr(area + 4000), 0, false};
      }
    }
    n_out = nb;
    bufs[nb++] = (struct virtq_buf){dma_addr(hreq.resp), host.resp_size, true};
    if (!write) {
      for (unsigned i = 0; i < pieces; i++) {
        bufs[nb++] = (struct virtq_buf){dma_addr(area + 8 * i + 1), piece, true};
        if (i % 16 == 7) bufs[nb++] = (struct virtq_buf){dma_addr(area + 4000), 0, true};
      }
    }
    if (!send_custom(bufs, n_out, nb - n_out)) {
      bad("%s from %u pieces: no completion", write ? "WRITE(10) FUA" : "READ(10)", pieces);
      return;
    }
    note("%s%s in %u descriptors: %s", dir ? "; " : "", write ? "WRITE(10) FUA" : "READ(10)", nb,
         result_str(&hreq));
    if (!scsi_good(&hreq))
      bad("%s from tiny pieces: %s", write ? "WRITE" : "READ", result_str(&hreq));
    if (!write) {
      uint8_t got[512];
      for (unsigned i = 0; i < pieces; i++) memcpy(got + piece * i, area + 8 * i + 1, piece);
      char why[160];
      if (!pattern_check(&key, got, lba, 1, why, sizeof(why)))
        bad("read back from tiny pieces: %s", why);
      for (unsigned i = 0; i < pieces; i++) {
        if (area[8 * i] != 0xee || area[8 * i + 5] != 0xee) {
          bad("the device wrote between the pieces (offset %u)", 8 * i);
          break;
        }
      }
    }
  }
  /* And a plain READ agrees. */
  uint8_t cdb[16];
  unsigned n = scsi_cdb_rw(cdb, false, 10, lba, 1, false);
  char why[160];
  if (!exec_cmd(main_vq(), &check_req, disk.target, disk.lun, cdb, n, VSCSI_DIR_FROM_DEVICE,
                check_buf, 512, CMD_TIMEOUT_US) ||
      !scsi_good(&check_req) || !pattern_check(&key, check_buf, lba, 1, why, sizeof(why))) {
    bad("plain READ of the block written from pieces: %s",
        check_req.in_flight ? "no completion" : result_str(&check_req));
  } else {
    note("; plain READ agrees");
  }
  still_working();
}

/* READ/WRITE with a transfer length beyond the data buffer. */
static void case_read_overrun(void) {
  struct {
    const char *what;
    bool write;
    unsigned size;
    uint64_t lba;
    uint32_t blocks;
  } variants[] = {
      {"READ(10) 16 blocks into 4 KiB", false, 10, 0, 16},
      {"READ(10) 65535 blocks into 4 KiB", false, 10, 0, 65535},
      {"READ(16) 0x10000000 blocks into 4 KiB", false, 16, 0, 0x10000000},
      {"WRITE(10) 16 blocks from 4 KiB", true, 10, 0, 16},
  };
  uint32_t len = 4096;
  for (unsigned i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
    uint8_t cdb[16];
    unsigned n = scsi_cdb_rw(cdb, variants[i].write, variants[i].size,
                             variants[i].lba + check_lba_read(), variants[i].blocks, false);
    if (variants[i].write) {
      /* Never reaches the disk if the device is right; pattern data in case it does. */
      pattern_fill(&image_key, raw_data, check_lba_read() * (disk.block_size / PATTERN_BLOCK),
                   len / PATTERN_BLOCK);
    }
    if (!exec_cmd(main_vq(), &hreq, disk.target, disk.lun, cdb, n,
                  variants[i].write ? VSCSI_DIR_TO_DEVICE : VSCSI_DIR_FROM_DEVICE, raw_data, len,
                  CMD_TIMEOUT_US)) {
      bad("%s: no completion", variants[i].what);
      break;
    }
    bool ok = hreq.response == VIRTIO_SCSI_S_OVERRUN ||
              scsi_check(&hreq, SENSE_ILLEGAL_REQUEST, 0x24, 0) ||
              scsi_check(&hreq, SENSE_ILLEGAL_REQUEST, 0x21, 0);
    if (!ok) {
      bad("%s: %s, expected OVERRUN or CHECK CONDITION 05/24/00 (05/21/00 beyond the end)",
          variants[i].what, result_str(&hreq));
    } else {
      note("%s%s -> %s", report_len ? "; " : "", variants[i].what, result_str(&hreq));
    }
  }
  still_working();
}

/* ============================================================================================
 * Control queue
 */

/* Sends a control request of `req_len` readable bytes and `resp_len` writable ones; returns the
 * used length, -1 on timeout. */
static int ctrl_send(uint32_t req_len, uint32_t resp_len) {
  memset(ctrl_resp, POISON, 64);
  struct virtq_buf bufs[2] = {{dma_addr(ctrl_req), req_len, false},
                              {dma_addr(ctrl_resp), resp_len, true}};
  struct virtq *vq = &host.q[VSCSI_CONTROL_QUEUE].vq;
  bool ok = resp_len ? virtq_add(vq, bufs, 1, 1, ctrl_req) : virtq_add(vq, bufs, 1, 0, ctrl_req);
  if (!ok) return -1;
  virtq_kick(vq);
  uint64_t deadline = deadline_after_us(nr_timeout_us);
  uint32_t len;
  while (!virtq_get(vq, &len)) {
    if (deadline_passed(deadline) || needs_reset()) return -1;
    cpu_relax();
  }
  return (int)len;
}

static void tmf_req(uint32_t type, uint32_t subtype, uint8_t byte0, uint8_t target, uint16_t lun) {
  memset(ctrl_req, 0, 64);
  put_le(ctrl_req, type, 4);
  put_le(ctrl_req + 4, subtype, 4);
  ctrl_req[8] = byte0;
  ctrl_req[9] = target;
  ctrl_req[10] = (uint8_t)(0x40 | ((lun >> 8) & 0x3f));
  ctrl_req[11] = (uint8_t)lun;
  put_le(ctrl_req + 16, 0x1234, 8);
}

static void case_ctrl(void) {
  struct {
    const char *what;
    uint32_t type, subtype;
    uint8_t byte0, target;
    uint16_t lun;
    uint32_t req_len, resp_len;
    int want; /* expected first response byte, -1: any answer */
  } variants[] = {
      {"TMF ABORT TASK lun[0]=0", VIRTIO_SCSI_T_TMF, VIRTIO_SCSI_T_TMF_ABORT_TASK, 0, 0, 0, 24, 1,
       VIRTIO_SCSI_S_BAD_TARGET},
      {"TMF LOGICAL UNIT RESET target 9", VIRTIO_SCSI_T_TMF, VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET,
       1, 9, 0, 24, 1, VIRTIO_SCSI_S_BAD_TARGET},
      {"TMF I_T NEXUS RESET lun[0]=0x80", VIRTIO_SCSI_T_TMF, VIRTIO_SCSI_T_TMF_I_T_NEXUS_RESET,
       0x80, 0, 0, 24, 1, VIRTIO_SCSI_S_BAD_TARGET},
      {"TMF LOGICAL UNIT RESET LUN 7 (absent)", VIRTIO_SCSI_T_TMF,
       VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET, 1, 0, 7, 24, 1, -1},
      {"TMF subtype 99", VIRTIO_SCSI_T_TMF, 99, 1, 0, 0, 24, 1, -1},
      {"TMF CLEAR ACA", VIRTIO_SCSI_T_TMF, VIRTIO_SCSI_T_TMF_CLEAR_ACA, 1, 0, 0, 24, 1, -1},
      {"control type 0x77", 0x77, 0, 1, 0, 0, 24, 1, -1},
      {"control type 0xffffffff, 4 bytes", 0xffffffffu, 0, 1, 0, 0, 4, 16, -1},
      {"AN QUERY", VIRTIO_SCSI_T_AN_QUERY, 0xffffffffu, 1, 0, 0, 16, 5, -1},
      {"AN SUBSCRIBE to target 9", VIRTIO_SCSI_T_AN_SUBSCRIBE, 0xffffffffu, 1, 9, 0, 16, 5, -1},
      {"TMF QUERY TASK with a 64-byte response buffer", VIRTIO_SCSI_T_TMF,
       VIRTIO_SCSI_T_TMF_QUERY_TASK, 1, 0, 0, 24, 64, -1},
  };
  for (unsigned i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
    tmf_req(variants[i].type, variants[i].subtype, variants[i].byte0, variants[i].target,
            variants[i].lun);
    if (variants[i].type == VIRTIO_SCSI_T_AN_QUERY ||
        variants[i].type == VIRTIO_SCSI_T_AN_SUBSCRIBE) {
      /* struct virtio_scsi_ctrl_an: type, lun[8], event_requested */
      memset(ctrl_req + 4, 0, 12);
      ctrl_req[4] = variants[i].byte0;
      ctrl_req[5] = variants[i].target;
      ctrl_req[6] = 0x40;
      put_le(ctrl_req + 12, 0xffffffffu, 4);
    }
    int len = ctrl_send(variants[i].req_len, variants[i].resp_len);
    if (len < 0) {
      bad("%s: no answer (status 0x%02x)", variants[i].what, dev_status());
      break;
    }
    if (ctrl_resp[0] == POISON && len == 0) {
      bad("%s: completed without an answer", variants[i].what);
    } else if (variants[i].want >= 0 && ctrl_resp[0] != variants[i].want) {
      bad("%s: response %u (%s), expected %u", variants[i].what, ctrl_resp[0],
          vscsi_response_name(ctrl_resp[0]), variants[i].want);
    } else {
      note("%s%s -> %u (%s), used len %d", report_len ? "; " : "", variants[i].what, ctrl_resp[0],
           ctrl_resp[0] == 0 ? "OK/FUNCTION_COMPLETE" : vscsi_response_name(ctrl_resp[0]), len);
    }
  }
  uint8_t st = dev_status();
  if (st & VIRTIO_STATUS_DEVICE_NEEDS_RESET)
    bad("status 0x%02x after answerable control requests", st);
  if (read_check(main_vq(), &check_req, "request queue"))
    note("; queue %u READ verified", main_vq());
  int r = ctrl_query();
  if (r < 0) {
    bad("control queue stopped answering");
  } else {
    note("; control queue still answers (%d)", r);
  }
}

/* Control requests too short to answer: NEEDS_RESET (or an answer), the request queues go on. */
static void broken_ctrl(uint32_t req_len, uint32_t resp_len) {
  struct virtq *vq = &host.q[VSCSI_CONTROL_QUEUE].vq;
  uint16_t used_before = used_idx(vq);
  uint64_t irqs_before = host.config_irqs;
  tmf_req(VIRTIO_SCSI_T_TMF, VIRTIO_SCSI_T_TMF_ABORT_TASK, 1, disk.target, disk.lun);
  int len = ctrl_send(req_len, resp_len);
  if (len >= 0) {
    note("answered (response %u, used len %d) instead of NEEDS_RESET", ctrl_resp[0], len);
    if (resp_len == 0 && len > 0) bad("device wrote %d bytes into no response buffer", len);
    still_working();
    return;
  }
  finish_broken(vq, used_before, irqs_before);
}

static void case_ctrl_short(void) { broken_ctrl(8, 1); }
static void case_ctrl_no_response(void) { broken_ctrl(24, 0); }

/* A loop on the control queue. */
static void case_ctrl_loop(void) {
  struct virtq *vq = &host.q[VSCSI_CONTROL_QUEUE].vq;
  uint16_t used_before = used_idx(vq);
  uint64_t irqs_before = host.config_irqs;
  tmf_req(VIRTIO_SCSI_T_TMF, VIRTIO_SCSI_T_TMF_ABORT_TASK, 1, disk.target, disk.lun);
  set_desc(&vq->desc[0], dma_addr(ctrl_req), 24, VIRTQ_DESC_F_NEXT, 1);
  set_desc(&vq->desc[1], dma_addr(ctrl_req), 24, VIRTQ_DESC_F_NEXT, 0);
  raw_publish(vq, 0, 1);
  finish_broken(vq, used_before, irqs_before);
}

/* ============================================================================================
 * Set-up: bogus queue sizes and ring addresses, status order
 */

static void write64(unsigned lo, uint64_t value) {
  mmio_write32(common_addr(lo), (uint32_t)value);
  mmio_write32(common_addr(lo + 4), (uint32_t)(value >> 32));
}

/* Reset, ACKNOWLEDGE, DRIVER, the same features as before, FEATURES_OK. */
static void raw_to_features_ok(void) {
  uint64_t wanted = host.vp.driver_features;
  virtio_pci_reset(&host.vp);
  virtio_pci_add_status(&host.vp, VIRTIO_STATUS_ACKNOWLEDGE);
  virtio_pci_add_status(&host.vp, VIRTIO_STATUS_DRIVER);
  virtio_pci_negotiate(&host.vp, wanted);
}

/* Sets up queue `q` by hand and enables it; notes what the device shows. */
static void raw_queue_setup(uint16_t q, uint16_t size, uint64_t desc, uint64_t avail,
                            uint64_t used) {
  mmio_write16(common_addr(VIRTIO_COMMON_Q_SELECT), q);
  uint16_t max = mmio_read16(common_addr(VIRTIO_COMMON_Q_SIZE));
  mmio_write16(common_addr(VIRTIO_COMMON_Q_SIZE), size);
  write64(VIRTIO_COMMON_Q_DESCLO, desc);
  write64(VIRTIO_COMMON_Q_AVAILLO, avail);
  write64(VIRTIO_COMMON_Q_USEDLO, used);
  uint8_t before = dev_status();
  mmio_write16(common_addr(VIRTIO_COMMON_Q_ENABLE), 1);
  uint16_t enabled = mmio_read16(common_addr(VIRTIO_COMMON_Q_ENABLE));
  uint16_t size_now = mmio_read16(common_addr(VIRTIO_COMMON_Q_SIZE));
  uint8_t after = dev_status();
  note(
      "queue %u (max size %u): size %u, desc 0x%lx, avail 0x%lx, used 0x%lx: queue_enable reads "
      "%u, "
      "queue_size reads %u, status 0x%02x -> 0x%02x",
      q, max, size, desc, avail, used, enabled, size_now, before, after);
  if (enabled) bad("the device enabled the queue");
  if (!(after & VIRTIO_STATUS_DEVICE_NEEDS_RESET)) bad("no DEVICE_NEEDS_RESET after queue_enable");
  /* Carry on as a careless driver would: DRIVER_OK anyway. */
  virtio_pci_add_status(&host.vp, VIRTIO_STATUS_DRIVER_OK);
  note("; after DRIVER_OK status 0x%02x", dev_status());
}

static void setup_case(uint16_t size_or_0, int which_bad, uint64_t bad_addr) {
  raw_to_features_ok();
  uint16_t q = (uint16_t)main_vq();
  mmio_write16(common_addr(VIRTIO_COMMON_Q_SELECT), q);
  uint16_t max = mmio_read16(common_addr(VIRTIO_COMMON_Q_SIZE));
  /* Rings big enough for twice the maximum. */
  uint64_t desc = dma_addr(dma_alloc(16ull * 2 * max));
  uint64_t avail = dma_addr(dma_alloc(6ull + 2 * 2 * max));
  uint64_t used = dma_addr(dma_alloc(6ull + 8 * 2 * max));
  uint16_t size = size_or_0 == 0xffff ? (uint16_t)(max * 2) : size_or_0 == 0xfffe ? max : size_or_0;
  if (which_bad == 0) desc = bad_addr;
  if (which_bad == 1) avail = bad_addr;
  if (which_bad == 2) used = bad_addr;
  if (which_bad == 10) desc += 8;
  if (which_bad == 11) avail += 1;
  if (which_bad == 12) used += 2;
  raw_queue_setup(q, size, desc, avail, used);
  reset_and_verify();
}

static void case_qsize_0(void) { setup_case(0, -1, 0); }
static void case_qsize_3(void) { setup_case(3, -1, 0); }
static void case_qsize_too_big(void) { setup_case(0xffff, -1, 0); }
static void case_ring_desc_misaligned(void) { setup_case(0xfffe, 10, 0); }
static void case_ring_avail_odd(void) { setup_case(0xfffe, 11, 0); }
static void case_ring_used_misaligned(void) { setup_case(0xfffe, 12, 0); }
static void case_ring_outside_ram(void) { setup_case(0xfffe, 0, 1ull << 44); }
static void case_ring_mmio(void) { setup_case(0xfffe, 2, host.vp.common.address & ~0xfffull); }
static void case_ring_ram_end(void) { setup_case(0xfffe, 1, ram_top - 64); }

/* DRIVER_OK without FEATURES_OK, and clearing a status bit. */
static void case_status_order(void) {
  virtio_pci_reset(&host.vp);
  virtio_pci_add_status(&host.vp, VIRTIO_STATUS_ACKNOWLEDGE);
  virtio_pci_add_status(&host.vp, VIRTIO_STATUS_DRIVER);
  virtio_pci_add_status(&host.vp, VIRTIO_STATUS_DRIVER_OK);
  uint8_t st = dev_status();
  note("DRIVER_OK without FEATURES_OK -> status 0x%02x", st);
  if (!(st & VIRTIO_STATUS_DEVICE_NEEDS_RESET))
    bad("no NEEDS_RESET for DRIVER_OK without FEATURES_OK");
  raw_to_features_ok();
  mmio_write8(common_addr(VIRTIO_COMMON_STATUS),
              VIRTIO_STATUS_ACKNOWLEDGE); /* clears DRIVER, FEATURES_OK */
  st = dev_status();
  note("; clearing DRIVER and FEATURES_OK -> status 0x%02x", st);
  if (!(st & VIRTIO_STATUS_DEVICE_NEEDS_RESET)) bad("no NEEDS_RESET for clearing status bits");
  /* Features written after FEATURES_OK must not change what was negotiated. */
  raw_to_features_ok();
  mmio_write32(common_addr(VIRTIO_COMMON_GFSELECT), 0);
  mmio_write32(common_addr(VIRTIO_COMMON_GF), 0xffffffffu);
  mmio_write32(common_addr(VIRTIO_COMMON_GF), 0);
  uint32_t lo = mmio_read32(common_addr(VIRTIO_COMMON_GF));
  note("; driver_feature written after FEATURES_OK reads 0x%08x (negotiated 0x%08x)", lo,
       (uint32_t)host.vp.driver_features);
  if (lo != (uint32_t)host.vp.driver_features) bad("driver features changed after FEATURES_OK");
  /* Features the device does not offer (RING_PACKED), and no VERSION_1: FEATURES_OK must not stick. */
  const uint64_t offered = host.vp.device_features;
  const struct {
    const char *what;
    uint64_t features;
  } refused[] = {
      {"RING_PACKED (not offered)", host.vp.driver_features | (1ull << VIRTIO_F_RING_PACKED)},
      {"no VERSION_1", host.vp.driver_features & ~(1ull << VIRTIO_F_VERSION_1)},
      {"all 64 bits", ~0ull},
  };
  for (unsigned i = 0; i < 3; i++) {
    if (i == 0 && (offered & (1ull << VIRTIO_F_RING_PACKED))) continue; /* offered after all */
    virtio_pci_reset(&host.vp);
    virtio_pci_add_status(&host.vp, VIRTIO_STATUS_ACKNOWLEDGE);
    virtio_pci_add_status(&host.vp, VIRTIO_STATUS_DRIVER);
    for (unsigned word = 0; word < 2; word++) {
      mmio_write32(common_addr(VIRTIO_COMMON_GFSELECT), word);
      mmio_write32(common_addr(VIRTIO_COMMON_GF), (uint32_t)(refused[i].features >> (32 * word)));
    }
    virtio_pci_add_status(&host.vp, VIRTIO_STATUS_FEATURES_OK);
    st = dev_status();
    note("; FEATURES_OK with %s -> status 0x%02x", refused[i].what, st);
    if (st & VIRTIO_STATUS_FEATURES_OK) bad("FEATURES_OK accepted with %s", refused[i].what);
  }
  reset_and_verify();
}

/* A queue enabled after DRIVER_OK (without VIRTIO_F_RING_RESET that is not allowed, 3.1.1). */
static void case_late_queue_enable(void) {
  if (host.vp.num_queues < VSCSI_FIRST_REQUEST_QUEUE + 2) {
    note("skipped: one request queue (give --scsi-queues=2)");
    return;
  }
  struct vscsi_options o = base_opts;
  o.max_request_queues = 1; /* queue 3 stays disabled */
  device_init(&o);
  uint16_t q = (uint16_t)other_vq();
  mmio_write16(common_addr(VIRTIO_COMMON_Q_SELECT), q);
  uint16_t size = mmio_read16(common_addr(VIRTIO_COMMON_Q_SIZE));
  write64(VIRTIO_COMMON_Q_DESCLO, dma_addr(dma_alloc(16ull * size)));
  write64(VIRTIO_COMMON_Q_AVAILLO, dma_addr(dma_alloc(6ull + 2 * size)));
  write64(VIRTIO_COMMON_Q_USEDLO, dma_addr(dma_alloc(6ull + 8 * size)));
  uint64_t irqs_before = host.config_irqs;
  mmio_write16(common_addr(VIRTIO_COMMON_Q_ENABLE), 1);
  uint16_t enabled = mmio_read16(common_addr(VIRTIO_COMMON_Q_ENABLE));
  note("queue %u enabled after DRIVER_OK: queue_enable reads %u; ", q, enabled);
  if (enabled) bad("the device enabled a queue after DRIVER_OK");
  if (expect_needs_reset(irqs_before)) check_survivors(q);
  reset_and_verify();
}

/* A reset while requests are in flight on both request queues: the reset must wait for them (or
 * cancel them), not hang, and the device must work afterwards. */
static void case_reset_in_flight(void) {
  static struct vscsi_req reqs[2][16];
  static uint8_t *bufs;
  const uint32_t blocks = 128; /* 64 KiB each */
  if (!bufs) bufs = dma_alloc(2 * 16 * 65536);
  unsigned submitted = 0;
  for (unsigned r = 0; r < (have_other() ? 2u : 1u); r++) {
    unsigned vq = vscsi_request_vq(r);
    for (unsigned i = 0; i < 16; i++) {
      struct vscsi_req *req = &reqs[r][i];
      if (!req->hdr) vscsi_req_init(&host, req);
      req->in_flight = false;
      uint8_t cdb[16];
      unsigned n =
          scsi_cdb_rw(cdb, i & 1, 10, check_lba_write() + 256 + (uint64_t)(r * 16 + i) * blocks,
                      blocks, i % 3 == 0);
      vscsi_req_set(req, disk.target, disk.lun, cdb, n,
                    (i & 1) ? VSCSI_DIR_TO_DEVICE : VSCSI_DIR_FROM_DEVICE,
                    bufs + (size_t)(r * 16 + i) * 65536, blocks * disk.block_size);
      if (vscsi_submit(&host, vq, req)) submitted++;
    }
    vscsi_kick(&host, vq);
  }
  uint64_t t0 = rdtsc();
  virtio_pci_reset(&host.vp);
  uint64_t us = tsc_to_us(rdtsc() - t0);
  note("reset with %u READ/WRITE(10) of 64 KiB just submitted: status 0 after %lu ms", submitted,
       us / 1000);
  if (us > RESET_HANG_US) bad("the reset took %lu ms: it hung", us / 1000);
  reset_and_verify();
}

/* Junk on the transport that must change nothing: a queue that does not exist, wrong-width writes,
 * read-only fields, doorbells of nonexistent queues, a doorbell storm, MSI-X vectors out of range. */
static void case_transport_junk(void) {
  mmio_write16(common_addr(VIRTIO_COMMON_Q_SELECT), 0x1234);
  uint16_t size = mmio_read16(common_addr(VIRTIO_COMMON_Q_SIZE));
  mmio_write16(common_addr(VIRTIO_COMMON_Q_ENABLE), 1);
  write64(VIRTIO_COMMON_Q_DESCLO, 1ull << 50);
  uint16_t enable = mmio_read16(common_addr(VIRTIO_COMMON_Q_ENABLE));
  uint16_t vec = mmio_read16(common_addr(VIRTIO_COMMON_Q_MSIX));
  note("queue_select 0x1234: queue_size %u, queue_enable %u, queue_msix_vector 0x%x", size, enable,
       vec);
  if (size != 0) bad("nonexistent queue has size %u", size);
  if (enable != 0) bad("nonexistent queue enabled");
  /* Wrong widths and read-only fields. */
  mmio_write32(common_addr(VIRTIO_COMMON_Q_SELECT), 0xffffffffu);
  mmio_write16(common_addr(VIRTIO_COMMON_NUMQ), 0x55);
  mmio_write8(common_addr(VIRTIO_COMMON_CFGGENERATION), 0x55);
  uint16_t numq = mmio_read16(common_addr(VIRTIO_COMMON_NUMQ));
  if (numq != host.vp.num_queues) bad("num_queues changed to %u", numq);
  /* An enabled queue's address cannot be moved (the device ignores it). */
  mmio_write16(common_addr(VIRTIO_COMMON_Q_SELECT), (uint16_t)main_vq());
  uint64_t desc_before = mmio_read32(common_addr(VIRTIO_COMMON_Q_DESCLO));
  write64(VIRTIO_COMMON_Q_DESCLO, 1ull << 46);
  uint64_t desc_after = mmio_read32(common_addr(VIRTIO_COMMON_Q_DESCLO));
  note("; moving the enabled queue %u's descriptor table: queue_desc 0x%lx -> 0x%lx", main_vq(),
       desc_before, desc_after);
  if (desc_after != desc_before) write64(VIRTIO_COMMON_Q_DESCLO, desc_before);
  /* Out-of-range MSI-X vector for the config change: reads back NO_VECTOR; then restore. */
  uint16_t cv = virtio_pci_set_config_vector(&host.vp, 0x3ff);
  note("; config vector 0x3ff reads 0x%x", cv);
  if (cv != VIRTIO_MSI_NO_VECTOR) bad("config vector 0x3ff accepted (reads 0x%x)", cv);
  if (host.config_msix_entry != VIRTIO_MSI_NO_VECTOR)
    virtio_pci_set_config_vector(&host.vp, host.config_msix_entry);
  /* Doorbells: beyond the last queue, of the event queue, and a storm on an idle queue. */
  const struct pci_bar *nbar = &host.vp.bars[host.vp.notify.bar];
  unsigned beyond_writes = 0;
  for (unsigned i = 0; i < 4; i++) {
    uint64_t beyond =
        host.vp.notify.address + (uint64_t)(host.vp.num_queues + i) * host.vp.notify_off_multiplier;
    if (beyond + 2 <= nbar->address + nbar->size) {
      mmio_write16(beyond, 0x7777);
      beyond_writes++;
    }
  }
  note("; %u doorbell writes past the last queue", beyond_writes);
  mmio_write16(host.q[VSCSI_EVENT_QUEUE].vq.notify_addr, VSCSI_EVENT_QUEUE);
  for (unsigned i = 0; i < 200; i++)
    mmio_write16(host.q[main_vq()].vq.notify_addr, (uint16_t)main_vq());
  note("; 200 doorbells with nothing available");
  /* Writes into the ISR and device-config junk. */
  mmio_write8(host.vp.isr.address, 0xff);
  virtio_pci_cfg_write32(&host.vp, 0, 0x1234);  /* num_queues: read-only */
  virtio_pci_cfg_write32(&host.vp, 32, 0x1234); /* max_lun: read-only */
  uint32_t nq = virtio_pci_cfg_read32(&host.vp, 0);
  if (nq != host.cfg.num_queues) bad("config num_queues changed to %u", nq);
  uint8_t st = dev_status();
  if (st & VIRTIO_STATUS_DEVICE_NEEDS_RESET) bad("status 0x%02x", st);
  note("; status 0x%02x", st);
  check_survivors(-1);
}

/* The driver-writable config fields (5.6.4): odd cdb_size and sense_size values, then requests
 * laid out for them: TEST UNIT READY, READ(10) of a known block, WRITE(10) of a block that is read
 * back (with the default sizes) at the end. */
static void case_cfg_sizes(void) {
  struct {
    uint32_t cdb_size, sense_size;
    unsigned hdr_cdb; /* CDB bytes in our header */
    uint32_t resp_sense;
    bool
        must_work; /* legal sizes, commands that fit: every command must be GOOD and data in place */
  } variants[] = {
      {6, 0, 6, 0, false},
      {0, 96, 0, 96, false},
      {1, 96, 1, 96, false},
      /* Larger than the defaults but legal (QEMU takes cdb_size < 256 and sense_size < 65536). */
      {64, 96, 64, 96, true},
      {32, 300, 32, 300, true},
      {0xffffffffu, 0xffffffffu, 32, 252, false},
  };
  const unsigned nv = sizeof(variants) / sizeof(variants[0]);
  struct pattern_key key;
  pattern_key_init(&key, 0x3c3c0000u + case_number);
  uint32_t per = disk.block_size / PATTERN_BLOCK;
  uint64_t wbase = check_lba_write() + 80;
  bool written[8] = {false};
  uint8_t *resp = raw_resp; /* up to 12 + 300 bytes, then a poisoned tail */
  for (unsigned i = 0; i < nv; i++) {
    virtio_pci_cfg_write32(&host.vp, 24, variants[i].cdb_size);
    virtio_pci_cfg_write32(&host.vp, 20, variants[i].sense_size);
    uint32_t cdb_rb = virtio_pci_cfg_read32(&host.vp, 24),
             sense_rb = virtio_pci_cfg_read32(&host.vp, 20);
    note("%scdb_size %u (reads %u) sense_size %u (reads %u):", report_len ? "; " : "",
         variants[i].cdb_size, cdb_rb, variants[i].sense_size, sense_rb);
    static const char *const names[3] = {"TUR", "READ(10)", "WRITE(10)"};
    for (unsigned c = 0; c < 3; c++) {
      uint8_t cdb[16] = {0};
      unsigned cdb_len = 6;
      uint64_t lba = c == 1 ? check_lba_read() : wbase + i;
      if (c) cdb_len = scsi_cdb_rw(cdb, c == 2, 10, lba, 1, false);
      uint32_t hdr_len = REQ_HDR_FIXED + variants[i].hdr_cdb;
      memset(hreq.hdr, 0, REQ_HDR_FIXED + 64);
      hreq.hdr[0] = 1;
      hreq.hdr[1] = disk.target;
      hreq.hdr[2] = (uint8_t)(0x40 | ((disk.lun >> 8) & 0x3f));
      hreq.hdr[3] = (uint8_t)disk.lun;
      memcpy(hreq.hdr + REQ_HDR_FIXED, cdb,
             cdb_len < variants[i].hdr_cdb ? cdb_len : variants[i].hdr_cdb);
      uint32_t resp_len = RESP_HDR_FIXED + variants[i].resp_sense;
      memset(resp, POISON, 1024);
      if (c == 2) {
        pattern_fill(&key, raw_data, lba * per, per);
      } else {
        memset(raw_data, 0, 512);
      }
      struct virtq_buf bufs[3];
      unsigned n = 0, n_out;
      bufs[n++] = (struct virtq_buf){dma_addr(hreq.hdr), hdr_len, false};
      if (c == 2) bufs[n++] = (struct virtq_buf){dma_addr(raw_data), disk.block_size, false};
      n_out = n;
      bufs[n++] = (struct virtq_buf){dma_addr(resp), resp_len, true};
      if (c == 1) bufs[n++] = (struct virtq_buf){dma_addr(raw_data), disk.block_size, true};
      /* The response is not in hreq.resp here: decode by hand. */
      struct virtq *vq = &host.q[main_vq()].vq;
      if (!virtq_add(vq, bufs, n_out, n - n_out, &hreq)) {
        bad("queue full");
        break;
      }
      virtq_kick(vq);
      uint64_t deadline = deadline_after_us(nr_timeout_us);
      uint32_t len = 0;
      void *done = NULL;
      while (!(done = virtq_get(vq, &len)) && !needs_reset() && !deadline_passed(deadline))
        cpu_relax();
      if (!done) {
        if (needs_reset() && !variants[i].must_work) {
          /* An out-of-range size: NEEDS_RESET is a fair answer (QEMU gives it at the write). */
          note(" %s -> NEEDS_RESET (status 0x%02x), acceptable for these sizes", names[c],
               dev_status());
        } else {
          bad("%s: %s", names[c], needs_reset() ? "NEEDS_RESET" : "no completion");
        }
        break;
      }
      uint32_t sense_len = (uint32_t)get_le(resp, 4);
      uint8_t status = resp[10], response = resp[11];
      note(" %s -> response %u status 0x%02x sense_len %u sense %02X/%02X/%02X used len %u%s",
           names[c], response, status, sense_len, sense_len > 2 ? resp[12 + 2] & 0xf : 0,
           sense_len > 12 ? resp[12 + 12] : 0, sense_len > 13 ? resp[12 + 13] : 0, len,
           c < 2 ? "," : "");
      if (response == POISON && sense_len == 0xffffffffu) bad("%s: no response written", names[c]);
      if (sense_len > variants[i].resp_sense && response == 0)
        bad("sense_len %u beyond the sense buffer", sense_len);
      for (unsigned b = resp_len; b < 1024 && c != 1; b++) {
        if (resp[b] != POISON) {
          bad("%s: wrote past the %u-byte response buffer (byte %u)", names[c], resp_len, b);
          break;
        }
      }
      if (!variants[i].must_work) continue;
      if (response != 0 || status != 0) {
        bad("%s -> response %u (%s) status 0x%02x with the legal cdb_size %u / sense_size %u: the "
            "device does not lay "
            "out requests with the sizes the driver set",
            names[c], response, vscsi_response_name(response), status, variants[i].cdb_size,
            variants[i].sense_size);
      }
      char why[160];
      if (c == 1 && response == 0 && status == 0 &&
          !pattern_check(&image_key, raw_data, lba * per, per, why, sizeof(why))) {
        bad("READ(10) GOOD but the data is not in the data buffer: %s", why);
      }
      if (c == 2 && response == 0 && status == 0 && i < 8) written[i] = true;
    }
    if (needs_reset()) break;
  }
  /* Back to the defaults: the device must work as before, and the blocks written with the odd
   * sizes must hold what the guest meant to write. */
  virtio_pci_cfg_write32(&host.vp, 24, host.cfg.cdb_size);
  virtio_pci_cfg_write32(&host.vp, 20, host.cfg.sense_size);
  if (needs_reset()) reset_and_verify(); /* also restores the default sizes */
  for (unsigned i = 0; i < nv && i < 8; i++) {
    if (!written[i]) continue;
    uint8_t cdb[16];
    uint64_t lba = wbase + i;
    unsigned n = scsi_cdb_rw(cdb, false, 10, lba, 1, false);
    char why[160];
    if (!exec_cmd(main_vq(), &check_req, disk.target, disk.lun, cdb, n, VSCSI_DIR_FROM_DEVICE,
                  check_buf, disk.block_size, CMD_TIMEOUT_US) ||
        !scsi_good(&check_req)) {
      bad("reading back LBA %lu: %s", lba,
          check_req.in_flight ? "no completion" : result_str(&check_req));
    } else if (!pattern_check(&key, check_buf, lba * per, per, why, sizeof(why))) {
      bad("WRITE(10) with cdb_size %u / sense_size %u said GOOD but the disk holds other data: %s",
          variants[i].cdb_size, variants[i].sense_size, why);
    } else {
      note("; block written with cdb_size %u / sense_size %u reads back right",
           variants[i].cdb_size, variants[i].sense_size);
    }
  }
  still_working();
}

/* ============================================================================================
 * Malformed CDBs: every opcode, garbage bytes
 */

struct outcome {
  char key[24];
  unsigned count;
  char ops[64]; /* a few opcodes that gave it */
  size_t ops_len;
};

static struct outcome outcomes[48];
static unsigned n_outcomes;

static bool contains(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    if (!strncmp(hay, needle, n)) return true;
  }
  return false;
}

static void count_outcome(const char *key, uint8_t opcode) {
  unsigned i;
  for (i = 0; i < n_outcomes; i++) {
    if (!strcmp(outcomes[i].key, key)) break;
  }
  if (i == n_outcomes) {
    if (n_outcomes == sizeof(outcomes) / sizeof(outcomes[0])) return;
    memset(&outcomes[i], 0, sizeof(outcomes[i]));
    snprintf(outcomes[i].key, sizeof(outcomes[i].key), "%s", key);
    n_outcomes++;
  }
  struct outcome *o = &outcomes[i];
  o->count++;
  char op[8];
  snprintf(op, sizeof(op), "%02x", opcode);
  if (o->ops_len + 4 < sizeof(o->ops) && !contains(o->ops, op)) {
    o->ops_len += (size_t)snprintf(o->ops + o->ops_len, sizeof(o->ops) - o->ops_len, "%s%s",
                                   o->ops_len ? "," : "", op);
  }
}

static void fuzz_lun(struct scsi_lun *l, const char *name, unsigned vq) {
  uint64_t rng = 0x9e3779b97f4a7c15ull ^ arg_u64("fuzz_seed", 1) ^ (uint64_t)l->type << 40;
  const uint32_t len = 4096;
  uint8_t *buf = raw_data; /* 4 KiB, then a 4 KiB canary page (raw_data2) */
  unsigned commands = 0, flagged = 0;
  n_outcomes = 0;
  static const char *const variant_names[] = {"garbage, data-in", "zeros, data-in", "0xff, data-in",
                                              "garbage, data-out", "garbage, no data"};
  uint64_t t0 = rdtsc();
  for (unsigned op = 0; op < 256; op++) {
    for (unsigned v = 0; v < 5; v++) {
      uint8_t cdb[VSCSI_MAX_CDB];
      for (unsigned i = 0; i < sizeof(cdb); i++) {
        cdb[i] = v == 1 ? 0 : v == 2 ? 0xff : (uint8_t)xorshift64(&rng);
      }
      cdb[0] = (uint8_t)op;
      enum vscsi_dir dir = v == 3   ? VSCSI_DIR_TO_DEVICE
                           : v == 4 ? VSCSI_DIR_NONE
                                    : VSCSI_DIR_FROM_DEVICE;
      if (dir == VSCSI_DIR_TO_DEVICE) {
        for (unsigned i = 0; i < len; i += 8) put_le(buf + i, xorshift64(&rng), 8);
      } else {
        memset(buf, 0xa5, len);
      }
      memset(raw_data2, 0xc3, 4096);
      commands++;
      unsigned cdb_len = host.cfg.cdb_size < sizeof(cdb) ? host.cfg.cdb_size : sizeof(cdb);
      if (!exec_cmd(vq, &hreq, l->target, l->lun, cdb, cdb_len, dir,
                    dir == VSCSI_DIR_NONE ? NULL : buf, dir == VSCSI_DIR_NONE ? 0 : len,
                    CMD_TIMEOUT_US)) {
        bad("%s opcode 0x%02x (%s): no completion within %lu ms (status 0x%02x)", name, op,
            variant_names[v], (uint64_t)(CMD_TIMEOUT_US / 1000), dev_status());
        return;
      }
      char key[24];
      bool ok = true;
      const char *why = "";
      if (resp_unwritten(&hreq)) {
        ok = false;
        why = "no response written";
        snprintf(key, sizeof(key), "unwritten");
      } else if (hreq.response == VIRTIO_SCSI_S_OVERRUN) {
        snprintf(key, sizeof(key), "OVERRUN");
      } else if (hreq.response != VIRTIO_SCSI_S_OK) {
        ok = false;
        why = "virtio response";
        snprintf(key, sizeof(key), "response %u", hreq.response);
      } else if (hreq.status == SCSI_STATUS_GOOD) {
        snprintf(key, sizeof(key), "GOOD");
      } else if (hreq.status == SCSI_STATUS_CHECK_CONDITION) {
        struct scsi_sense s = scsi_sense_of(&hreq);
        if (!s.valid) {
          ok = false;
          why = "CHECK CONDITION without valid sense";
          snprintf(key, sizeof(key), "CHECK no sense");
        } else {
          snprintf(key, sizeof(key), "%02X/%02X/%02X", s.key, s.asc, s.ascq);
          /* NOT READY (no medium after a garbage eject), ILLEGAL REQUEST, UNIT ATTENTION, DATA
           * PROTECT (CD writes). MEDIUM/HARDWARE ERROR, ABORTED COMMAND etc. would mean the garbage
           * reached the backend or broke something. */
          if (s.key != SENSE_NOT_READY && s.key != SENSE_ILLEGAL_REQUEST &&
              s.key != SENSE_UNIT_ATTENTION && s.key != SENSE_DATA_PROTECT) {
            ok = false;
            why = "sense key";
          }
        }
      } else {
        ok = false;
        why = "SCSI status";
        snprintf(key, sizeof(key), "status 0x%02x", hreq.status);
      }
      uint32_t data_len = dir == VSCSI_DIR_NONE ? 0 : len;
      if (ok && hreq.residual > data_len) {
        ok = false;
        why = "residual larger than the buffer";
      }
      if (ok && hreq.used_len > host.resp_size + (dir == VSCSI_DIR_FROM_DEVICE ? len : 0)) {
        ok = false;
        why = "used length larger than the writable buffers";
      }
      for (unsigned i = 0; ok && i < 4096; i++) {
        if (raw_data2[i] != 0xc3) {
          ok = false;
          why = "wrote past the data buffer";
        }
      }
      count_outcome(key, (uint8_t)op);
      if (!ok || verbose) {
        printf(
            "hostile: %s opcode 0x%02x (%s) cdb %02x %02x %02x %02x %02x %02x %02x %02x %02x %02x "
            "-> %s, "
            "residual %u, used len %u%s%s\n",
            name, op, variant_names[v], cdb[0], cdb[1], cdb[2], cdb[3], cdb[4], cdb[5], cdb[6],
            cdb[7], cdb[8], cdb[9], result_str(&hreq), hreq.residual, hreq.used_len,
            ok ? "" : "   <-- ", why);
      }
      if (!ok) flagged++;
    }
    if (needs_reset()) {
      bad("%s: NEEDS_RESET after opcode 0x%02x", name, op);
      return;
    }
  }
  note("%u commands in %lu ms:", commands, tsc_to_us(rdtsc() - t0) / 1000);
  for (unsigned i = 0; i < n_outcomes; i++) {
    note(" %s x%u (%s%s)%s", outcomes[i].key, outcomes[i].count, outcomes[i].ops,
         outcomes[i].ops_len + 4 >= sizeof(outcomes[i].ops) ? ",..." : "",
         i + 1 < n_outcomes ? "," : "");
  }
  if (flagged) bad("%u answers out of line (printed above)", flagged);
}

static void case_cdb_fuzz_disk(void) {
  fuzz_lun(&disk, "disk", main_vq());
  still_working();
}

static void case_cdb_fuzz_cd(void) {
  if (!cd.present) {
    note("skipped: no CD-ROM");
    return;
  }
  fuzz_lun(&cd, "cd", have_other() ? other_vq() : main_vq());
  /* The garbage may have ejected the medium: say where the CD stands. */
  uint8_t tur[6] = {SCSI_TEST_UNIT_READY};
  unsigned vq = have_other() ? other_vq() : main_vq();
  for (unsigned i = 0; i < 3; i++) {
    if (!exec_cmd(vq, &check_req, cd.target, cd.lun, tur, 6, VSCSI_DIR_NONE, NULL, 0,
                  CMD_TIMEOUT_US)) {
      bad("cd: TEST UNIT READY did not complete");
      return;
    }
    if (!scsi_check(&check_req, SENSE_UNIT_ATTENTION, 0x28, -1) &&
        !scsi_check(&check_req, SENSE_UNIT_ATTENTION, 0x29, -1))
      break;
  }
  note("; cd TEST UNIT READY afterwards -> %s", result_str(&check_req));
  still_working();
}

/* ============================================================================================
 * The test
 */

struct hostile_case {
  const char *name;
  void (*run)(void);
};

static const struct hostile_case cases[] = {
    {"desc-loop-self", case_desc_loop_self},
    {"desc-loop-pair", case_desc_loop_pair},
    {"chain-too-long", case_chain_too_long},
    {"indirect-too-long", case_indirect_too_long},
    {"head-out-of-range", case_head_out_of_range},
    {"avail-idx-jump", case_avail_idx_jump},
    {"addr-high", case_addr_high},
    {"addr-mmio", case_addr_mmio},
    {"addr-ram-end", case_addr_ram_end},
    {"addr-wrap", case_addr_wrap},
    {"len-huge", case_len_huge},
    {"len-total-4g", case_len_total_4g},
    {"indirect-next", case_indirect_next},
    {"indirect-nested", case_indirect_nested},
    {"indirect-len-odd", case_indirect_len_odd},
    {"indirect-len-zero", case_indirect_len_zero},
    {"indirect-addr-bad", case_indirect_addr_bad},
    {"indirect-unnegotiated", case_indirect_unnegotiated},
    {"readable-after-writable", case_readable_after_writable},
    {"head-twice", case_head_twice},
    {"dma-into-ring", case_dma_into_ring},
    {"ring-overlap", case_ring_overlap},
    {"short-header", case_short_header},
    {"resp-short", case_resp_short},
    {"resp-no-sense", case_resp_no_sense},
    {"bad-lun", case_bad_lun},
    {"bidirectional", case_bidirectional},
    {"sg-tiny", case_sg_tiny},
    {"read-overrun", case_read_overrun},
    {"cdb-fuzz-disk", case_cdb_fuzz_disk},
    {"cdb-fuzz-cd", case_cdb_fuzz_cd},
    {"ctrl", case_ctrl},
    {"ctrl-short", case_ctrl_short},
    {"ctrl-no-response", case_ctrl_no_response},
    {"ctrl-loop", case_ctrl_loop},
    {"qsize-0", case_qsize_0},
    {"qsize-3", case_qsize_3},
    {"qsize-too-big", case_qsize_too_big},
    {"ring-desc-misaligned", case_ring_desc_misaligned},
    {"ring-avail-odd", case_ring_avail_odd},
    {"ring-used-misaligned", case_ring_used_misaligned},
    {"ring-outside-ram", case_ring_outside_ram},
    {"ring-mmio", case_ring_mmio},
    {"ring-ram-end", case_ring_ram_end},
    {"status-order", case_status_order},
    {"late-queue-enable", case_late_queue_enable},
    {"reset-in-flight", case_reset_in_flight},
    {"transport-junk", case_transport_junk},
    {"msix-junk", case_msix_junk},
    {"pci-junk", case_pci_junk},
    {"cfg-sizes", case_cfg_sizes},
};
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

static void find_ram(void) {
  const struct ram_region *r;
  unsigned n = ram_regions(&r);
  for (unsigned i = 0; i < n; i++) {
    uint64_t end = r[i].base + r[i].size;
    if (end > ram_top) ram_top = end;
    if (r[i].size > big_size) {
      big_base = r[i].base;
      big_size = r[i].size;
    }
  }
  if (!ram_top) test_fail("no RAM regions in the memory map");
}

static void run_case(unsigned index) {
  report_len = 0;
  report[0] = 0;
  case_failed = false;
  case_number = index;
  /* Every case starts from a healthy device. */
  if (needs_reset()) reset_and_verify();
  report_len = 0;
  report[0] = 0;
  case_failed = false;
  cases[index].run();
  printf("hostile: %s: %s\n", cases[index].name, report);
  if (case_failed) {
    printf("hostile: %s: FAIL\n", cases[index].name);
    case_failures++;
  }
}

GUEST_TEST_NAMED(
    scsi_hostile, "scsi-hostile",
    "virtio-scsi: broken rings, bad buffers, malformed requests and CDBs (case=NAME|all|list)") {
  const char *which = arg_get("case");
  if (which && !strcmp(which, "list")) {
    printf("scsi-hostile: cases:");
    for (unsigned i = 0; i < N_CASES; i++) printf(" %s", cases[i].name);
    printf("\n");
    return;
  }
  int selected = -1;
  if (which && strcmp(which, "all") != 0) {
    for (unsigned i = 0; i < N_CASES; i++) {
      if (!strcmp(which, cases[i].name)) selected = (int)i;
    }
    if (selected < 0) {
      printf("TEST %s: FAIL unknown case=%s (case=list lists them)\n", test_name(), which);
      guest_exit(GUEST_EXIT_USAGE);
    }
  }
  verbose = arg_u64("verbose", 0) != 0;
  nr_timeout_us = arg_u64("nr_timeout_ms", 2000) * 1000;
  const char *seed_arg = arg_get("seed");
  uint64_t seed = 0;
  have_seed = seed_arg && parse_u64(seed_arg, &seed) && seed <= 0xffffffffull;
  image_seed = (uint32_t)seed;
  pattern_key_init(&image_key, image_seed);
  find_ram();

  vscsi_default_options(&base_opts);
  base_opts.verbose = verbose;
  vscsi_options_from_args(&base_opts);
  (void)tsc_hz();
  vscsi_init(&host, &base_opts);
  if (verbose) vscsi_print_info(&host);
  scsi_discover(&host, &disk, &cd, verbose);
  if (!disk.present) test_fail("no disk found (give disk=T:L)");
  scsi_wait_ready(&disk, 5000000, false);
  scsi_read_capacity(&disk, true);
  if (cd.present) {
    cd.vq = have_other() ? other_vq() : main_vq();
    scsi_wait_ready(&cd, 5000000, false);
    scsi_read_capacity(&cd, false);
  }
  if (disk.blocks < 64) test_fail("disk too small (%lu blocks)", disk.blocks);

  raw_hdr = dma_alloc(4096);
  raw_resp = dma_alloc(4096);
  raw_data = dma_alloc(8192);
  raw_data2 = raw_data + 4096;
  raw_table = dma_alloc(16 * (32768 + 1));
  raw_table2 = dma_alloc(4096);
  ctrl_req = dma_alloc(4096);
  ctrl_resp = ctrl_req + 2048;
  check_buf = dma_alloc(CHECK_BLOCKS * 4096);
  vscsi_req_init(&host, &hreq);
  vscsi_req_init(&host, &other_req);
  vscsi_req_init(&host, &check_req);

  printf(
      "hostile: device: %u request queue(s), queue size %u, features 0x%lx, disk %u:%u (%lu "
      "blocks)%s, RAM top "
      "0x%lx\n",
      host.request_queues, host.q[main_vq()].vq.size, host.vp.driver_features, disk.target,
      disk.lun, disk.blocks, cd.present ? ", CD present" : "", ram_top);
  unsigned ran = 0;
  for (unsigned i = 0; i < N_CASES; i++) {
    if (selected >= 0 && (unsigned)selected != i) continue;
    run_case(i);
    ran++;
  }
  /* The device must be usable at the end whatever happened. */
  if (needs_reset()) reset_and_verify();
  if (case_failures) test_fail("%u of %u case(s) did not go as expected", case_failures, ran);
}
