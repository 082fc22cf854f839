/*
 * virtio-scsi host driver (virtio 1.2 5.6); see virtio_scsi.h.
 */
#include "tests/guest/virtio_scsi.h"

#include "tests/guest/guest.h"
#include "tests/guest/internal.h"

#define VSCSI_WAKE_VECTOR 0x5f
#define REQ_HDR_FIXED 19  /* lun[8] id task_attr prio crn */
#define RESP_HDR_FIXED 12 /* sense_len resid status_qualifier status response */

static volatile bool wake_timer_on[GUEST_MAX_CPUS];
static volatile uint64_t wake_ticks;

void vscsi_default_options(struct vscsi_options *opt) {
  memset(opt, 0, sizeof(*opt));
  opt->indirect = true;
  opt->event_idx = true;
  opt->msix = true;
  opt->queue_size = 256;
  opt->max_request_queues = VSCSI_MAX_REQUEST_QUEUES;
}

void vscsi_options_from_args(struct vscsi_options *opt) {
  opt->indirect = arg_u64("indirect", opt->indirect) != 0;
  opt->event_idx = arg_u64("event_idx", opt->event_idx) != 0;
  opt->msix = arg_u64("msix", opt->msix) != 0;
  opt->queue_size = (unsigned)arg_u64("qsize", opt->queue_size);
  opt->max_request_queues = (unsigned)arg_u64("max_queues", opt->max_request_queues);
  opt->device_index = (unsigned)arg_u64("device", opt->device_index);
  opt->verbose = arg_u64("verbose", opt->verbose) != 0;
  if (opt->queue_size < 2 || opt->queue_size > 32768) {
    printf("TEST %s: FAIL qsize must be 2..32768\n", test_name());
    guest_exit(GUEST_EXIT_USAGE);
  }
}

static void queue_irq(unsigned vector, void *context) {
  (void)vector;
  struct vscsi_queue *q = context;
  /* Ring 0, emulated: count, and tell the CPU from the ring-0 stack we run on (no CPUID). */
  uintptr_t sp;
  __asm__ volatile("mov %%rsp, %0" : "=r"(sp));
  unsigned cpu = (unsigned)((sp - (uintptr_t)kernel_stacks) / KERNEL_STACK_SIZE);
  if (cpu != q->apic_id) q->misrouted++;
  q->irqs++;
}

static void config_irq(unsigned vector, void *context) {
  (void)vector;
  struct vscsi *h = context;
  h->config_irqs++;
}

static void wake_tick(unsigned vector, void *context) {
  (void)vector;
  (void)context;
  wake_ticks++;
}

const char *vscsi_response_name(uint8_t response) {
  static const char *const names[] = {"OK",
                                      "OVERRUN",
                                      "ABORTED",
                                      "BAD_TARGET",
                                      "RESET",
                                      "BUSY",
                                      "TRANSPORT_FAILURE",
                                      "TARGET_FAILURE",
                                      "NEXUS_FAILURE",
                                      "FAILURE",
                                      "FUNCTION_SUCCEEDED",
                                      "FUNCTION_REJECTED",
                                      "INCORRECT_LUN"};
  return response < sizeof(names) / sizeof(names[0]) ? names[response] : "unknown";
}

static void read_config(struct vscsi *h) {
  const struct virtio_pci *vp = &h->vp;
  if (vp->device.length < 36) {
    test_fail("virtio-scsi: device configuration is %u bytes, struct virtio_scsi_config needs 36",
              vp->device.length);
  }
  /* 4.1.4.3.1 / 2.5.1: re-read while config_generation changes. */
  for (unsigned attempt = 0;; attempt++) {
    uint8_t before = virtio_pci_config_generation(vp);
    h->cfg.num_queues = virtio_pci_cfg_read32(vp, 0);
    h->cfg.seg_max = virtio_pci_cfg_read32(vp, 4);
    h->cfg.max_sectors = virtio_pci_cfg_read32(vp, 8);
    h->cfg.cmd_per_lun = virtio_pci_cfg_read32(vp, 12);
    h->cfg.event_info_size = virtio_pci_cfg_read32(vp, 16);
    h->cfg.sense_size = virtio_pci_cfg_read32(vp, 20);
    h->cfg.cdb_size = virtio_pci_cfg_read32(vp, 24);
    h->cfg.max_channel = virtio_pci_cfg_read16(vp, 28);
    h->cfg.max_target = virtio_pci_cfg_read16(vp, 30);
    h->cfg.max_lun = virtio_pci_cfg_read32(vp, 32);
    if (virtio_pci_config_generation(vp) == before) break;
    if (attempt > 10) test_fail("virtio-scsi: config_generation keeps changing");
  }
}

