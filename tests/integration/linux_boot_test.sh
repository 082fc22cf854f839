#!/usr/bin/env bash
# Opt-in (tagged manual): boots a Debian kernel with a busybox initramfs in microvm and checks that
# /init runs and its reboot ends the VMM. Under PVM this takes many minutes (docs/linux-boot.md);
# on hardware KVM, seconds.
#   bazel test //tests/integration:linux_boot_test --test_output=streamed
# Environment: LINUX_KERNEL (default: the newest /boot/vmlinuz-*), LINUX_BOOT_TIMEOUT (seconds,
# default 3000), LINUX_VCPUS (default 2).
set -uo pipefail
microvm=$1
make_initramfs=$2

# shellcheck source=../support/skip.sh
source "$(dirname "$0")/../support/skip.sh"
if [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; then
  test_skip "/dev/kvm is missing or not accessible"
fi
kernel=${LINUX_KERNEL:-$(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)}
if [ -z "$kernel" ] || [ ! -r "$kernel" ]; then
  test_skip "no kernel (apt-get install linux-image-cloud-amd64, or set LINUX_KERNEL)"
fi
if ! file -L /bin/busybox 2>/dev/null | grep -q 'statically linked'; then
  test_skip "no static busybox (apt-get install busybox-static)"
fi

work=${TEST_TMPDIR:-$(mktemp -d)}
"$make_initramfs" "$work/initramfs.gz" || exit 1
log=$work/console.log
start=$(date +%s)
# noxsave: PVM shows XSAVE to the guest whatever CPUID says, and its emulator fails on XRSTOR.
timeout "${LINUX_BOOT_TIMEOUT:-3000}" "$microvm" --kernel="$kernel" --initrd="$work/initramfs.gz" \
  --cmdline="console=ttyS0 reboot=k panic=-1 noxsave" --memory=512M --vcpus="${LINUX_VCPUS:-2}" \
  --cpu-features=-xsave,-cx16 --boot-report </dev/null >"$log" 2>&1
status=$?
elapsed=$(( $(date +%s) - start ))
cat "$log"
echo "linux_boot_test: microvm exited with status $status after $elapsed s"
if ! grep -q "microvm-linux: /init reached" "$log"; then
  echo "FAIL: /init was not reached"
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "FAIL: the guest's reboot did not end the VMM cleanly"
  exit 1
fi
echo "PASS: Linux reached /init and rebooted in $elapsed s"
