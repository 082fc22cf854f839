/*
 * Runtime services for test code (ring 3): serial console, printf, strings, exit, TSC time, PCI
 * configuration access and the DMA allocator. See guest.h for the API contract.
 */
#include "tests/guest/guest.h"
#include "tests/guest/internal.h"

/* ================================================================================================
 * Exit.
 */
uint16_t debug_exit_port = 0xf4;

void guest_exit(unsigned status) {
  /* machine.md: a 1-byte write of V ends the VMM with status V (QEMU isa-debug-exit: (V<<1)|1). */
  outb(debug_exit_port, (uint8_t)status);
  console_break_lock();
  printf("guest_exit(%u): nothing at debug-exit port 0x%x stopped the machine; halting\n", status,
         debug_exit_port);
  cpu_park();
}

void i8042_reset(const char *announcement) {
  uint64_t deadline = deadline_after_us(100000);
  while ((inb(0x64) & 0x02) && !deadline_passed(deadline)) cpu_relax();
  printf("%s\n", announcement);
  outb(0x64, 0xfe);
  udelay(1000000);
  test_fail("still running 1 s after the reset command");
}

void guest_panic(const char *fmt, ...) {
  char message[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof(message), fmt, ap);
  va_end(ap);
  printf("PANIC: %s\n", message);
  if (test_name()[0]) printf("TEST %s: FAIL panic: %s\n", test_name(), message);
  guest_exit(GUEST_EXIT_FAIL);
}

/* ================================================================================================
 * Serial port: 16550 UART (registers per the TI/National PC16550D data sheet).
 */
#define UART_DATA 0 /* RBR / THR; DLL when LCR.DLAB = 1 */
#define UART_IER 1  /* DLM when LCR.DLAB = 1 */
#define UART_IIR 2  /* read: interrupt identification; write: FCR */
#define UART_FCR 2
#define UART_LCR 3
#define UART_MCR 4
#define UART_LSR 5
#define LSR_DATA_READY 0x01
#define LSR_THR_EMPTY 0x20
#define UART_FIFO_SIZE 16

static uint16_t serial_port = 0x3f8;
static bool serial_has_fifo;
static unsigned serial_tx_room; /* bytes that fit before LSR must be polled again */
static spinlock_t console_lock;
static volatile bool console_lock_broken;
/* Bytes that had already arrived when serial_init reprogrammed the FIFO (which may flush it). */
static uint8_t early_input[UART_FIFO_SIZE];
static unsigned early_input_count, early_input_next;
static bool last_input_was_cr;

void serial_init(uint16_t port) {
  serial_port = port;
  while ((inb(port + UART_LSR) & LSR_DATA_READY) && early_input_count < sizeof(early_input)) {
    early_input[early_input_count++] = inb(port + UART_DATA);
  }
  outb(port + UART_IER, 0x00);  /* polled: no UART interrupts */
  outb(port + UART_LCR, 0x80);  /* DLAB */
  outb(port + UART_DATA, 0x01); /* divisor 1: 115200 baud */
  outb(port + UART_IER, 0x00);
  outb(port + UART_LCR, 0x03); /* 8 data bits, no parity, 1 stop bit */
  outb(port + UART_FCR, 0x01); /* enable the FIFOs */
  outb(port + UART_MCR, 0x03); /* DTR, RTS */
  /* IIR bits 7:6 = 11b when the FIFOs are enabled, i.e. the UART really is a 16550A. */
  serial_has_fifo = (inb(port + UART_IIR) & 0xc0) == 0xc0;
  serial_tx_room = 0;
}

/* THR empty means the whole transmit FIFO is empty, so up to 16 bytes can follow without another
 * LSR read: one VM exit per byte instead of two. */
static void serial_putc_locked(char c) {
  if (serial_tx_room == 0) {
    while (!(inb(serial_port + UART_LSR) & LSR_THR_EMPTY)) cpu_relax();
    serial_tx_room = serial_has_fifo ? UART_FIFO_SIZE : 1;
  }
  outb(serial_port, (uint8_t)c);
  serial_tx_room--;
}

void console_break_lock(void) {
  console_lock_broken = true;
  serial_tx_room = 0;
}

