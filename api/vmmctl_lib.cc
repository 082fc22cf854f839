#include "api/vmmctl_lib.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "api/api_token.h"
#include "api/vmmctl_runner.h"
#include "google/protobuf/util/json_util.h"
#include "vmm/sys_util/version.h"

namespace vmmctl {

using internal::CommandSpec;
using internal::Runner;

namespace {

using vmm::v1::DriveStatus;

// ---- Watch cancellation (SIGINT/SIGTERM in vmmctl's main) ----

absl::Mutex watch_mutex;
grpc::ClientContext* active_watch ABSL_GUARDED_BY(watch_mutex) = nullptr;
bool watch_cancelled ABSL_GUARDED_BY(watch_mutex) = false;

// ---- Commands ----

const std::vector<CommandSpec>& Commands() {
  static const auto* commands = new std::vector<CommandSpec>{
      {{"media", "list"}, 0, 0, {}, "media list"},
      {{"media", "status"}, 1, 1, {}, "media status DRIVE"},
      {{"media", "insert"},
       2,
       2,
       {"force", "format", "read-only"},
       "media insert DRIVE PATH [--force] [--format raw]"},
      {{"media", "eject"}, 1, 1, {"force", "wait"}, "media eject DRIVE [--force | --wait]"},
      {{"media", "tray"}, 2, 2, {"force"}, "media tray DRIVE open|close [--force]"},
      {{"media", "watch"}, 0, 1, {"count"}, "media watch [DRIVE] [--count N]"},
      {{"vm", "info"}, 0, 0, {}, "vm info"},
      {{"vm", "pause"}, 0, 0, {}, "vm pause"},
      {{"vm", "resume"}, 0, 0, {}, "vm resume"},
      {{"vm", "reset"}, 0, 0, {}, "vm reset"},
      {{"vm", "boot-order"}, 0, 64, {}, "vm boot-order [DRIVE...]"},
      {{"vm", "shutdown"}, 0, 0, {"force", "grace-ms"}, "vm shutdown [--force] [--grace-ms N]"},
      {{"vm", "stats"}, 0, 1, {}, "vm stats [DRIVE]"},
      {{"drive", "limit"},
       1,
       1,
       {"iops", "bps", "burst", "group"},
       "drive limit DRIVE|GROUP [--iops N] [--bps N[K|M|G]] [--burst SECONDS] [--group]"},
      {{"disk", "add"},
       1,
       1,
       {"id", "cache", "fua", "read-only", "lun", "iops", "bps", "burst", "io-group"},
       "disk add PATH [--id NAME] [--cache MODE] [--fua native|emulate|auto] [--read-only] [--lun "
       "N]\n"
       "           [--iops N] [--bps N[K|M|G]] [--burst SECONDS] [--io-group NAME]"},
      {{"disk", "remove"}, 1, 1, {}, "disk remove DRIVE"},
      {{"disk", "resize"}, 1, 2, {}, "disk resize DRIVE [SIZE[K|M|G]]"},
  };
  return *commands;
}

// Options that take a value; every other known option is a switch.
const std::set<std::string>& ValueOptions() {
  static const auto* names = new std::set<std::string>{
      "api", "api-token-file", "timeout", "connect-timeout", "grace-ms", "count", "format",  "iops",
      "bps", "burst",          "id",      "cache",           "fua",      "lun",   "io-group"};
  return *names;
}
const std::set<std::string>& SwitchOptions() {
  static const auto* names =
      new std::set<std::string>{"json", "force", "read-only", "help", "wait", "version", "group"};
  return *names;
}

// The server refused an eject of a locked drive and asked the guest to let go (block/media.h).

}  // namespace

namespace internal {

int Runner::Execute(const CommandSpec& spec, const std::vector<std::string>& args) {
  what_ = absl::StrJoin(spec.words, " ");
  force_allowed_ = spec.options.count("force") != 0;
  if (!args.empty()) absl::StrAppend(&what_, " ", args[0]);
  // Check what can be checked before connecting.
  uint64_t number = 0;
  if (Has("grace-ms") &&
      (!absl::SimpleAtoi(cl_.options.at("grace-ms"), &number) || number > 0xffffffffu)) {
    return UsageError("--grace-ms=" + cl_.options.at("grace-ms") +
                      ": expected a number of milliseconds");
  }
  if (Has("count") && (!absl::SimpleAtoi(cl_.options.at("count"), &number) || number == 0)) {
    return UsageError("--count=" + cl_.options.at("count") + ": expected a positive number");
  }
  if (spec.words[1] == "tray" && args[1] != "open" && args[1] != "close") {
    return UsageError("media tray: expected open or close, got \"" + args[1] + "\"");
  }
  for (size_t i = 0; i < args.size(); ++i) {
    // A drive name is never empty; an empty path is the server's to refuse (INVALID_ARGUMENT).
    if (i == 0 && args[0].empty()) return UsageError(what_ + ": empty drive name");
  }

  if (cl_.api.empty())
    return UsageError("no API address: give --api unix:PATH or HOST:PORT (or set VMMCTL_API)");
  auto address = ParseApiAddress(cl_.api);
  if (!address.ok()) return UsageError(std::string(address.status().message()));
  if (!cl_.token_file.empty()) {
    auto token =
        api::ReadApiTokenFile(cl_.token_file, "--api-token-file", api::TokenFileCheck::kReadable);
    if (!token.ok()) {
      // "--api-token-file FILE: ..." as the other flags read: "--api-token-file=FILE: ...".
      std::string message(token.status().message());
      if (absl::StartsWith(message, "--api-token-file ")) message[16] = '=';
      return UsageError(message);
    }
    token_ = *std::move(token);
  }
  auto channel = Connect(*address, cl_.connect_timeout);
  if (!channel.ok()) {
    err_ << "vmmctl: " << channel.status().message() << "\n";
    return kExitCannotConnect;
  }
  media_ = vmm::v1::MediaService::NewStub(*channel);
  vm_ = vmm::v1::VmService::NewStub(*channel);

  const std::string& noun = spec.words[0];
  const std::string& verb = spec.words[1];
  const std::string arg0 = args.size() > 0 ? args[0] : "";
  if (noun == "media") {
    if (verb == "list") return MediaList();
    if (verb == "status") return MediaStatus(arg0);
    if (verb == "insert") return MediaInsert(arg0, args[1]);
    if (verb == "eject") return MediaEject(arg0);
    if (verb == "tray") return MediaTray(arg0, args[1]);
    if (verb == "watch") return MediaWatch(arg0);
  } else if (noun == "drive") {
    if (verb == "limit") return DriveLimit(arg0);
  } else if (noun == "disk") {
    if (verb == "add") return DiskAdd(arg0);
    if (verb == "remove") return DiskRemove(arg0);
    if (verb == "resize") return DiskResize(arg0, args.size() > 1 ? args[1] : "");
  } else {
    if (verb == "info") return VmInfo();
    if (verb == "pause") return VmPauseResume(true);
    if (verb == "resume") return VmPauseResume(false);
    if (verb == "reset") return VmReset();
    if (verb == "boot-order") return VmBootOrder(args);
    if (verb == "shutdown") return VmShutdown();
    if (verb == "stats") return VmStats(arg0);
  }
  return UsageError("unknown command " + what_);
}

int Runner::MediaList() {
  grpc::ClientContext context;
  Context(context);
  vmm::v1::ListDrivesResponse response;
  grpc::Status status = media_->ListDrives(&context, vmm::v1::ListDrivesRequest(), &response);
  if (!status.ok()) return RpcError(status);
  return Print(response, response.drives().empty() ? "no drives\n" : DriveTable(response.drives()));
}

int Runner::MediaStatus(const std::string& drive) {
  grpc::ClientContext context;
  Context(context);
  vmm::v1::GetStatusRequest request;
  request.set_drive(drive);
  DriveStatus response;
  grpc::Status status = media_->GetStatus(&context, request, &response);
  if (!status.ok()) return RpcError(status);
  return Print(response, DriveDetails(response));
}

int Runner::ServerPath(const std::string& path, std::string* out) {
  // The VMM opens the path itself, possibly from another working directory: a relative path is
  // sent absolute, unless the VMM takes files from its --media-dir only, where a relative path
  // is relative to that directory ("media insert cd0 disc2.iso").
  *out = path;
  if (path.empty() || path[0] == '/') return kExitOk;
  grpc::ClientContext context;
  Context(context);
  vmm::v1::VmInfo info;
  grpc::Status status = vm_->GetInfo(&context, vmm::v1::GetInfoRequest(), &info);
  if (!status.ok()) return RpcError(status);
  std::error_code ec;
  auto p = std::filesystem::absolute(path, ec);
  if (info.media_dir().empty() && !ec) *out = p.lexically_normal().string();
  return kExitOk;
}

int Runner::MediaInsert(const std::string& drive, const std::string& path) {
  std::string absolute;
  if (int failed = ServerPath(path, &absolute); failed != kExitOk) return failed;
  if (Has("force")) {
    // --force: take out whatever is in the drive first (ignoring the guest's lock).
    grpc::ClientContext context;
    Context(context);
    vmm::v1::GetStatusRequest get;
    get.set_drive(drive);
    DriveStatus now;
    grpc::Status status = media_->GetStatus(&context, get, &now);
    if (!status.ok()) return RpcError(status);
    if (now.medium_present() && now.removable()) {
      grpc::ClientContext eject_context;
      Context(eject_context);
      vmm::v1::EjectRequest eject;
      eject.set_drive(drive);
      eject.set_force(true);
      status = media_->Eject(&eject_context, eject, &now);
      if (!status.ok()) return RpcError(status);
    }
  }
  grpc::ClientContext context;
  Context(context);
  vmm::v1::InsertRequest request;
  request.set_drive(drive);
  request.set_path(absolute);
  request.set_read_only(Has("read-only"));
  if (Has("format")) request.set_format(cl_.options.at("format"));
  DriveStatus response;
  grpc::Status status = media_->Insert(&context, request, &response);
  if (!status.ok()) return RpcError(status);
  return Print(response, DriveLine(response) + "\n");
}

int Runner::MediaEject(const std::string& drive) {
  if (Has("force") && Has("wait"))
    return UsageError(what_ + ": --force and --wait exclude each other");
  auto eject = [&](DriveStatus* response) {
    grpc::ClientContext context;
    Context(context);
    vmm::v1::EjectRequest request;
    request.set_drive(drive);
    request.set_force(Has("force"));
    return media_->Eject(&context, request, response);
  };
  DriveStatus response;
  if (!Has("wait")) {
    grpc::Status status = eject(&response);
    if (!status.ok()) return RpcError(status);
    return Print(response, DriveLine(response) + "\n");
  }
  // --wait: a drive the guest has locked is not ejected; the server asks the guest instead (an MMC
  // eject request) and the guest, if it agrees, unlocks and opens the tray itself. Watch the drive
  // from before the request, so that tray opening cannot be missed, then eject again.
  grpc::ClientContext watch_context;
  watch_context.set_deadline(DeadlineAfter(cl_.timeout));
  Authorize(watch_context);
  vmm::v1::WatchRequest watch_request;
  watch_request.set_drive(drive);
  auto reader = media_->Watch(&watch_context, watch_request);
  reader->WaitForInitialMetadata();
  auto end_watch = [&] {
    watch_context.TryCancel();
    vmm::v1::MediaEvent rest;
    while (reader->Read(&rest)) {
    }
    return reader->Finish();
  };
  grpc::Status status = eject(&response);
  if (!AskedTheGuestToEject(status)) {
    end_watch();
    if (!status.ok()) return RpcError(status);
    return Print(response, DriveLine(response) + "\n");
  }
  err_ << "vmmctl: " << drive
       << ": the guest has locked the drive and was asked to eject; waiting up to "
       << absl::FormatDuration(cl_.timeout) << " for it to open the tray\n";
  err_.flush();
  bool opened = false;
  bool stream_ended = false;
  vmm::v1::MediaEvent event;
  while (!opened && !stream_ended) {
    stream_ended = !reader->Read(&event);
    opened = !stream_ended && (event.type() == vmm::v1::MediaEvent::TRAY_OPENED ||
                               event.type() == vmm::v1::MediaEvent::MEDIUM_REMOVED);
  }
  // An ended stream says why (its deadline: DEADLINE_EXCEEDED); otherwise it is ours to end.
  const grpc::Status watch_status = stream_ended ? reader->Finish() : end_watch();
  if (!opened) {
    if (watch_status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED && !watch_status.ok()) {
      return RpcError(watch_status);
    }
    return RpcError(grpc::Status(
        grpc::StatusCode::DEADLINE_EXCEEDED,
        absl::StrCat(drive, ": the guest did not open the tray within ",
                     absl::FormatDuration(cl_.timeout),
                     " (--timeout waits longer; --force ejects without its consent)")));
  }
  status = eject(&response);
  if (!status.ok()) return RpcError(status);
  return Print(response, DriveLine(response) + "\n");
}

int Runner::MediaTray(const std::string& drive, const std::string& position) {
  grpc::ClientContext context;
  Context(context);
  vmm::v1::SetTrayRequest request;
  request.set_drive(drive);
  request.set_open(position == "open");
  request.set_force(Has("force"));
  DriveStatus response;
  grpc::Status status = media_->SetTray(&context, request, &response);
  if (!status.ok()) return RpcError(status);
  return Print(response, DriveLine(response) + "\n");
}

int Runner::MediaWatch(const std::string& drive) {
  uint64_t limit = 0;
  if (Has("count")) (void)absl::SimpleAtoi(cl_.options.at("count"), &limit);
  grpc::ClientContext context;  // no deadline: a watch lasts until interrupted
  Authorize(context);
  vmm::v1::WatchRequest request;
  request.set_drive(drive);
  {
    absl::MutexLock lock(&watch_mutex);
    if (watch_cancelled) return kExitOk;
    active_watch = &context;
  }
  auto reader = media_->Watch(&context, request);
  // The server sends its initial metadata once the stream is subscribed: from then on no change is
  // missed. (A server that does not send it early: this returns with the first event.)
  reader->WaitForInitialMetadata();
  err_ << "vmmctl: watching " << (drive.empty() ? "every drive" : drive) << " on " << cl_.api
       << " (one line per event; Ctrl-C ends)\n";
  err_.flush();
  vmm::v1::MediaEvent event;
  uint64_t seen = 0;
  while (reader->Read(&event)) {
    if (cl_.json) {
      out_ << ToJson(event, /*pretty=*/false) << "\n";
    } else {
      out_ << EventLine(event) << "\n";
    }
    out_.flush();
    if (limit != 0 && ++seen >= limit) {
      context.TryCancel();
      break;
    }
  }
  grpc::Status status = reader->Finish();
  bool cancelled_by_us;
  {
    absl::MutexLock lock(&watch_mutex);
    active_watch = nullptr;
    cancelled_by_us = watch_cancelled;
  }
  if (limit != 0 && seen >= limit) return kExitOk;
  if (status.error_code() == grpc::StatusCode::CANCELLED && cancelled_by_us) return kExitOk;
  if (status.ok()) {
    err_ << "vmmctl: the server ended the watch\n";
    return kExitOk;
  }
  return RpcError(status);
}

int Runner::VmInfo() {
  grpc::ClientContext context;
  Context(context);
  vmm::v1::VmInfo response;
  grpc::Status status = vm_->GetInfo(&context, vmm::v1::GetInfoRequest(), &response);
  if (!status.ok()) return RpcError(status);
  return Print(response, VmInfoText(response));
}

int Runner::VmPauseResume(bool pause) {
  grpc::ClientContext context;
  Context(context);
  vmm::v1::VmInfo response;
  grpc::Status status = pause ? vm_->Pause(&context, vmm::v1::PauseRequest(), &response)
                              : vm_->Resume(&context, vmm::v1::ResumeRequest(), &response);
  if (!status.ok()) return RpcError(status);
  return Print(response,
               absl::StrCat("state: ", vmm::v1::VmInfo::State_Name(response.state()), "\n"));
}

int Runner::VmReset() {
  grpc::ClientContext context;
  Context(context);
  vmm::v1::VmInfo response;
  grpc::Status status = vm_->Reset(&context, vmm::v1::ResetRequest(), &response);
  if (!status.ok()) return RpcError(status);
  return Print(response, "reset: the guest restarts\n");
}

int Runner::VmBootOrder(const std::vector<std::string>& drives) {
  grpc::ClientContext context;
  Context(context);
  vmm::v1::SetBootOrderRequest request;
  for (const std::string& drive : drives) request.add_drives(drive);
  vmm::v1::VmInfo response;
  grpc::Status status = vm_->SetBootOrder(&context, request, &response);
  if (!status.ok()) return RpcError(status);
  return Print(response,
               response.boot_order().empty()
                   ? std::string("boot order: the firmware's own, from the next reset\n")
                   : absl::StrCat("boot order: ", absl::StrJoin(response.boot_order(), ", "),
                                  " first, from the next reset\n"));
}

int Runner::VmShutdown() {
  vmm::v1::ShutdownRequest request;
  request.set_force(Has("force"));
  uint64_t grace = 0;
  if (Has("grace-ms")) (void)absl::SimpleAtoi(cl_.options.at("grace-ms"), &grace);
  request.set_grace_period_ms(static_cast<uint32_t>(grace));
  grpc::ClientContext context;
  // The VMM may wait for the guest up to the grace period (default 5 s) before it answers.
  Context(context, absl::Milliseconds(grace == 0 ? 5000 : grace));
  vmm::v1::VmInfo response;
  grpc::Status status = vm_->Shutdown(&context, request, &response);
  if (!status.ok()) {
    // The VMM exits right after a shutdown: a connection that drops before the answer is success.
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      if (cl_.json) {
        vmm::v1::VmInfo stopping;
        stopping.set_state(vmm::v1::VmInfo::STOPPING);
        return Print(stopping, "");
      }
      out_ << "state: STOPPING (the VMM closed the connection)\n";
      return kExitOk;
    }
    return RpcError(status);
  }
  return Print(response,
               absl::StrCat("state: ", vmm::v1::VmInfo::State_Name(response.state()), "\n"));
}

}  // namespace internal

