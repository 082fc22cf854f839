#include "devices/scsi/test_harness.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "devices/scsi/bytes.h"
#include "vmm/sys_util/status_macros.h"

namespace devices::scsi {

void PrintTo(const Sense& sense, std::ostream* os) {
  *os << absl::StrFormat("%02X/%02X/%02X", static_cast<int>(sense.key), sense.asc, sense.ascq);
}

}  // namespace devices::scsi

namespace devices::scsi::testing {
namespace {

std::vector<iovec> Split(std::vector<uint8_t>& buffer, size_t segment) {
  std::vector<iovec> iov;
  if (buffer.empty()) return iov;
  const size_t step = segment == 0 ? buffer.size() : segment;
  for (size_t at = 0; at < buffer.size(); at += step) {
    iov.push_back(iovec{buffer.data() + at, std::min(step, buffer.size() - at)});
  }
  return iov;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Harness>> Harness::ForUnit(std::shared_ptr<LogicalUnit> unit) {
  auto harness = std::make_unique<Harness>();
  Harness* h = harness.get();
  ASSIGN_OR_RETURN(harness->unit_queue_, unit->CreateQueue([h](Task&) { h->done_ = true; }));
  return harness;
}

absl::StatusOr<std::unique_ptr<Harness>> Harness::ForTarget(Target& target) {
  auto harness = std::make_unique<Harness>();
  Harness* h = harness.get();
  ASSIGN_OR_RETURN(harness->target_queue_, target.CreateQueue([h](Task&) { h->done_ = true; }));
  return harness;
}

Harness::~Harness() = default;

void Harness::Pump() {
  for (int i = 0; i < 1000 && !done_; ++i) {
    if (unit_queue_ != nullptr) {
      unit_queue_->Submit();
      unit_queue_->ProcessCompletions();
    } else {
      target_queue_->Submit();
      target_queue_->ProcessCompletions();
    }
  }
}

Result Harness::Run(std::span<const uint8_t> cdb, const RunOptions& options) {
  std::vector<uint8_t> in(options.data_in_size, 0xcc);
  std::vector<uint8_t> out = options.data_out;
  const std::vector<iovec> in_iov = Split(in, options.segment);
  const std::vector<iovec> out_iov = Split(out, options.segment);
  std::vector<uint8_t> cdb_bytes(cdb.begin(), cdb.end());
  if (options.cdb_size != 0) cdb_bytes.resize(options.cdb_size, 0);

  Task task;
  task.SetCdb(cdb_bytes);
  task.lun = options.lun;
  task.data_in = in_iov;
  task.data_out = out_iov;
  done_ = false;
  const Execution execution =
      unit_queue_ != nullptr ? unit_queue_->Execute(task) : target_queue_->Execute(task);
  Result result;
  result.synchronous = execution == Execution::kCompleted;
  if (!result.synchronous) Pump();
  result.completed = result.synchronous || done_;
  result.status = task.status();
  result.sense = task.sense();
  result.data_in_residual = task.data_in_residual();
  result.data_out_residual = task.data_out_residual();
  result.overrun = task.overrun();
  result.data.assign(in.begin(), in.begin() + (in.size() - result.data_in_residual));
  return result;
}

absl::StatusOr<DiskSetup> MakeDisk(block::MemoryBackendOptions backend_options,
                                   block::DriveOptions drive_options,
                                   LogicalUnitOptions unit_options) {
  DiskSetup setup;
  setup.backend = std::make_shared<block::MemoryBackend>(backend_options);
  if (drive_options.name.empty()) drive_options.name = "disk0";
  ASSIGN_OR_RETURN(setup.drive, block::Drive::CreateFixed(drive_options, setup.backend));
  ASSIGN_OR_RETURN(setup.disk, Disk::Create(setup.drive, unit_options));
  return setup;
}

absl::StatusOr<CdSetup> MakeCdRom(std::shared_ptr<block::BlockBackend> medium,
                                  LogicalUnitOptions unit_options) {
  CdSetup setup;
  setup.media = medium != nullptr ? std::make_shared<block::RemovableMedia>(medium, "cd1.iso")
                                  : std::make_shared<block::RemovableMedia>();
  block::DriveOptions drive_options;
  drive_options.name = "cd0";
  drive_options.read_only = true;
  ASSIGN_OR_RETURN(setup.drive, block::Drive::CreateRemovable(drive_options, setup.media));
  ASSIGN_OR_RETURN(setup.cd, CdRom::Create(setup.drive, unit_options));
  return setup;
}

std::shared_ptr<block::MemoryBackend> MakeMedium(uint64_t blocks, uint8_t seed) {
  block::MemoryBackendOptions options;
  options.size_bytes = blocks * 2048;
  options.read_only = true;
  options.discard = false;
  auto backend = std::make_shared<block::MemoryBackend>(options);
  std::vector<uint8_t> block(2048);
  for (uint64_t i = 0; i < blocks; ++i) {
    std::fill(block.begin(), block.end(), static_cast<uint8_t>(i + seed));
    (void)backend->WriteData(i * 2048, block);
  }
  return backend;
}

std::vector<uint8_t> Cdb10(uint8_t opcode, uint8_t byte1, uint32_t lba, uint16_t length,
                           uint8_t byte6, uint8_t control) {
  std::vector<uint8_t> cdb(10, 0);
  cdb[0] = opcode;
  cdb[1] = byte1;
  PutBe32(&cdb[2], lba);
  cdb[6] = byte6;
  PutBe16(&cdb[7], length);
  cdb[9] = control;
  return cdb;
}

std::vector<uint8_t> Cdb16(uint8_t opcode, uint8_t byte1, uint64_t lba, uint32_t length) {
  std::vector<uint8_t> cdb(16, 0);
  cdb[0] = opcode;
  cdb[1] = byte1;
  PutBe64(&cdb[2], lba);
  PutBe32(&cdb[10], length);
  return cdb;
}

}  // namespace devices::scsi::testing
