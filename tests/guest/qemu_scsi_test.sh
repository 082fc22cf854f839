#!/bin/bash
# Runs the test guest's virtio-scsi driver against QEMU's virtio-scsi-pci (the known-good reference):
# scsi-probe, scsi-rw, scsi-cd, scsi-queues, scsi-irq, scsi-errors, scsi-media (medium change driven
# through the HMP monitor when the guest prints @@EJECT cd / @@INSERT cd) and scsi-bench (numbers
# are printed, never judged). See docs/test-guest.md, "virtio-scsi".
# Skips (test_skip) when /dev/kvm or qemu-system-x86_64 is missing.
#
# Usage: qemu_scsi_test.sh [path/to/test_guest [path/to/make-pattern-image]]
#   QEMU_RUN_TIMEOUT  seconds per QEMU run (default 60; a run takes 2-5 s)
#   QEMU_SCSI_KEEP=1  keep the work directory (outside Bazel)
set -u
# fail, check_status, expect_line, expect_match, guest_status, hmp, wait_for_line, probe_drive,
# setup_work, make_pattern_images
source "$(dirname "$0")/qemu_harness.sh"
trap '' PIPE

setup_work scsi QEMU_SCSI_KEEP "$@"  # GUEST, MKIMG, RUN_TIMEOUT, WORK, SOCKDIR; skips without KVM/QEMU

# Images: every 512-byte block carries {"MVMPATRN", seed, block number} and a fill the guest can
# recompute (tools/make-pattern-image).
DISK_BLOCKS=131072  # 64 MiB
make_pattern_images

# cache=none,aio=io_uring as the benchmark setup uses; fall back when the filesystem or the
# kernel refuses (O_DIRECT on tmpfs, io_uring disabled).
DRIVE_OPTS="cache=none,aio=io_uring"
if ! probe_drive "$DRIVE_OPTS"; then
  for opts in "cache=none,aio=threads" "cache=writeback,aio=threads"; do
    if probe_drive "$opts"; then
      echo "note: $DRIVE_OPTS refused here; using $opts"
      DRIVE_OPTS="$opts"
      break
    fi
  done
fi

COMMON=(-M pc -enable-kvm -cpu host,-arch-capabilities -m 256M -nodefaults -display none
        -serial stdio -device isa-debug-exit,iobase=0xf4,iosize=1 -no-reboot -kernel "$GUEST")

FAILURES=0
OUT=""

# The controller (two request queues), a scsi-hd (LUN 0, DPO/FUA advertised) and a scsi-cd
# (LUN 1); a fresh copy of the pristine disk for every run. $SCSI_DEV_OPTS adds virtio-scsi-pci
# properties.
devices() {
  cp "$WORK/disk-pristine.img" "$WORK/disk.img"
  DEVICES=(-device "virtio-scsi-pci,id=scsi0,num_queues=2${SCSI_DEV_OPTS:-}"
           -drive "file=$WORK/disk.img,if=none,id=d0,format=raw,$DRIVE_OPTS"
           -device scsi-hd,drive=d0,bus=scsi0.0,scsi-id=0,lun=0,dpofua=on
           -drive "file=$WORK/cd.iso,if=none,id=cd0,format=raw,media=cdrom,readonly=on"
           -device scsi-cd,drive=cd0,bus=scsi0.0,scsi-id=0,lun=1)
}

# run NAME EXPECTED_STATUS "GUEST ARGS" [QEMU ARGS...]; the serial output ends up in $OUT.
run() {
  local name="$1" expected="$2" args="$3"
  shift 3
  OUT="$WORK/$name.out"
  devices
  local start=$SECONDS
  timeout "$RUN_TIMEOUT" "$QEMU_BIN" "${COMMON[@]}" "${DEVICES[@]}" "$@" -append "$args" \
    </dev/null >"$OUT" 2>&1
  local status=$?
  echo "ran $name ($args): status $status in $((SECONDS - start)) s"
  check_status "$name" "$status" "$expected"
}

PASS_STATUS="$(guest_status 0)"

if run probe "$PASS_STATUS" "test=scsi-probe disk_blocks=$DISK_BLOCKS dpofua=1 wce=1"; then
  expect_line probe "TEST scsi-probe: PASS"
  expect_line probe 'scsi-probe: disk 0:0 INQUIRY: type 0x00, not removable, vendor "QEMU" product "QEMU HARDDISK" revision "2.5+", version 0x05, response format 2'
  expect_match probe '^scsi-probe: disk 0:0 "QEMU" "QEMU HARDDISK": 131072 x 512-byte blocks, WCE=1, DPOFUA=1, WP=0, VPD pages: 00 83 b0 b1 b2$'
  expect_line probe "scsi-probe: disk TEST UNIT READY -> CHECK CONDITION 06/29/00 (UNIT ATTENTION: POWER ON, RESET, OR BUS DEVICE RESET OCCURRED)"
  expect_line probe "scsi-probe: disk Mode Sense: 63 00 10 08"
  expect_line probe 'scsi-probe: cd 0:1 "QEMU" "QEMU CD-ROM": 4096 x 2048-byte blocks'
  expect_line probe "scsi-cd: current profile 0x0008 (CD-ROM)"
fi

if run rw "$PASS_STATUS" "test=scsi-rw seed=$DISK_SEED full=1"; then
  expect_line rw "TEST scsi-rw: PASS"
  expect_match rw '^scsi-rw: WRITE\(16\) FUA LBA 1000 x256 in 32 segment\(s\), READ\(10\) FUA: verified$'
  expect_match rw '^scsi-rw: full check: 131072 blocks verified'
