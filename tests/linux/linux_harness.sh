#!/usr/bin/env bash
# Helpers for tests that boot Debian's cloud kernel with the tests/linux initramfs under QEMU (TCG)
# and run one guest scenario per boot (see tests/linux/init.sh for the scenarios and their RESULT
# lines). Source it; it defines functions and LINUX_* variables only.
#
#   linux_require                      skip (test_skip) unless QEMU, the cloud kernel,
#                                      busybox-static, fio and genisoimage/xorriso are there
#   linux_setup WORK MAKE_INITRAMFS INIT_SH [CACHE_DIR]
#                                      build the initramfs into WORK (LINUX_INITRAMFS)
#   linux_make_disk PATH SIZE          a sparse raw image (truncate -s SIZE)
#   linux_make_iso PATH LABEL FILE BYTES SEED
#                                      an ISO 9660 (Rock Ridge + Joliet) holding FILE: BYTES of
#                                      seeded pseudo-random data; its md5 in LINUX_ISO_MD5
#   linux_drive_opts IMAGE             "cache=none,aio=io_uring" or the first fallback QEMU accepts
#   linux_boot NAME "GUEST ARGS" [QEMU DEVICE ARGS...]
#                                      one QEMU run; serial log in LINUX_LOG (= WORK/NAME.log),
#                                      exit status in LINUX_STATUS, wall time in LINUX_SECONDS
#   linux_monitor "HMP COMMAND"        send a command to the running QEMU's monitor; prints the reply
#   linux_qemu_cd_markers MARKER       a LINUX_ON_MARKER handler for QEMU's own scsi-cd/ide-cd:
#                                      EJECT-NOW -> "eject -f $LINUX_CD_ID", INSERT-NOW ->
#                                      "change $LINUX_CD_ID $LINUX_CD_NEXT raw read-only"
#   linux_result KEY [LOG]             the first RESULT KEY= value of a run (default LINUX_LOG)
#   linux_results KEY [LOG]            every RESULT KEY= value, one per line
#   linux_check_pass NAME SCENARIO     QEMU exited 0 and the guest printed "SCENARIO x PASS"
#   linux_expect NAME KEY VALUE        RESULT KEY equals VALUE
#   linux_expect_match NAME KEY REGEX  RESULT KEY matches the extended regex
#   linux_fail NAME MESSAGE            count a failure (LINUX_FAILURES) and show the run's log
#   linux_report KEY...                print the last run's RESULT lines for these keys, indented
#   linux_check_iso NAME ISO           the iso scenario passed, with the file checked and sr's size
#                                      matching ISO
#   linux_elapsed START                seconds since START (a `date +%s.%N` value), one decimal
#   linux_work_dir PREFIX              WORK: $TEST_TMPDIR/linux under Bazel, else a fresh
#                                      /tmp/PREFIX.XXXXXX (removed at exit unless LINUX_KEEP=1)
#
# Settings (environment or variables, read at each linux_boot):
#   LINUX_MACHINE=q35  LINUX_MEM=512M  LINUX_SMP=2  LINUX_ACCEL=tcg  LINUX_CPU=max
#   LINUX_MEMFD=1          guest RAM from memory-backend-memfd,share=on (vhost-user needs it)
#   LINUX_TIMEOUT=150      seconds before QEMU is killed; the guest gives up 10 s earlier
#   LINUX_ON_MARKER=FUNC   called as FUNC MARKER for every "@@MARKER" console line, in order
#   LINUX_APPEND=""        extra kernel command-line words (e.g. "verbose=1")
#   LINUX_QEMU_EXTRA=()    extra QEMU arguments for every run (array)
#   LINUX_VMM_LABEL=qemu   prefix of the VMM's output (WORK/NAME.qemu.log) in a failure's log

LINUX_FAILURES=${LINUX_FAILURES:-0}
LINUX_LOG=""
LINUX_STATUS=""
LINUX_SECONDS=""
LINUX_MON=""

