#ifndef DEVICES_SCSI_TEST_HARNESS_H_
#define DEVICES_SCSI_TEST_HARNESS_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "block/drive.h"
#include "block/media.h"
#include "block/memory_backend.h"
#include "devices/scsi/cdrom.h"
#include "devices/scsi/disk.h"
#include "devices/scsi/logical_unit.h"
#include "devices/scsi/target.h"

// Test support: units on MemoryBackend drives, and a synchronous runner that executes one CDB and
// pumps the queue (Submit, ProcessCompletions) until the task completes.

namespace devices::scsi {
// gtest printing of sense codes ("05/24/00").
void PrintTo(const Sense& sense, std::ostream* os);
}  // namespace devices::scsi

namespace devices::scsi::testing {

struct Result {
  Status status = Status::kGood;
  Sense sense;
  // The data-in bytes transferred (the buffer minus the residual).
  std::vector<uint8_t> data;
  uint64_t data_in_residual = 0;
  uint64_t data_out_residual = 0;
  bool overrun = false;
  // Execute() returned kCompleted (no block I/O).
  bool synchronous = false;
  // The completion handler ran (for kInFlight tasks).
  bool completed = false;

  bool good() const { return status == Status::kGood; }
};

struct RunOptions {
  size_t data_in_size = 0;
  std::vector<uint8_t> data_out;
  uint64_t lun = 0;
  // Split the data buffers into iovecs of this many bytes (0: one iovec each).
  size_t segment = 0;
  // Present the CDB with this length (0: the given bytes' length), e.g. 12 as ATAPI does.
  size_t cdb_size = 0;
};

class Harness {
 public:
  Harness() = default;
  static absl::StatusOr<std::unique_ptr<Harness>> ForUnit(std::shared_ptr<LogicalUnit> unit);
  static absl::StatusOr<std::unique_ptr<Harness>> ForTarget(Target& target);
  ~Harness();

  Result Run(std::span<const uint8_t> cdb, const RunOptions& options = {});
  Result Run(std::initializer_list<uint8_t> cdb, const RunOptions& options = {}) {
    return Run(std::span<const uint8_t>(cdb.begin(), cdb.size()), options);
  }
  // Shorthands.
  Result In(std::initializer_list<uint8_t> cdb, size_t data_in_size, uint64_t lun = 0) {
    RunOptions options;
    options.data_in_size = data_in_size;
    options.lun = lun;
    return Run(cdb, options);
  }
  Result Out(std::initializer_list<uint8_t> cdb, std::vector<uint8_t> data_out) {
    RunOptions options;
    options.data_out = std::move(data_out);
    return Run(cdb, options);
  }

  LuQueue* unit_queue() const { return unit_queue_.get(); }
  TargetQueue* target_queue() const { return target_queue_.get(); }

 private:
  void Pump();

  std::unique_ptr<LuQueue> unit_queue_;
  std::unique_ptr<TargetQueue> target_queue_;
  bool done_ = false;
};

// A MemoryBackend-backed fixed drive and a Disk on it.
struct DiskSetup {
  std::shared_ptr<block::MemoryBackend> backend;
  std::shared_ptr<block::Drive> drive;
  std::shared_ptr<Disk> disk;
};
absl::StatusOr<DiskSetup> MakeDisk(block::MemoryBackendOptions backend_options = {},
                                   block::DriveOptions drive_options = {},
                                   LogicalUnitOptions unit_options = {});

// A removable drive holding a MemoryBackend medium (or none) and a CdRom on it.
struct CdSetup {
  std::shared_ptr<block::RemovableMedia> media;
  std::shared_ptr<block::Drive> drive;
  std::shared_ptr<CdRom> cd;
};
absl::StatusOr<CdSetup> MakeCdRom(std::shared_ptr<block::BlockBackend> medium,
                                  LogicalUnitOptions unit_options = {});
// An ISO-like medium of `blocks` 2048-byte blocks, block i filled with the byte (i + seed).
std::shared_ptr<block::MemoryBackend> MakeMedium(uint64_t blocks, uint8_t seed = 0);

// Big-endian helpers for building CDBs in tests.
std::vector<uint8_t> Cdb10(uint8_t opcode, uint8_t byte1, uint32_t lba, uint16_t length,
                           uint8_t byte6 = 0, uint8_t control = 0);
std::vector<uint8_t> Cdb16(uint8_t opcode, uint8_t byte1, uint64_t lba, uint32_t length);

}  // namespace devices::scsi::testing

#endif  // DEVICES_SCSI_TEST_HARNESS_H_
