#!/bin/busybox sh
# /init of the Linux guest tests (tools/make-linux-initramfs packs it): loads the virtio-scsi, sd,
# sr and isofs modules, waits for the SCSI disk and CD-ROM, runs the scenario named on the kernel
# command line and powers off. Everything the host checks is printed on the console as
#   RESULT <key>=<value>          (the value is the rest of the line)
#   SCENARIO <name> PASS | SCENARIO <name> FAIL <reason>     (last; then the guest powers off)
#   @@EJECT-NOW / @@INSERT-NOW    (media: the host answers by ejecting / inserting the disc)
#   @@HOST-CHANGE / @@HOST-REMOVE (hostcd: the host changes the disc in its drive / removes the drive)
#
# Kernel command-line arguments (key=value):
#   scenario=probe|fio|fio-bench|fs|discard|iso|cd-read|media|hostcd|reset|bench   (required)
#   disk=sdX cd=srN        default: the first SCSI disk / CD-ROM
#   wait=sd,sr             devices to wait for (default: per scenario); wait_s=30 bounds the wait
#   guest_timeout=300      seconds before the guest gives up and powers off
#   verbose=1              leave kernel messages on the console (default: only emergencies)
#   MODULE.PARAM=VALUE     passed to insmod MODULE (e.g. libata.fua=1): modprobe would read them
#                          from /proc/cmdline, busybox insmod does not
#   final=poweroff|reboot  how the guest ends (poweroff -f, or reboot -f: a VMM without ACPI power-off
#                          ends on the i8042 reset that reboot=k asks for)
#   final_marker=1         before ending, print @@FINAL and wait (at most 60 s) for a line on the
#                          console's input: the host reads the VMM's statistics meanwhile
#   interrupts=1           at the end, the virtio and ata lines of /proc/interrupts as RESULT irq
#   dmesg_show=REGEX       at the end, the kernel lines matching REGEX (grep -E) as RESULT dmesg_show
#   At the end of every scenario: RESULT dmesg_bad=LINE for each kernel line with WARNING, BUG,
#   Call Trace, I/O error, ACPI Error or ACPI BIOS Error, RESULT dmesg_bad_count=N, RESULT cpus_online,
#   RESULT module_param=MODULE.PARAM=VALUE (as the module has it) for each MODULE.PARAM= argument
#   fio:       qd=1 size=64M runtime=60 engine=libaio offset=0 marker=NAME (@@NAME before fio starts)
#              numjobs=N: N jobs, job i on CPU i writing its own size= region after the previous one
#   fio-bench: qd=1 seconds=5 size=64M rw=randwrite bs=4k sync=1 engine=libaio
#   limits:    phases=2 seconds=10 qd=16 disks=1: per phase P, @@LIMIT-PHASE P (the host answers
#              with a line once it has set the drives' I/O limits for it), then fio randread 4k at
#              depth qd for `seconds`, one job per disk (the first `disks` SCSI disks, at once):
#              RESULT limit_iops_P (disks=1) or limit_iops_P_diskN for the VMM's Nth disk (LUN N)
#   hotplug:   seconds=90: fio (randrw 4k, depth 4) on the first disk throughout, stopped when
#              the steps below are done, at most `seconds` (RESULT background_fio);
#              @@HOTPLUG-ATTACH (the host attaches a disk and answers): the new sd device appears
#              with no rescan (RESULT attach_seen_seconds, attached_disk), 8 MiB written and
#              verified (crc32c) on it; then random writes on its next 8 MiB and,
#              during them, @@HOTPLUG-DETACH (the host detaches it): the device goes (RESULT
#              detach_seen_seconds) and that fio ends with an error (RESULT detach_fio_status);
#              @@HOTPLUG-REATTACH (the same image attached again, which its lock allows only once
#              released): the first 8 MiB verify again (RESULT reattach_verify)
#   resize:    @@RESIZE-GROW (the host grows the disk through the API and answers): the new size
#              seen with no rescan (RESULT grow_seen_seconds, size_grown), 4 MiB written and
#              verified past the old end (RESULT grown_verify); @@RESIZE-HOST (the host grows the
#              image file and resizes without a size): RESULT size_host; @@RESIZE-SHRINK (a
#              refused shrink): RESULT size_after_shrink; RESULT resize_dmesg, the kernel's lines
#   fs:        fs_mb=4 seed=1
#   iso:       iso_file=NAME iso_md5=HEX
#   iso, media: disc_md5=HEX  md5 of the whole disc (/dev/srN) must equal it (RESULT disc_md5)
#   cd-read:   cd_bs=32K cd_direct=0 cd_passes=1
#   bench:     bench=qd1,qd16,cd (workloads in order; none: only the boot) bench_seconds=10;
#              qdN: fio-bench randwrite 4k
#              O_SYNC libaio at depth N on the disk (qdNbSk: S KiB writes); cd: cd-read of the whole disc (cd_bs),
#              bench_cd_passes=1 times with caches dropped before each. Around
#              each workload W: @@BENCH-BEGIN W / @@BENCH-END W, each answered by the host with a
#              line on the console input (it reads its counters meanwhile), and RESULT bench_W=
#              ios=N kib=N seconds=S iops=N kbs=N irqs=N (interrupts of the virtio/ata lines)
#              requests=N (completed by the guest's block device: reads + writes + flushes)
#   discard:   4 MiB written, blkdiscard of the middle 2 MiB, the 1 MiB on each side must be intact
#              (RESULT discard_mode = sd's provisioning_mode, discard_max_bytes, discard=ok)
#   media:     iso_file iso_md5 iso2_file iso2_md5, media_wait=60 (seconds per phase),
#              media_poll_ms=0 (block events_dfl_poll_msecs: >0 lets sr poll with GET EVENT STATUS)
#   hostcd:    a host drive passed through: disc_md5, iso_file/iso_md5 (the disc), then
#              @@HOST-CHANGE and iso2_file/iso2_md5 (the new disc, of another size), then
#              @@HOST-REMOVE and no medium; media_wait=60, media_poll_ms=500

export PATH=/usr/local/bin:/bin:/sbin:/usr/bin:/usr/sbin
/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /tmp /mnt
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
exec </dev/console >/dev/console 2>&1

uptime_s() { read -r up _ < /proc/uptime; echo "$up"; }
elapsed() { awk -v a="$1" -v b="$(uptime_s)" 'BEGIN { printf "%.2f", b - a }'; }
T_INIT=$(uptime_s)

