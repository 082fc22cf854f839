// api_bench: the control API's round-trip latency, and a background query load, for tools/bench-api.
// A benchmark, not a test: it prints numbers and fails only when the API does.
//
//   api_bench --api unix:PATH latency [--drive cd1] [--iso PATH] [--calls 2000] [--pairs 500]
//       GetStatus, ListDrives and GetStats round trips (--calls each, after 100 warm-up calls),
//       then Insert(--iso) + Eject(force) pairs on --drive (an idle, empty CD-ROM).
//   api_bench --api unix:PATH load [--drive cd0] [--seconds S] [--interval-us N] [--wait-s S]
//       GetStatus + GetStats on --drive back to back (or one pair every --interval-us) until
//       SIGINT/SIGTERM or --seconds; waits up to --wait-s for the socket to appear first. Prints the
//       call count and rate at the end.
//
// Output lines start with "api-bench:" and are key=value pairs.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "api/vmmctl_lib.h"
#include "grpcpp/grpcpp.h"
#include "proto/vmm/v1/vmm.grpc.pb.h"

namespace {

namespace pb = ::vmm::v1;

std::atomic<bool> stop_requested{false};

void OnStop(int) { stop_requested = true; }

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(10);
}

struct Summary {
  size_t count = 0;
  double mean_us = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0, min_us = 0;
};

Summary Summarize(std::vector<double> us) {
  Summary s;
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  s.count = us.size();
  double sum = 0;
  for (double v : us) sum += v;
  s.mean_us = sum / us.size();
  auto at = [&](double q) {
    return us[std::min(us.size() - 1, static_cast<size_t>(q * (us.size() - 1) + 0.5))];
  };
  s.min_us = us.front();
  s.p50_us = at(0.50);
  s.p90_us = at(0.90);
  s.p99_us = at(0.99);
  s.max_us = us.back();
  return s;
}

void Print(const std::string& what, const Summary& s) {
  absl::PrintF(
      "api-bench: %-22s calls=%d mean_us=%.1f min_us=%.1f p50_us=%.1f p90_us=%.1f p99_us=%.1f "
      "max_us=%.1f\n",
      what, s.count, s.mean_us, s.min_us, s.p50_us, s.p90_us, s.p99_us, s.max_us);
  fflush(stdout);
}

// Times `calls` runs of `call` (which returns false on an RPC error: the benchmark stops).
bool Time(const std::string& what, int calls, const std::function<grpc::Status()>& call,
          std::vector<double>* out) {
  out->clear();
  out->reserve(calls);
  for (int i = 0; i < calls; ++i) {
    const auto start = std::chrono::steady_clock::now();
    grpc::Status status = call();
    const auto end = std::chrono::steady_clock::now();
    if (!status.ok()) {
      std::cerr << "api_bench: " << what << ": " << vmmctl::StatusCodeName(status.error_code())
                << ": " << status.error_message() << "\n";
      return false;
    }
    out->push_back(std::chrono::duration<double, std::micro>(end - start).count());
  }
  return true;
}

int Latency(pb::MediaService::Stub& media, pb::VmService::Stub& vm, const std::string& drive,
            const std::string& iso, int calls, int pairs, const std::string& status_drive) {
  std::vector<double> us;
  auto get_status = [&] {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    pb::GetStatusRequest request;
    request.set_drive(status_drive);
    pb::DriveStatus response;
    return media.GetStatus(&context, request, &response);
  };
  auto list = [&] {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    pb::ListDrivesResponse response;
    return media.ListDrives(&context, pb::ListDrivesRequest(), &response);
  };
  auto stats = [&] {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    pb::GetStatsRequest request;
    request.set_drive(status_drive);
    pb::GetStatsResponse response;
    return vm.GetStats(&context, request, &response);
  };
  if (!Time("warm-up", 100, get_status, &us)) return 1;
  if (!Time("GetStatus", calls, get_status, &us)) return 1;
  Print("GetStatus", Summarize(us));
  if (!Time("ListDrives", calls, list, &us)) return 1;
  Print("ListDrives", Summarize(us));
  if (!Time("GetStats", calls, stats, &us)) return 1;
  Print("GetStats(drive)", Summarize(us));

  if (iso.empty() || pairs == 0) return 0;
  std::vector<double> insert_us, eject_us, pair_us;
  for (int i = 0; i < pairs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    grpc::ClientContext insert_context;
    insert_context.set_deadline(Deadline());
    pb::InsertRequest insert;
    insert.set_drive(drive);
    insert.set_path(iso);
    pb::DriveStatus status;
    grpc::Status result = media.Insert(&insert_context, insert, &status);
    const auto inserted = std::chrono::steady_clock::now();
    if (!result.ok()) {
      std::cerr << "api_bench: Insert(" << drive << ", " << iso
                << "): " << vmmctl::StatusCodeName(result.error_code()) << ": "
                << result.error_message() << "\n";
      return 1;
    }
    grpc::ClientContext eject_context;
    eject_context.set_deadline(Deadline());
    pb::EjectRequest eject;
    eject.set_drive(drive);
    eject.set_force(true);
    result = media.Eject(&eject_context, eject, &status);
    const auto ejected = std::chrono::steady_clock::now();
    if (!result.ok()) {
      std::cerr << "api_bench: Eject(" << drive
                << "): " << vmmctl::StatusCodeName(result.error_code()) << ": "
                << result.error_message() << "\n";
      return 1;
    }
    insert_us.push_back(std::chrono::duration<double, std::micro>(inserted - start).count());
    eject_us.push_back(std::chrono::duration<double, std::micro>(ejected - inserted).count());
    pair_us.push_back(std::chrono::duration<double, std::micro>(ejected - start).count());
  }
  Print("Insert", Summarize(insert_us));
  Print("Eject(force)", Summarize(eject_us));
  Print("Insert+Eject pair", Summarize(pair_us));
  return 0;
}

