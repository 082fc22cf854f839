/*
 * Minimal read-only flattened device tree parser. Format: Devicetree Specification v0.4, chapter 5
 * ("Flattened Devicetree (DTB) Format"): a header, a structure block of big-endian 32-bit tokens
 * (FDT_BEGIN_NODE + NUL-terminated name, FDT_PROP + len + nameoff + value, FDT_END_NODE, FDT_NOP,
 * FDT_END), each padded to 4 bytes, and a strings block holding property names.
 */
#include "tests/guest/dtb.h"

#include "tests/guest/guest.h"

#define FDT_MAGIC 0xd00dfeed
#define FDT_BEGIN_NODE 1
#define FDT_END_NODE 2
#define FDT_PROP 3
#define FDT_NOP 4
#define FDT_END 9

#define FDT_MAX_DEPTH 64

static uint32_t align4(uint32_t x) { return (x + 3) & ~3u; }

bool dtb_open(struct dtb *dtb, const void *blob) {
  const uint8_t *header = (const uint8_t *)blob;
  if (!header || dtb_be32(header) != FDT_MAGIC) return false;
  uint32_t total_size = dtb_be32(header + 4);
  uint32_t off_struct = dtb_be32(header + 8);
  uint32_t off_strings = dtb_be32(header + 12);
  uint32_t version = dtb_be32(header + 20);
  uint32_t size_strings = dtb_be32(header + 32);
  uint32_t size_struct = dtb_be32(header + 36); /* present since version 17 */
  if (version < 16 || total_size < 40) return false;
  if (version < 17) size_struct = total_size - off_struct;
  if (off_struct > total_size || size_struct > total_size - off_struct) return false;
  if (off_strings > total_size || size_strings > total_size - off_strings) return false;
  dtb->blob = header;
  dtb->total_size = total_size;
  dtb->structure = header + off_struct;
  dtb->structure_size = size_struct;
  dtb->strings = (const char *)header + off_strings;
  dtb->strings_size = size_strings;
  return true;
}

static uint32_t token_at(const struct dtb *dtb, int offset) {
  if (offset < 0 || (uint32_t)offset + 4 > dtb->structure_size) return FDT_END;
  return dtb_be32(dtb->structure + offset);
}

/* Reads the token at `offset` into *token and returns the offset of the following token, or -1 for
 * FDT_END or a malformed block. */
static int skip_token(const struct dtb *dtb, int offset, uint32_t *token) {
  uint32_t tag = token_at(dtb, offset);
  *token = tag;
  uint32_t next = (uint32_t)offset + 4;
  switch (tag) {
    case FDT_BEGIN_NODE: {
      uint32_t room = dtb->structure_size - next;
      uint32_t name_len = strnlen((const char *)dtb->structure + next, room);
      if (name_len == room) return -1;
      next += align4(name_len + 1);
      break;
    }
    case FDT_PROP: {
      if (next + 8 > dtb->structure_size) return -1;
      uint32_t len = dtb_be32(dtb->structure + next);
      if (len > dtb->structure_size - next - 8) return -1;
      next += 8 + align4(len);
      break;
    }
    case FDT_END_NODE:
    case FDT_NOP: break;
    default: return -1;
  }
  return next > dtb->structure_size ? -1 : (int)next;
}

int dtb_next_node(const struct dtb *dtb, int node, int *depth) {
  int offset = 0;
  uint32_t token;
  if (node >= 0) {
    offset = skip_token(dtb, node, &token);
    if (offset < 0 || token != FDT_BEGIN_NODE) return -1;
  }
  for (;;) {
    int next = skip_token(dtb, offset, &token);
    if (next < 0) return -1;
    if (token == FDT_BEGIN_NODE) {
      if (depth && node >= 0) (*depth)++;
      return offset;
    }
    if (token == FDT_END_NODE && depth) (*depth)--;
    offset = next;
  }
}

int dtb_root(const struct dtb *dtb) { return dtb_next_node(dtb, -1, NULL); }

int dtb_first_child(const struct dtb *dtb, int node) {
  int depth = 0;
  int child = dtb_next_node(dtb, node, &depth);
  return (child >= 0 && depth == 1) ? child : -1;
}

int dtb_next_sibling(const struct dtb *dtb, int node) {
  int depth = 0;
  int next = node;
  for (;;) {
    next = dtb_next_node(dtb, next, &depth);
    if (next < 0 || depth < 0) return -1;
    if (depth == 0) return next;
  }
}

