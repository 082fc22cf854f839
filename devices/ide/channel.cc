#include "devices/ide/channel.h"

#include <algorithm>
#include <cerrno>
#include <utility>

namespace devices::ide {
namespace {

// An empty channel: nothing drives the bus, DD7 is pulled down by the host (ATA8-APT 6.x: "the
// host shall have a pull-down on DD7" so that status never reads BSY), the rest floats high.
constexpr uint8_t kFloatingBus = 0x7f;

// Keep small PIO buffers between commands; drop large ones (an ATAPI PIO read may stage MiBs).
constexpr size_t kKeepBufferBytes = 64 * 1024;

void Release(std::vector<uint8_t>& data) {
  if (data.capacity() > kKeepBufferBytes) {
    std::vector<uint8_t>().swap(data);
  } else {
    data.clear();
  }
}

}  // namespace

IdeChannel::IdeChannel(int index, std::array<ChannelUnitConfig, 2> units,
                       std::shared_ptr<vmm::IrqLine> irq, const vmm::GuestMemory& memory,
                       IoThread& iothread, std::function<bool()> bus_master_enabled)
    : index_(index),
      has_devices_(units[0].settings.kind != DeviceKind::kNone ||
                   units[1].settings.kind != DeviceKind::kNone),
      irq_(std::move(irq)),
      bus_master_enabled_(std::move(bus_master_enabled)) {
  std::array<IoWorker::UnitIo, 2> io;
  {
    absl::MutexLock lock(&mutex_);
    for (int i = 0; i < 2; ++i) {
      Unit& unit = units_[i];
      unit.settings = units[i].settings;
      unit.settings.unit = i;
      unit.cdrom = units[i].cdrom;
      unit.tf.device = device::kObsolete;
      // Power-on: the device has run its diagnostics and shows its signature (ATA8-APT 9.x).
      if (unit.present()) ResetDevice(unit);
      // Firmware sets "drive n is DMA capable" for attached drives (PIIX3 BMISX bits 5/6).
      bus_master_.SetDriveDmaCapable(i, unit.present());
      io[i] = IoWorker::UnitIo{unit.settings.kind, units[i].drive, units[i].cdrom};
    }
  }
  worker_ = std::make_shared<IoWorker>(iothread, memory, std::move(io),
                                       [this](IoResult result) { OnJobDone(std::move(result)); });
}

IdeChannel::~IdeChannel() { StopIo(); }

absl::Status IdeChannel::StartIo() { return worker_->Start(); }

void IdeChannel::StopIo() { worker_->Stop(); }

// ---- Register accesses (vCPU threads) ----

void IdeChannel::ReadCommandBlock(uint64_t offset, std::span<uint8_t> data) {
  if (!has_devices_) {
    std::fill(data.begin(), data.end(), kFloatingBus);
    return;
  }
  absl::MutexLock lock(&mutex_);
  if (offset == reg::kData && (data.size() == 2 || data.size() == 4)) {
    ReadDataLocked(data);
    return;
  }
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = ReadRegisterLocked(static_cast<int>(offset + i));
  }
}

void IdeChannel::ReadDataString(size_t item_size, std::span<uint8_t> data) {
  if (!has_devices_) {
    std::fill(data.begin(), data.end(), kFloatingBus);
    return;
  }
  absl::MutexLock lock(&mutex_);
  for (size_t at = 0; at + item_size <= data.size(); at += item_size) {
    ReadDataLocked(data.subspan(at, item_size));
  }
}

void IdeChannel::WriteDataString(size_t item_size, std::span<const uint8_t> data) {
  if (!has_devices_) return;
  absl::MutexLock lock(&mutex_);
  for (size_t at = 0; at + item_size <= data.size(); at += item_size) {
    WriteDataLocked(data.subspan(at, item_size));
  }
}

