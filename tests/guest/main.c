/*
 * Ring-3 start of the boot CPU: read the PVH boot information, find the devices (FDT or built-in
 * defaults), parse the command line and run the selected test.
 */
#include "tests/guest/guest.h"
#include "tests/guest/internal.h"

/* Xen public/arch-x86/hvm/start_info.h (version 1). */
#define HVM_START_MAGIC 0x336ec578
struct hvm_start_info {
  uint32_t magic;
  uint32_t version;
  uint32_t flags;
  uint32_t nr_modules;
  uint64_t modlist_paddr;
  uint64_t cmdline_paddr;
  uint64_t rsdp_paddr;
  uint64_t memmap_paddr; /* version >= 1 */
  uint32_t memmap_entries;
  uint32_t reserved;
};
struct hvm_modlist_entry {
  uint64_t paddr;
  uint64_t size;
  uint64_t cmdline_paddr;
  uint64_t reserved;
};
struct hvm_memmap_table_entry {
  uint64_t addr;
  uint64_t size;
  uint32_t type; /* e820 types: 1 = RAM */
  uint32_t reserved;
};
#define E820_RAM 1

/* Identity map ends at 4 GiB; RAM for DMA stays below the MMIO hole at 3 GiB (machine.md). */
#define MAPPED_LIMIT 0x100000000ull
#define DMA_LIMIT 0xc0000000ull

#define MAX_MODULES 16
#define MAX_RAM_REGIONS 32
#define MAX_ARGS 64

static char cmdline[4096];
static char arg_storage[4096];
static const char *arg_keys[MAX_ARGS];
static const char *arg_values[MAX_ARGS];
static unsigned arg_count;

static struct ram_region ram[MAX_RAM_REGIONS];
static unsigned ram_count;
static struct ram_region modules[MAX_MODULES]; /* kept out of the DMA allocator */
static unsigned module_count;

static struct dtb dtb_storage;
static bool dtb_present;

static const char *current_test = "";

const char *test_name(void) { return current_test; }

void test_fail(const char *fmt, ...) {
  char reason[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof(reason), fmt, ap);
  va_end(ap);
  printf("TEST %s: FAIL %s\n", current_test, reason);
  guest_exit(GUEST_EXIT_FAIL);
}

void set_test_name(const char *name) { current_test = name; }
const char *boot_cmdline(void) { return cmdline; }
const struct dtb *boot_dtb(void) { return dtb_present ? &dtb_storage : NULL; }

unsigned ram_regions(const struct ram_region **regions) {
  *regions = ram;
  return ram_count;
}

static bool mapped(uint64_t paddr, uint64_t size) {
  return paddr != 0 && paddr < MAPPED_LIMIT && size <= MAPPED_LIMIT - paddr;
}

static void copy_string(char *dst, size_t size, uint64_t paddr) {
  dst[0] = '\0';
  if (!mapped(paddr, 1)) return;
  const char *src = (const char *)(uintptr_t)paddr;
  size_t i = 0;
  for (; i + 1 < size && (uint64_t)i < MAPPED_LIMIT - paddr && src[i]; i++) dst[i] = src[i];
  dst[i] = '\0';
}

static void add_ram(uint64_t base, uint64_t size) {
  if (size && ram_count < MAX_RAM_REGIONS) ram[ram_count++] = (struct ram_region){base, size};
}

/* Reads everything we need from hvm_start_info right away: the VMM's boot structures live in low
 * RAM that later code (the AP trampoline) may reuse. Problems are reported after serial_init. */
