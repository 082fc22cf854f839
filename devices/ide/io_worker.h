#ifndef DEVICES_IDE_IO_WORKER_H_
#define DEVICES_IDE_IO_WORKER_H_

#include <sys/uio.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "block/backend.h"
#include "block/drive.h"
#include "devices/ide/ata.h"
#include "devices/ide/atapi.h"
#include "devices/ide/prd.h"
#include "devices/iothread.h"
#include "devices/scsi/cdrom.h"
#include "devices/scsi/logical_unit.h"
#include "devices/scsi/task.h"
#include "vmm/machine/guest_memory.h"

namespace devices::ide {

// One piece of work a channel hands to its iothread: a disk read, write or flush, or an ATAPI
// packet; with PIO data in `buffer` or DMA through the PRD table at `prd_table`.
struct IoJob {
  enum class Kind : uint8_t { kRead, kWrite, kFlush, kPacket };
  Kind kind = Kind::kRead;
  uint64_t id = 0;  // the channel's tag; a result whose id the unit no longer waits for is stale
  int unit = 0;
  // kRead / kWrite, in bytes.
  uint64_t offset = 0;
  uint64_t length = 0;
  bool fua = false;
  // Bus master DMA: the regions come from the PRD table (the direction was checked by the channel).
  bool dma = false;
  uint32_t prd_table = 0;
  // PIO: a write's data, or the parameter data of a data-out packet.
  std::vector<uint8_t> buffer;
  // kPacket.
  Packet cdb{};
  PacketPlan plan;
};

// How a job ended, delivered to the channel on the iothread.
struct IoResult {
  IoJob::Kind kind = IoJob::Kind::kRead;
  uint64_t id = 0;
  int unit = 0;
  bool dma = false;
  // kRead / kWrite / kFlush: 0 or the block layer's errno (block/request.h).
  int error = 0;
  // DMA: the PRD table could not carry the transfer (outside guest RAM, no EOT within the bound,
  // regions shorter than the data): SFF-8038i bus master Error.
  bool prd_fault = false;
  // DMA: the transfer used the table to its end (Active clears); otherwise Active stays set.
  bool prd_exhausted = false;
  // PIO: the data read (kRead), or a packet's data-in (kPacket).
  std::vector<uint8_t> buffer;
  // kPacket: the device server's answer.
  scsi::Status status = scsi::Status::kGood;
  scsi::Sense sense;
  uint64_t transferred = 0;
};

// The iothread half of a channel: per unit a block queue (disk) or a SCSI LuQueue (CD-ROM), the
// PRD walks and the requests in flight. Everything but Post() runs on the iothread, so nothing
// here locks; results go to the channel through `done` on that thread.
class IoWorker : public std::enable_shared_from_this<IoWorker> {
 public:
  struct UnitIo {
    DeviceKind kind = DeviceKind::kNone;
    std::shared_ptr<block::Drive> drive;  // kDisk
    std::shared_ptr<scsi::CdRom> cdrom;   // kCdRom
  };
  using DoneFn = std::function<void(IoResult)>;

  IoWorker(IoThread& iothread, const vmm::GuestMemory& memory, std::array<UnitIo, 2> units,
           DoneFn done);
  ~IoWorker();
  IoWorker(const IoWorker&) = delete;
  IoWorker& operator=(const IoWorker&) = delete;

  // Creates the queues on the iothread and watches their completion fds.
  absl::Status Start();
  // Waits for the requests in flight (their results are dropped), then removes the fds and the
  // queues. After it, `done` is never called again and posted jobs are dropped. Idempotent. The
  // owner calls it before the IoThread or anything `done` reaches goes away (jobs posted to the
  // iothread keep the worker itself alive).
  void Stop();

  // Queues `job` for the iothread. Any thread.
  void Post(IoJob job);

 private:
  struct Queues {
    std::unique_ptr<block::BlockQueue> block;
    std::unique_ptr<scsi::LuQueue> lu;
  };
  struct InFlight;

  void Run(IoJob job);
  void RunBlock(std::unique_ptr<InFlight> flight);
  void RunPacket(std::unique_ptr<InFlight> flight);
  void OnBlockCompletion(uint64_t id, block::Completion completion);
  void OnPacketCompletion(scsi::Task& task);
  void FinishPacket(uint64_t id);
  void Finish(uint64_t id);
  void ProcessAll();

  IoThread& iothread_;
  const vmm::GuestMemory& memory_;
  const std::array<UnitIo, 2> units_;
  const DoneFn done_;

  // Iothread only.
  std::array<Queues, 2> queues_;
  std::vector<int> fds_;
  std::map<uint64_t, std::unique_ptr<InFlight>> in_flight_;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace devices::ide

#endif  // DEVICES_IDE_IO_WORKER_H_
