#!/bin/bash
# Runs the test guest's ATA/ATAPI driver against QEMU's PIIX3 IDE (ide-hd + ide-cd, the known-good
# reference): ide-probe (two device layouts), ide-cd (DMA and PIO with several byte count limits),
# ide-disk (LBA48 beyond 2^28 and 2^32, PIO, flushes), ide-errors (the answers QEMU gives),
# ide-media (medium change driven through the HMP monitor when the guest prints @@EJECT cd /
# @@INSERT cd) and ide-bench (numbers printed, never judged). See docs/test-guest.md, "IDE".
# Skips (test_skip) when /dev/kvm, qemu-system-x86_64 or python3 is missing.
#
# Usage: qemu_ide_test.sh [path/to/test_guest [path/to/make-pattern-image]]
#   QEMU_RUN_TIMEOUT  seconds per QEMU run (default 60; a run takes 2-6 s)
#   QEMU_IDE_KEEP=1   keep the work directory (outside Bazel)
set -u
# fail, check_status, expect_line, expect_match, guest_status, hmp, wait_for_line, probe_drive,
# setup_work, make_pattern_images
source "$(dirname "$0")/qemu_harness.sh"
trap '' PIPE

setup_work ide QEMU_IDE_KEEP "$@"  # GUEST, MKIMG, RUN_TIMEOUT, WORK, SOCKDIR; skips without KVM/QEMU

# Images: every 512-byte block carries {"MVMPATRN", seed, block number} and a fill the guest can
# recompute (tools/make-pattern-image). The disk is 64 MiB of pattern extended (sparse, zeros) to
# 2 TiB + 64 MiB, so LBAs above 2^28 and 2^32 exist; where the filesystem refuses, 130 GiB.
PATTERN_BLOCKS=131072  # 64 MiB
make_pattern_images
DISK_SIZE=$(((4294967296 + 131072) * 512))
if ! truncate -s "$DISK_SIZE" "$WORK/probe-size.img" 2>/dev/null; then
  DISK_SIZE=$((130 * 1024 * 1024 * 1024))
  echo "note: no 2 TiB sparse file here; the disk is 130 GiB"
fi
rm -f "$WORK/probe-size.img"
DISK_SECTORS=$((DISK_SIZE / 512))

# cache=none like the benchmark setup; fall back when the filesystem refuses O_DIRECT.
DRIVE_OPTS="cache=none"
if ! probe_drive "$DRIVE_OPTS"; then
  DRIVE_OPTS="cache=writeback"
  echo "note: cache=none refused here; using $DRIVE_OPTS"
fi

COMMON=(-M pc -enable-kvm -cpu host,-arch-capabilities -m 256M -nodefaults -display none
        -serial stdio -device isa-debug-exit,iobase=0xf4,iosize=1 -no-reboot -kernel "$GUEST")

FAILURES=0
OUT=""

# Device layouts. "split": disk = primary master (0:0), CD = secondary master (1:0).
# "shared": disk 0:0, CD = primary slave (0:1), secondary channel empty.
# A fresh copy of the pristine disk for every run.
devices() {
  local layout="${1:-split}"
  cp "$WORK/disk-pristine.img" "$WORK/disk.img"
  truncate -s "$DISK_SIZE" "$WORK/disk.img"
  local cd_bus="ide.1" cd_unit=0
  if [[ "$layout" == shared ]]; then cd_bus="ide.0" cd_unit=1; fi
  DEVICES=(-drive "file=$WORK/disk.img,if=none,id=d0,format=raw,$DRIVE_OPTS"
           -device ide-hd,drive=d0,bus=ide.0,unit=0
           -drive "file=$WORK/cd.iso,if=none,id=cd0,format=raw,media=cdrom,readonly=on"
           -device "ide-cd,drive=cd0,bus=$cd_bus,unit=$cd_unit")
}