void vscsi_init(struct vscsi *h, const struct vscsi_options *opt) {
  memset(h, 0, sizeof(*h));
  h->config_msix_entry = VIRTIO_MSI_NO_VECTOR;
  struct pci_device dev;
  if (!virtio_pci_find(VIRTIO_ID_SCSI, VIRTIO_SCSI_TRANSITIONAL_ID, opt->device_index, &dev)) {
    test_fail("no virtio-scsi device (1af4:%04x or 1af4:%04x) number %u on PCI bus 0",
              VIRTIO_PCI_MODERN_DEVICE_ID(VIRTIO_ID_SCSI), VIRTIO_SCSI_TRANSITIONAL_ID,
              opt->device_index);
  }
  if (opt->verbose) {
    printf("virtio-scsi: PCI 00:%02x.%u %04x:%04x (%s) class %06x\n", dev.dev, dev.fn,
           dev.vendor_id, dev.device_id,
           dev.device_id == VIRTIO_SCSI_TRANSITIONAL_ID
               ? "transitional, driven through its modern interface"
               : "modern",
           dev.class_code);
  }
  struct virtio_pci *vp = &h->vp;
  virtio_pci_open(vp, &dev, opt->verbose);
  if (!vp->device.address) test_fail("virtio-scsi: no device configuration capability");

  /* 3.1.1 */
  virtio_pci_reset(vp);
  virtio_pci_add_status(vp, VIRTIO_STATUS_ACKNOWLEDGE);
  virtio_pci_add_status(vp, VIRTIO_STATUS_DRIVER);
  uint64_t wanted = (1ull << VIRTIO_F_VERSION_1) | (1ull << VIRTIO_F_ACCESS_PLATFORM);
  if (opt->indirect) wanted |= 1ull << VIRTIO_F_INDIRECT_DESC;
  if (opt->event_idx) wanted |= 1ull << VIRTIO_F_EVENT_IDX;
  virtio_pci_negotiate(vp, wanted);
  bool indirect = vp->driver_features & (1ull << VIRTIO_F_INDIRECT_DESC);
  bool event_idx = vp->driver_features & (1ull << VIRTIO_F_EVENT_IDX);

  read_config(h);
  struct vscsi_config *c = &h->cfg;
  if (c->num_queues == 0) test_fail("virtio-scsi: num_queues is 0");
  if (c->cdb_size < 16)
    test_fail("virtio-scsi: cdb_size %u < 16 (READ(16) would not fit)", c->cdb_size);
  if (c->cdb_size > 256 || c->sense_size > 256) {
    test_fail("virtio-scsi: implausible cdb_size %u / sense_size %u", c->cdb_size, c->sense_size);
  }
  h->hdr_size = REQ_HDR_FIXED + c->cdb_size;
  h->resp_size = RESP_HDR_FIXED + c->sense_size;
  if (vp->num_queues < VSCSI_FIRST_REQUEST_QUEUE + 1) {
    test_fail(
        "virtio-scsi: the common configuration has %u queues, need control, event and one "
        "request queue",
        vp->num_queues);
  }
  unsigned available = vp->num_queues - VSCSI_FIRST_REQUEST_QUEUE;
  if (available != c->num_queues && opt->verbose) {
    printf("virtio-scsi: note: config num_queues %u, common num_queues %u - 2 = %u\n",
           c->num_queues, vp->num_queues, available);
  }
  unsigned n = c->num_queues < available ? c->num_queues : available;
  if (n > opt->max_request_queues) n = opt->max_request_queues;
  if (n > VSCSI_MAX_REQUEST_QUEUES) n = VSCSI_MAX_REQUEST_QUEUES;
  if (n == 0) n = 1;
  h->request_queues = n;
  unsigned total = VSCSI_FIRST_REQUEST_QUEUE + n;

  /* MSI-X first (as Linux: vectors exist before virtio is told about them), entry 0 for
   * configuration changes, entry 1 + q for queue q. */
  unsigned boot_apic = this_cpu();
  bool msix = opt->msix && vp->has_msix;
  if (msix) {
    lapic_enable(); /* a software-disabled LAPIC does not take the messages */
    pci_msix_enable_masked(&vp->pci, &vp->msix);
    irq_register(VSCSI_VECTOR_BASE, config_irq, h);
    pci_msix_set_entry(&vp->msix, 0, boot_apic, VSCSI_VECTOR_BASE, false);
    for (unsigned q = 0; q < total && 1 + q < vp->msix.table_size; q++) {
      h->q[q].msix_entry = (uint16_t)(1 + q);
      h->q[q].vector = (uint8_t)(VSCSI_VECTOR_BASE + 1 + q);
      h->q[q].apic_id = (uint8_t)boot_apic;
      irq_register(h->q[q].vector, queue_irq, &h->q[q]);
      pci_msix_set_entry(&vp->msix, 1 + q, boot_apic, h->q[q].vector, false);
    }
    pci_msix_unmask_function(&vp->pci, &vp->msix);
    uint16_t got = virtio_pci_set_config_vector(vp, 0);
    if (got != 0) test_fail("virtio-scsi: config MSI-X vector 0 not accepted (reads %u)", got);
    h->config_msix_entry = 0;
  }
  for (unsigned q = 0; q < total; q++) {
    if (!msix || 1 + q >= vp->msix.table_size) h->q[q].msix_entry = VIRTIO_MSI_NO_VECTOR;
    virtio_pci_setup_queue(vp, (uint16_t)q, (uint16_t)opt->queue_size, h->q[q].msix_entry,
                           event_idx, indirect, &h->q[q].vq);
  }

  /* Event buffers (5.6.6.3: the driver should keep the event queue supplied). */
  h->event_size = c->event_info_size > sizeof(struct vscsi_event) ? c->event_info_size
                                                                  : sizeof(struct vscsi_event);
  h->events = dma_alloc((size_t)h->event_size * VSCSI_EVENT_BUFFERS);
  for (unsigned i = 0; i < VSCSI_EVENT_BUFFERS; i++) {
    uint8_t *buf = (uint8_t *)h->events + (size_t)i * h->event_size;
    struct virtq_buf b = {dma_addr(buf), h->event_size, true};
    if (!virtq_add(&h->q[VSCSI_EVENT_QUEUE].vq, &b, 0, 1, buf)) break;
  }
  h->ctrl_req = dma_alloc(64);
  h->ctrl_resp = h->ctrl_req + 32;

  virtio_pci_add_status(vp, VIRTIO_STATUS_DRIVER_OK);
  uint8_t status = virtio_pci_status(vp);
  if (status & (VIRTIO_STATUS_DEVICE_NEEDS_RESET | VIRTIO_STATUS_FAILED)) {
    test_fail("virtio-scsi: device status 0x%x after DRIVER_OK", status);
  }
  /* Only now may the device be notified (3.1.1 step 8). */
  virtq_kick(&h->q[VSCSI_EVENT_QUEUE].vq);
  h->next_tag = 1;
}