static bool console_acquire(void) {
  if (console_lock_broken) return false;
  if (current_ring() == 0) {
    /* An interrupt handler may have interrupted a printf on this CPU: do not wait forever. */
    for (int i = 0; i < 1000; i++) {
      if (spin_trylock(&console_lock)) return true;
    }
    return false;
  }
  spin_lock(&console_lock);
  return true;
}

static void console_release(bool locked) {
  if (locked) spin_unlock(&console_lock);
}

void serial_write_direct(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) serial_putc_locked(s[i]);
}

bool port_io_native;

/* Under PVM every IN/OUT from ring 3 is a #GP round trip through (emulated) ring 0; sending a
 * whole buffer with one syscall makes console output about three times faster. */
static void console_emit(const char *s, size_t n) {
  if (n == 0) return;
  if (port_io_native || current_ring() == 0) {
    serial_write_direct(s, n);
  } else {
    syscall2(SYS_SERIAL_WRITE, (uint64_t)(uintptr_t)s, n);
  }
}

void serial_write(const char *s, size_t n) {
  bool locked = console_acquire();
  console_emit(s, n);
  console_release(locked);
}

static int serial_try_getc(void) {
  if (early_input_next < early_input_count) return early_input[early_input_next++];
  if (inb(serial_port + UART_LSR) & LSR_DATA_READY) return inb(serial_port + UART_DATA);
  return -1;
}

int serial_getc(void) {
  int c;
  while ((c = serial_try_getc()) < 0) cpu_relax();
  return c;
}

int serial_getc_timeout(uint64_t timeout_us) {
  uint64_t deadline = deadline_after_us(timeout_us);
  for (;;) {
    int c = serial_try_getc();
    if (c >= 0) return c;
    if (deadline_passed(deadline)) return -1;
    cpu_relax();
  }
}

int serial_read_line(char *buf, size_t size, uint64_t timeout_us) {
  uint64_t deadline = timeout_us ? deadline_after_us(timeout_us) : 0;
  size_t len = 0;
  for (;;) {
    int c = serial_try_getc();
    if (c < 0) {
      if (deadline && deadline_passed(deadline)) {
        if (size) buf[len] = '\0';
        return -1;
      }
      cpu_relax();
      continue;
    }
    /* "\r\n" ends one line, not two. */
    if (c == '\n' && last_input_was_cr && len == 0) {
      last_input_was_cr = false;
      continue;
    }
    last_input_was_cr = (c == '\r');
    if (c == '\r' || c == '\n') break;
    if (len + 1 < size) buf[len++] = (char)c;
  }
  if (size) buf[len] = '\0';
  return (int)len;
}

/* ================================================================================================
 * printf.
 */
struct sink {
  void (*put)(struct sink *sink, char c);
  char *buf;
  size_t size;
  size_t len; /* characters produced (may exceed size for snprintf) */
};

static void sink_put(struct sink *sink, char c) {
  sink->put(sink, c);
  sink->len++;
}

static void sink_repeat(struct sink *sink, char c, int count) {
  for (int i = 0; i < count; i++) sink_put(sink, c);
}

static void format_number(struct sink *sink, uint64_t value, bool negative, unsigned base,
                          bool upper, const char *prefix, int width, int precision, bool left_align,
                          bool zero_pad) {
  const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  char tmp[24];
  int count = 0;
  do {
    tmp[count++] = digits[value % base];
    value /= base;
  } while (value);
  if (precision == 0 && count == 1 && tmp[0] == '0') count = 0; /* "%.0d" of 0 prints nothing */
  int zeros = precision > count ? precision - count : 0;
  int prefix_len = (int)strlen(prefix) + (negative ? 1 : 0);
  int body = prefix_len + zeros + count;
  if (zero_pad && !left_align && precision < 0 && width > body) {
    zeros += width - body;
    body = width;
  }
  if (!left_align) sink_repeat(sink, ' ', width - body);
  if (negative) sink_put(sink, '-');
  for (const char *p = prefix; *p; p++) sink_put(sink, *p);
  sink_repeat(sink, '0', zeros);
  while (count) sink_put(sink, tmp[--count]);
  if (left_align) sink_repeat(sink, ' ', width - body);
}

