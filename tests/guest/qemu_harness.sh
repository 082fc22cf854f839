#!/usr/bin/env bash
# Shared by the QEMU reference harnesses (qemu_*_test.sh): result checks on a run's output file
# ($OUT, with $FAILURES counting), QEMU's isa-debug-exit status, an HMP client for the monitor
# socket, and waiting for a guest marker line. Source it; it defines functions only.

fail() {
  echo "FAIL: $*"
  if [[ -n "$OUT" && -f "$OUT" ]]; then
    sed 's/^/    | /' "$OUT"
  fi
  FAILURES=$((FAILURES + 1))
}

check_status() {  # name actual expected
  if [[ "$2" -ne "$3" ]]; then
    fail "$1: QEMU exit status $2, expected $3"
    return 1
  fi
}

expect_line() {  # name line: the output must contain exactly this line
  grep -Fxq -- "$2" "$OUT" || fail "$1: missing line '$2'"
}

expect_match() {  # name regex: some line must match this extended regex
  grep -Eq -- "$2" "$OUT" || fail "$1: no line matches '$2'"
}

guest_status() { echo $((($1 << 1) | 1)); }

# scsi-media: the guest prints @@EJECT cd / @@INSERT cd; we answer through the HMP monitor.
hmp() {  # socket command: one HMP command, the reply (escape sequences stripped) on stdout
  "$PYTHON" - "$1" "$2" <<'PY'
import re, socket, sys, time
sock = socket.socket(socket.AF_UNIX)
for _ in range(100):
    try:
        sock.connect(sys.argv[1])
        break
    except OSError:
        time.sleep(0.1)
else:
    sys.exit("cannot connect to the monitor at " + sys.argv[1])
sock.settimeout(10)
def until_prompt():
    data = b""
    while not data.endswith(b"(qemu) "):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")
until_prompt()
sock.sendall(sys.argv[2].encode() + b"\n")
reply = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", until_prompt())
lines = [l for l in reply.replace("\r", "").split("\n") if l.strip() and l.strip() != "(qemu)"]
print("\n".join(lines[1:]) if len(lines) > 1 else "")
PY
}

wait_for_line() {  # line pid: 0 when the guest printed it, 1 when QEMU ended first or on timeout
  local i
  for ((i = 0; i < RUN_TIMEOUT * 10; i++)); do
    grep -Fxq -- "$1" "$OUT" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

probe_drive() {
  printf 'quit\n' | timeout 20 "$QEMU_BIN" -M none -nodefaults -display none -monitor stdio \
    -drive "file=$WORK/disk-pristine.img,if=none,id=d0,format=raw,$1" >/dev/null 2>&1
}

# The one way a shell test skips (test_skip, counted by tools/test; docs/testing.md).
# shellcheck source=../support/skip.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/skip.sh"

# Skips the test (test_skip) unless /dev/kvm is usable (tools/test runs these tests, tagged
# "kvm", in L1 where this host has none) and QEMU is installed; sets QEMU_BIN.
require_kvm_qemu() {
  if [[ ! -e /dev/kvm ]]; then
    test_skip "/dev/kvm is absent (tools/test runs the \"kvm\" tests in L1 on such hosts)"
  fi
  if [[ ! -r /dev/kvm || ! -w /dev/kvm ]]; then
    test_skip "/dev/kvm is not readable and writable by $(id -un)"
  fi
  QEMU_BIN="$(command -v qemu-system-x86_64 || true)"
  if [[ -z "$QEMU_BIN" ]]; then
    test_skip "qemu-system-x86_64 is not installed (tools/setup)"
  fi
}

# require_kvm_qemu, and python3 (tools/make-pattern-image and the monitor client); sets PYTHON.
require_kvm_qemu_python() {
  require_kvm_qemu
  PYTHON="$(command -v python3 || true)"
  if [[ -z "$PYTHON" ]]; then
    test_skip "python3 is missing (tools/make-pattern-image and the monitor client need it)"
  fi
}

# For the harnesses that boot the guest with pattern images: skips unless KVM, QEMU and python3
# are there (require_kvm_qemu_python), sets GUEST and MKIMG from the script's arguments and
# RUN_TIMEOUT from QEMU_RUN_TIMEOUT (default 60 s), checks that GUEST and MKIMG exist, makes WORK
# ($TEST_TMPDIR under Bazel, else a temporary directory removed at exit unless the variable named
# KEEP_VAR is set) and SOCKDIR (under /tmp: the monitor socket path must fit sockaddr_un's 108
# bytes, and TEST_TMPDIR is often longer), and prints QEMU's version. Sets an EXIT trap.
setup_work() {  # name keep-var [guest [make-pattern-image]]
  GUEST="${3:-tests/guest/test_guest}"
  MKIMG="${4:-tools/make-pattern-image}"
  RUN_TIMEOUT="${QEMU_RUN_TIMEOUT:-60}"
  require_kvm_qemu_python  # test_skip when one is missing
  local f
  for f in "$GUEST" "$MKIMG"; do
    if [[ ! -f "$f" ]]; then
      echo "FAIL: '$f' not found"
      exit 1
    fi
  done
  if [[ -n "${TEST_TMPDIR:-}" ]]; then
    WORK="$TEST_TMPDIR"
  else
    WORK="$(mktemp -d)"
  fi
  # In L1, MICROVM_SOCKET_DIR is a tmpfs of L1's own (tests/l1/run_in_l1.sh).
  SOCKDIR="$(mktemp -d "${MICROVM_SOCKET_DIR:-/tmp}/mvm-$1.XXXXXX")"
  KEEP_WORK="${!2:-}"
  trap cleanup_work EXIT
  echo "QEMU: $("$QEMU_BIN" --version | head -n 1)"
}

cleanup_work() {
  rm -rf "$SOCKDIR"
  if [[ -z "${TEST_TMPDIR:-}" && -z "$KEEP_WORK" ]]; then rm -rf "$WORK"; fi
}

# Images: every 512-byte block carries {"MVMPATRN", seed, block number} and a fill the guest can
# recompute (tools/make-pattern-image): disk-pristine.img (64 MiB), cd.iso (8 MiB), new.iso (3 MiB).
DISK_SEED=11 CD_SEED=22 NEW_SEED=33
make_pattern_images() {
  "$PYTHON" "$MKIMG" --seed "$DISK_SEED" --size 64M "$WORK/disk-pristine.img" || { echo "FAIL: make-pattern-image"; exit 1; }
  "$PYTHON" "$MKIMG" --seed "$CD_SEED" --size 8M "$WORK/cd.iso" || { echo "FAIL: make-pattern-image"; exit 1; }
  "$PYTHON" "$MKIMG" --seed "$NEW_SEED" --size 3M "$WORK/new.iso" || { echo "FAIL: make-pattern-image"; exit 1; }
}
