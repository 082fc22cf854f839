#!/usr/bin/env bash
# The nested tier's L2 scenarios (docs/nested.md), shared by tests/nested/nested_test.sh and
# tools/nested. Source it after nested_harness.sh. Each scenario SC has
#   nsc_SC_job RUN      appends one L2 run named RUN (and its L1-side marker handler) to the current
#                       job (NESTED_JOB) and creates the files it needs in the work disk (NESTED_DISK,
#                       /l1disk in L1)
#   nsc_SC_check RUN    the host-side checks of that run, after nested_boot
# NESTED_SCENARIOS lists them in the order nested_test.sh runs them; NESTED_BOOT_OF_<SC> names the
# L1 boot each belongs to there.

NESTED_SCENARIOS="scsi-probe scsi-fio-qd1 scsi-fio-qd16 scsi-limits scsi-limits-shared scsi-hotplug scsi-resize scsi-fs scsi-discard smp
                  scsi-cd-media ide-cd-media host-cd-scsi host-cd-ide ide-fio ide-fs
                  pause-resume sigterm api-shutdown poweroff jail
                  debian-scsi debian-ide debian-qemu
                  fw-ide-cd fw-scsi-cd fw-cd-reset fw-qemu-scsi-cd
                  fw-debian-scsi fw-debian-ide fw-debian-qemu
                  fw-installer fw-scsi-installer fw-qemu-installer"
# Only for tools/nested (run, repeat) and tools/bench-firmware: not part of nested_test.sh (each
# group of the firmware scenarios has its QEMU reference there already).
NESTED_EXTRA_SCENARIOS="ide-fio-psync fw-qemu-ide-cd"

nested_boot_of() {  # scenario: the L1 boot of nested_test.sh it runs in
  case "$1" in
    *-cd-media|host-cd-*|ide-*) echo cd-ide ;;
    debian-*) echo debian ;;
    # Their own L1 boot, apart from the CD boots: an L1 that fails under the emulation is booted
    # again with its scenarios, and two ten-minute boots retry in half the time of one.
    fw-debian-*) echo fw-debian ;;
    fw-*) echo firmware ;;
    scsi-*|smp) echo scsi ;;
    *) echo lifecycle ;;
  esac
}

nested_fn() { echo "nsc_${1//-/_}_$2"; }  # scenario part: the function name

# QEMU's CPU on L1's KVM, wherever QEMU is the reference. Not plain "-cpu host": QEMU 7.2 passes on
# the XSAVE leaf (0xD) of L1's KVM under TCG, whose sizes do not match the XCR0 bits, and Linux
# warns ("XSAVE consistency problem: size 2696 != kernel_size 576", fpu__init_system_xstate), then
# runs without XSAVE (our VMM builds leaf 0xD itself). Not "-cpu host,-xsave" alone either: QEMU
# then still offers AVX, which needs XSAVE; Linux uses it (aesni_intel's AVX code) and takes an
# invalid-opcode oops in udev's worker, and the Debian system's shutdown then waits 80 s for that
# worker. So XSAVE and everything that needs its state go together, as our --cpu-features=-xsave
# removes them: the guest runs with FXSAVE, cleanly.
NESTED_QEMU_CPU=host,-xsave,-avx,-avx2,-fma,-f16c,-vaes,-pku

# --- files on the work disk ---------------------------------------------------------------------
nested_image() {  # name size: a raw image in the work disk; its L1 path on stdout
  # Written out (0xff bytes; mke2fs -d would leave zeros as holes): a write into a hole of L1's ext4
  # allocates blocks, and with cache=none (O_DIRECT + RWF_DSYNC) each such write waits for a
  # journal commit in L1, which is L1's cost, not ours.
  [ -e "$NESTED_DISK/$1" ] || tr '\0' '\377' < /dev/zero | head -c "$(( ${2%M} * 1048576 ))" > "$NESTED_DISK/$1"
  echo "/l1disk/$1"
}

nested_iso() {  # name label file bytes seed: an ISO in the work disk (once per boot); sets
  # NESTED_ISO_FILE_MD5 (the file in it) and NESTED_ISO_MD5 (the whole image)
  local iso=$NESTED_DISK/$1
  if [ ! -e "$iso" ]; then
    LINUX_WORK=$NESTED_WORK linux_make_iso "$iso" "$2" "$3" "$4" "$5"
    echo "$LINUX_ISO_MD5" > "$NESTED_WORK/$1.file-md5"
  fi
  NESTED_ISO_FILE_MD5=$(cat "$NESTED_WORK/$1.file-md5")
  NESTED_ISO_MD5=$(md5sum < "$iso" | cut -d' ' -f1)
}

nested_add() {  # text: append to the job
  printf '%s\n' "$*" >> "$NESTED_JOB"
}

# fio at one queue depth on a cache=none disk: verified data; the block layer saw every 4 KiB
# O_SYNC write as a FUA write and the guest sent no flush (Linux sends REQ_FUA because WCE is on
# and the disk says "supports DPO and FUA"; libaio completes without a following fsync). Under
# fua=auto (the default, docs/block.md) a FUA write alone goes down natively, so at depth 1 every
# one is native; at depth the writes that overlap share flushes (counted as emulated).
nested_fio_stats_check() {  # run expected-fua-writes depth
  local fua flushes emulated writes
  writes=$(nested_stat "$1" final disk0 writeRequests)
  fua=$(nested_stat "$1" final disk0 fuaNative)
  emulated=$(nested_stat "$1" final disk0 fuaEmulated)
  flushes=$(nested_stat "$1" final disk0 flushRequests)
  echo "    block layer: writes ${writes:-?}, native FUA ${fua:-?}, FUA with a shared flush ${emulated:-?}, flushes ${flushes:-?}"
  [ -n "$fua" ] && [ -n "$emulated" ] && [ "$((fua + emulated))" -ge "$2" ] ||
    linux_fail "$1" "the block layer counted ${fua:-no} native and ${emulated:-no} emulated FUA writes, expected at least $2 in all"
  if [ "$3" = 1 ]; then
    [ "${emulated:-x}" = 0 ] || linux_fail "$1" "FUA was emulated ${emulated:-?} times at depth 1 (fua=auto sends a write alone natively)"
  fi
  [ "${flushes:-x}" = 0 ] || linux_fail "$1" "the guest sent ${flushes:-?} flushes (O_SYNC writes with FUA need none)"
}

# --- virtio-scsi disks --------------------------------------------------------------------------
# One boot, four disks, one per cache mode: sd's view of each (WCE from the caching mode page,
# DPOFUA from the mode parameter header) and the request queue's fua/write_cache flags.
nsc_scsi_probe_job() {
  local a b c d
  a=$(nested_image "$1-none.img" 16M); b=$(nested_image "$1-writeback.img" 16M)
  c=$(nested_image "$1-directsync.img" 16M); d=$(nested_image "$1-writethrough.img" 16M)
  nested_add "l2_run $1 'scenario=probe' --disk=$a,cache=none --disk=$b,cache=writeback --disk=$c,cache=directsync --disk=$d,cache=writethrough"
}
nsc_scsi_probe_check() {
  nested_check_pass "$1" probe || return
  linux_expect "$1" dpofua yes
  linux_expect "$1" disk_sectors 32768
  linux_expect "$1" vendor MICROVM
  local lun mode wce fua line
  for lun in 0 1 2 3; do
    case $lun in
      0) mode=none wce=enabled fua=1 ;;
      1) mode=writeback wce=enabled fua=1 ;;
      2) mode=directsync wce=disabled fua=0 ;;
      3) mode=writethrough wce=disabled fua=0 ;;
    esac
    line=$(linux_results disk_line | grep " [0-9]*:0:0:$lun " | head -n 1)
    echo "    cache=$mode: $line"
    case "$line" in
      *"Write cache: $wce"*"supports DPO and FUA"*) ;;
      *) linux_fail "$1" "cache=$mode (LUN $lun): expected 'Write cache: $wce' and 'supports DPO and FUA', got '$line'" ;;
    esac
    case "$line" in
      *" fua=$fua "*) ;;
      *) linux_fail "$1" "cache=$mode (LUN $lun): expected queue/fua $fua, got '$line'" ;;
    esac
  done
  # Every run ends with reboot -f (reboot=k): the i8042 reset ends the VMM with status 0.
  grep -q 'guest reset' "$NESTED_RUNS/$1.qemu.log" ||
    linux_fail "$1" "the VMM did not report the guest's reset (reboot -f)"
}

nsc_scsi_fio_qd1_job() {
  nested_add "l2_run $1 'scenario=fio qd=1 size=4M runtime=900' --disk=$(nested_image "$1.img" 32M),cache=none"
}
nsc_scsi_fio_qd1_check() {
  nested_check_pass "$1" fio || return
  linux_expect "$1" fio_verify ok
  linux_report fio_iops fio_verify_kb
  nested_fio_stats_check "$1" 1024 "${2:-1}"
}
nsc_scsi_fio_qd16_job() {
  nested_add "l2_run $1 'scenario=fio qd=16 size=4M runtime=900' --disk=$(nested_image "$1.img" 32M),cache=none"
}
nsc_scsi_fio_qd16_check() { nsc_scsi_fio_qd1_check "$1" 16; }

# I/O limits (docs/api.md): a disk limited to 500 IOPS on the command line serves fio (random 4 KiB
# reads at depth 16, 10 s) at 475 to 525 IOPS; raised to 1000 through the API while the guest
# waits, the next 10 s run at 950 to 1050 (so the change took hold at once); the block layer
# counts the requests that waited.
nsc_scsi_limits_job() {
  cat >> "$NESTED_JOB" <<'EOF'
limit_markers() {
  case "$1" in
    "LIMIT-PHASE 1") echo ok >&3 ;;
    "LIMIT-PHASE 2") l2_action "set: $(l2_ctl drive limit disk0 --iops 1000 2>&1)"; echo ok >&3 ;;
  esac
}
EOF
  nested_add "L2_MARKERS=limit_markers l2_run $1 'scenario=limits seconds=10 qd=16' --disk=$(nested_image "$1.img" 32M),cache=none,iops=500"
}
nsc_scsi_limits_check() {
  nested_check_pass "$1" limits || return
  local events=$NESTED_RUNS/$1.events first second throttled
  first=$(linux_result limit_iops_1)
  second=$(linux_result limit_iops_2)
  throttled=$(nested_stat "$1" final disk0 throttledRequests)
  echo "    iops=500: $first IOPS; then iops=1000: $second IOPS; requests that waited: $throttled"
  grep -q 'set: disk0: 1000 IOPS' "$events" || linux_fail "$1" "vmmctl drive limit did not set 1000 IOPS"
  # What the limiter guarantees is the ceiling (within 5 %); how close a guest gets to it depends
  # on how fast the nested emulation runs it (under load, 944 of 1000 was seen), so the floor
  # only shows the live change took effect: well past the old limit.
  [ "${first:-0}" -gt 0 ] && [ "${first:-0}" -le 525 ] ||
    linux_fail "$1" "limited to 500 IOPS, fio got ${first:-none}"
  [ "${second:-0}" -ge 750 ] && [ "${second:-0}" -le 1050 ] ||
    linux_fail "$1" "raised to 1000 IOPS, fio got ${second:-none}"
  [ "${throttled:-0}" -gt 0 ] || linux_fail "$1" "no request waited for its budget"
}