static void format(struct sink *sink, const char *fmt, va_list ap) {
  for (; *fmt; fmt++) {
    if (*fmt != '%') {
      sink_put(sink, *fmt);
      continue;
    }
    const char *spec_start = fmt++;
    bool left_align = false, zero_pad = false, alternate = false, plus = false, space = false;
    for (;; fmt++) {
      if (*fmt == '-') left_align = true;
      else if (*fmt == '0') zero_pad = true;
      else if (*fmt == '#') alternate = true;
      else if (*fmt == '+') plus = true;
      else if (*fmt == ' ') space = true;
      else break;
    }
    int width = 0;
    if (*fmt == '*') {
      width = va_arg(ap, int);
      if (width < 0) {
        left_align = true;
        width = -width;
      }
      fmt++;
    } else {
      while (*fmt >= '0' && *fmt <= '9') width = width * 10 + (*fmt++ - '0');
    }
    int precision = -1;
    if (*fmt == '.') {
      fmt++;
      precision = 0;
      if (*fmt == '*') {
        precision = va_arg(ap, int);
        fmt++;
      } else {
        while (*fmt >= '0' && *fmt <= '9') precision = precision * 10 + (*fmt++ - '0');
      }
    }
    int longness = 0; /* 0 int, 1 long, 2 long long; size_t/intmax_t/ptrdiff_t are long */
    for (;; fmt++) {
      if (*fmt == 'l') longness++;
      else if (*fmt == 'z' || *fmt == 'j' || *fmt == 't') longness = 1;
      else if (*fmt == 'h') continue; /* promoted to int anyway */
      else break;
    }
    switch (*fmt) {
      case 'd':
      case 'i': {
        int64_t v = longness ? va_arg(ap, int64_t) : va_arg(ap, int);
        uint64_t magnitude = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
        const char *prefix = (v >= 0 && plus) ? "+" : (v >= 0 && space) ? " " : "";
        format_number(sink, magnitude, v < 0, 10, false, prefix, width, precision, left_align,
                      zero_pad);
        break;
      }
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        uint64_t v = longness ? va_arg(ap, uint64_t) : va_arg(ap, unsigned int);
        unsigned base = *fmt == 'u' ? 10 : *fmt == 'o' ? 8 : 16;
        const char *prefix = "";
        if (alternate && v != 0)
          prefix = *fmt == 'x' ? "0x" : *fmt == 'X' ? "0X" : *fmt == 'o' ? "0" : "";
        format_number(sink, v, false, base, *fmt == 'X', prefix, width, precision, left_align,
                      zero_pad);
        break;
      }
      case 'p': {
        uint64_t v = (uint64_t)(uintptr_t)va_arg(ap, void *);
        format_number(sink, v, false, 16, false, "0x", width, precision, left_align, zero_pad);
        break;
      }
      case 'c': {
        char c = (char)va_arg(ap, int);
        if (!left_align) sink_repeat(sink, ' ', width - 1);
        sink_put(sink, c);
        if (left_align) sink_repeat(sink, ' ', width - 1);
        break;
      }
      case 's': {
        const char *s = va_arg(ap, const char *);
        if (!s) s = "(null)";
        int len = (int)(precision >= 0 ? strnlen(s, (size_t)precision) : strlen(s));
        if (!left_align) sink_repeat(sink, ' ', width - len);
        for (int i = 0; i < len; i++) sink_put(sink, s[i]);
        if (left_align) sink_repeat(sink, ' ', width - len);
        break;
      }
      case '%': sink_put(sink, '%'); break;
      default: /* unknown conversion: print it as written */
        for (const char *p = spec_start; p <= fmt && *p; p++) sink_put(sink, *p);
        if (!*fmt) return;
        break;
    }
  }
}

static void buffer_put(struct sink *sink, char c) {
  if (sink->size && sink->len < sink->size - 1) sink->buf[sink->len] = c;
}

int vsnprintf(char *buf, size_t size, const char *fmt, va_list ap) {
  struct sink sink = {buffer_put, buf, size, 0};
  format(&sink, fmt, ap);
  if (size) buf[sink.len < size ? sink.len : size - 1] = '\0';
  return (int)sink.len;
}

int snprintf(char *buf, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, size, fmt, ap);
  va_end(ap);
  return n;
}