void vscsi_print_info(const struct vscsi *h) {
  const struct vscsi_config *c = &h->cfg;
  const struct virtio_pci *vp = &h->vp;
  printf("virtio-scsi: features offered 0x%lx, negotiated 0x%lx (VERSION_1%s%s%s)\n",
         vp->device_features, vp->driver_features,
         vp->driver_features & (1ull << VIRTIO_F_EVENT_IDX) ? " EVENT_IDX" : "",
         vp->driver_features & (1ull << VIRTIO_F_INDIRECT_DESC) ? " INDIRECT_DESC" : "",
         vp->driver_features & (1ull << VIRTIO_F_ACCESS_PLATFORM) ? " ACCESS_PLATFORM" : "");
  printf(
      "virtio-scsi: config num_queues=%u seg_max=%u max_sectors=%u cmd_per_lun=%u "
      "event_info_size=%u sense_size=%u cdb_size=%u max_channel=%u max_target=%u max_lun=%u\n",
      c->num_queues, c->seg_max, c->max_sectors, c->cmd_per_lun, c->event_info_size, c->sense_size,
      c->cdb_size, c->max_channel, c->max_target, c->max_lun);
  for (unsigned q = 0; q < VSCSI_FIRST_REQUEST_QUEUE + h->request_queues; q++) {
    const struct vscsi_queue *vq = &h->q[q];
    printf("virtio-scsi: queue %u (%s): size %u, MSI-X entry %d vector 0x%x\n", q,
           q == 0   ? "control"
           : q == 1 ? "event"
                    : "request",
           vq->vq.size, vq->msix_entry == VIRTIO_MSI_NO_VECTOR ? -1 : (int)vq->msix_entry,
           vq->vector);
  }
}

