// What the raw backend relies on from this kernel, checked on the real thing (no seam): run outside
// the sandbox (tags = ["no-sandbox"]) because page frame numbers read as 0 in a user namespace.

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "block/backend.h"
#include "block/raw/aligned_buffer.h"
#include "block/raw/raw_file_backend.h"
#include "block/request.h"
#include "gtest/gtest.h"
#include "tests/support/skip.h"
#include "vmm/sys_util/scoped_fd.h"

namespace block::raw {
namespace {

std::string MakeFile(const std::string& name, uint64_t size) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  sys_util::ScopedFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  EXPECT_TRUE(fd.valid()) << path;
  std::vector<char> data(size, 'x');
  EXPECT_EQ(pwrite(fd.get(), data.data(), size, 0), static_cast<ssize_t>(size));
  EXPECT_EQ(fsync(fd.get()), 0);
  return path;
}

// Whether the page cache page holding `offset` of `fd` is dirty: its PFN from /proc/self/pagemap
// (through a shared mapping), then KPF_DIRTY (bit 4) of /proc/kpageflags (Linux
// Documentation/admin-guide/mm/pagemap.rst). nullopt where PFNs are hidden (they read as 0 without
// CAP_SYS_ADMIN in the initial user namespace).
std::optional<bool> PageDirty(int fd, uint64_t offset) {
  const long page = sysconf(_SC_PAGESIZE);
  void* map = mmap(nullptr, page, PROT_READ, MAP_SHARED, fd, offset / page * page);
  if (map == MAP_FAILED) return std::nullopt;
  volatile char touch = *static_cast<volatile char*>(map);  // map the page cache page
  (void)touch;
  std::optional<bool> dirty;
  sys_util::ScopedFd pagemap(open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
  sys_util::ScopedFd kpageflags(open("/proc/kpageflags", O_RDONLY | O_CLOEXEC));
  constexpr uint64_t kPfnMask = (uint64_t{1} << 55) - 1;
  uint64_t entry = 0, flags = 0;
  if (pagemap.valid() && kpageflags.valid() &&
      pread(pagemap.get(), &entry, 8, reinterpret_cast<uintptr_t>(map) / page * 8) == 8 &&
      (entry >> 63) != 0 && (entry & kPfnMask) != 0 &&
      pread(kpageflags.get(), &flags, 8, (entry & kPfnMask) * 8) == 8) {
    dirty = ((flags >> 4) & 1) != 0;
  }
  munmap(map, page);
  return dirty;
}

int WriteAndWait(BlockQueue& queue, const int& last_error, bool& done, uint64_t offset,
                 const iovec* iov, bool fua) {
  Request request;
  request.type = RequestType::kWrite;
  request.offset = offset;
  request.buffers = {iov, 1};
  request.fua = fua;
  done = false;
  queue.Enqueue(request, 0);
  queue.Submit();
  while (!done) {
    pollfd pfd = {queue.completion_fd(), POLLIN, 0};
    if (poll(&pfd, 1, 10000) != 1) return -1;
    queue.ProcessCompletions();
  }
  return last_error;
}

// Native FUA rests on this: IORING_OP_WRITEV passes RWF_DSYNC through to the write, whose data is
// then written back before the completion is posted, where a plain buffered write leaves the page
// dirty (until writeback, by default up to 30 s later).
TEST(KernelFactsTest, IoUringWritevHonoursRwfDsync) {
  const std::string path = MakeFile("dsync.img", 1 << 20);
  auto backend = RawFileBackend::Open(path, {});
  ASSERT_TRUE(backend.ok()) << backend.status();
  int last_error = -1;
  bool done = false;
  auto queue = (*backend)->CreateQueue([&](uint64_t, Completion completion) {
    last_error = completion.error;
    done = true;
  });
  ASSERT_TRUE(queue.ok()) << queue.status();
  AlignedBuffer data = AlignedBuffer::Allocate(4096, 4096);
  std::memset(data.data(), 'y', 4096);
  const iovec iov = {data.data(), 4096};

  ASSERT_EQ(WriteAndWait(**queue, last_error, done, 0, &iov, /*fua=*/false), 0);
  const std::optional<bool> plain = PageDirty((*backend)->fd(), 0);
  // /proc/PID/pagemap shows page frame numbers to CAP_SYS_ADMIN in the initial user namespace
  // only (the target is tagged no-sandbox: Bazel's sandbox has a user namespace of its own).
  if (!plain.has_value() && geteuid() != 0) MICROVM_SKIP("page frame numbers need CAP_SYS_ADMIN");
  ASSERT_TRUE(plain.has_value()) << "page frame numbers are hidden from root here";
  // Background writeback could have cleaned it already, so this one is only reported.
  std::printf("plain buffered IORING_OP_WRITEV: page %s after completion\n",
              *plain ? "dirty" : "clean");
  ASSERT_EQ(WriteAndWait(**queue, last_error, done, 65536, &iov, /*fua=*/true), 0);
  EXPECT_EQ(PageDirty((*backend)->fd(), 65536), std::optional<bool>(false));
}

// statx(2) STATX_DIOALIGN (Linux 6.1) on this file system, and what the backend made of it.
TEST(KernelFactsTest, StatxDioAlign) {
  const std::string path = MakeFile("dioalign.img", 1 << 20);
  sys_util::ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct statx stx {};
  ASSERT_EQ(statx(fd.get(), "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx), 0);
  const bool reported = (stx.stx_mask & STATX_DIOALIGN) != 0;
  std::printf("STATX_DIOALIGN %s: mem_align %u, offset_align %u\n",
              reported ? "reported" : "not reported", stx.stx_dio_mem_align,
              stx.stx_dio_offset_align);
  RawFileOptions options;
  options.cache_mode = CacheMode::kNone;
  auto backend = RawFileBackend::Open(path, options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  if (reported) {
    EXPECT_EQ((*backend)->memory_alignment(), stx.stx_dio_mem_align);
    EXPECT_EQ((*backend)->info().logical_block_size,
              std::max<uint32_t>(512, stx.stx_dio_offset_align));
  }
}

}  // namespace
}  // namespace block::raw