# key=value arguments become arg_<key> (keys with other characters than [A-Za-z0-9_] are skipped).
for word in $(cat /proc/cmdline); do
  case "$word" in
    *=*)
      key=${word%%=*}
      case "$key" in ''|*[!A-Za-z0-9_]*) continue ;; esac
      eval "arg_$key=\${word#*=}"
      ;;
  esac
done
scenario=${arg_scenario:-none}

result() { echo "RESULT $1=$2"; }
info() { echo "INFO $*"; }
final_report() {  # what every run reports last: suspicious kernel lines, CPUs, interrupts
  local line n=0
  dmesg | grep -E 'WARNING|BUG|Call Trace|I/O error|ACPI Error|ACPI BIOS Error' > /tmp/dmesg.bad
  while IFS= read -r line; do
    result dmesg_bad "$(echo "$line" | sed 's/^\[ *[0-9.]*\] //')"
    n=$((n + 1))
  done < /tmp/dmesg.bad
  result dmesg_bad_count "$n"
  result cpus_online "$(cat /sys/devices/system/cpu/online 2>/dev/null)"
  # MODULE.PARAM=VALUE words: the value the module ended up with (RESULT module_param).
  for line in $(cat /proc/cmdline); do
    case "$line" in ?*.?*=*) ;; *) continue ;; esac
    n=${line%%=*}
    [ ! -r "/sys/module/${n%%.*}/parameters/${n#*.}" ] ||
      result module_param "$n=$(cat "/sys/module/${n%%.*}/parameters/${n#*.}")"
  done
  if [ "${arg_interrupts:-0}" = 1 ]; then
    grep -E 'virtio|ata' /proc/interrupts | sed 's/  */ /g' | while IFS= read -r line; do
      result irq "$line"
    done
    [ -z "$disk" ] || result nr_queues "$(ls "/sys/block/$disk/mq" 2>/dev/null | wc -l)"
  fi
  if [ -n "${arg_dmesg_show:-}" ]; then
    dmesg | grep -E "$arg_dmesg_show" | while IFS= read -r line; do
      result dmesg_show "$line"
    done
  fi
}
finish() {
  sync
  if [ "${arg_final_marker:-0}" = 1 ]; then
    echo "@@FINAL"
    read -r -t 60 _ || info "no answer to @@FINAL within 60 s"
  fi
  [ "${arg_final:-poweroff}" = reboot ] && reboot -f
  poweroff -f
  sleep 2
  echo o > /proc/sysrq-trigger
}
pass() {
  result scenario_seconds "$(elapsed "$T_READY")"
  final_report
  echo "SCENARIO $scenario PASS"
  finish
}
fail() {
  echo "DMESG-TAIL (last 40 kernel lines)"
  dmesg | tail -n 40 | sed 's/^/DMESG /'
  final_report
  echo "SCENARIO $scenario FAIL $*"
  finish
}

[ "${arg_verbose:-0}" = 1 ] || dmesg -n 1
result init_uptime "$T_INIT"
result kernel "$(uname -r)"

# A guest-side bound on the whole run, whatever hangs.
(
  sleep "${arg_guest_timeout:-300}"
  echo "DMESG-TAIL (last 40 kernel lines)"
  dmesg | tail -n 40 | sed 's/^/DMESG /'
  echo "SCENARIO $scenario FAIL guest timeout after ${arg_guest_timeout:-300} s"
  sync
  poweroff -f
) &

# --- modules ---------------------------------------------------------------------------------
while read -r path; do
  name=${path##*/}
  name=${name%.ko}
  params=""
  # Scan targets synchronously while virtio_scsi probes, so that every LUN exists afterwards.
  [ "$name" = scsi_mod ] && params="scan=sync"
  for word in $(cat /proc/cmdline); do
    case "$word" in "$name".?*=*) params="$params ${word#"$name".}" ;; esac
  done
  insmod "$path" $params 2>/tmp/insmod.err || info "insmod $name failed: $(cat /tmp/insmod.err)"
done < /etc/modules.load
result modules_uptime "$(uptime_s)"

# --- devices ---------------------------------------------------------------------------------
case "$scenario" in
  probe|fio|fio-bench|fs|discard|reset|limits|hotplug|resize) default_wait=sd ;;
  bench) default_wait=$(case ",${arg_bench:-qd1,qd16,cd}" in *,qd*) printf sd ;; esac
                        case ",${arg_bench:-qd1,qd16,cd}," in *,cd,*) printf ,sr ;; esac) ;;
  iso|cd-read|media|hostcd) default_wait=sr ;;
  *) default_wait="" ;;
esac
want=${arg_wait:-$default_wait}