void vscsi_route_queue(struct vscsi *h, unsigned vq_index, unsigned apic_id) {
  struct vscsi_queue *q = &h->q[vq_index];
  if (q->msix_entry == VIRTIO_MSI_NO_VECTOR) return;
  pci_msix_set_entry(&h->vp.msix, q->msix_entry, apic_id, q->vector, false);
  q->apic_id = (uint8_t)apic_id;
}

void vscsi_set_irq_mode(struct vscsi *h, unsigned vq_index, bool irq) {
  struct vscsi_queue *q = &h->q[vq_index];
  if (irq && q->msix_entry == VIRTIO_MSI_NO_VECTOR) {
    test_fail("virtio-scsi: queue %u has no MSI-X vector (msix=0 or too few table entries)",
              vq_index);
  }
  q->irq_mode = irq;
  if (irq) {
    (void)virtq_enable_interrupts(&q->vq);
  } else {
    virtq_disable_interrupts(&q->vq);
  }
}

void vscsi_req_init(struct vscsi *h, struct vscsi_req *req) {
  memset(req, 0, sizeof(*req));
  req->hdr = dma_alloc_aligned(h->hdr_size + h->resp_size, 64);
  req->resp = req->hdr + ((h->hdr_size + 15) & ~15u);
}

void vscsi_req_set(struct vscsi_req *req, uint8_t target, uint16_t lun, const uint8_t *cdb,
                   unsigned cdb_len, enum vscsi_dir dir, void *data, uint32_t len) {
  if (cdb_len > VSCSI_MAX_CDB) guest_panic("vscsi_req_set: CDB of %u bytes", cdb_len);
  req->target = target;
  req->lun = lun;
  memset(req->cdb, 0, sizeof(req->cdb));
  memcpy(req->cdb, cdb, cdb_len);
  req->cdb_len = (uint8_t)cdb_len;
  req->dir = data && len ? dir : VSCSI_DIR_NONE;
  req->nsg = 0;
  if (req->dir != VSCSI_DIR_NONE) {
    req->sg[0].addr = data;
    req->sg[0].len = len;
    req->nsg = 1;
  }
}

