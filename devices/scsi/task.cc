#include "devices/scsi/task.h"

#include <algorithm>
#include <cstring>

#include "devices/scsi/iovec_util.h"

namespace devices::scsi {

Task::Task() = default;
Task::~Task() = default;

void Task::SetCdb(std::span<const uint8_t> cdb) {
  cdb_size_ = static_cast<uint8_t>(std::min(cdb.size(), kMaxCdbSize));
  if (cdb_size_ > 0) std::memcpy(cdb_.data(), cdb.data(), cdb_size_);
  std::memset(cdb_.data() + cdb_size_, 0, kMaxCdbSize - cdb_size_);
}

uint64_t Task::data_in_residual() const {
  const uint64_t total = TotalLength(data_in);
  return total - std::min(total, in_transferred_);
}

uint64_t Task::data_out_residual() const {
  const uint64_t total = TotalLength(data_out);
  return total - std::min(total, out_transferred_);
}

}  // namespace devices::scsi