scsi_blocks() {  # prefix (sd, sr): its /sys/block entries in SCSI address order (H:C:T:L)
  # Not by name: sd and sr probe asynchronously and their names follow whichever unit's probe won
  # the race, so sda is not always LUN 0. The VMM's --disk flags are LUNs 0, 1, ... of target 0.
  local d
  for d in /sys/block/"$1"*; do
    [ -e "$d/device" ] && echo "$(basename "$(readlink -f "$d/device")") ${d##*/}"
  done | sort -t: -k1,1n -k2,2n -k3,3n -k4,4n | cut -d' ' -f2
}
first_block() {  # prefix: the first of scsi_blocks (the VMM's first disk or CD)
  scsi_blocks "$1" | head -n 1
}
devices_ready() {
  local d type
  # Every SCSI disk (type 0) and CD/DVD (type 5) the scan found has its block device...
  for d in /sys/bus/scsi/devices/*:*:*:*; do
    [ -r "$d/type" ] || continue
    type=$(cat "$d/type")
    case "$type" in 0|5) ls "$d/block" >/dev/null 2>&1 || return 1 ;; esac
  done
  # ... and the ones the scenario needs exist, with their device nodes.
  case ",$want," in *,sd,*) d=${arg_disk:-$(first_block sd)}; [ -n "$d" ] && [ -b "/dev/$d" ] || return 1 ;; esac
  case ",$want," in *,sr,*) d=${arg_cd:-$(first_block sr)}; [ -n "$d" ] && [ -b "/dev/$d" ] || return 1 ;; esac
  return 0
}
i=0
limit=$(( ${arg_wait_s:-30} * 10 ))
until devices_ready; do
  i=$((i + 1))
  if [ $i -ge $limit ]; then
    ls /sys/bus/scsi/devices/ 2>&1 | sed 's/^/INFO scsi devices: /'
    fail "devices ($want) did not appear within ${arg_wait_s:-30} s"
  fi
  sleep 0.1
done
disk=${arg_disk:-$(first_block sd)}
cd=${arg_cd:-$(first_block sr)}
T_READY=$(uptime_s)
result ready_uptime "$T_READY"

size_kib() {  # 64M, 512K, 1G, 4096 (bytes) -> KiB
  case "$1" in
    *[kK]) echo $(( ${1%?} )) ;;
    *[mM]) echo $(( ${1%?} * 1024 )) ;;
    *[gG]) echo $(( ${1%?} * 1024 * 1024 )) ;;
    *) echo $(( $1 / 1024 )) ;;
  esac
}
field() { echo "$1" | cut -d';' -f"$2"; }  # terse-line field-number

# --- scenarios -------------------------------------------------------------------------------
scenario_probe() {
  [ -n "$disk" ] || fail "no SCSI disk"
  local sys=/sys/block/$disk q=/sys/block/$disk/queue sd_dir
  result disk "$disk"
  result disk_sectors "$(cat "$sys/size")"
  result vendor "$(cat "$sys/device/vendor" | sed 's/ *$//')"
  result model "$(cat "$sys/device/model" | sed 's/ *$//')"
  result rev "$(cat "$sys/device/rev" 2>/dev/null | sed 's/ *$//')"
  result scsi_address "$(basename "$(readlink -f "$sys/device")")"
  result logical_block_size "$(cat "$q/logical_block_size")"
  result physical_block_size "$(cat "$q/physical_block_size")"
  # The sd driver's view of the caching mode page (WCE) and DPOFUA bit.
  dmesg | grep -F "[$disk]" | sed 's/^\[ *[0-9.]*\] //' | while IFS= read -r line; do
    result dmesg "$line"
  done
  line=$(dmesg | grep -F "[$disk]" | grep -E 'DPO|FUA' | tail -n 1)
  case "$line" in
    *"supports DPO and FUA"*) result dpofua yes ;;
    *"support DPO or FUA"*) result dpofua no ;;
    *) result dpofua unknown ;;
  esac
  case "$line" in
    *"Write cache: enabled"*) result wce enabled ;;
    *"Write cache: disabled"*) result wce disabled ;;
    *) result wce unknown ;;
  esac
  result fua "$(cat "$q/fua")"
  result write_cache "$(cat "$q/write_cache")"
  sd_dir=$(ls -d "$sys"/device/scsi_disk/* 2>/dev/null | head -n 1)
  result cache_type "$(cat "$sd_dir/cache_type" 2>/dev/null)"
  result provisioning_mode "$(cat "$sd_dir/provisioning_mode" 2>/dev/null)"
  result nr_queues "$(ls "$sys/mq" | wc -l)"
  result nr_cpus "$(grep -c ^processor /proc/cpuinfo)"
  # What the VMM's CPUID gave the guest, as the kernel kept it (compared across VMMs by the soak).
  result cpu_flags "$(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
  result rotational "$(cat "$q/rotational")"
  # Every SCSI disk in one line each (several drives with different cache modes in one boot).
  for d in $(ls /sys/block | grep '^sd' | sort); do
    line=$(dmesg | grep -F "[$d]" | grep -E 'DPO|FUA' | tail -n 1 | sed 's/^\[ *[0-9.]*\] //')
    result disk_line "$d $(basename "$(readlink -f "/sys/block/$d/device")") fua=$(cat "/sys/block/$d/queue/fua") write_cache=$(cat "/sys/block/$d/queue/write_cache" | tr ' ' _) :: $line"
  done
  result max_sectors_kb "$(cat "$q/max_sectors_kb")"
  result max_hw_sectors_kb "$(cat "$q/max_hw_sectors_kb")"
  result discard_max_bytes "$(cat "$q/discard_max_bytes")"
  result write_zeroes_max_bytes "$(cat "$q/write_zeroes_max_bytes")"
  result scsi_level "$(cat "$sys/device/scsi_level" 2>/dev/null)"
  if [ -n "$cd" ]; then
    result sr "$cd"
    result sr_model "$(cat "/sys/block/$cd/device/model" | sed 's/ *$//')"
    result sr_scsi_address "$(basename "$(readlink -f "/sys/block/$cd/device")")"
    result sr_size_sectors "$(cat "/sys/block/$cd/size")"
    result sr_events "$(cat "/sys/block/$cd/events" 2>/dev/null)"
    dmesg | grep -F "[$cd]" | sed 's/^\[ *[0-9.]*\] //' | while IFS= read -r line; do
      result sr_dmesg "$line"
    done
  else
    result sr none
  fi
  # sg3-utils' view, when packed: INQUIRY identity, READ CAPACITY and the caching mode page.
  if command -v sg_readcap >/dev/null; then
    sg_readcap --16 "/dev/$disk" 2>&1 | grep -E 'Last LBA|Logical block length|Number of logical' |
      sed 's/^ *//' | while IFS= read -r line; do info "sg_readcap: $line"; done
    sg_modes --six --page=0x08 "/dev/$disk" 2>&1 | grep -v '^ *$' |
      sed 's/^ *//' | while IFS= read -r line; do info "sg_modes: $line"; done
    sg_inq "/dev/$disk" 2>&1 | grep -E 'Vendor identification|Product identification|Product revision|PQual' |
      sed 's/^ *//' | while IFS= read -r line; do info "sg_inq: $line"; done
  fi
  [ "$(cat "$sys/size")" -gt 0 ] || fail "disk $disk has size 0"
  pass
}