static void put_le(uint8_t *p, uint64_t v, unsigned n) {
  for (unsigned i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le(const uint8_t *p, unsigned n) {
  uint64_t v = 0;
  for (unsigned i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

unsigned vscsi_max_segments(const struct vscsi *h, unsigned vq_index) {
  unsigned n = VSCSI_MAX_SEGMENTS;
  if (h->cfg.seg_max && h->cfg.seg_max < n) n = h->cfg.seg_max;
  unsigned ring = h->q[vq_index].vq.size > 2 ? h->q[vq_index].vq.size - 2u : 1u;
  return ring < n ? ring : n;
}

bool vscsi_submit(struct vscsi *h, unsigned vq_index, struct vscsi_req *req) {
  if (req->in_flight) guest_panic("vscsi_submit: request already in flight");
  if (req->cdb_len > h->cfg.cdb_size) {
    test_fail("virtio-scsi: %u-byte CDB does not fit cdb_size %u", req->cdb_len, h->cfg.cdb_size);
  }
  if (req->nsg > vscsi_max_segments(h, vq_index)) {
    test_fail("virtio-scsi: %u data segments exceed the limit %u (seg_max %u, queue size %u)",
              req->nsg, vscsi_max_segments(h, vq_index), h->cfg.seg_max, h->q[vq_index].vq.size);
  }
  uint8_t *hdr = req->hdr;
  memset(hdr, 0, h->hdr_size);
  /* 5.6.6.1: lun[0] = 1, lun[1] = target, lun[2..3] = single-level LUN (flat space 0x4000). */
  hdr[0] = 1;
  hdr[1] = req->target;
  hdr[2] = (uint8_t)(0x40 | ((req->lun >> 8) & 0x3f));
  hdr[3] = (uint8_t)req->lun;
  req->tag = h->next_tag++;
  put_le(hdr + 8, req->tag, 8);
  hdr[16] = req->task_attr;
  memcpy(hdr + REQ_HDR_FIXED, req->cdb, req->cdb_len);
  /* Poison the response header so a device that does not write it is caught. */
  memset(req->resp, 0xff, RESP_HDR_FIXED);

  struct virtq_buf bufs[VSCSI_MAX_SEGMENTS + 2];
  unsigned n = 0, n_out;
  bufs[n++] = (struct virtq_buf){dma_addr(hdr), h->hdr_size, false};
  if (req->dir == VSCSI_DIR_TO_DEVICE) {
    for (unsigned i = 0; i < req->nsg; i++)
      bufs[n++] = (struct virtq_buf){dma_addr(req->sg[i].addr), req->sg[i].len, false};
  }
  n_out = n;
  bufs[n++] = (struct virtq_buf){dma_addr(req->resp), h->resp_size, true};
  if (req->dir == VSCSI_DIR_FROM_DEVICE) {
    for (unsigned i = 0; i < req->nsg; i++)
      bufs[n++] = (struct virtq_buf){dma_addr(req->sg[i].addr), req->sg[i].len, true};
  }
  req->submit_tsc = rdtsc();
  if (!virtq_add(&h->q[vq_index].vq, bufs, n_out, n - n_out, req)) return false;
  req->in_flight = true;
  return true;
}

void vscsi_kick(struct vscsi *h, unsigned vq_index) { virtq_kick(&h->q[vq_index].vq); }

struct vscsi_req *vscsi_poll(struct vscsi *h, unsigned vq_index) {
  uint32_t len;
  struct vscsi_req *req = virtq_get(&h->q[vq_index].vq, &len);
  if (!req) return NULL;
  req->complete_tsc = rdtsc();
  req->in_flight = false;
  req->used_len = len;
  const uint8_t *r = req->resp;
  req->sense_len = (uint32_t)get_le(r, 4);
  req->residual = (uint32_t)get_le(r + 4, 4);
  req->status_qualifier = (uint16_t)get_le(r + 8, 2);
  req->status = r[10];
  req->response = r[11];
  if (req->sense_len == 0xffffffffu && req->response == 0xff) {
    test_fail("virtio-scsi: queue %u: tag %lu completed (len %u) without a response written",
              vq_index, req->tag, len);
  }
  if (req->sense_len > h->cfg.sense_size) {
    test_fail("virtio-scsi: queue %u: sense_len %u exceeds sense_size %u", vq_index, req->sense_len,
              h->cfg.sense_size);
  }
  uint32_t copy = req->sense_len < VSCSI_MAX_SENSE ? req->sense_len : VSCSI_MAX_SENSE;
  memset(req->sense, 0, sizeof(req->sense));
  memcpy(req->sense, r + RESP_HDR_FIXED, copy);
  return req;
}

struct vscsi_req *vscsi_wait(struct vscsi *h, unsigned vq_index, uint64_t deadline) {
  struct vscsi_queue *q = &h->q[vq_index];
  for (;;) {
    struct vscsi_req *req = vscsi_poll(h, vq_index);
    if (req) return req;
    if (deadline_passed(deadline)) {
      test_fail(
          "virtio-scsi: queue %u: no completion before the deadline (%u in flight, %s, "
          "%lu interrupts)",
          vq_index, virtq_in_flight(&q->vq), q->irq_mode ? "interrupt-driven" : "polled", q->irqs);
    }
    if (!q->irq_mode) {
      cpu_relax();
      continue;
    }
    if (virtq_enable_interrupts(&q->vq)) continue; /* arrived meanwhile */
    if (q->apic_id >= GUEST_MAX_CPUS || !wake_timer_on[q->apic_id]) vscsi_wake_timer_start(20000);
    uint64_t before = q->irqs;
    q->waits++;
    cpu_wait_for_interrupt(); /* IF = 0 until HLT: an interrupt that came in between is pending */
    if (q->irqs != before) q->wakeups++;
  }
}

void vscsi_exec(struct vscsi *h, unsigned vq_index, struct vscsi_req *req, uint64_t timeout_us) {
  if (virtq_in_flight(&h->q[vq_index].vq)) {
    guest_panic("vscsi_exec: queue %u has %u requests in flight", vq_index,
                virtq_in_flight(&h->q[vq_index].vq));
  }
  if (!vscsi_submit(h, vq_index, req)) test_fail("virtio-scsi: queue %u is full", vq_index);
  vscsi_kick(h, vq_index);
  struct vscsi_req *done = vscsi_wait(h, vq_index, deadline_after_us(timeout_us));
  if (done != req)
    test_fail("virtio-scsi: queue %u completed another request than submitted", vq_index);
}

uint8_t vscsi_tmf(struct vscsi *h, uint32_t subtype, uint8_t target, uint16_t lun, uint64_t id) {
  struct virtq *vq = &h->q[VSCSI_CONTROL_QUEUE].vq;
  uint8_t *req = h->ctrl_req, *resp = h->ctrl_resp;
  memset(req, 0, 24);
  put_le(req, VIRTIO_SCSI_T_TMF, 4);
  put_le(req + 4, subtype, 4);
  req[8] = 1;
  req[9] = target;
  req[10] = (uint8_t)(0x40 | ((lun >> 8) & 0x3f));
  req[11] = (uint8_t)lun;
  put_le(req + 16, id, 8);
  resp[0] = 0xff;
  struct virtq_buf bufs[2] = {{dma_addr(req), 24, false}, {dma_addr(resp), 1, true}};
  if (!virtq_add(vq, bufs, 1, 1, req)) test_fail("virtio-scsi: control queue full");
  virtq_kick(vq);
  uint64_t deadline = deadline_after_us(5000000);
  uint32_t len;
  void *done;
  while (!(done = virtq_get(vq, &len))) {
    if (deadline_passed(deadline)) test_fail("virtio-scsi: task management request timed out");
    cpu_relax();
  }
  if (done != req) test_fail("virtio-scsi: control queue returned a foreign buffer");
  return resp[0];
}

bool vscsi_get_event(struct vscsi *h, struct vscsi_event *out) {
  struct virtq *vq = &h->q[VSCSI_EVENT_QUEUE].vq;
  uint32_t len;
  uint8_t *buf = virtq_get(vq, &len);
  if (!buf) return false;
  out->event = (uint32_t)get_le(buf, 4);
  memcpy(out->lun, buf + 4, 8);
  out->reason = (uint32_t)get_le(buf + 12, 4);
  memset(buf, 0, h->event_size);
  struct virtq_buf b = {dma_addr(buf), h->event_size, true};
  virtq_add(vq, &b, 0, 1, buf);
  virtq_kick(vq);
  return true;
}

void vscsi_wake_timer_start(uint64_t period_us) {
  unsigned cpu = this_cpu();
  lapic_enable();
  irq_register(VSCSI_WAKE_VECTOR, wake_tick, NULL);
  /* KVM's LAPIC timer runs at 1 GHz; divide by 16 (as the timer test does). */
  lapic_write(LAPIC_TIMER_DIVIDE, 0x3);
  lapic_write(LAPIC_LVT_TIMER, VSCSI_WAKE_VECTOR | (1u << 17)); /* periodic */
  lapic_write(LAPIC_TIMER_INITIAL, (uint32_t)(period_us * 1000 / 16));
  if (cpu < GUEST_MAX_CPUS) wake_timer_on[cpu] = true;
}

void vscsi_wake_timer_stop(void) {
  unsigned cpu = this_cpu();
  lapic_write(LAPIC_LVT_TIMER, VSCSI_WAKE_VECTOR | (1u << 16)); /* masked */
  lapic_write(LAPIC_TIMER_INITIAL, 0);
  if (cpu < GUEST_MAX_CPUS) wake_timer_on[cpu] = false;
}
