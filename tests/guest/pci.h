/*
 * PCI for test drivers: enumeration of bus 0 through configuration mechanism #1, BARs, the
 * capability list and MSI-X (PCI Local Bus 3.0 6.2.5 and 6.7, PCI 3.0 6.8.2 for MSI-X).
 * Configuration accesses are port I/O (about 100 us each under PVM): use them for set-up only.
 * BARs must already be assigned (firmware or VMM); this code never moves them.
 */
#ifndef TESTS_GUEST_PCI_H_
#define TESTS_GUEST_PCI_H_

#include <stdbool.h>
#include <stdint.h>

#define PCI_CFG_VENDOR_ID 0x00
#define PCI_CFG_DEVICE_ID 0x02
#define PCI_CFG_COMMAND 0x04
#define PCI_CFG_STATUS 0x06
#define PCI_CFG_REVISION 0x08
#define PCI_CFG_HEADER_TYPE 0x0e
#define PCI_CFG_BAR0 0x10
#define PCI_CFG_CAP_PTR 0x34

#define PCI_COMMAND_IO 0x0001
#define PCI_COMMAND_MEMORY 0x0002
#define PCI_COMMAND_MASTER 0x0004
#define PCI_COMMAND_INTX_DISABLE 0x0400
#define PCI_STATUS_CAP_LIST 0x0010

#define PCI_CAP_ID_MSI 0x05
#define PCI_CAP_ID_VENDOR 0x09
#define PCI_CAP_ID_MSIX 0x11

struct pci_device {
  uint8_t bus, dev, fn;
  uint16_t vendor_id, device_id;
  uint32_t class_code; /* base class << 16 | subclass << 8 | programming interface */
  uint8_t revision, header_type;
};

struct pci_bar {
  bool present; /* implemented (size != 0) */
  bool io;      /* I/O space (else memory) */
  bool is64;    /* 64-bit memory BAR (uses the next BAR register too) */
  bool prefetchable;
  uint64_t address; /* as assigned; 0 = unassigned */
  uint64_t size;
};

/* Calls fn for every function on bus 0; returns how many there are. */
unsigned pci_scan_bus0(void (*fn)(const struct pci_device *dev, void *context), void *context);
/* The index-th function (0 = first) on bus 0 with this vendor and one of the device IDs. */
bool pci_find_device(uint16_t vendor_id, const uint16_t *device_ids, unsigned id_count,
                     unsigned index, struct pci_device *out);

/* Reads and sizes BAR `index` (memory and I/O decoding are off while sizing, then restored).
 * A 64-bit BAR occupies `index` and `index + 1`. Returns false for an unimplemented BAR. */
bool pci_read_bar(const struct pci_device *dev, unsigned index, struct pci_bar *bar);

/* Offset of the first capability with this ID after `after` (0: from the start); 0 when none. */
unsigned pci_find_capability(const struct pci_device *dev, uint8_t cap_id, unsigned after);

/* Sets (or clears) bits of the command register. */
void pci_command_set(const struct pci_device *dev, uint16_t set_bits, uint16_t clear_bits);

/* MSI-X (PCI 3.0 6.8.2). Table entry: message address, upper address, data, vector control. */
struct pci_msix {
  unsigned cap;        /* capability offset in configuration space */
  unsigned table_size; /* entries */
  uint64_t table;      /* address of the table (in its BAR) */
  uint64_t pba;        /* address of the pending bit array */
  unsigned table_bar, pba_bar;
};

/* Finds the MSI-X capability and maps the table and PBA through their (assigned, below 4 GiB)
 * BARs. Returns NULL on success, else why not. */
const char *pci_msix_init(const struct pci_device *dev, struct pci_msix *msix);
/* MSI-X Enable with Function Mask set (entries can be programmed, nothing is sent yet). */
void pci_msix_enable_masked(const struct pci_device *dev, const struct pci_msix *msix);
/* Clears Function Mask: unmasked entries can now send. */
void pci_msix_unmask_function(const struct pci_device *dev, const struct pci_msix *msix);
/* Clears MSI-X Enable. */
void pci_msix_disable(const struct pci_device *dev, const struct pci_msix *msix);
/* Programs entry `entry` for an x86 LAPIC: address 0xfee00000 | apic_id << 12 (physical
 * destination, no redirection hint), data = vector (fixed delivery, edge); leaves it masked or
 * unmasked as asked. */
void pci_msix_set_entry(const struct pci_msix *msix, unsigned entry, unsigned apic_id,
                        unsigned vector, bool masked);
void pci_msix_mask_entry(const struct pci_msix *msix, unsigned entry, bool masked);
bool pci_msix_pending(const struct pci_msix *msix, unsigned entry);

#endif /* TESTS_GUEST_PCI_H_ */
