/*
 * PCI enumeration, BARs, capabilities and MSI-X for the test drivers (see pci.h).
 * Everything here runs in ring 3; configuration space goes through the runtime's locked
 * mechanism #1 accessors, the MSI-X table through MMIO.
 */
#include "tests/guest/pci.h"

#include "tests/guest/guest.h"

static void read_ids(unsigned dev, unsigned fn, uint32_t id, struct pci_device *out) {
  out->bus = 0;
  out->dev = (uint8_t)dev;
  out->fn = (uint8_t)fn;
  out->vendor_id = (uint16_t)id;
  out->device_id = (uint16_t)(id >> 16);
  uint32_t class_rev = pci_cfg_read32(0, dev, fn, PCI_CFG_REVISION);
  out->revision = (uint8_t)class_rev;
  out->class_code = class_rev >> 8;
  out->header_type = pci_cfg_read8(0, dev, fn, PCI_CFG_HEADER_TYPE);
}

unsigned pci_scan_bus0(void (*fn)(const struct pci_device *dev, void *context), void *context) {
  unsigned found = 0;
  for (unsigned dev = 0; dev < 32; dev++) {
    for (unsigned f = 0; f < 8; f++) {
      uint32_t id = pci_cfg_read32(0, dev, f, PCI_CFG_VENDOR_ID);
      if ((id & 0xffff) == 0xffff || (id & 0xffff) == 0) {
        if (f == 0) break; /* no device: functions 1-7 cannot exist either */
        continue;
      }
      struct pci_device d;
      read_ids(dev, f, id, &d);
      found++;
      if (fn) fn(&d, context);
      if (f == 0 && !(d.header_type & 0x80)) break; /* single-function device */
    }
  }
  return found;
}

struct find_context {
  uint16_t vendor_id;
  const uint16_t *device_ids;
  unsigned id_count, index, seen;
  bool found;
  struct pci_device *out;
};

static void find_one(const struct pci_device *dev, void *context) {
  struct find_context *c = context;
  if (c->found || dev->vendor_id != c->vendor_id) return;
  for (unsigned i = 0; i < c->id_count; i++) {
    if (dev->device_id != c->device_ids[i]) continue;
    if (c->seen++ == c->index) {
      *c->out = *dev;
      c->found = true;
    }
    return;
  }
}

bool pci_find_device(uint16_t vendor_id, const uint16_t *device_ids, unsigned id_count,
                     unsigned index, struct pci_device *out) {
  struct find_context c = {vendor_id, device_ids, id_count, index, 0, false, out};
  pci_scan_bus0(find_one, &c);
  return c.found;
}

static uint32_t cfg32(const struct pci_device *d, unsigned off) {
  return pci_cfg_read32(d->bus, d->dev, d->fn, off);
}
static void cfg_write32(const struct pci_device *d, unsigned off, uint32_t v) {
  pci_cfg_write32(d->bus, d->dev, d->fn, off, v);
}