void IdeChannel::WriteCommandBlock(uint64_t offset, std::span<const uint8_t> data) {
  if (!has_devices_) return;
  absl::MutexLock lock(&mutex_);
  if (offset == reg::kData && (data.size() == 2 || data.size() == 4)) {
    WriteDataLocked(data);
    return;
  }
  for (size_t i = 0; i < data.size(); ++i) {
    WriteRegisterLocked(static_cast<int>(offset + i), data[i]);
  }
}

uint8_t IdeChannel::ReadAlternateStatus() {
  if (!has_devices_) return kFloatingBus;
  absl::MutexLock lock(&mutex_);
  const Unit& unit = Selected();
  // ATA8-APT 5.2.2: Alternate Status is Status without the interrupt acknowledge. A selected
  // device 1 that is absent reads 00h (device 0 answers for it, ATA8-APT 7.x).
  return unit.present() ? unit.status : 0;
}

void IdeChannel::WriteDeviceControl(uint8_t value) {
  if (!has_devices_) return;
  absl::MutexLock lock(&mutex_);
  const uint8_t old = device_control_;
  device_control_ = value;
  if ((old & control::kSrst) == 0 && (value & control::kSrst) != 0) {
    // ATA8-APT 9.2 software reset: both devices set BSY and stop what they were doing.
    for (Unit& unit : units_) {
      if (!unit.present()) continue;
      Abandon(unit);
      unit.status = status::kBsy;
      unit.irq_pending = false;
    }
  } else if ((old & control::kSrst) != 0 && (value & control::kSrst) == 0) {
    // The reset ends: signatures, diagnostics passed, device 0 selected. No INTRQ.
    for (Unit& unit : units_) {
      if (unit.present()) {
        ResetDevice(unit);
      } else {
        unit.tf = TaskFile{};
      }
      unit.tf.device = device::kObsolete;
    }
    selected_ = 0;
  }
  UpdateIrq();
}

uint8_t IdeChannel::ReadBusMaster(int offset) {
  absl::MutexLock lock(&mutex_);
  return bus_master_.Read(offset);
}

void IdeChannel::WriteBusMaster(int offset, uint8_t value) {
  absl::MutexLock lock(&mutex_);
  const BusMasterRegisters::WriteEffect effect = bus_master_.Write(offset, value);
  if (effect.started) MaybeStartDma();
}

uint8_t IdeChannel::ReadRegisterLocked(int reg) {
  Unit& unit = Selected();
  const bool hob = (device_control_ & control::kHob) != 0;
  switch (reg) {
    case reg::kData:
      return 0xff;  // the data register is 16 or 32 bits wide
    case reg::kError:
      if (!unit.present()) return 0;
      return hob ? unit.tf.hob_feature : unit.error;
    case reg::kCount:
    case reg::kLbaLow:
    case reg::kLbaMid:
    case reg::kLbaHigh:
    case reg::kDevice:
      return unit.tf.Read(reg, hob);
    case reg::kStatus:
      if (!unit.present()) return 0;
      // ATA8-APT 5.2.13: reading Status clears a pending interrupt.
      unit.irq_pending = false;
      UpdateIrq();
      return unit.status;
    default:
      return 0xff;
  }
}

void IdeChannel::WriteRegisterLocked(int reg, uint8_t value) {
  if (reg == reg::kData) return;  // byte writes of the data register: not a transfer
  if (reg == reg::kCommand) {
    CommandLocked(value);
    return;
  }
  // ATA8-APT 5.2: the command block is not to be written while BSY or DRQ is set; drives ignore
  // it (so does QEMU), which also keeps the selection while a command runs.
  if ((Selected().status & (status::kBsy | status::kDrq)) != 0) return;
  // "HOB shall be cleared to zero by a write to any Command Block register" (ATA8-APT 5.2.6).
  device_control_ &= ~control::kHob;
  // Both devices latch every write; the Device register's DEV bit then selects one.
  for (Unit& unit : units_) unit.tf.Write(reg, value);
  if (reg == reg::kDevice) {
    selected_ = (value & device::kDev) != 0 ? 1 : 0;
    UpdateIrq();
  }
}