scenario_fio() {
  [ -n "$disk" ] || fail "no SCSI disk"
  local qd=${arg_qd:-1} size=${arg_size:-64M} out line st kib jobs=""
  kib=$(size_kib "$size")
  if [ -n "${arg_numjobs:-}" ]; then
    # One job per CPU (blk-mq maps each CPU to its own hardware queue), each on its own region.
    jobs="--numjobs=$arg_numjobs --group_reporting --offset_increment=$size --cpus_allowed=0-$((arg_numjobs - 1)) --cpus_allowed_policy=split"
    kib=$((kib * arg_numjobs))
  fi
  result fio_job "randwrite bs=4k direct=1 sync=1 ioengine=${arg_engine:-libaio} iodepth=$qd size=$size verify=crc32c${jobs:+ $jobs}"
  # marker=NAME: tell the host fio is starting (e.g. to hot-plug memory while it runs).
  [ -z "${arg_marker:-}" ] || echo "@@$arg_marker"
  fio --name=verify --filename="/dev/$disk" --rw=randwrite --bs=4k --direct=1 --sync=1 \
    --ioengine="${arg_engine:-libaio}" --iodepth="$qd" --size="$size" --offset="${arg_offset:-0}" \
    --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 \
    --runtime="${arg_runtime:-60}" $jobs --output-format=terse >/tmp/fio.out 2>/tmp/fio.err
  st=$?
  line=$(grep '^3;' /tmp/fio.out | head -n 1)
  sed 's/^/INFO fio: /' /tmp/fio.err
  [ -n "$line" ] || { sed 's/^/INFO fio: /' /tmp/fio.out; fail "fio printed no terse line (exit $st)"; }
  result fio_status "$st"
  result fio_error "$(field "$line" 5)"
  result fio_iops "$(field "$line" 49)"
  result fio_write_kb "$(field "$line" 47)"
  result fio_lat_mean_us "$(field "$line" 81)"
  result fio_verify_kb "$(field "$line" 6)"
  if [ "$st" = 0 ] && [ "$(field "$line" 5)" = 0 ] && [ "$(field "$line" 47)" = "$kib" ] &&
     [ "$(field "$line" 6)" = "$kib" ]; then
    result fio_verify ok
    pass
  fi
  if [ "$st" != 0 ] || [ "$(field "$line" 5)" != 0 ]; then
    result fio_verify failed
    fail "fio exit status $st, error $(field "$line" 5) (wrote $(field "$line" 47) KiB, verified $(field "$line" 6) KiB of $kib)"
  fi
  result fio_verify incomplete
  fail "fio wrote $(field "$line" 47) KiB and verified $(field "$line" 6) KiB of $kib (runtime=${arg_runtime:-60} too short?)"
}

scenario_limits() {
  [ -n "$disk" ] || fail "no SCSI disk"
  local phase line st disks jobs="" d n
  disks=$(scsi_blocks sd | head -n "${arg_disks:-1}")
  [ "$(echo "$disks" | wc -w)" = "${arg_disks:-1}" ] || fail "fewer than ${arg_disks:-1} SCSI disks"
  for d in $disks; do jobs="$jobs --name=$d --filename=/dev/$d"; done
  for phase in $(seq 1 "${arg_phases:-2}"); do
    echo "@@LIMIT-PHASE $phase"
    read -r -t 60 _ || fail "no answer to @@LIMIT-PHASE $phase within 60 s"
    # shellcheck disable=SC2086  # one --name/--filename pair per disk
    fio --rw=randread --bs=4k --direct=1 --ioengine=libaio --iodepth="${arg_qd:-16}" \
      --size="${arg_size:-16M}" --time_based --runtime="${arg_seconds:-10}" \
      --output-format=terse $jobs >/tmp/fio.out 2>/tmp/fio.err
    st=$?
    sed 's/^/INFO fio: /' /tmp/fio.err
    [ "$st" = 0 ] || fail "fio exit status $st in phase $phase"
    n=0
    for d in $disks; do
      n=$((n + 1))
      line=$(grep '^3;' /tmp/fio.out | sed -n "${n}p")
      [ -n "$line" ] || fail "fio printed no terse line for $d in phase $phase"
      if [ "${arg_disks:-1}" = 1 ]; then
        result "limit_iops_$phase" "$(field "$line" 8)"
      else
        result "limit_iops_${phase}_disk$((n - 1))" "$(field "$line" 8)"
      fi
    done
  done
  pass
}

# The first SCSI disk other than $disk, waiting up to 30 s for it; its name on stdout.
wait_for_new_disk() {
  local i new
  for i in $(seq 1 300); do
    new=$(ls /sys/block | grep '^sd' | grep -vx "$disk" | head -n 1)
    if [ -n "$new" ] && [ -b "/dev/$new" ]; then echo "$new"; return 0; fi
    sleep 0.1
  done
  return 1
}

# Waits up to 30 s for /sys/block/$1 to go (a detached disk); fails when it stays.
wait_for_disk_gone() {
  local i
  for i in $(seq 1 300); do [ -e "/sys/block/$1" ] || return 0; sleep 0.1; done
  return 1
}

