#!/usr/bin/env bash
# Real Linux drivers against our virtio-scsi: Debian's cloud kernel under QEMU (TCG) with
# -device vhost-user-scsi-pci attached to //vmm:vhost-user-scsi, which serves the rings with the
# VMM's own virtio-scsi, SCSI target and block layer. The same scenarios as qemu_builtin_test.sh
# (the reference run on QEMU's own devices), plus what only our device promises: sd reports
# "supports DPO and FUA" with the write cache as configured, O_SYNC writes arrive as native FUA
# in the block layer (checked through the gRPC API's statistics), and the medium change is made
# through our gRPC API (vmmctl), not QEMU's monitor. Every boot is a new vhost-user connection to
# the same back-end process, so reconnecting is exercised too.
# Skips (test_skip, which CI counts as a failure) without qemu-system-x86_64, the cloud kernel, busybox-static, fio
# or genisoimage.
#
# Usage: vhost_user_scsi_test.sh MAKE_INITRAMFS INIT_SH VHOST_USER_SCSI VMMCTL
#   LINUX_INITRAMFS_CACHE=DIR  reuse initramfs builds (outside Bazel)
#   LINUX_KEEP=1               keep the work directory (outside Bazel)
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/linux_harness.sh"

MAKE_INITRAMFS=$1
INIT_SH=$2
BACKEND=$3
VMMCTL=$4

linux_require  # test_skip when something is missing

linux_work_dir linux-vhost-user
# Unix socket paths are short (108 bytes); TEST_TMPDIR can be longer.
SOCKETS=$(mktemp -d /tmp/vhost-user-scsi-test.XXXXXX)
BACKEND_PID=""
cleanup() {
  [ -n "$BACKEND_PID" ] && kill "$BACKEND_PID" 2>/dev/null
  rm -rf "$SOCKETS"
}
trap 'cleanup; linux_cleanup' EXIT

echo "QEMU: $("$LINUX_QEMU" --version | head -n 1); kernel: $LINUX_KERNEL"
linux_setup "$WORK" "$MAKE_INITRAMFS" "$INIT_SH" "${LINUX_INITRAMFS_CACHE:-}"

DISK=$WORK/disk.img
DISK_SECTORS=131072
linux_make_disk "$DISK" 64M
linux_make_iso "$WORK/a.iso" DISC_A file-a.bin 4194304 101
ISO_A_MD5=$LINUX_ISO_MD5
linux_make_iso "$WORK/b.iso" DISC_B file-b.bin 1048576 202
ISO_B_MD5=$LINUX_ISO_MD5

VHOST_SOCKET=$SOCKETS/vhost.sock
API_SOCKET=$SOCKETS/api.sock
BACKEND_LOG=$WORK/backend.log
# Two request queues on two iothreads, the disk with cache=none (WCE on: the guest must send FUA
# and flushes), the CD-ROM holding a.iso.
# Jailed (the default as root, docs/security.md): the API's media come from --media-dir, which the
# jail's user (65534) must be able to read.
chmod 755 "$WORK"
# Under AddressSanitizer (tools/test's ASan pass) LeakSanitizer lists the threads at exit through
# /proc, which the jail does not have: no leak check for this back end there (the unjailed one
# below keeps it). A product build ignores the variable.
LSAN_OPTIONS=detect_leaks=0 "$BACKEND" --socket="$VHOST_SOCKET" --api-socket="$API_SOCKET" --scsi-queues=2 --iothreads=2 \
  --disk="$DISK,cache=none" --cdrom="$WORK/a.iso" --media-dir="$WORK" >"$BACKEND_LOG" 2>&1 &
BACKEND_PID=$!
for _ in $(seq 100); do
  [ -S "$VHOST_SOCKET" ] && [ -S "$API_SOCKET" ] && break
  sleep 0.1
done
if [ ! -S "$VHOST_SOCKET" ]; then
  echo "FAIL: the back end did not create $VHOST_SOCKET"
  sed 's/^/    backend| /' "$BACKEND_LOG"
  exit 1
fi
ctl() { "$VMMCTL" --api "unix:$API_SOCKET" "$@"; }
stat_of() {  # drive field: one number from vmmctl --json vm stats
  ctl --json vm stats "$1" | tr -d ' ",' | sed -n "s/^$2://p" | head -n 1
}

DEVICES=(-chardev "socket,id=vus,path=$VHOST_SOCKET"
         -device vhost-user-scsi-pci,chardev=vus,num_queues=2)
export LINUX_MEMFD=1  # vhost-user needs guest RAM the back end can map
boots=0
boot() { boots=$((boots + 1)); linux_boot "$@"; }