void IdeChannel::ReadDataLocked(std::span<uint8_t> data) {
  Unit& unit = Selected();
  if (!unit.present() || unit.phase != Phase::kPioIn || (unit.status & status::kDrq) == 0) {
    // "The result of a read ... when DRQ is cleared is indeterminate": 0, and nothing moves.
    std::fill(data.begin(), data.end(), 0);
    return;
  }
  for (size_t i = 0; i < data.size(); ++i) {
    const size_t at = unit.pos + i;
    data[i] = at < unit.block_end && at < unit.data.size() ? unit.data[at] : 0;
  }
  unit.pos += data.size();
  if (unit.pos >= unit.block_end) {
    unit.pos = unit.block_end;
    PioBlockDone(unit);
  }
}

void IdeChannel::WriteDataLocked(std::span<const uint8_t> data) {
  Unit& unit = Selected();
  if (!unit.present() || unit.phase != Phase::kPioOut || (unit.status & status::kDrq) == 0) {
    return;
  }
  for (size_t i = 0; i < data.size(); ++i) {
    const size_t at = unit.pos + i;
    if (at < unit.block_end && at < unit.data.size()) unit.data[at] = data[i];
  }
  unit.pos += data.size();
  if (unit.pos >= unit.block_end) {
    unit.pos = unit.block_end;
    PioBlockDone(unit);
  }
}

// ---- Commands ----

void IdeChannel::CommandLocked(uint8_t command) {
  Unit& unit = Selected();
  if ((device_control_ & control::kSrst) != 0) return;
  if (!unit.present()) {
    // ATA8-ACS 7.10: EXECUTE DEVICE DIAGNOSTIC is for both devices, whichever is selected; every
    // other command to an absent device 1 goes unanswered (device 0 ignores it).
    if (command == cmd::kExecuteDeviceDiagnostic) {
      device_control_ &= ~control::kHob;
      Diagnostic();
    }
    return;
  }
  if ((unit.status & (status::kBsy | status::kDrq)) != 0) {
    // Only DEVICE RESET may be written while BSY or DRQ is set, to a packet device
    // (ATA8-ACS 7.11: it is how the host recovers a hung ATAPI device).
    if (command == cmd::kDeviceReset && unit.packet_device()) DeviceReset(unit);
    return;
  }
  device_control_ &= ~control::kHob;
  // Writing the Command register clears a pending interrupt (ATA8-APT 5.2.5).
  unit.irq_pending = false;
  UpdateIrq();
  ApplyOutcome(unit, ExecuteAtaCommand(command, unit.tf, unit.settings));
}

void IdeChannel::ApplyOutcome(Unit& unit, AtaOutcome outcome) {
  switch (outcome.kind) {
    case AtaOutcome::Kind::kComplete:
      if (outcome.count.has_value()) unit.tf.count = *outcome.count;
      Finish(unit, status::kReady, 0, /*interrupt=*/true);
      return;
    case AtaOutcome::Kind::kError:
      if (outcome.signature) unit.tf.SetSignature(unit.packet_device());
      Fail(unit, outcome.error);
      return;
    case AtaOutcome::Kind::kPioIn:
      // ATA8-APT 10.x PIO data-in: DRQ, then INTRQ for the block.
      unit.data = std::move(outcome.data);
      StartPio(unit, Phase::kPioIn, PioOp::kIdentify, unit.data.size());
      unit.status = status::kReady | status::kDrq;
      RaiseInterrupt(unit);
      return;
    case AtaOutcome::Kind::kTransfer:
      StartDiskTransfer(unit, outcome.transfer);
      return;
    case AtaOutcome::Kind::kFlush: {
      IoJob job;
      job.kind = IoJob::Kind::kFlush;
      SubmitJob(unit, std::move(job));
      return;
    }
    case AtaOutcome::Kind::kPacket:
      // ATA8-APT 11.x: the byte count limit is in LBA Mid/High now; the device overwrites them with
      // each DRQ block's size, so it is latched here. DRQ for the packet with CoD=1, IO=0, and no
      // INTRQ (IDENTIFY PACKET DEVICE word 0 bits 6:5 = 10b: DRQ within 50 us).
      unit.packet_dma = outcome.packet_dma;
      unit.byte_limit = unit.tf.byte_count_limit();
      unit.data.assign(kPacketSize, 0);
      StartPio(unit, Phase::kPioOut, PioOp::kPacketCdb, kPacketSize);
      unit.tf.count = reason::kCoD;
      unit.status = status::kReady | status::kDrq;
      return;
    case AtaOutcome::Kind::kDeviceReset:
      DeviceReset(unit);
      return;
    case AtaOutcome::Kind::kDiagnostic:
      Diagnostic();
      return;
  }
}