scenario_hotplug() {
  [ -n "$disk" ] || fail "no SCSI disk"
  local t new st bg busy
  # The same job writes, then (verify_only) checks again after the disk came back.
  local verify_job="--name=verify --rw=write --bs=64k --direct=1 --ioengine=libaio --iodepth=8 --size=8M --verify=crc32c"
  fio --name=background --filename="/dev/$disk" --rw=randrw --bs=4k --direct=1 --ioengine=libaio \
    --iodepth=4 --size=16M --time_based --runtime="${arg_seconds:-90}" >/tmp/bg.out 2>/tmp/bg.err &
  bg=$!
  echo "@@HOTPLUG-ATTACH"
  read -r -t 60 _ || fail "no answer to @@HOTPLUG-ATTACH within 60 s"
  t=$(uptime_s)
  new=$(wait_for_new_disk) || fail "no new SCSI disk 30 s after the attach (and no rescan was asked for)"
  result attach_seen_seconds "$(elapsed "$t")"
  result attached_disk "$new $(basename "$(readlink -f "/sys/block/$new/device")") $(cat "/sys/block/$new/size") sectors"
  # shellcheck disable=SC2086  # the job's options
  fio $verify_job --filename="/dev/$new" >/tmp/verify.out 2>/tmp/verify.err ||
    fail "fio verify on the attached disk: $(tail -n 1 /tmp/verify.err)"
  result attach_verify ok
  fio --name=busy --filename="/dev/$new" --rw=randwrite --bs=4k --direct=1 --ioengine=libaio \
    --iodepth=8 --offset=8M --size=8M --time_based --runtime=60 >/tmp/busy.out 2>/tmp/busy.err &
  busy=$!
  sleep 2
  echo "@@HOTPLUG-DETACH"
  read -r -t 60 _ || fail "no answer to @@HOTPLUG-DETACH within 60 s"
  t=$(uptime_s)
  wait_for_disk_gone "$new" || fail "/dev/$new is still there 30 s after the detach"
  result detach_seen_seconds "$(elapsed "$t")"
  wait "$busy"
  st=$?
  result detach_fio_status "$st"
  grep -m 2 -i error /tmp/busy.err | sed 's/^/INFO fio on the detached disk: /'
  [ "$st" != 0 ] || fail "fio on the detached disk ended without an error"
  echo "@@HOTPLUG-REATTACH"
  read -r -t 60 _ || fail "no answer to @@HOTPLUG-REATTACH within 60 s"
  new=$(wait_for_new_disk) || fail "no SCSI disk 30 s after the second attach"
  # shellcheck disable=SC2086  # the job's options
  if fio $verify_job --verify_only --filename="/dev/$new" >/tmp/verify.out 2>/tmp/verify.err; then
    result reattach_verify ok
  else
    result reattach_verify failed
    fail "what was written before the detach does not verify: $(tail -n 1 /tmp/verify.err)"
  fi
  # The background fio has run throughout the steps above if it still runs now: it is stopped
  # then rather than left to run out its time (seconds=90 is a limit; the steps take about 20 s
  # in the nested tier). On SIGINT fio ends its jobs, reports each one's error (err= 0 when none)
  # and exits with 128.
  kill -INT "$bg" 2>/dev/null
  wait "$bg"
  st=$?
  [ "$st" = 128 ] && grep -q 'err= *0:' /tmp/bg.out && st=0
  result background_fio "$st"
  [ "$st" = 0 ] || fail "fio on $disk, beside the hot-plug, failed: $(tail -n 1 /tmp/bg.err)"
  # The boot disk too (a real system's root disk): the API lets it go, and the guest sees it go.
  echo "@@HOTPLUG-DETACH-BOOT"
  read -r -t 60 _ || fail "no answer to @@HOTPLUG-DETACH-BOOT within 60 s"
  t=$(uptime_s)
  wait_for_disk_gone "$disk" || fail "/dev/$disk, the boot disk, is still there 30 s after its detach"
  result boot_detach_seen_seconds "$(elapsed "$t")"
  pass
}

# Waits up to 30 s for /dev/$disk's size to differ from $1 (bytes); the new size on stdout.
wait_for_size_change() {
  local i size
  for i in $(seq 1 300); do
    size=$(blockdev --getsize64 "/dev/$disk")
    if [ "$size" != "$1" ]; then echo "$size"; return 0; fi
    sleep 0.1
  done
  return 1
}

scenario_resize() {
  [ -n "$disk" ] || fail "no SCSI disk"
  local before size t
  before=$(blockdev --getsize64 "/dev/$disk")
  result size_before "$before"
  echo "@@RESIZE-GROW"
  read -r -t 60 _ || fail "no answer to @@RESIZE-GROW within 60 s"
  t=$(uptime_s)
  size=$(wait_for_size_change "$before") || fail "/dev/$disk still has $before bytes 30 s after the resize"
  result grow_seen_seconds "$(elapsed "$t")"
  result size_grown "$size"
  # The new space takes verified writes.
  fio --name=grown --filename="/dev/$disk" --rw=write --bs=64k --direct=1 --ioengine=libaio \
    --iodepth=8 --offset="$before" --size=4M --verify=crc32c >/tmp/grown.out 2>/tmp/grown.err ||
    fail "fio verify in the grown space: $(tail -n 1 /tmp/grown.err)"
  result grown_verify ok
  echo "@@RESIZE-HOST"
  read -r -t 60 _ || fail "no answer to @@RESIZE-HOST within 60 s"
  size=$(wait_for_size_change "$size") || fail "/dev/$disk did not take the host's new size within 30 s"
  result size_host "$size"
  echo "@@RESIZE-SHRINK"
  read -r -t 60 _ || fail "no answer to @@RESIZE-SHRINK within 60 s"
  sleep 1
  result size_after_shrink "$(blockdev --getsize64 "/dev/$disk")"
  dmesg | grep -E "capacity change|$disk" | sed 's/^\[ *[0-9.]*\] //' | tail -n 6 |
    while IFS= read -r line; do result resize_dmesg "$line"; done
  pass
}

scenario_fio_bench() {
  [ -n "$disk" ] || fail "no SCSI disk"
  local qd=${arg_qd:-1} rw=${arg_rw:-randwrite} line st
  result fio_job "$rw bs=${arg_bs:-4k} direct=1 sync=${arg_sync:-1} ioengine=${arg_engine:-libaio} iodepth=$qd seconds=${arg_seconds:-5}"
  fio --name=bench --filename="/dev/$disk" --rw="$rw" --bs="${arg_bs:-4k}" --direct=1 \
    --sync="${arg_sync:-1}" --ioengine="${arg_engine:-libaio}" --iodepth="$qd" \
    --size="${arg_size:-64M}" --time_based --runtime="${arg_seconds:-5}" \
    --output-format=terse >/tmp/fio.out 2>/tmp/fio.err
  st=$?
  line=$(grep '^3;' /tmp/fio.out | head -n 1)
  sed 's/^/INFO fio: /' /tmp/fio.err
  [ -n "$line" ] || { sed 's/^/INFO fio: /' /tmp/fio.out; fail "fio printed no terse line (exit $st)"; }
  case "$rw" in
    *read*) result fio_iops "$(field "$line" 8)"; result fio_bw_kbs "$(field "$line" 7)"
            result fio_lat_mean_us "$(field "$line" 40)" ;;
  esac
  case "$rw" in
    *write*|rw|randrw) result fio_write_iops "$(field "$line" 49)"; result fio_write_bw_kbs "$(field "$line" 48)"
                       result fio_write_lat_mean_us "$(field "$line" 81)"
                       case "$rw" in *write*) result fio_iops "$(field "$line" 49)" ;; esac ;;
  esac
  result fio_status "$st"
  [ "$st" = 0 ] && [ "$(field "$line" 5)" = 0 ] || fail "fio exit status $st, error $(field "$line" 5)"
  pass
}

