/*
 * Split virtqueue, driver side (virtio 1.2 2.7). See virtqueue.h.
 *
 * Memory ordering (x86, write-back DMA memory, coherent device): descriptor and ring-entry stores
 * must be visible before the avail idx store (wmb), the avail idx store before the read of the
 * device's avail_event/flags (mb: a store-load order, 2.7.13.2 and 2.7.10), and the used idx load
 * before the loads of the used entries (rmb).
 */
#include "tests/guest/virtqueue.h"

#include "tests/guest/guest.h"

#define USED_EVENT(vq) ((vq)->avail->ring[(vq)->size])
/* used->ring[size] is where the avail_event field sits (after 4 header bytes and size entries). */
#define AVAIL_EVENT(vq) \
  (*(volatile uint16_t *)((uint8_t *)(vq)->used + 4 + 8 * (uint64_t)(vq)->size))

static inline uint16_t read_used_idx(const struct virtq *vq) {
  return *(volatile const uint16_t *)&vq->used->idx;
}

/* 2.7.10: notify when the new index passed the event index since the old one. */
static inline bool need_event(uint16_t event, uint16_t new_idx, uint16_t old_idx) {
  return (uint16_t)(new_idx - event - 1) < (uint16_t)(new_idx - old_idx);
}

void virtq_init(struct virtq *vq, uint16_t index, uint16_t size, bool event_idx, bool indirect) {
  if (size == 0 || (size & (size - 1)) || size > 32768) {
    guest_panic("virtq_init: queue %u: size %u is not a power of two <= 32768", index, size);
  }
  memset(vq, 0, sizeof(*vq));
  vq->index = index;
  vq->size = size;
  vq->event_idx = event_idx;
  vq->indirect = indirect;
  /* Alignment (2.7, table "Virtqueue Part Alignment"): descriptors 16, avail 2, used 4. Page
   * alignment keeps each part in its own pages. */
  vq->desc = dma_alloc(sizeof(struct virtq_desc) * size);
  vq->avail = dma_alloc(sizeof(uint16_t) * (3 + size));
  vq->used = dma_alloc(sizeof(uint16_t) * 3 + sizeof(struct virtq_used_elem) * size);
  if (indirect) {
    vq->indirect_tables = dma_alloc(sizeof(struct virtq_desc) * VIRTQ_MAX_INDIRECT * size);
  }
  vq->cookies = dma_alloc(sizeof(void *) * size);
  vq->chain_len = dma_alloc(sizeof(uint16_t) * size);
  for (uint16_t i = 0; i < size; i++) vq->desc[i].next = (uint16_t)(i + 1);
  vq->free_head = 0;
  vq->num_free = size;
  /* Start in polled mode: no interrupts until asked for. */
  virtq_disable_interrupts(vq);
}

bool virtq_add(struct virtq *vq, const struct virtq_buf *bufs, unsigned n_out, unsigned n_in,
               void *cookie) {
  unsigned total = n_out + n_in;
  if (total == 0 || !cookie) guest_panic("virtq_add: empty request or NULL cookie");
  /* 2.7.5.3.1: no chain (an indirect table included) longer than the queue size. */
  bool use_indirect = vq->indirect && total > 1 && total <= VIRTQ_MAX_INDIRECT && total <= vq->size;
  unsigned needed = use_indirect ? 1 : total;
  if (needed > vq->size)
    guest_panic("virtq_add: %u descriptors exceed queue size %u", needed, vq->size);
  if (vq->num_free < needed) return false;

  uint16_t head = vq->free_head;
  if (use_indirect) {
    struct virtq_desc *table = vq->indirect_tables + (uint64_t)head * VIRTQ_MAX_INDIRECT;
    for (unsigned i = 0; i < total; i++) {
      table[i].addr = bufs[i].addr;
      table[i].len = bufs[i].len;
      table[i].flags = (uint16_t)((bufs[i].write ? VIRTQ_DESC_F_WRITE : 0) |
                                  (i + 1 < total ? VIRTQ_DESC_F_NEXT : 0));
      table[i].next = (uint16_t)(i + 1 < total ? i + 1 : 0);
    }
    struct virtq_desc *d = &vq->desc[head];
    vq->free_head = d->next;
    d->addr = dma_addr(table);
    d->len = (uint32_t)(total * sizeof(struct virtq_desc));
    d->flags = VIRTQ_DESC_F_INDIRECT;
  } else {
    uint16_t i = head, last = head;
    for (unsigned n = 0; n < total; n++) {
      struct virtq_desc *d = &vq->desc[i];
      d->addr = bufs[n].addr;
      d->len = bufs[n].len;
      d->flags = (uint16_t)((bufs[n].write ? VIRTQ_DESC_F_WRITE : 0) |
                            (n + 1 < total ? VIRTQ_DESC_F_NEXT : 0));
      last = i;
      i = d->next; /* free-list link doubles as the chain link */
    }
    vq->free_head = vq->desc[last].next;
  }
  vq->num_free = (uint16_t)(vq->num_free - needed);
  vq->chain_len[head] = (uint16_t)needed;
  vq->cookies[head] = cookie;

  vq->avail->ring[vq->avail_idx & (vq->size - 1)] = head;
  wmb(); /* descriptors and ring entry before the index */
  vq->avail_idx++;
  *(volatile uint16_t *)&vq->avail->idx = vq->avail_idx;
  vq->added++;
  return true;
}

