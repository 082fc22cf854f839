#include "block/raw/uring_ops.h"

#include <fcntl.h>
#include <liburing.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/scoped_fd.h"

namespace block::raw {
namespace {

// A file with known contents in the test's temporary directory.
sys_util::ScopedFd MakeFile(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  sys_util::ScopedFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(pwrite(fd.get(), contents.data(), contents.size(), 0),
            static_cast<ssize_t>(contents.size()));
  return fd;
}

// A ring set up exactly as the raw backend's, which the test then drives through liburing by
// hand: what a compromised iothread writing entries into the ring's memory could do.
class AttackedRing : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = MakeFile("ring-file", "the one file");
    auto event_fd = sys_util::MakeEventFd();
    ASSERT_TRUE(event_fd.ok());
    event_fd_ = *std::move(event_fd);
    const absl::Status status = SetUpLockedDownRing(8, file_.get(), event_fd_.get(), ring_);
    ASSERT_TRUE(status.ok()) << status;
    set_up_ = true;
  }
  void TearDown() override {
    if (set_up_) io_uring_queue_exit(&ring_);
  }

  // Submits the one prepared entry and returns its completion's result.
  int SubmitAndWait() {
    EXPECT_EQ(io_uring_submit(&ring_), 1);
    io_uring_cqe* cqe = nullptr;
    EXPECT_EQ(io_uring_wait_cqe(&ring_, &cqe), 0);
    if (cqe == nullptr) return 0;
    const int result = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    return result;
  }
  io_uring_sqe* Sqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    EXPECT_NE(sqe, nullptr);
    return sqe;
  }

  sys_util::ScopedFd file_;
  sys_util::ScopedFd event_fd_;
  io_uring ring_{};
  bool set_up_ = false;
};

TEST_F(AttackedRing, ReadsItsOneFileAsFixedFileZero) {
  char buffer[12] = {};
  iovec vec{buffer, sizeof(buffer)};
  io_uring_sqe* sqe = Sqe();
  io_uring_prep_readv(sqe, 0, &vec, 1, 0);
  sqe->flags |= IOSQE_FIXED_FILE;
  EXPECT_EQ(SubmitAndWait(), 12);
  EXPECT_EQ(std::string(buffer, sizeof(buffer)), "the one file");
}

TEST_F(AttackedRing, CannotOpenAFile) {
  io_uring_prep_openat(Sqe(), AT_FDCWD, "/etc/passwd", O_RDONLY | O_CLOEXEC, 0);
  EXPECT_EQ(SubmitAndWait(), -EACCES);
}

