/*
 * Built-in tests of the guest itself and of the VMM's core machine (exit status, SMP start-up,
 * interrupts, UART input, device tree). Select one with `test=NAME`.
 */
#include "tests/guest/guest.h"
#include "tests/guest/internal.h"

GUEST_TEST(hello, "greets from ring 3 and echoes the command line") {
  printf("microvm test guest: hello from ring 3\n");
  printf("cmdline: %s\n", boot_cmdline());
  if (current_ring() != 3) test_fail("running in ring %u, not 3", current_ring());
}

GUEST_TEST(list, "lists the available tests") {
  const struct guest_test *tests[128];
  unsigned count = sorted_tests(tests, 128);
  for (unsigned i = 0; i < count; i++)
    printf("test %-12s %s\n", tests[i]->name, tests[i]->description);
}

GUEST_TEST(exit, "exits with status code=N without printing PASS") {
  const char *code = arg_get("code");
  uint64_t status;
  if (!code || !parse_u64(code, &status) || status > 255) {
    printf("TEST exit: FAIL needs code=N with 0 <= N <= 255\n");
    guest_exit(GUEST_EXIT_USAGE);
  }
  printf("TEST exit: exiting with status %lu\n", status);
  guest_exit((unsigned)status);
}

static volatile uint32_t smp_reports;

static void smp_report(unsigned apic_id) {
  if (current_ring() != 3) {
    printf("cpu %u: running in ring %u, not 3\n", apic_id, current_ring());
    return;
  }
  /* Print first, count second: the boot CPU exits as soon as the count is complete. */
  printf("cpu %u: running in ring 3\n", apic_id);
  __atomic_fetch_add(&smp_reports, 1, __ATOMIC_SEQ_CST);
}

GUEST_TEST(smp, "starts every AP; each reports from ring 3") {
  unsigned cpus = cpu_count();
  printf("smp: %u cpus (%s)\n", cpus,
         boot_dtb()        ? "from the FDT"
         : arg_get("cpus") ? "from cpus=N"
                           : "default");
  printf("cpu %u: running in ring %u (boot cpu)\n", this_cpu(), current_ring());
  if (cpus <= 1) return;
  uint64_t timeout_us = arg_u64("timeout_ms", 10000) * 1000;
  uint64_t start = rdtsc();
  unsigned started = smp_start_aps(smp_report, timeout_us);
  uint64_t deadline = deadline_after_us(timeout_us);
  while (smp_reports < cpus - 1 && !deadline_passed(deadline)) cpu_relax();
  printf("smp: %u of %u APs started, %u reported in %lu us\n", started, cpus - 1, smp_reports,
         tsc_to_us(rdtsc() - start));
  if (smp_reports != cpus - 1) test_fail("only %u of %u APs reported", smp_reports, cpus - 1);
}

GUEST_TEST(triplefault, "triple-faults on purpose (the VMM must stop with an error)") {
  printf("triplefault: loading an empty IDT in ring 0 and raising #UD\n");
  syscall1(SYS_TRIPLE_FAULT, 0);
  test_fail("still running after the triple fault");
}

GUEST_TEST(pagefault, "touches unmapped memory (the exception report must appear)") {
  printf("pagefault: reading 0x%lx from ring 3\n", 0x100000000000ul);
  (void)mmio_read32(0x100000000000ul);
  test_fail("no page fault");
}

static void print_node(const struct dtb *dtb, int node) {
  char path[256], line[512];
  size_t len = 0;
  dtb_node_path(dtb, node, path, sizeof(path));
  len += snprintf(line + len, sizeof(line) - len, "fdt: %s", path);
  uint32_t compat_len;
  const char *compat = (const char *)dtb_get_prop(dtb, node, "compatible", &compat_len);
  if (compat) {
    len += snprintf(line + len, sizeof(line) - len, " compatible=");
    for (uint32_t pos = 0; pos < compat_len && len < sizeof(line);) {
      size_t n = strnlen(compat + pos, compat_len - pos);
      len += snprintf(line + len, sizeof(line) - len, "%s\"%.*s\"", pos ? "," : "", (int)n,
                      compat + pos);
      pos += (uint32_t)n + 1;
    }
  }
  uint32_t reg_len;
  const uint8_t *reg = (const uint8_t *)dtb_get_prop(dtb, node, "reg", &reg_len);
  if (reg && len < sizeof(line)) {
    len += snprintf(line + len, sizeof(line) - len, " reg=<");
    for (uint32_t i = 0; i + 4 <= reg_len && len < sizeof(line); i += 4) {
      len += snprintf(line + len, sizeof(line) - len, "%s0x%x", i ? " " : "", dtb_be32(reg + i));
    }
    if (len < sizeof(line)) len += snprintf(line + len, sizeof(line) - len, ">");
  }
  uint32_t irq;
  if (dtb_get_interrupt(dtb, node, 0, &irq) && len < sizeof(line)) {
    snprintf(line + len, sizeof(line) - len, " interrupts=%u", irq);
  }
  printf("%s\n", line);
}