# The side-by-side benchmark (tools/bench-linux): one guest runs each workload in turn; the host
# snapshots the hypervisor's counters at the markers, the guest counts interrupts and requests.
bench_irqs() {  # interrupts so far on the storage lines (virtio, ata), all CPUs
  grep -E 'virtio|ata' /proc/interrupts | awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) n += $i; else break } END { print n + 0 }'
}
bench_requests() {  # device: requests the guest's block layer completed (reads, writes, discards, flushes)
  awk '{ print $1 + $5 + $12 + $16 }' "/sys/block/$1/stat"
}
bench_mark() {  # BEGIN|END workload: wait for the host's answer
  echo "@@BENCH-$1 $2"
  read -r -t 60 _ || info "no answer to @@BENCH-$1 $2 within 60 s"
}
scenario_bench() {
  local w dev t0 irq0 req0 secs ios kib line
  for w in $(echo "${arg_bench:-qd1,qd16,cd}" | tr ',' ' '); do
    case "$w" in
      none) continue ;;  # bench=none: the boot alone (its uptime at /init), for many quick rounds
      qd[0-9]*) dev=$disk; [ -n "$dev" ] || fail "bench $w: no SCSI disk" ;;
      cd) dev=$cd; [ -n "$dev" ] || fail "bench cd: no CD-ROM"; echo 3 > /proc/sys/vm/drop_caches ;;
      *) fail "bench: unknown workload '$w'" ;;
    esac
    bench_mark BEGIN "$w"
    irq0=$(bench_irqs); req0=$(bench_requests "$dev"); t0=$(uptime_s)
    case "$w" in
      qd*)
        # qdN: 4 KiB writes at depth N; qdNbSk: S KiB writes (qd16b64k: 64 KiB at depth 16).
        local depth=${w#qd} bs_kib=4
        case "$depth" in *b*k) bs_kib=${depth#*b}; bs_kib=${bs_kib%k}; depth=${depth%%b*} ;; esac
        fio --name=bench --filename="/dev/$dev" --rw=randwrite --bs="${bs_kib}k" --direct=1 --sync=1 \
          --ioengine=libaio --iodepth="$depth" --size=64M --time_based \
          --runtime="${arg_bench_seconds:-10}" --output-format=terse >/tmp/fio.out 2>/tmp/fio.err ||
          { cat /tmp/fio.err; fail "bench $w: fio failed"; }
        line=$(grep '^3;' /tmp/fio.out | head -n 1)
        kib=$(field "$line" 47)
        ios=$((kib / bs_kib)) ;;
      cd)
        # bench_cd_passes=N: N whole-disc reads, caches dropped before each (longer samples).
        local pass=0
        while [ $pass -lt "${arg_bench_cd_passes:-1}" ]; do
          [ $pass = 0 ] || echo 3 > /proc/sys/vm/drop_caches
          dd if="/dev/$dev" of=/dev/null bs="${arg_cd_bs:-32K}" 2>/tmp/dd.err || { cat /tmp/dd.err; fail "bench cd: dd failed"; }
          pass=$((pass + 1))
        done
        kib=$(( $(blockdev --getsize64 "/dev/$dev") / 1024 * pass ))
        ios=$((kib / 2)) ;;  # 2 KiB sectors
    esac
    secs=$(elapsed "$t0")
    line="ios=$ios kib=$kib seconds=$secs irqs=$(( $(bench_irqs) - irq0 )) requests=$(( $(bench_requests "$dev") - req0 ))"
    bench_mark END "$w"
    result "bench_$w" "$line $(awk -v i="$ios" -v k="$kib" -v s="$secs" 'BEGIN { if (s <= 0) s = 0.01; printf "iops=%d kbs=%d", i / s, k / s }')"
  done
  pass
}

# Discard (blkdiscard: UNMAP or WRITE SAME with UNMAP, as sd's provisioning mode says). The disk
# reports LBPRZ = 0, so the discarded blocks' contents are undefined: only the data around them is
# checked. The host counts the discards in the block statistics.
scenario_discard() {
  [ -n "$disk" ] || fail "no SCSI disk"
  local pattern="microvm discard" expected got
  result discard_mode "$(cat /sys/block/$disk/device/scsi_disk/*/provisioning_mode 2>/dev/null)"
  result discard_max_bytes "$(cat "/sys/block/$disk/queue/discard_max_bytes")"
  # 16-byte lines: every MiB of the stream is the same, so one checksum serves both sides.
  yes "$pattern" | head -c 4194304 | dd of="/dev/$disk" bs=64K oflag=direct conv=fsync 2>/dev/null ||
    fail "writing 4 MiB before the discard"
  blkdiscard -o 1048576 -l 2097152 "/dev/$disk" 2>/tmp/discard.err ||
    fail "blkdiscard: $(cat /tmp/discard.err)"
  expected=$(yes "$pattern" | head -c 1048576 | md5sum | cut -d' ' -f1)
  got=$(dd if="/dev/$disk" bs=64K count=16 iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)
  [ "$got" = "$expected" ] || fail "the MiB before the discarded range changed"
  got=$(dd if="/dev/$disk" bs=64K skip=48 count=16 iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)
  [ "$got" = "$expected" ] || fail "the MiB after the discarded range changed"
  result discard ok
  pass
}