int Load(pb::MediaService::Stub& media, pb::VmService::Stub& vm, const std::string& drive,
         double seconds, int64_t interval_us) {
  const absl::Time start = absl::Now();
  const absl::Time end = seconds > 0 ? start + absl::Seconds(seconds) : absl::InfiniteFuture();
  uint64_t calls = 0, errors = 0;
  absl::Time next = start;
  while (!stop_requested && absl::Now() < end) {
    {
      grpc::ClientContext context;
      context.set_deadline(Deadline());
      pb::GetStatusRequest request;
      request.set_drive(drive);
      pb::DriveStatus response;
      errors += !media.GetStatus(&context, request, &response).ok();
    }
    {
      grpc::ClientContext context;
      context.set_deadline(Deadline());
      pb::GetStatsRequest request;
      request.set_drive(drive);
      pb::GetStatsResponse response;
      errors += !vm.GetStats(&context, request, &response).ok();
    }
    calls += 2;
    if (errors > 0 && errors == calls) break;  // the VMM went away
    if (interval_us > 0) {
      next += absl::Microseconds(interval_us);
      const absl::Duration wait = next - absl::Now();
      if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
    }
  }
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double cpu = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
                     (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  absl::PrintF(
      "api-bench: load calls=%d errors=%d seconds=%.2f calls_per_s=%.0f client_cpu_s=%.2f\n", calls,
      errors, elapsed, elapsed > 0 ? calls / elapsed : 0.0, cpu);
  fflush(stdout);
  return 0;
}

int Usage() {
  std::cerr << "usage: api_bench --api unix:PATH latency [--drive cd1] [--iso PATH] [--calls N] "
               "[--pairs N]\n"
               "                  [--status-drive cd0]\n"
               "       api_bench --api unix:PATH load [--drive cd0] [--seconds S] [--interval-us "
               "N] [--wait-s S]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string api, mode, drive, iso, status_drive = "cd0";
  int calls = 2000, pairs = 500;
  double seconds = 0, wait_s = 0;
  int64_t interval_us = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (arg == "--api") {
      if (!value(&api)) return Usage();
    } else if (arg == "--drive") {
      if (!value(&drive)) return Usage();
    } else if (arg == "--status-drive") {
      if (!value(&status_drive)) return Usage();
    } else if (arg == "--iso") {
      if (!value(&iso)) return Usage();
    } else if (arg == "--calls") {
      if (!value(&v) || !absl::SimpleAtoi(v, &calls)) return Usage();
    } else if (arg == "--pairs") {
      if (!value(&v) || !absl::SimpleAtoi(v, &pairs)) return Usage();
    } else if (arg == "--seconds") {
      if (!value(&v) || !absl::SimpleAtod(v, &seconds)) return Usage();
    } else if (arg == "--wait-s") {
      if (!value(&v) || !absl::SimpleAtod(v, &wait_s)) return Usage();
    } else if (arg == "--interval-us") {
      if (!value(&v) || !absl::SimpleAtoi(v, &interval_us)) return Usage();
    } else if (mode.empty() && (arg == "latency" || arg == "load")) {
      mode = arg;
    } else {
      return Usage();
    }
  }
  if (api.empty() || mode.empty()) return Usage();
  if (drive.empty()) drive = mode == "latency" ? "cd1" : "cd0";
  signal(SIGINT, OnStop);
  signal(SIGTERM, OnStop);

  auto address = vmmctl::ParseApiAddress(api);
  if (!address.ok()) {
    std::cerr << "api_bench: " << address.status().message() << "\n";
    return 2;
  }
  // The load is started before the VMM: wait for its socket.
  const absl::Time wait_until = absl::Now() + absl::Seconds(wait_s);
  struct stat st;
  while (address->is_unix && stat(address->path.c_str(), &st) != 0 && absl::Now() < wait_until &&
         !stop_requested) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  auto channel = vmmctl::Connect(*address, absl::Seconds(10));
  if (!channel.ok()) {
    std::cerr << "api_bench: " << channel.status().message() << "\n";
    return 3;
  }
  auto media = pb::MediaService::NewStub(*channel);
  auto vm = pb::VmService::NewStub(*channel);
  if (mode == "latency") return Latency(*media, *vm, drive, iso, calls, pairs, status_drive);
  return Load(*media, *vm, drive, seconds, interval_us);
}
