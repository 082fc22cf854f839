# shellcheck shell=dash
# Runs L2 guests in L1 (busybox sh): sourced by tests/nested/l1_init.sh before the job script
# (/l1disk/job.sh, written by tests/nested/nested_harness.sh). One `microvm` per L2 run, its serial
# console streamed onto L1's console with a prefix, its @@MARKER lines answered, its statistics read
# through the control API (vmmctl) before the guest ends.
#
#   l2_run NAME "GUEST ARGS" MICROVM-FLAGS...
#       boots $L2_KERNEL with $L2_INITRD (tests/linux/init.sh as /init) and the kernel command line
#       "console=ttyS0 reboot=k panic=1 quiet guest_timeout=... final=reboot final_marker=1 GUEST ARGS"
#       (a later word wins: "final=poweroff" in GUEST ARGS overrides). On L1's console:
#         L2-BEGIN NAME / L2-CMD NAME ...
#         L2[NAME]| LINE            every line of the L2 serial console
#         L2-LAUNCH NAME init_after=S   wall seconds from the VMM's start to the guest's /init
#         L2-BOOTWORK NAME start|init pf_taken=... thp_fault_alloc=...   with L2_BOOT_WORK=1: L1's
#                                   KVM page faults and mappings, and its own page faults and
#                                   huge-page allocations, before the VMM starts and at the guest's
#                                   /init (l2_boot_counters)
#         L2-STATS NAME TAG drive=disk0 readRequests=... fuaNative=...   (vmmctl --json vm stats)
#         L2-THREADS NAME TAG COMM=TICKS ...   CPU time (utime+stime) of each microvm thread
#         L2-ACTION NAME TEXT       what a marker handler did (vmmctl's answer)
#         L2-HUNG NAME TEXT         the VMM was killed by a watchdog (after L2-THREADS hung-a/hung-b,
#                                   each thread's state and wchan, vm info and the statistics)
#         L2-HELD NAME TEXT         with L2_TRACE_FAULTS, before that: a vCPU running inside the
#                                   emulated VMRUN with no exit for a minute (l2_vcpu_held_in_guest)
#         L1-WEDGED NAME TEXT       after that: the killed VMM still there a minute later (l2_wedged;
#                                   the host stops L1 and counts it failed under the emulation)
#         L2ERR[NAME]| LINE         microvm's stderr (after the run)
#         L2-END NAME status=N seconds=S
#       @@FINAL (the guest is about to end): stats and threads tagged "final", then the guest is
#       answered on its console input. Any other @@MARKER: "$L2_MARKERS MARKER" if set.
#   L2_FIRMWARE=FILE l2_run NAME "" MICROVM-FLAGS...
#       boots the firmware FILE (SeaBIOS) instead of a kernel: no --kernel, --initrd or --cmdline
#       (the boot loader on a drive has its own); with L2_VMM=qemu, QEMU's own firmware (-L). The
#       console's milestones, each the wall seconds since the VMM started:
#         L2-MARK NAME firmware|grub|kernel|init seconds=S exits=N ...   SeaBIOS's banner, GRUB's
#                                   "GRUB-MENU" line (tools/make-boot-iso), the kernel's "Linux
#                                   version" line, the guest's /init; L1's KVM counters then
#       L2_ON_FINAL=FUNCTION: @@FINAL calls FUNCTION (after the stats) instead of answering it
#       L2_ON_SCREEN=FUNCTION: for a guest that draws screens instead of printing lines (an
#       installer's dialogs): the console's raw bytes also go to $L2_DIR/screen, and FUNCTION runs
#       in the background from the VMM's start, with these helpers:
#         l2_wait_screen TEXT SECONDS   waits until the console has shown TEXT (an action line
#                                       "screen: TEXT after S s", or "screen: TEXT missing")
#         l2_keys KEYS                  types KEYS (printf's escapes: '\r' is Enter) on the console
#         l2_stop                       ends the VMM (SIGTERM), as a user closing it would
#   L2_VMM=qemu l2_run NAME "GUEST ARGS" QEMU-FLAGS...
#       the same guest in QEMU ($L2_QEMU: its command, e.g. the bundle tools/bench-linux puts on the
#       work disk), with -enable-kvm -m $L2_MEM -serial stdio -kernel/-initrd/-append added; no API
#       socket, so no L2-STATS lines
#   L2_MARKERS=l2_bench_markers   answers the guest's @@BENCH-BEGIN/END W (scenario=bench) with
#       L2-BENCH NAME BEGIN|END W exits=... (L1's KVM counters in debugfs, all VMs: one runs at a
#       time) cpu_ticks=N (the VMM process, utime + stime) hwm_kib=N (its peak RSS), then
#       L2-SCHED, L2-STATS and L2-L1 lines (l2_sched, l2_stats, l2_l1_load)
#   L2_FRESH_MEMORY=1    before each VMM starts, write L1's free memory once (l2_fresh_memory):
#       L2-FRESH NAME mib=N seconds=S
#   L2_TRACE_BOOT=1      trace L1's KVM from the VMM's start to the guest's /init (l2_trace_end):
#       L2-TRACE NAME total|exit|off-cpu|slow ...
#   L2_TRACE_FAULTS=1    keep L1's KVM exits, entries, I/O and injected events of the whole run in a
#       ring (the last few MiB) and count the L2 shutdowns (triple faults) in it, whichever VMM runs:
#       L2-FAULT NAME shutdowns=N; with one, the 300 events before it and the shutdown exit itself
#       (its guest_rip is where the guest was) as L2-FTRACE NAME| LINE (l2_fault_trace_end); a hung
#       VMM's last 300 events the same way (l2_hung); and every L2_HELD_POLL=30 seconds of the run
#       a look for a vCPU held inside the emulated VMRUN (l2_vcpu_held_in_guest): such a run is
#       killed then as hung, not at L2_TIMEOUT, and run again
#   L2_SKIP=" NAME ... " l2_run skips these runs, with an L2-SKIPPED NAME line (nested_test.sh:
#       runs that passed in an earlier attempt of the same L1 boot)
#   l2_ctl ARGS...       vmmctl against the running L2's API socket
#   l2_pid               the running microvm's pid (jailed: the supervisor's child)
#   l2_stats TAG / l2_threads TAG    print L2-STATS / L2-THREADS lines now
#   l2_sched TAG         print an L2-SCHED line: per VMM thread its CPU ticks, last L1 CPU,
#       context switches and user/system/guest ticks (the benchmarks' markers print one at each
#       workload's start and end)
#   l2_action TEXT       print an L2-ACTION line
#
# Settings (variables the job sets): L2_KERNEL L2_INITRD (required), L2_MEM=512M, L2_TIMEOUT=600
# (seconds before the VMM is killed), L2_EXIT_GRACE=20 (seconds the VMM gets to exit after the guest
# printed its SCENARIO line), L2_MARKERS (a function name), MICROVM=/usr/local/bin/microvm,
# VMMCTL=/usr/local/bin/vmmctl.