bool virtq_kick(struct virtq *vq) {
  uint16_t old_idx = vq->kicked_idx, new_idx = vq->avail_idx;
  vq->kicked_idx = new_idx;
  if (old_idx == new_idx) return false;
  mb(); /* the avail idx store must be visible before we read the device's suppression state */
  bool notify;
  if (vq->event_idx) {
    notify = need_event(AVAIL_EVENT(vq), new_idx, old_idx);
  } else {
    notify = !(*(volatile uint16_t *)&vq->used->flags & VIRTQ_USED_F_NO_NOTIFY);
  }
  if (notify) {
    /* 4.1.4.4.1: without VIRTIO_F_NOTIFICATION_DATA the driver writes the queue index. */
    mmio_write16(vq->notify_addr, vq->index);
    vq->notifications++;
  } else {
    vq->notifications_suppressed++;
  }
  return notify;
}

bool virtq_has_used(const struct virtq *vq) { return read_used_idx(vq) != vq->last_used; }

void *virtq_get(struct virtq *vq, uint32_t *len) {
  uint16_t used_idx = read_used_idx(vq);
  if (used_idx == vq->last_used) return NULL;
  if ((uint16_t)(used_idx - vq->last_used) > vq->size) {
    test_fail(
        "virtqueue %u: used idx %u is %u entries ahead of the driver (%u), more than the "
        "queue size %u",
        vq->index, used_idx, (uint16_t)(used_idx - vq->last_used), vq->last_used, vq->size);
  }
  rmb(); /* the entry after the index */
  struct virtq_used_elem elem = vq->used->ring[vq->last_used & (vq->size - 1)];
  if (elem.id >= vq->size || !vq->cookies[elem.id]) {
    test_fail(
        "virtqueue %u: device returned head %u (used entry %u) that is not outstanding: "
        "a duplicated or invented completion",
        vq->index, elem.id, vq->last_used);
  }
  uint16_t head = (uint16_t)elem.id;
  void *cookie = vq->cookies[head];
  vq->cookies[head] = NULL;
  /* Return the chain to the free list. */
  uint16_t n = vq->chain_len[head], last = head;
  for (uint16_t k = 1; k < n; k++) last = vq->desc[last].next;
  vq->desc[last].next = vq->free_head;
  vq->free_head = head;
  vq->num_free = (uint16_t)(vq->num_free + n);
  vq->last_used++;
  vq->completed++;
  if (vq->event_idx && !vq->interrupts && (uint16_t)(USED_EVENT(vq) - vq->last_used) < 0x4000) {
    /* Polled: keep used_event half the index space ahead, so the device's used index never
     * reaches it (it is at most a queue size ahead of last_used). Not "just behind us": a device
     * checks the used entries it pushed since its last check (2.7.7.2), and a poller that moved
     * used_event into that window as it consumed them would be interrupted anyway. */
    USED_EVENT(vq) = (uint16_t)(vq->last_used + 0x8000);
  }
  if (len) *len = elem.len;
  return cookie;
}

bool virtq_enable_interrupts(struct virtq *vq) {
  vq->interrupts = true;
  if (vq->event_idx) {
    /* Interrupt when the device writes used entry last_used (2.7.7.2). */
    *(volatile uint16_t *)&USED_EVENT(vq) = vq->last_used;
  } else {
    *(volatile uint16_t *)&vq->avail->flags = 0;
  }
  mb(); /* publish before re-checking the used index */
  return virtq_has_used(vq);
}

void virtq_disable_interrupts(struct virtq *vq) {
  vq->interrupts = false;
  if (vq->event_idx) {
    *(volatile uint16_t *)&USED_EVENT(vq) = (uint16_t)(vq->last_used + 0x8000); /* see virtq_get */
  } else {
    *(volatile uint16_t *)&vq->avail->flags = VIRTQ_AVAIL_F_NO_INTERRUPT;
  }
}