# run NAME LAYOUT EXPECTED_STATUS "GUEST ARGS"; the serial output ends up in $OUT.
run() {
  local name="$1" layout="$2" expected="$3" args="$4"
  OUT="$WORK/$name.out"
  devices "$layout"
  local start=$SECONDS
  timeout "$RUN_TIMEOUT" "$QEMU_BIN" "${COMMON[@]}" "${DEVICES[@]}" -append "$args" </dev/null >"$OUT" 2>&1
  local status=$?
  echo "ran $name ($args): status $status in $((SECONDS - start)) s"
  check_status "$name" "$status" "$expected"
}

PASS_STATUS="$(guest_status 0)"

if run probe split "$PASS_STATUS" "test=ide-probe disk=0:0 cd=1:0 none=0:1,1:1 devices=2"; then
  expect_line probe "TEST ide-probe: PASS"
  expect_line probe "ata: IDE function 00:01.1 8086:7010 (PIIX3) class 010180 (prog-if 0x80: primary compatibility, secondary compatibility, bus master)"
  expect_line probe "ata: 0:0 ATA (ATA signature 00/00): signature 01/01/00/00 status 0x50 error 0x01, registers latch"
  expect_line probe "ata: 1:0 ATAPI (PACKET signature 14/EB): signature 01/01/14/eb status 0x00 error 0x01, registers latch"
  expect_match probe '^ata: 0:1 none '
  expect_line probe 'ide-probe: 0:0 model "QEMU HARDDISK" serial "QM00001" firmware "2.5+"'
  expect_line probe "ide-probe: 0:0 capacity $DISK_SECTORS sectors x 512 bytes ($((DISK_SIZE >> 20)) MiB), LBA yes, LBA48 yes (LBA28 capacity 268435455), ATA major 7"
  expect_match probe '^ide-probe: 0:0 UDMA modes 0,1,2,3,4,5 \(selected none\), MWDMA modes 0,1,2 \(selected 2\), FUA no .*write cache supported/enabled'
  expect_line probe 'ide-probe: 1:0 model "QEMU DVD-ROM" serial "QM00003" firmware "2.5+"'
  expect_match probe '^ide-probe: 1:0 ATAPI device type 0x05 \(CD/DVD\), 12-byte packets, DMA yes'
  expect_line probe "ide-probe: cd: TEST UNIT READY -> GOOD"
  expect_line probe 'ide-probe: cd: INQUIRY: type 0x05, removable, version 0x00, response format 1, "QEMU    " "QEMU DVD-ROM    " "2.5+" (36 bytes)'
  expect_line probe "ide-probe: cd: READ CAPACITY: 4096 blocks x 2048 bytes"
  expect_line probe "ide-probe: cd: READ TOC: length 18, tracks 1-1, track 1 (ADR/control 0x14) at LBA 0, lead-out (track 0xaa) at LBA 4096"
  expect_line probe "ide-probe: cd: READ TOC MSF lead-out: 00:56:46 (expected 00:56:46)"
  expect_line probe "ide-probe: cd: GET CONFIGURATION (DMA): current profile 0x0008 (CD-ROM)"
  expect_line probe "ide-probe: cd: GESN: 00 04 04 10 00 02 00 00"
fi

if run probe-shared shared "$PASS_STATUS" "test=ide-probe disk=0:0 cd=0:1 none=1:0,1:1 devices=2"; then
  expect_line probe-shared "TEST ide-probe: PASS"
  expect_line probe-shared "ata: 0:1 ATAPI (PACKET signature 14/EB): signature 01/01/14/eb status 0x00 error 0x01, registers latch"
  expect_match probe-shared '^ata: 1:0 none \(status 0x00 and the registers do not latch'
  expect_line probe-shared "ide-probe: cd: READ CAPACITY: 4096 blocks x 2048 bytes"
fi

if run cd split "$PASS_STATUS" "test=ide-cd seed=$CD_SEED"; then
  expect_line cd "TEST ide-cd: PASS"
  expect_match cd "^ide-cd: DMA: read and verified 4096 sectors \(8192 KiB\) from LBA 0 in [0-9]+ ms \([0-9]+ KiB/s\), 256 commands, .*seed $CD_SEED$"
  expect_match cd "^ide-cd: PIO bcl=0xfffe: read and verified 4096 sectors .* 256 DRQ blocks of 32768-32768 bytes, .*seed $CD_SEED$"
  expect_match cd "^ide-cd: PIO bcl=0x1000: read and verified 4096 sectors .* 2048 DRQ blocks of 4096-4096 bytes, .*seed $CD_SEED$"
  grep -E '^ide-cd: (DMA|PIO)' "$OUT" | sed 's/^/    /'
