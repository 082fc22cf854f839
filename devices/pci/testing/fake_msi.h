#ifndef DEVICES_PCI_TESTING_FAKE_MSI_H_
#define DEVICES_PCI_TESTING_FAKE_MSI_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "vmm/machine/msi.h"

namespace devices::pci::testing {

// An MsiVector that records what it was told: the messages (SetMessage) and how many times it fired.
class FakeMsiVector : public vmm::MsiVector {
 public:
  struct Message {
    uint64_t address = 0;
    uint32_t data = 0;
    bool operator==(const Message&) const = default;
  };
  absl::Status SetMessage(uint64_t address, uint32_t data) override {
    absl::MutexLock lock(&mutex_);
    messages_.push_back({address, data});
    return absl::OkStatus();
  }
  void Trigger() override { triggers_.fetch_add(1); }
  int event_fd() const override { return -1; }

  int triggers() const { return triggers_.load(); }
  std::vector<Message> messages() const {
    absl::MutexLock lock(&mutex_);
    return messages_;
  }

 private:
  mutable absl::Mutex mutex_;
  std::vector<Message> messages_ ABSL_GUARDED_BY(mutex_);
  std::atomic<int> triggers_{0};
};

// Hands out FakeMsiVectors and keeps a pointer to each (the vectors are owned by the caller, which
// must outlive the controller's use in a test).
class FakeMsiController : public vmm::MsiController {
 public:
  absl::StatusOr<std::unique_ptr<vmm::MsiVector>> AllocateVector() override {
    if (fail_after_ >= 0 && static_cast<int>(vectors_.size()) >= fail_after_) {
      return absl::ResourceExhaustedError("fake: out of vectors");
    }
    auto vector = std::make_unique<FakeMsiVector>();
    vectors_.push_back(vector.get());
    return std::unique_ptr<vmm::MsiVector>(std::move(vector));
  }
  FakeMsiVector* vector(size_t index) const { return vectors_.at(index); }
  size_t allocated() const { return vectors_.size(); }
  void FailAfter(int count) { fail_after_ = count; }

 private:
  std::vector<FakeMsiVector*> vectors_;
  int fail_after_ = -1;
};

}  // namespace devices::pci::testing

#endif  // DEVICES_PCI_TESTING_FAKE_MSI_H_