L2_MEM=${L2_MEM:-512M}
L2_TIMEOUT=${L2_TIMEOUT:-600}
L2_EXIT_GRACE=${L2_EXIT_GRACE:-20}
MICROVM=${MICROVM:-/usr/local/bin/microvm}
VMMCTL=${VMMCTL:-/usr/local/bin/vmmctl}
L2_MARKERS=${L2_MARKERS:-}
L2_BOOT_WORK=${L2_BOOT_WORK:-0}
L2_FRESH_MEMORY=${L2_FRESH_MEMORY:-0}
L2_TRACE_BOOT=${L2_TRACE_BOOT:-0}
L2_TRACE_FAULTS=${L2_TRACE_FAULTS:-0}

l2_uptime() { read -r up _ < /proc/uptime; echo "$up"; }
l2_seconds_since() {  # uptime [digits]: seconds from that uptime to now
  awk -v a="$1" -v b="$(l2_uptime)" -v f="%.${2:-1}f" 'BEGIN { printf f, b - a }'
}
# The VMM's pid. The shell started the launcher; jailed (the default as root), that process is
# the supervisor and the VMM its only child, PID 1 of its own namespace (docs/security.md).
l2_pid() {
  local pid child
  pid=$(cat "$L2_DIR/pid" 2>/dev/null) || return 0
  child=$(cat /proc/"$pid"/task/"$pid"/children 2>/dev/null)
  child=${child%% *}
  echo "${child:-$pid}"
}
l2_ctl() { "$VMMCTL" --api "unix:$L2_DIR/api.sock" "$@"; }
l2_action() { echo "L2-ACTION $L2_NAME $*"; }

# Marker handlers start their background work with l2_spawn, never with a bare `&`: the console
# reader (l2_console) must have no child that can exit while it reads. busybox ash's `read` (1.35,
# Debian 12's) drops the part of a line it has read when a signal interrupts it, and then reads on:
# `(sleep 1) & read -r x` with "abc" arriving before the sleep ends and "def" after gives x=def.
# A handler's job ending as the guest prints (both follow the same event) cut "RESULT debian_" off
# a line in CI (2026-12-07, debian-scsi). l2_spawn makes the job a grandchild (its parent, a
# subshell, has exited before the reader reads again) and notes its pid in $L2_DIR/spawned;
# l2_console waits for those once the VMM has exited.
l2_spawn() {  # command [args...]
  ( "$@" & echo $! >> "$L2_DIR/spawned" )
}
l2_spawned_running() {  # pid: alive and not a zombie (an orphan waits for L1's init to reap it)
  [ -r "/proc/$1/stat" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]
}
l2_wait_spawned() {  # at most 300 s in all: a job still running then is named and left
  local pid waited=0
  [ -r "$L2_DIR/spawned" ] || return 0
  for pid in $(cat "$L2_DIR/spawned"); do
    while l2_spawned_running "$pid" && [ "$waited" -lt 3000 ]; do
      sleep 0.1
      waited=$((waited + 1))
    done
    l2_spawned_running "$pid" && l2_action "a marker handler's job (pid $pid) still runs after the VMM's exit"
  done
  rm -f "$L2_DIR/spawned"
}