void IdeChannel::Finish(Unit& unit, uint8_t status, uint8_t error, bool interrupt) {
  unit.status = status;
  unit.error = error;
  unit.phase = Phase::kIdle;
  unit.pio = PioOp::kNone;
  unit.pos = 0;
  unit.block_end = 0;
  Release(unit.data);
  if (interrupt) RaiseInterrupt(unit);
}

void IdeChannel::Fail(Unit& unit, uint8_t error) {
  // ATA8-ACS error outputs: ERR with DRDY (and without BSY, DRQ and DF).
  Finish(unit, status::kDrdy | status::kErr, error, /*interrupt=*/true);
}

void IdeChannel::Abandon(Unit& unit) {
  unit.job = 0;
  unit.phase = Phase::kIdle;
  unit.pio = PioOp::kNone;
  unit.pos = 0;
  unit.block_end = 0;
  Release(unit.data);
  if (dma_job_.has_value() && dma_job_->unit == IndexOf(unit)) dma_job_.reset();
}

void IdeChannel::ResetDevice(Unit& unit) {
  Abandon(unit);
  unit.tf.SetSignature(unit.packet_device());
  unit.error = error::kDiagnosticPassed;
  // ATA8-APT 9.x: an ATA device is ready after reset; a packet device clears DRDY (status 00h).
  unit.status = unit.packet_device() ? 0 : status::kReady;
  unit.irq_pending = false;
}

void IdeChannel::DeviceReset(Unit& unit) {
  // ATA8-ACS 7.11 DEVICE RESET: the packet device stops the command, shows its signature, and
  // completes without INTRQ. For the MMC unit it is a logical unit reset (SAM-5): deferred sense
  // and MODE SELECT changes go, and so does the guest's medium lock.
  ResetDevice(unit);
  if (unit.cdrom != nullptr) unit.cdrom->Reset();
  UpdateIrq();
}

void IdeChannel::Diagnostic() {
  // ATA8-ACS 7.10 EXECUTE DEVICE DIAGNOSTIC: both devices run it; the signatures and the
  // diagnostic code (01h: passed) appear, and device 0 asserts INTRQ.
  for (Unit& unit : units_) {
    if (unit.present()) ResetDevice(unit);
  }
  RaiseInterrupt(units_[0].present() ? units_[0] : units_[1]);
}

void IdeChannel::StartPio(Unit& unit, Phase phase, PioOp op, size_t block_bytes) {
  unit.phase = phase;
  unit.pio = op;
  unit.pos = 0;
  unit.block_end = block_bytes;
}