bool pci_read_bar(const struct pci_device *d, unsigned index, struct pci_bar *bar) {
  memset(bar, 0, sizeof(*bar));
  if (index > 5) return false;
  unsigned off = PCI_CFG_BAR0 + 4 * index;
  uint32_t low = cfg32(d, off);
  uint16_t command = pci_cfg_read16(d->bus, d->dev, d->fn, PCI_CFG_COMMAND);
  /* Sizing writes all ones; keep decoding off meanwhile so the device never claims a bogus
   * range (PCI 3.0 6.2.5.1). */
  pci_cfg_write16(d->bus, d->dev, d->fn, PCI_CFG_COMMAND,
                  command & ~(PCI_COMMAND_IO | PCI_COMMAND_MEMORY));
  if (low & 1) {
    bar->io = true;
    bar->address = low & ~3u;
    cfg_write32(d, off, 0xffffffff);
    uint32_t mask = cfg32(d, off) & ~3u;
    cfg_write32(d, off, low);
    mask &= 0xffff; /* x86 I/O space is 64 KiB; upper bits may read back as 0 */
    bar->size = mask ? ((~mask + 1) & 0xffff) : 0;
  } else {
    unsigned type = (low >> 1) & 3;
    bar->prefetchable = (low & 8) != 0;
    bar->is64 = type == 2 && index < 5;
    uint64_t address = low & ~0xfull;
    uint64_t mask;
    cfg_write32(d, off, 0xffffffff);
    mask = cfg32(d, off) & ~0xfull;
    cfg_write32(d, off, low);
    if (bar->is64) {
      uint32_t high = cfg32(d, off + 4);
      address |= (uint64_t)high << 32;
      cfg_write32(d, off + 4, 0xffffffff);
      mask |= (uint64_t)cfg32(d, off + 4) << 32;
      cfg_write32(d, off + 4, high);
      bar->size = mask ? (~mask + 1) : 0;
    } else {
      /* All address bits read back 0: the BAR is not implemented. */
      bar->size = mask ? ((~mask + 1) & 0xffffffffull) : 0;
    }
    bar->address = address;
  }
  pci_cfg_write16(d->bus, d->dev, d->fn, PCI_CFG_COMMAND, command);
  bar->present = bar->size != 0;
  return bar->present;
}

unsigned pci_find_capability(const struct pci_device *d, uint8_t cap_id, unsigned after) {
  if (!(pci_cfg_read16(d->bus, d->dev, d->fn, PCI_CFG_STATUS) & PCI_STATUS_CAP_LIST)) return 0;
  unsigned ptr;
  if (after) {
    ptr = pci_cfg_read8(d->bus, d->dev, d->fn, after + 1) & 0xfc;
  } else {
    ptr = pci_cfg_read8(d->bus, d->dev, d->fn, PCI_CFG_CAP_PTR) & 0xfc;
  }
  /* At most 48 capabilities fit in 192 bytes: a longer walk means a loop in the list. */
  for (unsigned guard = 0; ptr >= 0x40 && guard < 48; guard++) {
    uint16_t header = pci_cfg_read16(d->bus, d->dev, d->fn, ptr);
    if ((header & 0xff) == cap_id) return ptr;
    ptr = (header >> 8) & 0xfc;
  }
  return 0;
}

void pci_command_set(const struct pci_device *d, uint16_t set_bits, uint16_t clear_bits) {
  uint16_t command = pci_cfg_read16(d->bus, d->dev, d->fn, PCI_CFG_COMMAND);
  pci_cfg_write16(d->bus, d->dev, d->fn, PCI_CFG_COMMAND, (command | set_bits) & ~clear_bits);
}

/* ---- MSI-X ---- */
#define MSIX_CTRL 2
#define MSIX_TABLE 4
#define MSIX_PBA 8
#define MSIX_CTRL_ENABLE 0x8000
#define MSIX_CTRL_FUNCTION_MASK 0x4000
#define MSIX_ENTRY_SIZE 16
#define MSIX_ENTRY_VECTOR_CTRL 12

static const char *map_in_bar(const struct pci_device *d, uint32_t reg, uint64_t bytes,
                              uint64_t *address, unsigned *bar_index) {
  static char why[128];
  unsigned bir = reg & 7;
  uint64_t offset = reg & ~7u;
  struct pci_bar bar;
  *bar_index = bir;
  if (bir > 5 || !pci_read_bar(d, bir, &bar) || bar.io) {
    snprintf(why, sizeof(why), "BAR %u (BIR) is not a memory BAR", bir);
    return why;
  }
  if (bar.address == 0) {
    snprintf(why, sizeof(why), "BAR %u is not assigned", bir);
    return why;
  }
  if (bar.address + bar.size > 0x100000000ull) {
    snprintf(why, sizeof(why), "BAR %u at 0x%lx is above 4 GiB (unsupported: not mapped)", bir,
             bar.address);
    return why;
  }
  if (offset + bytes > bar.size) {
    snprintf(why, sizeof(why), "0x%lx bytes at offset 0x%lx do not fit BAR %u (0x%lx bytes)", bytes,
             offset, bir, bar.size);
    return why;
  }
  *address = bar.address + offset;
  return NULL;
}