l2_stats() {  # tag: one L2-STATS line per drive
  [ "${L2_VMM:-microvm}" = microvm ] || return 0
  l2_ctl --json vm stats 2>&1 | awk -v tag="L2-STATS $L2_NAME $1" '
    /"drive":/ { if (rec != "") print tag, rec; v = $2; gsub(/[",]/, "", v); rec = "drive=" v; next }
    /":/ && rec != "" { k = $1; v = $2; gsub(/[":,]/, "", k); gsub(/[",]/, "", v); rec = rec " " k "=" v }
    /vmmctl:/ { print tag, "error", $0 }
    END { if (rec != "") print tag, rec }'
}

l2_threads() {  # tag: CPU ticks of every microvm thread
  local pid t line="" comm stat
  pid=$(l2_pid)
  [ -n "$pid" ] || return 0
  for t in /proc/"$pid"/task/*; do
    comm=$(cat "$t/comm" 2>/dev/null | tr ' ' _)
    stat=$(sed 's/.*) //' "$t/stat" 2>/dev/null)
    [ -n "$stat" ] || continue
    # After "(comm) ": field 1 is the state, utime and stime are fields 12 and 13.
    line="$line $comm=$(echo "$stat" | awk '{ print $12 + $13 }')"
  done
  echo "L2-THREADS $L2_NAME $1$line"
}

l2_sched() {  # tag: per VMM thread, COMM=TICKS/CPU/VOLUNTARY/INVOLUNTARY/USER/SYSTEM/GUEST
  # Where a workload's time goes between the vCPU thread, the iothreads and io_uring's workers:
  # CPU ticks, the L1 CPU the thread last ran on, its voluntary and involuntary context switches,
  # then the ticks split: user (a vCPU thread's time in L2 is counted there too), system (L1's
  # kernel: KVM's exit handling, syscalls), guest (running L2). A vCPU thread's user minus guest
  # is the VMM's own code handling exits.
  local pid t line="" comm
  pid=$(l2_pid)
  [ -n "$pid" ] || return 0
  for t in /proc/"$pid"/task/*; do
    comm=$(tr ' ' _ < "$t/comm" 2>/dev/null) || continue
    # One read of each file: stat's fields after "(comm) " (utime 12, stime 13, processor 37,
    # guest_time 41), then status's context switches.
    line="$line $comm=$({ sed 's/.*) //' "$t/stat"; cat "$t/status"; } 2>/dev/null | awk '
      NR == 1 { u = $12; s = $13; cpu = $37; g = $41; next }
      /^voluntary_ctxt_switches/ { v = $2 } /^nonvoluntary_ctxt_switches/ { n = $2 }
      END { printf "%d/%d/%d/%d/%d/%d/%d", u + s, cpu, v, n, u, s, g }')"
  done
  echo "L2-SCHED $L2_NAME $1$line"
}

l2_l1_load() {  # tag: print an L2-L1 line: L1's work disk and CPUs, for what L1 does meanwhile
  # The work disk's counters (/sys/block/vda/stat: reads, merged, sectors, ms; writes, merged,
  # sectors, ms; in flight; busy ms; queue ms, as "/"-joined fields), each CPU's jiffies from
  # /proc/stat (user/nice/system/idle/iowait/irq/softirq), and the interrupts of each virtio
  # request queue per CPU (/proc/interrupts): where a cold read's disk work and completions land.
  local disk cpus irqs
  disk=$(awk '{ for (i = 1; i <= 11; i++) printf "%s%s", (i > 1 ? "/" : ""), $i }' /sys/block/vda/stat 2>/dev/null)
  cpus=$(awk '/^cpu[0-9]/ { printf " %s=%s/%s/%s/%s/%s/%s/%s", $1, $2, $3, $4, $5, $6, $7, $8 }' /proc/stat)
  irqs=$(awk 'NR == 1 { n = NF; next } /virtio[0-9]*-req/ { s = ""
           for (i = 2; i <= n + 1; i++) s = s (i > 2 ? "/" : "") $i
           printf " %s=%s", $NF, s }' /proc/interrupts)
  echo "L2-L1 $L2_NAME $1 vda=${disk:-none}$cpus$irqs"
}

l2_hung() {  # why: what a watchdog saw before it kills the VMM
  local pid t
  pid=$(l2_pid)
  echo "L2-HUNG $L2_NAME $1; killed"
  echo "$1" > "$L2_DIR/hung"  # l2_rerun_reason: whether a reference run gets another
  l2_threads hung-a
  sleep 1
  l2_threads hung-b  # which threads still burn CPU (a vCPU looping, an iothread spinning)
  for t in /proc/"$pid"/task/*; do
    echo "L2-ACTION $L2_NAME thread $(cat "$t/comm" 2>/dev/null | tr ' ' _) state=$(sed 's/.*) //' "$t/stat" 2>/dev/null | cut -d' ' -f1) wchan=$(cat "$t/wchan" 2>/dev/null)"
  done
  l2_action "vm info: $(l2_ctl --timeout 5 vm info 2>&1 | tr '\n' ' ')"
  l2_stats hung
  # With L2_TRACE_FAULTS: what the vCPUs did last, as L1's KVM saw it (a guest spinning between
  # exits, or an interrupt never injected), in the run's .ftrace like a shutdown's; and whether a
  # vCPU is held inside the emulated VMRUN (l2_vcpu_held_in_guest).
  if [ "$L2_TRACE_FAULTS" = 1 ]; then
    l2_vcpu_held_in_guest "$pid" > "$L2_DIR/held" || rm -f "$L2_DIR/held"
    [ ! -s "$L2_DIR/held" ] || echo "L2-HELD $L2_NAME $(cat "$L2_DIR/held")"
    tail -n 300 $L2_TRACING/trace | sed "s/^/L2-FTRACE $L2_NAME| /"
  fi
  kill -KILL "$pid"
}

# A hung VMM whose vCPU thread is running (state R, in KVM_RUN) while L1's KVM has seen no exit of
# it for L2_HELD_SECONDS (default 60): L1 entered the guest and the emulated VMRUN never came back.
# No guest can do that on a working SVM: L1 intercepts its own physical interrupts, and its timer
# ticks while a task runs, so a guest spinning, even with interrupts off, exits every few
# milliseconds (kvm_exit reason "interrupt"); a guest waiting (HLT) exits and its thread sleeps.
# So it is the emulation's, as the triple faults of l2_emulation_fault are, and gets the same
# rerun (l2_rerun_reason). A hang of any other shape stands. Prints what it saw; 1 when no vCPU is
# held. (CI of 2026-12-07: `poweroff`, one vCPU, printed nothing for 600 s in the middle of a
# sg_modes listing; its trace was not kept.)
l2_vcpu_held_in_guest() {  # pid
  local now t tid state line found=1
  echo "l2-held-check" > $L2_TRACING/trace_marker 2>/dev/null || return 1
  now=$(grep 'tracing_mark_write: l2-held-check' $L2_TRACING/trace | tail -n 1 |
    sed -n 's/.* \([0-9][0-9]*\.[0-9]*\): tracing_mark_write.*/\1/p')
  [ -n "$now" ] || return 1
  for t in /proc/"$1"/task/*; do
    tid=${t##*/}
    case "$(cat "$t/comm" 2>/dev/null)" in vcpu*) ;; *) continue ;; esac
    state=$(sed 's/.*) //' "$t/stat" 2>/dev/null | cut -d' ' -f1)
    [ "$state" = R ] || continue
    # The thread's last KVM entry or exit in the ring ("COMM-TID [CPU] FLAGS TIME: EVENT: ...").
    line=$(grep -E "^ *[^ ]+-$tid +\[[0-9]+\] [^ ]+ +[0-9.]+: kvm_(entry|exit):" $L2_TRACING/trace | tail -n 1)
    case "$line" in *" kvm_entry: "*) ;; *) continue ;; esac
    line=$(echo "$line" | awk -v now="$now" -v min="${L2_HELD_SECONDS:-60}" '{
      for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+:$/) { t = substr($i, 1, length($i) - 1); break }
      if (t != "" && now - t >= min) printf "%.0f", now - t }')
    [ -n "$line" ] || continue
    echo "$(cat "$t/comm") (thread $tid, running) entered the guest ${line} s ago and has not exited since"
    found=0
  done
  return $found
}

