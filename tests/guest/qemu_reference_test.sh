#!/bin/bash
# Boots the test guest under QEMU (the known-good reference VMM) and checks the built-in tests'
# output and exit status. QEMU's isa-debug-exit turns the guest's status V into (V << 1) | 1.
# Skips (test_skip) when /dev/kvm or qemu-system-x86_64 is missing.
#
# Usage: qemu_reference_test.sh [path/to/test_guest]   (Bazel passes $(location :test_guest))
set -u
# fail, check_status, expect_line, expect_match, guest_status, hmp, wait_for_line, probe_drive
source "$(dirname "$0")/qemu_harness.sh"
trap '' PIPE

GUEST="${1:-tests/guest/test_guest}"
RUN_TIMEOUT="${QEMU_RUN_TIMEOUT:-30}"  # seconds per QEMU run; a healthy run takes well under 1 s

require_kvm_qemu  # test_skip when /dev/kvm or QEMU is missing
if [[ ! -f "$GUEST" ]]; then
  echo "FAIL: guest ELF '$GUEST' not found"
  exit 1
fi

WORK="${TEST_TMPDIR:-$(mktemp -d)}"
# -cpu host,-arch-capabilities: MSR 0x10a cannot be set on our PVM hosts (docs/test-guest.md).
COMMON=(-enable-kvm -cpu host,-arch-capabilities -m 128M -nodefaults -display none -serial stdio
        -device isa-debug-exit,iobase=0xf4,iosize=1 -no-reboot -kernel "$GUEST")
QEMU=("$QEMU_BIN" -M microvm "${COMMON[@]}")
echo "QEMU: $("$QEMU_BIN" --version | head -n 1)"

FAILURES=0
OUT=""

# run NAME EXPECTED_STATUS QEMU_ARGS... ; the guest's serial output ends up in $OUT.
run() {
  local name="$1" expected="$2"
  shift 2
  OUT="$WORK/$name.out"
  local start=$SECONDS
  timeout "$RUN_TIMEOUT" "${QEMU[@]}" "$@" </dev/null >"$OUT" 2>&1
  local status=$?
  echo "ran $name: status $status in $((SECONDS - start)) s"
  check_status "$name" "$status" "$expected"
}

reject_line() {  # name pattern: no line may match this extended regex
  if grep -Eq -- "$2" "$OUT"; then fail "$1: unexpected output matching '$2'"; fi
}

# hello: greeting, command-line echo, PASS, status 0.
if run hello "$(guest_status 0)" -append "test=hello answer=42"; then
  expect_line hello "microvm test guest: hello from ring 3"
  expect_line hello "cmdline: test=hello answer=42"
  expect_line hello "TEST hello: PASS"
fi

# exit: the status given on the command line comes out of the VM.
if run exit "$(guest_status 5)" -append "test=exit code=5"; then
  reject_line exit "PASS|FAIL"
fi

# smp: two CPUs, the AP reports from ring 3.
if run smp "$(guest_status 0)" -smp 2 -append "test=smp cpus=2"; then
  expect_line smp "cpu 1: running in ring 3"
  expect_line smp "TEST smp: PASS"
fi

# timer: LAPIC timer interrupts reach the ring-0 handler.
if run timer "$(guest_status 0)" -append "test=timer"; then
  expect_line timer "TEST timer: PASS"
fi

# memory: the PVH memory map arrives and the DMA allocator hands out aligned, zeroed RAM.
if run memory "$(guest_status 0)" -append "test=memory"; then
  expect_line memory "TEST memory: PASS"
fi

# echo: a line written to the UART after the guest is ready comes back.
OUT="$WORK/echo.out"
FIFO="$WORK/echo.in"
rm -f "$FIFO"
mkfifo "$FIFO"
start=$SECONDS
timeout "$RUN_TIMEOUT" "${QEMU[@]}" -append "test=echo timeout_ms=20000" <"$FIFO" >"$OUT" 2>&1 &
qemu_pid=$!
exec 3>"$FIFO"
for _ in $(seq 1 $((RUN_TIMEOUT * 10))); do
  grep -Fxq "echo: ready" "$OUT" && break
  kill -0 "$qemu_pid" 2>/dev/null || break
  sleep 0.1
done
echo "hello over the serial port" >&3 2>/dev/null  # QEMU may be gone already (SIGPIPE ignored)
exec 3>&-
wait "$qemu_pid"
status=$?
echo "ran echo: status $status in $((SECONDS - start)) s"
if check_status echo "$status" "$(guest_status 0)"; then
  expect_line echo "echo: hello over the serial port"
  expect_line echo "TEST echo: PASS"
fi

# pci (-M pc: SeaBIOS, then the PVH entry; a few seconds): configuration mechanism #1 finds the
# i440FX host bridge and the PIIX3 IDE function, the reference devices for later drivers.
QEMU_SAVED=("${QEMU[@]}")
QEMU=("$QEMU_BIN" -M pc "${COMMON[@]}")
if run pci-pc "$(guest_status 0)" -append "test=pci"; then
  expect_line pci-pc "pci: 00:00.0 8086:1237 class 060000 header 00"
  expect_line pci-pc "pci: 00:01.1 8086:7010 class 010180 header 00"
  expect_line pci-pc "TEST pci: PASS"
fi
QEMU=("${QEMU_SAVED[@]}")

# Failure paths: they must fail loudly and with the documented statuses.
if run fdt-missing "$(guest_status 1)" -append "test=fdt"; then
  expect_line fdt-missing 'TEST fdt: FAIL no FDT (no PVH module with command line "fdt")'
fi
if run pagefault "$(guest_status 3)" -append "test=pagefault"; then
  grep -Eq '^EXCEPTION: vector 14 \(#PF page fault\) on cpu 0 in ring 3: .* cr2 0x100000000000$' \
    "$OUT" || fail "pagefault: no exception report"
fi
if run unknown "$(guest_status 2)" -append "test=no-such-test"; then
  grep -q '^TEST no-such-test: FAIL unknown test; available:' "$OUT" || fail "unknown: no usage"
fi
# triplefault: with -no-reboot QEMU treats the shutdown as a reset request and exits with 0.
if run triplefault 0 -append "test=triplefault"; then
  reject_line triplefault "PASS|FAIL"
fi

if [[ $FAILURES -ne 0 ]]; then
  echo "$FAILURES check(s) failed"
  exit 1
fi
echo "all QEMU reference checks passed"