scenario_fs() {
  [ -n "$disk" ] || fail "no SCSI disk"
  local dev=/dev/$disk mnt=/mnt/fs seed=${arg_seed:-1} mb=${arg_fs_mb:-4} i t
  mkdir -p "$mnt"
  t=$(uptime_s)
  /usr/local/bin/mke2fs -t ext4 -F -q "$dev" >/tmp/mkfs.out 2>&1 || { sed 's/^/INFO mkfs: /' /tmp/mkfs.out; fail "mkfs.ext4 failed"; }
  result mkfs_seconds "$(elapsed "$t")"
  mount -t ext4 "$dev" "$mnt" || fail "mount ext4 failed"
  t=$(uptime_s)
  # Known content: a pattern stream, the busybox binary, and small fsync'd files cut out of it.
  yes "microvm fs seed=$seed" | head -c $((mb * 1024 * 1024)) > "$mnt/pattern" || fail "writing pattern"
  cp /bin/busybox "$mnt/busybox.bin" || fail "copying busybox"
  mkdir -p "$mnt/small"
  i=0
  while [ $i -lt 32 ]; do
    dd if=/bin/busybox of="$mnt/small/f$i" bs=4096 skip=$i count=1 conv=fsync 2>/dev/null || fail "writing small/f$i"
    i=$((i + 1))
  done
  sync
  result fs_write_seconds "$(elapsed "$t")"
  # Expected sums from the sources, not from the files just written.
  {
    echo "$(yes "microvm fs seed=$seed" | head -c $((mb * 1024 * 1024)) | md5sum | cut -d' ' -f1)  $mnt/pattern"
    echo "$(md5sum < /bin/busybox | cut -d' ' -f1)  $mnt/busybox.bin"
    i=0
    while [ $i -lt 32 ]; do
      echo "$(dd if=/bin/busybox bs=4096 skip=$i count=1 2>/dev/null | md5sum | cut -d' ' -f1)  $mnt/small/f$i"
      i=$((i + 1))
    done
  } > /tmp/expected.md5
  umount "$mnt" || fail "umount failed"
  echo 3 > /proc/sys/vm/drop_caches
  mount -t ext4 "$dev" "$mnt" || fail "second mount failed"
  if md5sum -c /tmp/expected.md5 >/tmp/md5.out 2>&1; then
    result fs_files "$(wc -l < /tmp/expected.md5)"
  else
    grep -v ': OK$' /tmp/md5.out | sed 's/^/INFO md5sum: /'
    result fs mismatch
    fail "file contents differ after remount"
  fi
  umount "$mnt" || fail "second umount failed"
  if [ -x /usr/local/bin/e2fsck ]; then
    if /usr/local/bin/e2fsck -fn "$dev" >/tmp/fsck.out 2>&1; then
      result fsck clean
    else
      sed 's/^/INFO e2fsck: /' /tmp/fsck.out
      result fsck errors
      fail "e2fsck found errors"
    fi
  fi
  result fs ok
  pass
}

check_iso_file() {  # name expected-md5 result-key: mounts /dev/$cd, compares, unmounts
  local mnt=/mnt/cd sum
  [ -n "$1" ] && [ -n "$2" ] || fail "iso_file/iso_md5 (or iso2_*) missing on the command line"
  mkdir -p "$mnt"
  mount -t iso9660 -o ro "/dev/$cd" "$mnt" || fail "mount iso9660 /dev/$cd failed"
  info "$cd contents: $(ls "$mnt" | tr '\n' ' ')"
  sum=$(md5sum "$mnt/$1" 2>/dev/null | cut -d' ' -f1)
  umount "$mnt"
  result "$3_md5" "${sum:-none}"
  if [ "$sum" = "$2" ]; then
    result "$3" ok
    return 0
  fi
  result "$3" mismatch
  fail "$1 on $cd: md5 ${sum:-unreadable}, expected $2"
}

check_disc_md5() {  # disc_md5=HEX: the whole disc, read through the block device
  [ -n "${arg_disc_md5:-}" ] || return 0
  local sum
  sum=$(dd if="/dev/$cd" bs=64K 2>/dev/null | md5sum | cut -d' ' -f1)
  result disc_md5 "$sum"
  [ "$sum" = "$arg_disc_md5" ] || fail "the whole disc /dev/$cd has md5 $sum, expected $arg_disc_md5"
}

scenario_iso() {
  [ -n "$cd" ] || fail "no CD-ROM"
  result sr "$cd"
  result sr_size_sectors "$(cat "/sys/block/$cd/size")"
  check_disc_md5
  check_iso_file "${arg_iso_file:-}" "${arg_iso_md5:-}" iso
  pass
}

scenario_cd_read() {
  [ -n "$cd" ] || fail "no CD-ROM"
  local t size bytes=0 pass=0 flag=""
  [ "${arg_cd_direct:-0}" = 1 ] && flag=iflag=direct
  size=$(blockdev --getsize64 "/dev/$cd") || fail "blockdev --getsize64 /dev/$cd"
  # /proc/uptime counts in 10 ms: several cold passes (page cache dropped before each) of a small
  # disc give a usable figure.
  t=$(uptime_s)
  while [ $pass -lt "${arg_cd_passes:-1}" ]; do
    echo 3 > /proc/sys/vm/drop_caches
    dd if="/dev/$cd" of=/dev/null bs="${arg_cd_bs:-32K}" $flag 2>/tmp/dd.err || { cat /tmp/dd.err; fail "dd of /dev/$cd failed"; }
    bytes=$((bytes + size))
    pass=$((pass + 1))
  done
  t=$(elapsed "$t")
  result cd_bytes "$bytes"
  result cd_seconds "$t"
  result cd_kbs "$(awk -v b="$bytes" -v s="$t" 'BEGIN { printf "%d", (s > 0 ? b / 1024 / s : 0) }')"
  pass
}

medium_readable() { dd if="/dev/$cd" of=/dev/null bs=2048 count=1 2>/tmp/dd.err; }

wait_for_medium() {  # yes|no seconds: 0 once the medium is (yes) / is not (no) readable
  local n=0 readable
  while :; do
    if medium_readable; then readable=yes; else readable=no; fi
    [ "$readable" = "$1" ] && return 0
    n=$((n + 1))
    [ $n -ge $(($2 * 5)) ] && return 1
    sleep 0.2
  done
}

scenario_media() {
  [ -n "$cd" ] || fail "no CD-ROM"
  local wait=${arg_media_wait:-60} t n before
  if [ "${arg_media_poll_ms:-0}" != 0 ]; then
    echo "${arg_media_poll_ms}" > /sys/module/block/parameters/events_dfl_poll_msecs
  fi
  result media_poll_ms "$(cat /sys/module/block/parameters/events_dfl_poll_msecs)"
  check_disc_md5
  # The kernel's disk events (DISK_MEDIA_CHANGE=1, DISK_EJECT_REQUEST=1) as uevents.
  uevent sh -c 'case "$DEVNAME" in *sr*) echo "$(cut -d" " -f1 /proc/uptime) $ACTION $DEVNAME${DISK_MEDIA_CHANGE:+ DISK_MEDIA_CHANGE=$DISK_MEDIA_CHANGE}${DISK_EJECT_REQUEST:+ DISK_EJECT_REQUEST=$DISK_EJECT_REQUEST}" >> /tmp/uevents ;; esac' &
  check_iso_file "${arg_iso_file:-}" "${arg_iso_md5:-}" media_first
  result sr_size_sectors "$(cat "/sys/block/$cd/size")"
  before=$(dmesg | wc -l)
  echo "@@EJECT-NOW"
  t=$(uptime_s)
  wait_for_medium no "$wait" || fail "the medium is still readable $wait s after @@EJECT-NOW"
  result eject_seen_seconds "$(elapsed "$t")"
  result eject_error "$(tail -n 1 /tmp/dd.err)"
  result sr_size_sectors_ejected "$(cat "/sys/block/$cd/size")"
  echo "@@INSERT-NOW"
  t=$(uptime_s)
  wait_for_medium yes "$wait" ||
    fail "no readable medium $wait s after @@INSERT-NOW ($(tail -n 1 /tmp/dd.err))"
  result insert_seen_seconds "$(elapsed "$t")"
  result sr_size_sectors_new "$(cat "/sys/block/$cd/size")"
  check_iso_file "${arg_iso2_file:-}" "${arg_iso2_md5:-}" media_second
  # What the kernel said about the change, if anything.
  dmesg | tail -n +$((before + 1)) | sed 's/^\[ *[0-9.]*\] //' | while IFS= read -r line; do
    result media_dmesg "$line"
  done
  sleep 0.2
  [ -s /tmp/uevents ] && while IFS= read -r line; do result media_uevent "$line"; done < /tmp/uevents
  result media ok
  pass
}