# The one way a shell test skips (test_skip, counted by tools/test; docs/testing.md).
# shellcheck source=../support/skip.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/skip.sh"

linux_elapsed() {  # start (date +%s.%N): seconds since then, one decimal
  awk -v s="$1" -v n="$(date +%s.%N)" 'BEGIN { printf "%.1f", n - s }'
}

linux_require() {
  LINUX_QEMU=$(command -v qemu-system-x86_64 || true)
  [ -n "$LINUX_QEMU" ] || test_skip "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
  file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' ||
    test_skip "no static busybox (apt-get install busybox-static)"
  command -v fio >/dev/null || test_skip "fio is not installed (apt-get install fio)"
  [ -x /sbin/mke2fs ] || test_skip "mke2fs is missing (apt-get install e2fsprogs)"
  LINUX_MKISOFS=$(command -v genisoimage || command -v mkisofs || command -v xorrisofs || true)
  if [ -z "$LINUX_MKISOFS" ] && command -v xorriso >/dev/null; then
    LINUX_MKISOFS="xorriso -as mkisofs"
  fi
  [ -n "$LINUX_MKISOFS" ] || test_skip "no ISO 9660 writer (apt-get install genisoimage)"
  local v
  for v in $(ls -d /lib/modules/*-cloud-amd64 2>/dev/null | sort -V -r); do
    v=${v##*/}
    if [ -r "/boot/vmlinuz-$v" ] && [ -r "/lib/modules/$v/modules.dep" ]; then
      LINUX_KVER=$v
      LINUX_KERNEL=/boot/vmlinuz-$v
      return 0
    fi
  done
  test_skip "no readable Debian cloud kernel in /boot and /lib/modules (apt-get install linux-image-cloud-amd64)"
}

linux_setup() {  # work make-initramfs init.sh [cache-dir]
  LINUX_WORK=$1
  mkdir -p "$LINUX_WORK"
  local start=$SECONDS
  LINUX_INITRAMFS=$LINUX_WORK/initramfs.gz
  "$2" --kernel-version "$LINUX_KVER" --init "$3" ${4:+--cache "$4"} "$LINUX_INITRAMFS" ||
    { echo "FAIL: $2 could not build the initramfs"; exit 1; }
  echo "initramfs: $(stat -c %s "$LINUX_INITRAMFS") bytes (kernel $LINUX_KVER), built in $((SECONDS - start)) s"
}

linux_make_disk() { rm -f "$1"; truncate -s "$2" "$1"; }

linux_seeded_bytes() {  # seed bytes: deterministic pseudo-random data on stdout
  if command -v openssl >/dev/null; then
    head -c "$2" /dev/zero |
      openssl enc -aes-128-ctr -nosalt -K "$(printf '%032x' "$1")" -iv 00000000000000000000000000000000
  else
    seq -f "microvm seed $1 line %.0f" 1 $(($2 / 16 + 1)) | head -c "$2"
  fi
}

linux_make_iso() {  # path label file bytes seed
  local dir
  dir=$(mktemp -d "${LINUX_WORK:-/tmp}/iso.XXXXXX")
  linux_seeded_bytes "$5" "$4" > "$dir/$3"
  LINUX_ISO_MD5=$(md5sum < "$dir/$3" | cut -d' ' -f1)
  $LINUX_MKISOFS -quiet -R -J -V "$2" -o "$1" "$dir" || { echo "FAIL: $LINUX_MKISOFS $1"; exit 1; }
  rm -rf "$dir"
}

linux_drive_opts() {  # image: the first of the usual -drive options QEMU accepts for it
  local opts
  for opts in "cache=none,aio=io_uring" "cache=none,aio=threads" "cache=writeback,aio=threads"; do
    if printf 'quit\n' | timeout 20 "$LINUX_QEMU" -M none -nodefaults -display none -monitor stdio \
         -drive "file=$1,if=none,id=d0,format=raw,$opts" >/dev/null 2>&1; then
      echo "$opts"
      return 0
    fi
  done
  echo "cache=writeback"
}