# I/O limits shared: two disks on one iothread, both in --io-group=tenant, fio on both at once.
# Phase 1, nothing limited (the group lifted through the API): each disk's own rate. Phase 2,
# disk0 limited to 200 IOPS: it keeps within it, and disk1, unlimited on the same iothread, is not
# held back by it (requests wait in disk0's queue, not in the iothread): none of disk1's requests
# waited, and it got at least what disk0 got (issue 24). Its share of its own phase-1 rate is
# reported, not judged: it measures the emulation's speed as much as the VMM (85-90 % while the
# limited queue was tried again on every loop of the iothread, 141 % once it waited for its
# timer, and 87 % on 2026-12-07 in a run whose phase 3 also reached only 243 of its 600 IOPS: the
# whole L1 had slowed). That the waiting queue costs the iothread nothing until its timer fires
# is block/drive_test.cc's AWaitingQueueTriesAgainOnlyWhenItsTimerFires.
# Phase 3, disk0's own limit lifted and the group set to 600 IOPS: the two together keep within
# 105 % of it.
nsc_scsi_limits_shared_job() {
  cat >> "$NESTED_JOB" <<'EOF'
shared_markers() {
  case "$1" in
    "LIMIT-PHASE 1") l2_action "set: $(l2_ctl drive limit tenant --group 2>&1)"; echo ok >&3 ;;
    "LIMIT-PHASE 2") l2_stats phase-2-start
                     l2_action "set: $(l2_ctl drive limit disk0 --iops 200 2>&1)"; echo ok >&3 ;;
    "LIMIT-PHASE 3") l2_stats phase-2-end
                     l2_action "set: $(l2_ctl drive limit disk0 2>&1)"
                     l2_action "set: $(l2_ctl drive limit tenant --group --iops 600 2>&1)"; echo ok >&3 ;;
  esac
}
EOF
  nested_add "L2_MARKERS=shared_markers l2_run $1 'scenario=limits phases=3 disks=2 seconds=10 qd=16' --io-group=tenant,iops=600 --disk=$(nested_image "$1-a.img" 32M),cache=none,group=tenant --disk=$(nested_image "$1-b.img" 32M),cache=none,group=tenant"
}
nsc_scsi_limits_shared_check() {
  nested_check_pass "$1" limits || return
  local events=$NESTED_RUNS/$1.events a1 b1 a2 b2 a3 b3
  a1=$(linux_result limit_iops_1_disk0); b1=$(linux_result limit_iops_1_disk1)
  a2=$(linux_result limit_iops_2_disk0); b2=$(linux_result limit_iops_2_disk1)
  a3=$(linux_result limit_iops_3_disk0); b3=$(linux_result limit_iops_3_disk1)
  echo "    unlimited: disk0 $a1, disk1 $b1 IOPS; disk0 at 200: $a2 and $b2; group at 600: $a3 + $b3 = $((a3 + b3))"
  grep -q 'set: group tenant: unlimited' "$events" || linux_fail "$1" "the group's limits were not lifted"
  grep -q 'set: group tenant: 600 IOPS' "$events" || linux_fail "$1" "the group was not set to 600 IOPS"
  [ "${a2:-999}" -le 210 ] || linux_fail "$1" "disk0 limited to 200 IOPS got ${a2:-none}"
  local waited_before waited_after
  waited_before=$(nested_stat "$1" phase-2-start disk1 throttledRequests)
  waited_after=$(nested_stat "$1" phase-2-end disk1 throttledRequests)
  echo "    disk1 beside the limited disk0: $b2 of its unlimited $b1 IOPS ($(( ${b2:-0} * 100 / (${b1:-0} > 0 ? b1 : 1) )) %)"
  [ -n "$waited_before" ] && [ "$waited_before" = "${waited_after:-}" ] ||
    linux_fail "$1" "disk1 (unlimited) had requests wait while disk0 was limited (${waited_before:-?} then ${waited_after:-?})"
  # Whether disk1 waited is the check above; its rate is the emulation's as much as ours (on
  # 2026-12-07, with the machine's other core busy, 140 IOPS beside disk0's 115): judged only as
  # at least disk0's, which a stalled iothread would not give it.
  [ "${b2:-0}" -ge "${a2:-1}" ] ||
    linux_fail "$1" "disk1 (unlimited) got $b2 IOPS beside disk0 limited to 200 ($a2): held back by it"
  [ $(( (${a3:-0} + ${b3:-0}) * 100 )) -le $(( 600 * 105 )) ] ||
    linux_fail "$1" "the group (600 IOPS) let through $((a3 + b3))"
  [ "${a3:-0}" -gt 0 ] && [ "${b3:-0}" -gt 0 ] || linux_fail "$1" "a disk of the group got nothing"
}

# Hot-plug (issue 24), in the jail as by default: images come from --media-dir. A disk attached
# through the API while fio runs on the boot disk appears in
# the guest by itself (the event queue's RESCAN), takes verified writes, is detached during fio
# (REMOVED: the guest's I/O fails cleanly, the VMM logs no error), and the same image attached
# again (its lock was released) still holds what was verified. Last, the boot disk is detached
# too, and the guest sees it go.
nsc_scsi_hotplug_job() {
  cat >> "$NESTED_JOB" <<'EOF'
hotplug_markers() {
  case "$1" in
    # The jailed VMM (uid 65534) opens it now, long after it gave up root: the image must be its.
    HOTPLUG-ATTACH) chmod 0666 "$HOTPLUG_IMAGE"
                    l2_action "attach: $(l2_ctl disk add "$HOTPLUG_IMAGE" --id data --cache none 2>&1)"; echo ok >&3 ;;
    # Detached, the image is free for another VMM: a second microvm opens it (and takes its lock)
    # to build a VM, dumps that VM's device tree and exits.
    HOTPLUG-DETACH) l2_action "detach: $(l2_ctl disk remove data 2>&1)"; l2_stats detached
                    other=$("$MICROVM" --kernel="$L2_KERNEL" --disk="$HOTPLUG_IMAGE" \
                      --dump-dtb=/dev/null --jail=off 2>&1)
                    l2_action "other: status $? $(echo "$other" | tr '\n' ' ')"
                    echo ok >&3 ;;
    HOTPLUG-REATTACH) l2_action "reattach: $(l2_ctl disk add "$HOTPLUG_IMAGE" --id again --cache none 2>&1)"; echo ok >&3 ;;
    # The disk the VM booted with (in a real system its root disk): detaching it is allowed.
    HOTPLUG-DETACH-BOOT) l2_action "detach-boot: $(l2_ctl disk remove disk0 2>&1)"; echo ok >&3 ;;
  esac
}
EOF
  nested_add "HOTPLUG_IMAGE=$(nested_image "$1-data.img" 32M) L2_MARKERS=hotplug_markers l2_run $1 'scenario=hotplug seconds=90' --media-dir=/l1disk --disk=$(nested_image "$1.img" 32M),cache=none"
}
nsc_scsi_hotplug_check() {
  # The kernel's lines about the I/O that failed on the detached disk (never the boot disk, sda).
  NESTED_RUN_DMESG_EXPECTED='I/O error, dev sd[b-z]|Buffer I/O error on dev sd[b-z]' \
    nested_check_pass "$1" hotplug || return
  local events=$NESTED_RUNS/$1.events vmm_errors
  echo "    $(linux_result attached_disk): seen after $(linux_result attach_seen_seconds) s;" \
       "gone $(linux_result detach_seen_seconds) s after the detach (fio status $(linux_result detach_fio_status))"
  grep -q 'attach: data .*0:0:1' "$events" || linux_fail "$1" "vmmctl disk add did not attach data at LUN 1"
  grep -q 'detach: data: detached' "$events" || linux_fail "$1" "vmmctl disk remove did not detach data"
  grep -q 'other: status 0 ' "$events" ||
    linux_fail "$1" "another microvm could not open the detached image: $(grep -m1 'other: ' "$events")"
  grep -q 'reattach: again ' "$events" ||
    linux_fail "$1" "the detached image could not be attached again (its lock not released?)"
  grep -q 'detach-boot: disk0: detached' "$events" ||
    linux_fail "$1" "vmmctl disk remove did not detach the boot disk: $(grep -m1 'detach-boot: ' "$events")"
  echo "    the boot disk, detached: gone from the guest $(linux_result boot_detach_seen_seconds) s after"
  linux_expect "$1" attach_verify ok
  linux_expect "$1" reattach_verify ok
  linux_expect "$1" background_fio 0
  if grep -q "^L2-STATS $1 detached drive=data " "$events"; then
    linux_fail "$1" "the API still lists the detached disk"
  fi
  vmm_errors=$(grep -F "L2ERR[$1]|" "$NESTED_RUNS/$1.qemu.log" | grep -iE 'error|needs a reset|flush' || true)
  [ -z "$vmm_errors" ] || linux_fail "$1" "the VMM logged: $vmm_errors"
}