# probe: what sd and sr made of our device.
boot probe "scenario=probe" "${DEVICES[@]}"
if linux_check_pass probe probe; then
  linux_expect probe disk_sectors "$DISK_SECTORS"
  linux_expect probe vendor MICROVM
  linux_expect probe dpofua yes
  linux_expect probe wce enabled
  linux_expect probe fua 1
  linux_expect probe cache_type "write back"
  linux_expect probe nr_queues 2
  linux_expect probe sr sr0
  grep -q "supports DPO and FUA" "$LINUX_LOG" || linux_fail probe "sd did not report 'supports DPO and FUA'"
  linux_report dmesg dpofua wce cache_type nr_queues sr sr_dmesg
fi

# fio: 4 KiB O_SYNC+O_DIRECT random writes, verified afterwards, at depth 1 and 16. Linux sends
# each as a write with FUA: the block layer must count them as FUA writes, native at depth 1
# (fua=auto, the default, sends a write alone natively; at depth 16 overlapping ones share
# flushes, counted as emulated: docs/block.md).
for qd in 1 16; do
  native_before=$(stat_of disk0 fuaNative)
  emulated_before=$(stat_of disk0 fuaEmulated)
  boot "fio-qd$qd" "scenario=fio qd=$qd size=8M" "${DEVICES[@]}"
  if linux_check_pass "fio-qd$qd" fio; then
    linux_expect "fio-qd$qd" fio_verify ok
    linux_report fio_iops fio_verify_kb
  fi
  native_after=$(stat_of disk0 fuaNative)
  emulated_after=$(stat_of disk0 fuaEmulated)
  native=$((${native_after:-0} - ${native_before:-0}))
  emulated=$((${emulated_after:-0} - ${emulated_before:-0}))
  echo "block layer, depth $qd: native FUA writes $native, with a shared flush $emulated"
  # 8 MiB of 4 KiB writes is 2048 FUA writes.
  [ "$((native + emulated))" -ge 2048 ] ||
    linux_fail "fio-qd$qd" "the block layer saw $native native and $emulated emulated FUA writes, expected at least 2048 in all"
  if [ "$qd" = 1 ]; then
    [ "$emulated" = 0 ] || linux_fail fio-qd1 "FUA was emulated $emulated times at depth 1 (fua=auto sends a write alone natively)"
  fi
done

# Memory hot-plug while fio writes: QEMU adds a DIMM (a second memfd region) and sends a new
# SET_MEM_TABLE with the rings running; the back end stops the device (in-flight writes complete),
# maps the new table, restarts at the same ring positions, and fio's verification still passes.
hotplug_markers() {
  echo "  monitor: object_add memory-backend-memfd,id=hp1,size=128M,share=on $(linux_monitor 'object_add memory-backend-memfd,id=hp1,size=128M,share=on')"
  echo "  monitor: device_add pc-dimm,id=dimm1,memdev=hp1 $(linux_monitor 'device_add pc-dimm,id=dimm1,memdev=hp1')"
}
tables_before=$(grep -c "replaced while running" "$BACKEND_LOG")
LINUX_QEMU_EXTRA=(-m 512M,slots=2,maxmem=1G)
LINUX_ON_MARKER=hotplug_markers boot hotplug "scenario=fio qd=16 size=32M marker=HOTPLUG" "${DEVICES[@]}"
LINUX_QEMU_EXTRA=()
if linux_check_pass hotplug fio; then
  linux_expect hotplug fio_verify ok
  [ "$(grep -c "replaced while running" "$BACKEND_LOG")" -gt "$tables_before" ] ||
    linux_fail hotplug "the back end never saw the memory table replaced while running"
  grep "memory table" "$BACKEND_LOG" | tail -n 1 | sed 's/^/    backend: /'
fi

# The VM paused and resumed twice (HMP stop/cont) while fio writes: QEMU stops every ring with
# GET_VRING_BASE and restarts them at the indices the back end answered (not 0, as after a reset).
pause_markers() {
  linux_monitor stop >/dev/null; sleep 1
  linux_monitor cont >/dev/null; sleep 0.5
  linux_monitor stop >/dev/null; sleep 0.5
  linux_monitor cont >/dev/null
  echo "  monitor: stop, cont, stop, cont"
}
stops_before=$(grep -c "device stopped by the front end" "$BACKEND_LOG")
LINUX_ON_MARKER=pause_markers boot pause "scenario=fio qd=16 size=32M marker=PAUSE" "${DEVICES[@]}"
if linux_check_pass pause fio; then
  linux_expect pause fio_verify ok
  # A request ring (2 or 3) stopped at a non-zero index: the restart had to resume there.
  grep "device stopped by the front end" "$BACKEND_LOG" | tail -n +$((stops_before + 1)) |
    grep -Eq "ring [23] at [1-9]" ||
    linux_fail pause "the back end was never stopped with a request ring at a non-zero index"
  grep "device stopped by the front end" "$BACKEND_LOG" | tail -n +$((stops_before + 1)) |
    sed 's/^/    backend: /'
