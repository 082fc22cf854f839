/*
 * Virtio over PCI, modern interface (virtio 1.2 4.1); see virtio_pci.h. Register accesses use
 * the field widths the specification requires (4.1.3.1): 8/16/32-bit, and 64-bit fields as two
 * 32-bit halves, low first.
 */
#include "tests/guest/virtio_pci.h"

#include "tests/guest/guest.h"

#define MAPPED_LIMIT 0x100000000ull

static inline uint64_t common(const struct virtio_pci *vp, unsigned off) {
  return vp->common.address + off;
}

bool virtio_pci_find(unsigned virtio_type, uint16_t transitional_id, unsigned index,
                     struct pci_device *out) {
  uint16_t ids[2] = {(uint16_t)VIRTIO_PCI_MODERN_DEVICE_ID(virtio_type), transitional_id};
  return pci_find_device(VIRTIO_PCI_VENDOR_ID, ids, transitional_id ? 2 : 1, index, out);
}

static const char *cap_type_name(unsigned type) {
  switch (type) {
    case VIRTIO_PCI_CAP_COMMON_CFG: return "common";
    case VIRTIO_PCI_CAP_NOTIFY_CFG: return "notify";
    case VIRTIO_PCI_CAP_ISR_CFG: return "isr";
    case VIRTIO_PCI_CAP_DEVICE_CFG: return "device";
    case VIRTIO_PCI_CAP_PCI_CFG: return "pci-cfg";
    case 8: return "shared-memory";
    case 9: return "vendor";
    default: return "unknown";
  }
}

/* 4.1.4: map one structure; the first capability of each type that the driver can use wins. */
static bool map_region(struct virtio_pci *vp, struct virtio_pci_region *r, unsigned type,
                       uint8_t bar, uint32_t offset, uint32_t length, uint32_t min_length) {
  if (r->address) return false; /* already have one: ignore later ones (4.1.4.1) */
  if (bar > 5) return false;    /* reserved BAR values: ignore the capability */
  const struct pci_bar *b = &vp->bars[bar];
  if (!b->present || b->io) {
    test_fail("virtio-pci: %s capability points at BAR %u, which is %s", cap_type_name(type), bar,
              b->present ? "an I/O BAR" : "not implemented");
  }
  if (b->address == 0) test_fail("virtio-pci: BAR %u is not assigned", bar);
  if (b->address + b->size > MAPPED_LIMIT) {
    test_fail("virtio-pci: BAR %u at 0x%lx is above 4 GiB: unsupported (the guest maps 0-4 GiB)",
              bar, b->address);
  }
  if (length < min_length) {
    test_fail("virtio-pci: %s structure is %u bytes, need at least %u", cap_type_name(type), length,
              min_length);
  }
  if ((uint64_t)offset + length > b->size) {
    test_fail("virtio-pci: %s structure (offset 0x%x, 0x%x bytes) overruns BAR %u (0x%lx bytes)",
              cap_type_name(type), offset, length, bar, b->size);
  }
  r->bar = bar;
  r->offset = offset;
  r->length = length;
  r->address = b->address + offset;
  return true;
}