# Online resize (issue 24): the disk grows through the API (48 MiB) and Linux takes the new size
# by itself (PARAM_CHANGE); the new space verifies; the host grows the file (64 MiB) and a resize
# without a size takes it; a shrink over data is refused and the guest keeps 64 MiB.
nsc_scsi_resize_job() {
  cat >> "$NESTED_JOB" <<'EOF'
resize_markers() {
  case "$1" in
    RESIZE-GROW) l2_action "grow: $(l2_ctl disk resize disk0 48M 2>&1)"; echo ok >&3 ;;
    RESIZE-HOST) dd if=/dev/null of="$RESIZE_IMAGE" bs=1M seek=64 2>/dev/null
                 l2_action "host: $(l2_ctl disk resize disk0 2>&1)"; echo ok >&3 ;;
    RESIZE-SHRINK) l2_action "shrink: $(l2_ctl disk resize disk0 16M 2>&1)"; echo ok >&3 ;;
  esac
}
EOF
  nested_add "RESIZE_IMAGE=$(nested_image "$1.img" 32M) L2_MARKERS=resize_markers l2_run $1 'scenario=resize' --disk=$(nested_image "$1.img" 32M),cache=none"
}
nsc_scsi_resize_check() {
  nested_check_pass "$1" resize || return
  local events=$NESTED_RUNS/$1.events
  echo "    $(linux_result size_before) -> $(linux_result size_grown) bytes, seen after" \
       "$(linux_result grow_seen_seconds) s; host -> $(linux_result size_host); after a refused shrink" \
       "$(linux_result size_after_shrink)"
  linux_report resize_dmesg
  # The kernel's own word that it took each new capacity (512-byte sectors: 32, 48, 64 MiB).
  local change
  for change in "65536 to 98304" "98304 to 131072"; do
    linux_results resize_dmesg | grep -q "detected capacity change from $change\$" ||
      linux_fail "$1" "the kernel did not log the capacity change from $change"
  done
  linux_expect "$1" size_grown 50331648
  linux_expect "$1" grown_verify ok
  linux_expect "$1" size_host 67108864
  linux_expect "$1" size_after_shrink 67108864
  grep -q 'shrink: .*FAILED_PRECONDITION.*cut it off' "$events" ||
    linux_fail "$1" "the shrink over data was not refused"
}

nsc_scsi_fs_job() {
  nested_add "l2_run $1 'scenario=fs' --disk=$(nested_image "$1.img" 32M),cache=none"
}
# blkdiscard of 2 MiB in the middle of 4 MiB written: sd uses UNMAP or WRITE SAME (the disk offers
# both, LBPRZ = 0), the data around the range survives, the block layer counts the discards.
nsc_scsi_discard_job() {
  nested_add "l2_run $1 'scenario=discard' --disk=$(nested_image "$1.img" 16M),cache=none"
}
nsc_scsi_discard_check() {
  nested_check_pass "$1" discard || return
  linux_expect "$1" discard ok
  linux_expect_match "$1" discard_mode '^(unmap|writesame_16|writesame_10)$'
  linux_report discard_mode discard_max_bytes
  local discards
  discards=$(nested_stat "$1" final disk0 discardRequests)
  echo "    block layer: discards ${discards:-?}"
  [ -n "$discards" ] && [ "$discards" -ge 1 ] ||
    linux_fail "$1" "the block layer counted ${discards:-no} discards"
}

nsc_scsi_fs_check() {
  nested_check_pass "$1" fs || return
  linux_expect "$1" fs ok
  linux_expect "$1" fs_files 34
  linux_expect "$1" fsck clean
  linux_report mkfs_seconds fs_write_seconds
}

# Two vCPUs, two request queues on two iothreads: Linux must see both CPUs (it learns them from
# ACPI's MADT: Debian's kernel has no MP-table parser) and give the disk two blk-mq hardware
# queues; one fio job per CPU then drives both queues, so both request-queue MSI-X vectors fire and
# both iothreads work.
nsc_smp_job() {
  nested_add "l2_run $1 'scenario=fio qd=16 size=4M runtime=900 numjobs=2 interrupts=1' --vcpus=2 --scsi-queues=2 --iothreads=2 --disk=$(nested_image "$1.img" 32M),cache=none"
}
nsc_smp_check() {
  nested_check "$1" 0 || return
  nested_select "$1"
  linux_report cpus_online nr_queues irq fio_iops fio_job
  local threads vec n
  threads=$(nested_threads "$1" final)
  echo "    threads (CPU ticks): $threads"
  linux_expect "$1" cpus_online 0-1
  linux_expect "$1" nr_queues 2
  grep -qx "SCENARIO fio PASS" "$LINUX_LOG" ||
    linux_fail "$1" "fio with one job per CPU did not pass: $(grep -m1 '^SCENARIO fio FAIL' "$LINUX_LOG")"
  # /proc/interrupts: "NN: CPU0-count CPU1-count ... virtioN-request", one line per request queue
  # (virtio_scsi names them all "request"): two of them, and each one fired.
  n=$(linux_results irq | grep -c -- '-request$')
  [ "$n" = 2 ] || linux_fail "$1" "expected 2 virtio-scsi request-queue vectors in /proc/interrupts, found $n"
  while read -r vec; do
    n=$(echo "$vec" | awk '{ s = 0; for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) s += $i; print s }')
    [ "$n" -gt 0 ] || linux_fail "$1" "no interrupts on a request-queue vector: $vec"
  done < <(linux_results irq | grep -- '-request$')
  # The API has no per-queue statistics: each iothread's CPU time shows that it served requests.
  for vec in scsi-io0 scsi-io1; do
    n=$(echo "$threads" | tr ' ' '\n' | sed -n "s/^$vec=//p" | head -n 1)
    [ -n "$n" ] && [ "$n" -gt 0 ] || linux_fail "$1" "iothread $vec used no CPU time (${n:-no such thread})"
  done
  nested_fio_stats_check "$1" 2048 16
}

# --- CD/DVD-ROMs --------------------------------------------------------------------------------
# The whole disc is read and checked (disc_md5), the file on it mounted and checked; at @@EJECT-NOW
# the L1 side ejects through the API, at @@INSERT-NOW it inserts disc B, which the guest then
# mounts and checks.
nested_media_job() {  # run microvm-cd-flag
  nested_iso a.iso DISC_A file-a.bin 4194304 101
  local a_file=$NESTED_ISO_FILE_MD5 a_md5=$NESTED_ISO_MD5
  nested_iso b.iso DISC_B file-b.bin 1048576 202
  local b_file=$NESTED_ISO_FILE_MD5
  cat >> "$NESTED_JOB" <<'EOF'
media_markers() {
  case "$1" in
    EJECT-NOW) l2_stats before-eject; l2_action "media eject cd0 --force: $(l2_ctl media eject cd0 --force 2>&1)" ;;
    INSERT-NOW) l2_action "media insert cd0 /l1disk/b.iso: $(l2_ctl media insert cd0 /l1disk/b.iso 2>&1)" ;;
  esac
}
EOF
  nested_add "L2_MARKERS=media_markers l2_run $1 'scenario=media iso_file=file-a.bin iso_md5=$a_file iso2_file=file-b.bin iso2_md5=$b_file disc_md5=$a_md5 media_wait=60' $2"
}
# After a media change the drive owes the guest a UNIT ATTENTION (MMC-6), which GET EVENT STATUS
# NOTIFICATION does not consume: when Linux's sr learns of the new disc that way and skips its
# TEST UNIT READY, or consumes only the first of virtio-scsi's two (06/3A/00, then 06/28/00, as
# QEMU's scsi-cd reports them), the guest's first read meets one and the SCSI layer fails it on a
# removable device: "I/O error, dev sr0, sector 0" and "Buffer I/O error on dev sr0, logical block
# 0, async page read". On IDE it happens in most runs, and QEMU's own ide-cd gives the same lines
# (tests/linux harness, -M pc, checked 2026-12-01); on virtio-scsi it came once in CI (2026-12-02),
# in the same place. Expected in the media-change runs on both buses, and nowhere else.
NESTED_MEDIA_CHANGE_LINES='^(I/O error, dev sr[0-9]+, sector [0-9]+ op 0x0:\(READ\)|Buffer I/O error on dev sr[0-9]+, logical block [0-9]+, async page read)'

nested_media_check() {  # run bus
  NESTED_RUN_DMESG_EXPECTED=$NESTED_MEDIA_CHANGE_LINES nested_check_pass "$1" media || return
  linux_expect "$1" disc_md5 "$(md5sum < "$NESTED_DISK/a.iso" | cut -d' ' -f1)"
  linux_expect "$1" media_first ok
  linux_expect "$1" media_second ok
  linux_expect "$1" media ok
  linux_report sr_size_sectors eject_seen_seconds eject_error insert_seen_seconds sr_size_sectors_new media_dmesg media_uevent
  grep '^L2-ACTION' "$NESTED_RUNS/$1.events" | cut -d' ' -f3- | sed 's/^/    L1: /'
  grep -q "media eject cd0 --force: cd0 cdrom $2 .*no medium" "$NESTED_RUNS/$1.events" ||
    linux_fail "$1" "vmmctl media eject did not report cd0 ($2) without a medium"
  grep -q "media insert cd0 /l1disk/b.iso: cd0 cdrom $2 " "$NESTED_RUNS/$1.events" ||
    linux_fail "$1" "vmmctl media insert did not report cd0 ($2)"
  local reads
  reads=$(nested_stat "$1" final cd0 readRequests)
  echo "    block layer: cd0 read requests ${reads:-?}, errors $(nested_stat "$1" final cd0 errors)"
}
# Jailed (as every run here), the VMM reaches media through --media-dir only.
nsc_scsi_cd_media_job() { nested_media_job "$1" "--cdrom=/l1disk/a.iso --media-dir=/l1disk"; }
nsc_scsi_cd_media_check() { nested_media_check "$1" virtio-scsi; }
nsc_ide_cd_media_job() { nested_media_job "$1" "--ide-cdrom=/l1disk/a.iso --media-dir=/l1disk"; }
nsc_ide_cd_media_check() { nested_media_check "$1" ide; }