linux_monitor() {  # "hmp command": the reply on stdout
  [ -n "$LINUX_MON" ] || { echo "linux_monitor: no QEMU running" >&2; return 1; }
  local before i text
  before=$(stat -c %s "$LINUX_MON.log" 2>/dev/null || echo 0)
  # QEMU holds both FIFOs open read-write; the timeout only matters when it has gone.
  timeout 5 sh -c 'printf "%s\n" "$1" > "$2"' sh "$1" "$LINUX_MON.in" || return 1
  for ((i = 0; i < 100; i++)); do
    text=$(tail -c +$((before + 1)) "$LINUX_MON.log" 2>/dev/null | tr -d '\r')
    case "$text" in *"(qemu) ") break ;; esac
    sleep 0.1
  done
  # The first line is readline's echo of the command (redrawn per character); the last, the prompt.
  printf '%s' "$text" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g' | sed '1d' |
    grep -v -e '^(qemu)' -e '^[[:space:]]*$' || true
}

LINUX_CD_ID=${LINUX_CD_ID:-cd0}
linux_qemu_cd_markers() {  # marker: answers the media scenario through QEMU's monitor
  local reply
  case "$1" in
    EJECT-NOW)
      reply=$(linux_monitor "eject -f $LINUX_CD_ID")
      echo "  monitor: eject -f $LINUX_CD_ID${reply:+ -> $reply}" ;;
    INSERT-NOW)
      reply=$(linux_monitor "change $LINUX_CD_ID $LINUX_CD_NEXT raw read-only")
      echo "  monitor: change $LINUX_CD_ID ${LINUX_CD_NEXT##*/}${reply:+ -> $reply}" ;;
    *) echo "  (no answer to marker @@$1)" ;;
  esac
}

linux_boot() {  # name "guest args" [qemu args...]
  local name=$1 args=$2
  shift 2
  local timeout=${LINUX_TIMEOUT:-150} mem=${LINUX_MEM:-512M}
  LINUX_LOG=$LINUX_WORK/$name.log
  LINUX_MON=$LINUX_WORK/$name.mon
  rm -f "$LINUX_LOG" "$LINUX_MON".{in,out,log}
  mkfifo "$LINUX_MON.in" "$LINUX_MON.out"
  local memargs=()
  if [ "${LINUX_MEMFD:-0}" = 1 ]; then
    memargs=(-object "memory-backend-memfd,id=mem,size=$mem,share=on" -machine memory-backend=mem)
  fi
  local cmd=("$LINUX_QEMU" -accel "${LINUX_ACCEL:-tcg}" -cpu "${LINUX_CPU:-max}"
             -M "${LINUX_MACHINE:-q35}" -m "$mem" -smp "${LINUX_SMP:-2}" "${memargs[@]}"
             -nodefaults -no-reboot -display none -serial "file:$LINUX_LOG"
             -chardev "pipe,id=mon0,path=$LINUX_MON" -mon chardev=mon0,mode=readline
             -kernel "$LINUX_KERNEL" -initrd "$LINUX_INITRAMFS"
             -append "console=ttyS0 quiet panic=-1 guest_timeout=$((timeout > 20 ? timeout - 10 : timeout)) $args ${LINUX_APPEND:-}"
             "${LINUX_QEMU_EXTRA[@]}" "$@")
  printf '%q ' "${cmd[@]}" > "$LINUX_WORK/$name.cmd"
  local start
  start=$(date +%s.%N)
  cat "$LINUX_MON.out" > "$LINUX_MON.log" &
  local cat_pid=$!
  timeout "$timeout" "${cmd[@]}" </dev/null >"$LINUX_WORK/$name.qemu.log" 2>&1 &
  local qemu_pid=$! handled=0 markers marker
  while kill -0 "$qemu_pid" 2>/dev/null; do
    if [ -n "${LINUX_ON_MARKER:-}" ] && [ -f "$LINUX_LOG" ]; then
      markers=$(tr -d '\r' < "$LINUX_LOG" | sed -n 's/^@@\([A-Za-z0-9_-]*\)$/\1/p')
      for marker in $(echo "$markers" | tail -n +$((handled + 1))); do
        handled=$((handled + 1))
        echo "  $name: guest printed @@$marker after $(linux_elapsed "$start") s"
        "$LINUX_ON_MARKER" "$marker"
      done
    fi
    sleep 0.1
  done
  wait "$qemu_pid"
  LINUX_STATUS=$?
  LINUX_SECONDS=$(linux_elapsed "$start")
  kill "$cat_pid" 2>/dev/null
  wait "$cat_pid" 2>/dev/null
  LINUX_MON=""
  # The serial log has CRLF line ends; keep a plain copy for the checks.
  tr -d '\r' < "$LINUX_LOG" > "$LINUX_LOG.tmp" 2>/dev/null && mv "$LINUX_LOG.tmp" "$LINUX_LOG"
  echo "ran $name ($args): QEMU status $LINUX_STATUS in $LINUX_SECONDS s"
}