fi

# Byte count limits that do not divide a sector (DRQ blocks straddle sector boundaries), odd.
if run cd-bcl split "$PASS_STATUS" "test=ide-cd seed=$CD_SEED mode=pio pio_bcl=1000,2048,0xffff start=100 count=96 bs=3"; then
  expect_line cd-bcl "TEST ide-cd: PASS"
  expect_match cd-bcl "^ide-cd: PIO bcl=0x3e8: read and verified 96 sectors .* DRQ blocks of [0-9]+-1000 bytes"
fi

if run disk split "$PASS_STATUS" "test=ide-disk seed=$DISK_SEED pattern_blocks=$PATTERN_BLOCKS full=1 need48=1"; then
  expect_line disk "TEST ide-disk: PASS"
  expect_line disk "ide-disk: WRITE DMA FUA EXT (not advertised) LBA 5000 x8 -> status 0x41 (DRDY ERR) error 0x04 (ABRT) bm 0x05 (INTR ACTIVE)"
  expect_line disk "ide-disk: WRITE DMA EXT LBA 1000 x256 (3 PRD entries) + FLUSH CACHE EXT, READ DMA EXT: verified"
  expect_line disk "ide-disk: WRITE DMA EXT LBA 268435452 x8 (1 PRD entry) + FLUSH CACHE EXT, READ DMA EXT: verified"
  expect_line disk "ide-disk: WRITE SECTORS EXT LBA 268437456 x16, READ SECTORS EXT: verified"
  expect_line disk "ide-disk: SET MULTIPLE MODE 16 (max 16), WRITE MULTIPLE LBA 3200 x40, READ MULTIPLE EXT: verified, 3 DRQ blocks"
  if ((DISK_SECTORS > 4294967296)); then
    expect_line disk "ide-disk: WRITE DMA EXT LBA 4294967292 x8 (1 PRD entry) + FLUSH CACHE EXT, READ DMA EXT: verified"
  fi
  expect_match disk "^ide-disk: full check: $PATTERN_BLOCKS sectors verified"
fi

# The runtime's emulation of INS/OUTS (all forms) through the data register.
if run strio split "$PASS_STATUS" "test=ide-strio"; then
  expect_line strio "TEST ide-strio: PASS"
  expect_match strio '^ide-strio: IDENTIFY DEVICE read with insl x128: identical'
  expect_match strio '^ide-strio: WRITE SECTORS with rep outsl: read back identical'
fi

# ide-errors: every line is QEMU 7.2's answer (docs/test-guest.md has the table).
if run errors split "$PASS_STATUS" "test=ide-errors seed=$DISK_SEED cd_seed=$CD_SEED"; then
  expect_line errors "TEST ide-errors: PASS"
  expect_line errors "ide-errors: IDENTIFY DEVICE to absent 0:1 -> status 0x00, 0 data bytes"
  expect_line errors "ide-errors: PACKET (TEST UNIT READY) to absent 1:1 -> status 0x00, CDB not taken"
  expect_line errors "ide-errors: disk ATA command 0x01 (reserved) -> status 0x41 (DRDY ERR) error 0x04 (ABRT)"
  expect_line errors "ide-errors: cd IDENTIFY DEVICE (PACKET device) -> status 0x41 (DRDY ERR) error 0x04 (ABRT), signature 01/01/14/eb, 0 data bytes"
  expect_line errors "ide-errors: cd PACKET opcode 0xff -> status 0x41 (DRDY ERR) error 0x50 (sense key 5) sense 05/20/00 (ILLEGAL REQUEST: INVALID COMMAND OPERATION CODE)"
  expect_line errors "ide-errors: disk READ DMA EXT LBA $DISK_SECTORS (= capacity) x1 -> status 0x41 (DRDY ERR) error 0x04 (ABRT) bm 0x04 (INTR)"
  expect_line errors "ide-errors: cd READ(10) DMA LBA 4096 (= capacity) x1 -> status 0x41 (DRDY ERR) error 0x50 (sense key 5) bm 0x05 (INTR ACTIVE) sense 05/21/00 (ILLEGAL REQUEST: LOGICAL BLOCK ADDRESS OUT OF RANGE)"
  expect_line errors "ide-errors: disk READ DMA EXT x8 (4096 bytes), PRD of 2048 bytes -> status 0x50 (DRDY DSC) bm 0x00, first bytes 5a 5a"
  expect_line errors "ide-errors: disk READ DMA EXT x128 (64 KiB), one PRD entry with byte count 0 -> status 0x50 (DRDY DSC) bm 0x04 (INTR), data verified"
  expect_match errors "^ide-errors: disk READ DMA EXT x8, bus master never started \(300 ms\) -> .*TIMEOUT bus master never started \[channel reset\]$"
  expect_line errors "ide-errors: 0 unexpected answer(s)"