void IdeChannel::PioBlockDone(Unit& unit) {
  switch (unit.pio) {
    case PioOp::kIdentify:
      // The last (only) block of a PIO data-in command: no INTRQ after it (ATA8-APT 10.x).
      Finish(unit, status::kReady, 0, /*interrupt=*/false);
      return;
    case PioOp::kDiskRead:
      if (unit.remaining > 0) {
        SubmitDiskRead(unit);
      } else {
        Finish(unit, status::kReady, 0, /*interrupt=*/false);
      }
      return;
    case PioOp::kDiskWrite: {
      IoJob job;
      job.kind = IoJob::Kind::kWrite;
      job.offset = unit.next_lba * kSectorSize;
      job.length = uint64_t{unit.chunk_sectors} * kSectorSize;
      job.fua = unit.transfer.fua;
      job.buffer = std::move(unit.data);
      SubmitJob(unit, std::move(job));
      return;
    }
    case PioOp::kPacketCdb:
      PacketReceived(unit);
      return;
    case PioOp::kPacketIn:
      if (unit.pos < unit.data.size()) {
        NextPacketBlock(unit, /*in=*/true);
      } else {
        PacketStatus(unit, status::kReady, 0);
      }
      return;
    case PioOp::kPacketOut:
      if (unit.pos < unit.data.size()) {
        NextPacketBlock(unit, /*in=*/false);
      } else {
        IoJob job;
        job.kind = IoJob::Kind::kPacket;
        job.cdb = unit.cdb;
        job.plan = unit.plan;
        job.buffer = std::move(unit.data);
        SubmitJob(unit, std::move(job));
      }
      return;
    case PioOp::kNone:
      Finish(unit, status::kReady, 0, /*interrupt=*/false);
      return;
  }
}

void IdeChannel::SubmitJob(Unit& unit, IoJob job) {
  job.id = ++next_job_;
  job.unit = IndexOf(unit);
  unit.job = job.id;
  unit.phase = Phase::kBusy;
  unit.pio = PioOp::kNone;
  unit.status = status::kBsy | (unit.packet_device() ? 0 : status::kDrdy);
  worker_->Post(std::move(job));
}

void IdeChannel::WaitForDma(Unit& unit, IoJob job) {
  job.unit = IndexOf(unit);
  job.dma = true;
  unit.phase = Phase::kDmaWait;
  unit.pio = PioOp::kNone;
  unit.status = status::kBsy | (unit.packet_device() ? 0 : status::kDrdy);
  dma_job_ = std::move(job);
  MaybeStartDma();
}

void IdeChannel::MaybeStartDma() {
  // SFF-8038i 3.x: the transfer runs once the device requests DMA (a DMA command is pending) and
  // the driver has set Start, in either order.
  if (!dma_job_.has_value() || !bus_master_.started()) return;
  IoJob job = std::move(*dma_job_);
  dma_job_.reset();
  Unit& unit = units_[job.unit & 1];
  if (unit.phase != Phase::kDmaWait) return;
  bool to_memory = true;
  bool directed = true;
  switch (job.kind) {
    case IoJob::Kind::kRead:
      to_memory = true;
      break;
    case IoJob::Kind::kWrite:
      to_memory = false;
      break;
    case IoJob::Kind::kPacket:
      to_memory = job.plan.direction == PacketDirection::kIn;
      directed = job.plan.direction != PacketDirection::kNone;
      break;
    case IoJob::Kind::kFlush:
      directed = false;
      break;
  }
  // Bus mastering off in PCI Command: the cycles would master-abort. A Read/Write control that
  // disagrees with the command: data would go the wrong way. Both are bus master errors.
  if (!bus_master_enabled_() || (directed && to_memory != bus_master_.writes_memory())) {
    DmaFault(unit);
    return;
  }
  job.prd_table = bus_master_.prd_table();
  SubmitJob(unit, std::move(job));
}

void IdeChannel::DmaFault(Unit& unit) {
  bus_master_.SetError();
  bus_master_.SetActive(false);
  if (unit.packet_device()) {
    PacketStatus(unit, status::kDrdy | status::kErr, kPacketTransportError);
  } else {
    Fail(unit, error::kAbrt);
  }
}

// ---- Disk transfers ----

void IdeChannel::StartDiskTransfer(Unit& unit, const DiskTransfer& transfer) {
  unit.transfer = transfer;
  unit.next_lba = transfer.lba;
  unit.remaining = transfer.sectors;
  if (transfer.dma) {
    IoJob job;
    job.kind = transfer.write ? IoJob::Kind::kWrite : IoJob::Kind::kRead;
    job.offset = transfer.lba * kSectorSize;
    job.length = uint64_t{transfer.sectors} * kSectorSize;
    job.fua = transfer.fua;
    WaitForDma(unit, std::move(job));
  } else if (!transfer.write) {
    SubmitDiskRead(unit);
  } else {
    // ATA8-APT 10.x PIO data-out: DRQ for the first block without INTRQ.
    StartDiskWriteBlock(unit, /*interrupt=*/false);
  }
}