# --- a host optical drive passed through --------------------------------------------------------
# L1 has no optical drive, but scsi_debug makes one that the kernel's sr drives: /dev/srN with the
# real ioctl, block-event and uevent paths. scsi_debug's RAM store is shared by all its hosts, so
# the disc is written through a scsi_debug disk (ptype 0, 2048-byte sectors) and then shown by a
# second host of type 5 (CD/DVD). A disc change on the host: the new disc written into the store,
# and a capacity change (virtual_gb), which scsi_debug announces with a UNIT ATTENTION that sr's
# polling turns into a DISK_MEDIA_CHANGE uevent. The drive's removal: its SCSI device deleted.
nested_padded() {  # iso image MiB: the ISO padded with zeros to a whole disc of MiB
  [ -e "$NESTED_DISK/$2" ] && return 0
  cp "$NESTED_DISK/$1" "$NESTED_DISK/$2" && truncate -s "${3}M" "$NESTED_DISK/$2"
}
NESTED_HOSTCD_MB=16
nested_hostcd_functions() {
  cat >> "$NESTED_JOB" <<'EOF'
hostcd_setup() {  # disc-image MiB: a scsi_debug CD-ROM drive holding the image; sets HOSTCD (srN)
  local sd="" b i=0 kver
  kver=$(cat /etc/kernel-version)
  rmmod scsi_debug 2>/dev/null
  insmod "/lib/modules/$kver/scsi_debug.ko" ptype=0 removable=1 sector_size=2048 dev_size_mb="$2" \
    ${HOSTCD_PARAMS:-} ||
    { l2_action "hostcd: insmod scsi_debug failed"; return 1; }
  while [ -z "$sd" ] && [ $i -lt 100 ]; do
    for b in /sys/block/sd*; do grep -qs scsi_debug "$b/device/model" && sd=${b##*/}; done
    i=$((i + 1)); [ -n "$sd" ] || sleep 0.1
  done
  [ -n "$sd" ] || { l2_action "hostcd: no scsi_debug disk"; return 1; }
  HOSTCD_DISK=$sd
  dd if="$1" of="/dev/$sd" bs=64K conv=fsync 2>/dev/null || l2_action "hostcd: writing the disc failed"
  echo 5 > /sys/bus/pseudo/drivers/scsi_debug/ptype
  echo 1 > /sys/bus/pseudo/drivers/scsi_debug/add_host
  HOSTCD="" i=0
  while [ -z "$HOSTCD" ] && [ $i -lt 100 ]; do
    for b in /sys/block/sr*; do grep -qs scsi_debug "$b/device/model" && HOSTCD=${b##*/}; done
    i=$((i + 1)); [ -n "$HOSTCD" ] || sleep 0.1
  done
  [ -n "$HOSTCD" ] && [ -b "/dev/$HOSTCD" ] || { l2_action "hostcd: no scsi_debug CD-ROM"; return 1; }
  # Its SCSI host, to scan after the drive was deleted (HOST-READD).
  HOSTCD_SCSI_HOST=$(readlink -f "/sys/block/$HOSTCD/device" | grep -o 'host[0-9]*' | head -n 1)
  # The kernel polls the drive (udev would set this): a UNIT ATTENTION becomes a uevent.
  echo 500 > "/sys/block/$HOSTCD/events_poll_msecs"
  HOSTCD_L1_MD5=$(dd if="/dev/$HOSTCD" bs=64K 2>/dev/null | md5sum | cut -d' ' -f1)
}
hostcd_markers() {
  case "$1" in
    HOST-CHANGE)
      l2_action "hostcd: L1 drive $HOSTCD (disk view $HOSTCD_DISK) md5 $HOSTCD_L1_MD5"
      l2_spawn l2_ctl media watch > /tmp/hostcd-watch.log 2>&1
      sleep 1
      l2_stats before-change
      dd if=/l1disk/b-disc.img of="/dev/$HOSTCD_DISK" bs=64K conv=fsync 2>/dev/null
      echo 1 > /sys/bus/pseudo/drivers/scsi_debug/virtual_gb
      # scsi_debug has no GET EVENT STATUS NOTIFICATION, so the kernel's polling alone never asks
      # it TEST UNIT READY; an open does (as a desktop's disk service would), which turns the
      # UNIT ATTENTION into DISK_MEDIA_CHANGE=1. A real drive's event status needs no open.
      dd if="/dev/$HOSTCD" of=/dev/null bs=2048 count=1 2>/dev/null
      l2_action "hostcd: the host changed the disc (virtual_gb=1)" ;;
    HOST-REMOVE)
      l2_stats before-remove
      echo 1 > "/sys/block/$HOSTCD/device/delete"
      l2_action "hostcd: the host removed $HOSTCD" ;;
    HOST-READD)
      # As a drive plugged in again: a scan of its host finds it (scsi_debug's ptype is still 5).
      echo "- - -" > "/sys/class/scsi_host/$HOSTCD_SCSI_HOST/scan"
      l2_action "hostcd: the host scanned $HOSTCD_SCSI_HOST: $(cd /sys/block && echo sr*)" ;;
  esac
}
hostcd_teardown() {
  # The Watch ended with the VMM, and l2_run waited for it (l2_spawn).
  while IFS= read -r line; do l2_action "watch: $line"; done < /tmp/hostcd-watch.log
  rm -f /tmp/hostcd-watch.log
  rmmod scsi_debug 2>/dev/null
}
EOF
}
nested_hostcd_job() {  # run cd-flag: the drive on virtio-scsi (--cdrom) or IDE (--ide-cdrom)
  nested_iso a.iso DISC_A file-a.bin 4194304 101
  local a_file=$NESTED_ISO_FILE_MD5 b_file disc_md5
  nested_iso b.iso DISC_B file-b.bin 1048576 202
  b_file=$NESTED_ISO_FILE_MD5
  nested_padded a.iso a-disc.img "$NESTED_HOSTCD_MB"
  nested_padded b.iso b-disc.img "$NESTED_HOSTCD_MB"
  disc_md5=$(md5sum < "$NESTED_DISK/a-disc.img" | cut -d' ' -f1)
  nested_hostcd_functions
  nested_add "hostcd_setup /l1disk/a-disc.img $NESTED_HOSTCD_MB"
  # A first run cut short by the emulation's fault may have changed or removed the drive: a rerun
  # starts from disc A on a new drive (srN again: the only CD-ROM drive in L1).
  nested_add "L2_RERUN_SETUP='hostcd_teardown; hostcd_setup /l1disk/a-disc.img $NESTED_HOSTCD_MB' L2_MARKERS=hostcd_markers l2_run $1 'scenario=hostcd iso_file=file-a.bin iso_md5=$a_file iso2_file=file-b.bin iso2_md5=$b_file disc_md5=$disc_md5 media_wait=60' $2=/dev/\$HOSTCD"
  nested_add "hostcd_teardown"
}
nested_hostcd_check() {  # run bus
  local events=$NESTED_RUNS/$1.events l1_md5 probes_a probes_b reads_a reads_b
  NESTED_RUN_DMESG_EXPECTED=$NESTED_MEDIA_CHANGE_LINES nested_check_pass "$1" hostcd || return
  linux_expect "$1" disc_md5 "$(md5sum < "$NESTED_DISK/a-disc.img" | cut -d' ' -f1)"
  linux_expect "$1" media_first ok
  linux_expect "$1" media_second ok
  linux_expect "$1" media_third ok
  linux_expect "$1" hostcd ok
  linux_report sr_size_sectors change_seen_seconds sr_size_sectors_new remove_seen_seconds remove_error \
    readd_seen_seconds media_uevent
  grep '^L2-ACTION' "$events" | cut -d' ' -f3- | sed 's/^/    L1: /'
  l1_md5=$(sed -n 's/.*hostcd: L1 drive [a-z0-9]* (disk view [a-z0-9]*) md5 //p' "$events" | head -n 1)
  [ -n "$l1_md5" ] && [ "$l1_md5" = "$(linux_results disc_md5 | head -n 1)" ] ||
    linux_fail "$1" "the guest's md5 of the disc ($(linux_results disc_md5 | head -n 1)) is not L1's own (${l1_md5:-none})"
  grep -q 'watch: .* cd0 MEDIUM_INSERTED by host' "$events" ||
    linux_fail "$1" "the Watch stream did not report the host's new disc"
  grep -q 'watch: .* cd0 MEDIUM_REMOVED by host' "$events" ||
    linux_fail "$1" "the Watch stream did not report the drive's removal"
  [ "$(grep -c 'watch: .* cd0 MEDIUM_INSERTED by host' "$events")" -ge 2 ] ||
    linux_fail "$1" "the Watch stream did not report the disc of the drive added back"
  # Every read of the first disc happened before @@HOST-CHANGE: the drive was probed at start only.
  probes_a=$(nested_stat "$1" before-change cd0 hostProbes)
  reads_a=$(nested_stat "$1" before-change cd0 readRequests)
  probes_b=$(nested_stat "$1" before-remove cd0 hostProbes)
  reads_b=$(nested_stat "$1" before-remove cd0 readRequests)
  echo "    host drive probes: ${probes_a:-?} at start (${reads_a:-?} reads so far), ${probes_b:-?} after the change (${reads_b:-?} reads)"
  [ -n "$probes_a" ] && [ "$probes_a" -le 2 ] && [ "${reads_a:-0}" -gt 0 ] ||
    linux_fail "$1" "the drive was probed ${probes_a:-?} times while the guest read ${reads_a:-?} requests (start: 2)"
}
nsc_host_cd_scsi_job() { nested_hostcd_job "$1" --cdrom; }
nsc_host_cd_scsi_check() { nested_hostcd_check "$1" virtio-scsi; }
nsc_host_cd_ide_job() { nested_hostcd_job "$1" --ide-cdrom; }
nsc_host_cd_ide_check() { nested_hostcd_check "$1" ide; }

# --- IDE disk (ata_piix) ------------------------------------------------------------------------
# libata.fua=1 lets libata use WRITE DMA FUA EXT when IDENTIFY says the drive has it (word 84
# bit 6, 87 bit 6 enabled, 48-bit addressing in 83/86 bit 10) - but since "ata: libata: cleanup fua
# support detection" (in 6.1 stable) only for devices with NCQ, which a PATA disk on ata_piix never
# has: Linux then says "doesn't support DPO or FUA" and each O_SYNC write becomes a write plus a
# FLUSH CACHE EXT. Recorded (RESULT dmesg_show, block statistics), not judged.
nsc_ide_fio_job() {
  nested_add "l2_run $1 'scenario=fio qd=1 size=4M runtime=900 libata.fua=1 dmesg_show=FUA|ata[0-9]' --ide-disk=$(nested_image "$1.img" 32M),cache=none"
}
nsc_ide_fio_check() {
  nested_check_pass "$1" fio || return
  linux_expect "$1" fio_verify ok
  linux_expect "$1" module_param libata.fua=1
  linux_report fio_iops module_param dmesg_show
  echo "    block layer: writes $(nested_stat "$1" final disk0 writeRequests), native FUA $(nested_stat "$1" final disk0 fuaNative), emulated FUA $(nested_stat "$1" final disk0 fuaEmulated), flushes $(nested_stat "$1" final disk0 flushRequests)"
  if linux_results dmesg_show | grep -q "doesn't support DPO or FUA"; then
    echo "    note: with libata.fua=1 Linux says the IDE disk doesn't support DPO or FUA (libata wants NCQ for FUA; see docs/nested.md)"
  fi
}
# The IDE fio run with the psync engine (pwrite + O_SYNC, one request at a time, no libaio): the
# workload under which issue 12 saw two triple faults in four boots. For tools/nested repeat.
nsc_ide_fio_psync_job() {
  nested_add "l2_run $1 'scenario=fio qd=1 size=4M runtime=900 engine=psync libata.fua=1' --ide-disk=$(nested_image "$1.img" 32M),cache=none --ide-cdrom=/l1disk/$(nested_iso a.iso DISC_A file-a.bin 4194304 101; echo a.iso)"
}
nsc_ide_fio_psync_check() {
  nested_check_pass "$1" fio || return
  linux_expect "$1" fio_verify ok
  linux_report fio_iops
}