TEST_F(AttackedRing, CannotMakeOrConnectASocket) {
  io_uring_prep_socket(Sqe(), AF_INET, SOCK_STREAM, 0, 0);
  EXPECT_EQ(SubmitAndWait(), -EACCES);
  sys_util::ScopedFd tcp(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(9);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  io_uring_prep_connect(Sqe(), tcp.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
  EXPECT_EQ(SubmitAndWait(), -EACCES);
}

TEST_F(AttackedRing, CannotReachAnyOtherDescriptor) {
  sys_util::ScopedFd other = MakeFile("other-file", "someone else's");
  char buffer[8] = {};
  iovec vec{buffer, sizeof(buffer)};
  // A plain descriptor number: IOSQE_FIXED_FILE is required.
  io_uring_prep_readv(Sqe(), other.get(), &vec, 1, 0);
  EXPECT_EQ(SubmitAndWait(), -EACCES);
  // A fixed file index nothing was registered at.
  io_uring_sqe* sqe = Sqe();
  io_uring_prep_readv(sqe, 1, &vec, 1, 0);
  sqe->flags |= IOSQE_FIXED_FILE;
  EXPECT_LT(SubmitAndWait(), 0);
  // The one file, but with a flag beyond IOSQE_FIXED_FILE (here: run it asynchronously).
  sqe = Sqe();
  io_uring_prep_readv(sqe, 0, &vec, 1, 0);
  sqe->flags |= IOSQE_FIXED_FILE | IOSQE_ASYNC;
  EXPECT_EQ(SubmitAndWait(), -EACCES);
}

TEST_F(AttackedRing, NothingCanBeRegisteredOnceItRuns) {
  sys_util::ScopedFd other = MakeFile("other-file-2", "x");
  int fd = other.get();
  EXPECT_EQ(io_uring_register_files_update(&ring_, 0, &fd, 1), -EACCES);
  // Taking the one file away is allowed (the ring's teardown does); putting any back is not.
  EXPECT_EQ(io_uring_unregister_files(&ring_), 0);
  EXPECT_EQ(io_uring_register_files(&ring_, &fd, 1), -EACCES);
  std::array<char, 4096> memory{};
  iovec vec{memory.data(), memory.size()};
  EXPECT_EQ(io_uring_register_buffers(&ring_, &vec, 1), -EACCES);
  EXPECT_EQ(io_uring_unregister_eventfd(&ring_), -EACCES);
  EXPECT_EQ(io_uring_register_personality(&ring_), -EACCES);
}

// The product's own ring (CreateLockedDownRing) does its I/O on the file it was made for.
TEST(LockedDownRingTest, WritesReadsAndSyncsItsFile) {
  sys_util::ScopedFd file = MakeFile("product-ring", std::string(16, '-'));
  auto ring = CreateLockedDownRing(4, file.get());
  ASSERT_TRUE(ring.ok()) << ring.status();
  char out[5] = {'h', 'e', 'l', 'l', 'o'};
  iovec out_vec{out, sizeof(out)};
  ASSERT_TRUE((*ring)->Prep({.opcode = UringOpcode::kWritev,
                             .iovecs = &out_vec,
                             .iovec_count = 1,
                             .offset = 3,
                             .length = 5,
                             .user_data = 1}));
  ASSERT_TRUE((*ring)->Prep({.opcode = UringOpcode::kFsync, .user_data = 2}));
  ASSERT_EQ((*ring)->Submit(), 2);
  std::array<CqeResult, 4> done{};
  size_t reaped = 0;
  while (reaped < 2) reaped += (*ring)->Reap(std::span(done).subspan(reaped));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(done[i].res, done[i].user_data == 1 ? 5 : 0) << "user_data " << done[i].user_data;
  }
  EXPECT_GT(sys_util::DrainEventFd((*ring)->completion_fd()), 0u)
      << "completions signal the eventfd";
  char in[16] = {};
  ASSERT_EQ(pread(file.get(), in, sizeof(in), 0), 16);
  EXPECT_EQ(std::string(in, sizeof(in)), "---hello--------");
}

// A ring of the pool (SetUpPooledRing), attacked the same way: until a file is registered it
// reaches nothing, and registering one is all it allows beyond the five operations.
TEST(PooledRingAttack, TakesOneFileAndNothingElse) {
  auto event_fd = sys_util::MakeEventFd();
  ASSERT_TRUE(event_fd.ok());
  io_uring ring{};
  ASSERT_TRUE(SetUpPooledRing(8, event_fd->get(), ring).ok());
  auto submit_one = [&ring] {
    EXPECT_EQ(io_uring_submit(&ring), 1);
    io_uring_cqe* cqe = nullptr;
    EXPECT_EQ(io_uring_wait_cqe(&ring, &cqe), 0);
    const int result = cqe != nullptr ? cqe->res : 0;
    if (cqe != nullptr) io_uring_cqe_seen(&ring, cqe);
    return result;
  };
  io_uring_prep_openat(io_uring_get_sqe(&ring), AT_FDCWD, "/etc/passwd", O_RDONLY | O_CLOEXEC, 0);
  EXPECT_EQ(submit_one(), -EACCES);
  io_uring_prep_unlinkat(io_uring_get_sqe(&ring), AT_FDCWD, "/nonexistent-file", 0);
  EXPECT_EQ(submit_one(), -EACCES);
  sys_util::ScopedFd file = MakeFile("pooled-file", "pooled ring");
  int fd = file.get();
  ASSERT_EQ(io_uring_register_files(&ring, &fd, 1), 0);
  char buffer[11] = {};
  iovec vec{buffer, sizeof(buffer)};
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  io_uring_prep_readv(sqe, 0, &vec, 1, 0);
  sqe->flags |= IOSQE_FIXED_FILE;
  EXPECT_EQ(submit_one(), 11);
  EXPECT_EQ(std::string(buffer, sizeof(buffer)), "pooled ring");
  std::array<char, 4096> memory{};
  iovec buffers{memory.data(), memory.size()};
  EXPECT_EQ(io_uring_register_buffers(&ring, &buffers, 1), -EACCES);
  EXPECT_EQ(io_uring_unregister_eventfd(&ring), -EACCES);
  EXPECT_EQ(io_uring_register_personality(&ring), -EACCES);
  EXPECT_EQ(io_uring_unregister_files(&ring), 0);
  io_uring_queue_exit(&ring);
}

// Take binds a ring to a file; Recycle unbinds it and the next Take binds it to another.
TEST(RingPoolTest, RingsGoToOneFileThenBackThenToTheNext) {
  auto pool = RingPool::Create(1, 4);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->available(), 1u);
  sys_util::ScopedFd first = MakeFile("pool-first", "first file");
  sys_util::ScopedFd second = MakeFile("pool-second", "SECOND FILE");
  auto read_with = [](UringOps& ring, size_t length) {
    std::string text(length, '\0');
    iovec vec{text.data(), text.size()};
    EXPECT_TRUE(ring.Prep({.opcode = UringOpcode::kReadv,
                           .iovecs = &vec,
                           .iovec_count = 1,
                           .length = length,
                           .user_data = 7}));
    EXPECT_EQ(ring.Submit(), 1);
    std::array<CqeResult, 1> done{};
    while (ring.Reap(done) == 0) {
    }
    EXPECT_EQ(done[0].res, static_cast<int>(length));
    sys_util::DrainEventFd(ring.completion_fd());
    return text;
  };
  auto ring = (*pool)->Take(first.get());
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ((*pool)->available(), 0u);
  EXPECT_EQ(read_with(**ring, 10), "first file");
  // Every ring is taken.
  auto none = (*pool)->Take(second.get());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted) << none.status();
  (*pool)->Recycle(*std::move(ring));
  EXPECT_EQ((*pool)->available(), 1u);
  auto again = (*pool)->Take(second.get());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(read_with(**again, 11), "SECOND FILE");
}

