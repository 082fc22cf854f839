#!/usr/bin/env bash
# Helpers for the nested-KVM tier (docs/nested.md): QEMU TCG (L0, this host) boots Debian's cloud
# kernel as L1 with kvm-amd (a real /dev/kvm: TCG emulates SVM with nested paging); in L1 our
# `microvm` boots the same kernel as L2 with the tests/linux initramfs (tests/linux/init.sh). One L1
# boot runs a job of several L2 runs (tests/nested/l1_lib.sh); the host splits L1's console log into
# one log per L2 run, in the format of tests/linux/linux_harness.sh, whose checks then apply.
# Source it after tests/linux/linux_harness.sh; it defines functions and NESTED_* variables only.
#
#   nested_require                 linux_require, plus kvm-amd among the cloud kernel's modules
#   nested_setup WORK MAKE_LINUX_INITRAMFS INIT_SH MAKE_NESTED_INITRAMFS L1_INIT L1_LIB MICROVM VMMCTL [CACHE]
#                                  builds the L2 initramfs (init.sh, plus ata_piix for IDE) and the L1
#                                  initramfs (l1_init.sh, kvm modules, microvm + vmmctl with libraries)
#   nested_l1_drive IMAGE          one more L1 virtio disk for the current boot, a snapshot of IMAGE
#                                  (writes dropped); its L1 device (/dev/vdb, ...) in NESTED_L1_DEV
#   nested_qemu_bundle DIR         QEMU (binary, libraries, firmware) for L1 in DIR, to link into a
#                                  work disk as /l1disk/qemu; its command there in NESTED_QEMU_CMD
#   nested_job BOOT                starts L1 boot BOOT: its work-disk directory NESTED_DISK (the L1
#                                  job sees it as /l1disk) and job script NESTED_JOB (append to it:
#                                  l2_run lines and L1-side marker handlers, see l1_lib.sh)
#   nested_boot BOOT               builds the ext4 work disk, boots L1 (the job's console on its first
#                                  serial port, WORK/BOOT/l1.log, NESTED_LIVE=1 streams it; L1's
#                                  kernel messages on the second, WORK/BOOT/l1-kernel.log, so they
#                                  never split a line of the job's), splits the per-run logs into
#                                  NESTED_RUNS; fails the whole test when L1 has no /dev/kvm. Wall seconds in NESTED_SECONDS
#   nested_keep_attempt BOOT N     keeps attempt N's L1 logs (WORK/BOOT-attempt-N, Bazel's outputs)
#   nested_select NAME             LINUX_LOG/LINUX_STATUS/LINUX_WORK of L2 run NAME (for linux_* checks)
#   nested_check NAME [STATUS]     the run happened, the VMM exited with STATUS (default 0), no
#                                  triple fault / KVM internal error / fatal VMM error / watchdog kill,
#                                  no suspicious kernel line (RESULT dmesg_bad) unless it matches
#                                  NESTED_DMESG_ALLOW; each problem is one linux_fail. Returns 1
#                                  when the run itself went wrong (not for kernel lines)
#   nested_check_pass NAME SCENARIO   nested_check NAME 0 and "SCENARIO x PASS"
#   nested_stat NAME TAG DRIVE FIELD  a number from the run's L2-STATS lines (vmmctl --json names:
#                                  writeRequests, flushRequests, fuaNative, fuaEmulated, ...)
#   nested_threads NAME TAG        the run's L2-THREADS line (COMM=TICKS ...)
#
# Settings: NESTED_L1_MEM=2G NESTED_L1_SMP=2 NESTED_TIMEOUT=1800 (seconds per L1 boot)
#   NESTED_STALL=240        seconds without any L1 console output (L1 prints a heartbeat every
#                           15 s) after which L1 counts as failed, like a kernel fault
#   NESTED_FAULT_AFTER=RUN  the harness's own test: L1 counts as failed under the emulation once
#                           run RUN ended (nested_test.sh clears it after the first attempt)
#   NESTED_LIVE=1           copy L1's console to stdout while it runs
#   NESTED_DMESG_ALLOW=RE   kernel lines (RESULT dmesg_bad) matching RE are reported, not failed
#   NESTED_L1_APPEND=""     extra L1 kernel command-line words (l1_verbose=1)
#   NESTED_JOB_SETTINGS=""  shell assignments at the top of every job (L2_TRACE_BOOT=1)