nsc_ide_fs_job() {
  nested_add "l2_run $1 'scenario=fs' --ide-disk=$(nested_image "$1.img" 32M),cache=none"
}
nsc_ide_fs_check() { nsc_scsi_fs_check "$1"; }

# --- lifecycle ----------------------------------------------------------------------------------
# The VM paused and resumed twice through the API while fio writes; no request completes while
# the vCPUs are parked (the statistics do not move between two reads 2 s apart), and the data
# verifies afterwards.
nsc_pause_resume_job() {
  cat >> "$NESTED_JOB" <<'EOF'
pause_markers() {
  case "$1" in
    PAUSE) l2_spawn pause_cycles ;;
  esac
}
pause_cycles() {
  sleep 2
  l2_action "vm pause: $(l2_ctl vm pause 2>&1)"
  sleep 0.5
  l2_stats paused-a
  l2_action "vm info: $(l2_ctl vm info 2>&1 | grep -i '^state')"
  sleep 2
  l2_stats paused-b
  l2_action "vm resume: $(l2_ctl vm resume 2>&1)"
  sleep 2
  l2_action "vm pause: $(l2_ctl vm pause 2>&1)"
  sleep 1
  l2_action "vm resume: $(l2_ctl vm resume 2>&1)"
  : > "$L2_DIR/pause-cycles-done"
}
# The guest ends when its @@FINAL is answered: not before both cycles are done, however fast
# fio was (CI of 2026-12-07: on a faster host fio's 4 MiB took 1.4 s and the guest had rebooted
# before the second pause).
pause_final() {
  local waited=0
  while [ ! -e "$L2_DIR/pause-cycles-done" ] && [ "$waited" -lt 120 ]; do
    sleep 0.5
    waited=$((waited + 1))
  done
  echo ok >&3
}
EOF
  # 16 MiB: fio is still writing at the first pause (2 s after the marker) on a fast host too.
  nested_add "L2_MARKERS=pause_markers L2_ON_FINAL=pause_final l2_run $1 'scenario=fio qd=1 size=16M runtime=900 marker=PAUSE' --disk=$(nested_image "$1.img" 32M),cache=none"
}
nsc_pause_resume_check() {
  nested_check_pass "$1" fio || return
  linux_expect "$1" fio_verify ok
  grep '^L2-ACTION' "$NESTED_RUNS/$1.events" | cut -d' ' -f3- | sed 's/^/    L1: /'
  [ "$(grep -c 'vm pause: state: PAUSED' "$NESTED_RUNS/$1.events")" = 2 ] ||
    linux_fail "$1" "vmmctl vm pause did not answer 'state: PAUSED' twice"
  [ "$(grep -c 'vm resume: state: RUNNING' "$NESTED_RUNS/$1.events")" = 2 ] ||
    linux_fail "$1" "vmmctl vm resume did not answer 'state: RUNNING' twice"
  grep -qE 'vm info: state: *PAUSED' "$NESTED_RUNS/$1.events" ||
    linux_fail "$1" "vm info did not say PAUSED while paused"
  local a b
  a=$(nested_stat "$1" paused-a disk0 writeRequests)
  b=$(nested_stat "$1" paused-b disk0 writeRequests)
  echo "    writes while paused: ${a:-?} -> ${b:-?}"
  [ -n "$a" ] && [ "$a" = "$b" ] || linux_fail "$1" "writes went on while paused (${a:-?} -> ${b:-?})"
  nested_fio_stats_check "$1" 1024 1
}

# SIGTERM to the VMM while fio writes: it stops the VM and exits with 128+15, removing its socket.
nsc_sigterm_job() {
  cat >> "$NESTED_JOB" <<'EOF'
sigterm_markers() {
  case "$1" in
    SIGTERM) l2_spawn sigterm_later ;;
  esac
}
sigterm_later() {
  sleep 3
  l2_stats before-sigterm
  l2_action "kill -TERM $(l2_pid)"
  kill -TERM "$(l2_pid)"
}
EOF
  nested_add "L2_MARKERS=sigterm_markers l2_run $1 'scenario=fio qd=16 size=30M runtime=900 marker=SIGTERM' --disk=$(nested_image "$1.img" 32M),cache=none"
}
nested_killed_check() {  # run status stage: fio was writing before, the VMM ended cleanly
  nested_check "$1" "$2" || return
  local w
  w=$(nested_stat "$1" "$3" disk0 writeRequests)
  echo "    writes before the stop: ${w:-?}; VMM: $(grep -v 'control API on' "$NESTED_RUNS/$1.qemu.log" | tr '\n' ' ')"
  [ -n "$w" ] && [ "$w" -gt 0 ] || linux_fail "$1" "fio had not written anything before the stop"
  grep -q 'api socket left behind' "$NESTED_RUNS/$1.events" && linux_fail "$1" "the VMM left its API socket behind"
  grep -q '^SCENARIO' "$NESTED_RUNS/$1.log" && linux_fail "$1" "the guest finished before it was stopped"
  return 0
}
nsc_sigterm_check() {
  nested_killed_check "$1" 143 before-sigterm
  grep -qE 'received (Terminated|SIGTERM)' "$NESTED_RUNS/$1.qemu.log" || linux_fail "$1" "the VMM did not say it stopped on SIGTERM"
}

# API Shutdown (graceful, 1 s grace) while fio writes: the VMM presses the ACPI power button, which
# the test's /init ignores, so the VMM stops the VM after the grace period: status 0.
nsc_api_shutdown_job() {
  cat >> "$NESTED_JOB" <<'EOF'
shutdown_markers() {
  case "$1" in
    SHUTDOWN) l2_spawn shutdown_later ;;
  esac
}
shutdown_later() {
  sleep 3
  l2_stats before-shutdown
  l2_action "vm shutdown --grace-ms 1000: $(l2_ctl vm shutdown --grace-ms 1000 2>&1)"
}
EOF
  # Outside the jail (the only run here that is): the VMM's stop as an unjailed one makes it; its
  # socket janitor removes the API socket either way, and nested_killed_check checks that.
  nested_add "L2_MARKERS=shutdown_markers l2_run $1 'scenario=fio qd=16 size=30M runtime=900 marker=SHUTDOWN' --disk=$(nested_image "$1.img" 32M),cache=none --jail=off"
}
nsc_api_shutdown_check() {
  nested_killed_check "$1" 0 before-shutdown
  grep -q 'vm shutdown --grace-ms 1000: state: STOPPING' "$NESTED_RUNS/$1.events" ||
    linux_fail "$1" "vmmctl vm shutdown did not answer 'state: STOPPING'"
  grep -q 'stopped by the API' "$NESTED_RUNS/$1.qemu.log" || linux_fail "$1" "the VMM did not say the API stopped it"
}