# After l2_hung killed a VMM with a held vCPU: a thread inside the emulated VMRUN leaves it only
# when the emulation delivers the kick that SIGKILL sends, so a VMM still there a minute later
# never goes, and the job would wait for it until L1's own watchdog speaks (CI of 2026-12-07: a
# soft lockup of the vCPU's thread, 17 minutes into a Debian run). L1-WEDGED tells the host to
# stop L1 and count it failed under the emulation (nested_harness.sh nested_boot).
l2_wedged() {  # pid
  local waited=0
  [ -s "$L2_DIR/held" ] || return 0
  while kill -0 "$1" 2>/dev/null; do
    if [ "$waited" -ge "${L2_WEDGED_SECONDS:-60}" ]; then
      echo "L1-WEDGED $L2_NAME: the VMM (pid $1) is still there ${waited} s after SIGKILL, its vCPU held in the emulated VMRUN: $(head -n 1 "$L2_DIR/held")"
      return 0
    fi
    sleep 5
    waited=$((waited + 5))
  done
}

l2_kvm_counters() {  # L1's KVM exit and injection counters (debugfs sums over every VM)
  local f line=""
  for f in exits io_exits mmio_exits halt_exits irq_exits irq_window_exits irq_injections \
           nmi_injections signal_exits request_irq_exits insn_emulation halt_wakeup; do
    [ -r "/sys/kernel/debug/kvm/$f" ] && line="$line $f=$(cat "/sys/kernel/debug/kvm/$f")"
  done
  echo "${line# }"
}

l2_boot_counters() {  # L1's work so far: its KVM's page faults and page-table mappings (debugfs,
  # one L2 VM at a time), and its own page faults and transparent-huge-page allocations (vmstat)
  local f line=""
  for f in exits pf_taken pf_fixed pages_4k pages_2m; do
    [ -r "/sys/kernel/debug/kvm/$f" ] && line="$line $f=$(cat "/sys/kernel/debug/kvm/$f")"
  done
  line="$line $(awk '$1 ~ /^(pgfault|thp_fault_alloc|thp_fault_fallback|compact_stall)$/ { printf "%s=%s ", $1, $2 }' /proc/vmstat)"
  echo "${line# }"
}

l2_fresh_memory() {  # writes nearly all of L1's free memory once, through a tmpfs of its own
  # Under QEMU's TCG, L1 memory that last held a guest's code still has translated blocks; the next
  # guest's first write there (L1 zeroing a new 2 MiB page at a nested page fault) invalidates them
  # and takes 0.25-0.8 s per 2 MiB page instead of 10 ms (docs/bench-linux.md, run E). Which VMM
  # pays depends on which one touches the recycled pages first, and hardware has no such cost; a
  # benchmark writes them once before each run so that neither does.
  local mib t0 dir=/tmp/l2-fresh-memory
  mib=$(awk '/^MemFree:/ { print int($2 / 1024) - 256 }' /proc/meminfo)
  t0=$(l2_uptime)
  if [ "$mib" -gt 0 ] && mkdir -p "$dir" && mount -t tmpfs -o "size=${mib}m" none "$dir"; then
    dd if=/dev/zero of="$dir/fill" bs=1M count="$mib" 2>/dev/null
    umount "$dir"
  fi
  echo "L2-FRESH $L2_NAME mib=$mib seconds=$(l2_seconds_since "$t0")"
}