void IdeChannel::SubmitDiskRead(Unit& unit) {
  // One DRQ block at a time, staged by the iothread: BSY until it is in.
  unit.chunk_sectors = std::min(unit.transfer.block_sectors, unit.remaining);
  IoJob job;
  job.kind = IoJob::Kind::kRead;
  job.offset = unit.next_lba * kSectorSize;
  job.length = uint64_t{unit.chunk_sectors} * kSectorSize;
  SubmitJob(unit, std::move(job));
}

void IdeChannel::StartDiskWriteBlock(Unit& unit, bool interrupt) {
  unit.chunk_sectors = std::min(unit.transfer.block_sectors, unit.remaining);
  unit.data.assign(uint64_t{unit.chunk_sectors} * kSectorSize, 0);
  StartPio(unit, Phase::kPioOut, PioOp::kDiskWrite, unit.data.size());
  unit.status = status::kReady | status::kDrq;
  if (interrupt) RaiseInterrupt(unit);
}

void IdeChannel::FailDisk(Unit& unit, int error, uint64_t lba) {
  // ATA8-ACS error outputs of the read/write commands: IDNF for an address outside the medium, UNC
  // for data that could not be read, ABRT otherwise; the LBA registers give where it failed.
  uint8_t bits = error::kAbrt;
  if (error == ERANGE) {
    bits = error::kIdnf;
  } else if (error == EIO && !unit.transfer.write) {
    bits = error::kUnc;
  }
  unit.tf.SetLba(lba, unit.transfer.lba48);
  Fail(unit, bits);
}

// ---- Packets ----

void IdeChannel::PacketReceived(Unit& unit) {
  std::copy_n(unit.data.begin(), kPacketSize, unit.cdb.begin());
  const uint64_t max_transfer =
      unit.cdrom != nullptr ? uint64_t{unit.cdrom->max_transfer_blocks()} * 2048 : 0;
  unit.plan = PlanPacket(unit.cdb, max_transfer);
  const bool has_data = unit.plan.direction == PacketDirection::kIn ||
                        (unit.plan.direction == PacketDirection::kOut && unit.plan.out_length > 0);
  if (!unit.packet_dma && unit.plan.direction == PacketDirection::kOut && has_data) {
    // PIO data-out: the parameter list comes first, in DRQ blocks (IO=0, CoD=0), each announced
    // with INTRQ; then the device server runs.
    unit.data.assign(unit.plan.out_length, 0);
    unit.pos = 0;
    NextPacketBlock(unit, /*in=*/false);
    return;
  }
  IoJob job;
  job.kind = IoJob::Kind::kPacket;
  job.cdb = unit.cdb;
  job.plan = unit.plan;
  if (unit.packet_dma && has_data) {
    WaitForDma(unit, std::move(job));
  } else {
    // Without a data phase nothing waits for the bus master, even if the host asked for DMA.
    SubmitJob(unit, std::move(job));
  }
}

void IdeChannel::NextPacketBlock(Unit& unit, bool in) {
  const uint32_t size = DrqBlockSize(unit.data.size() - unit.pos, unit.byte_limit);
  unit.phase = in ? Phase::kPioIn : Phase::kPioOut;
  unit.pio = in ? PioOp::kPacketIn : PioOp::kPacketOut;
  unit.block_end = unit.pos + size;
  // ATA8-APT 11.x: the byte count of this block in LBA Mid/High, the interrupt reason in Count.
  unit.tf.lba_mid = static_cast<uint8_t>(size);
  unit.tf.lba_high = static_cast<uint8_t>(size >> 8);
  unit.tf.count = in ? reason::kIo : 0;
  unit.status = status::kReady | status::kDrq;
  RaiseInterrupt(unit);
}