void virtio_pci_open(struct virtio_pci *vp, const struct pci_device *dev, bool verbose) {
  memset(vp, 0, sizeof(*vp));
  vp->pci = *dev;
  for (unsigned i = 0; i < 6; i++) {
    pci_read_bar(dev, i, &vp->bars[i]);
    if (vp->bars[i].present && verbose) {
      printf("virtio-pci: BAR %u: %s%s at 0x%lx, 0x%lx bytes\n", i,
             vp->bars[i].io     ? "I/O"
             : vp->bars[i].is64 ? "64-bit memory"
                                : "32-bit memory",
             vp->bars[i].prefetchable ? " (prefetchable)" : "", vp->bars[i].address,
             vp->bars[i].size);
    }
    if (vp->bars[i].is64) {
      i++; /* the upper half */
    }
  }
  for (unsigned cap = pci_find_capability(dev, PCI_CAP_ID_VENDOR, 0); cap;
       cap = pci_find_capability(dev, PCI_CAP_ID_VENDOR, cap)) {
    /* struct virtio_pci_cap: vndr, next, len, cfg_type, bar, id, padding[2], offset, length */
    uint32_t w0 = pci_cfg_read32(dev->bus, dev->dev, dev->fn, cap);
    uint32_t w1 = pci_cfg_read32(dev->bus, dev->dev, dev->fn, cap + 4);
    unsigned cap_len = (w0 >> 16) & 0xff, type = w0 >> 24;
    uint8_t bar = (uint8_t)w1;
    if (cap_len < 16) {
      if (verbose)
        printf("virtio-pci: vendor capability at 0x%x is %u bytes: ignored\n", cap, cap_len);
      continue;
    }
    uint32_t offset = pci_cfg_read32(dev->bus, dev->dev, dev->fn, cap + 8);
    uint32_t length = pci_cfg_read32(dev->bus, dev->dev, dev->fn, cap + 12);
    bool used = false;
    switch (type) {
      case VIRTIO_PCI_CAP_COMMON_CFG:
        used = map_region(vp, &vp->common, type, bar, offset, length, VIRTIO_COMMON_CFG_MIN_LEN);
        break;
      case VIRTIO_PCI_CAP_NOTIFY_CFG:
        if (cap_len < 20) test_fail("virtio-pci: notify capability is %u bytes, need 20", cap_len);
        used = map_region(vp, &vp->notify, type, bar, offset, length, 2);
        if (used) {
          vp->notify_off_multiplier = pci_cfg_read32(dev->bus, dev->dev, dev->fn, cap + 16);
        }
        break;
      case VIRTIO_PCI_CAP_ISR_CFG:
        used = map_region(vp, &vp->isr, type, bar, offset, length, 1);
        break;
      case VIRTIO_PCI_CAP_DEVICE_CFG:
        used = map_region(vp, &vp->device, type, bar, offset, length, 1);
        break;
      default: break; /* PCI cfg access, shared memory, vendor: not used */
    }
    if (verbose) {
      printf("virtio-pci: cap 0x%02x: %-6s bar %u offset 0x%x length 0x%x%s\n", cap,
             cap_type_name(type), bar, offset, length, used ? "" : " (not used)");
    }
  }
  if (!vp->common.address)
    test_fail("virtio-pci: no common configuration capability (legacy-only device?)");
  if (!vp->notify.address) test_fail("virtio-pci: no notify capability");
  if (!vp->isr.address) test_fail("virtio-pci: no ISR capability");
  /* Device configuration is optional in general; virtio-scsi needs it (its caller checks). */
  if (verbose) printf("virtio-pci: notify_off_multiplier %u\n", vp->notify_off_multiplier);

  /* Memory decoding and bus mastering; INTx off (we use MSI-X or polling). */
  pci_command_set(dev, PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER | PCI_COMMAND_INTX_DISABLE, 0);

  const char *why = pci_msix_init(dev, &vp->msix);
  vp->has_msix = why == NULL;
  if (verbose) {
    if (vp->has_msix) {
      printf("virtio-pci: MSI-X: %u entries, table BAR %u at 0x%lx, PBA BAR %u at 0x%lx\n",
             vp->msix.table_size, vp->msix.table_bar, vp->msix.table, vp->msix.pba_bar,
             vp->msix.pba);
    } else {
      printf("virtio-pci: MSI-X unavailable: %s (polling only)\n", why);
    }
  }
  vp->num_queues = mmio_read16(common(vp, VIRTIO_COMMON_NUMQ));
}

uint8_t virtio_pci_status(const struct virtio_pci *vp) {
  return mmio_read8(common(vp, VIRTIO_COMMON_STATUS));
}

void virtio_pci_add_status(struct virtio_pci *vp, uint8_t bits) {
  uint8_t status = virtio_pci_status(vp);
  mmio_write8(common(vp, VIRTIO_COMMON_STATUS), (uint8_t)(status | bits));
}

void virtio_pci_reset(struct virtio_pci *vp) {
  mmio_write8(common(vp, VIRTIO_COMMON_STATUS), 0);
  uint64_t deadline = deadline_after_us(1000000);
  while (virtio_pci_status(vp) != 0) {
    if (deadline_passed(deadline))
      test_fail("virtio-pci: device status stays 0x%x after reset", virtio_pci_status(vp));
    udelay(100);
  }
}

uint64_t virtio_pci_read_device_features(struct virtio_pci *vp) {
  uint64_t features = 0;
  for (unsigned word = 0; word < 2; word++) {
    mmio_write32(common(vp, VIRTIO_COMMON_DFSELECT), word);
    features |= (uint64_t)mmio_read32(common(vp, VIRTIO_COMMON_DF)) << (32 * word);
  }
  vp->device_features = features;
  return features;
}

void virtio_pci_negotiate(struct virtio_pci *vp, uint64_t wanted) {
  uint64_t offered = virtio_pci_read_device_features(vp);
  if (!(offered & (1ull << VIRTIO_F_VERSION_1))) {
    test_fail("virtio-pci: device does not offer VIRTIO_F_VERSION_1 (features 0x%lx)", offered);
  }
  uint64_t accepted = offered & wanted;
  for (unsigned word = 0; word < 2; word++) {
    mmio_write32(common(vp, VIRTIO_COMMON_GFSELECT), word);
    mmio_write32(common(vp, VIRTIO_COMMON_GF), (uint32_t)(accepted >> (32 * word)));
  }
  vp->driver_features = accepted;
  virtio_pci_add_status(vp, VIRTIO_STATUS_FEATURES_OK);
  uint8_t status = virtio_pci_status(vp);
  if (!(status & VIRTIO_STATUS_FEATURES_OK)) {
    virtio_pci_add_status(vp, VIRTIO_STATUS_FAILED);
    test_fail("virtio-pci: device refused features 0x%lx (status 0x%x)", accepted, status);
  }
}