L2_TRACING=/sys/kernel/debug/tracing
L2_TRACE_EVENTS="kvm/kvm_exit kvm/kvm_entry kvm/kvm_page_fault sched/sched_switch"
l2_trace_begin() {  # L1's KVM exits and entries and the vCPU thread's scheduling, from here on
  local e
  echo 0 > $L2_TRACING/tracing_on
  : > $L2_TRACING/trace
  echo 30000 > $L2_TRACING/buffer_size_kb
  echo 'prev_comm == "vcpu0" || next_comm == "vcpu0" || prev_comm == "CPU 0/KVM" || next_comm == "CPU 0/KVM"' \
    > $L2_TRACING/events/sched/sched_switch/filter
  for e in $L2_TRACE_EVENTS; do
    echo 1 > "$L2_TRACING/events/$e/enable"
  done
  echo 1 > $L2_TRACING/tracing_on
}

l2_trace_end() {  # L2-TRACE lines: where the time between the two went
  local e
  echo 0 > $L2_TRACING/tracing_on
  for e in $L2_TRACE_EVENTS; do
    echo 0 > "$L2_TRACING/events/$e/enable"
  done
  # From each kvm_exit to the next kvm_entry L1 handles the exit (by exit reason); from an entry
  # to the next exit the guest runs; the vCPU thread off its CPU is counted by its state when it
  # left (R: preempted). Exits that took L1 over 50 ms are listed with the faulting address.
  awk -v name="$L2_NAME" '
    { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+:$/) { t = substr($i, 1, length($i) - 1) + 0; ev = $(i + 1); rest = i + 2; break } }
    ev == "kvm_exit:" { if (first == 0) first = t
      if (entered > 0) guest += t - entered
      exited = t; entered = 0; exits++
      for (j = rest; j <= NF; j++) if ($j == "reason") reason = $(j + 1) }
    ev == "kvm_page_fault:" { address = $0; sub(/.*address /, "", address); sub(/ .*/, "", address) }
    ev == "kvm_entry:" { if (first == 0) first = t
      if (exited > 0) {
        h = t - exited; handling += h; by_reason[reason] += h; count[reason]++
        if (h > 0.05) printf "L2-TRACE %s slow reason=%s seconds=%.3f at=%.3f address=%s\n", name, reason, h, exited - first, address
      }
      entered = t; exited = 0; address = "-" }
    ev == "sched_switch:" {
      if ($0 ~ /prev_comm=(vcpu0|CPU 0\/KVM) /) { off = t; state = $0; sub(/.*prev_state=/, "", state); sub(/ .*/, "", state) }
      else if (off > 0) { off_cpu[state] += t - off; off = 0 } }
    END {
      printf "L2-TRACE %s total span=%.3f exits=%d guest=%.3f handling=%.3f\n", name, t - first, exits, guest, handling
      for (r in by_reason) printf "L2-TRACE %s exit reason=%s n=%d seconds=%.3f\n", name, r, count[r], by_reason[r]
      for (s in off_cpu) printf "L2-TRACE %s off-cpu state=%s seconds=%.3f\n", name, s, off_cpu[s]
    }' $L2_TRACING/trace
}

L2_FAULT_TRACE_EVENTS="kvm/kvm_exit kvm/kvm_entry kvm/kvm_userspace_exit kvm/kvm_pio kvm/kvm_mmio
  kvm/kvm_inj_exception kvm/kvm_inj_virq kvm/kvm_page_fault kvm/kvm_msr kvm/kvm_cr"

l2_fault_trace_begin() {  # see L2_TRACE_FAULTS above
  local e
  echo 0 > $L2_TRACING/tracing_on
  for e in $L2_TRACE_EVENTS; do echo 0 > "$L2_TRACING/events/$e/enable"; done
  echo 0 > $L2_TRACING/events/sched/sched_switch/filter
  : > $L2_TRACING/trace
  echo 4096 > $L2_TRACING/buffer_size_kb
  echo 1 > $L2_TRACING/options/overwrite
  for e in $L2_FAULT_TRACE_EVENTS; do echo 1 > "$L2_TRACING/events/$e/enable"; done
  # The ring stops at the first shutdown exit (SVM's 0x7f), so that what led to it stays however
  # long the run goes on after it: a Debian run with --on-reboot=restart boots again after a
  # triple fault, and its minutes of exits overwrote the fault's in the 4 MiB ring (CI of
  # 2026-12-07, debian-ide). A frozen ring leaves l2_vcpu_held_in_guest nothing to judge by (its
  # marker is not recorded), so a hang after a fault waits for the plain watchdog.
  echo '!traceoff' > $L2_TRACING/events/kvm/kvm_exit/trigger 2>/dev/null
  echo 'traceoff:1 if exit_reason == 127' > $L2_TRACING/events/kvm/kvm_exit/trigger
  echo 1 > $L2_TRACING/tracing_on
}

l2_fault_trace_end() {
  local e first n rip
  echo 0 > $L2_TRACING/tracing_on
  echo '!traceoff' > $L2_TRACING/events/kvm/kvm_exit/trigger 2>/dev/null
  for e in $L2_FAULT_TRACE_EVENTS; do echo 0 > "$L2_TRACING/events/$e/enable"; done
  # SVM's exit code 0x7f: the guest shut down (a triple fault); KVM's trace names it "shutdown".
  n=$(grep -c 'kvm_exit: .*reason shutdown' $L2_TRACING/trace)
  echo "L2-FAULT $L2_NAME shutdowns=$n"
  [ "$n" -gt 0 ] || return 0
  first=$(grep -n -m1 'kvm_exit: .*reason shutdown' $L2_TRACING/trace | cut -d: -f1)
  sed -n "$((first > 300 ? first - 300 : 1)),${first}p" $L2_TRACING/trace | sed "s/^/L2-FTRACE $L2_NAME| /"
  rip=$(sed -n "${first}p" $L2_TRACING/trace | sed -n 's/.* rip 0x\([0-9a-f]*\) .*/\1/p')
  [ -z "$rip" ] || echo "L2-FAULT-RIP $L2_NAME 0x$rip $(l1_symbol_at "$rip")"
}