/* printf output collects in a small buffer that is flushed to the console in chunks. */
struct console_sink {
  struct sink sink;
  char buffer[128];
  size_t used;
};

static void console_sink_put(struct sink *sink, char c) {
  struct console_sink *console = (struct console_sink *)sink;
  console->buffer[console->used++] = c;
  if (console->used == sizeof(console->buffer)) {
    console_emit(console->buffer, console->used);
    console->used = 0;
  }
}

int vprintf(const char *fmt, va_list ap) {
  struct console_sink console = {{console_sink_put, NULL, 0, 0}, {0}, 0};
  bool locked = console_acquire();
  format(&console.sink, fmt, ap);
  console_emit(console.buffer, console.used);
  console_release(locked);
  return (int)console.sink.len;
}

int printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vprintf(fmt, ap);
  va_end(ap);
  return n;
}

int puts(const char *s) { return printf("%s\n", s); }

/* ================================================================================================
 * Strings. memcpy/memset use the string instructions: they run natively in ring 3 and GCC cannot
 * turn them back into calls to themselves.
 */
void *memcpy(void *dst, const void *src, size_t n) {
  void *d = dst;
  __asm__ volatile("rep movsb" : "+D"(d), "+S"(src), "+c"(n) : : "memory");
  return dst;
}

void *memmove(void *dst, const void *src, size_t n) {
  if ((uintptr_t)dst <= (uintptr_t)src || (uintptr_t)dst >= (uintptr_t)src + n) {
    return memcpy(dst, src, n);
  }
  /* Overlapping with dst above src: copy backwards (DF = 1), then restore DF = 0 (SysV ABI). */
  void *d = (char *)dst + n - 1;
  const void *s = (const char *)src + n - 1;
  __asm__ volatile("std; rep movsb; cld" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
  return dst;
}

void *memset(void *dst, int c, size_t n) {
  void *d = dst;
  __asm__ volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(c) : "memory");
  return dst;
}

int memcmp(const void *a, const void *b, size_t n) {
  const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
  for (size_t i = 0; i < n; i++) {
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  }
  return 0;
}

size_t strlen(const char *s) {
  size_t n = 0;
  while (s[n]) n++;
  return n;
}

size_t strnlen(const char *s, size_t max) {
  size_t n = 0;
  while (n < max && s[n]) n++;
  return n;
}

int strcmp(const char *a, const char *b) {
  while (*a && *a == *b) a++, b++;
  return (unsigned char)*a - (unsigned char)*b;
}

int strncmp(const char *a, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (a[i] != b[i] || !a[i]) return (unsigned char)a[i] - (unsigned char)b[i];
  }
  return 0;
}

char *strchr(const char *s, int c) {
  for (;; s++) {
    if (*s == (char)c) return (char *)s;
    if (!*s) return NULL;
  }
}

bool parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s) return false;
  unsigned base = 10;
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s += 2;
    if (!*s) return false;
  }
  uint64_t value = 0;
  for (; *s; s++) {
    unsigned digit;
    if (*s >= '0' && *s <= '9') digit = (unsigned)(*s - '0');
    else if (*s >= 'a' && *s <= 'f') digit = (unsigned)(*s - 'a' + 10);
    else if (*s >= 'A' && *s <= 'F') digit = (unsigned)(*s - 'A' + 10);
    else return false;
    if (digit >= base) return false;
    value = value * base + digit;
  }
  *out = value;
  return true;
}

/* ================================================================================================
 * Time.
 */
static uint64_t tsc_frequency;

/* PIT channel 2 in mode 0 counts 11932 ticks of 1.193182 MHz = 10 ms; OUT2 (port 0x61 bit 5) goes
 * high at terminal count (Intel 8254 data sheet; port 0x61 per the PC/AT architecture). */
static uint64_t calibrate_with_pit(void) {
  const uint16_t count = 11932;
  uint8_t saved = inb(0x61);
  outb(0x61, (saved & ~0x02) | 0x01); /* gate 2 on, speaker off */
  outb(0x43, 0xb0);                   /* channel 2, lobyte/hibyte, mode 0, binary */
  outb(0x42, count & 0xff);
  outb(0x42, count >> 8);
  uint64_t start = rdtsc();
  unsigned polls = 0;
  while (!(inb(0x61) & 0x20)) {
    if (++polls > 2000000) break;
  }
  uint64_t end = rdtsc();
  outb(0x61, saved);
  return (end - start) * 100;
}

