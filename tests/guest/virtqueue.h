/*
 * Driver side of a split virtqueue (virtio 1.2 2.7): descriptor table, available and used rings,
 * optional indirect descriptor tables (VIRTIO_F_INDIRECT_DESC, 2.7.5.3) and event-index
 * notification suppression (VIRTIO_F_EVENT_IDX, 2.7.7 and 2.7.10).
 *
 * A virtqueue belongs to one CPU at a time: nothing here takes a lock. Completions are found by
 * polling the used ring (virtq_get); for interrupt-driven use, virtq_enable_interrupts() before
 * waiting and check its result (2.7.7.2: re-check after enabling).
 */
#ifndef TESTS_GUEST_VIRTQUEUE_H_
#define TESTS_GUEST_VIRTQUEUE_H_

#include <stdbool.h>
#include <stdint.h>

#define VIRTQ_DESC_F_NEXT 1
#define VIRTQ_DESC_F_WRITE 2
#define VIRTQ_DESC_F_INDIRECT 4
#define VIRTQ_AVAIL_F_NO_INTERRUPT 1
#define VIRTQ_USED_F_NO_NOTIFY 1

struct virtq_desc {
  uint64_t addr;
  uint32_t len;
  uint16_t flags;
  uint16_t next;
};

struct virtq_avail {
  uint16_t flags;
  uint16_t idx;
  uint16_t ring[]; /* [size], then used_event */
};

struct virtq_used_elem {
  uint32_t id;
  uint32_t len;
};

struct virtq_used {
  uint16_t flags;
  uint16_t idx;
  struct virtq_used_elem ring[]; /* [size], then avail_event */
};

/* One buffer of a request: `write` = device-writable ("in"). */
struct virtq_buf {
  uint64_t addr;
  uint32_t len;
  bool write;
};

#define VIRTQ_MAX_INDIRECT 64 /* descriptors per indirect table */

struct virtq {
  uint16_t index; /* queue number on the device */
  uint16_t size;  /* power of two */
  bool event_idx, indirect, interrupts;
  struct virtq_desc *desc;
  struct virtq_avail *avail;
  struct virtq_used *used;
  struct virtq_desc *indirect_tables; /* size tables of VIRTQ_MAX_INDIRECT entries */
  void **cookies;                     /* per head: the caller's pointer; NULL = free */
  uint16_t *chain_len;                /* per head: descriptors in the direct chain */
  uint16_t free_head, num_free;
  uint16_t avail_idx;   /* shadow of avail->idx */
  uint16_t kicked_idx;  /* avail_idx at the last notification decision */
  uint16_t last_used;   /* next used-ring entry to consume */
  uint64_t notify_addr; /* MMIO address to write the queue index to */
  /* statistics */
  uint64_t added, completed, notifications, notifications_suppressed;
};

/* Allocates the rings (zeroed DMA memory) for `size` entries (power of two, <= 32768). */
void virtq_init(struct virtq *vq, uint16_t index, uint16_t size, bool event_idx, bool indirect);
/* Queues one request of n_out device-readable buffers followed by n_in device-writable ones.
 * Uses one indirect descriptor when negotiated and the chain has more than one buffer. Returns
 * false when the ring has no room. The request becomes visible to the device at once (avail idx
 * is published); the device is told by virtq_kick(). */
bool virtq_add(struct virtq *vq, const struct virtq_buf *bufs, unsigned n_out, unsigned n_in,
               void *cookie);
/* Notifies the device unless it asked not to be (event index / NO_NOTIFY); returns whether it
 * wrote the doorbell. */
bool virtq_kick(struct virtq *vq);
/* True when the device has returned buffers not yet taken with virtq_get(). */
bool virtq_has_used(const struct virtq *vq);
/* Takes the next used buffer: returns its cookie and the written length, or NULL when none.
 * Fails the test when the device returns a head that is not outstanding (a duplicated or made-up
 * completion). */
void *virtq_get(struct virtq *vq, uint32_t *len);
/* Asks the device for an interrupt on the next used buffer; returns true if used buffers are
 * already pending (then do not wait). */
bool virtq_enable_interrupts(struct virtq *vq);
/* Asks the device not to interrupt (polled mode). */
void virtq_disable_interrupts(struct virtq *vq);
/* Outstanding requests (added, not yet returned). */
static inline unsigned virtq_in_flight(const struct virtq *vq) {
  return (unsigned)(vq->added - vq->completed);
}

#endif /* TESTS_GUEST_VIRTQUEUE_H_ */