int dtb_parent(const struct dtb *dtb, int node) {
  int stack[FDT_MAX_DEPTH];
  int depth = 0;
  int current = dtb_root(dtb);
  if (current < 0 || current == node) return -1;
  stack[0] = current;
  while ((current = dtb_next_node(dtb, current, &depth)) >= 0) {
    if (depth <= 0 || depth >= FDT_MAX_DEPTH) return -1;
    stack[depth] = current;
    if (current == node) return stack[depth - 1];
  }
  return -1;
}

const char *dtb_node_name(const struct dtb *dtb, int node) {
  if (token_at(dtb, node) != FDT_BEGIN_NODE) return "";
  return (const char *)dtb->structure + node + 4;
}

char *dtb_node_path(const struct dtb *dtb, int node, char *buf, size_t size) {
  int chain[FDT_MAX_DEPTH];
  int count = 0;
  for (int n = node; n >= 0 && count < FDT_MAX_DEPTH; n = dtb_parent(dtb, n)) chain[count++] = n;
  size_t len = 0;
  if (size == 0) return buf;
  buf[0] = '\0';
  /* chain[count-1] is the root (empty name). */
  for (int i = count - 2; i >= 0; i--) {
    const char *name = dtb_node_name(dtb, chain[i]);
    len += snprintf(buf + len, len < size ? size - len : 0, "/%s", name);
    if (len >= size) break;
  }
  if (count <= 1) snprintf(buf, size, "/");
  return buf;
}

static bool contains_char(const char *s, char c, size_t len) {
  for (size_t i = 0; i < len; i++) {
    if (s[i] == c) return true;
  }
  return false;
}

/* `name` matches the path component [component, component+len) exactly, or, when the component has
 * no unit address, up to name's '@'. */
static bool component_matches(const char *name, const char *component, size_t len) {
  if (strncmp(name, component, len) != 0) return false;
  if (name[len] == '\0') return true;
  return name[len] == '@' && !contains_char(component, '@', len);
}

int dtb_path_offset(const struct dtb *dtb, const char *path) {
  if (!path || path[0] != '/') return -1;
  int node = dtb_root(dtb);
  const char *p = path;
  while (node >= 0 && *p) {
    while (*p == '/') p++;
    if (!*p) break;
    size_t len = 0;
    while (p[len] && p[len] != '/') len++;
    int child = dtb_first_child(dtb, node);
    while (child >= 0 && !component_matches(dtb_node_name(dtb, child), p, len)) {
      child = dtb_next_sibling(dtb, child);
    }
    node = child;
    p += len;
  }
  return node;
}

int dtb_next_prop(const struct dtb *dtb, int node, int prop, const char **name, const void **value,
                  uint32_t *len) {
  uint32_t token;
  int offset;
  if (prop < 0) {
    offset = skip_token(dtb, node, &token);
    if (offset < 0 || token != FDT_BEGIN_NODE) return -1;
  } else {
    offset = skip_token(dtb, prop, &token);
  }
  /* Properties precede subnodes (spec 5.4.1); NOPs may appear anywhere. */
  while (offset >= 0) {
    int next = skip_token(dtb, offset, &token);
    if (next < 0) return -1;
    if (token == FDT_PROP) {
      uint32_t prop_len = dtb_be32(dtb->structure + offset + 4);
      uint32_t name_offset = dtb_be32(dtb->structure + offset + 8);
      if (name_offset >= dtb->strings_size) return -1;
      if (name) *name = dtb->strings + name_offset;
      if (value) *value = dtb->structure + offset + 12;
      if (len) *len = prop_len;
      return offset;
    }
    if (token != FDT_NOP) return -1;
    offset = next;
  }
  return -1;
}

const void *dtb_get_prop(const struct dtb *dtb, int node, const char *name, uint32_t *len) {
  const char *prop_name;
  const void *value;
  uint32_t prop_len;
  for (int prop = dtb_next_prop(dtb, node, -1, &prop_name, &value, &prop_len); prop >= 0;
       prop = dtb_next_prop(dtb, node, prop, &prop_name, &value, &prop_len)) {
    if (strcmp(prop_name, name) == 0) {
      if (len) *len = prop_len;
      return value;
    }
  }
  return NULL;
}

