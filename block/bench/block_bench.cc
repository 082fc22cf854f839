// Benchmark of the block layer against fio on the same preallocated file, in one run:
// 4 KiB random FUA writes at queue depth 1 and 16 (native RWF_DSYNC and emulated write+flush) and
// 4 KiB random reads, printed side by side with fio's O_SYNC / O_DIRECT numbers.
//
//   bazel run -c opt //block/bench:block_bench -- --file=/var/tmp/bench.img --seconds=10
//
// A benchmark, not a test: it reports numbers and ratios and never fails on them.
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "block/cache_mode.h"
#include "block/drive.h"
#include "block/raw/raw_file_backend.h"
#include "vmm/sys_util/scoped_fd.h"

ABSL_FLAG(std::string, file, "/var/tmp/microvm-block-bench.img",
          "Benchmark file (created and preallocated with data if missing or too small).");
ABSL_FLAG(uint64_t, size_mib, 1024, "File size in MiB.");
ABSL_FLAG(int, seconds, 10, "Duration of each workload.");
ABSL_FLAG(std::string, fio, "/usr/bin/fio", "fio binary for the host reference ('' to skip).");
ABSL_FLAG(int, repeat, 1, "Run each workload this many times and report the median.");

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kBlock = 4096;

// Writes real data over the whole file once, so neither side pays for allocating or converting
// unwritten extents during the run.
bool Preallocate(const std::string& path, uint64_t bytes) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) >= bytes &&
      st.st_blocks * 512ull >= bytes) {
    return true;
  }
  sys_util::ScopedFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  if (!fd.valid()) return false;
  std::vector<uint8_t> chunk(1 << 20);
  std::mt19937_64 random(42);
  for (auto& byte : chunk) byte = static_cast<uint8_t>(random());
  for (uint64_t done = 0; done < bytes; done += chunk.size()) {
    if (pwrite(fd.get(), chunk.data(), chunk.size(), static_cast<off_t>(done)) !=
        static_cast<ssize_t>(chunk.size())) {
      return false;
    }
  }
  return fdatasync(fd.get()) == 0;
}

