#include "vmm/vcpu_runner.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/skip.h"
#include "vmm/kvm/coalesced_writes.h"
#include "vmm/kvm/kvm.h"
#include "vmm/machine/bus.h"
#include "vmm/vm_exit.h"

namespace vmm {
namespace {

constexpr uint64_t kMemorySize = 64 << 10;
constexpr uint64_t kCodeAddress = 0x1000;
constexpr uint16_t kPort = 0x80;

// Counts the guest's writes to its port.
class CountingPort : public BusDevice {
 public:
  void Read(uint64_t, std::span<uint8_t> data) override { memset(data.data(), 0xff, data.size()); }
  void Write(uint64_t, std::span<const uint8_t>) override { writes.fetch_add(1); }
  std::atomic<uint64_t> writes{0};
};

// One real-mode vCPU running `out 0x80, al; jmp $-2` for ever: every iteration is a port I/O exit.
class VcpuRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = tests::NoKvmReason(); !why.empty()) MICROVM_SKIP(why);
    auto kvm = Kvm::Open();
    ASSERT_TRUE(kvm.ok()) << kvm.status();
    kvm_.emplace(*std::move(kvm));
    auto vm = kvm_->CreateVm();
    ASSERT_TRUE(vm.ok()) << vm.status();
    vm_.emplace(*std::move(vm));
    ASSERT_TRUE(vm_->SetTssAddress(0xfffbd000).ok());
    ASSERT_TRUE(vm_->CreateIrqchip().ok());
    memory_ =
        mmap(nullptr, kMemorySize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(memory_, MAP_FAILED);
    static constexpr uint8_t kCode[] = {0xe6, kPort, 0xeb, 0xfc};  // out 0x80, al; jmp -4
    memcpy(static_cast<uint8_t*>(memory_) + kCodeAddress, kCode, sizeof(kCode));
    ASSERT_TRUE(vm_->SetUserMemoryRegion(0, 0, kMemorySize, memory_).ok());
    auto vcpu = vm_->CreateVcpu(0);
    ASSERT_TRUE(vcpu.ok()) << vcpu.status();
    auto sregs = vcpu->GetSregs();
    ASSERT_TRUE(sregs.ok());
    sregs->cs.base = 0;
    sregs->cs.selector = 0;
    ASSERT_TRUE(vcpu->SetSregs(*sregs).ok());
    auto regs = vcpu->GetRegs();
    ASSERT_TRUE(regs.ok());
    regs->rip = kCodeAddress;
    regs->rflags = 2;
    ASSERT_TRUE(vcpu->SetRegs(*regs).ok());
    port_ = std::make_shared<CountingPort>();
    ASSERT_TRUE(pio_.Register(kPort, 1, port_).ok());
    VcpuRunner::InstallKickSignalHandler();
    runner_ = std::make_unique<VcpuRunner>(*std::move(vcpu), pio_, mmio_, latch_);
  }

  void TearDown() override {
    runner_.reset();
    if (memory_ != nullptr && memory_ != MAP_FAILED) munmap(memory_, kMemorySize);
  }

  // Waits (up to 10 s) until the guest has written more than `count` times.
  bool WritesExceed(uint64_t count) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      if (port_->writes.load() > count) return true;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return false;
  }

  std::optional<Kvm> kvm_;
  std::optional<VmFd> vm_;
  void* memory_ = nullptr;
  Bus pio_{"pio"};
  Bus mmio_{"mmio"};
  ExitLatch latch_;
  std::shared_ptr<CountingPort> port_;
  std::unique_ptr<VcpuRunner> runner_;
};

TEST_F(VcpuRunnerTest, PauseStopsTheGuestAndResumeLetsItRun) {
  runner_->Start();
  ASSERT_TRUE(WritesExceed(10));
  runner_->Pause();
  EXPECT_TRUE(runner_->parked());
  const uint64_t paused_at = port_->writes.load();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(port_->writes.load(), paused_at) << "the guest ran while paused";
  // Idempotent.
  runner_->Pause();
  EXPECT_EQ(port_->writes.load(), paused_at);
  runner_->Resume();
  EXPECT_TRUE(WritesExceed(paused_at + 10)) << "the guest did not run again after Resume";
  EXPECT_FALSE(runner_->parked());
  runner_->Resume();  // idempotent
  // Several cycles.
  for (int i = 0; i < 20; ++i) {
    runner_->Pause();
    const uint64_t at = port_->writes.load();
    absl::SleepFor(absl::Milliseconds(2));
    EXPECT_EQ(port_->writes.load(), at);
    runner_->Resume();
    ASSERT_TRUE(WritesExceed(at));
  }
  EXPECT_FALSE(latch_.triggered());
}

