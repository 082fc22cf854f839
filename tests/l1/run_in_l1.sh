#!/usr/bin/env bash
# Runs one command, normally a Bazel test, inside an L1 guest that has a real /dev/kvm: Debian's
# cloud kernel under QEMU TCG (-cpu max emulates AMD SVM with nested paging, docs/nested.md) with
# kvm-amd loaded. L1 sees this machine's file system as this process sees it (shared read-write
# through virtiofs, so the test's sandbox, runfiles, TEST_TMPDIR and XML output are the same paths),
# and runs the command there with the same working directory, environment and arguments. The
# command's output comes back on stdout, and its exit status is this script's.
#
# tools/test uses it as Bazel's --run_under for every test tagged "kvm" where this host has no usable
# KVM (docs/testing.md), so each test keeps its name, result, test.log and test.xml:
#   bazel test --run_under=//tests/l1:run_in_l1 --test_tag_filters=kvm //...
#
# Usage: run_in_l1.sh COMMAND [ARGS...]
# Environment:
#   MICROVM_L1_INITRAMFS   the L1 initramfs (tools/test builds it once; otherwise it is built here,
#                          in TEST_TMPDIR or a temporary directory, with tools/make-linux-initramfs)
#   MICROVM_L1_MEM=2G MICROVM_L1_SMP=2
#   MICROVM_L0_QEMU        the qemu-system-x86_64 that runs L1 (default: this host's)
#   MICROVM_L1_ATTEMPTS=4  L1 boots in all when L1's own kernel fails under the emulation (a crash,
#                          a reset, a stall of its console): the command runs again in a new L1
#   MICROVM_L1_FAULT_RERUNS=1  runs of the command again, in a new L1, when it failed after a guest's
#                          triple fault with the nested emulation's signature (tests/l1/init.sh's
#                          L1-EMULATION-FAULT; docs/nested.md): the failure stays in the log
#   MICROVM_L1_STALL=120   seconds with neither output nor L1's heartbeat (every 15 s, on its kernel
#                          log) before L1 counts as stalled; what its vCPUs were doing is kept in the
#                          test's outputs (l1-stall.N.log: QEMU's "info cpus" and "info registers")
set -uo pipefail