NESTED_SECONDS=""
NESTED_BOOTS=0
# L1 kernel lines that mean L1 itself broke (nested_boot).
NESTED_L1_FAULT_LINE='^\[ *[0-9.]+\] (BUG:|watchdog: BUG:|Oops|Kernel panic|general protection fault|kernel BUG)'

nested_require() {
  linux_require
  grep -q '/kvm-amd\.ko' "/lib/modules/$LINUX_KVER/modules.dep" ||
    test_skip "the cloud kernel $LINUX_KVER has no kvm-amd module"
}

nested_setup() {  # work make-linux-initramfs init.sh make-nested-initramfs l1_init.sh l1_lib.sh microvm vmmctl [cache]
  NESTED_WORK=$1
  NESTED_L1_LIB=$6
  NESTED_RUNS=$NESTED_WORK/runs
  mkdir -p "$NESTED_RUNS"
  local start=$SECONDS cache=${9:-}
  NESTED_L2_INITRAMFS=$NESTED_WORK/l2-initramfs.gz
  "$2" --kernel-version "$LINUX_KVER" --init "$3" --module ata_piix ${cache:+--cache "$cache"} \
    "$NESTED_L2_INITRAMFS" || { echo "FAIL: $2 could not build the L2 initramfs"; exit 1; }
  NESTED_L1_INITRAMFS=$NESTED_WORK/l1-initramfs.gz
  "$4" --kernel-version "$LINUX_KVER" --init "$5" --microvm "$7" --vmmctl "$8" ${cache:+--cache "$cache"} \
    "$NESTED_L1_INITRAMFS" || { echo "FAIL: $4 could not build the L1 initramfs"; exit 1; }
  echo "initramfs: L2 $(stat -c %s "$NESTED_L2_INITRAMFS") bytes, L1 $(stat -c %s "$NESTED_L1_INITRAMFS") bytes (kernel $LINUX_KVER), built in $((SECONDS - start)) s"
  NESTED_MKE2FS=/sbin/mke2fs
  [ -x "$NESTED_MKE2FS" ] || NESTED_MKE2FS=$(command -v mke2fs)
}

nested_qemu_bundle() {  # dir [root [name]]: QEMU for L1 in DIR (the binary, the libraries ldd lists
  # and the firmware -M pc loads, run through the bundled dynamic loader: L1's initramfs has no
  # /lib). From the host, or from the Debian root ROOT (a newer QEMU: tools/make-qemu-root). Link
  # DIR into a boot's work disk as /l1disk/NAME (default qemu); NESTED_QEMU_CMD is the command there.
  local bundle=$1 root=${2:-} name=${3:-qemu} loader="" lib fw qemu
  qemu=${root:+$root/usr/bin/qemu-system-x86_64}
  qemu=${qemu:-$LINUX_QEMU}
  mkdir -p "$bundle/lib" "$bundle/share"
  cp -L "$qemu" "$bundle/qemu-system-x86_64" || return 1
  while read -r lib; do
    cp -L "$root$lib" "$bundle/lib/" || return 1
    case "$lib" in */ld-linux*) loader=$(basename "$lib") ;; esac
  done < <(if [ -n "$root" ]; then chroot "$root" ldd /usr/bin/qemu-system-x86_64; else ldd "$qemu"; fi |
           grep -oE '/[^ ]+' | sort -u)
  [ -n "$loader" ] || { echo "nested_qemu_bundle: no dynamic loader among QEMU's libraries"; return 1; }
  for fw in bios-256k.bin linuxboot_dma.bin kvmvapic.bin; do
    cp -L "$root/usr/share/qemu/$fw" "$bundle/share/" 2>/dev/null ||
      cp -L "$root/usr/share/seabios/$fw" "$bundle/share/" || { echo "nested_qemu_bundle: no QEMU firmware $fw"; return 1; }
  done
  NESTED_QEMU_CMD="/l1disk/$name/lib/$loader --library-path /l1disk/$name/lib /l1disk/$name/qemu-system-x86_64 -L /l1disk/$name/share"
}

