#include "vmm/storage_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "vmm/sys_util/status_macros.h"

// Documentation only: --disk and --cdrom are taken out of argv before the flags are parsed.
ABSL_FLAG(std::string, disk, "",
          "A disk on the virtio-scsi controller (LUN 0, 1, ... in command-line order): a raw "
          "image; cache none, writeback (default), writethrough, directsync or unsafe; readonly; "
          "id=NAME names it (default disk0, disk1, ... by position); iops=N, bps=N[K|M|G], "
          "burst=SECONDS limit it (burst: what may go at once after a quiet spell, in seconds of "
          "the rates; default 0.1), group=NAME puts it in an --io-group. Repeatable.");
ABSL_FLAG(std::string, cdrom, "",
          "A CD/DVD-ROM on the virtio-scsi controller holding the ISO at PATH (at least one "
          "2048-byte block); no PATH: an empty drive. A host optical drive (/dev/sr0, or "
          "host:PATH to insist) is passed through (docs/host-cdrom.md). id=NAME names it (default "
          "cd0, cd1, ... by position). Repeatable.");
ABSL_FLAG(std::string, io_group, "",
          "An I/O budget drives share: NAME,iops=N,bps=N[K|M|G][,burst=SECONDS] (drives join it "
          "with group=NAME; each may have iops=, bps=, burst= of its own too). Repeatable.");
ABSL_FLAG(uint32_t, iothreads, 1,
          "iothreads serving the virtio-scsi request queues (queue i on iothread i % N), 1 to 64.");
ABSL_FLAG(uint32_t, io_rings, 0,
          "io_urings made at start for every drive, medium and disk attached later (one per drive "
          "and iothread; none can be made once the sandbox is in force), 1 to 4096; 0: twice what "
          "the drives given need, plus 8 disks' worth.");
ABSL_FLAG(int64_t, poll_max_ns, 32768,
          "Adaptive polling of each request queue before its iothread sleeps, in ns (0: off; at "
          "most 1000000000; the default is QEMU's iothread poll-max-ns).");

namespace vmm {

absl::Status IoThreadFlagsInto(StorageConfig& config) {
  config.iothreads = absl::GetFlag(FLAGS_iothreads);
  config.poll_max_ns = absl::GetFlag(FLAGS_poll_max_ns);
  config.io_rings = absl::GetFlag(FLAGS_io_rings);
  RETURN_IF_ERROR(CheckRange("--iothreads", config.iothreads, 1, 64));
  if (config.io_rings != 0) RETURN_IF_ERROR(CheckRange("--io-rings", config.io_rings, 1, 4096));
  RETURN_IF_ERROR(
      CheckRange("--poll-max-ns", config.poll_max_ns, 0, 1'000'000'000, "0 turns polling off"));
  return absl::OkStatus();
}

std::vector<HelpFlag> SharedStorageHelp() {
  return {{"disk", "PATH[,cache=MODE][,fua=..][,readonly][,id=NAME][,iops=N][,bps=N][,group=NAME]"},
          {"cdrom", "[=PATH][,id=NAME]"},
          {"io-group", "NAME,iops=N,bps=N[,burst=S]"},
          {"iothreads", "N"},
          {"io-rings", "N"},
          {"poll-max-ns", "NS"}};
}

}  // namespace vmm