fi

# ext4: mkfs, files of known content, sync, remount, compare, e2fsck.
boot fs "scenario=fs fs_mb=4 seed=7" "${DEVICES[@]}"
if linux_check_pass fs fs; then
  linux_expect fs fs ok
  linux_expect fs fsck clean
fi

# The driver resets the device and starts it again (rmmod/insmod virtio_scsi): data written
# before reads back after, and new writes work (every ring is stopped with GET_VRING_BASE and restarted from 0).
boot reset "scenario=reset" "${DEVICES[@]}"
linux_check_pass reset reset && linux_expect reset reset ok

# ISO 9660 from our CD-ROM.
boot iso "scenario=iso iso_file=file-a.bin iso_md5=$ISO_A_MD5" "${DEVICES[@]}"
linux_check_iso iso "$WORK/a.iso"

# Medium change through our gRPC API: the guest checks a.iso, asks for an eject (vmmctl media
# eject), sees the medium go, asks for b.iso (vmmctl media insert), sees it come and checks it.
api_markers() {
  case "$1" in
    EJECT-NOW) echo "  vmmctl: $(ctl media eject cd0 2>&1)" ;;
    INSERT-NOW) echo "  vmmctl: $(ctl media insert cd0 "$WORK/b.iso" 2>&1)" ;;
    *) echo "  (no answer to marker @@$1)" ;;
  esac
}
LINUX_ON_MARKER=api_markers boot media \
  "scenario=media iso_file=file-a.bin iso_md5=$ISO_A_MD5 iso2_file=file-b.bin iso2_md5=$ISO_B_MD5 media_poll_ms=500" \
  "${DEVICES[@]}"
if linux_check_pass media media; then
  linux_expect media media ok
  linux_expect media sr_size_sectors_new "$(( $(stat -c %s "$WORK/b.iso") / 512 ))"
  linux_report eject_seen_seconds eject_error insert_seen_seconds media_uevent
fi
ctl media status cd0 | grep -q "b.iso" || linux_fail media "the API does not show b.iso in cd0: $(ctl media status cd0 2>&1)"

# The write cache as configured: a second back end with a disk in cache=directsync (every write
# reaches stable storage on its own) reports WCE off; sd then sends no flushes and no FUA. Its own
# image: the first back end still has $DISK open for writing, and a writable image has one user.
WT_SOCKET=$SOCKETS/vhost-wt.sock
WT_DISK=$WORK/disk-wt.img
linux_make_disk "$WT_DISK" 64M
"$BACKEND" --socket="$WT_SOCKET" --disk="$WT_DISK,cache=directsync" --jail=off >"$WORK/backend-wt.log" 2>&1 &
WT_PID=$!
for _ in $(seq 100); do [ -S "$WT_SOCKET" ] && break; sleep 0.1; done
[ -S "$WT_SOCKET" ] || sed 's/^/    backend-wt| /' "$WORK/backend-wt.log"
linux_boot probe-directsync "scenario=probe wait=sd" -chardev "socket,id=vus,path=$WT_SOCKET" \
  -device vhost-user-scsi-pci,chardev=vus,num_queues=1
if linux_check_pass probe-directsync probe; then
  linux_expect probe-directsync wce disabled
  linux_expect probe-directsync dpofua yes
  linux_expect probe-directsync cache_type "write through"
  linux_expect probe-directsync fua 0
  linux_report dmesg
fi
kill -TERM "$WT_PID" 2>/dev/null
wait "$WT_PID" 2>/dev/null
# Outside the jail (--jail=off) the back end removes its socket on the way out.
[ ! -e "$WT_SOCKET" ] || linux_fail backend-wt "the unjailed back end left its socket behind"

# The back end served every boot as a new connection and is still running; SIGTERM ends it
# cleanly. Jailed, it cannot reach its sockets' paths: they are left for the caller, stale.
connections=$(grep -c "front end connected" "$BACKEND_LOG")
[ "$connections" -eq "$boots" ] ||
  linux_fail backend "the back end saw $connections connections for $boots boots"
if kill -0 "$BACKEND_PID" 2>/dev/null; then
  kill -TERM "$BACKEND_PID"
  wait "$BACKEND_PID"
  status=$?
  BACKEND_PID=""
  [ "$status" -eq 0 ] || linux_fail backend "exit status $status after SIGTERM"
  rm -f "$VHOST_SOCKET" "$API_SOCKET"
else
  linux_fail backend "the back end died"
fi
if [ "$LINUX_FAILURES" -ne 0 ]; then
  echo "back end log:"
  sed 's/^/    backend| /' "$BACKEND_LOG"
  echo "$LINUX_FAILURES check(s) failed"
  exit 1
fi
echo "all Linux scenarios passed against vhost-user-scsi ($boots boots, one back-end process)"