me=run_in_l1
[ $# -ge 1 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# In Bazel's runfiles the tools sit under the workspace root; from a checkout, beside this script.
root=$(cd "$here/../.." && pwd)
# MICROVM_L0_QEMU: the QEMU that emulates L1 (tools/test passes Debian 13's QEMU 10 from
# tools/make-qemu-root: docs/nested.md, "Which QEMU emulates L1"); by default this host's.
qemu=${MICROVM_L0_QEMU:-$(command -v qemu-system-x86_64)} ||
  { echo "$me: FAIL: qemu-system-x86_64 is missing (tools/setup)"; exit 1; }
[ -x "$qemu" ] || { echo "$me: FAIL: MICROVM_L0_QEMU=$qemu is not a program"; exit 1; }
virtiofsd=/usr/lib/qemu/virtiofsd
[ -x "$virtiofsd" ] || { echo "$me: FAIL: $virtiofsd is missing (qemu-system-common)"; exit 1; }

# Under /tmp: the virtiofs socket path must fit in sockaddr_un.
work=$(mktemp -d /tmp/l1.XXXXXX) || exit 1
# virtiofsd and QEMU are children of this script: they end with it.
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

read -r kver kernel < <("$root/tools/make-linux-initramfs" --print-kernel) ||
  { echo "$me: FAIL: no cloud kernel (tools/setup installs linux-image-cloud-amd64)"; exit 1; }
initramfs=${MICROVM_L1_INITRAMFS:-}
if [ -z "$initramfs" ]; then
  initramfs=$work/l1-initramfs.gz
  "$root/tools/make-linux-initramfs" --kernel-version "$kver" --init "$root/tests/l1/init.sh" \
    --module irqbypass --module kvm --module kvm_amd --module virtiofs "$initramfs" >&2 ||
    { echo "$me: FAIL: could not build the L1 initramfs"; exit 1; }
fi

# The job L1 runs in the shared file system: this directory, this environment, this command.
job=$work/job.sh
{
  echo "# written by tests/l1/run_in_l1.sh"
  export -p | grep -vE '^declare -x (BASH_FUNC_|PWD=|OLDPWD=|SHLVL=|_=)'
  # This process's limits on descriptors (L1's init starts with the kernel's 1024).
  echo "ulimit -Hn $(ulimit -Hn) && ulimit -Sn $(ulimit -Sn)"
  # Unix sockets on the shared (virtiofs) file system are not reliable in L1: a connect() can miss
  # a listening socket once L1's kernel has dropped its inode and looked it up again
  # (ECONNREFUSED, "a stale socket"; seen in api_test and the QEMU monitor of qemu_ide_test under
  # load). The tests make their sockets in MICROVM_SOCKET_DIR, a tmpfs of L1's own.
  printf 'mkdir -p %q && mount -t tmpfs -o mode=1777 l1-sockets %q && export MICROVM_SOCKET_DIR=%q\n' \
    "$work/sockets" "$work/sockets" "$work/sockets"
  # The QEMU harnesses' per-run limit is a hang guard sized for a real KVM (a run takes 2-6 s
  # there); under the nested emulation a run is 10-30 times slower and L1 may stall for a minute
  # (CI: qemu_ide_test's LBA48 disk run passed 60 s after an L1 retry). Bazel's own timeout still
  # bounds the whole test.
  echo 'export QEMU_RUN_TIMEOUT="${QEMU_RUN_TIMEOUT:-400}"'
  printf 'cd %q || exit 125\n' "$PWD"
  printf 'export PWD=%q\n' "$PWD"
  # Through a pipe, as under Bazel on the host (not L1's serial terminal: no colours, no tty).
  printf '%q ' "$@"
  echo '2>&1 | cat'
  echo 'exit "${PIPESTATUS[0]}"'
} > "$job"

# hmp SOCKET COMMAND (QEMU's monitor), shared with the test guest's QEMU harness.
# shellcheck source=../guest/qemu_harness.sh
source "$root/tests/guest/qemu_harness.sh"
l1_state() {  # monitor-socket: what L1's vCPUs are doing, for a stalled L1
  local command
  for command in "info cpus" "info registers -a" 'x/16i $pc'; do
    echo "(qemu) $command"
    PYTHON=python3 hmp "$1" "$command"
  done
}

# L1 kernel lines that mean L1 itself broke under the emulation (as in tests/nested/nested_harness.sh).
fault_line='^\[ *[0-9.]+\] (BUG:|watchdog: BUG:|Oops|Kernel panic|general protection fault|kernel BUG)'
echo "$me: L1 under $("$qemu" --version | head -n 1)"
attempt=1
emulation_reruns=0
while :; do
  console=$work/console.$attempt
  klog=$work/kernel.$attempt
  sock=$work/vfs.$attempt.sock
  : > "$console"
  : > "$klog"
  # cache=always: L1 keeps the inodes it looked up, so a unix socket bound on the shared file
  # system stays reachable by its path (connect() finds the socket through the inode; with
  # cache=auto a dropped and looked-up-again inode made QEMU's monitor socket unreachable). Nothing
  # on the host changes the test's files while it runs.
  # virtiofsd writes a pid file under /run/virtiofsd, read-only in Bazel's sandbox: a tmpfs of its
  # own there, in a mount namespace of its own (L1 sees the rest as this process does).
  unshare -m --propagation private sh -c '
    if [ -d /run/virtiofsd ]; then run=/run/virtiofsd; else run=/run; fi
    mount -t tmpfs -o size=1m,mode=0755 none "$run" && exec "$@"' virtiofsd \
    "$virtiofsd" --socket-path="$sock" -o source=/ -o sandbox=chroot -o cache=always -o log_level=err \
    2>"$work/virtiofsd.$attempt.log" &
  pids+=($!)
  for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
  [ -S "$sock" ] || { echo "$me: FAIL: virtiofsd did not start: $(cat "$work/virtiofsd.$attempt.log")"; exit 1; }
  mem=${MICROVM_L1_MEM:-2G}
  "$qemu" -accel tcg,thread=multi -cpu max -smp "${MICROVM_L1_SMP:-2}" \
    -object "memory-backend-memfd,id=mem,size=$mem,share=on" -M q35,memory-backend=mem -m "$mem" \
    -nodefaults -no-reboot -display none -serial "file:$console" -serial "file:$klog" \
    -monitor "unix:$work/mon.$attempt.sock,server,nowait" \
    -chardev "socket,id=vfs,path=$sock" -device vhost-user-fs-pci,chardev=vfs,tag=host \
    -kernel "$kernel" -initrd "$initramfs" \
    -append "console=ttyS1 quiet panic=-1 l1_job=$job" </dev/null >"$work/qemu.$attempt.log" 2>&1 &
  qemu_pid=$!
  pids+=("$qemu_pid")
  fault="" size=0 last=-1 quiet_since=$SECONDS
  while kill -0 "$qemu_pid" 2>/dev/null; do
    fault=$(grep -m1 -aE "$fault_line" "$klog")
    size=$(cat "$console" "$klog" 2>/dev/null | wc -c)
    if [ "$size" != "$last" ]; then last=$size; quiet_since=$SECONDS
    elif [ $((SECONDS - quiet_since)) -ge "${MICROVM_L1_STALL:-120}" ]; then
      fault="L1 stalled: no console output for ${MICROVM_L1_STALL:-120} s"
    fi
    if [ -n "$fault" ]; then
      case "$fault" in "L1 stalled"*) l1_state "$work/mon.$attempt.sock" > "$work/stall.$attempt" 2>&1 ;; esac
      sleep 3
      kill "$qemu_pid" 2>/dev/null
      break
    fi
    sleep 1
  done
  wait "$qemu_pid" 2>/dev/null
  # The command's output (and L1's markers), then the verdict.
  tr -d '\r' < "$console"
  # L1's kernel log beside the test's outputs (bazel-testlogs/.../test.outputs), for a failure.
  if [ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]; then
    tr -d '\r' < "$klog" > "$TEST_UNDECLARED_OUTPUTS_DIR/l1-kernel.$attempt.log"
    [ ! -s "$work/stall.$attempt" ] || cp "$work/stall.$attempt" "$TEST_UNDECLARED_OUTPUTS_DIR/l1-stall.$attempt.log"
  fi
  status=$(tr -d '\r' < "$console" | sed -n 's/^L1-EXIT status=\([0-9]*\)$/\1/p' | tail -n 1)
  if [ -n "$status" ] && [ "$status" != 0 ] && grep -q '^L1-EMULATION-FAULT' "$console" &&
     [ "$emulation_reruns" -lt "${MICROVM_L1_FAULT_RERUNS:-1}" ]; then
    emulation_reruns=$((emulation_reruns + 1))
    echo "$me: RERUN: the command failed (status $status) after a guest's triple fault with the nested"
    echo "$me: RERUN: emulation's signature ($(tr -d '\r' < "$console" | grep -m1 '^L1-EMULATION-FAULT' | cut -d' ' -f2-));"
    echo "$me: RERUN: it runs once more in a new L1 (docs/testing.md). The first run's output is above."
    attempt=$((attempt + 1))
    continue
  fi
  if [ -n "$status" ]; then
    echo "$me: the command ended in L1 with status $status (L1 attempt $attempt)"
    exit "$status"
  fi
  if grep -q '^L1-NO-KVM' "$console" || grep -q '^L1-FAIL' "$console"; then
    echo "$me: FAIL: $(tr -d '\r' < "$console" | grep -m1 -E '^L1-(NO-KVM|FAIL)')"
    exit 1
  fi
  [ -n "$fault" ] || fault="L1 ended (QEMU: $(tail -n 2 "$work/qemu.$attempt.log" | tr '\n' ' ')) before the command did"
  echo "$me: L1 attempt $attempt failed under the nested emulation: $fault"
  { grep -a -m1 -A11 -E "$fault_line" "$klog" ||
    tail -n 12 "$klog"; } | tr -d '\r' | sed 's/^/    L1 kernel| /'
  [ "$attempt" -lt "${MICROVM_L1_ATTEMPTS:-4}" ] || { echo "$me: FAIL: L1 failed in all $attempt attempts"; exit 1; }
  attempt=$((attempt + 1))
done