bool dtb_get_u32(const struct dtb *dtb, int node, const char *name, uint32_t *out) {
  uint32_t len;
  const void *value = dtb_get_prop(dtb, node, name, &len);
  if (!value || len < 4) return false;
  *out = dtb_be32(value);
  return true;
}

const char *dtb_get_string(const struct dtb *dtb, int node, const char *name) {
  uint32_t len;
  const char *value = (const char *)dtb_get_prop(dtb, node, name, &len);
  if (!value || len == 0 || value[len - 1] != '\0') return NULL;
  return value;
}

bool dtb_is_compatible(const struct dtb *dtb, int node, const char *compatible) {
  uint32_t len;
  const char *list = (const char *)dtb_get_prop(dtb, node, "compatible", &len);
  if (!list) return false;
  /* A string list: NUL-terminated strings back to back (spec 2.2.4.1). */
  for (uint32_t pos = 0; pos < len;) {
    size_t entry_len = strnlen(list + pos, len - pos);
    if (pos + entry_len < len && strcmp(list + pos, compatible) == 0) return true;
    pos += entry_len + 1;
  }
  return false;
}

int dtb_find_compatible(const struct dtb *dtb, int after, const char *compatible) {
  for (int node = dtb_next_node(dtb, after, NULL); node >= 0;
       node = dtb_next_node(dtb, node, NULL)) {
    if (dtb_is_compatible(dtb, node, compatible)) return node;
  }
  return -1;
}

uint32_t dtb_address_cells(const struct dtb *dtb, int node) {
  uint32_t cells;
  return dtb_get_u32(dtb, node, "#address-cells", &cells) ? cells : 2; /* spec 2.3.5 default */
}

uint32_t dtb_size_cells(const struct dtb *dtb, int node) {
  uint32_t cells;
  return dtb_get_u32(dtb, node, "#size-cells", &cells) ? cells : 1;
}

static uint64_t read_cells(const uint8_t *p, uint32_t count) {
  uint64_t value = 0;
  for (uint32_t i = 0; i < count; i++) value = (value << 32) | dtb_be32(p + 4 * i);
  return value;
}

static bool is_isa_bus(const struct dtb *dtb, int node) {
  const char *name = dtb_node_name(dtb, node);
  return dtb_is_compatible(dtb, node, "isa") ||
         (strncmp(name, "isa", 3) == 0 && (name[3] == '\0' || name[3] == '@'));
}

bool dtb_get_reg(const struct dtb *dtb, int node, int index, uint32_t *space, uint64_t *address,
                 uint64_t *size) {
  int parent = dtb_parent(dtb, node);
  if (parent < 0 || index < 0) return false;
  uint32_t address_cells = dtb_address_cells(dtb, parent);
  uint32_t size_cells = dtb_size_cells(dtb, parent);
  if (address_cells == 0 || address_cells > 3 || size_cells > 2) return false;
  uint32_t len;
  const uint8_t *reg = (const uint8_t *)dtb_get_prop(dtb, node, "reg", &len);
  uint32_t entry_size = 4 * (address_cells + size_cells);
  if (!reg || (uint32_t)(index + 1) * entry_size > len) return false;
  const uint8_t *entry = reg + (uint32_t)index * entry_size;
  uint32_t space_cell = 0;
  uint64_t addr;
  if (address_cells == 3 || (address_cells == 2 && is_isa_bus(dtb, parent))) {
    space_cell = dtb_be32(entry);
    addr = read_cells(entry + 4, address_cells - 1);
  } else {
    addr = read_cells(entry, address_cells);
  }
  if (space) *space = space_cell;
  if (address) *address = addr;
  if (size) *size = read_cells(entry + 4 * address_cells, size_cells);
  return true;
}

bool dtb_get_interrupt(const struct dtb *dtb, int node, int index, uint32_t *irq) {
  uint32_t len;
  const uint8_t *cells = (const uint8_t *)dtb_get_prop(dtb, node, "interrupts", &len);
  if (!cells || index < 0 || (uint32_t)(index + 1) * 4 > len) return false;
  *irq = dtb_be32(cells + 4 * index);
  return true;
}

bool dtb_get_io_port(const struct dtb *dtb, int node, int index, uint16_t *port) {
  uint32_t space;
  uint64_t address;
  if (!dtb_get_reg(dtb, node, index, &space, &address, NULL)) return false;
  if (space != 1 || address > 0xffff) return false; /* machine.md: ISA cell 0 = 1 is I/O space */
  *port = (uint16_t)address;
  return true;
}