namespace {

bool ParseSeconds(const std::string& text, absl::Duration* out) {
  double seconds = 0;
  if (!absl::SimpleAtod(text, &seconds) || !(seconds > 0) || seconds > 1e6) return false;
  *out = absl::Seconds(seconds);
  return true;
}

}  // namespace

absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args) {
  CommandLine cl;
  if (const char* env = getenv("VMMCTL_API"); env != nullptr) cl.api = env;
  if (const char* env = getenv("MICROVM_API_TOKEN_FILE"); env != nullptr) cl.token_file = env;
  bool options_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (options_done || arg.size() < 2 || arg[0] != '-' || arg == "-") {
      cl.words.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    if (arg == "-h") {
      cl.help = true;
      continue;
    }
    if (arg[1] != '-') return absl::InvalidArgumentError("unknown option " + arg);
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    std::replace(name.begin(), name.end(), '_', '-');
    if (ValueOptions().count(name)) {
      if (!value) {
        if (i + 1 >= args.size()) return absl::InvalidArgumentError("--" + name + " needs a value");
        value = args[++i];
      }
    } else if (SwitchOptions().count(name)) {
      if (value) return absl::InvalidArgumentError("--" + name + " takes no value");
      value = "";
    } else {
      return absl::InvalidArgumentError("unknown option --" + name);
    }
    if (name == "api") {
      cl.api = *value;
    } else if (name == "api-token-file") {
      cl.token_file = *value;
    } else if (name == "json") {
      cl.json = true;
    } else if (name == "help") {
      cl.help = true;
    } else if (name == "version") {
      cl.version = true;
    } else if (name == "timeout") {
      if (!ParseSeconds(*value, &cl.timeout)) {
        return absl::InvalidArgumentError("--timeout=" + *value +
                                          ": expected seconds > 0 (at most 1000000)");
      }
    } else if (name == "connect-timeout") {
      if (!ParseSeconds(*value, &cl.connect_timeout)) {
        return absl::InvalidArgumentError("--connect-timeout=" + *value +
                                          ": expected seconds > 0 (at most 1000000)");
      }
    } else {
      cl.options[name] = *value;
    }
  }
  return cl;
}