GUEST_TEST(fdt, "prints every device node of the flattened device tree") {
  const struct dtb *dtb = boot_dtb();
  if (!dtb) test_fail("no FDT (no PVH module with command line \"fdt\")");
  printf("fdt: %u bytes\n", dtb->total_size);
  unsigned devices = 0;
  for (int node = dtb_root(dtb); node >= 0; node = dtb_next_node(dtb, node, NULL)) {
    if (!dtb_get_prop(dtb, node, "compatible", NULL) && !dtb_get_prop(dtb, node, "reg", NULL)) {
      continue;
    }
    print_node(dtb, node);
    devices++;
  }
  printf("fdt: %u device nodes, %u cpus\n", devices, cpu_count());
  if (devices == 0) test_fail("the FDT has no device nodes");
}

#define TIMER_VECTOR 0x40
static volatile uint64_t timer_ticks;

static void timer_tick(unsigned vector, void *context) {
  (void)vector;
  (void)context;
  timer_ticks++; /* ring 0: keep it this short */
}

GUEST_TEST(timer, "LAPIC timer interrupts reach a ring-0 handler while ring 3 waits") {
  uint64_t wanted = arg_u64("ticks", 5);
  uint64_t period_us = arg_u64("period_us", 10000);
  lapic_enable();
  irq_register(TIMER_VECTOR, timer_tick, NULL);
  /* KVM's LAPIC timer counts at 1 GHz (APIC bus cycle 1 ns); divide by 16 (SDM 11.5.4). */
  lapic_write(LAPIC_TIMER_DIVIDE, 0x3);
  lapic_write(LAPIC_LVT_TIMER, TIMER_VECTOR | (1u << 17)); /* periodic, unmasked */
  uint64_t start = rdtsc();
  lapic_write(LAPIC_TIMER_INITIAL, (uint32_t)(period_us * 1000 / 16));
  irq_enable(); /* sti in ring 3: native with IOPL 3, else emulated by the #GP entry */
  uint64_t deadline = deadline_after_us(arg_u64("timeout_ms", 5000) * 1000);
  while (timer_ticks < wanted && !deadline_passed(deadline)) cpu_relax();
  irq_disable();
  uint64_t elapsed_us = tsc_to_us(rdtsc() - start);
  lapic_write(LAPIC_LVT_TIMER, TIMER_VECTOR | (1u << 16)); /* masked */
  lapic_write(LAPIC_TIMER_INITIAL, 0);
  irq_unregister(TIMER_VECTOR);
  uint64_t ticks = timer_ticks;
  printf("timer: %lu ticks in %lu us (programmed period %lu us, tsc %lu MHz)\n", ticks, elapsed_us,
         period_us, tsc_hz() / 1000000);
  if (ticks < wanted) test_fail("only %lu of %lu timer interrupts arrived", ticks, wanted);
}

GUEST_TEST(echo, "reads one line from the UART and prints it back") {
  char line[256];
  uint64_t timeout_ms = arg_u64("timeout_ms", 30000);
  printf("echo: ready\n");
  int len = serial_read_line(line, sizeof(line), timeout_ms * 1000);
  if (len < 0) test_fail("no line arrived within %lu ms", timeout_ms);
  printf("echo: %s\n", line);
}