// A ring given back on a thread whose filter refuses io_uring_register (an iothread dropping a
// medium's last reference) cannot unregister its file there: it waits, and the next Take() on a
// thread that may unregisters it and hands it out again.
TEST(RingPoolTest, ARingGivenBackWhereItCannotBeUnboundIsUnboundAtTheNextTake) {
  auto pool = RingPool::Create(1, 4);
  ASSERT_TRUE(pool.ok()) << pool.status();
  sys_util::ScopedFd first = MakeFile("deferred-first", "first");
  sys_util::ScopedFd second = MakeFile("deferred-second", "second");
  auto ring = (*pool)->Take(first.get());
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::thread([&] {
    // io_uring_register fails with EPERM on this thread, as on an iothread.
    sock_filter program[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_register, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog fprog{static_cast<unsigned short>(std::size(program)), program};
    ASSERT_EQ(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
    ASSERT_EQ(syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog), 0);
    (*pool)->Recycle(*std::move(ring));
  }).join();
  EXPECT_EQ((*pool)->available(), 1u);
  auto again = (*pool)->Take(second.get());
  ASSERT_TRUE(again.ok()) << again.status();
  char buffer[6] = {};
  iovec vec{buffer, sizeof(buffer)};
  ASSERT_TRUE((*again)->Prep({.opcode = UringOpcode::kReadv,
                              .iovecs = &vec,
                              .iovec_count = 1,
                              .length = 6,
                              .user_data = 1}));
  ASSERT_EQ((*again)->Submit(), 1);
  std::array<CqeResult, 1> done{};
  while ((*again)->Reap(done) == 0) {
  }
  EXPECT_EQ(done[0].res, 6);
  EXPECT_EQ(std::string(buffer, sizeof(buffer)), "second");
}

// A ring given back with work left in it (here a completion nobody reaped) is destroyed, not
// handed to the next file; so is a ring that is not the pool's.
TEST(RingPoolTest, ARingThatIsNotDrainedOrNotItsOwnIsNotKept) {
  auto pool = RingPool::Create(1, 4);
  ASSERT_TRUE(pool.ok()) << pool.status();
  sys_util::ScopedFd file = MakeFile("pool-undrained", "x");
  auto ring = (*pool)->Take(file.get());
  ASSERT_TRUE(ring.ok());
  ASSERT_TRUE((*ring)->Prep({.opcode = UringOpcode::kFsync, .user_data = 1}));
  ASSERT_EQ((*ring)->Submit(), 1);
  pollfd ready{(*ring)->completion_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&ready, 1, 10000), 1);
  (*pool)->Recycle(*std::move(ring));
  EXPECT_EQ((*pool)->available(), 0u);
  auto other = CreateLockedDownRing(4, file.get());
  ASSERT_TRUE(other.ok());
  (*pool)->Recycle(*std::move(other));
  EXPECT_EQ((*pool)->available(), 0u);
}

}  // namespace
}  // namespace block::raw