std::string UsageText() {
  std::string text =
      "usage: vmmctl --api unix:PATH|HOST:PORT [--api-token-file FILE] [--json] [--timeout "
      "SECONDS]\n"
      "              COMMAND [ARGS]\n"
      "\n"
      "Talks to a microvm's control API (started with --api-socket PATH or --api-tcp HOST:PORT).\n"
      "\n"
      "commands:\n";
  for (const CommandSpec& spec : Commands()) absl::StrAppend(&text, "  ", spec.synopsis, "\n");
  absl::StrAppend(
      &text,
      "\n"
      "options:\n"
      "  --api ADDR             unix:PATH, a path (vm.sock, /run/vm.sock), or HOST:PORT\n"
      "                         (default: $VMMCTL_API)\n"
      "  --api-token-file FILE  send the token in FILE with every call, for a VMM started with\n"
      "                         --api-token-file (default: $MICROVM_API_TOKEN_FILE)\n"
      "  --json                 print the reply as protobuf JSON (media watch: one object per "
      "line)\n"
      "  --timeout S            deadline of every call, seconds (default 10)\n"
      "  --connect-timeout S    how long to wait for the connection (default 5)\n"
      "  --force                eject/open the tray although the guest locked it; insert: eject "
      "first\n"
      "  --wait                 media eject: if the guest locked the drive, wait (up to --timeout) "
      "for\n"
      "                         it to agree to the eject request, then eject\n"
      "  --grace-ms N           vm shutdown: how long the guest gets before it is stopped\n"
      "  --count N              media watch: exit after N events\n"
      "\n"
      "exit status: 0 ok, 1 the server refused or failed (the gRPC code and message go to "
      "stderr),\n"
      "2 usage, 3 cannot connect.\n");
  return text;
}