static const char *read_start_info(const void **dtb_blob, uint64_t *dtb_size) {
  *dtb_blob = NULL;
  *dtb_size = 0;
  uint32_t paddr = boot_start_info_paddr;
  if (!mapped(paddr, sizeof(struct hvm_start_info))) return "no hvm_start_info (EBX = 0)";
  const struct hvm_start_info *info = (const struct hvm_start_info *)(uintptr_t)paddr;
  if (info->magic != HVM_START_MAGIC) return "hvm_start_info has a bad magic";
  copy_string(cmdline, sizeof(cmdline), info->cmdline_paddr);

  uint64_t list_size = (uint64_t)info->nr_modules * sizeof(struct hvm_modlist_entry);
  if (info->nr_modules && mapped(info->modlist_paddr, list_size)) {
    const struct hvm_modlist_entry *list =
        (const struct hvm_modlist_entry *)(uintptr_t)info->modlist_paddr;
    for (uint32_t i = 0; i < info->nr_modules; i++) {
      if (module_count < MAX_MODULES) {
        modules[module_count++] = (struct ram_region){list[i].paddr, list[i].size};
      }
      /* machine.md: the FDT is the last module and its command line is "fdt". */
      char name[8];
      copy_string(name, sizeof(name), list[i].cmdline_paddr);
      if (strcmp(name, "fdt") == 0 && mapped(list[i].paddr, list[i].size)) {
        *dtb_blob = (const void *)(uintptr_t)list[i].paddr;
        *dtb_size = list[i].size;
      }
    }
  }

  uint64_t map_size = (uint64_t)info->memmap_entries * sizeof(struct hvm_memmap_table_entry);
  if (info->version >= 1 && info->memmap_entries && mapped(info->memmap_paddr, map_size)) {
    const struct hvm_memmap_table_entry *map =
        (const struct hvm_memmap_table_entry *)(uintptr_t)info->memmap_paddr;
    for (uint32_t i = 0; i < info->memmap_entries; i++) {
      if (map[i].type == E820_RAM) add_ram(map[i].addr, map[i].size);
    }
  }
  return NULL;
}

static void read_fdt_memory(void) {
  const struct dtb *dtb = boot_dtb();
  if (!dtb) return;
  int node = dtb_path_offset(dtb, "/memory");
  for (int i = 0; node >= 0; i++) {
    uint64_t base, size;
    if (!dtb_get_reg(dtb, node, i, NULL, &base, &size)) break;
    add_ram(base, size);
  }
}

/* The largest stretch of RAM above the image and below DMA_LIMIT that no module overlaps. */
static void choose_dma_region(void) {
  uint64_t best_start = 0, best_end = 0;
  uint64_t image_end = (uint64_t)(uintptr_t)__image_end;
  for (unsigned r = 0; r < ram_count; r++) {
    uint64_t start = ram[r].base > image_end ? ram[r].base : image_end;
    uint64_t end = ram[r].base + ram[r].size;
    if (end > DMA_LIMIT) end = DMA_LIMIT;
    if (start >= end) continue;
    for (unsigned m = 0; m < module_count; m++) {
      uint64_t m_start = modules[m].base, m_end = modules[m].base + modules[m].size;
      if (m_end <= start || m_start >= end) continue;
      /* Keep the larger side of the module. */
      uint64_t below = m_start > start ? m_start - start : 0;
      uint64_t above = end > m_end ? end - m_end : 0;
      if (below >= above) {
        end = m_start > start ? m_start : start;
      } else {
        start = m_end;
      }
      if (start >= end) break;
    }
    if (start < end && end - start > best_end - best_start) {
      best_start = start;
      best_end = end;
    }
  }
  dma_init(best_start, best_end);
}

static void find_devices(uint16_t *serial) {
  const struct dtb *dtb = boot_dtb();
  *serial = 0x3f8;
  if (!dtb) return;
  int node = -1;
  int chosen = dtb_path_offset(dtb, "/chosen");
  const char *stdout_path = chosen >= 0 ? dtb_get_string(dtb, chosen, "stdout-path") : NULL;
  if (stdout_path) {
    char path[128];
    size_t len = 0;
    while (stdout_path[len] && stdout_path[len] != ':' && len + 1 < sizeof(path)) {
      path[len] = stdout_path[len]; /* "path:options" */
      len++;
    }
    path[len] = '\0';
    node = dtb_path_offset(dtb, path);
  }
  if (node < 0) node = dtb_find_compatible(dtb, -1, "ns16550a");
  uint16_t port;
  if (node >= 0 && dtb_get_io_port(dtb, node, 0, &port)) *serial = port;

  node = dtb_find_compatible(dtb, -1, "microvm,debug-exit");
  if (node >= 0 && dtb_get_io_port(dtb, node, 0, &port)) debug_exit_port = port;

  node = dtb_find_compatible(dtb, -1, "intel,ce4100-lapic");
  uint64_t address;
  if (node >= 0 && dtb_get_reg(dtb, node, 0, NULL, &address, NULL) && address < MAPPED_LIMIT) {
    lapic_base = address;
  }
}