// Records the values written to it, in order.
class RecordingPort : public BusDevice {
 public:
  void Read(uint64_t, std::span<uint8_t> data) override { memset(data.data(), 0xff, data.size()); }
  void Write(uint64_t, std::span<const uint8_t> data) override {
    absl::MutexLock lock(&mutex_);
    values_.insert(values_.end(), data.begin(), data.end());
  }
  std::vector<uint8_t> values() const {
    absl::MutexLock lock(&mutex_);
    return values_;
  }

 private:
  mutable absl::Mutex mutex_;
  std::vector<uint8_t> values_;
};

// At each write, how many posted writes the other port had received by then.
class OrderCheckingPort : public BusDevice {
 public:
  explicit OrderCheckingPort(const RecordingPort& posted) : posted_(posted) {}
  void Read(uint64_t, std::span<uint8_t> data) override { memset(data.data(), 0xff, data.size()); }
  void Write(uint64_t, std::span<const uint8_t>) override {
    absl::MutexLock lock(&mutex_);
    seen_.push_back(posted_.values().size());
  }
  std::vector<size_t> seen() const {
    absl::MutexLock lock(&mutex_);
    return seen_;
  }

 private:
  const RecordingPort& posted_;
  mutable absl::Mutex mutex_;
  std::vector<size_t> seen_;
};

// Writes to a coalesced port do not exit; the runner applies them, in order, before it handles the
// next exit, so the port that does exit finds every earlier write there.
TEST_F(VcpuRunnerTest, PostedWritesLandInOrderBeforeTheNextExit) {
  constexpr uint16_t kPostedPort = 0x71;
  // start: mov al, 1; out 0x71, al; mov al, 2; out 0x71, al; mov al, 3; out 0x71, al;
  //        out 0x80, al; jmp start
  static constexpr uint8_t kCode[] = {0xb0, 1, 0xe6, kPostedPort, 0xb0, 2,     0xe6, kPostedPort,
                                      0xb0, 3, 0xe6, kPostedPort, 0xe6, kPort, 0xeb, 0xf0};
  memcpy(static_cast<uint8_t*>(memory_) + kCodeAddress, kCode, sizeof(kCode));
  // Every KVM this project runs on has coalesced port I/O (Linux 4.19 and later; PVM too).
  ASSERT_GT(kvm_->CheckExtension(KVM_CAP_COALESCED_PIO), 0);
  const int page_offset = kvm_->CheckExtension(KVM_CAP_COALESCED_MMIO);
  ASSERT_GT(page_offset, 0);
  ASSERT_TRUE(vm_->RegisterCoalescedPio(kPostedPort, 1).ok());
  auto posted = std::make_shared<RecordingPort>();
  ASSERT_TRUE(pio_.Register(kPostedPort, 1, posted).ok());
  auto exiting = std::make_shared<OrderCheckingPort>(*posted);
  ASSERT_TRUE(pio_.Unregister(kPort).ok());
  ASSERT_TRUE(pio_.Register(kPort, 1, exiting).ok());
  CoalescedWrites writes(pio_, mmio_, static_cast<size_t>(sysconf(_SC_PAGESIZE)), page_offset);
  runner_->ApplyPostedWrites(&writes);
  runner_->Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (exiting->seen().size() < 100 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  runner_.reset();  // stopped and joined before `writes` goes
  const std::vector<size_t> seen = exiting->seen();
  ASSERT_GE(seen.size(), 100u);
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 3 * (i + 1)) << "exit " << i;
  const std::vector<uint8_t> values = posted->values();
  ASSERT_GE(values.size(), 3 * seen.size());
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(values[i], i % 3 + 1) << "write " << i;
  // They came through the ring, not as exits of their own.
  EXPECT_EQ(writes.applied(), values.size());
  EXPECT_FALSE(latch_.triggered());
}

TEST_F(VcpuRunnerTest, PausedBeforeStartParksAtOnce) {
  runner_->Pause();  // no thread yet: returns at once
  runner_->Start();
  runner_->WaitUntilPaused();
  EXPECT_TRUE(runner_->parked());
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(port_->writes.load(), 0u);
  runner_->Resume();
  EXPECT_TRUE(WritesExceed(10));
}

TEST_F(VcpuRunnerTest, ResumeBeforeTheVcpuParkedDoesNotSpin) {
  runner_->Start();
  ASSERT_TRUE(WritesExceed(10));
  for (int i = 0; i < 50; ++i) {
    runner_->RequestPause();
    runner_->Resume();
  }
  // immediate_exit was cleared: the guest keeps making progress (rather than KVM_RUN returning
  // EINTR for ever).
  const uint64_t now = port_->writes.load();
  EXPECT_TRUE(WritesExceed(now + 100));
}

TEST_F(VcpuRunnerTest, StopEndsAPausedVcpu) {
  runner_->Start();
  ASSERT_TRUE(WritesExceed(10));
  runner_->Pause();
  const absl::Time start = absl::Now();
  runner_->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  // Pause and resume after the stop are harmless.
  runner_->Pause();
  runner_->Resume();
}

}  // namespace
}  // namespace vmm
