#include "devices/ide/io_worker.h"

#include <poll.h>

#include <cerrno>
#include <limits>
#include <utility>

#include "block/request.h"
#include "devices/scsi/iovec_util.h"

namespace devices::ide {

struct IoWorker::InFlight {
  IoJob job;
  IoResult result;
  std::vector<iovec> iov;
  // kPacket.
  scsi::Task task;
  PrdWalk walk;
};

IoWorker::IoWorker(IoThread& iothread, const vmm::GuestMemory& memory, std::array<UnitIo, 2> units,
                   DoneFn done)
    : iothread_(iothread), memory_(memory), units_(std::move(units)), done_(std::move(done)) {}

IoWorker::~IoWorker() = default;

absl::Status IoWorker::Start() {
  absl::Status status;
  iothread_.RunSync([&] {
    for (int u = 0; u < 2 && status.ok(); ++u) {
      const UnitIo& unit = units_[u];
      Queues& queues = queues_[u];
      int fd = -1;
      if (unit.kind == DeviceKind::kDisk) {
        auto queue = unit.drive->CreateQueue([this](uint64_t id, block::Completion completion) {
          OnBlockCompletion(id, completion);
        });
        if (!queue.ok()) {
          status = queue.status();
          break;
        }
        queues.block = *std::move(queue);
        fd = queues.block->completion_fd();
        status = iothread_.AddFd(fd, [q = queues.block.get()] { q->ProcessCompletions(); });
      } else if (unit.kind == DeviceKind::kCdRom) {
        auto queue =
            unit.cdrom->CreateQueue([this](scsi::Task& task) { OnPacketCompletion(task); });
        if (!queue.ok()) {
          status = queue.status();
          break;
        }
        queues.lu = *std::move(queue);
        fd = queues.lu->completion_fd();
        status = iothread_.AddFd(fd, [q = queues.lu.get()] { q->ProcessCompletions(); });
      }
      if (fd >= 0 && status.ok()) fds_.push_back(fd);
    }
    started_ = status.ok();
  });
  if (!status.ok()) Stop();
  return status;
}

void IoWorker::Stop() {
  iothread_.RunSync([this] {
    if (stopped_) return;
    stopped_ = true;
    // Block I/O still in flight writes into buffers owned here (PIO bounce buffers) or guest
    // memory: let it finish before the queues go. Its results are not delivered.
    while (!in_flight_.empty()) {
      std::vector<pollfd> polls;
      for (int fd : fds_) polls.push_back(pollfd{fd, POLLIN, 0});
      if (polls.empty()) break;
      poll(polls.data(), polls.size(), 100);
      ProcessAll();
    }
    for (int fd : fds_) iothread_.RemoveFd(fd);
    fds_.clear();
    for (Queues& queues : queues_) {
      queues.lu.reset();
      queues.block.reset();
    }
    in_flight_.clear();
  });
}

void IoWorker::ProcessAll() {
  for (Queues& queues : queues_) {
    if (queues.block) queues.block->ProcessCompletions();
    if (queues.lu) queues.lu->ProcessCompletions();
  }
}

void IoWorker::Post(IoJob job) {
  iothread_.Post(
      [self = shared_from_this(), job = std::move(job)]() mutable { self->Run(std::move(job)); });
}

void IoWorker::Run(IoJob job) {
  if (stopped_ || !started_) return;
  auto flight = std::make_unique<InFlight>();
  flight->result.kind = job.kind;
  flight->result.id = job.id;
  flight->result.unit = job.unit;
  flight->result.dma = job.dma;
  flight->job = std::move(job);
  if (flight->job.kind == IoJob::Kind::kPacket) {
    RunPacket(std::move(flight));
  } else {
    RunBlock(std::move(flight));
  }
}

void IoWorker::RunBlock(std::unique_ptr<InFlight> flight) {
  IoJob& job = flight->job;
  block::BlockQueue* queue = queues_[job.unit & 1].block.get();
  const uint64_t id = job.id;
  if (queue == nullptr) {
    flight->result.error = EIO;
    done_(std::move(flight->result));
    return;
  }
  block::Request request;
  request.offset = job.offset;
  request.fua = job.fua;
  switch (job.kind) {
    case IoJob::Kind::kFlush:
      request.type = block::RequestType::kFlush;
      break;
    case IoJob::Kind::kRead:
    case IoJob::Kind::kWrite:
      request.type =
          job.kind == IoJob::Kind::kRead ? block::RequestType::kRead : block::RequestType::kWrite;
      if (job.dma) {
        // SFF-8038i: the regions of the PRD table, exactly the transfer's length. A table that
        // cannot carry it fails before any I/O.
        PrdWalk walk = WalkPrdTable(memory_, job.prd_table, job.length);
        if (!walk.covered()) {
          flight->result.prd_fault = true;
          done_(std::move(flight->result));
          return;
        }
        flight->result.prd_exhausted = walk.exhausted;
        flight->iov = std::move(walk.iov);
      } else {
        if (job.kind == IoJob::Kind::kRead) job.buffer.resize(job.length);
        flight->iov.push_back(iovec{job.buffer.data(), job.buffer.size()});
      }
      request.buffers = flight->iov;
      break;
    case IoJob::Kind::kPacket:
      return;  // not here
  }
  in_flight_[id] = std::move(flight);
  queue->Enqueue(request, id);
  queue->Submit();
}

void IoWorker::OnBlockCompletion(uint64_t id, block::Completion completion) {
  auto it = in_flight_.find(id);
  if (it == in_flight_.end()) return;
  InFlight& flight = *it->second;
  flight.result.error = completion.error;
  if (flight.job.kind == IoJob::Kind::kRead && !flight.job.dma) {
    flight.result.buffer = std::move(flight.job.buffer);
  }
  Finish(id);
}

void IoWorker::RunPacket(std::unique_ptr<InFlight> flight) {
  IoJob& job = flight->job;
  scsi::LuQueue* queue = queues_[job.unit & 1].lu.get();
  if (queue == nullptr) {
    flight->result.status = scsi::Status::kCheckCondition;
    flight->result.sense = scsi::sense::kInternalTargetFailure;
    done_(std::move(flight->result));
    return;
  }
  scsi::Task& task = flight->task;
  task.SetCdb(job.cdb);
  task.user_data = flight.get();
  if (job.dma) {
    // The transfer length is the device server's to decide, so the table is walked to its EOT (or
    // the bound). Only the regions it needs are ever touched; a fault beyond them is harmless, as
    // on hardware, which fetches descriptors only as the transfer goes.
    flight->walk = WalkPrdTable(memory_, job.prd_table, std::numeric_limits<uint64_t>::max());
    flight->iov = std::move(flight->walk.iov);
  } else if (job.plan.direction == PacketDirection::kIn) {
    job.buffer.resize(job.plan.in_buffer);
    flight->iov.push_back(iovec{job.buffer.data(), job.buffer.size()});
  } else if (job.plan.direction == PacketDirection::kOut) {
    flight->iov.push_back(iovec{job.buffer.data(), job.buffer.size()});
  }
  if (job.plan.direction == PacketDirection::kOut) {
    task.data_out = flight->iov;
  } else {
    task.data_in = flight->iov;
  }
  const uint64_t id = job.id;
  in_flight_[id] = std::move(flight);
  const scsi::Execution execution = queue->Execute(task);
  queue->Submit();
  if (execution == scsi::Execution::kCompleted) FinishPacket(id);
}

void IoWorker::OnPacketCompletion(scsi::Task& task) {
  FinishPacket(static_cast<InFlight*>(task.user_data)->job.id);
}

void IoWorker::FinishPacket(uint64_t id) {
  auto it = in_flight_.find(id);
  if (it == in_flight_.end()) return;
  InFlight& flight = *it->second;
  const scsi::Task& task = flight.task;
  IoResult& result = flight.result;
  const bool out = flight.job.plan.direction == PacketDirection::kOut;
  const uint64_t buffer = scsi::TotalLength(flight.iov);
  result.status = task.status();
  result.sense = task.sense();
  result.transferred = buffer - (out ? task.data_out_residual() : task.data_in_residual());
  if (flight.job.dma) {
    const PrdWalk& walk = flight.walk;
    const bool data_command = flight.job.plan.direction != PacketDirection::kNone;
    // The regions were shorter than the data: the device server needed more buffer (overrun),
    // or it filled every usable region of a table that ended in a fault.
    result.prd_fault =
        task.overrun() || (walk.faulted() && data_command && result.status == scsi::Status::kGood &&
                           result.transferred == buffer);
    result.prd_exhausted = walk.exhausted && result.transferred == buffer;
  } else if (!out) {
    flight.job.buffer.resize(result.transferred);
    result.buffer = std::move(flight.job.buffer);
  }
  Finish(id);
}

void IoWorker::Finish(uint64_t id) {
  auto it = in_flight_.find(id);
  if (it == in_flight_.end()) return;
  std::unique_ptr<InFlight> flight = std::move(it->second);
  in_flight_.erase(it);
  if (!stopped_) done_(std::move(flight->result));
}

}  // namespace devices::ide