/* KVM paravirtual clock (Linux Documentation/virt/kvm/x86/msr.rst, MSR_KVM_SYSTEM_TIME_NEW):
 * the hypervisor fills a struct pvclock_vcpu_time_info whose tsc_to_system_mul and tsc_shift convert
 * TSC ticks to nanoseconds: ns = ((ticks << shift) * mul) >> 32 (a negative shift shifts right). So
 * ticks per second = 10^9 * 2^32 / mul / 2^shift. */
#define MSR_KVM_SYSTEM_TIME_NEW 0x4b564d01
#define KVM_FEATURE_CLOCKSOURCE2 (1u << 3)
struct pvclock_vcpu_time_info {
  uint32_t version;
  uint32_t pad0;
  uint64_t tsc_timestamp;
  uint64_t system_time;
  uint32_t tsc_to_system_mul;
  int8_t tsc_shift;
  uint8_t flags;
  uint8_t pad[2];
};
static struct pvclock_vcpu_time_info pvclock __attribute__((aligned(32)));

static uint64_t calibrate_with_kvmclock(void) {
  uint32_t eax, ebx, ecx, edx;
  vmm_cpuid(0x40000000, 0, &eax, &ebx, &ecx, &edx);
  bool kvm = ebx == 0x4b4d564b && ecx == 0x564b4d56 && edx == 0x4d; /* "KVMKVMKVM\0\0\0" */
  if (!kvm || eax < 0x40000001) return 0;
  vmm_cpuid(0x40000001, 0, &eax, &ebx, &ecx, &edx);
  if (!(eax & KVM_FEATURE_CLOCKSOURCE2)) return 0;
  wrmsr(MSR_KVM_SYSTEM_TIME_NEW, (uint64_t)(uintptr_t)&pvclock | 1); /* bit 0: enable */
  uint32_t mul = __atomic_load_n(&pvclock.tsc_to_system_mul, __ATOMIC_ACQUIRE);
  int8_t shift = pvclock.tsc_shift;
  wrmsr(MSR_KVM_SYSTEM_TIME_NEW, 0); /* stop updates of our memory */
  if (mul == 0) return 0;
  uint64_t hz = (1000000000ull << 32) / mul;
  return shift < 0 ? hz << -shift : hz >> shift;
}

static uint64_t calibrate_tsc(void) {
  uint32_t eax, ebx, ecx, edx;
  vmm_cpuid(1, 0, &eax, &ebx, &ecx, &edx);
  if (ecx & (1u << 31)) { /* hypervisor present: try the timing leaf 0x40000010 (EAX = TSC kHz) */
    vmm_cpuid(0x40000000, 0, &eax, &ebx, &ecx, &edx);
    if (eax >= 0x40000010 && eax < 0x40010000) {
      vmm_cpuid(0x40000010, 0, &eax, &ebx, &ecx, &edx);
      if (eax) return (uint64_t)eax * 1000;
    }
  }
  uint64_t hz = calibrate_with_kvmclock();
  if (hz >= 100000000ull && hz <= 20000000000ull) return hz;
  hz = calibrate_with_pit();
  if (hz >= 100000000ull && hz <= 20000000000ull) return hz;
  printf("tsc: no TSC frequency from CPUID, kvmclock or the PIT (%lu Hz); assuming 2 GHz\n", hz);
  return 2000000000ull;
}

uint64_t tsc_hz(void) {
  if (!tsc_frequency) tsc_frequency = calibrate_tsc();
  return tsc_frequency;
}

uint64_t deadline_after_us(uint64_t microseconds) {
  return rdtsc() + microseconds * (tsc_hz() / 1000) / 1000;
}

void udelay(uint64_t microseconds) {
  uint64_t deadline = deadline_after_us(microseconds);
  while (!deadline_passed(deadline)) cpu_relax();
}

uint64_t tsc_to_us(uint64_t ticks) { return ticks * 1000 / (tsc_hz() / 1000); }