GUEST_TEST(memory, "prints the PVH memory map and checks the DMA allocator") {
  const struct ram_region *ram;
  unsigned count = ram_regions(&ram);
  for (unsigned i = 0; i < count; i++) {
    printf("memory: ram 0x%lx-0x%lx (%lu KiB)\n", ram[i].base, ram[i].base + ram[i].size - 1,
           ram[i].size >> 10);
  }
  uint64_t next, end;
  dma_window(&next, &end);
  printf("memory: dma window 0x%lx-0x%lx (%lu KiB)\n", next, end, (end - next) >> 10);
  if (count == 0) test_fail("no RAM in the PVH memory map or the FDT");

  static const size_t sizes[] = {1, 4096, 3 * 4096 + 5, 65536};
  static const size_t aligns[] = {4096, 4096, 4096, 65536};
  uint64_t previous_end = 0;
  for (unsigned i = 0; i < 4; i++) {
    uint8_t *p = (uint8_t *)dma_alloc_aligned(sizes[i], aligns[i]);
    uint64_t addr = dma_addr(p);
    if (addr & (aligns[i] - 1)) test_fail("buffer 0x%lx is not %zu-aligned", addr, aligns[i]);
    if (addr < previous_end) test_fail("buffer 0x%lx overlaps the previous one", addr);
    if (addr < next || addr + sizes[i] > end) test_fail("buffer 0x%lx is outside the window", addr);
    bool in_ram = false;
    for (unsigned r = 0; r < count; r++) {
      in_ram |= addr >= ram[r].base && addr + sizes[i] <= ram[r].base + ram[r].size;
    }
    if (!in_ram) test_fail("buffer 0x%lx is not in RAM", addr);
    for (size_t b = 0; b < sizes[i]; b++) {
      if (p[b]) test_fail("buffer 0x%lx is not zeroed at +%zu", addr, b);
    }
    memset(p, 0xa5, sizes[i]);
    previous_end = addr + sizes[i];
    printf("memory: dma_alloc_aligned(%zu, %zu) = 0x%lx\n", sizes[i], aligns[i], addr);
  }
}

GUEST_TEST(pci, "lists the functions on PCI bus 0 (configuration mechanism #1)") {
  unsigned found = 0;
  for (unsigned dev = 0; dev < 32; dev++) {
    for (unsigned fn = 0; fn < 8; fn++) {
      uint32_t id = pci_cfg_read32(0, dev, fn, 0x00);
      if ((id & 0xffff) == 0xffff) {
        if (fn == 0) break;
        continue;
      }
      uint32_t class_rev = pci_cfg_read32(0, dev, fn, 0x08);
      uint8_t header_type = pci_cfg_read8(0, dev, fn, 0x0e);
      printf("pci: 00:%02x.%u %04x:%04x class %06x header %02x\n", dev, fn, id & 0xffff, id >> 16,
             class_rev >> 8, header_type);
      found++;
      if (fn == 0 && !(header_type & 0x80)) break; /* not multi-function */
    }
  }
  if (found == 0) test_fail("no PCI functions answer on ports 0xcf8/0xcfc");
}

#define PROBE_VECTOR 0x41
static volatile uint64_t probe_ticks;
static void probe_tick(unsigned vector, void *context) { probe_ticks++; }