int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  auto cl = ParseCommandLine(args);
  if (!cl.ok()) {
    err << "vmmctl: " << cl.status().message() << "\n(vmmctl --help for usage)\n";
    return kExitUsage;
  }
  if (cl->version) {
    out << sys_util::VersionText("vmmctl");
    return kExitOk;
  }
  if (cl->help || (cl->words.size() == 1 && cl->words[0] == "help")) {
    out << UsageText();
    return kExitOk;
  }
  if (cl->words.size() < 2) {
    err << "vmmctl: " << (cl->words.empty() ? "no command" : "incomplete command: " + cl->words[0])
        << "\n"
        << UsageText();
    return kExitUsage;
  }
  const CommandSpec* spec = nullptr;
  for (const CommandSpec& candidate : Commands()) {
    if (candidate.words[0] == cl->words[0] && candidate.words[1] == cl->words[1]) spec = &candidate;
  }
  if (spec == nullptr) {
    err << "vmmctl: unknown command \"" << cl->words[0] << " " << cl->words[1] << "\"\n"
        << UsageText();
    return kExitUsage;
  }
  std::vector<std::string> positional(cl->words.begin() + 2, cl->words.end());
  if (positional.size() < spec->min_args || positional.size() > spec->max_args) {
    err << "vmmctl: usage: vmmctl " << spec->synopsis << "\n";
    return kExitUsage;
  }
  for (const auto& [name, value] : cl->options) {
    if (!spec->options.count(name)) {
      err << "vmmctl: " << spec->words[0] << " " << spec->words[1] << " takes no --" << name << "\n"
          << "usage: vmmctl " << spec->synopsis << "\n";
      return kExitUsage;
    }
  }
  Runner runner(*cl, out, err);
  return runner.Execute(*spec, positional);
}

void CancelWatch() {
  absl::MutexLock lock(&watch_mutex);
  watch_cancelled = true;
  if (active_watch != nullptr) active_watch->TryCancel();
}

void ResetWatchCancellationForTesting() {
  absl::MutexLock lock(&watch_mutex);
  watch_cancelled = false;
}

}  // namespace vmmctl