/* ================================================================================================
 * PCI configuration mechanism #1: write the address to 0xCF8 (bit 31 enable, bus, device,
 * function, dword-aligned register), then access 0xCFC + (offset & 3).
 */
#define PCI_CONFIG_ADDRESS 0xcf8
#define PCI_CONFIG_DATA 0xcfc
static spinlock_t pci_lock;

static void pci_select(unsigned bus, unsigned dev, unsigned fn, unsigned offset) {
  outl(PCI_CONFIG_ADDRESS, 0x80000000u | ((bus & 0xff) << 16) | ((dev & 0x1f) << 11) |
                               ((fn & 7) << 8) | (offset & 0xfc));
}

uint32_t pci_cfg_read32(unsigned bus, unsigned dev, unsigned fn, unsigned offset) {
  spin_lock(&pci_lock);
  pci_select(bus, dev, fn, offset);
  uint32_t v = inl(PCI_CONFIG_DATA);
  spin_unlock(&pci_lock);
  return v;
}

uint16_t pci_cfg_read16(unsigned bus, unsigned dev, unsigned fn, unsigned offset) {
  spin_lock(&pci_lock);
  pci_select(bus, dev, fn, offset);
  uint16_t v = inw(PCI_CONFIG_DATA + (offset & 2));
  spin_unlock(&pci_lock);
  return v;
}

uint8_t pci_cfg_read8(unsigned bus, unsigned dev, unsigned fn, unsigned offset) {
  spin_lock(&pci_lock);
  pci_select(bus, dev, fn, offset);
  uint8_t v = inb(PCI_CONFIG_DATA + (offset & 3));
  spin_unlock(&pci_lock);
  return v;
}

void pci_cfg_write32(unsigned bus, unsigned dev, unsigned fn, unsigned offset, uint32_t value) {
  spin_lock(&pci_lock);
  pci_select(bus, dev, fn, offset);
  outl(PCI_CONFIG_DATA, value);
  spin_unlock(&pci_lock);
}

void pci_cfg_write16(unsigned bus, unsigned dev, unsigned fn, unsigned offset, uint16_t value) {
  spin_lock(&pci_lock);
  pci_select(bus, dev, fn, offset);
  outw(PCI_CONFIG_DATA + (offset & 2), value);
  spin_unlock(&pci_lock);
}

void pci_cfg_write8(unsigned bus, unsigned dev, unsigned fn, unsigned offset, uint8_t value) {
  spin_lock(&pci_lock);
  pci_select(bus, dev, fn, offset);
  outb(PCI_CONFIG_DATA + (offset & 3), value);
  spin_unlock(&pci_lock);
}

/* ================================================================================================
 * DMA allocator.
 */
#define PAGE_SIZE 4096ull
static uint64_t dma_next, dma_end;
static spinlock_t dma_lock;

void dma_init(uint64_t start, uint64_t end) {
  dma_next = (start + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);
  dma_end = end & ~(PAGE_SIZE - 1);
  if (dma_next > dma_end) dma_next = dma_end;
}

void dma_window(uint64_t *next, uint64_t *end) {
  spin_lock(&dma_lock);
  *next = dma_next;
  *end = dma_end;
  spin_unlock(&dma_lock);
}

void *dma_alloc_aligned(size_t size, size_t align) {
  if (align < PAGE_SIZE) align = PAGE_SIZE;
  if (align & (align - 1))
    guest_panic("dma_alloc_aligned: alignment %zu is not a power of two", align);
  spin_lock(&dma_lock);
  uint64_t start = (dma_next + align - 1) & ~((uint64_t)align - 1);
  uint64_t rounded = (size + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);
  if (size == 0 || start > dma_end || rounded > dma_end - start) {
    uint64_t left = dma_end - dma_next;
    spin_unlock(&dma_lock);
    guest_panic("dma_alloc: cannot allocate %zu bytes (%lu bytes left)", size, left);
  }
  dma_next = start + rounded;
  spin_unlock(&dma_lock);
  void *p = (void *)(uintptr_t)start;
  memset(p, 0, rounded);
  return p;
}

void *dma_alloc(size_t size) { return dma_alloc_aligned(size, PAGE_SIZE); }