static void check_cfg_access(const struct virtio_pci *vp, unsigned offset, unsigned width) {
  if (!vp->device.address || offset + width > vp->device.length) {
    test_fail("virtio-pci: device config access at 0x%x (%u bytes) outside the %u-byte structure",
              offset, width, vp->device.length);
  }
}

uint8_t virtio_pci_cfg_read8(const struct virtio_pci *vp, unsigned offset) {
  check_cfg_access(vp, offset, 1);
  return mmio_read8(vp->device.address + offset);
}
uint16_t virtio_pci_cfg_read16(const struct virtio_pci *vp, unsigned offset) {
  check_cfg_access(vp, offset, 2);
  return mmio_read16(vp->device.address + offset);
}
uint32_t virtio_pci_cfg_read32(const struct virtio_pci *vp, unsigned offset) {
  check_cfg_access(vp, offset, 4);
  return mmio_read32(vp->device.address + offset);
}
void virtio_pci_cfg_write32(const struct virtio_pci *vp, unsigned offset, uint32_t value) {
  check_cfg_access(vp, offset, 4);
  mmio_write32(vp->device.address + offset, value);
}
uint8_t virtio_pci_config_generation(const struct virtio_pci *vp) {
  return mmio_read8(common(vp, VIRTIO_COMMON_CFGGENERATION));
}

uint16_t virtio_pci_set_config_vector(struct virtio_pci *vp, uint16_t vector) {
  mmio_write16(common(vp, VIRTIO_COMMON_MSIX), vector);
  return mmio_read16(common(vp, VIRTIO_COMMON_MSIX));
}

uint16_t virtio_pci_queue_max_size(struct virtio_pci *vp, uint16_t index) {
  mmio_write16(common(vp, VIRTIO_COMMON_Q_SELECT), index);
  return mmio_read16(common(vp, VIRTIO_COMMON_Q_SIZE));
}

static void write64(const struct virtio_pci *vp, unsigned lo, uint64_t value) {
  mmio_write32(common(vp, lo), (uint32_t)value);
  mmio_write32(common(vp, lo + 4), (uint32_t)(value >> 32));
}

void virtio_pci_setup_queue(struct virtio_pci *vp, uint16_t index, uint16_t max_size,
                            uint16_t msix_vector, bool event_idx, bool indirect, struct virtq *vq) {
  if (index >= vp->num_queues) {
    test_fail("virtio-pci: queue %u does not exist (num_queues %u)", index, vp->num_queues);
  }
  mmio_write16(common(vp, VIRTIO_COMMON_Q_SELECT), index);
  uint16_t device_size = mmio_read16(common(vp, VIRTIO_COMMON_Q_SIZE));
  if (device_size == 0) test_fail("virtio-pci: queue %u is unavailable (size 0)", index);
  if (mmio_read16(common(vp, VIRTIO_COMMON_Q_ENABLE))) {
    test_fail("virtio-pci: queue %u is already enabled after reset", index);
  }
  uint16_t size = device_size < max_size ? device_size : max_size;
  while (size & (size - 1)) size &= (uint16_t)(size - 1); /* round down to a power of two */
  virtq_init(vq, index, size, event_idx, indirect);
  if (size != device_size) mmio_write16(common(vp, VIRTIO_COMMON_Q_SIZE), size);

  mmio_write16(common(vp, VIRTIO_COMMON_Q_MSIX), msix_vector);
  uint16_t got = mmio_read16(common(vp, VIRTIO_COMMON_Q_MSIX));
  if (got != msix_vector) {
    test_fail("virtio-pci: queue %u: MSI-X vector %u not accepted (reads back %u)", index,
              msix_vector, got);
  }
  write64(vp, VIRTIO_COMMON_Q_DESCLO, dma_addr(vq->desc));
  write64(vp, VIRTIO_COMMON_Q_AVAILLO, dma_addr(vq->avail));
  write64(vp, VIRTIO_COMMON_Q_USEDLO, dma_addr(vq->used));

  uint16_t notify_off = mmio_read16(common(vp, VIRTIO_COMMON_Q_NOFF));
  uint64_t offset = (uint64_t)notify_off * vp->notify_off_multiplier;
  if (offset + 2 > vp->notify.length) {
    test_fail("virtio-pci: queue %u: notify offset 0x%lx outside the %u-byte notify structure",
              index, offset, vp->notify.length);
  }
  vq->notify_addr = vp->notify.address + offset;
  mmio_write16(common(vp, VIRTIO_COMMON_Q_ENABLE), 1);
}