# Where in L1 a guest address would be (hex digits, no 0x): the nearest L1 kernel or module symbol
# at or below it, from /proc/kallsyms. A firmware-booted guest faulting while in 16- or 32-bit code
# "at" an address of L1's own modules has been handed L1's state by the emulated VMRUN (docs/nested.md).
l1_symbol_at() {
  local rip found
  rip=$(printf '%016s' "$1" | tr ' ' 0)
  # Addresses are 16 lowercase hex digits there, so string order is numeric order.
  found=$(awk -v rip="$rip" '$1 <= rip && $1 > best { best = $1; sym = $3; mod = $4 }
    END { if (best != "") print best, sym, mod }' /proc/kallsyms 2>/dev/null)
  set -- $found
  if [ $# -lt 2 ] || [ "$1" = 0000000000000000 ]; then echo "(no L1 symbol below it)"; return; fi
  printf 'L1 %s+0x%x %s\n' "$2" $((0x$rip - 0x$1)) "${3:-[kernel]}"
}

l2_bench_markers() {  # marker: see L2_MARKERS=l2_bench_markers above
  local pid ticks hwm
  case "$1" in
    BENCH-BEGIN\ *|BENCH-END\ *)
      pid=$(l2_pid)
      ticks=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{ print $12 + $13 }')
      hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
      echo "L2-BENCH $L2_NAME ${1#BENCH-} $(l2_kvm_counters) cpu_ticks=${ticks:-0} hwm_kib=${hwm:-0}"
      l2_sched "${1#BENCH-}"
      l2_stats "${1#BENCH-}"
      l2_l1_load "${1#BENCH-}"
      echo ok >&3 ;;
  esac
}

l2_wait_screen() {  # text seconds: see L2_ON_SCREEN above
  local waited=0
  while [ "$waited" -lt "$2" ]; do
    if grep -aqF "$1" "$L2_DIR/screen" 2>/dev/null; then
      l2_action "screen: $1 after $(l2_seconds_since "$L2_T0" 0) s"
      return 0
    fi
    sleep 1
    waited=$((waited + 1))
  done
  l2_action "screen: $1 missing after $2 s"
  return 1
}
# shellcheck disable=SC2059  # KEYS is printf's format: its escapes are the keys
l2_keys() { printf "$1" > "$L2_DIR/in"; }
l2_stop() { kill -TERM "$(l2_pid)" 2>/dev/null; }

l2_mark() { echo "L2-MARK $L2_NAME $1 seconds=$(l2_seconds_since "$L2_T0" 2) $(l2_kvm_counters)"; }

l2_console() {  # reads microvm's serial output
  local cr line
  cr=$(printf '\r')
  while IFS= read -r line; do
    line=${line%"$cr"}
    echo "L2[$L2_NAME]| $line"
    case "$line" in
      *"SeaBIOS (version "*) l2_mark firmware ;;
      *"GRUB-MENU "*) l2_mark grub ;;
      *"] Linux version "*) l2_mark kernel ;;
      "RESULT init_uptime="*)
        l2_mark init
        # Wall time from the VMM's start to the guest's /init (firmware and kernel boot included).
        echo "L2-LAUNCH $L2_NAME init_after=$(l2_seconds_since "$L2_T0" 2)"
        [ "$L2_BOOT_WORK" != 1 ] || echo "L2-BOOTWORK $L2_NAME init $(l2_boot_counters)"
        l2_threads init
        [ "$L2_TRACE_BOOT" != 1 ] || l2_trace_end ;;
      @@FINAL)
        l2_stats final
        l2_threads final
        if [ -n "${L2_ON_FINAL:-}" ]; then "$L2_ON_FINAL"; else echo "ok" >&3; fi ;;
      @@*)
        [ -z "$L2_MARKERS" ] || "$L2_MARKERS" "${line#@@}" ;;
      "SCENARIO "*)
        # The guest ends next: a VMM that does not exit within L2_EXIT_GRACE s is killed. Not
        # the reader's child (l2_spawn says why).
        ( l2_exit_watchdog & echo $! >> "$L2_DIR/watchdogs" ) ;;
    esac
  done
  # The VMM has exited: stop the exit watchdogs, then let the marker handlers finish.
  [ -r "$L2_DIR/watchdogs" ] && kill $(cat "$L2_DIR/watchdogs") 2>/dev/null
  l2_wait_spawned
}
l2_exit_watchdog() {
  local pid
  sleep "$L2_EXIT_GRACE"
  pid=$(l2_pid)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ ! -e "$L2_DIR/status" ]; then
    l2_hung "the VMM did not exit within $L2_EXIT_GRACE s of the guest's SCENARIO line"
  fi
}

