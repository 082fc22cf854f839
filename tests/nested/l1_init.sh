#!/bin/busybox sh
# shellcheck shell=dash
# /init of the nested tier's L1 guest (tools/make-nested-initramfs packs it): Debian's cloud kernel
# under QEMU TCG (-cpu max emulates AMD SVM with nested paging). It loads kvm-amd, so L1 has a real
# /dev/kvm, mounts the ext4 work disk (the first virtio-blk disk, /dev/vda) at /l1disk, runs
# /l1disk/job.sh (written by tests/nested/nested_harness.sh; it uses tests/nested/l1_lib.sh, which
# it finds at /l1disk/l1_lib.sh) and powers off. What the host reads on L1's console:
#   L1-INIT ...            L1 reached /init (its uptime)
#   L1-KVM ...             /dev/kvm is there (kvm-amd's "Nested Paging" line)
#   L1-NO-KVM REASON       no /dev/kvm (the host's QEMU/CPU model cannot do nested SVM): the test fails
#   L1-FAIL REASON         L1 itself failed (no work disk, no job)
#   L1-ALIVE uptime=S      a heartbeat every 15 s, so the host tells a stalled L1 (the emulation
#                          stuck, no kernel message) from a long quiet L2 run
#   L1-DONE                the job finished; L1 powers off next
#   L2-... / L2[name]| ... the job's L2 runs (see l1_lib.sh)
# L1's kernel logs errors (and with l1_verbose=1 on its command line, everything) to ttyS1, which
# the host keeps apart from this console.

export PATH=/usr/local/bin:/bin:/sbin:/usr/bin:/usr/sbin
/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /tmp /mnt /l1disk
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
# cgroup v2 with every controller (the jail scenario's --jail-cgroup).
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
# KVM's exit and injection counters (tools/bench-linux reads them per workload).
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
# The job's console is ttyS0; L1's kernel (console=ttyS1) logs to the second port, so its lines
# never land inside one of the job's (tests/nested/nested_harness.sh reads each from its own file).
exec </dev/ttyS0 >/dev/ttyS0 2>&1
grep -q 'l1_verbose=1' /proc/cmdline && dmesg -n 8

l1_end() {
  sync
  umount /l1disk 2>/dev/null
  poweroff -f
  sleep 2
  echo o > /proc/sysrq-trigger
}

read -r up _ < /proc/uptime
echo "L1-INIT uptime=$up kernel=$(uname -r) cpus=$(grep -c ^processor /proc/cpuinfo)"

# The kvm modules (and virtio_blk) come from /etc/modules.load like the L2 guest's; an insmod that
# fails is reported and the job carries on (the /dev/kvm check below is what matters).
while read -r path; do
  name=${path##*/}
  insmod "$path" 2>/tmp/insmod.err || echo "L1-INFO insmod ${name%.ko} failed: $(cat /tmp/insmod.err)"
done < /etc/modules.load

if [ ! -c /dev/kvm ]; then
  if ! grep -qw svm /proc/cpuinfo; then
    echo "L1-NO-KVM the L1 CPU has no svm flag (QEMU's -cpu model cannot do nested SVM under TCG)"
  else
    echo "L1-NO-KVM kvm-amd did not create /dev/kvm: $(dmesg | grep -iE 'kvm|svm' | tail -n 3 | tr '\n' ' ')"
  fi
  l1_end
fi
echo "L1-KVM $(dmesg | grep -m1 'Nested Paging' | sed 's/^\[ *[0-9.]*\] //')"

i=0
until [ -b /dev/vda ]; do
  i=$((i + 1))
  [ $i -ge 100 ] && { echo "L1-FAIL no /dev/vda (work disk)"; l1_end; }
  sleep 0.1
done
mount -t ext4 /dev/vda /l1disk || { echo "L1-FAIL cannot mount the work disk /dev/vda"; l1_end; }
[ -r /l1disk/job.sh ] && [ -r /l1disk/l1_lib.sh ] || { echo "L1-FAIL no /l1disk/job.sh or /l1disk/l1_lib.sh"; l1_end; }
read -r up _ < /proc/uptime
echo "L1-READY uptime=$up"
(
  while sleep 15; do
    read -r up _ < /proc/uptime
    echo "L1-ALIVE uptime=$up"
  done
) &
cd /l1disk || l1_end
. /l1disk/l1_lib.sh
. /l1disk/job.sh
read -r up _ < /proc/uptime
echo "L1-DONE uptime=$up"
l1_end