static void parse_args(void) {
  size_t len = strlen(cmdline);
  memcpy(arg_storage, cmdline, len + 1);
  char *p = arg_storage;
  while (*p && arg_count < MAX_ARGS) {
    while (*p == ' ' || *p == '\t' || *p == '\n') *p++ = '\0';
    if (!*p) break;
    char *key = p;
    while (*p && *p != ' ' && *p != '\t' && *p != '\n') p++;
    if (*p) *p++ = '\0';
    char *equals = strchr(key, '=');
    if (equals) *equals = '\0';
    arg_keys[arg_count] = key;
    arg_values[arg_count] = equals ? equals + 1 : "";
    arg_count++;
  }
}

const char *arg_get(const char *key) {
  for (unsigned i = arg_count; i-- > 0;) {
    if (strcmp(arg_keys[i], key) == 0) return arg_values[i];
  }
  return NULL;
}

uint64_t arg_u64(const char *key, uint64_t fallback) {
  uint64_t value;
  return parse_u64(arg_get(key), &value) ? value : fallback;
}

/* CPU topology: the FDT's /cpus, else cpus=N, else 1 (see guest.h). */
static int cpu_node(unsigned index) {
  const struct dtb *dtb = boot_dtb();
  if (!dtb) return -1;
  int cpus = dtb_path_offset(dtb, "/cpus");
  if (cpus < 0) return -1;
  unsigned seen = 0;
  for (int node = dtb_first_child(dtb, cpus); node >= 0; node = dtb_next_sibling(dtb, node)) {
    const char *type = dtb_get_string(dtb, node, "device_type");
    if (!type || strcmp(type, "cpu") != 0) continue;
    if (seen++ == index) return node;
  }
  return -1;
}

unsigned cpu_count(void) {
  unsigned count = 0;
  while (cpu_node(count) >= 0) count++;
  if (count == 0) count = (unsigned)arg_u64("cpus", 1);
  return count ? count : 1;
}

unsigned cpu_apic_id(unsigned index) {
  int node = cpu_node(index);
  uint32_t id;
  if (node >= 0 && dtb_get_u32(boot_dtb(), node, "reg", &id)) return id;
  return index;
}

unsigned sorted_tests(const struct guest_test **tests, unsigned max) {
  unsigned count = 0;
  for (const struct guest_test *t = __start_guest_tests; t < __stop_guest_tests && count < max;
       t++) {
    unsigned i = count++;
    for (; i > 0 && strcmp(tests[i - 1]->name, t->name) > 0; i--) tests[i] = tests[i - 1];
    tests[i] = t;
  }
  return count;
}

static const struct guest_test *find_test(const char *name) {
  for (const struct guest_test *t = __start_guest_tests; t < __stop_guest_tests; t++) {
    if (strcmp(t->name, name) == 0) return t;
  }
  return NULL;
}

void guest_main(unsigned cpu) {
  (void)cpu;
  uint64_t rflags;
  __asm__ volatile("pushfq; popq %0" : "=r"(rflags));
  port_io_native = ((rflags >> 12) & 3) == 3; /* did IOPL 3 from the iretq take? (not under PVM) */
  const void *dtb_blob;
  uint64_t dtb_size;
  const char *start_info_problem = read_start_info(&dtb_blob, &dtb_size);
  const char *dtb_problem = NULL;
  if (dtb_blob) {
    dtb_present = dtb_open(&dtb_storage, dtb_blob) && dtb_storage.total_size <= dtb_size;
    if (!dtb_present) dtb_problem = "the \"fdt\" module is not a valid flattened device tree";
  }
  uint16_t serial;
  find_devices(&serial);
  serial_init(serial);
  if (start_info_problem) printf("guest: warning: %s; using defaults\n", start_info_problem);
  if (dtb_problem) printf("guest: warning: %s; using defaults\n", dtb_problem);
  if (ram_count == 0) read_fdt_memory();
  choose_dma_region();
  parse_args();

  const char *name = arg_get("test");
  if (!name || !*name) name = "hello";
  const struct guest_test *test = find_test(name);
  if (!test) {
    const struct guest_test *tests[128];
    unsigned count = sorted_tests(tests, 128);
    char names[1024];
    size_t len = 0;
    for (unsigned i = 0; i < count && len < sizeof(names); i++) {
      len += snprintf(names + len, sizeof(names) - len, " %s", tests[i]->name);
    }
    printf("TEST %s: FAIL unknown test; available:%s\n", name, count ? names : " none");
    guest_exit(GUEST_EXIT_USAGE);
  }
  set_test_name(test->name);
  test->run();
  printf("TEST %s: PASS\n", test->name);
  guest_exit(GUEST_EXIT_PASS);
}
