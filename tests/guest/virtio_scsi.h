/*
 * virtio-scsi host driver for the test guest (virtio 1.2 5.6) over the modern PCI transport.
 * Queue 0 is the control queue, 1 the event queue, 2.. the request queues. Each queue is driven
 * by one CPU at a time; completion is polled (spin on the used ring) or interrupt-driven (MSI-X,
 * one vector per queue, the handler in ring 0 only counts, ring 3 waits with HLT).
 */
#ifndef TESTS_GUEST_VIRTIO_SCSI_H_
#define TESTS_GUEST_VIRTIO_SCSI_H_

#include <stdbool.h>
#include <stdint.h>

#include "tests/guest/virtio_pci.h"
#include "tests/guest/virtqueue.h"

#define VIRTIO_ID_SCSI 8
#define VIRTIO_SCSI_TRANSITIONAL_ID 0x1004

/* Feature bits (5.6.3). */
#define VIRTIO_SCSI_F_INOUT 0
#define VIRTIO_SCSI_F_HOTPLUG 1
#define VIRTIO_SCSI_F_CHANGE 2
#define VIRTIO_SCSI_F_T10_PI 3

/* Response codes of a command (5.6.6.1) and of task management (5.6.6.2). */
#define VIRTIO_SCSI_S_OK 0
#define VIRTIO_SCSI_S_OVERRUN 1
#define VIRTIO_SCSI_S_ABORTED 2
#define VIRTIO_SCSI_S_BAD_TARGET 3
#define VIRTIO_SCSI_S_RESET 4
#define VIRTIO_SCSI_S_BUSY 5
#define VIRTIO_SCSI_S_TRANSPORT_FAILURE 6
#define VIRTIO_SCSI_S_TARGET_FAILURE 7
#define VIRTIO_SCSI_S_NEXUS_FAILURE 8
#define VIRTIO_SCSI_S_FAILURE 9
#define VIRTIO_SCSI_S_FUNCTION_SUCCEEDED 10
#define VIRTIO_SCSI_S_FUNCTION_REJECTED 11
#define VIRTIO_SCSI_S_INCORRECT_LUN 12
#define VIRTIO_SCSI_S_FUNCTION_COMPLETE 0

#define VIRTIO_SCSI_T_TMF 0
#define VIRTIO_SCSI_T_AN_QUERY 1
#define VIRTIO_SCSI_T_AN_SUBSCRIBE 2
#define VIRTIO_SCSI_T_TMF_ABORT_TASK 0
#define VIRTIO_SCSI_T_TMF_ABORT_TASK_SET 1
#define VIRTIO_SCSI_T_TMF_CLEAR_ACA 2
#define VIRTIO_SCSI_T_TMF_CLEAR_TASK_SET 3
#define VIRTIO_SCSI_T_TMF_I_T_NEXUS_RESET 4
#define VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET 5
#define VIRTIO_SCSI_T_TMF_QUERY_TASK 6
#define VIRTIO_SCSI_T_TMF_QUERY_TASK_SET 7

#define VIRTIO_SCSI_T_EVENTS_MISSED 0x80000000u
#define VIRTIO_SCSI_T_NO_EVENT 0
#define VIRTIO_SCSI_T_TRANSPORT_RESET 1
#define VIRTIO_SCSI_T_ASYNC_NOTIFY 2
#define VIRTIO_SCSI_T_PARAM_CHANGE 3

/* struct virtio_scsi_config (5.6.4), byte offsets. */
struct vscsi_config {
  uint32_t num_queues, seg_max, max_sectors, cmd_per_lun, event_info_size, sense_size, cdb_size;
  uint16_t max_channel, max_target;
  uint32_t max_lun;
};

#define VSCSI_CONTROL_QUEUE 0
#define VSCSI_EVENT_QUEUE 1
#define VSCSI_FIRST_REQUEST_QUEUE 2
#define VSCSI_MAX_REQUEST_QUEUES 8
#define VSCSI_MAX_QUEUES (VSCSI_FIRST_REQUEST_QUEUE + VSCSI_MAX_REQUEST_QUEUES)
#define VSCSI_MAX_CDB 32
#define VSCSI_MAX_SENSE 252
#define VSCSI_MAX_SEGMENTS 60 /* data segments per command (plus header and response) */
#define VSCSI_EVENT_BUFFERS 8

/* Interrupt vectors: config = base, queue q = base + 1 + q. */
#define VSCSI_VECTOR_BASE 0x60

struct vscsi_queue {
  struct virtq vq;
  uint16_t msix_entry; /* VIRTIO_MSI_NO_VECTOR when none */
  uint8_t vector;
  uint8_t apic_id;             /* where its MSI-X entry sends */
  bool irq_mode;               /* wait with HLT for the MSI-X interrupt (else spin) */
  volatile uint64_t irqs;      /* counted by the ring-0 handler */
  volatile uint64_t misrouted; /* interrupts handled on another CPU than apic_id */
  uint64_t waits, wakeups;     /* HLTs, and those that found work */
};

enum vscsi_dir { VSCSI_DIR_NONE, VSCSI_DIR_TO_DEVICE, VSCSI_DIR_FROM_DEVICE };

struct vscsi_sg {
  void *addr;
  uint32_t len;
};

/* A command: the caller fills target/lun/cdb/dir/data, the driver the rest. The header and the
 * response live in DMA memory owned by the request (vscsi_req_init). */