nested_l1_drive() {  # image: one more L1 disk, a copy-on-write snapshot of IMAGE (what L1 writes
  # is dropped when L1 ends); its L1 device (/dev/vdb, /dev/vdc, ... in call order) in NESTED_L1_DEV
  NESTED_L1_DRIVES+=(-drive "file=$1,if=virtio,format=raw,snapshot=on")
  NESTED_L1_DEV=/dev/vd$(printf '%s' abcdefghijklmnop | cut -c $(( ${#NESTED_L1_DRIVES[@]} / 2 + 1 )))
}

nested_job() {  # boot
  NESTED_L1_DRIVES=()
  NESTED_DISK=$NESTED_WORK/$1/disk
  NESTED_JOB=$NESTED_DISK/job.sh
  rm -rf "${NESTED_WORK:?}/$1"
  mkdir -p "$NESTED_DISK"
  cp "$NESTED_L1_LIB" "$NESTED_DISK/l1_lib.sh"
  # Hard links where possible: the kernel and L2 initramfs are the same for every boot.
  ln -f "$LINUX_KERNEL" "$NESTED_DISK/vmlinuz" 2>/dev/null || cp "$LINUX_KERNEL" "$NESTED_DISK/vmlinuz"
  ln -f "$NESTED_L2_INITRAMFS" "$NESTED_DISK/initramfs.gz" 2>/dev/null ||
    cp "$NESTED_L2_INITRAMFS" "$NESTED_DISK/initramfs.gz"
  cat > "$NESTED_JOB" <<'EOF'
# The job of one L1 boot (written by tests/nested/nested_harness.sh; runs in L1 under busybox sh).
L2_KERNEL=/l1disk/vmlinuz
L2_INITRD=/l1disk/initramfs.gz
EOF
  # L1 keeps its KVM's last events in a ring through every run (l1_lib.sh, L2_TRACE_FAULTS), so an
  # L2 triple fault or hang in CI comes with what the vCPU did before it (NESTED_TRACE_FAULTS=0: off).
  echo "L2_TRACE_FAULTS=${NESTED_TRACE_FAULTS:-1}" >> "$NESTED_JOB"
  # Diagnostics by hand (tools/nested): settings for every run of the job, e.g. L2_TRACE_BOOT=1.
  [ -z "${NESTED_JOB_SETTINGS:-}" ] || echo "$NESTED_JOB_SETTINGS" >> "$NESTED_JOB"
}

nested_split() {  # l1-log: per-run logs in NESTED_RUNS
  local l1_log=$1 log name start
  # A run done again (l1_lib.sh l2_run, L2-RERUN: the emulation's fault, a hung reference) begins
  # more than once: its files hold the last run, from its last L2-BEGIN on.
  for name in $(sed -n 's/^L2-BEGIN \([^ ]*\)$/\1/p' "$l1_log" | awk '!seen[$0]++'); do
    rm -f "$NESTED_RUNS/$name".*
    start=$(grep -n "^L2-BEGIN $name\$" "$l1_log" | tail -n 1 | cut -d: -f1)
    log=$NESTED_RUNS/$name.l1-slice
    tail -n +"$start" "$l1_log" > "$log"
    grep -F "L2[$name]| " "$log" | sed "s/^L2\[$name\]| //" > "$NESTED_RUNS/$name.log"
    {
      grep -F "L2ERR[$name]| " "$log" | sed "s/^L2ERR\[$name\]| //"
      grep "^L2-HUNG $name " "$log"
    } > "$NESTED_RUNS/$name.qemu.log"
    grep -E "^L2-(STATS|THREADS|ACTION|CMD|HUNG|END|BENCH|BOOTWORK|FRESH|TRACE|LAUNCH|MARK|HOSTCD|FAULT|FAULT-AGAIN|FAULT-RIP|HELD|KVM) $name " "$log" > "$NESTED_RUNS/$name.events"
    grep -F "L2-FTRACE $name| " "$log" | sed "s/^L2-FTRACE $name| //" > "$NESTED_RUNS/$name.ftrace"
    [ -s "$NESTED_RUNS/$name.ftrace" ] || rm -f "$NESTED_RUNS/$name.ftrace"
    sed -n "s/^L2-END $name status=\([^ ]*\) .*/\1/p" "$log" | tail -n 1 > "$NESTED_RUNS/$name.status"
    rm -f "$log"
  done
}

nested_boot() {  # boot
  local boot=$1 dir=$NESTED_WORK/$1 bytes img log klog start status tail_pid=""
  NESTED_BOOTS=$((NESTED_BOOTS + 1))
  echo 'echo "L1-JOB-END"' >> "$NESTED_JOB"
  img=$dir/work.img
  log=$dir/l1.log
  # L1's kernel writes to ttyS1 and the job to ttyS0: a kernel line printed while the job writes
  # one of its own cannot land in the middle of it (seen once: a run whose "SCENARIO ... PASS" line
  # went missing while every other sign said it passed).
  klog=$dir/l1-kernel.log
  # Room for what the L2 runs write into their (sparse) images, and for the ext4 journal.
  bytes=$(du -s --apparent-size -B1 "$NESTED_DISK" | cut -f1)
  rm -f "$img" "$log" "$klog"
  "$NESTED_MKE2FS" -q -t ext4 -E root_owner=0:0 -d "$NESTED_DISK" "$img" \
    "$(( (bytes / 1048576) + 384 ))M" >/dev/null || { echo "FAIL: mke2fs -d $NESTED_DISK"; exit 1; }
  : > "$log"
  : > "$klog"
  if [ "${NESTED_LIVE:-0}" = 1 ]; then
    tail -n +1 -f "$log" | tr -d '\r' &
    tail_pid=$!
  fi
  # MICROVM_L0_QEMU: the QEMU that emulates L1 (tools/test: Debian 13's QEMU 10; docs/nested.md).
  local cmd=("${MICROVM_L0_QEMU:-$LINUX_QEMU}" -accel tcg,thread=multi -cpu max -M q35 -m "${NESTED_L1_MEM:-2G}"
             -smp "${NESTED_L1_SMP:-2}" -nodefaults -no-reboot -display none -serial "file:$log" -serial "file:$klog"
             -kernel "$LINUX_KERNEL" -initrd "$NESTED_L1_INITRAMFS"
             -append "console=ttyS1 quiet panic=-1 ${NESTED_L1_APPEND:-}"
             -drive "file=$img,if=virtio,format=raw,cache=${NESTED_WORK_DISK_CACHE:-unsafe}" "${NESTED_L1_DRIVES[@]}")
  printf '%q ' "${cmd[@]}" > "$dir/l1.cmd"
  start=$(date +%s.%N)
  NESTED_L1_FAULT=""
  # TMPDIR: where QEMU keeps the snapshot=on overlays of nested_l1_drive (its default, /var/tmp,
  # is read-only in Bazel's sandbox).
  TMPDIR=$dir timeout "${NESTED_TIMEOUT:-1800}" "${cmd[@]}" </dev/null >"$dir/qemu.log" 2>&1 &
  local qemu_pid=$! fault
  # L1's own kernel lines that mean L1 itself broke: its KVM runs on
  # SVM as QEMU's TCG emulates it, and a crash or lockup there (seen: "BUG: TASK stack guard page
  # was hit" in KVM's exit path, soft lockups of the CPU running L2) ends every L2 run of the boot.
  # Stop L1 a few seconds later (its trace gets printed) instead of at the timeout.
  # A stalled L1 (seen once in CI: no message at all, the boot ran into NESTED_TIMEOUT) is caught
  # by its heartbeat going quiet.
  local size=0 last_size=-1 quiet_since=$SECONDS
  while kill -0 "$qemu_pid" 2>/dev/null; do
    fault=$(grep -m1 -aE "$NESTED_L1_FAULT_LINE" "$klog" 2>/dev/null)
    # The job's own word that L1's KVM is stuck in the emulated VMRUN (l1_lib.sh l2_wedged).
    [ -n "$fault" ] || fault=$(grep -m1 -a '^L1-WEDGED ' "$log" 2>/dev/null)
    size=$(stat -c %s "$log" 2>/dev/null || echo 0)
    if [ "$size" != "$last_size" ]; then
      last_size=$size
      quiet_since=$SECONDS
    elif [ $((SECONDS - quiet_since)) -ge "${NESTED_STALL:-240}" ]; then
      fault="L1 stalled: no console output (not even its 15 s heartbeat) for ${NESTED_STALL:-240} s"
    fi
    # The harness's own test of its retry (docs/nested.md): L1 counts as failed once this run ended.
    if [ -z "$fault" ] && [ -n "${NESTED_FAULT_AFTER:-}" ] && grep -q "^L2-END $NESTED_FAULT_AFTER " "$log"; then
      fault="NESTED_FAULT_AFTER=$NESTED_FAULT_AFTER: L1 stopped as if it had failed once that run ended"
    fi
    if [ -n "$fault" ]; then
      NESTED_L1_FAULT=$(echo "$fault" | tr -d '\r')
      sleep 5
      kill "$qemu_pid" 2>/dev/null
      break
    fi
    sleep 1
  done
  wait "$qemu_pid"
  status=$?
  NESTED_SECONDS=$(linux_elapsed "$start")
  if [ -n "$tail_pid" ]; then
    sleep 0.5
    kill "$tail_pid" 2>/dev/null
    wait "$tail_pid" 2>/dev/null
  fi
  tr -d '\r' < "$log" > "$log.tmp" && mv "$log.tmp" "$log"
  tr -d '\r' < "$klog" > "$klog.tmp" && mv "$klog.tmp" "$klog"
  echo "L1 boot $boot: QEMU status $status in $NESTED_SECONDS s ($(grep -c '^L2-BEGIN ' "$log") L2 runs; $(grep -m1 '^L1-READY' "$log"))"
  grep '^L2-END ' "$log" | sed 's/^/  /'
  if grep -q '^L1-NO-KVM' "$log"; then
    # Every machine of the project's kind has this KVM: its absence is a failure, never a skip.
    echo "FAIL: no KVM in the L1 guest: $(grep -m1 '^L1-NO-KVM' "$log" | cut -d' ' -f2-)"
    exit 1
  fi
  nested_split "$log"
  # QEMU ended by itself with status 0 (-no-reboot: L1 reset or powered off) while the job still
  # ran, and L1's kernel said nothing: most likely a triple fault of L1 under the emulated SVM (seen
  # once in CI, among an L2 run's last lines). Nothing in the job powers L1 off before L1-JOB-END.
  if [ -z "$NESTED_L1_FAULT" ] && [ "$status" = 0 ] && ! grep -qE '^(L1-JOB-END|L1-FAIL|L1-NO-KVM)' "$log"; then
    NESTED_L1_FAULT="L1 reset before its job ended, without a kernel message"
    grep -vE '^(L2\[|L1-ALIVE )' "$log" | tail -n 5 | sed 's/^/    L1 console| /'
  fi
  if [ -n "$NESTED_L1_FAULT" ]; then
    echo "L1 boot $boot: L1's kernel failed under the nested emulation, L1 stopped: $NESTED_L1_FAULT"
    # From the fault's first line on (the log also has L1's ordinary error lines); a stall or a
    # reset has none, so its last lines instead.
    { grep -a -m1 -A11 -E "$NESTED_L1_FAULT_LINE" "$klog" || tail -n 12 "$klog"; } | sed 's/^/    L1| /'
    return 1
  fi
  if ! grep -q '^L1-JOB-END' "$log"; then
    echo "FAIL: L1 boot $boot did not finish its job (QEMU status $status, 124: timed out after ${NESTED_TIMEOUT:-1800} s); L1 console:"
    grep -vE '^(L2\[|L1-ALIVE )' "$log" | tail -n 40 | sed 's/^/    L1| /'
    tail -n 20 "$klog" | sed 's/^/    L1 kernel| /'
    sed 's/^/    qemu| /' "$dir/qemu.log"
    LINUX_FAILURES=$((LINUX_FAILURES + 1))
  fi
}

nested_keep_attempt() {  # boot attempt: the attempt's L1 logs (the next attempt replaces the
  # boot's directory) into WORK/BOOT-attempt-N, and under Bazel among the test's outputs
  # (bazel-testlogs/.../test.outputs): what an L1 failure in CI left to read
  local from=$NESTED_WORK/$1 to=$NESTED_WORK/$1-attempt-$2 f
  mkdir -p "$to"
  for f in l1.log l1-kernel.log qemu.log l1.cmd; do
    [ -f "$from/$f" ] || continue
    cp "$from/$f" "$to/"
    [ -z "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ] || cp "$from/$f" "$TEST_UNDECLARED_OUTPUTS_DIR/$1-attempt-$2-$f"
  done
}

nested_select() {  # name
  LINUX_WORK=$NESTED_RUNS
  LINUX_LOG=$NESTED_RUNS/$1.log
  LINUX_STATUS=$(cat "$NESTED_RUNS/$1.status" 2>/dev/null)
  LINUX_VMM_LABEL=microvm
}

nested_check() {  # name [expected status]
  local name=$1 want=${2:-0} bad
  nested_select "$name"
  if [ ! -s "$NESTED_RUNS/$name.status" ]; then
    linux_fail "$name" "the L2 run never ended (L1 died or timed out?)"
    return 1
  fi
  if grep -qE 'triple fault|KVM internal error|microvm: fatal' "$NESTED_RUNS/$name.qemu.log"; then
    linux_fail "$name" "the VMM stopped on a fatal vCPU error: $(grep -m1 -E 'triple fault|KVM internal error|microvm: fatal' "$NESTED_RUNS/$name.qemu.log")"
    # The whole report (registers, the exit before it) and, from L1's trace, the shutdown exit
    # (its guest_rip) with the events before it: the evidence for an intermittent fault.
    grep -A8 -m1 -E 'microvm: fatal' "$NESTED_RUNS/$name.qemu.log" | sed 's/^/    /'
    if [ -s "$NESTED_RUNS/$name.ftrace" ]; then
      echo "    L1's KVM trace, last events ($NESTED_RUNS/$name.ftrace has 300):"
      tail -n 40 "$NESTED_RUNS/$name.ftrace" | sed 's/^/    L1: /'
    fi
    return 1
  fi
  if grep -q '^L2-HUNG' "$NESTED_RUNS/$name.qemu.log"; then
    linux_fail "$name" "$(grep -m1 '^L2-HUNG' "$NESTED_RUNS/$name.qemu.log" | cut -d' ' -f3-)"
    # What L1 saw before the kill: per-thread CPU ticks 1 s apart, states, vm info, statistics.
    grep -E "^L2-(THREADS|STATS) $name hung|^L2-ACTION $name (thread|vm info)" "$NESTED_RUNS/$name.events" |
      cut -d' ' -f3- | sed 's/^/    L1: /'
    return 1
  fi
  if [ "$LINUX_STATUS" != "$want" ]; then
    linux_fail "$name" "the VMM's exit status is $LINUX_STATUS, expected $want"
    return 1
  fi
  bad=$(linux_results dmesg_bad)
  [ -z "${NESTED_DMESG_ALLOW:-}" ] || bad=$(echo "$bad" | grep -vE -- "$NESTED_DMESG_ALLOW" || true)
  # Lines a check expects of this run (NESTED_RUN_DMESG_EXPECTED, set around the call) are shown
  # as expected, not failed.
  if [ -n "${NESTED_RUN_DMESG_EXPECTED:-}" ] && [ -n "$bad" ]; then
    echo "$bad" | grep -E -- "$NESTED_RUN_DMESG_EXPECTED" | sed 's/^/    expected kernel line: /'
    bad=$(echo "$bad" | grep -vE -- "$NESTED_RUN_DMESG_EXPECTED" || true)
  fi
  if [ -n "$bad" ]; then
    echo "FAIL: $name: the L2 kernel logged $(echo "$bad" | wc -l) suspicious line(s):"
    echo "$bad" | sed 's/^/    dmesg_bad: /'
    LINUX_FAILURES=$((LINUX_FAILURES + 1))
  fi
  return 0  # the guest's own results are still worth checking
}

nested_check_pass() {  # name scenario
  nested_check "$1" 0
  local st=$?
  nested_select "$1"
  if ! grep -qx "SCENARIO $2 PASS" "$LINUX_LOG"; then
    local why
    why=$(grep -m1 "^SCENARIO $2 FAIL" "$LINUX_LOG")
    # No verdict at all: the console's last line says how far the guest got.
    [ -n "$why" ] || why="no verdict; the console's last line: $(tail -n 1 "$LINUX_LOG" 2>/dev/null)"
    linux_fail "$1" "no 'SCENARIO $2 PASS': $why"
    return 1
  fi
  return $st
}

nested_stat() {  # name tag drive field
  grep "^L2-STATS $1 $2 drive=$3 " "$NESTED_RUNS/$1.events" 2>/dev/null | tail -n 1 |
    tr ' ' '\n' | sed -n "s/^$4=//p"
}

nested_threads() {  # name tag
  grep "^L2-THREADS $1 $2" "$NESTED_RUNS/$1.events" 2>/dev/null | tail -n 1 | cut -d' ' -f4-
}