# A host optical drive passed through (tests/nested host-cd scenarios): the disc as the host has
# it, then a disc the host changed (it reaches the guest as a UNIT ATTENTION and a new capacity,
# which sr's polling finds), then the drive gone from the host (no medium).
scenario_hostcd() {
  [ -n "$cd" ] || fail "no CD-ROM"
  local wait=${arg_media_wait:-60} t n size now
  echo "${arg_media_poll_ms:-500}" > /sys/module/block/parameters/events_dfl_poll_msecs
  check_disc_md5
  uevent sh -c 'case "$DEVNAME" in *sr*) echo "$(cut -d" " -f1 /proc/uptime) $ACTION $DEVNAME${DISK_MEDIA_CHANGE:+ DISK_MEDIA_CHANGE=$DISK_MEDIA_CHANGE}" >> /tmp/uevents ;; esac' &
  check_iso_file "${arg_iso_file:-}" "${arg_iso_md5:-}" media_first
  size=$(cat "/sys/block/$cd/size")
  result sr_size_sectors "$size"
  echo "@@HOST-CHANGE"
  t=$(uptime_s)
  n=0
  while :; do
    medium_readable
    now=$(cat "/sys/block/$cd/size")
    [ "$now" != "$size" ] && [ "$now" != 0 ] && break
    n=$((n + 1))
    [ $n -ge $((wait * 5)) ] && fail "no new disc $wait s after @@HOST-CHANGE (size still $now)"
    sleep 0.2
  done
  result change_seen_seconds "$(elapsed "$t")"
  result sr_size_sectors_new "$now"
  check_iso_file "${arg_iso2_file:-}" "${arg_iso2_md5:-}" media_second
  echo "@@HOST-REMOVE"
  t=$(uptime_s)
  wait_for_medium no "$wait" || fail "the medium is still readable $wait s after @@HOST-REMOVE"
  result remove_seen_seconds "$(elapsed "$t")"
  result remove_error "$(tail -n 1 /tmp/dd.err)"
  # The drive comes back (a rescan on the host, as a USB drive plugged in again): its disc again.
  echo "@@HOST-READD"
  t=$(uptime_s)
  wait_for_medium yes "$wait" || fail "no medium $wait s after @@HOST-READD ($(tail -n 1 /tmp/dd.err))"
  result readd_seen_seconds "$(elapsed "$t")"
  check_iso_file "${arg_iso2_file:-}" "${arg_iso2_md5:-}" media_third
  sleep 0.2
  [ -s /tmp/uevents ] && while IFS= read -r line; do result media_uevent "$line"; done < /tmp/uevents
  result hostcd ok
  pass
}

# The driver resets the device and starts it again (rmmod + insmod virtio_scsi): the front end
# stops every ring and restarts them from index 0 on a reset device. Data written before must
# read back after, and the disk must take new writes.
scenario_reset() {
  [ -n "$disk" ] || fail "no SCSI disk"
  local module expected got t
  module=$(grep '/virtio_scsi\.ko$' /etc/modules.load) || fail "virtio_scsi is not in the initramfs"
  yes "microvm reset before" | head -c 1048576 | dd of="/dev/$disk" bs=64K oflag=direct conv=fsync 2>/dev/null ||
    fail "writing before the reset"
  expected=$(yes "microvm reset before" | head -c 1048576 | md5sum | cut -d' ' -f1)
  t=$(uptime_s)
  rmmod virtio_scsi || fail "rmmod virtio_scsi failed"
  [ -z "$(first_block sd)" ] || fail "the disk is still there after rmmod"
  insmod "$module" || fail "insmod virtio_scsi failed"
  i=0
  until [ -n "$(first_block sd)" ] && [ -b "/dev/$(first_block sd)" ]; do
    i=$((i + 1))
    [ $i -ge 300 ] && fail "the disk did not come back within 30 s of insmod"
    sleep 0.1
  done
  disk=$(first_block sd)
  result reset_seconds "$(elapsed "$t")"
  got=$(dd if="/dev/$disk" bs=64K count=16 iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)
  [ "$got" = "$expected" ] || fail "data written before the reset reads back as $got, expected $expected"
  yes "microvm reset after" | head -c 1048576 | dd of="/dev/$disk" bs=64K seek=16 oflag=direct conv=fsync 2>/dev/null ||
    fail "writing after the reset"
  got=$(dd if="/dev/$disk" bs=64K skip=16 count=16 iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)
  [ "$got" = "$(yes "microvm reset after" | head -c 1048576 | md5sum | cut -d' ' -f1)" ] ||
    fail "data written after the reset reads back wrong"
  result reset ok
  pass
}

case "$scenario" in
  probe) scenario_probe ;;
  discard) scenario_discard ;;
  reset) scenario_reset ;;
  fio) scenario_fio ;;
  fio-bench) scenario_fio_bench ;;
  limits) scenario_limits ;;
  hotplug) scenario_hotplug ;;
  resize) scenario_resize ;;
  fs) scenario_fs ;;
  iso) scenario_iso ;;
  cd-read) scenario_cd_read ;;
  media) scenario_media ;;
  hostcd) scenario_hostcd ;;
  bench) scenario_bench ;;
  *) fail "unknown scenario '$scenario'" ;;
esac
fail "scenario $scenario returned without a verdict"