# Whether the run that just ended stopped on the nested emulation's fault (docs/nested.md, "L2
# triple faults and hangs"): a shutdown exit (SVM's triple fault) right after the vCPU entered the
# guest (that vCPU's event before it is a kvm_entry: the guest faulted before its next exit,
# whatever the exit before was), whose undeliverable event is either a #PF for a page not present
# (EXITINTINFO 0x80000b0e, error code bit 0 clear) or the external interrupt that entry injected
# (0x800000VV: delivering it reads only the IDT and pushes on the current stack, both static and
# mapped in a kernel; CI of 2026-12-06, scsi-limits, the local timer 0xec). Needs
# L2_TRACE_FAULTS=1. Prints the shutdown event. tests/l1/init.sh applies the same rule in the L1
# tier.
l2_emulation_fault() {
  local first shut task before
  [ "$L2_TRACE_FAULTS" = 1 ] || return 1
  first=$(grep -n -m1 'kvm_exit: .*reason shutdown' $L2_TRACING/trace | cut -d: -f1)
  [ -n "$first" ] && [ "$first" -gt 1 ] || return 1
  shut=$(sed -n "${first}p" $L2_TRACING/trace)
  echo "$shut" | grep -qE 'intr_info (0x80000b0e error_code 0x[0-9a-f]*[02468ace]|0x800000[0-9a-f]{2} error_code 0x[0-9a-f]+)$' || return 1
  task=$(echo "$shut" | awk '{print $1}')
  before=$(head -n $((first - 1)) $L2_TRACING/trace | awk -v t="$task" '$1 == t' | tail -n 1)
  case "$before" in *" kvm_entry: "*) ;; *) return 1 ;; esac
  echo "$shut" | sed 's/^ *//'
}

# Why the run that just ended is run again, if it is (prints the reason): it ended on the nested
# emulation's fault, or it was QEMU's reference run and hung. A reference run exists to show the
# scenario works on this L1 with another VMM; under the emulated SVM QEMU's hang as ours do (CI of
# 2026-12-07: fw-qemu-installer drew no installer screen; CI of 2026-12-06: QEMU's IDE CD hung in
# ISOLINUX's load twice in four tries), and a hung reference shows nothing about our VMM. It gets
# one more run, not two: a hang waits minutes, and the L1 boot's NESTED_TIMEOUT must still hold the
# runs after it. A hang of ours is never run again: it fails its scenario.
l2_rerun_reason() {  # vmm reruns-so-far
  local fault
  if fault=$(l2_emulation_fault); then
    echo "after the nested emulation's fault: $fault"
  elif [ -s "$L2_DIR/held" ]; then
    echo "after the nested emulation held a vCPU in the guest: $(head -n 1 "$L2_DIR/held")"
  elif [ "$1" = qemu ] && [ "$2" -lt 1 ] && [ -s "$L2_DIR/hung" ]; then
    echo "after the reference VMM (QEMU) hung: $(cat "$L2_DIR/hung")"
  else
    return 1
  fi
}

# l2_run, and again (at most L2_EMULATION_RERUNS times, default 2) while l2_rerun_reason names a
# reason: every earlier run's lines stay in L1's log, an L2-RERUN line says why, and the host's
# checks judge the last run (nested_split). Any other failure stands. A last run that ended the
# same way is named by an L2-FAULT-AGAIN line, so its failed checks say why. (CI, 2026-12-06:
# QEMU's fw-debian-qemu faulted in 3 of its 4 runs, twice in a row in one L1 boot.) A scenario
# whose run changes something outside the VMM (a host drive's disc) names the commands that put it
# back in L2_RERUN_SETUP, run before every rerun.
l2_run() {  # name "guest args" microvm-flags...
  case "${L2_SKIP:-}" in
    *" $1 "*)
      echo "L2-SKIPPED $1"
      L2_MARKERS="" L2_VMM=microvm L2_FIRMWARE="" L2_ON_FINAL="" L2_ON_SCREEN="" L2_RERUN_SETUP=""
      return 0 ;;
  esac
  local markers=$L2_MARKERS vmm=${L2_VMM:-microvm} firmware=${L2_FIRMWARE:-} on_final=${L2_ON_FINAL:-} on_screen=${L2_ON_SCREEN:-} rerun_setup=${L2_RERUN_SETUP:-} reason reruns=0
  l2_run_once "$@"
  while reason=$(l2_rerun_reason "$vmm" "$reruns"); do
    if [ "$reruns" -ge "${L2_EMULATION_RERUNS:-2}" ]; then
      echo "L2-FAULT-AGAIN $1 the last of $((reruns + 1)) runs ended too, $reason"
      return 0
    fi
    reruns=$((reruns + 1))
    echo "L2-RERUN $1 $reason (rerun $reruns)"
    if [ -n "$rerun_setup" ]; then
      echo "L2-RERUN $1 setting up again: $rerun_setup"
      eval "$rerun_setup"
    fi
    L2_MARKERS=$markers L2_VMM=$vmm L2_FIRMWARE=$firmware L2_ON_FINAL=$on_final L2_ON_SCREEN=$on_screen l2_run_once "$@"
  done
}

# The watchdog: L2_TIMEOUT for the whole run, and every L2_HELD_POLL seconds (default 30) a look
# for a vCPU held inside the emulated VMRUN (l2_vcpu_held_in_guest), which no guest recovers
# from: that hang is cut short after a minute or two, not at the timeout (CI of 2026-12-07 lost
# 17 minutes to one Debian run), and rerun (l2_rerun_reason).
l2_watchdog() {
  local waited=0 step pid
  while [ "$waited" -lt "$L2_TIMEOUT" ]; do
    step=${L2_HELD_POLL:-30}
    [ $((L2_TIMEOUT - waited)) -ge "$step" ] || step=$((L2_TIMEOUT - waited))
    sleep "$step"
    waited=$((waited + step))
    pid=$(l2_pid)
    [ -n "$pid" ] || continue
    kill -0 "$pid" 2>/dev/null || return 0
    if [ "$L2_TRACE_FAULTS" = 1 ] && [ "$waited" -lt "$L2_TIMEOUT" ] && l2_vcpu_held_in_guest "$pid" >/dev/null; then
      l2_hung "a vCPU held in the guest (seen after $waited s)"
      l2_wedged "$pid"
      return 0
    fi
  done
  pid=$(l2_pid)
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  l2_hung "still running after L2_TIMEOUT=$L2_TIMEOUT s"
  l2_wedged "$pid"
}