# The sandbox (docs/security.md): the VMM jailed (every run here is: the jail is on by default
# as root; this one names its user, a media directory and cgroup limits) serves fio to its guest.
# Read from L1 while fio runs: the launcher is the supervisor and the VMM its child, PID 1 of its
# own PID namespace; each thread's /proc status shows the user, NO_NEW_PRIVS and the seccomp
# filters stacked on it (1, the process's, on the main thread; 2 on vCPU and iothreads); the VMM's
# root holds nothing but the media directory; its mount, network and PID namespaces are not L1's;
# it runs in a cgroup of its own with the limits asked for, which is gone once it has exited.
nsc_jail_job() {
  cat >> "$NESTED_JOB" <<'EOF'
jail_markers() {
  case "$1" in
    JAILED) l2_spawn jail_report ;;
  esac
}
jail_report() {
  sleep 1
  pid=$(l2_pid)
  supervisor=$(cat "$L2_DIR/pid")
  l2_action "supervisor: $( [ "$pid" != "$supervisor" ] && echo yes || echo no)" \
    "uid=$(awk '/^Uid:/ {print $2}' /proc/"$supervisor"/status)" \
    "filters=$(awk '/^Seccomp_filters:/ {print $2}' /proc/"$supervisor"/status)" \
    "above_stdio=$(for fd in /proc/"$supervisor"/fd/*; do
        [ "${fd##*/}" -gt 2 ] && readlink "$fd" | sed 's/:.*//'; done | sort | tr '\n' ' ')"
  l2_action "nspid: $(awk '/^NSpid:/ {print $3}' /proc/"$pid"/status)"
  for task in /proc/"$pid"/task/*; do
    l2_action "thread $(cat "$task/comm") $(awk '/^Uid:/ {u = $2} /^NoNewPrivs:/ {n = $2}
      /^Seccomp_filters:/ {f = $2} END {print "uid=" u, "no_new_privs=" n, "filters=" f}' "$task/status")"
  done
  l2_action "root holds: $(cd /proc/"$pid"/root && find . -mindepth 1 | sort | tr '\n' ' ')"
  for ns in mnt net pid; do
    if [ "$(readlink /proc/"$pid"/ns/$ns)" = "$(readlink /proc/self/ns/$ns)" ]; then
      l2_action "namespace $ns: L1's"
    else
      l2_action "namespace $ns: its own"
    fi
  done
  cgroup=$(sed -n 's/^0:://p' /proc/"$pid"/cgroup)
  # Besides the VMM, KVM's own per-VM kernel threads (kvm-nx-lpage-recovery) join the cgroup
  # of the process that made the VM, so that their work counts against its limits.
  procs="" kernel=""
  for proc in $(cat /sys/fs/cgroup"$cgroup"/cgroup.procs); do
    if [ "$(awk '/^PPid:/ {print $2}' /proc/"$proc"/status)" = 2 ]; then
      kernel="$kernel $(cat /proc/"$proc"/comm)"
    else
      procs="$procs $proc"
    fi
  done
  l2_action "cgroup: $cgroup memory.max=$(cat /sys/fs/cgroup"$cgroup"/memory.max)" \
    "pids.max=$(cat /sys/fs/cgroup"$cgroup"/pids.max) processes=${procs# } vmm=$pid" \
    "kernel threads:$kernel"
}
mkdir -p /tmp/jail-media
EOF
  nested_add "L2_MARKERS=jail_markers l2_run $1 'scenario=fio qd=4 size=4M runtime=900 marker=JAILED' --disk=$(nested_image "$1.img" 32M),cache=none --jail=on --jail-user=65534:65534 --media-dir=/tmp/jail-media --jail-cgroup=memory.max=256M,pids.max=64"
  nested_add "echo \"L2-ACTION $1 cgroups left: \$(find /sys/fs/cgroup/microvm -mindepth 1 -type d | tr '\\n' ' ')\""
}
nsc_jail_check() {
  nested_check_pass "$1" fio || return
  linux_expect "$1" fio_verify ok
  local events=$NESTED_RUNS/$1.events ns
  grep '^L2-ACTION' "$events" | cut -d' ' -f3- | sed 's/^/    L1: /'
  grep -q 'root holds: ./tmp ./tmp/jail-media $' "$events" ||
    linux_fail "$1" "the VMM's root holds more than its media directory"
  for ns in mnt net pid; do
    grep -q "namespace $ns: its own" "$events" || linux_fail "$1" "the VMM shares L1's $ns namespace"
  done
  grep -q 'nspid: 1$' "$events" || linux_fail "$1" "the VMM is not PID 1 of its namespace"
  # The supervisor: root (it removes the cgroup), its own filter; besides stdio it holds only its
  # pipe to the VMM and the cgroups' parent directory.
  grep -q 'supervisor: yes uid=0 filters=1 above_stdio=/sys/fs/cgroup/microvm pipe $' "$events" ||
    linux_fail "$1" "the launcher is not a filtered supervisor holding only its pipe and cgroup"
  grep -q 'thread microvm uid=65534 no_new_privs=1 filters=1$' "$events" ||
    linux_fail "$1" "the main thread is not uid 65534 with NO_NEW_PRIVS and the process filter"
  grep -q 'thread vcpu0 uid=65534 no_new_privs=1 filters=2$' "$events" ||
    linux_fail "$1" "vCPU 0 does not have its own seccomp filter"
  grep -q 'thread scsi-io0 uid=65534 no_new_privs=1 filters=2$' "$events" ||
    linux_fail "$1" "the iothread does not have its own seccomp filter"
  if grep '^L2-ACTION [^ ]* thread' "$events" | grep -qv 'uid=65534'; then
    linux_fail "$1" "a thread of the jailed VMM is not uid 65534"
  fi
  grep -Eq 'cgroup: /microvm/microvm-[0-9]+ memory.max=268435456 pids.max=64 processes=([0-9]+) vmm=\1 kernel threads:( kvm-[a-z-]+-\1)*$' "$events" ||
    linux_fail "$1" "the VMM is not alone in a cgroup of its own with the limits asked for"
  grep -q 'cgroups left: $' "$events" || linux_fail "$1" "the VMM's cgroup is left after it exited"
}

# The guest's own power-off (poweroff -f): needs a power-off path Linux knows (ACPI PM1a_CNT
# SLP_EN); the VMM must then exit with status 0.
nsc_poweroff_job() {
  nested_add "L2_EXIT_GRACE=15 l2_run $1 'scenario=probe final=poweroff' --disk=$(nested_image "$1.img" 16M),cache=none"
}
nsc_poweroff_check() {
  nested_check_pass "$1" probe
  linux_report dmesg_bad_count
}

# --- a real Debian system (tools/make-debian-image) ----------------------------------------------
# Debian 12 with its own kernel, initramfs-tools initrd, systemd, udev and cloud-init, its root disk
# given to L1 as a snapshot disk (/dev/vdX) that our VMM (or QEMU, the reference) uses whole. The
# image's microvm-report service (tests/debian/rootfs/microvm-report) prints RESULT lines once
# systemd's start-up has ended, then runs the actions of microvm.action=. The image comes from
# NESTED_DEBIAN (a tools/make-debian-image output directory; tools/test and tools/nested make it).
NESTED_DEBIAN_ARGS="root=LABEL=debian-root ro systemd.mask=serial-getty@ttyS0.service microvm.report=1"

nested_debian_image() {  # [make-debian-image]: NESTED_DEBIAN, or made into NESTED_WORK/debian
  [ -n "${NESTED_DEBIAN:-}" ] && return 0
  NESTED_DEBIAN=$NESTED_WORK/debian
  "${1:-${NESTED_MAKE_DEBIAN_IMAGE:-tools/make-debian-image}}" "$NESTED_DEBIAN"
}

nested_debian_files() {  # the kernel, initrd and discs in the work disk (once per boot)
  [ -n "${NESTED_DEBIAN:-}" ] && [ -r "$NESTED_DEBIAN/root.img" ] ||
    { echo "FAIL: no Debian image (NESTED_DEBIAN=${NESTED_DEBIAN:-unset}; tools/make-debian-image makes one)"; exit 1; }
  [ -e "$NESTED_DISK/debian-vmlinuz" ] && return
  cp "$NESTED_DEBIAN/vmlinuz" "$NESTED_DISK/debian-vmlinuz"
  cp "$NESTED_DEBIAN/initrd.img" "$NESTED_DISK/debian-initrd.img"
  "${NESTED_MAKE_DEBIAN_IMAGE:-tools/make-debian-image}" --disc "$NESTED_DISK/SWAPDISC.iso" --label SWAPDISC --content "the swapped disc" || exit 1
  cat >> "$NESTED_JOB" <<'JOB'
# The Debian guest's requests (tests/debian/rootfs/microvm-report): a disc swap, and an eject of
# the drive it holds locked. A Watch of cd0 runs from the swap on; debian_watch prints it after.
debian_markers() {
  case "$1" in
    DEBIAN-BOOT\ *)
      # When, from the VMM's start, the guest's start-up ended (with the guest's clock at this
      # line, RESULT debian_marker_uptime, this dates multi-user.target in L1's wall time).
      l2_action "boot ${1#DEBIAN-BOOT } wall=$(l2_seconds_since "$L2_T0" 2)"
      echo "L2-KVM $L2_NAME boot${1#DEBIAN-BOOT } $(l2_kvm_counters)"
      # The API answers in every boot (after a restart too), and the CD holds what it held.
      [ "${L2_VMM:-microvm}" = qemu ] ||
        l2_action "boot ${1#DEBIAN-BOOT }: $(l2_ctl media status cd0 2>&1 | grep -E '^(medium|tray):' | tr -s ' \n' ' ')" ;;
    DEBIAN-SWAP\ *)
      l2_spawn l2_ctl media watch cd0 > "$L2_DIR/watch.log" 2>/dev/null
      sleep 1
      l2_action "swap: $(l2_ctl media eject cd0 --force 2>&1) / $(l2_ctl media insert cd0 "/l1disk/${1#DEBIAN-SWAP }.iso" 2>&1)" ;;
    DEBIAN-EJECT-REQUEST)
      l2_spawn debian_eject_request ;;
  esac
}
debian_eject_request() {
  l2_action "eject request: $(l2_ctl --timeout 150 media eject cd0 --wait 2>&1 | tr '\n' ' ')"
}
debian_watch() {  # run
  [ -r "/tmp/l2-$1/watch.log" ] || return 0
  while IFS= read -r line; do echo "L2-ACTION $1 watch: ${line#* }"; done < "/tmp/l2-$1/watch.log"
}
JOB
}

nested_debian_run() {  # run "microvm.action=..." VMM-FLAGS...: one boot of the image, with the
  # NoCloud seed /l1disk/seed-RUN.iso (hostname RUN) for the flags to use
  local run=$1 args=$2
  shift 2
  "${NESTED_MAKE_DEBIAN_IMAGE:-tools/make-debian-image}" --seed "$NESTED_DISK/seed-$run.iso" --hostname "$run" || exit 1
  nested_add "L2_MEM=1G L2_TIMEOUT=1200 L2_KERNEL=/l1disk/debian-vmlinuz L2_INITRD=/l1disk/debian-initrd.img L2_MARKERS=debian_markers ${NESTED_DEBIAN_VMM:+L2_VMM=$NESTED_DEBIAN_VMM }l2_run $run '$NESTED_DEBIAN_ARGS $args' $*"
  nested_add "debian_watch $run"
}

nested_debian_check() {  # run: the system came up clean, cloud-init used our CD's seed
  nested_check "$1" 0 || return
  linux_expect "$1" debian_state running
  linux_expect "$1" debian_failed_count 0
  linux_expect "$1" debian_cloud done
  linux_expect "$1" debian_hostname "$1"
  linux_expect "$1" debian_seed "seed_$1"
  linux_report debian_boot debian_multi_user_seconds debian_failed debian_action debian_cloud_warning
}

nested_debian_media_check() {  # run bus
  linux_expect "$1" debian_swapped "label=SWAPDISC content=the_swapped_disc"
  linux_expect "$1" debian_guest_eject ok
  linux_expect "$1" debian_eject_request "tray opened by udev"
  local events=$NESTED_RUNS/$1.events
  grep '^L2-ACTION' "$events" | cut -d' ' -f3- | sed 's/^/    L1: /'
  grep -q "swap: cd0 cdrom $2 .* / cd0 cdrom $2 .*SWAPDISC.iso" "$events" ||
    linux_fail "$1" "the API did not swap cd0 ($2) to SWAPDISC.iso"
  grep -q "watch: cd0 TRAY_OPENED by guest" "$events" ||
    linux_fail "$1" "the Watch stream did not show the guest's eject (TRAY_OPENED by guest)"
  grep -q "watch: cd0 EJECT_REQUESTED by host" "$events" ||
    linux_fail "$1" "the Watch stream did not show the API's eject request"
  grep -q "eject request: .*was asked to eject.* cd0 cdrom $2 .*no medium" "$events" ||
    linux_fail "$1" "vmmctl media eject --wait did not end with cd0 empty after the guest agreed"
}

# Root on virtio-scsi (two vCPUs, two request queues on two iothreads, cache=none), the seed and
# the swapped disc on a virtio-scsi CD; the guest powers off at the end.
nsc_debian_scsi_job() {
  nested_debian_files
  nested_l1_drive "$NESTED_DEBIAN/root.img"
  nested_debian_run "$1" "microvm.action=media,poweroff microvm.swap=SWAPDISC" \
    --vcpus=2 --scsi-queues=2 --iothreads=2 "--disk=$NESTED_L1_DEV,cache=none" "--cdrom=/l1disk/seed-$1.iso" \
    --media-dir=/l1disk
}
nsc_debian_scsi_check() {
  nested_debian_check "$1" || return
  nested_debian_media_check "$1" virtio-scsi
  linux_expect "$1" debian_action poweroff
}

# Root on IDE (the primary master), the seed and the swapped disc on the IDE CD (secondary master);
# then systemctl reboot with --on-reboot=restart: the VMM builds the machine again in the same
# process and the guest boots a second time, to multi-user, on the same disk with the same (now
# empty) CD drive and the same API, and powers off. (debian-scsi powers off; the default
# --on-reboot=exit is checked by //tests/integration:scsi_test.)
nsc_debian_ide_job() {
  nested_debian_files
  nested_l1_drive "$NESTED_DEBIAN/root.img"
  nested_debian_run "$1" "microvm.action=media,reboot microvm.then=poweroff microvm.swap=SWAPDISC" \
    "--ide-disk=$NESTED_L1_DEV,cache=none" "--ide-cdrom=/l1disk/seed-$1.iso" --on-reboot=restart \
    --media-dir=/l1disk
}
nsc_debian_ide_check() {
  nested_debian_check "$1" || return
  nested_debian_media_check "$1" ide
  linux_expect "$1" debian_action "reboot boot=1"
  local events=$NESTED_RUNS/$1.events
  grep -q "microvm: guest reset (.*), restarting the guest (--on-reboot=restart)" "$NESTED_RUNS/$1.qemu.log" ||
    linux_fail "$1" "the VMM did not restart the guest on its reboot"
  [ "$(linux_results debian_boot_number | tr '\n' ' ')" = "1 2 " ] ||
    linux_fail "$1" "expected boots 1 and 2, the guest reported: $(linux_results debian_boot_number | tr '\n' ' ')"
  [ "$(linux_results debian_state | tr '\n' ' ')" = "running running " ] ||
    linux_fail "$1" "systemd was not running after each boot: $(linux_results debian_state | tr '\n' ' ')"
  [ "$(linux_results debian_action | tail -n 1)" = poweroff ] ||
    linux_fail "$1" "the second boot did not power off"
  # The first boot ended with the drive empty (the eject request): a restart keeps the media as
  # they are, it does not go back to the command line's seed.
  grep -q "boot 2: medium: none " "$events" ||
    linux_fail "$1" "after the restart the API did not show cd0 as the first boot left it (no medium)"
}

# The reference: the same image in QEMU 7.2 on the same L1 KVM, root on virtio-scsi, the seed on
# scsi-cd, QEMU's CPU as NESTED_QEMU_CPU says. A failure here is the image's (or the tier's), not
# our VMM's.
nsc_debian_qemu_job() {
  nested_debian_files
  if [ ! -e "$NESTED_DISK/qemu" ]; then
    nested_qemu_bundle "$NESTED_DISK/qemu" || exit 1
    nested_add "L2_QEMU='$NESTED_QEMU_CMD'"
  fi
  nested_l1_drive "$NESTED_DEBIAN/root.img"
  NESTED_DEBIAN_VMM=qemu nested_debian_run "$1" "microvm.action=poweroff" -M pc -cpu "$NESTED_QEMU_CPU" -smp 2 \
    -device virtio-scsi-pci,id=scsi0 \
    "-drive file=$NESTED_L1_DEV,if=none,id=hd0,format=raw,cache=none,aio=io_uring -device scsi-hd,drive=hd0,bus=scsi0.0" \
    "-drive file=/l1disk/seed-$1.iso,if=none,id=cd0,format=raw,media=cdrom,readonly=on -device scsi-cd,drive=cd0,bus=scsi0.0"
}
nsc_debian_qemu_check() {
  nested_debian_check "$1" || return
  linux_expect "$1" debian_action poweroff
}

# --- firmware boot (docs/firmware.md) ------------------------------------------------------------
# SeaBIOS (Debian's bios-256k.bin, the one QEMU's -M pc loads) boots a CD made by grub-mkrescue
# (tools/make-boot-iso): El Torito hands GRUB the disc, GRUB reads Debian's kernel and the test
# initramfs from it through the BIOS disk services (SeaBIOS's ATAPI or virtio-scsi driver) and
# starts Linux, whose /init checks a file on the disc it booted from and powers off through ACPI.
# The same discs in QEMU 7.2 (-M pc, the same firmware file) are the reference. Each run reports
# when SeaBIOS, GRUB, the kernel and /init first spoke (L2-MARK, seconds since the VMM started).
# QEMU's machine for the firmware runs: the PC, QEMU's CPU, and SeaBIOS's screen on COM1 as ours
# puts it (fw_cfg etc/sercon-port, written by nested_fw_files).
NESTED_FW_QEMU="-M pc -cpu $NESTED_QEMU_CPU -fw_cfg name=etc/sercon-port,file=/l1disk/sercon-port"

nested_fw_files() {  # once per boot: the firmware, QEMU, and discs A and B (NESTED_FW_MD5_A, _B)
  [ -e "$NESTED_DISK/bios-256k.bin" ] || cp -L /usr/share/seabios/bios-256k.bin "$NESTED_DISK/" || exit 1
  # QEMU's SeaBIOS puts its screen on COM1 as ours does (fw_cfg etc/sercon-port, 16 bits).
  printf '\370\003' > "$NESTED_DISK/sercon-port"
  if [ ! -e "$NESTED_DISK/qemu" ]; then
    nested_qemu_bundle "$NESTED_DISK/qemu" || exit 1
    nested_add "L2_QEMU='$NESTED_QEMU_CMD'"
  fi
  local disc sum
  for disc in A B; do
    [ -e "$NESTED_DISK/fw-$disc.iso" ] && continue
    # Not quiet: the kernel's first line ("Linux version") is one of the milestones timed.
    sum=$("${NESTED_MAKE_BOOT_ISO:-tools/make-boot-iso}" --kernel "$LINUX_KERNEL" --initrd "$NESTED_L2_INITRAMFS" \
      --label "DISC-$disc" --file "disc.txt=boot disc $disc" \
      --cmdline "console=ttyS0 reboot=k panic=1 guest_timeout=560 final=poweroff final_marker=1 scenario=iso iso_file=disc.txt iso_md5=$(printf 'boot disc %s\n' "$disc" | md5sum | cut -d' ' -f1)" \
      "$NESTED_DISK/fw-$disc.iso") || { echo "FAIL: tools/make-boot-iso"; exit 1; }
    echo "    fw-$disc.iso: $(stat -c %s "$NESTED_DISK/fw-$disc.iso") bytes, $sum"
  done
}

# L2_TIMEOUT 300 s: these CD boots take 20-60 s (IDE's GRUB reads in PIO), and a hung run is
# killed after it; at the default 600 s, the hung QEMU reference of CI 2026-12-07 (fw-qemu-scsi-cd,
# run again and passed) took a third of the firmware L1 boot's 1800 s.
nested_fw_run() {  # run vmm flags...: one firmware boot of our VMM or QEMU
  local run=$1 vmm=$2
  shift 2
  nested_fw_files
  nested_add "L2_TIMEOUT=300 L2_FIRMWARE=/l1disk/bios-256k.bin L2_VMM=$vmm l2_run $run '' $*"
}

nested_fw_check() {  # run disc [bus]: the guest booted from disc DISC through GRUB and passed
  nested_check_pass "$1" iso || return
  local log=$NESTED_RUNS/$1.log
  grep -q "GRUB-MENU DISC-$2" "$log" || linux_fail "$1" "GRUB from disc $2 never spoke"
  grep -q "Command line: BOOT_IMAGE=/boot/vmlinuz .*iso_file=disc.txt" "$log" ||
    linux_fail "$1" "the kernel did not get GRUB's command line"
  linux_expect "$1" iso ok
  [ -z "${3:-}" ] || grep -q "Booting from DVD/CD" "$log" || linux_fail "$1" "SeaBIOS did not boot the CD"
  nested_fw_report "$1"
}

nested_fw_report() {  # run: the milestones, in seconds from the VMM's start
  local events=$NESTED_RUNS/$1.events m line=""
  for m in firmware grub kernel init; do
    line="$line $m $(awk -v m="$m" '$3 == m { sub(/seconds=/, "", $4); print $4; exit }' "$events" | sed 's/^$/-/')"
  done
  echo "    milestones (s since start):$line"
}

# Our VMM: the IDE CD, behind a blank IDE disk the boot order (--boot) passes over (one blank
# image for every run: nothing writes it).
nsc_fw_ide_cd_job() {
  nested_fw_run "$1" microvm "--ide-disk=$(nested_image fw-blank.img 16M) --ide-cdrom=/l1disk/fw-A.iso --boot=cd0"
}
nsc_fw_ide_cd_check() { nested_fw_check "$1" A cd; }

# The virtio-scsi CD, behind a blank virtio-scsi disk.
nsc_fw_scsi_cd_job() {
  nested_fw_run "$1" microvm "--vcpus=2 --disk=$(nested_image fw-blank.img 16M) --cdrom=/l1disk/fw-A.iso --boot=cd0"
}
nsc_fw_scsi_cd_check() {
  nested_fw_check "$1" A cd
  # Two vCPUs: SeaBIOS counts them (fw_cfg, CMOS) and Linux starts the second from the MADT.
  linux_expect "$1" cpus_online 0-1
}

# Insert a disc, reset, boot from it: disc A boots; when its guest is done (@@FINAL) disc B goes
# into the drive through the API and the API resets the VM; SeaBIOS then boots disc B in the same
# VMM process, whose guest powers off.
nsc_fw_cd_reset_job() {
  cat >> "$NESTED_JOB" <<'EOF'
fw_swap_and_reset() {
  if [ ! -e "$L2_DIR/swapped" ]; then
    : > "$L2_DIR/swapped"
    l2_action "eject: $(l2_ctl media eject cd0 --force 2>&1)"
    l2_action "insert: $(l2_ctl media insert cd0 /l1disk/fw-B.iso 2>&1)"
    l2_action "reset: $(l2_ctl vm reset 2>&1)"
  else
    echo ok >&3
  fi
}
L2_EXIT_GRACE=300
EOF
  nested_fw_files
  nested_add "L2_ON_FINAL=fw_swap_and_reset L2_FIRMWARE=/l1disk/bios-256k.bin l2_run $1 '' --ide-cdrom=/l1disk/fw-A.iso --media-dir=/l1disk"
  nested_add "L2_EXIT_GRACE=20"
}
nsc_fw_cd_reset_check() {
  nested_fw_check "$1" B || return
  local log=$NESTED_RUNS/$1.log events=$NESTED_RUNS/$1.events
  grep -q "GRUB-MENU DISC-A" "$log" || linux_fail "$1" "disc A did not boot first"
  [ "$(grep -c '^SCENARIO iso PASS' "$log")" = 2 ] || linux_fail "$1" "expected two passing boots (disc A, then disc B)"
  grep -q "insert: cd0 cdrom " "$events" || linux_fail "$1" "vmmctl media insert failed: $(grep 'insert:' "$events")"
  grep -q "reset: " "$events" && ! grep -q "reset: .*vmmctl:" "$events" ||
    linux_fail "$1" "vmmctl vm reset failed: $(grep 'reset:' "$events")"
  # Disc B's file, read by the second boot's guest.
  [ "$(linux_results iso_md5 | tail -n 1)" = "$(printf 'boot disc B\n' | md5sum | cut -d' ' -f1)" ] ||
    linux_fail "$1" "the second boot did not read disc B"
}

# The reference: the same discs in QEMU 7.2, -M pc (IDE CD as -cdrom; virtio-scsi CD with a
# bootindex), the same firmware file and QEMU's CPU as NESTED_QEMU_CPU says.
nsc_fw_qemu_ide_cd_job() {
  nested_fw_run "$1" qemu "$NESTED_FW_QEMU -drive file=$(nested_image fw-blank.img 16M),if=ide,format=raw,index=0 -drive file=/l1disk/fw-A.iso,if=ide,index=2,media=cdrom,format=raw,readonly=on -boot order=d"
}
nsc_fw_qemu_ide_cd_check() { nested_fw_check "$1" A cd; }
nsc_fw_qemu_scsi_cd_job() {
  nested_fw_run "$1" qemu "$NESTED_FW_QEMU -smp 2 -device virtio-scsi-pci,id=scsi0 -drive file=$(nested_image fw-blank.img 16M),if=none,id=hd0,format=raw -device scsi-hd,drive=hd0,bus=scsi0.0,bootindex=2 -drive file=/l1disk/fw-A.iso,if=none,id=cd0,format=raw,media=cdrom,readonly=on -device scsi-cd,drive=cd0,bus=scsi0.0,bootindex=1"
}
nsc_fw_qemu_scsi_cd_check() { nsc_fw_scsi_cd_check "$1"; }

# A Debian disk with GRUB in its MBR (tools/make-debian-image's disk.img; its L1 snapshot disk):
# SeaBIOS boots the disk, GRUB (the image's own grub-pc-bin) finds the root file system by its
# label, reads its grub.cfg, kernel and initrd through the BIOS and starts Debian, which reaches
# multi-user.target with cloud-init from the seed on our CD and powers off (microvm.action=poweroff
# in that grub.cfg). On virtio-scsi and on IDE, and in QEMU as the reference.
nested_fw_debian_run() {  # run vmm flags...
  local run=$1 vmm=$2
  shift 2
  nested_fw_files
  nested_debian_files
  "${NESTED_MAKE_DEBIAN_IMAGE:-tools/make-debian-image}" --seed "$NESTED_DISK/seed-$run.iso" --hostname "$run" || exit 1
  nested_add "L2_MEM=1G L2_TIMEOUT=1200 L2_FIRMWARE=/l1disk/bios-256k.bin L2_MARKERS=debian_markers L2_VMM=$vmm l2_run $run '' $*"
}
nested_fw_debian_check() {  # run
  nested_debian_check "$1" || return
  linux_expect "$1" debian_action poweroff
  grep -q "Booting from Hard Disk" "$NESTED_RUNS/$1.log" || linux_fail "$1" "SeaBIOS did not boot the disk"
  grep -q "GRUB-MENU debian-disk" "$NESTED_RUNS/$1.log" || linux_fail "$1" "GRUB from the disk never spoke"
  grep -q "Command line: BOOT_IMAGE=/boot/vmlinuz-.* root=LABEL=debian-root" "$NESTED_RUNS/$1.log" ||
    linux_fail "$1" "the kernel did not get the disk's GRUB command line"
  nested_fw_report "$1"
}
# One vCPU in every firmware Debian boot: L1's kernel fails under the emulation in long two-vCPU
# Debian boots, under either VMM, and has not in one-vCPU ones (docs/nested.md, "Soak"). CI of
# 2026-12-06 (007c834) lost its first two firmware L1 boots that way: a stack guard page hit in
# our vcpu1 thread during fw-debian-ide (200 s: GRUB reads 28 MB in 512-byte PIO sectors), then
# fw-debian-scsi faulting twice and L1 stalling after it. The firmware's SMP path (SeaBIOS and
# Linux bringing up the second CPU from our tables) runs in the short CD boots instead
# (fw-scsi-cd, fw-qemu-scsi-cd: two vCPUs, both online).
nsc_fw_debian_scsi_job() {
  nested_l1_drive "$NESTED_DEBIAN/disk.img"
  nested_fw_debian_run "$1" microvm "--disk=$NESTED_L1_DEV,cache=none" "--cdrom=/l1disk/seed-$1.iso"
}
nsc_fw_debian_scsi_check() { nested_fw_debian_check "$1"; }
nsc_fw_debian_ide_job() {
  nested_l1_drive "$NESTED_DEBIAN/disk.img"
  nested_fw_debian_run "$1" microvm "--ide-disk=$NESTED_L1_DEV,cache=none" "--ide-cdrom=/l1disk/seed-$1.iso"
}
nsc_fw_debian_ide_check() { nested_fw_debian_check "$1"; }
nsc_fw_debian_qemu_job() {
  nested_l1_drive "$NESTED_DEBIAN/disk.img"
  nested_fw_debian_run "$1" qemu "$NESTED_FW_QEMU" -device virtio-scsi-pci,id=scsi0 \
    "-drive file=$NESTED_L1_DEV,if=none,id=hd0,format=raw,cache=none,aio=io_uring -device scsi-hd,drive=hd0,bus=scsi0.0" \
    "-drive file=/l1disk/seed-$1.iso,if=none,id=cd0,format=raw,media=cdrom,readonly=on -device scsi-cd,drive=cd0,bus=scsi0.0"
}
nsc_fw_debian_qemu_check() { nested_fw_debian_check "$1"; }

# Debian's installer from the IDE CD and the virtio-scsi CD (tools/make-installer-iso: the netboot kernel and initrd that
# Debian 12's mini.iso carries, behind ISOLINUX as mini.iso boots them): SeaBIOS boots the disc,
# ISOLINUX reads 50 MB through the BIOS disk services, and the text installer starts on the serial
# console and draws its first screen, "Select a language". A key goes in on the serial input (Enter:
# English), and the next screen, "Select your location", must follow; then the VMM is stopped. QEMU
# 7.2 with the same disc and firmware is the reference.
nested_installer_run() {  # run vmm flags...
  local run=$1 vmm=$2
  shift 2
  nested_fw_files
  if [ ! -e "$NESTED_DISK/installer.iso" ]; then
    if [ -n "${NESTED_INSTALLER_ISO:-}" ]; then
      cp "$NESTED_INSTALLER_ISO" "$NESTED_DISK/installer.iso" || exit 1
    else
      "${NESTED_MAKE_INSTALLER_ISO:-tools/make-installer-iso}" "$NESTED_DISK/installer.iso" ||
        { echo "FAIL: tools/make-installer-iso"; exit 1; }
    fi
    echo "    installer.iso: $(stat -c %s "$NESTED_DISK/installer.iso") bytes"
    cat >> "$NESTED_JOB" <<'EOF'
fw_installer_screens() {
  # 400 s: four times the IDE CD's usual time under a loaded L1. A boot that stops short is
  # reported as a hang, with what the threads and (with the fault trace) the vCPUs did last, and
  # leaves the L1 boot time enough for the runs after it (CI of 2026-12-06 waited 900 s, and its
  # L1 boot ran out of time during QEMU's reference run).
  l2_wait_screen "Select a language" 400 ||
    { l2_hung "no 'Select a language' screen after 400 s"; return; }
  sleep 2
  l2_keys '\r'
  l2_wait_screen "Select your location" 300 ||
    { l2_hung "no 'Select your location' screen after 300 s"; return; }
  l2_stop
}
EOF
  fi
  nested_add "L2_MEM=1G L2_TIMEOUT=800 L2_FIRMWARE=/l1disk/bios-256k.bin L2_ON_SCREEN=fw_installer_screens L2_VMM=$vmm l2_run $run '' $*"
}
nested_installer_check() {  # run
  local log=$NESTED_RUNS/$1.log events=$NESTED_RUNS/$1.events
  nested_select "$1"
  grep -q "Booting from DVD/CD" "$log" || { linux_fail "$1" "SeaBIOS did not boot the CD"; return 1; }
  # ISOLINUX writes to COM1 itself and through the BIOS screen, whose copy (sercon) interleaves
  # cursor moves: without the escape sequences its line reads whole.
  # (grep reads it all: with -q, sed's SIGPIPE would fail the pipeline under pipefail)
  sed 's/\x1b\[[0-9;]*[A-Za-z]//g' "$log" | grep "ISOLINUX-MENU debian-installer" >/dev/null ||
    { linux_fail "$1" "ISOLINUX never spoke"; return 1; }
  grep -q "Linux version " "$log" || { linux_fail "$1" "the installer's kernel never started"; return 1; }
  if grep -q "^L2-HUNG $1 " "$events"; then linux_fail "$1" "the VMM hung"; return 1; fi
  local screen
  for screen in "Select a language" "Select your location"; do
    grep -q "^L2-ACTION $1 screen: $screen after " "$events" ||
      { linux_fail "$1" "no '$screen' screen: $(grep "screen: " "$events" | tail -n 1)"; return 1; }
  done
  echo "    screens (s since start): $(sed -n "s/^L2-ACTION $1 screen: \(.*\) after \([0-9]*\) s$/\1 \2;/p" "$events" | tr '\n' ' ')"
}
nsc_fw_installer_job() {
  nested_installer_run "$1" microvm "--ide-cdrom=/l1disk/installer.iso"
}
nsc_fw_installer_check() { nested_installer_check "$1"; }
nsc_fw_scsi_installer_job() {
  nested_installer_run "$1" microvm "--cdrom=/l1disk/installer.iso"
}
nsc_fw_scsi_installer_check() { nested_installer_check "$1"; }
# QEMU's reference reads the disc on virtio-scsi, with SMM off: on its IDE CD, under the emulated
# SVM, QEMU's L2 hung in ISOLINUX's load twice and triple-faulted once with an L1 kernel address
# in its RIP (SMM on), in four tries; on virtio-scsi it passes.
nsc_fw_qemu_installer_job() {
  nested_installer_run "$1" qemu "${NESTED_FW_QEMU/-M pc/-M pc,smm=off} -device virtio-scsi-pci,id=scsi0 -drive file=/l1disk/installer.iso,if=none,id=cd0,format=raw,media=cdrom,readonly=on -device scsi-cd,drive=cd0,bus=scsi0.0,bootindex=1"
}
nsc_fw_qemu_installer_check() { nested_installer_check "$1"; }