const char *pci_msix_init(const struct pci_device *d, struct pci_msix *m) {
  memset(m, 0, sizeof(*m));
  m->cap = pci_find_capability(d, PCI_CAP_ID_MSIX, 0);
  if (!m->cap) return "no MSI-X capability";
  uint16_t ctrl = pci_cfg_read16(d->bus, d->dev, d->fn, m->cap + MSIX_CTRL);
  m->table_size = (ctrl & 0x7ff) + 1u;
  uint32_t table = cfg32(d, m->cap + MSIX_TABLE);
  uint32_t pba = cfg32(d, m->cap + MSIX_PBA);
  const char *why =
      map_in_bar(d, table, (uint64_t)m->table_size * MSIX_ENTRY_SIZE, &m->table, &m->table_bar);
  if (why) return why;
  return map_in_bar(d, pba, ((m->table_size + 63) / 64) * 8, &m->pba, &m->pba_bar);
}

static void msix_ctrl_update(const struct pci_device *d, const struct pci_msix *m, uint16_t set,
                             uint16_t clear) {
  uint16_t ctrl = pci_cfg_read16(d->bus, d->dev, d->fn, m->cap + MSIX_CTRL);
  pci_cfg_write16(d->bus, d->dev, d->fn, m->cap + MSIX_CTRL, (uint16_t)((ctrl | set) & ~clear));
}

void pci_msix_enable_masked(const struct pci_device *d, const struct pci_msix *m) {
  msix_ctrl_update(d, m, MSIX_CTRL_ENABLE | MSIX_CTRL_FUNCTION_MASK, 0);
}

void pci_msix_unmask_function(const struct pci_device *d, const struct pci_msix *m) {
  msix_ctrl_update(d, m, 0, MSIX_CTRL_FUNCTION_MASK);
}

void pci_msix_disable(const struct pci_device *d, const struct pci_msix *m) {
  msix_ctrl_update(d, m, 0, MSIX_CTRL_ENABLE);
}

void pci_msix_set_entry(const struct pci_msix *m, unsigned entry, unsigned apic_id, unsigned vector,
                        bool masked) {
  if (entry >= m->table_size)
    guest_panic("MSI-X entry %u beyond the table (%u)", entry, m->table_size);
  uint64_t e = m->table + (uint64_t)entry * MSIX_ENTRY_SIZE;
  /* Mask while the entry is inconsistent (PCI 3.0 6.8.3.5). */
  mmio_write32(e + MSIX_ENTRY_VECTOR_CTRL, 1);
  mmio_write32(e + 0, 0xfee00000u | ((apic_id & 0xff) << 12));
  mmio_write32(e + 4, 0);
  mmio_write32(e + 8, vector & 0xff);
  mmio_write32(e + MSIX_ENTRY_VECTOR_CTRL, masked ? 1 : 0);
}

void pci_msix_mask_entry(const struct pci_msix *m, unsigned entry, bool masked) {
  uint64_t e = m->table + (uint64_t)entry * MSIX_ENTRY_SIZE;
  uint32_t ctrl = mmio_read32(e + MSIX_ENTRY_VECTOR_CTRL);
  mmio_write32(e + MSIX_ENTRY_VECTOR_CTRL, masked ? (ctrl | 1) : (ctrl & ~1u));
}

bool pci_msix_pending(const struct pci_msix *m, unsigned entry) {
  uint32_t word = mmio_read32(m->pba + (entry / 32) * 4);
  return (word >> (entry % 32)) & 1;
}