struct vscsi_req {
  /* in */
  uint8_t target;
  uint16_t lun;
  uint8_t cdb[VSCSI_MAX_CDB];
  uint8_t cdb_len;
  enum vscsi_dir dir;
  struct vscsi_sg sg[VSCSI_MAX_SEGMENTS];
  unsigned nsg;
  uint8_t task_attr;
  /* out */
  uint8_t response; /* VIRTIO_SCSI_S_* */
  uint8_t status;   /* SCSI status (0 GOOD, 2 CHECK CONDITION, ...) */
  uint16_t status_qualifier;
  uint32_t residual;
  uint32_t sense_len;
  uint8_t sense[VSCSI_MAX_SENSE];
  uint32_t used_len; /* bytes the device says it wrote */
  uint64_t tag;      /* the request id sent in the header */
  uint64_t submit_tsc, complete_tsc;
  bool in_flight;
  void *user; /* free for the caller */
  unsigned user_index;
  /* DMA */
  uint8_t *hdr; /* struct virtio_scsi_req_cmd: lun[8] id u64 task_attr prio crn cdb[cdb_size] */
  uint8_t *
      resp; /* struct virtio_scsi_resp_cmd: sense_len resid status_qualifier status response sense[] */
};

struct vscsi_event {
  uint32_t event;
  uint8_t lun[8];
  uint32_t reason;
};

struct vscsi_options {
  bool indirect;       /* offer to negotiate VIRTIO_F_INDIRECT_DESC */
  bool event_idx;      /* offer to negotiate VIRTIO_F_EVENT_IDX */
  bool msix;           /* set up MSI-X vectors (handlers registered) */
  unsigned queue_size; /* upper bound for every queue */
  unsigned max_request_queues;
  unsigned device_index; /* which virtio-scsi function on bus 0 */
  bool verbose;
};

struct vscsi {
  struct virtio_pci vp;
  struct vscsi_config cfg;
  uint32_t hdr_size, resp_size;
  unsigned request_queues; /* set up (<= cfg.num_queues) */
  struct vscsi_queue q[VSCSI_MAX_QUEUES];
  volatile uint64_t config_irqs;
  uint16_t config_msix_entry;
  uint64_t next_tag;
  struct vscsi_event *events; /* VSCSI_EVENT_BUFFERS buffers, posted on the event queue */
  uint32_t event_size;
  /* control queue request (one at a time) */
  uint8_t *ctrl_req, *ctrl_resp;
};

void vscsi_default_options(struct vscsi_options *opt);
/* Applies command-line overrides: indirect=0|1 event_idx=0|1 msix=0|1 qsize=N queues=N. */
void vscsi_options_from_args(struct vscsi_options *opt);
/* Finds, resets and initialises the device (3.1.1), sets up every queue and DRIVER_OK. Fails the
 * test on any error. */
void vscsi_init(struct vscsi *h, const struct vscsi_options *opt);
/* Prints the negotiated features and the configuration. */
void vscsi_print_info(const struct vscsi *h);

/* Virtqueue number of request queue r (0-based). */
static inline unsigned vscsi_request_vq(unsigned r) { return VSCSI_FIRST_REQUEST_QUEUE + r; }

/* Points request queue r's MSI-X entry at `apic_id` (the CPU that will wait for it). */
void vscsi_route_queue(struct vscsi *h, unsigned vq_index, unsigned apic_id);
/* Switches a queue between polled and interrupt-driven completion. */
void vscsi_set_irq_mode(struct vscsi *h, unsigned vq_index, bool irq);

/* Allocates a request's DMA header/response. Call once per request object. */
void vscsi_req_init(struct vscsi *h, struct vscsi_req *req);
/* Sets the CDB and a single data buffer (or none). */
void vscsi_req_set(struct vscsi_req *req, uint8_t target, uint16_t lun, const uint8_t *cdb,
                   unsigned cdb_len, enum vscsi_dir dir, void *data, uint32_t len);
/* Data segments one command may have on this queue: min(seg_max, queue size - 2, our limit). */
unsigned vscsi_max_segments(const struct vscsi *h, unsigned vq_index);
/* Queues a request (does not notify); false when the ring is full. */
bool vscsi_submit(struct vscsi *h, unsigned vq_index, struct vscsi_req *req);
/* Notifies the device of what was queued (if it wants a notification). */
void vscsi_kick(struct vscsi *h, unsigned vq_index);
/* The next completed request of this queue (results decoded), or NULL. */
struct vscsi_req *vscsi_poll(struct vscsi *h, unsigned vq_index);
/* Waits for the next completion on this queue (spinning, or HLT in irq mode), until the TSC
 * deadline; fails the test on timeout. */
struct vscsi_req *vscsi_wait(struct vscsi *h, unsigned vq_index, uint64_t deadline);
/* Submit + kick + wait for this very request (the queue must have nothing else in flight). */
void vscsi_exec(struct vscsi *h, unsigned vq_index, struct vscsi_req *req, uint64_t timeout_us);

/* Task management on the control queue (5.6.6.2); returns the response byte. */
uint8_t vscsi_tmf(struct vscsi *h, uint32_t subtype, uint8_t target, uint16_t lun, uint64_t id);
/* Takes one event from the event queue (and re-posts its buffer); false when none. */
bool vscsi_get_event(struct vscsi *h, struct vscsi_event *out);

/* A periodic LAPIC timer that bounds every HLT wait (interrupt-driven tests). */
void vscsi_wake_timer_start(uint64_t period_us);
void vscsi_wake_timer_stop(void);

const char *vscsi_response_name(uint8_t response);

#endif /* TESTS_GUEST_VIRTIO_SCSI_H_ */
