#include "vmm/kvm/kvm_msi.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/str_format.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/scoped_fd.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm {
namespace {

// GSIs 0-23 are the IOAPIC's pins; MSI vectors start above them.
constexpr uint32_t kIoapicPins = 24;
constexpr uint32_t kPicPins = 16;
constexpr uint32_t kPicCascadePin = 2;
// KVM_MAX_IRQ_ROUTES is 4096 on x86.
constexpr uint32_t kMaxGsi = 4096;

}  // namespace

class KvmMsiController::Vector : public MsiVector {
 public:
  Vector(KvmMsiController& controller, uint32_t gsi, sys_util::ScopedFd event)
      : controller_(controller), gsi_(gsi), event_(std::move(event)) {}
  ~Vector() override {
    (void)controller_.vm_.UnregisterIrqfd(event_.get(), gsi_);
    controller_.Release(gsi_);
  }
  absl::Status SetMessage(uint64_t address, uint32_t data) override {
    return controller_.Route(gsi_, address, data);
  }
  void Trigger() override { sys_util::SignalEventFd(event_.get()); }
  int event_fd() const override { return event_.get(); }

 private:
  KvmMsiController& controller_;
  const uint32_t gsi_;
  sys_util::ScopedFd event_;
};

KvmMsiController::KvmMsiController(VmFd& vm) : vm_(vm), next_gsi_(kIoapicPins) {}

absl::StatusOr<std::unique_ptr<MsiVector>> KvmMsiController::AllocateVector() {
  uint32_t gsi;
  {
    absl::MutexLock lock(&mutex_);
    if (next_gsi_ >= kMaxGsi) return absl::ResourceExhaustedError("no GSI left for an MSI vector");
    gsi = next_gsi_++;
  }
  sys_util::ScopedFd event(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!event.valid()) return absl::InternalError("eventfd for an MSI vector failed");
  RETURN_IF_ERROR(vm_.RegisterIrqfd(event.get(), gsi));
  return std::unique_ptr<MsiVector>(std::make_unique<Vector>(*this, gsi, std::move(event)));
}

absl::Status KvmMsiController::Route(uint32_t gsi, uint64_t address, uint32_t data) {
  absl::MutexLock lock(&mutex_);
  if (address == 0) {
    routes_.erase(gsi);
  } else {
    routes_[gsi] = Message{address, data};
  }
  return CommitLocked();
}

void KvmMsiController::Release(uint32_t gsi) {
  absl::MutexLock lock(&mutex_);
  if (routes_.erase(gsi) != 0) (void)CommitLocked();
}

absl::Status KvmMsiController::CommitLocked() {
  std::vector<kvm_irq_routing_entry> table;
  for (uint32_t pin = 0; pin < kIoapicPins; ++pin) {
    if (pin < kPicPins && pin != kPicCascadePin) {
      kvm_irq_routing_entry pic{};
      pic.gsi = pin;
      pic.type = KVM_IRQ_ROUTING_IRQCHIP;
      pic.u.irqchip.irqchip = pin < 8 ? KVM_IRQCHIP_PIC_MASTER : KVM_IRQCHIP_PIC_SLAVE;
      pic.u.irqchip.pin = pin % 8;
      table.push_back(pic);
    }
    kvm_irq_routing_entry ioapic{};
    ioapic.gsi = pin;
    ioapic.type = KVM_IRQ_ROUTING_IRQCHIP;
    ioapic.u.irqchip.irqchip = KVM_IRQCHIP_IOAPIC;
    ioapic.u.irqchip.pin = pin;
    table.push_back(ioapic);
  }
  for (const auto& [gsi, message] : routes_) {
    kvm_irq_routing_entry msi{};
    msi.gsi = gsi;
    msi.type = KVM_IRQ_ROUTING_MSI;
    msi.u.msi.address_lo = static_cast<uint32_t>(message.address);
    msi.u.msi.address_hi = static_cast<uint32_t>(message.address >> 32);
    msi.u.msi.data = message.data;
    table.push_back(msi);
  }
  return vm_.SetGsiRouting(table);
}

}  // namespace vmm
