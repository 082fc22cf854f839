/*
 * Application-processor start-up: INIT-SIPI-SIPI through the xAPIC ICR (Intel SDM Vol. 3A 8.4.4.1
 * "Typical BSP Initialization Sequence" and 11.6.1 "Interrupt Command Register"). The AP runs the
 * real-mode trampoline from boot.S, the same long-mode entry as the boot CPU, gets its own stacks
 * and TSS (indexed by APIC ID) and arrives in ap_main in ring 3.
 */
#include "tests/guest/guest.h"
#include "tests/guest/internal.h"

#define ICR_DELIVERY_INIT (5u << 8)
#define ICR_DELIVERY_STARTUP (6u << 8)
#define ICR_LEVEL_ASSERT (1u << 14)
#define ICR_SEND_PENDING (1u << 12)

static void (*volatile ap_function)(unsigned apic_id);
static volatile uint32_t aps_in_ring3;

void ap_main(unsigned cpu) {
  __atomic_fetch_add(&aps_in_ring3, 1, __ATOMIC_SEQ_CST);
  void (*fn)(unsigned) = ap_function;
  if (fn) fn(cpu);
  cpu_park();
}

static void send_ipi(unsigned apic_id, uint32_t command) {
  lapic_write(LAPIC_ICR_HIGH, apic_id << 24); /* destination field, bits 56-63 */
  lapic_write(LAPIC_ICR_LOW, command);        /* writing the low half sends */
  for (int i = 0; i < 100000 && (lapic_read(LAPIC_ICR_LOW) & ICR_SEND_PENDING); i++) cpu_relax();
}

unsigned smp_start_aps(void (*fn)(unsigned apic_id), uint64_t timeout_us) {
  unsigned cpus = cpu_count();
  if (cpus <= 1) return 0;
  size_t trampoline_size = (size_t)(ap_trampoline_end - ap_trampoline_start);
  if (trampoline_size > 4096) guest_panic("AP trampoline is %zu bytes", trampoline_size);

  (void)tsc_hz(); /* calibrate once here, before APs could use the time helpers */
  memcpy((void *)(uintptr_t)AP_TRAMPOLINE_ADDR, ap_trampoline_start, trampoline_size);
  ap_function = fn;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  lapic_enable();

  unsigned self = this_cpu();
  unsigned targets[GUEST_MAX_CPUS];
  unsigned target_count = 0;
  for (unsigned i = 0; i < cpus; i++) {
    unsigned id = cpu_apic_id(i);
    if (id == self) continue;
    if (id >= GUEST_MAX_CPUS) {
      printf("smp: cpu with APIC ID %u not started (limit %u)\n", id, GUEST_MAX_CPUS);
      continue;
    }
    if (target_count < GUEST_MAX_CPUS) targets[target_count++] = id;
  }

  for (unsigned i = 0; i < target_count; i++) {
    send_ipi(targets[i], ICR_DELIVERY_INIT | ICR_LEVEL_ASSERT);
  }
  udelay(10000); /* SDM 8.4.4.1: 10 ms after INIT */
  for (int round = 0; round < 2; round++) {
    /* A second SIPI is ignored by a CPU that already left wait-for-SIPI (SDM 8.4.4.1). */
    for (unsigned i = 0; i < target_count; i++) {
      send_ipi(targets[i], ICR_DELIVERY_STARTUP | ICR_LEVEL_ASSERT | (AP_TRAMPOLINE_ADDR >> 12));
    }
    udelay(200);
  }

  uint64_t deadline = deadline_after_us(timeout_us);
  while (aps_in_ring3 < target_count && !deadline_passed(deadline)) cpu_relax();
  return aps_in_ring3;
}
