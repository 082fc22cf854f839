// libFuzzer target for the CDB decoder and every command handler: arbitrary CDBs (any length up to
// and past kMaxCdbSize) with arbitrary data-in / data-out buffer sizes and scatter-gather splits,
// sent to a disk, a CD/DVD and a target with a missing LUN, interleaved with media changes, tray
// and lock changes and resets. Synchronous: each task is pumped to completion on in-memory drives.
//
// Input layout (short inputs are ignored):
//   [0]     selector: bits 0-2 which path (disk, CD, target LUN 0/1/2, media action, reset),
//           bits 3-4 iovec segmentation, bits 5-7 media action
//   [1]     CDB length presented to the unit (mod 40: past kMaxCdbSize too)
//   [2..3]  data-in buffer size (big-endian, bounded)
//   [4..5]  data-out buffer size (big-endian, bounded)
//   [6..]   the CDB, then the data-out bytes (zero-padded if the input is shorter)
//
// Invariants checked (abort on violation): every task completes; status is GOOD with no sense or
// CHECK CONDITION with a sense key; residuals never exceed the buffers; an overrun is an error;
// nothing stays in flight.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "block/media.h"
#include "block/memory_backend.h"
#include "devices/scsi/lun.h"
#include "devices/scsi/target.h"
#include "devices/scsi/test_harness.h"

namespace {

using devices::scsi::EncodeFlatLun;
using devices::scsi::Status;
using devices::scsi::Target;
using devices::scsi::testing::Harness;
using devices::scsi::testing::Result;
using devices::scsi::testing::RunOptions;

void Check(bool condition) {
  if (!condition) std::abort();
}

struct Fixture {
  Fixture() {
    block::MemoryBackendOptions options;
    options.size_bytes = 1 << 20;
    auto disk_setup = devices::scsi::testing::MakeDisk(options);
    Check(disk_setup.ok());
    disk = *disk_setup;
    media_a = devices::scsi::testing::MakeMedium(64, 0);
    media_b = devices::scsi::testing::MakeMedium(8, 100);
    auto cd_setup = devices::scsi::testing::MakeCdRom(media_a);
    Check(cd_setup.ok());
    cd = *cd_setup;
    auto disk_harness = Harness::ForUnit(disk.disk);
    auto cd_harness = Harness::ForUnit(cd.cd);
    Check(disk_harness.ok() && cd_harness.ok());
    disk_runner = *std::move(disk_harness);
    cd_runner = *std::move(cd_harness);
    Check(target.AddLogicalUnit(0, disk.disk).ok());
    Check(target.AddLogicalUnit(1, cd.cd).ok());
    auto target_harness = Harness::ForTarget(target);
    Check(target_harness.ok());
    target_runner = *std::move(target_harness);
  }

  void MediaAction(uint8_t action) {
    block::RemovableMedia& media = *cd.media;
    switch (action) {
      case 0:
        (void)media.Eject(/*force=*/true);
        break;
      case 1:
        (void)media.Insert(media_a, "a");
        break;
      case 2:
        (void)media.Insert(media_b, "b");
        break;
      case 3:
        (void)media.SetTrayOpen(true, /*force=*/false);
        break;
      case 4:
        (void)media.SetTrayOpen(false, false);
        break;
      case 5:
        media.SetLocked(true, /*by_guest=*/false);
        break;
      case 6:
        media.SetLocked(false, false);
        break;
      default:
        (void)media.Eject(/*force=*/false);
        break;
    }
  }

  devices::scsi::testing::DiskSetup disk;
  devices::scsi::testing::CdSetup cd;
  std::shared_ptr<block::MemoryBackend> media_a;
  std::shared_ptr<block::MemoryBackend> media_b;
  Target target;
  std::unique_ptr<Harness> disk_runner;
  std::unique_ptr<Harness> cd_runner;
  std::unique_ptr<Harness> target_runner;
};

Fixture& GetFixture() {
  static Fixture fixture;
  return fixture;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 7) return 0;
  Fixture& f = GetFixture();
  const uint8_t selector = data[0];
  const size_t cdb_size = data[1] % 40;
  static constexpr size_t kSegments[] = {0, 1, 7, 512};
  const size_t segment = kSegments[(selector >> 3) & 3];
  // Bounded buffers; byte-sized segments only for small ones (one iovec per byte).
  const size_t limit = segment == 1 ? 4096 : 256 * 1024;
  RunOptions options;
  options.segment = segment;
  options.data_in_size = ((size_t{data[2]} << 8 | data[3]) * 4) % (limit + 1);
  const size_t out_size = ((size_t{data[4]} << 8 | data[5]) * 4) % (limit + 1);

  std::vector<uint8_t> cdb(cdb_size, 0);
  size_t at = 6;
  for (size_t i = 0; i < cdb_size && at < size; ++i) cdb[i] = data[at++];
  options.data_out.assign(out_size, 0);
  for (size_t i = 0; i < out_size && at < size; ++i) options.data_out[i] = data[at++];

  Harness* runner = f.disk_runner.get();
  switch (selector & 7) {
    case 0:
      break;
    case 1:
      runner = f.cd_runner.get();
      break;
    case 2:
    case 3:
    case 4:
      runner = f.target_runner.get();
      options.lun = EncodeFlatLun((selector & 7) - 2);  // LUN 2 has no unit
      break;
    case 5:
      f.MediaAction(selector >> 5);
      runner = f.cd_runner.get();
      break;
    case 6:
      if ((selector >> 5) == 0) f.target.Reset();
      runner = f.cd_runner.get();
      break;
    default:
      runner = f.target_runner.get();
      options.lun = (uint64_t{data[6]} << 56) | (uint64_t{data[size - 1]} << 48);  // any LUN
      break;
  }

  const Result result = runner->Run(cdb, options);
  Check(result.completed);
  Check(result.status == Status::kGood || result.status == Status::kCheckCondition);
  if (result.status == Status::kGood) {
    Check(result.sense == devices::scsi::sense::kNoSense);
    Check(!result.overrun);
  } else {
    Check(result.sense.key != devices::scsi::SenseKey::kNoSense);
  }
  Check(result.data_in_residual <= options.data_in_size);
  Check(result.data_out_residual <= out_size);
  Check(result.data.size() <= options.data_in_size);
  Check(f.disk_runner->unit_queue()->in_flight() == 0);
  Check(f.cd_runner->unit_queue()->in_flight() == 0);
  Check(f.target_runner->target_queue()->in_flight() == 0);
  return 0;
}
