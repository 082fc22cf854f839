/*
 * Virtio over PCI, modern interface only (virtio 1.2 4.1): vendor capabilities (common, notify,
 * ISR, device configuration), device status and reset, feature negotiation, queue set-up and
 * MSI-X vectors. A transitional device (legacy I/O BAR) is driven through its modern interface.
 */
#ifndef TESTS_GUEST_VIRTIO_PCI_H_
#define TESTS_GUEST_VIRTIO_PCI_H_

#include <stdbool.h>
#include <stdint.h>

#include "tests/guest/pci.h"
#include "tests/guest/virtqueue.h"

#define VIRTIO_PCI_VENDOR_ID 0x1af4
#define VIRTIO_PCI_MODERN_DEVICE_ID(type) (0x1040 + (type))

/* Device status (2.1). */
#define VIRTIO_STATUS_ACKNOWLEDGE 1
#define VIRTIO_STATUS_DRIVER 2
#define VIRTIO_STATUS_DRIVER_OK 4
#define VIRTIO_STATUS_FEATURES_OK 8
#define VIRTIO_STATUS_DEVICE_NEEDS_RESET 64
#define VIRTIO_STATUS_FAILED 128

/* Reserved feature bits (6). */
#define VIRTIO_F_INDIRECT_DESC 28
#define VIRTIO_F_EVENT_IDX 29
#define VIRTIO_F_VERSION_1 32
#define VIRTIO_F_ACCESS_PLATFORM 33
#define VIRTIO_F_RING_PACKED 34
#define VIRTIO_F_IN_ORDER 35
#define VIRTIO_F_ORDER_PLATFORM 36
#define VIRTIO_F_SR_IOV 37
#define VIRTIO_F_NOTIFICATION_DATA 38
#define VIRTIO_F_NOTIF_CONFIG_DATA 39
#define VIRTIO_F_RING_RESET 40

#define VIRTIO_MSI_NO_VECTOR 0xffff

/* Capability types (4.1.4). */
#define VIRTIO_PCI_CAP_COMMON_CFG 1
#define VIRTIO_PCI_CAP_NOTIFY_CFG 2
#define VIRTIO_PCI_CAP_ISR_CFG 3
#define VIRTIO_PCI_CAP_DEVICE_CFG 4
#define VIRTIO_PCI_CAP_PCI_CFG 5

/* struct virtio_pci_common_cfg (4.1.4.3). */
#define VIRTIO_COMMON_DFSELECT 0x00
#define VIRTIO_COMMON_DF 0x04
#define VIRTIO_COMMON_GFSELECT 0x08
#define VIRTIO_COMMON_GF 0x0c
#define VIRTIO_COMMON_MSIX 0x10
#define VIRTIO_COMMON_NUMQ 0x12
#define VIRTIO_COMMON_STATUS 0x14
#define VIRTIO_COMMON_CFGGENERATION 0x15
#define VIRTIO_COMMON_Q_SELECT 0x16
#define VIRTIO_COMMON_Q_SIZE 0x18
#define VIRTIO_COMMON_Q_MSIX 0x1a
#define VIRTIO_COMMON_Q_ENABLE 0x1c
#define VIRTIO_COMMON_Q_NOFF 0x1e
#define VIRTIO_COMMON_Q_DESCLO 0x20
#define VIRTIO_COMMON_Q_DESCHI 0x24
#define VIRTIO_COMMON_Q_AVAILLO 0x28
#define VIRTIO_COMMON_Q_AVAILHI 0x2c
#define VIRTIO_COMMON_Q_USEDLO 0x30
#define VIRTIO_COMMON_Q_USEDHI 0x34
#define VIRTIO_COMMON_CFG_MIN_LEN 0x38 /* up to queue_device; 1.2 adds notify_data and reset */

struct virtio_pci_region {
  uint8_t bar;
  uint32_t offset, length;
  uint64_t address; /* BAR address + offset; 0 = absent */
};

struct virtio_pci {
  struct pci_device pci;
  struct pci_bar bars[6];
  struct virtio_pci_region common, notify, isr, device;
  uint32_t notify_off_multiplier;
  bool has_msix;
  struct pci_msix msix;
  uint16_t num_queues; /* from the common configuration */
  uint64_t device_features, driver_features;
};

/* Finds the index-th virtio device of this type on bus 0 (modern ID 0x1040 + type, or the
 * transitional ID when non-zero). */
bool virtio_pci_find(unsigned virtio_type, uint16_t transitional_id, unsigned index,
                     struct pci_device *out);
/* Reads the BARs and the vendor capabilities, checks that every structure lies in an assigned
 * memory BAR below 4 GiB, enables memory decoding and bus mastering (INTx off), finds MSI-X.
 * Fails the test with the reason when the device cannot be driven. */
void virtio_pci_open(struct virtio_pci *vp, const struct pci_device *dev, bool verbose);

/* Writes 0 to device_status and waits until it reads back 0 (4.1.4.3.2). */
void virtio_pci_reset(struct virtio_pci *vp);
uint8_t virtio_pci_status(const struct virtio_pci *vp);
/* ORs bits into device_status. */
void virtio_pci_add_status(struct virtio_pci *vp, uint8_t bits);
/* Reads all offered feature bits (words 0 and 1; later words are reported as a count). */
uint64_t virtio_pci_read_device_features(struct virtio_pci *vp);
/* Writes `wanted & offered`, sets FEATURES_OK and checks it stuck (3.1.1 steps 4-6). Fails the
 * test when VERSION_1 is not offered or the device refuses. */
void virtio_pci_negotiate(struct virtio_pci *vp, uint64_t wanted);

/* Device configuration accesses with the field's own width (4.1.3.1), inside the device cfg
 * region. */
uint8_t virtio_pci_cfg_read8(const struct virtio_pci *vp, unsigned offset);
uint16_t virtio_pci_cfg_read16(const struct virtio_pci *vp, unsigned offset);
uint32_t virtio_pci_cfg_read32(const struct virtio_pci *vp, unsigned offset);
void virtio_pci_cfg_write32(const struct virtio_pci *vp, unsigned offset, uint32_t value);
uint8_t virtio_pci_config_generation(const struct virtio_pci *vp);

/* Sets the configuration-change MSI-X vector; returns what the device reads back
 * (VIRTIO_MSI_NO_VECTOR when it could not allocate one). */
uint16_t virtio_pci_set_config_vector(struct virtio_pci *vp, uint16_t vector);
/* Sets up queue `index`: chooses min(device maximum, max_size) rounded down to a power of two,
 * initialises `vq`, programs its MSI-X vector (VIRTIO_MSI_NO_VECTOR for none; fails the test if
 * the device does not accept it), addresses and notify address, and enables it. */
void virtio_pci_setup_queue(struct virtio_pci *vp, uint16_t index, uint16_t max_size,
                            uint16_t msix_vector, bool event_idx, bool indirect, struct virtq *vq);
/* Queue size the device offers for queue `index` (0 = queue unavailable). */
uint16_t virtio_pci_queue_max_size(struct virtio_pci *vp, uint16_t index);

#endif /* TESTS_GUEST_VIRTIO_PCI_H_ */