fi


OUT="$WORK/media.out"
MON="$SOCKDIR/mon.sock"
devices split
start=$SECONDS
timeout "$RUN_TIMEOUT" "$QEMU_BIN" "${COMMON[@]}" "${DEVICES[@]}" \
  -monitor "unix:$MON,server,nowait" -append "test=ide-media seed=$CD_SEED newseed=$NEW_SEED" \
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
  expect_line media "TEST ide-media: PASS"
  expect_match media '^ide-media: \+[0-9]+ ms TEST UNIT READY -> CHECK CONDITION 02/3A/00 '
  expect_match media '^ide-media: \+[0-9]+ ms TEST UNIT READY -> CHECK CONDITION 06/28/00 '
  # QEMU's two-step report after the insertion: once GESN shows NewMedia, TUR answers 02/3A/00
  # once more, then 06/28/00, then GOOD.
  seq="$(grep -E '^ide-media: \+[0-9]+ ms ' "$OUT" | sed -E 's/^ide-media: \+[0-9]+ ms //' |
         sed -n '/^GESN: 00 04 04 10 02 02 00 00$/,$p' | sed -E 's/ \(.*//' | tr '\n' '|')"
  expected_seq="GESN: 00 04 04 10 02 02 00 00|TEST UNIT READY -> CHECK CONDITION 02/3A/00|TEST UNIT READY -> CHECK CONDITION 06/28/00|TEST UNIT READY -> GOOD|"
  [[ "$seq" == "$expected_seq" ]] || fail "media: after the insertion '$seq', expected '$expected_seq'"
  expect_line media "ide-media: new medium: 1536 sectors (was 4096)"
  expect_match media "^ide-media: read and verified 1536 sectors by DMA in [0-9]+ ms, seed $NEW_SEED$"
  grep -E '^ide-media: (\+|GESN)' "$OUT" | sed 's/^/    /'
fi

# ide-bench: a report, not a pass/fail timing; the host's read of the same file beside it.
if run bench split "$PASS_STATUS" "test=ide-bench passes=2"; then
  expect_line bench "TEST ide-bench: PASS"
  expect_match bench "^ide-bench: dma bs=32768 reads=256 sectors=4096 bytes=8388608 elapsed_ms=[0-9]+ kib_per_s=[0-9]+ "
  grep -E '^ide-bench: ' "$OUT" | sed 's/^/    /'
  host="$(dd if="$WORK/cd.iso" of=/dev/null bs=32K iflag=direct 2>&1 | tail -n 1)"
  [[ "$host" == *copied* ]] || host="$(dd if="$WORK/cd.iso" of=/dev/null bs=32K 2>&1 | tail -n 1) (buffered)"
  echo "    host dd bs=32K of the same file: $host"
fi

if [[ $FAILURES -ne 0 ]]; then
  echo "$FAILURES check(s) failed"
  exit 1
fi
echo "all IDE QEMU reference checks passed"
