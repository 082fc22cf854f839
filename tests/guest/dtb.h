/*
 * Minimal read-only parser for a flattened device tree blob (DTB; Devicetree Specification v0.4,
 * chapter 5). Nodes are identified by the offset of their FDT_BEGIN_NODE token inside the structure
 * block; -1 means "none". No allocation, no writes. The dtb_ prefix keeps these apart from libfdt's
 * fdt_* functions, which have different signatures (the host-side unit test links both).
 */
#ifndef TESTS_GUEST_DTB_H_
#define TESTS_GUEST_DTB_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dtb {
  const uint8_t *blob;
  uint32_t total_size;
  const uint8_t *structure; /* structure block */
  uint32_t structure_size;
  const char *strings; /* strings block */
  uint32_t strings_size;
};

/* Validates the header (magic 0xd00dfeed, version >= 16, blocks inside totalsize). */
bool dtb_open(struct dtb *dtb, const void *blob);

/* The root node. */
int dtb_root(const struct dtb *dtb);
/* Next node in document order after `node` (-1: the root), tracking the depth relative to the
 * starting node when `depth` is non-NULL (child +1, sibling 0, ...). -1 at the end. */
int dtb_next_node(const struct dtb *dtb, int node, int *depth);
/* First child / next sibling, or -1. */
int dtb_first_child(const struct dtb *dtb, int node);
int dtb_next_sibling(const struct dtb *dtb, int node);
int dtb_parent(const struct dtb *dtb, int node);
/* Name with unit address ("serial@3f8"; "" for the root). */
const char *dtb_node_name(const struct dtb *dtb, int node);
/* Full path into buf ("/isa/serial@3f8"). Returns buf. */
char *dtb_node_path(const struct dtb *dtb, int node, char *buf, size_t size);
/* Node by path. A component without '@' also matches a name with a unit address ("/isa/serial"
 * finds "serial@3f8"). */
int dtb_path_offset(const struct dtb *dtb, const char *path);
/* Next node after `after` (-1: from the start) whose "compatible" list contains `compatible`. */
int dtb_find_compatible(const struct dtb *dtb, int after, const char *compatible);
bool dtb_is_compatible(const struct dtb *dtb, int node, const char *compatible);

/* Property value (NULL when absent); *len gets its length in bytes when len is non-NULL. */
const void *dtb_get_prop(const struct dtb *dtb, int node, const char *name, uint32_t *len);
/* Iterates properties: pass -1 for the first; returns -1 after the last. */
int dtb_next_prop(const struct dtb *dtb, int node, int prop, const char **name, const void **value,
                  uint32_t *len);
bool dtb_get_u32(const struct dtb *dtb, int node, const char *name, uint32_t *out);
/* String property (NULL when absent or not NUL-terminated). */
const char *dtb_get_string(const struct dtb *dtb, int node, const char *name);

/* #address-cells / #size-cells that apply to the children of `node` (spec defaults 2 and 1). */
uint32_t dtb_address_cells(const struct dtb *dtb, int node);
uint32_t dtb_size_cells(const struct dtb *dtb, int node);
/* Entry `index` of "reg", decoded with the parent's #address-cells / #size-cells:
 *  - parent is an ISA bus (compatible "isa", machine.md): cell 0 is the space (1 = I/O) -> *space,
 *    cell 1 the port or address -> *address;
 *  - #address-cells == 3 (PCI-style): cell 0 -> *space, cells 1-2 -> *address;
 *  - otherwise *space = 0 and *address is the 1- or 2-cell address.
 * space and size may be NULL. */
bool dtb_get_reg(const struct dtb *dtb, int node, int index, uint32_t *space, uint64_t *address,
                 uint64_t *size);
/* Cell `index` of "interrupts". */
bool dtb_get_interrupt(const struct dtb *dtb, int node, int index, uint32_t *irq);

/* Helpers for machine.md's ISA bus: port of reg[index] when it is in I/O space. */
bool dtb_get_io_port(const struct dtb *dtb, int node, int index, uint16_t *port);

/* Big-endian cell access. */
static inline uint32_t dtb_be32(const void *p) {
  const uint8_t *b = (const uint8_t *)p;
  return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3];
}

#ifdef __cplusplus
}
#endif

#endif /* TESTS_GUEST_DTB_H_ */
