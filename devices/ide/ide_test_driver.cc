#include "devices/ide/ide_test_driver.h"

#include <algorithm>
#include <thread>

#include "absl/time/clock.h"
#include "devices/pci/bar_allocator.h"
#include "devices/pci/pci_regs.h"
#include "vmm/sys_util/status_macros.h"

namespace devices::ide::testing {

uint8_t CdByte(uint64_t offset, uint8_t seed) {
  return static_cast<uint8_t>((offset / 2048 + seed) ^ (offset % 251));
}

TestDisk MakeDisk(uint64_t size_bytes, block::CacheMode cache, bool native_fua, bool read_only) {
  TestDisk disk;
  block::MemoryBackendOptions options;
  options.size_bytes = size_bytes;
  options.native_fua = native_fua;
  options.read_only = read_only;
  disk.backend = std::make_shared<block::MemoryBackend>(options);
  block::DriveOptions drive_options;
  drive_options.cache_mode = cache;
  drive_options.name = "disk0";
  drive_options.read_only = read_only;
  auto drive = block::Drive::CreateFixed(drive_options, disk.backend);
  if (drive.ok()) disk.drive = *std::move(drive);
  return disk;
}

std::shared_ptr<block::MemoryBackend> MakeCdMedium(uint64_t blocks, uint8_t seed) {
  block::MemoryBackendOptions options;
  options.size_bytes = blocks * 2048;
  options.read_only = true;
  options.discard = false;
  auto backend = std::make_shared<block::MemoryBackend>(options);
  std::vector<uint8_t> block(2048);
  for (uint64_t i = 0; i < blocks; ++i) {
    for (size_t j = 0; j < block.size(); ++j) block[j] = CdByte(i * 2048 + j, seed);
    (void)backend->WriteData(i * 2048, block);
  }
  return backend;
}

TestCd MakeCd(uint64_t blocks, uint8_t seed) {
  TestCd cd;
  cd.media = blocks > 0
                 ? std::make_shared<block::RemovableMedia>(MakeCdMedium(blocks, seed), "cd1.iso")
                 : std::make_shared<block::RemovableMedia>();
  block::DriveOptions options;
  options.name = "cd0";
  options.read_only = true;
  auto drive = block::Drive::CreateRemovable(options, cd.media);
  if (drive.ok()) cd.drive = *std::move(drive);
  return cd;
}

// ---- IdeTestBed ----

absl::StatusOr<std::unique_ptr<IdeTestBed>> IdeTestBed::Create(IdeControllerOptions options,
                                                               bool assign_bars, bool bus_master) {
  std::unique_ptr<IdeTestBed> bed(new IdeTestBed());
  ASSIGN_OR_RETURN(auto region, vmm::GuestMemoryRegion::Create(vmm::GuestAddress(0), kMemoryBytes));
  std::vector<std::unique_ptr<vmm::GuestMemoryRegion>> regions;
  regions.push_back(std::move(region));
  ASSIGN_OR_RETURN(auto memory, vmm::GuestMemory::Create(std::move(regions)));
  bed->memory_ = std::make_unique<vmm::GuestMemory>(std::move(memory));
  bed->irqs_[0] = std::make_shared<FakeIrqLine>();
  bed->irqs_[1] = std::make_shared<FakeIrqLine>();
  ASSIGN_OR_RETURN(bed->root_, pci::PciRootBus::Create(bed->pio_, bed->mmio_));
  if (options.iothread == nullptr) {
    ASSIGN_OR_RETURN(auto threads, StartIoThreads("ide-io", 1, {}));
    options.iothread = threads.front();
  }
  ASSIGN_OR_RETURN(bed->controller_,
                   IdeController::Create(std::move(options), bed->pio_, bed->irqs_[0],
                                         bed->irqs_[1], *bed->memory_));
  if (assign_bars) {
    pci::BarAllocator allocator = pci::BarAllocator::ForX86();
    RETURN_IF_ERROR(bed->controller_->AssignBars(allocator));
  }
  ASSIGN_OR_RETURN(bed->slot_, bed->root_->AddDevice(bed->controller_));
  bed->bus_master_base_ =
      static_cast<uint16_t>(bed->controller_->bar_address(IdeController::kBusMasterBar));
  if (bus_master) {
    bed->WriteConfig16(pci::kCommand, bed->ReadConfig16(pci::kCommand) | pci::kCommandBusMaster);
  }
  return bed;
}

IdeTestBed::~IdeTestBed() {
  if (root_ != nullptr) root_->Shutdown();
}

uint8_t IdeTestBed::In8(uint16_t port) {
  uint8_t value = 0xff;
  pio_.Read(port, std::span<uint8_t>(&value, 1));
  return value;
}

uint16_t IdeTestBed::In16(uint16_t port) {
  uint8_t bytes[2] = {0xff, 0xff};
  pio_.Read(port, bytes);
  return static_cast<uint16_t>(bytes[0] | bytes[1] << 8);
}

uint32_t IdeTestBed::In32(uint16_t port) {
  uint8_t bytes[4] = {0xff, 0xff, 0xff, 0xff};
  pio_.Read(port, bytes);
  return uint32_t{bytes[0]} | uint32_t{bytes[1]} << 8 | uint32_t{bytes[2]} << 16 |
         uint32_t{bytes[3]} << 24;
}

void IdeTestBed::InString(uint16_t port, size_t item_size, std::span<uint8_t> data) {
  pio_.ReadString(port, item_size, data);
}

void IdeTestBed::OutString(uint16_t port, size_t item_size, std::span<const uint8_t> data) {
  pio_.WriteString(port, item_size, data);
}

void IdeTestBed::Out8(uint16_t port, uint8_t value) {
  pio_.Write(port, std::span<const uint8_t>(&value, 1));
}

void IdeTestBed::Out16(uint16_t port, uint16_t value) {
  const uint8_t bytes[2] = {static_cast<uint8_t>(value), static_cast<uint8_t>(value >> 8)};
  pio_.Write(port, bytes);
}

void IdeTestBed::Out32(uint16_t port, uint32_t value) {
  const uint8_t bytes[4] = {static_cast<uint8_t>(value), static_cast<uint8_t>(value >> 8),
                            static_cast<uint8_t>(value >> 16), static_cast<uint8_t>(value >> 24)};
  pio_.Write(port, bytes);
}

uint16_t IdeTestBed::ReadConfig16(uint32_t offset) {
  uint8_t bytes[2] = {};
  root_->ReadConfig(0, slot_, 0, offset, bytes);
  return static_cast<uint16_t>(bytes[0] | bytes[1] << 8);
}

uint32_t IdeTestBed::ReadConfig32(uint32_t offset) {
  uint8_t bytes[4] = {};
  root_->ReadConfig(0, slot_, 0, offset, bytes);
  return uint32_t{bytes[0]} | uint32_t{bytes[1]} << 8 | uint32_t{bytes[2]} << 16 |
         uint32_t{bytes[3]} << 24;
}

void IdeTestBed::WriteConfig16(uint32_t offset, uint16_t value) {
  const uint8_t bytes[2] = {static_cast<uint8_t>(value), static_cast<uint8_t>(value >> 8)};
  root_->WriteConfig(0, slot_, 0, offset, bytes);
}

// ---- AtaDriver ----

AtaDriver::AtaDriver(IdeTestBed& bed, int channel)
    : bed_(bed),
      channel_(channel),
      command_base_(IdeController::kCommandBlockBase[channel]),
      control_port_(IdeController::kControlBlockBase[channel]),
      bus_master_(static_cast<uint16_t>(bed.bus_master_base() + channel * bm::kChannelStride)) {}

void AtaDriver::Select(int unit) {
  SetReg(reg::kDevice,
         static_cast<uint8_t>(device::kObsolete | device::kLba | (unit != 0 ? device::kDev : 0)));
}

bool AtaDriver::WaitNotBusy(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while ((AltStatus() & status::kBsy) != 0) {
    if (absl::Now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

void AtaDriver::SoftReset() {
  DeviceControl(0x08 | control::kNien);
  DeviceControl(0x08 | control::kNien | control::kSrst);
  DeviceControl(0x08 | control::kNien);
  WaitNotBusy();
}

void AtaDriver::Issue28(uint8_t command, uint64_t lba, uint8_t count, uint8_t feature) {
  const uint8_t dev = Reg(reg::kDevice) & device::kDev;
  SetReg(reg::kFeature, feature);
  SetReg(reg::kCount, count);
  SetReg(reg::kLbaLow, static_cast<uint8_t>(lba));
  SetReg(reg::kLbaMid, static_cast<uint8_t>(lba >> 8));
  SetReg(reg::kLbaHigh, static_cast<uint8_t>(lba >> 16));
  SetReg(reg::kDevice,
         static_cast<uint8_t>(device::kObsolete | device::kLba | dev | ((lba >> 24) & 0x0f)));
  Command(command);
}

void AtaDriver::Issue48(uint8_t command, uint64_t lba, uint16_t count, uint16_t feature) {
  const uint8_t dev = Reg(reg::kDevice) & device::kDev;
  // libata's ata_sff_tf_load: the high order bytes first, then the low ones.
  SetReg(reg::kFeature, static_cast<uint8_t>(feature >> 8));
  SetReg(reg::kCount, static_cast<uint8_t>(count >> 8));
  SetReg(reg::kLbaLow, static_cast<uint8_t>(lba >> 24));
  SetReg(reg::kLbaMid, static_cast<uint8_t>(lba >> 32));
  SetReg(reg::kLbaHigh, static_cast<uint8_t>(lba >> 40));
  SetReg(reg::kFeature, static_cast<uint8_t>(feature));
  SetReg(reg::kCount, static_cast<uint8_t>(count));
  SetReg(reg::kLbaLow, static_cast<uint8_t>(lba));
  SetReg(reg::kLbaMid, static_cast<uint8_t>(lba >> 8));
  SetReg(reg::kLbaHigh, static_cast<uint8_t>(lba >> 16));
  SetReg(reg::kDevice, static_cast<uint8_t>(device::kObsolete | device::kLba | dev));
  Command(command);
}

std::vector<uint8_t> AtaDriver::ReadData(size_t bytes, bool wide) {
  std::vector<uint8_t> out;
  out.reserve(bytes + 4);
  size_t done = 0;
  if (wide) {
    for (; done + 4 <= bytes; done += 4) {
      const uint32_t v = bed_.In32(command_base_);
      for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
    }
  }
  for (; done < bytes; done += 2) {
    const uint16_t v = bed_.In16(command_base_);
    out.push_back(static_cast<uint8_t>(v));
    out.push_back(static_cast<uint8_t>(v >> 8));
  }
  out.resize(bytes);
  return out;
}

void AtaDriver::WriteData(std::span<const uint8_t> data, bool wide) {
  size_t done = 0;
  auto byte = [&](size_t i) -> uint32_t { return i < data.size() ? data[i] : 0; };
  if (wide) {
    for (; done + 4 <= data.size(); done += 4) {
      bed_.Out32(command_base_,
                 byte(done) | byte(done + 1) << 8 | byte(done + 2) << 16 | byte(done + 3) << 24);
    }
  }
  for (; done < data.size(); done += 2) {
    bed_.Out16(command_base_, static_cast<uint16_t>(byte(done) | byte(done + 1) << 8));
  }
}

std::vector<uint8_t> AtaDriver::PioIn(size_t total_bytes, size_t block_bytes, bool wide) {
  std::vector<uint8_t> out;
  while (out.size() < total_bytes) {
    if (!WaitNotBusy()) return {};
    const uint8_t st = Status();  // acknowledges the block's interrupt
    if ((st & status::kErr) != 0 || (st & status::kDrq) == 0) return {};
    const size_t n = std::min(block_bytes, total_bytes - out.size());
    std::vector<uint8_t> block = ReadData(n, wide);
    out.insert(out.end(), block.begin(), block.end());
  }
  WaitNotBusy();
  return out;
}

uint8_t AtaDriver::PioOut(std::span<const uint8_t> data, size_t block_bytes, bool wide) {
  size_t done = 0;
  bool first = true;
  while (done < data.size()) {
    if (!WaitNotBusy()) return 0xff;
    const uint8_t st = first ? AltStatus() : Status();
    first = false;
    if ((st & status::kErr) != 0 || (st & status::kDrq) == 0) return st;
    const size_t n = std::min(block_bytes, data.size() - done);
    WriteData(data.subspan(done, n), wide);
    done += n;
  }
  if (!WaitNotBusy()) return 0xff;
  return Status();
}

std::optional<std::array<uint16_t, 256>> AtaDriver::Identify(uint8_t command) {
  Command(command);
  if (!WaitNotBusy()) return std::nullopt;
  const uint8_t st = Status();
  if ((st & status::kDrq) == 0) return std::nullopt;
  std::vector<uint8_t> bytes = ReadData(512);
  std::array<uint16_t, 256> words{};
  for (int i = 0; i < 256; ++i)
    words[i] = static_cast<uint16_t>(bytes[2 * i] | bytes[2 * i + 1] << 8);
  return words;
}

void AtaDriver::WritePrdTable(uint32_t table, const std::vector<PrdEntry>& entries) {
  for (size_t i = 0; i < entries.size(); ++i) {
    uint8_t raw[8];
    const uint32_t address = entries[i].address;
    const uint32_t control =
        (entries[i].count & 0xffff) | (entries[i].eot ? bm::kPrdEndOfTable : 0);
    for (int b = 0; b < 4; ++b) {
      raw[b] = static_cast<uint8_t>(address >> (8 * b));
      raw[4 + b] = static_cast<uint8_t>(control >> (8 * b));
    }
    (void)bed_.memory().Write(vmm::GuestAddress(table + 8 * i), raw);
  }
}

void AtaDriver::SetupDma(uint32_t table, bool to_memory) {
  // libata's ata_bmdma_setup: table pointer, direction with Start clear; then clear the status
  // bits (ata_bmdma_irq_clear writes them back).
  bed_.Out32(bus_master_ + bm::kPrdTable, table);
  bed_.Out8(bus_master_ + bm::kCommand, to_memory ? bm::kCmdWriteMemory : 0);
  bed_.Out8(bus_master_ + bm::kStatus, BmStatus() | bm::kStatError | bm::kStatInterrupt);
}

void AtaDriver::StartDma() {
  bed_.Out8(bus_master_ + bm::kCommand, bed_.In8(bus_master_ + bm::kCommand) | bm::kCmdStart);
}

void AtaDriver::StopDma() {
  bed_.Out8(bus_master_ + bm::kCommand, bed_.In8(bus_master_ + bm::kCommand) & ~bm::kCmdStart);
}

bool AtaDriver::WaitDma() { return WaitNotBusy(); }

bool AtaDriver::SendPacket(const Packet& cdb, uint8_t features, uint16_t limit) {
  if (!WaitNotBusy()) return false;
  SetReg(reg::kFeature, features);
  SetReg(reg::kLbaMid, static_cast<uint8_t>(limit));
  SetReg(reg::kLbaHigh, static_cast<uint8_t>(limit >> 8));
  Command(cmd::kPacket);
  if (!WaitNotBusy()) return false;
  const uint8_t st = AltStatus();
  if ((st & status::kDrq) == 0 || Reg(reg::kCount) != reason::kCoD) return false;
  // Linux writes the packet as three 32-bit writes.
  WriteData(cdb, /*wide=*/true);
  return true;
}

PacketResult AtaDriver::FinishPacket(PacketResult result) {
  if (!WaitNotBusy()) {
    result.timed_out = true;
    return result;
  }
  result.status = Status();
  result.error = Error();
  result.reason = Reg(reg::kCount);
  return result;
}

PacketResult AtaDriver::PacketPio(const Packet& cdb, uint16_t limit, bool wide) {
  PacketResult result;
  if (!SendPacket(cdb, 0, limit)) {
    result.timed_out = true;
    return result;
  }
  for (int guard = 0; guard < 100000; ++guard) {
    if (!WaitNotBusy()) {
      result.timed_out = true;
      return result;
    }
    const uint8_t st = AltStatus();
    if ((st & status::kDrq) == 0) break;
    if (Reg(reg::kCount) != reason::kIo) break;  // not a data-in block
    const uint32_t size = Reg(reg::kLbaMid) | Reg(reg::kLbaHigh) << 8;
    (void)Status();  // acknowledge the block's interrupt
    result.block_sizes.push_back(size);
    std::vector<uint8_t> block = ReadData(size, wide);
    result.data.insert(result.data.end(), block.begin(), block.end());
  }
  return FinishPacket(std::move(result));
}

PacketResult AtaDriver::PacketPioOut(const Packet& cdb, uint16_t limit,
                                     std::span<const uint8_t> data) {
  PacketResult result;
  if (!SendPacket(cdb, 0, limit)) {
    result.timed_out = true;
    return result;
  }
  size_t done = 0;
  while (done < data.size()) {
    if (!WaitNotBusy()) {
      result.timed_out = true;
      return result;
    }
    const uint8_t st = AltStatus();
    if ((st & status::kDrq) == 0 || Reg(reg::kCount) != 0) break;
    const uint32_t size = Reg(reg::kLbaMid) | Reg(reg::kLbaHigh) << 8;
    (void)Status();
    result.block_sizes.push_back(size);
    const size_t n = std::min<size_t>(size, data.size() - done);
    WriteData(data.subspan(done, n), /*wide=*/false);
    done += n;
  }
  return FinishPacket(std::move(result));
}

PacketResult AtaDriver::PacketDma(const Packet& cdb, uint32_t table, uint32_t buffer,
                                  uint32_t length) {
  PacketResult result;
  std::vector<PrdEntry> entries;
  for (uint32_t done = 0; done < length; done += 0x10000) {
    const uint32_t n = std::min<uint32_t>(0x10000, length - done);
    entries.push_back({buffer + done, n, done + n >= length});
  }
  WritePrdTable(table, entries);
  (void)bed_.memory().Zero(vmm::GuestAddress(buffer), length);
  SetupDma(table, /*to_memory=*/true);
  if (!SendPacket(cdb, kPacketFeatureDma,
                  static_cast<uint16_t>(std::min<uint32_t>(length, 0xfc00)))) {
    result.timed_out = true;
    return result;
  }
  StartDma();
  result = FinishPacket(std::move(result));
  result.bm_status = BmStatus();
  StopDma();
  result.data.resize(length);
  (void)bed_.memory().Read(vmm::GuestAddress(buffer), result.data);
  return result;
}

std::array<uint8_t, 3> AtaDriver::RequestSense() {
  PacketResult r = PacketPio(MakePacket({0x03, 0, 0, 0, 18, 0}), 18);
  if (r.data.size() < 14 || (r.status & status::kErr) != 0) return {0xff, 0xff, 0xff};
  return {static_cast<uint8_t>(r.data[2] & 0x0f), r.data[12], r.data[13]};
}

Packet MakePacket(std::initializer_list<uint8_t> bytes) {
  Packet packet{};
  std::copy_n(bytes.begin(), std::min<size_t>(bytes.size(), packet.size()), packet.begin());
  return packet;
}

Packet Read10(uint32_t lba, uint16_t blocks) {
  return MakePacket({0x28, 0, static_cast<uint8_t>(lba >> 24), static_cast<uint8_t>(lba >> 16),
                     static_cast<uint8_t>(lba >> 8), static_cast<uint8_t>(lba), 0,
                     static_cast<uint8_t>(blocks >> 8), static_cast<uint8_t>(blocks), 0});
}

}  // namespace devices::ide::testing