fi

# The same without indirect descriptors and event indices: once declined by the guest, once not
# offered by the device.
if run rw-plain-ring "$PASS_STATUS" "test=scsi-rw seed=$DISK_SEED indirect=0 event_idx=0"; then
  expect_line rw-plain-ring "TEST scsi-rw: PASS"
fi
SCSI_DEV_OPTS=",indirect_desc=off,event_idx=off" run rw-device-plain "$PASS_STATUS" \
  "test=scsi-rw seed=$DISK_SEED verbose=1" && expect_line rw-device-plain "TEST scsi-rw: PASS"

if run cd "$PASS_STATUS" "test=scsi-cd seed=$CD_SEED"; then
  expect_line cd "TEST scsi-cd: PASS"
  expect_match cd "^scsi-cd: read and verified 4096 sectors \(8192 KiB\) from LBA 0 in [0-9]+ ms \([0-9]+ KiB/s\), seed $CD_SEED$"
  expect_line cd "scsi-cd: TOC: tracks 1-1, track 1 (ADR/control 0x14) at LBA 0, lead-out at LBA 4096 = MSF 00:56:46"
fi

if run queues-smp "$PASS_STATUS" "test=scsi-queues cpus=2" -smp 2; then
  expect_line queues-smp "TEST scsi-queues: PASS"
  expect_match queues-smp "one CPU per queue, polled$"
fi
if run queues-smp-irq "$PASS_STATUS" "test=scsi-queues cpus=2 irq=1" -smp 2; then
  expect_line queues-smp-irq "TEST scsi-queues: PASS"
fi
if run queues-one-cpu "$PASS_STATUS" "test=scsi-queues count=500"; then
  expect_line queues-one-cpu "TEST scsi-queues: PASS"
  expect_match queues-one-cpu "one CPU alternating, polled$"
fi

if run irq "$PASS_STATUS" "test=scsi-irq"; then
  expect_line irq "TEST scsi-irq: PASS"
  expect_match irq '^scsi-irq: masked vector: 0 interrupts while masked, PBA pending bit set, [1-9][0-9]* delivered after unmask$'
fi

if run errors "$PASS_STATUS" "test=scsi-errors"; then
  expect_line errors "TEST scsi-errors: PASS"
  expect_line errors "scsi-errors: disk READ(10) LBA 131072 (= capacity) -> CHECK CONDITION 05/21/00 (ILLEGAL REQUEST: LOGICAL BLOCK ADDRESS OUT OF RANGE)"
  expect_line errors "scsi-errors: disk opcode 0xff -> CHECK CONDITION 05/20/00 (ILLEGAL REQUEST: INVALID COMMAND OPERATION CODE)"
  expect_line errors "scsi-errors: cd WRITE(10) LBA 0 -> CHECK CONDITION 07/27/00 (DATA PROTECT: WRITE PROTECTED)"
  expect_line errors "scsi-errors: TEST UNIT READY 1:0 (no such target) -> virtio response BAD_TARGET (3)"
fi

OUT="$WORK/media.out"
MON="$SOCKDIR/mon.sock"
devices
start=$SECONDS
timeout "$RUN_TIMEOUT" "$QEMU_BIN" "${COMMON[@]}" "${DEVICES[@]}" \
  -monitor "unix:$MON,server,nowait" -append "test=scsi-media seed=$CD_SEED newseed=$NEW_SEED" \
  </dev/null >"$OUT" 2>&1 &
qemu_pid=$!
if wait_for_line "@@EJECT cd" "$qemu_pid"; then
  reply="$(hmp "$MON" "eject -f cd0")"
  echo "monitor: eject -f cd0${reply:+ -> $reply}"
  if wait_for_line "@@INSERT cd" "$qemu_pid"; then
    reply="$(hmp "$MON" "change cd0 $WORK/new.iso raw read-only")"
    echo "monitor: change cd0 new.iso raw read-only${reply:+ -> $reply}"
  fi
fi
wait "$qemu_pid"
status=$?
echo "ran media: status $status in $((SECONDS - start)) s"
if check_status media "$status" "$PASS_STATUS"; then
  expect_line media "TEST scsi-media: PASS"
  expect_match media '^scsi-media: \+[0-9]+ ms TEST UNIT READY -> CHECK CONDITION 02/3A/'
  expect_match media '^scsi-media: \+[0-9]+ ms TEST UNIT READY -> CHECK CONDITION 06/28/00 '
  expect_line media "scsi-media: new medium: 1536 sectors (was 4096)"
  expect_match media "^scsi-media: read and verified 1536 sectors .*, seed $NEW_SEED$"
fi

# scsi-bench: a report, not a pass/fail timing.
for qd in 1 16; do
  if run "bench-qd$qd" "$PASS_STATUS" "test=scsi-bench qd=$qd count=$((qd == 1 ? 1000 : 4000))"; then
    expect_line "bench-qd$qd" "TEST scsi-bench: PASS"
    expect_match "bench-qd$qd" "^scsi-bench: qd=$qd queues=1 mode=fua bs=4096 ops=[0-9]+ iops=[0-9]+ "
    grep -E '^scsi-bench: qd=' "$OUT" | sed 's/^/    /'
  fi
done

if [[ $FAILURES -ne 0 ]]; then
  echo "$FAILURES check(s) failed"
  exit 1
fi
echo "all virtio-scsi QEMU reference checks passed"