void IdeChannel::PacketStatus(Unit& unit, uint8_t status, uint8_t error) {
  // The status phase: IO=1, CoD=1, INTRQ (ATA8-APT 11.x).
  unit.tf.count = reason::kIo | reason::kCoD;
  Finish(unit, status, error, /*interrupt=*/true);
}

void IdeChannel::PacketDone(Unit& unit, IoResult& result) {
  if (result.dma) {
    if (result.prd_fault) {
      bus_master_.SetError();
      bus_master_.SetActive(false);
      PacketStatus(unit, status::kDrdy | status::kErr, kPacketTransportError);
      return;
    }
    if (result.prd_exhausted) bus_master_.SetActive(false);
  }
  if (result.status != scsi::Status::kGood) {
    // CHECK CONDITION: ERR (the ATAPI "CHK" bit) with the sense key in the Error register; the
    // unit keeps the sense for the REQUEST SENSE libata sends next.
    PacketStatus(unit, status::kDrdy | status::kErr, PacketErrorRegister(result.sense));
    return;
  }
  if (!result.dma && unit.plan.direction == PacketDirection::kIn && !result.buffer.empty()) {
    unit.data = std::move(result.buffer);
    unit.pos = 0;
    NextPacketBlock(unit, /*in=*/true);
    return;
  }
  PacketStatus(unit, status::kReady, 0);
}

// ---- Interrupts ----

void IdeChannel::RaiseInterrupt(Unit& unit) {
  unit.irq_pending = true;
  // SFF-8038i: the bus master's Interrupt bit latches the channel's IRQ line going active.
  if (IndexOf(unit) == selected_ && (device_control_ & control::kNien) == 0) {
    bus_master_.SetInterrupt();
  }
  UpdateIrq();
}

void IdeChannel::UpdateIrq() {
  // INTRQ is driven by the selected device while nIEN is clear (ATA8-APT 5.2.6, 6.x).
  const bool level = Selected().irq_pending && (device_control_ & control::kNien) == 0;
  if (level == irq_level_) return;
  irq_level_ = level;
  irq_->SetLevel(level);
}

// ---- Completions (iothread) ----

void IdeChannel::OnJobDone(IoResult result) {
  absl::MutexLock lock(&mutex_);
  Unit& unit = units_[result.unit & 1];
  if (unit.job == 0 || unit.job != result.id) return;  // abandoned by a reset
  unit.job = 0;
  switch (result.kind) {
    case IoJob::Kind::kFlush:
      // ATA8-ACS 7.14/7.15 FLUSH CACHE error outputs: ABRT.
      if (result.error != 0) {
        Fail(unit, error::kAbrt);
      } else {
        Finish(unit, status::kReady, 0, /*interrupt=*/true);
      }
      return;
    case IoJob::Kind::kRead:
    case IoJob::Kind::kWrite:
      if (result.dma) {
        if (result.prd_fault) {
          bus_master_.SetError();
          bus_master_.SetActive(false);
          Fail(unit, error::kAbrt);
          return;
        }
        if (result.prd_exhausted || result.error != 0) bus_master_.SetActive(false);
        if (result.error != 0) {
          FailDisk(unit, result.error, unit.transfer.lba);
        } else {
          Finish(unit, status::kReady, 0, /*interrupt=*/true);
        }
        return;
      }
      if (result.error != 0) {
        FailDisk(unit, result.error, unit.next_lba);
        return;
      }
      unit.next_lba += unit.chunk_sectors;
      unit.remaining -= unit.chunk_sectors;
      if (result.kind == IoJob::Kind::kRead) {
        unit.data = std::move(result.buffer);
        StartPio(unit, Phase::kPioIn, PioOp::kDiskRead, unit.data.size());
        unit.status = status::kReady | status::kDrq;
        RaiseInterrupt(unit);
      } else if (unit.remaining > 0) {
        StartDiskWriteBlock(unit, /*interrupt=*/true);
      } else {
        Finish(unit, status::kReady, 0, /*interrupt=*/true);
      }
      return;
    case IoJob::Kind::kPacket:
      PacketDone(unit, result);
      return;
  }
}

}  // namespace devices::ide