LINUX_FAILED_CHECKS=()  # "name: message" of every failure, for a summary at the end
linux_fail() {  # name message
  echo "FAIL: $1: $2"
  LINUX_FAILED_CHECKS+=("$1: $2")
  if [ -n "$LINUX_LOG" ] && [ -f "$LINUX_LOG" ]; then
    sed 's/^/    | /' "$LINUX_LOG"
  fi
  if [ -s "$LINUX_WORK/$1.qemu.log" ]; then
    sed "s/^/    ${LINUX_VMM_LABEL:-qemu}| /" "$LINUX_WORK/$1.qemu.log"
  fi
  LINUX_FAILURES=$((LINUX_FAILURES + 1))
}

linux_result() { grep -m1 "^RESULT $1=" "${2:-$LINUX_LOG}" | cut -d= -f2-; }
linux_results() { grep "^RESULT $1=" "${2:-$LINUX_LOG}" | cut -d= -f2-; }

linux_check_pass() {  # name scenario: 0 when QEMU exited 0 after "SCENARIO <scenario> PASS"
  if [ "$LINUX_STATUS" != 0 ]; then
    linux_fail "$1" "QEMU exit status $LINUX_STATUS (124: timed out after ${LINUX_TIMEOUT:-150} s)"
    return 1
  fi
  if ! grep -qx "SCENARIO $2 PASS" "$LINUX_LOG"; then
    linux_fail "$1" "no 'SCENARIO $2 PASS'$(grep -m1 "^SCENARIO $2 FAIL" "$LINUX_LOG" | sed 's/^/: /')"
    return 1
  fi
}

linux_expect() {  # name key value
  local got
  got=$(linux_result "$2")
  [ "$got" = "$3" ] || { linux_fail "$1" "RESULT $2 is '$got', expected '$3'"; return 1; }
}

linux_expect_match() {  # name key regex
  local got
  got=$(linux_result "$2")
  echo "$got" | grep -Eq -- "$3" || { linux_fail "$1" "RESULT $2 is '$got', expected to match '$3'"; return 1; }
}

linux_report() {  # keys...
  local key
  for key in "$@"; do
    linux_results "$key" | sed "s/^/    $key: /"
  done
}

linux_check_iso() {  # name iso
  linux_check_pass "$1" iso || return 1
  linux_expect "$1" iso ok
  linux_expect "$1" sr_size_sectors "$(( $(stat -c %s "$2") / 512 ))"
}

linux_work_dir() {  # prefix
  if [ -n "${TEST_TMPDIR:-}" ]; then
    WORK=$TEST_TMPDIR/linux
  else
    WORK=$(mktemp -d "/tmp/$1.XXXXXX")
    [ -n "${LINUX_KEEP:-}" ] || LINUX_CLEANUP+=("$WORK")
  fi
}

LINUX_CLEANUP=()
linux_cleanup() { [ ${#LINUX_CLEANUP[@]} -eq 0 ] || rm -rf "${LINUX_CLEANUP[@]}"; }
