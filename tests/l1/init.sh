#!/bin/busybox sh
# shellcheck shell=dash
# /init of the L1 guest that runs one Bazel test on a real KVM (tests/l1/run_in_l1.sh boots it):
# Debian's cloud kernel under QEMU TCG (-cpu max emulates AMD SVM with nested paging) loads kvm-amd,
# mounts the host's file system as the host's test sandbox sees it (virtiofs, tag "host") at /host,
# gives it L1's own /proc, /sys, /dev (with /dev/kvm) and /dev/shm, and runs the job script
# named by l1_job= on the kernel command line there (chroot), with the test's output on ttyS0.
# What the host reads on ttyS0, besides the test's own output:
#   L1-NO-KVM REASON     kvm-amd did not create /dev/kvm: the run fails (no test runs)
#   L1-FAIL REASON       L1 could not set up the test (no virtiofs, no job)
#   L1-TRACE ...         a failed test during which a guest shut down: L1's KVM events before it
#   L1-EMULATION-FAULT   ... and that shutdown has the nested emulation's signature (below)
#   L1-EXIT status=N     the test's exit status; L1 powers off next
# L1's kernel logs to ttyS1, which the host keeps apart.

export PATH=/usr/local/bin:/bin:/sbin:/usr/bin:/usr/sbin
/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /tmp /host
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
exec </dev/null >/dev/ttyS0 2>&1

l1_end() {
  sync
  poweroff -f
  sleep 2
  echo o > /proc/sysrq-trigger
}

while read -r path; do
  name=${path##*/}
  insmod "$path" 2>/tmp/insmod.err || echo "L1-INFO insmod ${name%.ko} failed: $(cat /tmp/insmod.err)"
done < /etc/modules.load

if [ ! -c /dev/kvm ]; then
  echo "L1-NO-KVM kvm-amd did not create /dev/kvm: $(dmesg | grep -iE 'kvm|svm' | tail -n 3 | tr '\n' ' ')"
  l1_end
fi
job=$(tr ' ' '\n' < /proc/cmdline | sed -n 's/^l1_job=//p')
mount -t virtiofs host /host || { echo "L1-FAIL cannot mount the host's file system (virtiofs)"; l1_end; }
# Not /tmp: the workspace, and so the runfiles' links, may be there (a clone in /tmp).
for fs in proc:proc sysfs:sys devtmpfs:dev devpts:dev/pts tmpfs:dev/shm; do
  mkdir -p "/host/${fs#*:}" 2>/dev/null
  mount -t "${fs%%:*}" "${fs%%:*}" "/host/${fs#*:}" ||
    { echo "L1-FAIL cannot mount ${fs%%:*} on /host/${fs#*:}"; l1_end; }
done
[ -n "$job" ] && [ -r "/host$job" ] || { echo "L1-FAIL no job script '$job'"; l1_end; }
# A heartbeat on the kernel's port, so the host tells a stalled L1 from a long quiet test.
( while sleep 15; do read -r up _ < /proc/uptime; echo "L1-ALIVE uptime=$up" > /dev/ttyS1; done ) &
echo "L1-KVM $(dmesg | grep -m1 'Nested Paging' | sed 's/^\[ *[0-9.]*\] //')"
# L1's KVM events in a ring through the test (as the nested tier's L2_TRACE_FAULTS): when a test
# fails after a guest shut down (an L2 triple fault), what that vCPU did last is in the test's log.
trace=/sys/kernel/debug/tracing
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
if [ -w "$trace/buffer_size_kb" ]; then
  echo 2048 > "$trace/buffer_size_kb"
  for e in kvm_exit kvm_entry kvm_userspace_exit kvm_pio kvm_mmio kvm_inj_exception kvm_inj_virq \
           kvm_page_fault; do
    echo 1 > "$trace/events/kvm/$e/enable" 2>/dev/null
  done
  # The ring stops at the first shutdown exit (SVM_EXIT_SHUTDOWN, 127), so a test that runs on for
  # minutes after it cannot overwrite what led to it.
  echo 'traceoff if exit_reason == 127' > "$trace/events/kvm/kvm_exit/trigger" 2>/dev/null
  echo 1 > "$trace/tracing_on"
fi
chroot /host /bin/bash "$job"
status=$?
if [ "$status" != 0 ] && [ -r "$trace/trace" ]; then
  echo 0 > "$trace/tracing_on"
  first=$(grep -n -m1 'kvm_exit: .*reason shutdown' "$trace/trace" | cut -d: -f1)
  if [ -n "$first" ]; then
    echo "L1-TRACE a guest shut down (triple fault); L1's last KVM events before it:"
    sed -n "$((first > 60 ? first - 60 : 1)),${first}p" "$trace/trace" | sed 's/^/L1-TRACE| /'
    # The nested emulation's signature (docs/nested.md, "L2 triple faults and hangs"; the same
    # rule as l2_emulation_fault in tests/nested/l1_lib.sh): right after an entry (that vCPU's
    # event before the shutdown is a kvm_entry) the guest could not deliver a #PF for a page not
    # present (EXITINTINFO 0x80000b0e, error code bit 0 clear) or the external interrupt the entry
    # injected (0x800000VV). run_in_l1.sh runs such a test once more in a new L1.
    shutdown=$(sed -n "${first}p" "$trace/trace")
    task=$(echo "$shutdown" | awk '{print $1}')
    before=$(head -n $((first - 1)) "$trace/trace" | awk -v t="$task" '$1 == t' | tail -n 1)
    if echo "$shutdown" | grep -qE 'intr_info 0x80000b0e error_code 0x[0-9a-f]*[02468ace]$'; then
      case "$before" in
        *" kvm_entry: "*) echo "L1-EMULATION-FAULT $task: #PF 0x80000b0e (page not present) on the first instructions after an entry" ;;
      esac
    elif echo "$shutdown" | grep -qE 'intr_info 0x800000[0-9a-f]{2} error_code 0x[0-9a-f]+$'; then
      case "$before" in
        *" kvm_entry: "*) echo "L1-EMULATION-FAULT $task: external interrupt $(echo "$shutdown" | sed 's/.*intr_info 0x800000\([0-9a-f]*\).*/0x\1/') undeliverable at the entry that injected it" ;;
      esac
    fi
  fi
fi
echo "L1-EXIT status=$status"
l1_end
