#!/usr/bin/env bash
# Real Linux drivers (virtio_scsi, sd, sr, isofs, ext4) against QEMU's own virtio-scsi-pci with a
# scsi-hd and a scsi-cd, under TCG: the reference run of every tests/linux scenario (probe, fio with
# verification, ext4, ISO 9660, CD read, medium change through the HMP monitor), so that the
# scenarios are known-good before they are pointed at another backend. Benchmark numbers (fio-bench,
# cd-read) are printed, never judged. One run uses shared guest memory (memory-backend-memfd).
# Skips (test_skip, which CI counts as a failure) without qemu-system-x86_64, the cloud kernel, busybox-static, fio
# or genisoimage.
#
# Usage: qemu_builtin_test.sh [tools/make-linux-initramfs [tests/linux/init.sh]]
#   LINUX_INITRAMFS_CACHE=DIR  reuse initramfs builds (outside Bazel)
#   LINUX_KEEP=1               keep the work directory (outside Bazel)
#   LINUX_BENCH_SECONDS=2      seconds per fio-bench run (0: skip the benchmark runs)
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/linux_harness.sh"

MAKE_INITRAMFS=${1:-$here/../../tools/make-linux-initramfs}
INIT_SH=${2:-$here/init.sh}
BENCH_SECONDS=${LINUX_BENCH_SECONDS:-2}

linux_require  # test_skip when something is missing

linux_work_dir linux-builtin
trap linux_cleanup EXIT
echo "QEMU: $("$LINUX_QEMU" --version | head -n 1); kernel: $LINUX_KERNEL"
linux_setup "$WORK" "$MAKE_INITRAMFS" "$INIT_SH" "${LINUX_INITRAMFS_CACHE:-}"

DISK=$WORK/disk.img
DISK_SIZE=64M
DISK_SECTORS=131072
linux_make_disk "$DISK" "$DISK_SIZE"
linux_make_iso "$WORK/a.iso" DISC_A file-a.bin 4194304 101
ISO_A_MD5=$LINUX_ISO_MD5
linux_make_iso "$WORK/b.iso" DISC_B file-b.bin 1048576 202
ISO_B_MD5=$LINUX_ISO_MD5
DRIVE_OPTS=$(linux_drive_opts "$DISK")
[ "$DRIVE_OPTS" = "cache=none,aio=io_uring" ] || echo "note: cache=none,aio=io_uring refused here; using $DRIVE_OPTS"

# QEMU's built-in devices: virtio-scsi-pci (one request queue per vCPU by default), a scsi-hd and
# a scsi-cd holding a.iso.
DEVICES=(-device virtio-scsi-pci,id=scsi0
         -drive "file=$DISK,if=none,id=d0,format=raw,$DRIVE_OPTS" -device scsi-hd,drive=d0
         -drive "file=$WORK/a.iso,if=none,id=cd0,media=cdrom,format=raw,readonly=on" -device scsi-cd,drive=cd0)
LINUX_CD_ID=cd0
LINUX_CD_NEXT=$WORK/b.iso

# probe: what the sd and sr drivers made of the devices. QEMU's scsi-hd has dpofua=off by default,
# so "doesn't support DPO or FUA" is expected here (our backend will be asserted to support them).
linux_boot probe "scenario=probe" "${DEVICES[@]}"
if linux_check_pass probe probe; then
  linux_expect probe disk_sectors "$DISK_SECTORS"
  linux_expect probe sr sr0
  linux_expect probe vendor QEMU
  linux_expect probe nr_queues 2
  linux_expect_match probe dpofua '^(yes|no)$'
  linux_report init_uptime ready_uptime dmesg dpofua wce fua write_cache cache_type nr_queues sr sr_dmesg
fi

# fio: 4 KiB O_SYNC+O_DIRECT random writes over 8 MiB, verified (crc32c) after the writes.
linux_boot fio-qd1 "scenario=fio qd=1 size=8M" "${DEVICES[@]}"
if linux_check_pass fio-qd1 fio; then
  linux_expect fio-qd1 fio_verify ok
  linux_report fio_iops fio_lat_mean_us fio_verify_kb scenario_seconds
fi

# The same at queue depth 16, with guest RAM in a shared memfd as vhost-user will need.
LINUX_MEMFD=1 linux_boot fio-qd16-memfd "scenario=fio qd=16 size=8M" "${DEVICES[@]}"
if linux_check_pass fio-qd16-memfd fio; then
  linux_expect fio-qd16-memfd fio_verify ok
  linux_report fio_iops fio_lat_mean_us fio_verify_kb scenario_seconds
fi

# ext4: mkfs, files of known content, remount, compare, e2fsck.
linux_boot fs "scenario=fs fs_mb=4 seed=7" "${DEVICES[@]}"
if linux_check_pass fs fs; then
  linux_expect fs fs ok
  linux_expect fs fs_files 34
  linux_expect fs fsck clean
  linux_report mkfs_seconds fs_write_seconds scenario_seconds
fi

# The driver resets the device and starts it again (rmmod/insmod virtio_scsi): data written
# before reads back after, and new writes work.
linux_boot reset "scenario=reset" "${DEVICES[@]}"
linux_check_pass reset reset && linux_expect reset reset ok

# ISO 9660 on the scsi-cd.
linux_boot iso "scenario=iso iso_file=file-a.bin iso_md5=$ISO_A_MD5" "${DEVICES[@]}"
linux_check_iso iso "$WORK/a.iso"

# Medium change: the guest checks a.iso, asks for an eject, sees the medium go, asks for b.iso,
# sees it come and checks it. sr polls for media events every 500 ms here (udev would set 2000).
# Before inserting, show the tray: the guest's open of the empty drive makes the cdrom driver close
# it (CDO_AUTO_CLOSE: START STOP UNIT with LoEj), so it reads "tray closed" with no medium.
media_markers() {
  if [ "$1" = INSERT-NOW ]; then
    echo "  monitor: info block $LINUX_CD_ID -> $(linux_monitor "info block $LINUX_CD_ID" | grep -o 'tray [a-z]*')"
  fi
  linux_qemu_cd_markers "$1"
}
LINUX_ON_MARKER=media_markers linux_boot media \
  "scenario=media iso_file=file-a.bin iso_md5=$ISO_A_MD5 iso2_file=file-b.bin iso2_md5=$ISO_B_MD5 media_poll_ms=500" \
  "${DEVICES[@]}"
if linux_check_pass media media; then
  linux_expect media media ok
  linux_expect media sr_size_sectors_new "$(( $(stat -c %s "$WORK/b.iso") / 512 ))"
  linux_report eject_seen_seconds eject_error sr_size_sectors_ejected insert_seen_seconds media_dmesg media_uevent
fi

# Benchmark report (numbers only): sequential CD read, and fio at queue depths 1 and 16.
linux_boot cd-read "scenario=cd-read cd_passes=8" "${DEVICES[@]}"
linux_check_pass cd-read cd-read && linux_report cd_bytes cd_seconds cd_kbs
if [ "$BENCH_SECONDS" -gt 0 ]; then
  for qd in 1 16; do
    linux_boot "bench-qd$qd" "scenario=fio-bench qd=$qd seconds=$BENCH_SECONDS" "${DEVICES[@]}"
    linux_check_pass "bench-qd$qd" fio-bench && linux_report fio_job fio_iops fio_write_lat_mean_us
  done
fi

if [ "$LINUX_FAILURES" -ne 0 ]; then
  echo "$LINUX_FAILURES check(s) failed"
  exit 1
fi
echo "all Linux scenarios passed against QEMU's built-in virtio-scsi"
