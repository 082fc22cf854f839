#ifndef VMM_MACHINE_BUS_H_
#define VMM_MACHINE_BUS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace vmm {

// A device reachable through port I/O or MMIO. `offset` is relative to the base the device was
// registered at, so one implementation can sit at any address. Called on vCPU threads, possibly
// several at once: implementations do their own locking.
class BusDevice {
 public:
  virtual ~BusDevice() = default;
  virtual void Read(uint64_t offset, std::span<uint8_t> data) = 0;
  virtual void Write(uint64_t offset, std::span<const uint8_t> data) = 0;

  // String I/O (rep ins/outs): data.size() / item_size accesses of item_size bytes each, one after
  // the other, all at `offset`. The default makes them one by one; a device whose register is a
  // FIFO (an IDE data port, fed 1024 words per CD sector) takes the whole string in one call.
  virtual void ReadString(uint64_t offset, size_t item_size, std::span<uint8_t> data);
  virtual void WriteString(uint64_t offset, size_t item_size, std::span<const uint8_t> data);
};

// Dispatches guest accesses by address range. Ranges never overlap; registering one that would is an
// error. Devices are called without the bus lock held, so a device may (re)register ranges from
// inside an access (a PCI BAR move does).
class Bus {
 public:
  explicit Bus(std::string name) : name_(std::move(name)) {}

  absl::Status Register(uint64_t base, uint64_t size, std::shared_ptr<BusDevice> device);
  absl::Status Unregister(uint64_t base);
  // Drops every registration (and with it the bus's references to the devices).
  void Clear();

  // Return false when nothing is mapped at `address` or the access runs past the device's range;
  // such reads see all-ones, as on an unclaimed ISA/PCI bus.
  bool Read(uint64_t address, std::span<uint8_t> data) const;
  bool Write(uint64_t address, std::span<const uint8_t> data) const;
  // String I/O: data.size() / item_size accesses of item_size bytes at `address` (one lookup).
  bool ReadString(uint64_t address, size_t item_size, std::span<uint8_t> data) const;
  bool WriteString(uint64_t address, size_t item_size, std::span<const uint8_t> data) const;

  const std::string& name() const { return name_; }

 private:
  struct Range {
    uint64_t size;
    std::shared_ptr<BusDevice> device;
  };
  // The device and the offset of `address` in it, when [address, address + length) is inside one
  // registered range.
  std::shared_ptr<BusDevice> Find(uint64_t address, uint64_t length, uint64_t* offset) const;

  const std::string name_;
  mutable absl::Mutex mutex_;
  std::map<uint64_t, Range> ranges_ ABSL_GUARDED_BY(mutex_);  // keyed by base
};

}  // namespace vmm

#endif  // VMM_MACHINE_BUS_H_