/* Diagnostics for VMM work: what ring 3 is allowed to do and what the round trips cost. */
GUEST_TEST(probe, "reports ring-3 privileges and the cost of I/O, MMIO, syscalls, interrupts") {
  uint64_t rflags;
  __asm__ volatile("pushfq; popq %0" : "=r"(rflags));
  unsigned iopl = (unsigned)(rflags >> 12) & 3;
  printf("probe: ring %u, rflags 0x%lx: IOPL %u, so port I/O and cli/sti/hlt are %s\n",
         current_ring(), rflags, iopl, iopl == 3 ? "native" : "emulated by the #GP entry");
  printf("probe: tsc %lu kHz\n", tsc_hz() / 1000);
  const unsigned n = (unsigned)arg_u64("n", 200);
  uint64_t t0 = rdtsc();
  for (unsigned i = 0; i < n; i++) (void)inb(0x3f8 + 5); /* UART LSR */
  uint64_t t1 = rdtsc();
  for (unsigned i = 0; i < n; i++) (void)syscall1(0, 0); /* unknown function: returns -1 */
  uint64_t t2 = rdtsc();
  for (unsigned i = 0; i < n; i++) (void)lapic_read(LAPIC_ID);
  uint64_t t3 = rdtsc();
  uint32_t ring3[4], ring0[4];
  for (unsigned i = 0; i < n; i++) cpuid(1, 0, &ring3[0], &ring3[1], &ring3[2], &ring3[3]);
  uint64_t t4 = rdtsc();
  for (unsigned i = 0; i < n; i++) vmm_cpuid(1, 0, &ring0[0], &ring0[1], &ring0[2], &ring0[3]);
  uint64_t t5 = rdtsc();
  printf(
      "probe: ns per call: inb %lu, syscall %lu, LAPIC MMIO read %lu, cpuid in ring 3 %lu, "
      "in ring 0 %lu\n",
      tsc_to_us((t1 - t0) * 1000 / n), tsc_to_us((t2 - t1) * 1000 / n),
      tsc_to_us((t3 - t2) * 1000 / n), tsc_to_us((t4 - t3) * 1000 / n),
      tsc_to_us((t5 - t4) * 1000 / n));
  /* Where ring-3 CPUID is not trapped it returns the host's leaf 1 (another APIC ID, the host's
   * hypervisor bit and features). Diagnostic only: which one a host does is not a guest failure. */
  bool same = true;
  for (int i = 0; i < 4; i++) same &= ring3[i] == ring0[i];
  printf("probe: CPUID leaf 1 in ring 3 %s the VMM's (ring 0)\n",
         same ? "matches" : "differs from");

  lapic_enable();
  irq_register(PROBE_VECTOR, probe_tick, NULL);
  lapic_write(LAPIC_TIMER_DIVIDE, 0x3);
  lapic_write(LAPIC_LVT_TIMER, PROBE_VECTOR | (1u << 17)); /* periodic */
  lapic_write(LAPIC_TIMER_INITIAL, 62500);                 /* 1 ms at 1 GHz / 16 */
  udelay(20000);
  uint64_t masked_ticks = probe_ticks;
  uint64_t t6 = rdtsc();
  for (int i = 0; i < 5; i++) cpu_wait_for_interrupt();
  uint64_t t7 = rdtsc();
  lapic_write(LAPIC_LVT_TIMER, PROBE_VECTOR | (1u << 16)); /* masked */
  lapic_write(LAPIC_TIMER_INITIAL, 0);
  irq_unregister(PROBE_VECTOR);
  printf("probe: %lu interrupts taken in 20 ms of ring 3 with IF = 0 (expected 0)\n", masked_ticks);
  printf("probe: 5 x cpu_wait_for_interrupt() with a 1 ms timer: %lu us, %lu interrupts\n",
         tsc_to_us(t7 - t6), probe_ticks - masked_ticks);
  if (masked_ticks != 0) test_fail("interrupts arrived while IF = 0");
}

/* Prints what CPUID reports, so the VMM's --cpu-features mask and topology can be checked from
 * inside: leaf 1 (features, initial APIC id, logical count) and leaf 7 (extended features), read in
 * ring 0 (vmm_cpuid), which traps on every host. */
GUEST_TEST(cpuid, "prints CPUID leaf 1 and 7 feature words and the topology") {
  uint32_t eax, ebx, ecx, edx;
  vmm_cpuid(1, 0, &eax, &ebx, &ecx, &edx);
  printf("cpuid: leaf1 ecx=0x%08x edx=0x%08x apic_id=%u logical=%u\n", ecx, edx, ebx >> 24,
         (ebx >> 16) & 0xff);
  printf("cpuid: xsave=%u cx16=%u x2apic=%u avx=%u hypervisor=%u\n", (ecx >> 26) & 1,
         (ecx >> 13) & 1, (ecx >> 21) & 1, (ecx >> 28) & 1, (ecx >> 31) & 1);
  vmm_cpuid(7, 0, &eax, &ebx, &ecx, &edx);
  printf("cpuid: leaf7 ebx=0x%08x ecx=0x%08x avx2=%u\n", ebx, ecx, (ebx >> 5) & 1);
}

/* Resets the machine the way Linux's reboot=k does: command 0xFE (pulse the reset line) to the
 * i8042 once its input buffer is empty. The VMM ends; reaching the line after is a failure. */
GUEST_TEST(reset, "resets the machine through the i8042 (the VMM must stop)") {
  i8042_reset("reset: pulsing the i8042 reset line");
}
