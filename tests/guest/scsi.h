/*
 * SCSI commands over the virtio-scsi host (SPC-4, SBC-3, MMC-6): CDB builders, sense decoding,
 * target/LUN discovery and synchronous command helpers for the tests in scsi_tests.c.
 */
#ifndef TESTS_GUEST_SCSI_H_
#define TESTS_GUEST_SCSI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/guest/virtio_scsi.h"

/* Opcodes. */
#define SCSI_TEST_UNIT_READY 0x00
#define SCSI_REQUEST_SENSE 0x03
#define SCSI_INQUIRY 0x12
#define SCSI_MODE_SENSE_6 0x1a
#define SCSI_START_STOP_UNIT 0x1b
#define SCSI_PREVENT_ALLOW 0x1e
#define SCSI_READ_CAPACITY_10 0x25
#define SCSI_READ_10 0x28
#define SCSI_WRITE_10 0x2a
#define SCSI_SYNCHRONIZE_CACHE_10 0x35
#define SCSI_READ_TOC 0x43
#define SCSI_GET_CONFIGURATION 0x46
#define SCSI_GET_EVENT_STATUS 0x4a
#define SCSI_MODE_SENSE_10 0x5a
#define SCSI_READ_16 0x88
#define SCSI_WRITE_16 0x8a
#define SCSI_SYNCHRONIZE_CACHE_16 0x91
#define SCSI_SERVICE_ACTION_IN_16 0x9e
#define SCSI_SAI_READ_CAPACITY_16 0x10
#define SCSI_REPORT_LUNS 0xa0
#define SCSI_MAINTENANCE_IN 0xa3
#define SCSI_MI_REPORT_SUPPORTED_OPCODES 0x0c

/* Status. */
#define SCSI_STATUS_GOOD 0x00
#define SCSI_STATUS_CHECK_CONDITION 0x02
#define SCSI_STATUS_BUSY 0x08

/* Sense keys. */
#define SENSE_NO_SENSE 0x0
#define SENSE_NOT_READY 0x2
#define SENSE_MEDIUM_ERROR 0x3
#define SENSE_ILLEGAL_REQUEST 0x5
#define SENSE_UNIT_ATTENTION 0x6
#define SENSE_DATA_PROTECT 0x7

/* Peripheral device types. */
#define SCSI_TYPE_DISK 0x00
#define SCSI_TYPE_ROM 0x05

struct scsi_sense {
  bool valid;
  uint8_t key, asc, ascq;
};

/* A logical unit and what the tests learned about it. */
struct scsi_lun {
  struct vscsi *h;
  bool present;
  uint8_t target;
  uint16_t lun;
  unsigned vq; /* request virtqueue for synchronous commands */
  uint8_t type;
  bool removable;
  char vendor[9], product[17], revision[5];
  uint32_t block_size;
  uint64_t blocks;
  struct vscsi_req req; /* for synchronous commands */
  uint8_t *buf;         /* 64 KiB DMA scratch for command data */
};

#define SCSI_SCRATCH_SIZE 65536
#define SCSI_TIMEOUT_US 10000000ull

/* Sense of a completed request (fixed or descriptor format). */
struct scsi_sense scsi_sense_of(const struct vscsi_req *req);
/* GOOD status with virtio response OK. */
bool scsi_good(const struct vscsi_req *req);
/* CHECK CONDITION with this key/ASC (ascq < 0: any ASCQ). */
bool scsi_check(const struct vscsi_req *req, uint8_t key, uint8_t asc, int ascq);
/* "GOOD", "CHECK CONDITION 05/21/00 (ILLEGAL REQUEST: LOGICAL BLOCK ADDRESS OUT OF RANGE)",
 * "virtio response BAD_TARGET", ... */
const char *scsi_result_str(const struct vscsi_req *req, char *buf, size_t size);
/* "05/21/00" style. */
const char *scsi_sense_str(const struct vscsi_req *req, char *buf, size_t size);

/* CDB builders; each returns the CDB length. */
unsigned scsi_cdb_rw(uint8_t *cdb, bool write, unsigned size, uint64_t lba, uint32_t blocks,
                     bool fua);
unsigned scsi_cdb_sync_cache(uint8_t *cdb, unsigned size, uint64_t lba, uint32_t blocks);
unsigned scsi_cdb_inquiry(uint8_t *cdb, bool evpd, uint8_t page, uint16_t alloc);

void scsi_lun_init(struct scsi_lun *l, struct vscsi *h, uint8_t target, uint16_t lun, unsigned vq);
/* Runs one command synchronously on l->vq with l->req; returns the request (results inside). */
struct vscsi_req *scsi_cmd(struct scsi_lun *l, const uint8_t *cdb, unsigned cdb_len,
                           enum vscsi_dir dir, void *data, uint32_t len);
/* Same for a target/LUN that is not (yet) a scsi_lun. */
struct vscsi_req *scsi_cmd_at(struct vscsi *h, struct vscsi_req *req, unsigned vq, uint8_t target,
                              uint16_t lun, const uint8_t *cdb, unsigned cdb_len,
                              enum vscsi_dir dir, void *data, uint32_t len);

/* Standard INQUIRY into l (type, vendor, product, revision); false if not GOOD. */
bool scsi_inquiry_std(struct scsi_lun *l);
/* TEST UNIT READY until GOOD, swallowing UNIT ATTENTIONs; fails the test after timeout_us or on
 * another error. Prints the UAs consumed when verbose. */
void scsi_wait_ready(struct scsi_lun *l, uint64_t timeout_us, bool verbose);
/* READ CAPACITY(16) (disk) or (10) (CD) into l->blocks / l->block_size; fails the test if not GOOD. */
void scsi_read_capacity(struct scsi_lun *l, bool use16);

/* Finds a disk (type 0) and a CD (type 5): REPORT LUNS on targets 0..max_scan (BAD_TARGET = no
 * target), INQUIRY on each LUN. disk=T:L / cd=T:L on the command line override. Missing ones
 * have present = false. */
void scsi_discover(struct vscsi *h, struct scsi_lun *disk, struct scsi_lun *cd, bool verbose);

/* Read/write helpers on l (block units of l->block_size); return the request. */
struct vscsi_req *scsi_rw(struct scsi_lun *l, bool write, unsigned cdb_size, uint64_t lba,
                          uint32_t blocks, bool fua, void *buf);

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t be64(const uint8_t *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }
static inline void put_be16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)(v >> 8);
  p[1] = (uint8_t)v;
}
static inline void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}
static inline void put_be64(uint8_t *p, uint64_t v) {
  put_be32(p, (uint32_t)(v >> 32));
  put_be32(p + 4, (uint32_t)v);
}

#endif /* TESTS_GUEST_SCSI_H_ */