// Runs fio and returns the IOPS of `direction` ("read" or "write") from its JSON output.
std::optional<double> RunFio(const std::string& fio, const std::string& path, uint64_t size_mib,
                             const std::string& rw, int depth, bool sync, int seconds,
                             const std::string& direction) {
  const std::string command = absl::StrFormat(
      "%s --name=bench --filename=%s --size=%dM --rw=%s --bs=4k --direct=1 %s "
      "--ioengine=io_uring --iodepth=%d --runtime=%d --time_based --randrepeat=0 "
      "--norandommap --output-format=json 2>/dev/null",
      fio, path, size_mib, rw, sync ? "--sync=1" : "", depth, seconds);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string output;
  char buffer[4096];
  size_t count;
  while ((count = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, count);
  if (pclose(pipe) != 0) return std::nullopt;
  const size_t section = output.find("\"" + direction + "\" : {");
  if (section == std::string::npos) return std::nullopt;
  const size_t iops = output.find("\"iops\" : ", section);
  if (iops == std::string::npos) return std::nullopt;
  return std::strtod(output.c_str() + iops + 9, nullptr);
}

struct Workload {
  block::RequestType type;
  bool fua;
  int depth;
};

// Keeps `depth` 4 KiB requests in flight through a Drive queue for `seconds` and returns IOPS.
std::optional<double> RunLayer(const std::string& path, block::FuaMode fua_mode,
                               const Workload& workload, uint64_t size_bytes, int seconds) {
  block::raw::RawFileOptions options;
  options.cache_mode = block::CacheMode::kNone;
  options.fua_mode = fua_mode;
  auto backend = block::raw::RawFileBackend::Open(path, options);
  if (!backend.ok()) {
    absl::FPrintF(stderr, "block_bench: %s\n", backend.status().ToString());
    return std::nullopt;
  }
  block::DriveOptions drive_options;
  drive_options.cache_mode = block::CacheMode::kNone;
  drive_options.fua_mode = fua_mode;
  drive_options.name = "bench";
  auto drive = block::Drive::CreateFixed(drive_options, *backend);
  if (!drive.ok()) return std::nullopt;

  const int depth = workload.depth;
  // One aligned 4 KiB buffer and iovec per slot; the cookie is the slot.
  void* memory = nullptr;
  if (posix_memalign(&memory, kBlock, static_cast<size_t>(depth) * kBlock) != 0)
    return std::nullopt;
  std::unique_ptr<uint8_t, decltype(&free)> buffers(static_cast<uint8_t*>(memory), &free);
  std::memset(buffers.get(), 0x5a, static_cast<size_t>(depth) * kBlock);
  std::vector<iovec> iovecs(depth);
  std::mt19937_64 random(7);
  const uint64_t blocks = size_bytes / kBlock;
  uint64_t completed = 0;
  int errors = 0;
  bool running = true;
  std::unique_ptr<block::BlockQueue> queue;

  auto issue = [&](uint64_t slot) {
    iovecs[slot] = {buffers.get() + slot * kBlock, kBlock};
    block::Request request;
    request.type = workload.type;
    request.offset = (random() % blocks) * kBlock;
    request.buffers = std::span<const iovec>(&iovecs[slot], 1);
    request.fua = workload.fua;
    queue->Enqueue(request, slot);
  };
  auto created = (*drive)->CreateQueue([&](uint64_t slot, block::Completion completion) {
    if (!completion.ok()) ++errors;
    ++completed;
    if (running) issue(slot);
  });
  if (!created.ok()) return std::nullopt;
  queue = *std::move(created);

  for (int slot = 0; slot < depth; ++slot) issue(static_cast<uint64_t>(slot));
  queue->Submit();
  const Clock::time_point start = Clock::now();
  const Clock::time_point end = start + std::chrono::seconds(seconds);
  while (true) {
    pollfd fd = {queue->completion_fd(), POLLIN, 0};
    poll(&fd, 1, 1000);
    queue->ProcessCompletions();
    if (Clock::now() >= end) break;
    queue->Submit();
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const uint64_t done = completed;
  running = false;
  while (queue->in_flight() > 0) {
    pollfd fd = {queue->completion_fd(), POLLIN, 0};
    poll(&fd, 1, 1000);
    queue->ProcessCompletions();
  }
  if (errors > 0) absl::FPrintF(stderr, "block_bench: %d requests failed\n", errors);
  return done / elapsed;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

std::string Cell(std::optional<double> value) {
  return value ? absl::StrFormat("%10.0f", *value) : std::string("         -");
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string path = absl::GetFlag(FLAGS_file);
  const uint64_t size_mib = absl::GetFlag(FLAGS_size_mib);
  const uint64_t size_bytes = size_mib << 20;
  const int seconds = absl::GetFlag(FLAGS_seconds);
  const std::string fio = absl::GetFlag(FLAGS_fio);
  const int repeat = std::max(1, absl::GetFlag(FLAGS_repeat));
  const bool have_fio = !fio.empty() && access(fio.c_str(), X_OK) == 0;

  absl::PrintF("block_bench: %s, %d MiB, %d s per workload, median of %d, cache=none (O_DIRECT)\n",
               path, size_mib, seconds, repeat);
  if (!Preallocate(path, size_bytes)) {
    absl::FPrintF(stderr, "block_bench: cannot prepare %s\n", path);
    return 1;
  }
  if (!have_fio) absl::PrintF("block_bench: fio not found at %s; host column left empty\n", fio);

  auto median_of = [&](auto run) -> std::optional<double> {
    std::vector<double> values;
    for (int i = 0; i < repeat; ++i) {
      std::optional<double> value = run();
      if (!value) return std::nullopt;
      values.push_back(*value);
    }
    return Median(values);
  };

  struct Row {
    std::string name;
    std::optional<double> fio;
    std::optional<double> native;
    std::optional<double> emulated;
  };
  std::vector<Row> rows;
  for (int depth : {1, 16}) {
    Row row{absl::StrFormat("4K randwrite FUA QD%d", depth)};
    if (have_fio) {
      row.fio = median_of([&] {
        return RunFio(fio, path, size_mib, "randwrite", depth, /*sync=*/true, seconds, "write");
      });
    }
    const Workload write{block::RequestType::kWrite, true, depth};
    row.native = median_of(
        [&] { return RunLayer(path, block::FuaMode::kNative, write, size_bytes, seconds); });
    row.emulated = median_of(
        [&] { return RunLayer(path, block::FuaMode::kEmulate, write, size_bytes, seconds); });
    rows.push_back(row);
  }
  for (int depth : {1, 16}) {
    Row row{absl::StrFormat("4K randread QD%d", depth)};
    if (have_fio) {
      row.fio = median_of([&] {
        return RunFio(fio, path, size_mib, "randread", depth, /*sync=*/false, seconds, "read");
      });
    }
    const Workload read{block::RequestType::kRead, false, depth};
    row.native = median_of(
        [&] { return RunLayer(path, block::FuaMode::kNative, read, size_bytes, seconds); });
    rows.push_back(row);
  }

  absl::PrintF("\n%-24s %12s %14s %9s %14s %16s\n", "workload (IOPS)", "fio host", "layer native",
               "vs fio", "layer emulated", "native/emulated");
  for (const Row& row : rows) {
    std::string versus = "-";
    if (row.fio && row.native && *row.fio > 0) {
      versus = absl::StrFormat("%.1f%%", 100.0 * *row.native / *row.fio);
    }
    std::string ratio = "-";
    if (row.native && row.emulated && *row.emulated > 0) {
      ratio = absl::StrFormat("%.2fx", *row.native / *row.emulated);
    }
    absl::PrintF("%-24s %12s %14s %9s %14s %16s\n", row.name, Cell(row.fio), Cell(row.native),
                 versus, Cell(row.emulated), ratio);
  }
  absl::PrintF(
      "\nfio: --direct=1 --ioengine=io_uring --bs=4k, writes with --sync=1 (O_SYNC). Layer: Drive "
      "over the io_uring raw backend, cache=none; native FUA = one RWF_DSYNC write, emulated = "
      "write then fdatasync.\n");
  return 0;
}