l2_run_once() {  # name "guest args" microvm-flags...
  L2_NAME=$1
  local gargs=$2 t0 status wd screen=""
  shift 2
  L2_DIR=/tmp/l2-$L2_NAME
  rm -rf "$L2_DIR"
  mkdir -p "$L2_DIR"
  mkfifo "$L2_DIR/in"
  echo "L2-BEGIN $L2_NAME"
  echo "L2-CMD $L2_NAME ${L2_VMM:-microvm} $* -- $gargs"
  [ "$L2_FRESH_MEMORY" != 1 ] || l2_fresh_memory
  [ "$L2_TRACE_BOOT" != 1 ] || l2_trace_begin
  [ "$L2_TRACE_FAULTS" != 1 ] || l2_fault_trace_begin
  [ "$L2_BOOT_WORK" != 1 ] || echo "L2-BOOTWORK $L2_NAME start $(l2_boot_counters)"
  # L1's KVM counters (all VMs: one runs at a time) where the run starts; a marker handler prints
  # them again (debian_markers), so the difference is this run's exits, by kind.
  echo "L2-KVM $L2_NAME start $(l2_kvm_counters)"
  t0=$(l2_uptime)
  L2_T0=$t0
  # fd 3 keeps the console input open (no EOF for the VMM) and is how @@FINAL is answered.
  exec 3<>"$L2_DIR/in"
  l2_watchdog &
  wd=$!
  if [ -n "${L2_ON_SCREEN:-}" ]; then
    : > "$L2_DIR/screen"
    "$L2_ON_SCREEN" &
    screen=$!
  fi
  local cmdline="console=ttyS0 reboot=k panic=1 quiet guest_timeout=$((L2_TIMEOUT - 20)) final=reboot final_marker=1 $gargs"
  (
    if [ "${L2_VMM:-microvm}" = qemu ] && [ -n "${L2_FIRMWARE:-}" ]; then
      # shellcheck disable=SC2086  # L2_QEMU is a command with its arguments
      $L2_QEMU -enable-kvm -m "$L2_MEM" -nodefaults -no-user-config -display none -serial stdio \
        -monitor none -no-reboot "$@" <"$L2_DIR/in" 2>"$L2_DIR/err" &
    elif [ "${L2_VMM:-microvm}" = qemu ]; then
      # shellcheck disable=SC2086  # L2_QEMU is a command with its arguments
      $L2_QEMU -enable-kvm -m "$L2_MEM" -nodefaults -no-user-config -display none -serial stdio \
        -monitor none -no-reboot -kernel "$L2_KERNEL" -initrd "$L2_INITRD" -append "$cmdline" \
        "$@" <"$L2_DIR/in" 2>"$L2_DIR/err" &
    elif [ -n "${L2_FIRMWARE:-}" ]; then
      "$MICROVM" --firmware="$L2_FIRMWARE" --memory="$L2_MEM" --api-socket="$L2_DIR/api.sock" "$@" \
        <"$L2_DIR/in" 2>"$L2_DIR/err" &
    else
      "$MICROVM" --kernel="$L2_KERNEL" --initrd="$L2_INITRD" --memory="$L2_MEM" --cmdline="$cmdline" \
        --api-socket="$L2_DIR/api.sock" "$@" <"$L2_DIR/in" 2>"$L2_DIR/err" &
    fi
    echo $! > "$L2_DIR/pid"
    wait $!
    echo $? > "$L2_DIR/status"
  ) | l2_screen_copy | l2_console
  exec 3>&-
  [ -z "$screen" ] || { kill "$screen" 2>/dev/null; wait "$screen" 2>/dev/null; }
  kill "$wd" 2>/dev/null
  wait "$wd" 2>/dev/null
  status=$(cat "$L2_DIR/status" 2>/dev/null)
  echo "L2-KVM $L2_NAME end $(l2_kvm_counters)"
  [ "$L2_TRACE_FAULTS" != 1 ] || l2_fault_trace_end
  # The VMM's socket janitor removes the socket when the VMM has ended, jailed or not, before its
  # exit status is seen (docs/security.md; a VMM killed with SIGKILL leaves it to the janitor a
  # moment later). The stop scenarios fail on this line (nested_killed_check).
  local waited=0
  while [ -e "$L2_DIR/api.sock" ] && [ "$waited" -lt 10 ]; do sleep 0.5; waited=$((waited + 1)); done
  if [ -e "$L2_DIR/api.sock" ]; then
    l2_action "api socket left behind: $L2_DIR/api.sock"
  fi
  sed "s/^/L2ERR[$L2_NAME]| /" "$L2_DIR/err"
  echo "L2-END $L2_NAME status=${status:-none} seconds=$(l2_seconds_since "$t0")"
  L2_MARKERS=""
  L2_VMM=microvm
  L2_FIRMWARE=""
  L2_ON_FINAL=""
  L2_ON_SCREEN=""
}

l2_screen_copy() {  # the console's bytes on, and into $L2_DIR/screen too with L2_ON_SCREEN
  if [ -n "${L2_ON_SCREEN:-}" ]; then tee -a "$L2_DIR/screen"; else cat; fi
}
