// The API server against a fake VmControl (real block-layer drives and media), over a real unix
// socket, with real gRPC stubs.
#include "api/api_server.h"

#include <fcntl.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/sync_stream.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/vm_control.h"
#include "block/drive.h"
#include "block/media.h"
#include "block/memory_backend.h"
#include "block/raw/raw_file_backend.h"
#include "gtest/gtest.h"
#include "proto/vmm/v1/vmm.grpc.pb.h"
#include "vmm/sys_util/status_macros.h"

namespace api {
namespace {

namespace pb = ::vmm::v1;
using grpc::StatusCode;

// A VM with three drives: cd0 (virtio-scsi, holding a 1 MiB medium), cd1 (IDE secondary master,
// empty) and disk0 (virtio-scsi LUN 2, 4 MiB). Media open as the VMM opens them (a read-only raw
// file); paths listed in `denied` fail with PermissionDenied (the tests run as root, for whom
// file permissions do not).
class FakeVm : public VmControl {
 public:
  FakeVm() {
    cd0_media = std::make_shared<block::RemovableMedia>(
        std::make_shared<block::MemoryBackend>(block::MemoryBackendOptions{.size_bytes = 1 << 20}),
        "/images/initial.iso");
    cd0 = *block::Drive::CreateRemovable({.read_only = true, .name = "cd0"}, cd0_media);
    cd1_media = std::make_shared<block::RemovableMedia>();
    cd1 = *block::Drive::CreateRemovable({.read_only = true, .name = "cd1"}, cd1_media);
    disk0_backend =
        std::make_shared<block::MemoryBackend>(block::MemoryBackendOptions{.size_bytes = 4 << 20});
    disk0 = *block::Drive::CreateFixed({.name = "disk0"}, disk0_backend);
  }

  std::vector<DriveEntry> Drives() const override {
    return {
        {.name = "cd0",
         .cdrom = true,
         .bus = "virtio-scsi",
         .address = "0:0:0",
         .drive = cd0,
         .media = cd0_media},
        {.name = "cd1",
         .cdrom = true,
         .bus = "ide",
         .address = "1:0",
         .drive = cd1,
         .media = cd1_media},
        {.name = "disk0",
         .cdrom = false,
         .bus = "virtio-scsi",
         .address = "0:0:1",
         .source = "/images/disk0.img",
         .read_only = false,
         .cache_mode = "writeback",
         .drive = disk0},
    };
  }

  absl::StatusOr<std::shared_ptr<block::BlockBackend>> OpenMedium(
      const std::string& path) override {
    opens.fetch_add(1);
    {
      absl::MutexLock lock(&mutex);
      if (denied.count(path)) return absl::PermissionDeniedError(path + ": permission denied");
      // As vmm::MediaDirectory: one answer for everything outside, existing or not.
      if (!media_dir.empty() && path.rfind(media_dir + "/", 0) != 0) {
        return absl::PermissionDeniedError(path + ": outside the directory media may come from");
      }
    }
    ASSIGN_OR_RETURN(auto backend, block::raw::RawFileBackend::Open(path, {.read_only = true}));
    return std::shared_ptr<block::BlockBackend>(std::move(backend));
  }

  bool MediaPathsConfined() const override {
    absl::MutexLock lock(&mutex);
    return !media_dir.empty();
  }

  std::map<std::string, std::shared_ptr<block::Throttle>> IoGroups() const override {
    return {{"tenant", tenant}};
  }
  std::shared_ptr<block::Throttle> tenant =
      std::make_shared<block::Throttle>("tenant", block::IoLimits{.iops = 100});

  VmStatus Status() const override {
    absl::MutexLock lock(&mutex);
    errno = 0;
    status_thread_nice = getpriority(PRIO_PROCESS, static_cast<int>(syscall(SYS_gettid)));
    VmStatus status;
    status.state = stopping ? VmRunState::kStopping
                   : paused ? VmRunState::kPaused
                            : VmRunState::kRunning;
    status.vcpus = 2;
    status.memory_bytes = 256 << 20;
    status.kernel = "/boot/guest.elf";
    status.cmdline = "test=api";
    status.uptime = absl::Seconds(3);
    status.boot_order = boot_order;
    status.pid = 4242;
    return status;
  }

  // As vmm::VmApiControl over Storage: the image opened read-write (its lock taken), a name and
  // a LUN chosen, both refused when taken.
  absl::StatusOr<std::shared_ptr<block::raw::RawFileBackend>> OpenDiskImage(
      const DiskAttachment& disk) override {
    return block::raw::RawFileBackend::Open(disk.path, {});
  }
  absl::StatusOr<DriveEntry> AttachDisk(
      const DiskAttachment& disk, std::shared_ptr<block::raw::RawFileBackend> image) override {
    absl::MutexLock lock(&mutex);
    attachments.push_back(disk);
    const std::string name = disk.id.empty() ? "disk1" : disk.id;
    if (name == "disk0" || attached.count(name) != 0) {
      return absl::AlreadyExistsError("the drive name " + name + " is taken");
    }
    if (disk.lun == 1) return absl::AlreadyExistsError("LUN 1 is taken");
    ASSIGN_OR_RETURN(std::shared_ptr<block::Drive> drive,
                     block::Drive::CreateFixed({.name = name}, std::move(image)));
    DriveEntry entry{.name = name,
                     .cdrom = false,
                     .bus = "virtio-scsi",
                     .address = absl::StrCat("0:0:", disk.lun.value_or(2)),
                     .source = disk.path,
                     .read_only = disk.read_only,
                     .cache_mode = "writeback",
                     .drive = drive};
    attached[name] = drive;
    return entry;
  }
  absl::Status DetachDisk(const std::string& name) override {
    absl::MutexLock lock(&mutex);
    if (name == "cd0" || name == "cd1") {
      return absl::FailedPreconditionError(name + " is a CD-ROM drive: eject its medium instead");
    }
    if (name == "disk0") {
      disk0.reset();
      return absl::OkStatus();
    }
    auto found = attached.find(name);
    if (found == attached.end()) return absl::NotFoundError("no drive named " + name);
    attached.erase(found);
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> ResizeDisk(const std::string& name,
                                      std::optional<uint64_t> size_bytes) override {
    absl::MutexLock lock(&mutex);
    if (name != "disk0") return absl::FailedPreconditionError(name + " is a CD-ROM drive");
    resizes.push_back(size_bytes);
    return size_bytes.value_or(4 << 20);
  }

  absl::Status Pause() override {
    absl::MutexLock lock(&mutex);
    if (stopping) return absl::FailedPreconditionError("the VM is stopping");
    paused = true;
    ++pause_calls;
    return absl::OkStatus();
  }

  absl::Status Resume() override {
    absl::MutexLock lock(&mutex);
    if (stopping) return absl::FailedPreconditionError("the VM is stopping");
    paused = false;
    return absl::OkStatus();
  }

  absl::Status SetBootOrder(const std::vector<std::string>& drives) override {
    absl::MutexLock lock(&mutex);
    if (!drives.empty() && drives[0] == "nosuch")
      return absl::InvalidArgumentError("no drive named nosuch");
    boot_order = drives;
    return absl::OkStatus();
  }

  absl::Status Reset() override {
    absl::MutexLock lock(&mutex);
    if (stopping) return absl::FailedPreconditionError("the VM is stopping");
    ++reset_calls;
    return absl::OkStatus();
  }

  absl::Status Shutdown(bool force, absl::Duration grace_period) override {
    absl::MutexLock lock(&mutex);
    stopping = true;
    shutdowns.push_back({force, grace_period});
    return absl::OkStatus();
  }

  std::shared_ptr<block::RemovableMedia> cd0_media, cd1_media;
  std::shared_ptr<block::Drive> cd0, cd1, disk0;
  std::shared_ptr<block::MemoryBackend> disk0_backend;
  std::atomic<int> opens{0};

  // The nice value of the thread that last served Status().
  mutable int status_thread_nice ABSL_GUARDED_BY(mutex) = 0;
  mutable absl::Mutex mutex;
  std::set<std::string> denied ABSL_GUARDED_BY(mutex);
  std::string media_dir ABSL_GUARDED_BY(mutex);  // non-empty: media confined to it
  bool paused ABSL_GUARDED_BY(mutex) = false;
  bool stopping ABSL_GUARDED_BY(mutex) = false;
  int pause_calls ABSL_GUARDED_BY(mutex) = 0;
  int reset_calls ABSL_GUARDED_BY(mutex) = 0;
  std::vector<std::string> boot_order ABSL_GUARDED_BY(mutex);
  std::vector<std::pair<bool, absl::Duration>> shutdowns ABSL_GUARDED_BY(mutex);
  std::vector<DiskAttachment> attachments ABSL_GUARDED_BY(mutex);
  std::vector<std::optional<uint64_t>> resizes ABSL_GUARDED_BY(mutex);
  std::map<std::string, std::shared_ptr<block::Drive>> attached ABSL_GUARDED_BY(mutex);
};

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The launchers' umask (vmm/command_line.h): the server binds its socket under it.
    umask(0177);
    // Under /tmp: the sandbox's TEST_TMPDIR is too long for a unix socket path.
    char name[] = "/tmp/api_test.XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    dir_ = name;
    socket_path_ = dir_ + "/api.sock";
    iso_ = WriteFile("disc.iso", 2 << 20);
    iso2_ = WriteFile("other.iso", 64 << 10);
  }

  void TearDown() override {
    server_.reset();
    std::system(("rm -rf " + dir_).c_str());
  }

  std::string WriteFile(const std::string& name, size_t size) {
    const std::string path = dir_ + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out << std::string(size, 'c');
    return path;
  }

  void StartServer(ApiServerOptions options = {}) {
    if (options.unix_socket_path.empty() && options.tcp_address.empty()) {
      options.unix_socket_path = socket_path_;
    }
    auto server = ApiServer::Start(options, vm_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel("unix:" + socket_path_, grpc::InsecureChannelCredentials());
    media_ = pb::MediaService::NewStub(channel_);
    vm_service_ = pb::VmService::NewStub(channel_);
  }

  static void Deadline(grpc::ClientContext& context, absl::Duration timeout = absl::Seconds(10)) {
    context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  }

  grpc::Status Status(const std::string& drive, pb::DriveStatus* out) {
    grpc::ClientContext context;
    Deadline(context);
    pb::GetStatusRequest request;
    request.set_drive(drive);
    return media_->GetStatus(&context, request, out);
  }
  grpc::Status Insert(const std::string& drive, const std::string& path, pb::DriveStatus* out,
                      const std::string& format = "") {
    grpc::ClientContext context;
    Deadline(context);
    pb::InsertRequest request;
    request.set_drive(drive);
    request.set_path(path);
    request.set_format(format);
    return media_->Insert(&context, request, out);
  }
  grpc::Status Eject(const std::string& drive, bool force, pb::DriveStatus* out) {
    grpc::ClientContext context;
    Deadline(context);
    pb::EjectRequest request;
    request.set_drive(drive);
    request.set_force(force);
    return media_->Eject(&context, request, out);
  }
  grpc::Status SetTray(const std::string& drive, bool open, bool force, pb::DriveStatus* out) {
    grpc::ClientContext context;
    Deadline(context);
    pb::SetTrayRequest request;
    request.set_drive(drive);
    request.set_open(open);
    request.set_force(force);
    return media_->SetTray(&context, request, out);
  }
  template <typename Call, typename Request>
  grpc::Status Vm(Call call, const Request& request, pb::VmInfo* out) {
    grpc::ClientContext context;
    Deadline(context);
    return (vm_service_.get()->*call)(&context, request, out);
  }

  std::string dir_;
  std::string socket_path_;
  std::string iso_;
  std::string iso2_;
  FakeVm vm_;
  std::unique_ptr<ApiServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::MediaService::Stub> media_;
  std::unique_ptr<pb::VmService::Stub> vm_service_;
};

// ---- Listening ----

TEST_F(ApiServerTest, SocketIsMode0600AndRemovedOnStop) {
  StartServer();
  struct stat st {};
  ASSERT_EQ(lstat(socket_path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, getuid());
  EXPECT_EQ(server_->unix_socket_path(), socket_path_);
  server_->Stop();
  EXPECT_NE(lstat(socket_path_.c_str(), &st), 0) << "the socket outlived the server";
  server_->Stop();  // idempotent
}

TEST_F(ApiServerTest, RefusesARegularFileAtTheSocketPath) {
  std::ofstream(socket_path_) << "not a socket";
  auto server = ApiServer::Start({.unix_socket_path = socket_path_}, vm_);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(server.status().message().find(socket_path_), std::string::npos) << server.status();
  std::ifstream in(socket_path_);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "not a socket");
}

TEST_F(ApiServerTest, RefusesALiveSocketAndKeepsItWorking) {
  StartServer();
  auto second = ApiServer::Start({.unix_socket_path = socket_path_}, vm_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(second.status().message().find(socket_path_), std::string::npos);
  pb::DriveStatus status;
  EXPECT_TRUE(Status("cd0", &status).ok()) << "the first server lost its socket";
}

TEST_F(ApiServerTest, ReusesAStaleSocket) {
  {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    strncpy(address.sun_path, socket_path_.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(listen(fd, 1), 0);
    close(fd);  // a VMM that died: the socket file stays, nobody listens
  }
  StartServer();
  pb::DriveStatus status;
  EXPECT_TRUE(Status("cd0", &status).ok());
  struct stat st {};
  ASSERT_EQ(lstat(socket_path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST_F(ApiServerTest, NeedsSomewhereToListen) {
  EXPECT_EQ(ApiServer::Start({}, vm_).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ApiServerTest, TcpOnLoopbackOnly) {
  auto refused = ApiServer::Start({.tcp_address = "0.0.0.0:0", .tcp_insecure = true}, vm_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  auto server = ApiServer::Start({.tcp_address = "127.0.0.1:0", .tcp_insecure = true}, vm_);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->tcp_port(), 0);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->tcp_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = pb::VmService::NewStub(channel);
  grpc::ClientContext context;
  Deadline(context);
  pb::VmInfo info;
  EXPECT_TRUE(stub->GetInfo(&context, pb::GetInfoRequest(), &info).ok());
  EXPECT_EQ(info.pid(), 4242u);
  // The port is this server's alone (no SO_REUSEPORT sharing with a second VMM).
  auto second = ApiServer::Start(
      {.tcp_address = absl::StrCat("127.0.0.1:", (*server)->tcp_port()), .tcp_insecure = true},
      vm_);
  EXPECT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(absl::StrCat((*server)->tcp_port())), std::string::npos)
      << second.status();
}

// Asks server reflection (what grpcurl uses) to list the services: their names in `text`. The
// reflection messages come from the generated pool (libgrpc++_reflection registers them); the
// call is a raw bidi stream.
grpc::Status ListServicesByReflection(grpc::Channel* channel, grpc::ClientContext& context,
                                      std::string* text) {
  const google::protobuf::DescriptorPool* pool = google::protobuf::DescriptorPool::generated_pool();
  const auto* request_type =
      pool->FindMessageTypeByName("grpc.reflection.v1alpha.ServerReflectionRequest");
  const auto* response_type =
      pool->FindMessageTypeByName("grpc.reflection.v1alpha.ServerReflectionResponse");
  if (request_type == nullptr || response_type == nullptr) {
    return grpc::Status(StatusCode::INTERNAL, "no reflection messages in the pool");
  }
  google::protobuf::DynamicMessageFactory factory(pool);
  std::unique_ptr<google::protobuf::Message> request(factory.GetPrototype(request_type)->New());
  request->GetReflection()->SetString(request.get(), request_type->FindFieldByName("list_services"),
                                      "");
  std::string bytes;
  request->SerializeToString(&bytes);

  grpc::internal::RpcMethod method("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                   grpc::internal::RpcMethod::BIDI_STREAMING);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel, method, &context));
  grpc::Slice slice(bytes);
  stream->Write(grpc::ByteBuffer(&slice, 1));
  stream->WritesDone();
  grpc::ByteBuffer reply;
  while (stream->Read(&reply)) {
    std::vector<grpc::Slice> slices;
    if (!reply.Dump(&slices).ok()) continue;
    std::string reply_bytes;
    for (const grpc::Slice& s : slices) {
      reply_bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    std::unique_ptr<google::protobuf::Message> response(factory.GetPrototype(response_type)->New());
    if (response->ParseFromString(reply_bytes)) *text += response->DebugString();
  }
  return stream->Finish();
}

TEST_F(ApiServerTest, ReflectionListsTheServices) {
  StartServer();
  grpc::ClientContext context;
  Deadline(context);
  std::string text;
  const grpc::Status status = ListServicesByReflection(channel_.get(), context, &text);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_NE(text.find("vmm.v1.MediaService"), std::string::npos) << text;
  EXPECT_NE(text.find("vmm.v1.VmService"), std::string::npos) << text;
}

// ---- MediaService ----

TEST_F(ApiServerTest, ListDrivesAndGetStatus) {
  StartServer();
  grpc::ClientContext context;
  Deadline(context);
  pb::ListDrivesResponse list;
  ASSERT_TRUE(media_->ListDrives(&context, pb::ListDrivesRequest(), &list).ok());
  ASSERT_EQ(list.drives_size(), 3);
  const pb::DriveStatus& cd0 = list.drives(0);
  EXPECT_EQ(cd0.name(), "cd0");
  EXPECT_EQ(cd0.kind(), pb::DriveStatus::CDROM);
  EXPECT_EQ(cd0.bus(), "virtio-scsi");
  EXPECT_EQ(cd0.address(), "0:0:0");
  EXPECT_TRUE(cd0.removable());
  EXPECT_TRUE(cd0.medium_present());
  EXPECT_FALSE(cd0.tray_open());
  EXPECT_EQ(cd0.size_bytes(), 1u << 20);
  EXPECT_EQ(cd0.source(), "/images/initial.iso");
  EXPECT_TRUE(cd0.read_only());
  const pb::DriveStatus& cd1 = list.drives(1);
  EXPECT_EQ(cd1.bus(), "ide");
  EXPECT_EQ(cd1.address(), "1:0");
  EXPECT_FALSE(cd1.medium_present());
  EXPECT_EQ(cd1.size_bytes(), 0u);
  const pb::DriveStatus& disk0 = list.drives(2);
  EXPECT_EQ(disk0.kind(), pb::DriveStatus::DISK);
  EXPECT_FALSE(disk0.removable());
  EXPECT_TRUE(disk0.medium_present());
  EXPECT_EQ(disk0.size_bytes(), 4u << 20);
  EXPECT_EQ(disk0.source(), "/images/disk0.img");
  EXPECT_EQ(disk0.cache_mode(), "writeback");
  EXPECT_FALSE(disk0.read_only());

  pb::DriveStatus status;
  ASSERT_TRUE(Status("cd1", &status).ok());
  EXPECT_EQ(status.name(), "cd1");
  grpc::Status error = Status("cd9", &status);
  EXPECT_EQ(error.error_code(), StatusCode::NOT_FOUND);
  EXPECT_NE(error.error_message().find("cd9"), std::string::npos) << error.error_message();
  EXPECT_EQ(Status("", &status).error_code(), StatusCode::INVALID_ARGUMENT);
  // A hostile name is not echoed whole.
  error = Status(std::string(100000, 'x'), &status);
  EXPECT_EQ(error.error_code(), StatusCode::NOT_FOUND);
  EXPECT_LT(error.error_message().size(), 400u);
}

TEST_F(ApiServerTest, EjectThenInsert) {
  StartServer();
  pb::DriveStatus status;
  ASSERT_TRUE(Eject("cd0", false, &status).ok());
  EXPECT_FALSE(status.medium_present());
  EXPECT_TRUE(status.tray_open());
  EXPECT_EQ(status.generation(), 1u);
  EXPECT_EQ(status.source(), "");
  EXPECT_FALSE(vm_.cd0_media->Current()->present);
  // Ejecting an empty drive with an open tray is a no-op.
  ASSERT_TRUE(Eject("cd0", false, &status).ok());
  EXPECT_EQ(status.generation(), 1u);

  ASSERT_TRUE(Insert("cd0", iso_, &status).ok());
  EXPECT_TRUE(status.medium_present());
  EXPECT_FALSE(status.tray_open());
  EXPECT_EQ(status.generation(), 2u);
  EXPECT_EQ(status.source(), iso_);
  EXPECT_EQ(status.size_bytes(), 2u << 20);
  const auto state = vm_.cd0_media->Current();
  EXPECT_TRUE(state->ready());
  EXPECT_EQ(state->source, iso_);
  EXPECT_TRUE(state->backend->info().read_only);
  ASSERT_TRUE(Insert("cd1", iso2_, &status, "raw").ok());
  EXPECT_EQ(status.size_bytes(), 64u << 10);
}

// Every failing Insert leaves the drive exactly as it was: same snapshot, nothing published.
TEST_F(ApiServerTest, InsertErrors) {
  StartServer();
  pb::DriveStatus status;
  const auto cd1_before = vm_.cd1_media->Current();
  const auto cd0_before = vm_.cd0_media->Current();
  auto unchanged = [&] {
    EXPECT_EQ(vm_.cd1_media->Current(), cd1_before);
    EXPECT_EQ(vm_.cd0_media->Current(), cd0_before);
  };

  grpc::Status error = Insert("cd1", dir_ + "/missing.iso", &status);
  EXPECT_EQ(error.error_code(), StatusCode::NOT_FOUND);
  EXPECT_NE(error.error_message().find(dir_ + "/missing.iso"), std::string::npos)
      << error.error_message();
  unchanged();

  // A long (but legal) path and a UTF-8 one are named whole, as typed.
  const std::string long_missing = dir_ + "/" + std::string(200, 'd') + "/" + std::string(250, 'f');
  error = Insert("cd1", long_missing, &status);
  EXPECT_EQ(error.error_code(), StatusCode::NOT_FOUND);
  EXPECT_NE(error.error_message().find(long_missing), std::string::npos) << error.error_message();
  const std::string utf8_missing = dir_ + "/d\xc3\xa9j\xc3\xa0-vu.iso";
  error = Insert("cd1", utf8_missing, &status);
  EXPECT_EQ(error.error_code(), StatusCode::NOT_FOUND);
  EXPECT_NE(error.error_message().find(utf8_missing), std::string::npos) << error.error_message();
  unchanged();

  error = Insert("cd1", dir_ + "/disc.iso/inside", &status);  // a component is not a directory
  EXPECT_EQ(error.error_code(), StatusCode::NOT_FOUND);
  unchanged();

  error = Insert("cd1", dir_, &status);
  EXPECT_EQ(error.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(error.error_message().find(dir_), std::string::npos);
  unchanged();

  // A FIFO would block an open(): refused before anything opens it.
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  error = Insert("cd1", fifo, &status);
  EXPECT_EQ(error.error_code(), StatusCode::INVALID_ARGUMENT);
  unchanged();

  {
    absl::MutexLock lock(&vm_.mutex);
    vm_.denied.insert(iso_);
  }
  error = Insert("cd1", iso_, &status);
  EXPECT_EQ(error.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(error.error_message().find(iso_), std::string::npos) << error.error_message();
  unchanged();

  EXPECT_EQ(Insert("cd1", "", &status).error_code(), StatusCode::INVALID_ARGUMENT);
  error = Insert("cd1", "/" + std::string(PATH_MAX, 'a'), &status);
  EXPECT_EQ(error.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(error.error_message().find("PATH_MAX"), std::string::npos) << error.error_message();
  EXPECT_LT(error.error_message().size(), 400u);
  // (Within one HTTP/2 flow-control window: a larger request makes the in-process client's
  // connection teardown linger for 10 s, a gRPC client quirk; tests/integration/api_test sends
  // 8 MiB to a real VMM.)
  EXPECT_EQ(Insert("cd1", "/" + std::string(60000, 'a'), &status).error_code(),
            StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Insert("cd1", iso2_ + std::string(1, '\0') + "x", &status).error_code(),
            StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Insert("cd1", iso2_, &status, "qcow2").error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Insert("", iso2_, &status).error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Insert("cd7", iso2_, &status).error_code(), StatusCode::NOT_FOUND);
  unchanged();

  // A drive that holds a medium; a disk.
  error = Insert("cd0", iso2_, &status);
  EXPECT_EQ(error.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(error.error_message().find("/images/initial.iso"), std::string::npos);
  error = Insert("disk0", iso2_, &status);
  EXPECT_EQ(error.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(error.error_message().find("disk"), std::string::npos);
  unchanged();
  // Even a medium left in the open tray by the guest counts as present.
  ASSERT_TRUE(vm_.cd0_media->GuestLoadEject(true).ok());
  EXPECT_EQ(Insert("cd0", iso2_, &status).error_code(), StatusCode::FAILED_PRECONDITION);
  // None of the refused requests needed to open the file, except the denied one.
  EXPECT_EQ(vm_.opens.load(), 1);
}

TEST_F(ApiServerTest, EjectHonoursTheGuestLockUnlessForced) {
  StartServer();
  vm_.cd0_media->SetLocked(true, /*by_guest=*/true);
  const auto before = vm_.cd0_media->Current();
  pb::DriveStatus status;
  grpc::Status error = Eject("cd0", false, &status);
  EXPECT_EQ(error.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(error.error_message().find("cd0"), std::string::npos);
  EXPECT_EQ(vm_.cd0_media->Current(), before);
  EXPECT_EQ(SetTray("cd0", true, false, &status).error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(vm_.cd0_media->Current(), before);
  ASSERT_TRUE(Status("cd0", &status).ok());
  EXPECT_TRUE(status.locked());
  EXPECT_TRUE(status.medium_present());

  ASSERT_TRUE(Eject("cd0", true, &status).ok());
  EXPECT_FALSE(status.medium_present());
  EXPECT_TRUE(status.tray_open());
  EXPECT_TRUE(status.locked()) << "the lock is the guest's state";
  // Inserting into the (still locked) empty drive is allowed: nothing to protect.
  ASSERT_TRUE(Insert("cd0", iso_, &status).ok());
  EXPECT_TRUE(status.medium_present());
}

TEST_F(ApiServerTest, SetTray) {
  StartServer();
  pb::DriveStatus status;
  ASSERT_TRUE(SetTray("cd0", true, false, &status).ok());
  EXPECT_TRUE(status.tray_open());
  EXPECT_TRUE(status.medium_present());
  EXPECT_EQ(status.generation(), 0u);
  EXPECT_FALSE(vm_.cd0_media->Current()->ready());
  ASSERT_TRUE(SetTray("cd0", false, false, &status).ok());
  EXPECT_FALSE(status.tray_open());
  EXPECT_TRUE(vm_.cd0_media->Current()->ready());
  vm_.cd0_media->SetLocked(true, true);
  EXPECT_EQ(SetTray("cd0", true, false, &status).error_code(), StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(SetTray("cd0", true, true, &status).ok());
  EXPECT_TRUE(status.tray_open());
  EXPECT_EQ(SetTray("disk0", true, true, &status).error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(SetTray("nope", true, true, &status).error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(Eject("disk0", true, &status).error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Eject("nope", true, &status).error_code(), StatusCode::NOT_FOUND);
}

// ---- Watch ----

using Reader = grpc::ClientReader<pb::MediaEvent>;

struct WatchStream {
  grpc::ClientContext context;
  std::unique_ptr<Reader> reader;
};

std::unique_ptr<WatchStream> OpenWatch(pb::MediaService::Stub& stub, const std::string& drive) {
  auto stream = std::make_unique<WatchStream>();
  pb::WatchRequest request;
  request.set_drive(drive);
  stream->reader = stub.Watch(&stream->context, request);
  // Subscribed once the initial metadata arrives (docs/api.md).
  stream->reader->WaitForInitialMetadata();
  return stream;
}

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return condition();
}

// An eject without force of a locked drive asks the guest (EJECT_REQUESTED, not by the guest),
// as QEMU's "eject" does; the guest agreeing shows as its own TRAY_OPENED, and the next eject
// takes the medium out.
TEST_F(ApiServerTest, EjectOfALockedDriveAsksTheGuest) {
  StartServer();
  auto watch = OpenWatch(*media_, "cd0");
  vm_.cd0_media->SetLocked(true, /*by_guest=*/true);
  pb::DriveStatus status;
  grpc::Status refused = Eject("cd0", false, &status);
  EXPECT_EQ(refused.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("cd0: the guest has locked the drive; it was asked"),
            std::string::npos)
      << refused.error_message();
  // The guest's answer (udev's cdrom_id): allow removal, then START STOP UNIT LoEj.
  vm_.cd0_media->SetLocked(false, /*by_guest=*/true);
  ASSERT_TRUE(vm_.cd0_media->GuestLoadEject(/*eject=*/true).ok());
  ASSERT_TRUE(Eject("cd0", false, &status).ok());
  EXPECT_FALSE(status.medium_present());

  const std::pair<pb::MediaEvent::Type, bool> expected[] = {
      {pb::MediaEvent::LOCK_CHANGED, true},    {pb::MediaEvent::EJECT_REQUESTED, false},
      {pb::MediaEvent::LOCK_CHANGED, true},    {pb::MediaEvent::TRAY_OPENED, true},
      {pb::MediaEvent::MEDIUM_REMOVED, false},
  };
  for (const auto& [type, by_guest] : expected) {
    pb::MediaEvent event;
    ASSERT_TRUE(watch->reader->Read(&event));
    EXPECT_EQ(event.type(), type);
    EXPECT_EQ(event.by_guest(), by_guest) << event.type();
  }
  watch->context.TryCancel();
  pb::MediaEvent rest;
  while (watch->reader->Read(&rest)) {
  }
  watch->reader->Finish();
}

TEST_F(ApiServerTest, WatchDeliversEventsInOrderAndEndsOnCancel) {
  StartServer();
  auto watch = OpenWatch(*media_, "");
  EXPECT_EQ(server_->watcher_count(), 1u);
  pb::DriveStatus status;
  const int64_t start = absl::GetCurrentTimeNanos();
  ASSERT_TRUE(Eject("cd0", false, &status).ok());     // TRAY_OPENED, MEDIUM_REMOVED
  ASSERT_TRUE(Insert("cd1", iso_, &status).ok());     // TRAY_OPENED, MEDIUM_INSERTED, TRAY_CLOSED
  vm_.cd1_media->SetLocked(true, /*by_guest=*/true);  // LOCK_CHANGED (guest)
  EXPECT_FALSE(vm_.cd1_media->GuestLoadEject(true).ok());  // EJECT_REQUESTED (guest)

  struct Expected {
    pb::MediaEvent::Type type;
    const char* drive;
    bool by_guest;
  };
  const Expected expected[] = {
      {pb::MediaEvent::TRAY_OPENED, "cd0", false},
      {pb::MediaEvent::MEDIUM_REMOVED, "cd0", false},
      {pb::MediaEvent::TRAY_OPENED, "cd1", false},
      {pb::MediaEvent::MEDIUM_INSERTED, "cd1", false},
      {pb::MediaEvent::TRAY_CLOSED, "cd1", false},
      {pb::MediaEvent::LOCK_CHANGED, "cd1", true},
      {pb::MediaEvent::EJECT_REQUESTED, "cd1", true},
  };
  std::vector<pb::MediaEvent> events;
  for (const Expected& want : expected) {
    pb::MediaEvent event;
    ASSERT_TRUE(watch->reader->Read(&event)) << "stream ended after " << events.size();
    EXPECT_EQ(event.type(), want.type) << events.size();
    EXPECT_EQ(event.drive(), want.drive) << events.size();
    EXPECT_EQ(event.by_guest(), want.by_guest) << events.size();
    EXPECT_EQ(event.status().name(), want.drive);
    EXPECT_GE(event.time_unix_nanos(), start);
    if (!events.empty()) {
      EXPECT_GE(event.time_unix_nanos(), events.back().time_unix_nanos());
    }
    events.push_back(event);
  }
  // Each event carries the state right after its change.
  EXPECT_TRUE(events[0].status().tray_open());
  EXPECT_TRUE(events[0].status().medium_present());
  EXPECT_FALSE(events[1].status().medium_present());
  EXPECT_EQ(events[1].status().generation(), 1u);
  EXPECT_TRUE(events[3].status().medium_present());
  EXPECT_TRUE(events[3].status().tray_open());
  EXPECT_EQ(events[3].status().source(), iso_);
  EXPECT_FALSE(events[4].status().tray_open());
  EXPECT_TRUE(events[5].status().locked());
  EXPECT_TRUE(events[6].status().locked());

  watch->context.TryCancel();
  pb::MediaEvent extra;
  while (watch->reader->Read(&extra)) {
  }
  EXPECT_EQ(watch->reader->Finish().error_code(), StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([&] { return server_->watcher_count() == 0; }))
      << "the stream's handler did not end";
  // The listeners are gone: changes after the cancel touch nothing freed.
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(vm_.cd0_media->SetTrayOpen(i % 2 == 0, true).ok());
}

TEST_F(ApiServerTest, WatchOneDrive) {
  StartServer();
  auto watch = OpenWatch(*media_, "cd1");
  ASSERT_TRUE(vm_.cd0_media->SetTrayOpen(true, false).ok());  // not cd1: not delivered
  ASSERT_TRUE(vm_.cd1_media->SetTrayOpen(true, false).ok());
  pb::MediaEvent event;
  ASSERT_TRUE(watch->reader->Read(&event));
  EXPECT_EQ(event.drive(), "cd1");
  EXPECT_EQ(event.type(), pb::MediaEvent::TRAY_OPENED);
  watch->context.TryCancel();
  while (watch->reader->Read(&event)) {
  }
  watch->reader->Finish();

  for (const auto& [drive, code] :
       std::vector<std::pair<std::string, StatusCode>>{{"cd9", StatusCode::NOT_FOUND}}) {
    grpc::ClientContext context;
    Deadline(context);
    pb::WatchRequest request;
    request.set_drive(drive);
    auto reader = media_->Watch(&context, request);
    while (reader->Read(&event)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), code) << drive;
  }
}

// ---- Hot-plug ----

grpc::Status AttachDisk(pb::VmService::Stub& stub, const pb::AttachDiskRequest& request,
                        pb::DriveStatus* out) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return stub.AttachDisk(&context, request, out);
}

grpc::Status DetachDisk(pb::VmService::Stub& stub, const std::string& drive, pb::DriveStatus* out) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  pb::DetachDiskRequest request;
  request.set_drive(drive);
  return stub.DetachDisk(&context, request, out);
}

// A disk attached joins the drive list and the stream of every watcher of all drives; detached, it
// leaves both, and the API keeps nothing of it (the image closes before the reply).
TEST_F(ApiServerTest, AttachAndDetachADisk) {
  StartServer();
  const std::string image = WriteFile("data.img", 1 << 20);
  auto all = OpenWatch(*media_, "");
  auto disk0_only = OpenWatch(*media_, "disk0");
  pb::AttachDiskRequest request;
  request.set_path(image);
  request.set_id("data");
  request.set_cache_mode("none");
  request.set_fua_mode("emulate");
  request.set_lun(5);
  request.mutable_limits()->set_iops(300);
  pb::DriveStatus status;
  grpc::Status attached = AttachDisk(*vm_service_, request, &status);
  ASSERT_TRUE(attached.ok()) << attached.error_message();
  EXPECT_EQ(status.name(), "data");
  EXPECT_EQ(status.kind(), pb::DriveStatus::DISK);
  EXPECT_EQ(status.address(), "0:0:5");
  EXPECT_EQ(status.size_bytes(), 1u << 20);
  EXPECT_EQ(status.source(), image);
  {
    absl::MutexLock lock(&vm_.mutex);
    ASSERT_EQ(vm_.attachments.size(), 1u);
    EXPECT_EQ(vm_.attachments[0].cache_mode, block::CacheMode::kNone);
    EXPECT_EQ(vm_.attachments[0].fua_mode, block::FuaMode::kEmulate);
    EXPECT_EQ(vm_.attachments[0].lun, std::optional<uint16_t>(5));
    EXPECT_EQ(vm_.attachments[0].limits.iops, 300u);
  }
  ASSERT_TRUE(Status("data", &status).ok());
  pb::VmInfo info;
  ASSERT_TRUE(Vm(&pb::VmService::Stub::GetInfo, pb::GetInfoRequest(), &info).ok());
  ASSERT_EQ(info.drives_size(), 4);
  EXPECT_EQ(info.drives(3).name(), "data");

  std::weak_ptr<block::Drive> drive;
  {
    absl::MutexLock lock(&vm_.mutex);
    drive = vm_.attached["data"];
  }
  ASSERT_TRUE(DetachDisk(*vm_service_, "data", &status).ok());
  EXPECT_EQ(status.name(), "data");
  EXPECT_TRUE(drive.expired()) << "the API still holds the detached drive";
  EXPECT_EQ(Status("data", &status).error_code(), StatusCode::NOT_FOUND);
  ASSERT_TRUE(DetachDisk(*vm_service_, "disk0", &status).ok());

  pb::MediaEvent event;
  ASSERT_TRUE(all->reader->Read(&event));
  EXPECT_EQ(event.type(), pb::MediaEvent::DISK_ATTACHED);
  EXPECT_EQ(event.drive(), "data");
  EXPECT_EQ(event.status().address(), "0:0:5");
  EXPECT_GT(event.time_unix_nanos(), 0);
  ASSERT_TRUE(all->reader->Read(&event));
  EXPECT_EQ(event.type(), pb::MediaEvent::DISK_DETACHED);
  EXPECT_EQ(event.drive(), "data");
  ASSERT_TRUE(all->reader->Read(&event));
  EXPECT_EQ(event.type(), pb::MediaEvent::DISK_DETACHED);
  EXPECT_EQ(event.drive(), "disk0");
  // The stream watching disk0 saw only its own detach.
  ASSERT_TRUE(disk0_only->reader->Read(&event));
  EXPECT_EQ(event.type(), pb::MediaEvent::DISK_DETACHED);
  EXPECT_EQ(event.drive(), "disk0");
  for (auto* watch : {all.get(), disk0_only.get()}) {
    watch->context.TryCancel();
    while (watch->reader->Read(&event)) {
    }
    watch->reader->Finish();
  }
}

TEST_F(ApiServerTest, ResizeADisk) {
  StartServer();
  auto watch = OpenWatch(*media_, "disk0");
  auto resize = [&](const std::string& drive, uint64_t size, pb::DriveStatus* out) {
    grpc::ClientContext context;
    Deadline(context);
    pb::ResizeDiskRequest request;
    request.set_drive(drive);
    request.set_size_bytes(size);
    return vm_service_->ResizeDisk(&context, request, out);
  };
  pb::DriveStatus status;
  ASSERT_TRUE(resize("disk0", 8 << 20, &status).ok());
  EXPECT_EQ(status.name(), "disk0");
  ASSERT_TRUE(resize("disk0", 0, &status).ok());  // the image's size on the host
  {
    absl::MutexLock lock(&vm_.mutex);
    EXPECT_EQ(vm_.resizes, (std::vector<std::optional<uint64_t>>{8 << 20, std::nullopt}));
  }
  const grpc::Status cd = resize("cd0", 8 << 20, &status);
  EXPECT_EQ(cd.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(cd.error_message().find("resize: cd0 is a CD-ROM"), std::string::npos);
  EXPECT_EQ(resize("disk7", 8 << 20, &status).error_code(), StatusCode::NOT_FOUND);
  pb::MediaEvent event;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(watch->reader->Read(&event));
    EXPECT_EQ(event.type(), pb::MediaEvent::DISK_RESIZED);
    EXPECT_EQ(event.drive(), "disk0");
  }
  watch->context.TryCancel();
  while (watch->reader->Read(&event)) {
  }
  watch->reader->Finish();
}

TEST_F(ApiServerTest, AttachAndDetachErrorsAreClear) {
  StartServer();
  const std::string image = WriteFile("data.img", 1 << 20);
  struct Case {
    std::string path;
    std::function<void(pb::AttachDiskRequest&)> change;
    StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", nullptr, StatusCode::INVALID_ARGUMENT, "attach: the path of the image is empty"},
      {dir_ + "/missing.img", nullptr, StatusCode::NOT_FOUND, "missing.img"},
      {dir_, nullptr, StatusCode::INVALID_ARGUMENT, "is a directory"},
      {image, [](auto& r) { r.set_cache_mode("fast"); }, StatusCode::INVALID_ARGUMENT,
       "attach: cache_mode"},
      {image, [](auto& r) { r.set_fua_mode("sometimes"); }, StatusCode::INVALID_ARGUMENT,
       "attach: fua_mode"},
      {image, [](auto& r) { r.set_lun(16384); }, StatusCode::INVALID_ARGUMENT, "LUN 16384"},
      {image, [](auto& r) { r.set_lun(1); }, StatusCode::ALREADY_EXISTS, "attach: LUN 1 is taken"},
      {image, [](auto& r) { r.set_id("disk0"); }, StatusCode::ALREADY_EXISTS, "disk0 is taken"},
      {image, [](auto& r) { r.mutable_limits()->set_iops_burst(5); }, StatusCode::INVALID_ARGUMENT,
       "attach: "},
  };
  for (const Case& c : cases) {
    pb::AttachDiskRequest request;
    request.set_path(c.path);
    if (c.change) c.change(request);
    pb::DriveStatus status;
    const grpc::Status result = AttachDisk(*vm_service_, request, &status);
    EXPECT_EQ(result.error_code(), c.code) << c.message << ": " << result.error_message();
    EXPECT_NE(result.error_message().find(c.message), std::string::npos) << result.error_message();
  }
  pb::DriveStatus status;
  EXPECT_EQ(DetachDisk(*vm_service_, "disk9", &status).error_code(), StatusCode::NOT_FOUND);
  const grpc::Status cd = DetachDisk(*vm_service_, "cd0", &status);
  EXPECT_EQ(cd.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(cd.error_message().find("detach: cd0 is a CD-ROM"), std::string::npos)
      << cd.error_message();
  // Nothing changed.
  pb::VmInfo info;
  ASSERT_TRUE(Vm(&pb::VmService::Stub::GetInfo, pb::GetInfoRequest(), &info).ok());
  EXPECT_EQ(info.drives_size(), 3);
}

TEST_F(ApiServerTest, WatchEndsCleanlyWhenTheServerStops) {
  StartServer();
  auto watch = OpenWatch(*media_, "");
  ASSERT_TRUE(vm_.cd0_media->SetTrayOpen(true, false).ok());
  server_->Stop();
  pb::MediaEvent event;
  ASSERT_TRUE(watch->reader->Read(&event)) << "the queued event was not delivered before the end";
  EXPECT_EQ(event.type(), pb::MediaEvent::TRAY_OPENED);
  EXPECT_FALSE(watch->reader->Read(&event));
  const grpc::Status status = watch->reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
}

// A watcher that does not read: the device side (here the thread toggling the tray) never waits;
// the stream ends with RESOURCE_EXHAUSTED once its queue overflows.
TEST_F(ApiServerTest, SlowWatcherOverflowEndsTheStream) {
  StartServer({.unix_socket_path = socket_path_, .watch_queue_limit = 16});
  auto watch = OpenWatch(*media_, "cd0");
  const absl::Time start = absl::Now();
  constexpr int kChanges = 20000;
  for (int i = 0; i < kChanges; ++i) {
    ASSERT_TRUE(vm_.cd0_media->SetTrayOpen(i % 2 == 0, false).ok());
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "media changes waited for the watcher";
  // Now read: a prefix of the events, in order, then the error.
  pb::MediaEvent event;
  int received = 0;
  while (watch->reader->Read(&event)) {
    EXPECT_EQ(event.type(),
              received % 2 == 0 ? pb::MediaEvent::TRAY_OPENED : pb::MediaEvent::TRAY_CLOSED);
    ++received;
  }
  const grpc::Status status = watch->reader->Finish();
  EXPECT_EQ(status.error_code(), StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_NE(status.error_message().find("fell behind"), std::string::npos);
  EXPECT_LT(received, kChanges);
  EXPECT_TRUE(WaitFor([&] { return server_->watcher_count() == 0; }));
  // The device side is unaffected, and a new watcher works.
  auto again = OpenWatch(*media_, "cd0");
  ASSERT_TRUE(vm_.cd0_media->SetTrayOpen(true, true).ok());
  ASSERT_TRUE(again->reader->Read(&event));
  again->context.TryCancel();
  while (again->reader->Read(&event)) {
  }
  again->reader->Finish();
}

TEST_F(ApiServerTest, TooManyWatchersAreRefused) {
  StartServer({.unix_socket_path = socket_path_, .max_watchers = 2});
  auto first = OpenWatch(*media_, "");
  auto second = OpenWatch(*media_, "");
  grpc::ClientContext context;
  Deadline(context);
  auto third = media_->Watch(&context, pb::WatchRequest());
  pb::MediaEvent event;
  EXPECT_FALSE(third->Read(&event));
  EXPECT_EQ(third->Finish().error_code(), StatusCode::RESOURCE_EXHAUSTED);
  for (auto* watch : {first.get(), second.get()}) {
    watch->context.TryCancel();
    while (watch->reader->Read(&event)) {
    }
    watch->reader->Finish();
  }
}

// The server's threads are capped by its resource quota, whatever the callers do (H9 of
// docs/security.md: calls drove a VMM from 10 threads to 215). Calls beyond the cap wait
// for a thread (or their deadline) instead of making one; the server answers again once the
// calls in its threads end.
int ThreadCount() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST_F(ApiServerTest, TheServersThreadsAreCapped) {
  StartServer({.unix_socket_path = socket_path_, .max_watchers = 100, .max_threads = 6});
  const int before = ThreadCount();
  std::vector<std::unique_ptr<WatchStream>> streams;
  for (int i = 0; i < 40; ++i) {
    auto stream = std::make_unique<WatchStream>();
    Deadline(stream->context);
    stream->reader = media_->Watch(&stream->context, pb::WatchRequest());
    streams.push_back(std::move(stream));
  }
  // 40 streams, each of which holds a server thread for as long as it is open.
  streams.front()->reader->WaitForInitialMetadata();
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_LE(ThreadCount() - before, 6 + 2) << "threads beyond the quota (and gRPC's own two)";
  for (auto& watch : streams) watch->context.TryCancel();
  for (auto& watch : streams) {
    pb::MediaEvent event;
    while (watch->reader->Read(&event)) {
    }
    watch->reader->Finish();
  }
  streams.clear();
  pb::VmInfo info;
  EXPECT_TRUE(
      WaitFor([&] { return Vm(&pb::VmService::Stub::GetInfo, pb::GetInfoRequest(), &info).ok(); }));
}

// ---- VmService ----

// Calls are served on threads nicer than the one that started the server: a client querying in
// a loop yields to the vCPUs and iothreads.
TEST_F(ApiServerTest, CallsRunOnLowerPriorityThreads) {
  errno = 0;
  const int own = getpriority(PRIO_PROCESS, static_cast<int>(syscall(SYS_gettid)));
  ASSERT_EQ(errno, 0);
  StartServer();
  pb::VmInfo info;
  ASSERT_TRUE(Vm(&pb::VmService::Stub::GetInfo, pb::GetInfoRequest(), &info).ok());
  absl::MutexLock lock(&vm_.mutex);
  EXPECT_EQ(vm_.status_thread_nice, std::min(own + 10, 19));
}

TEST_F(ApiServerTest, InfoPauseResume) {
  StartServer();
  pb::VmInfo info;
  ASSERT_TRUE(Vm(&pb::VmService::Stub::GetInfo, pb::GetInfoRequest(), &info).ok());
  EXPECT_EQ(info.state(), pb::VmInfo::RUNNING);
  EXPECT_EQ(info.vcpus(), 2u);
  EXPECT_EQ(info.memory_bytes(), 256u << 20);
  EXPECT_EQ(info.kernel(), "/boot/guest.elf");
  EXPECT_EQ(info.cmdline(), "test=api");
  EXPECT_EQ(info.uptime_ms(), 3000);
  EXPECT_EQ(info.pid(), 4242u);
  ASSERT_EQ(info.drives_size(), 3);
  EXPECT_EQ(info.drives(2).name(), "disk0");

  ASSERT_TRUE(Vm(&pb::VmService::Stub::Pause, pb::PauseRequest(), &info).ok());
  EXPECT_EQ(info.state(), pb::VmInfo::PAUSED);
  ASSERT_TRUE(Vm(&pb::VmService::Stub::Pause, pb::PauseRequest(), &info).ok());
  EXPECT_EQ(info.state(), pb::VmInfo::PAUSED);
  ASSERT_TRUE(Vm(&pb::VmService::Stub::Resume, pb::ResumeRequest(), &info).ok());
  EXPECT_EQ(info.state(), pb::VmInfo::RUNNING);
  ASSERT_TRUE(Vm(&pb::VmService::Stub::Resume, pb::ResumeRequest(), &info).ok());
  EXPECT_EQ(info.state(), pb::VmInfo::RUNNING);
}

TEST_F(ApiServerTest, ResetReachesTheVmUntilItStops) {
  StartServer();
  pb::VmInfo info;
  ASSERT_TRUE(Vm(&pb::VmService::Stub::Reset, pb::ResetRequest(), &info).ok());
  EXPECT_EQ(info.state(), pb::VmInfo::RUNNING);
  {
    absl::MutexLock lock(&vm_.mutex);
    EXPECT_EQ(vm_.reset_calls, 1);
  }
  ASSERT_TRUE(Vm(&pb::VmService::Stub::Shutdown, pb::ShutdownRequest(), &info).ok());
  const grpc::Status refused = Vm(&pb::VmService::Stub::Reset, pb::ResetRequest(), &info);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("stopping"), std::string::npos);
  absl::MutexLock lock(&vm_.mutex);
  EXPECT_EQ(vm_.reset_calls, 1);
}

// SetBootOrder hands the names to the VM as given and answers with the VM's order; the VM's
// refusal comes back with its code.
TEST_F(ApiServerTest, SetBootOrderReachesTheVm) {
  StartServer();
  pb::SetBootOrderRequest request;
  request.add_drives("cd0");
  request.add_drives("disk0");
  pb::VmInfo info;
  ASSERT_TRUE(Vm(&pb::VmService::Stub::SetBootOrder, request, &info).ok());
  ASSERT_EQ(info.boot_order_size(), 2);
  EXPECT_EQ(info.boot_order(0), "cd0");
  EXPECT_EQ(info.boot_order(1), "disk0");
  pb::SetBootOrderRequest bad;
  bad.add_drives("nosuch");
  const grpc::Status refused = Vm(&pb::VmService::Stub::SetBootOrder, bad, &info);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Vm(&pb::VmService::Stub::SetBootOrder, pb::SetBootOrderRequest(), &info).ok());
  EXPECT_EQ(info.boot_order_size(), 0);
}

TEST_F(ApiServerTest, Shutdown) {
  StartServer();
  pb::VmInfo info;
  pb::ShutdownRequest graceful;
  ASSERT_TRUE(Vm(&pb::VmService::Stub::Shutdown, graceful, &info).ok());
  EXPECT_EQ(info.state(), pb::VmInfo::STOPPING);
  pb::ShutdownRequest graceful_short;
  graceful_short.set_grace_period_ms(250);
  ASSERT_TRUE(Vm(&pb::VmService::Stub::Shutdown, graceful_short, &info).ok());
  pb::ShutdownRequest forced;
  forced.set_force(true);
  ASSERT_TRUE(Vm(&pb::VmService::Stub::Shutdown, forced, &info).ok());
  EXPECT_EQ(info.state(), pb::VmInfo::STOPPING);
  {
    absl::MutexLock lock(&vm_.mutex);
    ASSERT_EQ(vm_.shutdowns.size(), 3u);
    EXPECT_FALSE(vm_.shutdowns[0].first);
    EXPECT_EQ(vm_.shutdowns[0].second, absl::Milliseconds(5000)) << "the default grace period";
    EXPECT_EQ(vm_.shutdowns[1].second, absl::Milliseconds(250));
    EXPECT_TRUE(vm_.shutdowns[2].first);
  }
  // A stopping VM cannot be paused; the VmControl's code comes through.
  EXPECT_EQ(Vm(&pb::VmService::Stub::Pause, pb::PauseRequest(), &info).error_code(),
            StatusCode::FAILED_PRECONDITION);
}

// I/O limits: a drive's own and a group's, changed live; the drive's status shows them.
TEST_F(ApiServerTest, SetDriveLimits) {
  StartServer();
  auto set = [&](pb::SetDriveLimitsRequest request, pb::DriveLimits* reply) {
    grpc::ClientContext context;
    Deadline(context);
    return vm_service_->SetDriveLimits(&context, request, reply);
  };
  pb::SetDriveLimitsRequest request;
  request.set_drive("disk0");
  request.mutable_limits()->set_iops(1000);
  request.mutable_limits()->set_bytes_per_second(10 << 20);
  pb::DriveLimits reply;
  ASSERT_TRUE(set(request, &reply).ok());
  EXPECT_EQ(reply.drive(), "disk0");
  EXPECT_EQ(reply.limits().iops(), 1000u);
  EXPECT_EQ(vm_.disk0->limits().bytes_per_second, 10u << 20);
  vm_.disk0->SetGroup(vm_.tenant);
  pb::DriveStatus status;
  pb::GetStatusRequest get;
  get.set_drive("disk0");
  {
    grpc::ClientContext context;
    Deadline(context);
    ASSERT_TRUE(media_->GetStatus(&context, get, &status).ok());
  }
  EXPECT_EQ(status.limits().iops(), 1000u);
  EXPECT_EQ(status.io_group(), "tenant");
  // The group's budget.
  pb::SetDriveLimitsRequest group;
  group.set_group("tenant");
  group.mutable_limits()->set_iops(5);
  group.mutable_limits()->set_iops_burst(50);
  ASSERT_TRUE(set(group, &reply).ok());
  EXPECT_EQ(vm_.tenant->limits().iops_burst, 50u);
  // All zero lifts a drive's limits.
  request.clear_limits();
  ASSERT_TRUE(set(request, &reply).ok());
  EXPECT_TRUE(vm_.disk0->limits().unlimited());
  // Refusals: both or neither named, unknown drive or group, a burst without its rate.
  pb::SetDriveLimitsRequest both = group;
  both.set_drive("disk0");
  EXPECT_EQ(set(both, &reply).error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(set(pb::SetDriveLimitsRequest(), &reply).error_code(), StatusCode::INVALID_ARGUMENT);
  pb::SetDriveLimitsRequest unknown;
  unknown.set_drive("disk9");
  EXPECT_EQ(set(unknown, &reply).error_code(), StatusCode::NOT_FOUND);
  unknown.clear_drive();
  unknown.set_group("nobody");
  const grpc::Status no_group = set(unknown, &reply);
  EXPECT_EQ(no_group.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(no_group.error_message(), "no --io-group 'nobody' (this VM has: tenant)");
  pb::SetDriveLimitsRequest burst_only;
  burst_only.set_drive("disk0");
  burst_only.mutable_limits()->set_iops_burst(5);
  EXPECT_EQ(set(burst_only, &reply).error_code(), StatusCode::INVALID_ARGUMENT);
  vm_.disk0->SetGroup(nullptr);
}

TEST_F(ApiServerTest, GetStats) {
  StartServer();
  // One 4 KiB read and one 8 KiB write through disk0's block-layer queue.
  auto queue = vm_.disk0->CreateQueue(
      [](uint64_t, block::Completion completion) { EXPECT_TRUE(completion.ok()); });
  ASSERT_TRUE(queue.ok());
  std::vector<uint8_t> read_buffer(4096), write_buffer(8192, 7);
  iovec read_iov{read_buffer.data(), read_buffer.size()};
  iovec write_iov{write_buffer.data(), write_buffer.size()};
  block::Request read;
  read.type = block::RequestType::kRead;
  read.buffers = std::span<const iovec>(&read_iov, 1);
  block::Request write;
  write.type = block::RequestType::kWrite;
  write.offset = 65536;
  write.buffers = std::span<const iovec>(&write_iov, 1);
  (*queue)->Enqueue(read, 1);
  (*queue)->Enqueue(write, 2);
  (*queue)->Submit();
  while ((*queue)->in_flight() > 0) {
    pollfd fd{(*queue)->completion_fd(), POLLIN, 0};
    ASSERT_EQ(poll(&fd, 1, 5000), 1);
    (*queue)->ProcessCompletions();
  }

  grpc::ClientContext context;
  Deadline(context);
  pb::GetStatsRequest request;
  pb::GetStatsResponse response;
  ASSERT_TRUE(vm_service_->GetStats(&context, request, &response).ok());
  ASSERT_EQ(response.drives_size(), 3);
  const pb::DriveStats& disk = response.drives(2);
  EXPECT_EQ(disk.drive(), "disk0");
  EXPECT_EQ(disk.read_requests(), 1u);
  EXPECT_EQ(disk.read_bytes(), 4096u);
  EXPECT_EQ(disk.write_requests(), 1u);
  EXPECT_EQ(disk.write_bytes(), 8192u);
  EXPECT_EQ(disk.errors(), 0u);
  EXPECT_LE(disk.latency_p50_us(), disk.latency_p99_us());
  EXPECT_LE(disk.latency_p99_us(), disk.latency_max_us());
  EXPECT_EQ(response.drives(0).read_requests(), 0u);

  grpc::ClientContext one_context;
  Deadline(one_context);
  request.set_drive("disk0");
  response.Clear();
  ASSERT_TRUE(vm_service_->GetStats(&one_context, request, &response).ok());
  ASSERT_EQ(response.drives_size(), 1);
  EXPECT_EQ(response.drives(0).write_bytes(), 8192u);

  grpc::ClientContext bad_context;
  Deadline(bad_context);
  request.set_drive("disk9");
  EXPECT_EQ(vm_service_->GetStats(&bad_context, request, &response).error_code(),
            StatusCode::NOT_FOUND);
}

// ---- Many clients at once ----

// 8 threads x 200 mixed calls on cd1 (insert/eject/tray/status) and the VM (info/pause/resume/
// stats), each on its own channel, with a watcher: every call answers (deadlines catch a
// deadlock), every snapshot is consistent, and the counts add up.
TEST_F(ApiServerTest, ManyConcurrentClients) {
  StartServer({.unix_socket_path = socket_path_, .watch_queue_limit = 1 << 20});
  auto watch = OpenWatch(*media_, "cd1");
  std::atomic<int> inserted{0}, insert_refused{0}, failures{0};
  std::atomic<int> inconsistent{0};
  constexpr int kThreads = 8;
  constexpr int kCalls = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto channel =
          grpc::CreateChannel("unix:" + socket_path_, grpc::InsecureChannelCredentials());
      auto media = pb::MediaService::NewStub(channel);
      auto vm = pb::VmService::NewStub(channel);
      // A consistent snapshot of cd1: present exactly when the generation is odd (it starts
      // empty at 0; each insert and each removal bumps it once), a source exactly when present.
      auto check = [&](const pb::DriveStatus& s) {
        if (s.medium_present() != (s.generation() % 2 == 1) ||
            s.medium_present() == s.source().empty()) {
          inconsistent.fetch_add(1);
        }
      };
      for (int i = 0; i < kCalls; ++i) {
        grpc::ClientContext context;
        Deadline(context);
        pb::DriveStatus status;
        pb::VmInfo info;
        grpc::Status result;
        switch ((t + i) % 8) {
          case 0:
          case 1: {
            pb::InsertRequest request;
            request.set_drive("cd1");
            request.set_path(t % 2 ? iso_ : iso2_);
            result = media->Insert(&context, request, &status);
            if (result.ok()) {
              inserted.fetch_add(1);
              check(status);
            } else if (result.error_code() == StatusCode::FAILED_PRECONDITION) {
              insert_refused.fetch_add(1);
              result = grpc::Status::OK;
            }
            break;
          }
          case 2: {
            pb::EjectRequest request;
            request.set_drive("cd1");
            result = media->Eject(&context, request, &status);
            if (result.ok()) check(status);
            break;
          }
          case 3: {
            pb::SetTrayRequest request;
            request.set_drive("cd1");
            request.set_open(i % 2 == 0);
            result = media->SetTray(&context, request, &status);
            if (result.ok()) check(status);
            break;
          }
          case 4: {
            pb::GetStatusRequest request;
            request.set_drive("cd1");
            result = media->GetStatus(&context, request, &status);
            if (result.ok()) check(status);
            break;
          }
          case 5:
            result = vm->GetInfo(&context, pb::GetInfoRequest(), &info);
            if (result.ok()) check(info.drives(1));
            break;
          case 6:
            result = (i % 2 == 0) ? vm->Pause(&context, pb::PauseRequest(), &info)
                                  : vm->Resume(&context, pb::ResumeRequest(), &info);
            break;
          case 7: {
            pb::GetStatsResponse stats;
            result = vm->GetStats(&context, pb::GetStatsRequest(), &stats);
            if (result.ok() && stats.drives_size() != 3) inconsistent.fetch_add(1);
            break;
          }
        }
        if (!result.ok()) {
          failures.fetch_add(1);
          ADD_FAILURE() << "call " << (t + i) % 8 << ": " << result.error_code() << " "
                        << result.error_message();
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(inconsistent.load(), 0);
  EXPECT_GT(inserted.load(), 0);
  EXPECT_GT(insert_refused.load(), 0);

  const auto final_state = vm_.cd1_media->Current();
  const uint64_t generation = final_state->generation;
  const int removals = static_cast<int>(generation) - inserted.load();
  EXPECT_EQ(inserted.load() - removals, final_state->present ? 1 : 0)
      << "generation " << generation << ", inserts " << inserted.load();

  // The watcher saw every change, in order: as many insertions and removals as happened, with
  // generations that never go back.
  int seen_inserted = 0, seen_removed = 0;
  uint64_t last_generation = 0;
  pb::MediaEvent event;
  while ((seen_inserted < inserted.load() || seen_removed < removals) &&
         watch->reader->Read(&event)) {
    EXPECT_GE(event.status().generation(), last_generation);
    last_generation = event.status().generation();
    if (event.type() == pb::MediaEvent::MEDIUM_INSERTED) ++seen_inserted;
    if (event.type() == pb::MediaEvent::MEDIUM_REMOVED) ++seen_removed;
  }
  EXPECT_EQ(seen_inserted, inserted.load());
  EXPECT_EQ(seen_removed, removals);
  EXPECT_EQ(last_generation, generation);
  watch->context.TryCancel();
  while (watch->reader->Read(&event)) {
  }
  watch->reader->Finish();
}

// H1 of docs/security.md: with media confined to a directory, the server does not look at the
// path itself, so every path outside gets the same answer (no NOT_FOUND that says what exists).
TEST_F(ApiServerTest, ConfinedMediaRevealNothingOutside) {
  {
    absl::MutexLock lock(&vm_.mutex);
    vm_.media_dir = dir_;
  }
  StartServer();
  pb::DriveStatus status;
  for (const std::string& path :
       {std::string("/etc/shadow"), std::string("/no/such/file"), std::string("/dev/watchdog")}) {
    grpc::Status inserted = Insert("cd1", path, &status);
    EXPECT_EQ(inserted.error_code(), StatusCode::PERMISSION_DENIED)
        << path << ": " << inserted.error_message();
  }
  EXPECT_TRUE(Insert("cd1", iso_, &status).ok());  // inside: works
}

// A Watch client that stops reading (a stopped process: SIGSTOP), played by vmmctl. Returns its
// pid once it is subscribed and stopped; -1 on failure.
pid_t StartStalledWatcher(const std::string& socket_path) {
  const std::string vmmctl =
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"), "/api/vmmctl");
  int err_pipe[2];
  if (pipe(err_pipe) != 0) return -1;
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(err_pipe[1], 2);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    execl(vmmctl.c_str(), "vmmctl", "--api", ("unix:" + socket_path).c_str(), "media", "watch",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(err_pipe[1]);
  // "vmmctl: watching ..." comes once the server has subscribed the stream.
  std::string seen;
  char c;
  while (seen.find("watching") == std::string::npos && read(err_pipe[0], &c, 1) == 1) seen += c;
  close(err_pipe[0]);
  if (seen.find("watching") == std::string::npos) return -1;
  kill(pid, SIGSTOP);
  return pid;
}

void EndProcess(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// H13 of docs/security.md: a watcher cut off for falling behind no longer takes a slot, though
// its client never reads again: new watchers are not refused for good.
TEST_F(ApiServerTest, StalledWatcherThatFellBehindFreesItsSlot) {
  ApiServerOptions options;
  options.watch_queue_limit = 64;
  options.max_watchers = 1;
  StartServer(options);
  const pid_t stalled = StartStalledWatcher(socket_path_);
  ASSERT_GT(stalled, 0);
  // Far more than HTTP/2's window and the queue hold.
  for (int i = 0; i < 20000; ++i) vm_.cd0_media->SetLocked(i % 2 == 0, /*by_guest=*/true);
  // The one slot is usable again, though the stalled client is still there.
  const pid_t next = StartStalledWatcher(socket_path_);
  EXPECT_GT(next, 0);
  if (next > 0) EndProcess(next);
  EndProcess(stalled);
}

// H13 of docs/security.md: the server stops within its bound while a watcher's client does not
// read (the handler blocked in Write on a full flow-control window, its queue not overflowed).
TEST_F(ApiServerTest, StopIsBoundedWithAStalledWatcher) {
  ApiServerOptions options;
  options.stop_grace = absl::Milliseconds(500);
  StartServer(options);
  const pid_t stalled = StartStalledWatcher(socket_path_);
  ASSERT_GT(stalled, 0);
  // Queued before the stop: Stop() delivers what is queued, so the handler ends up blocked in
  // Write() on the full window whether or not it had started writing (no wait needed, or taken).
  for (int i = 0; i < 900; ++i) vm_.cd0_media->SetLocked(i % 2 == 0, /*by_guest=*/true);
  const absl::Time asked = absl::Now();
  server_->Stop();
  EXPECT_LT(absl::Now() - asked, absl::Seconds(5));
  EXPECT_TRUE(server_->abandoned());  // the stalled stream was left to the process's exit
  struct stat st {};
  EXPECT_NE(lstat(socket_path_.c_str(), &st), 0);  // the socket is gone
  EndProcess(stalled);
}

// ---- Authentication (H1 of docs/security.md) ----

constexpr char kToken[] = "Zm9vYmFyYmF6cXV4-s3cret";

// A context that carries `authorization` metadata `value` (none if empty).
void Authorize(grpc::ClientContext& context, const std::string& value) {
  if (!value.empty()) context.AddMetadata("authorization", value);
}

grpc::Status GetInfoAs(pb::VmService::Stub& stub, const std::string& authorization,
                       pb::VmInfo* info) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  Authorize(context, authorization);
  return stub.GetInfo(&context, pb::GetInfoRequest(), info);
}

TEST_F(ApiServerTest, TcpWithoutATokenIsRefusedUnlessInsecure) {
  auto refused = ApiServer::Start({.tcp_address = "127.0.0.1:0"}, vm_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("--api-token-file"), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("--api-tcp-insecure"), std::string::npos)
      << refused.status();
  // Nothing was left listening, and the unix socket of a refused start is not created either.
  auto both =
      ApiServer::Start({.unix_socket_path = socket_path_, .tcp_address = "127.0.0.1:0"}, vm_);
  EXPECT_FALSE(both.ok());
  struct stat st {};
  EXPECT_NE(lstat(socket_path_.c_str(), &st), 0);
  EXPECT_TRUE(ApiServer::Start({.tcp_address = "127.0.0.1:0", .tcp_insecure = true}, vm_).ok());
  EXPECT_TRUE(ApiServer::Start({.tcp_address = "127.0.0.1:0", .auth_token = kToken}, vm_).ok());
}

TEST_F(ApiServerTest, ATokenThatCannotTravelIsRefused) {
  for (const std::string& token :
       {std::string("two words"), std::string("tab\there"), std::string(5000, 'x')}) {
    auto server = ApiServer::Start({.unix_socket_path = socket_path_, .auth_token = token}, vm_);
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << token;
  }
}

// The token is checked on every listener: TCP and the unix socket.
TEST_F(ApiServerTest, CallsNeedTheToken) {
  auto server = ApiServer::Start(
      {.unix_socket_path = socket_path_, .tcp_address = "127.0.0.1:0", .auth_token = kToken}, vm_);
  ASSERT_TRUE(server.ok()) << server.status();
  for (const std::string& target :
       {absl::StrCat("127.0.0.1:", (*server)->tcp_port()), "unix:" + socket_path_}) {
    auto stub =
        pb::VmService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
    pb::VmInfo info;
    grpc::Status status = GetInfoAs(*stub, "", &info);
    EXPECT_EQ(status.error_code(), StatusCode::UNAUTHENTICATED) << target;
    EXPECT_NE(status.error_message().find("authorization: Bearer"), std::string::npos)
        << status.error_message();
    status = GetInfoAs(*stub, "Bearer wrong", &info);
    EXPECT_EQ(status.error_code(), StatusCode::UNAUTHENTICATED) << target;
    EXPECT_EQ(status.error_message(), "wrong API token");
    status = GetInfoAs(*stub, absl::StrCat("Bearer ", kToken, "x"), &info);
    EXPECT_EQ(status.error_code(), StatusCode::UNAUTHENTICATED) << target;
    status = GetInfoAs(*stub, absl::StrCat("Basic ", kToken), &info);
    EXPECT_EQ(status.error_code(), StatusCode::UNAUTHENTICATED) << target;
    status = GetInfoAs(*stub, absl::StrCat("Bearer ", kToken), &info);
    EXPECT_TRUE(status.ok()) << target << ": " << status.error_message();
    EXPECT_EQ(info.pid(), 4242u);
  }
}

// Every method of both services, called with no token as a raw stream (one empty request):
// UNAUTHENTICATED, and nothing happened to the VM. A method added later without the check fails
// here.
TEST_F(ApiServerTest, EveryMethodRefusesAnUnauthenticatedCaller) {
  StartServer({.unix_socket_path = socket_path_, .auth_token = kToken});
  const google::protobuf::FileDescriptor* file = pb::MediaEvent::descriptor()->file();
  int methods = 0;
  for (int i = 0; i < file->service_count(); ++i) {
    const google::protobuf::ServiceDescriptor* service = file->service(i);
    for (int j = 0; j < service->method_count(); ++j) {
      const std::string name =
          absl::StrCat("/", service->full_name(), "/", service->method(j)->name());
      for (const std::string& authorization : {std::string(), std::string("Bearer nope")}) {
        grpc::ClientContext context;
        Deadline(context);
        Authorize(context, authorization);
        grpc::internal::RpcMethod method(name.c_str(), grpc::internal::RpcMethod::BIDI_STREAMING);
        std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
            grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
                channel_.get(), method, &context));
        grpc::Slice empty;
        stream->Write(grpc::ByteBuffer(&empty, 1));
        stream->WritesDone();
        grpc::ByteBuffer reply;
        EXPECT_FALSE(stream->Read(&reply)) << name << ": answered without a token";
        const grpc::Status status = stream->Finish();
        EXPECT_EQ(status.error_code(), StatusCode::UNAUTHENTICATED)
            << name << ": " << status.error_message();
      }
      ++methods;
    }
  }
  EXPECT_EQ(methods, 17);
  absl::MutexLock lock(&vm_.mutex);
  EXPECT_TRUE(vm_.boot_order.empty());
  EXPECT_TRUE(vm_.shutdowns.empty());
  EXPECT_EQ(vm_.pause_calls, 0);
  EXPECT_EQ(vm_.reset_calls, 0);
  EXPECT_TRUE(vm_.cd0_media->Current()->present);
  EXPECT_EQ(vm_.opens.load(), 0);
  EXPECT_EQ(server_->watcher_count(), 0u);
}

TEST_F(ApiServerTest, WatchNeedsTheToken) {
  StartServer({.unix_socket_path = socket_path_, .auth_token = kToken});
  {
    grpc::ClientContext context;
    Deadline(context);
    Authorize(context, "Bearer nope");
    auto reader = media_->Watch(&context, pb::WatchRequest());
    pb::MediaEvent event;
    EXPECT_FALSE(reader->Read(&event));
    EXPECT_EQ(reader->Finish().error_code(), StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(server_->watcher_count(), 0u);
  }
  auto watch = std::make_unique<WatchStream>();
  Authorize(watch->context, absl::StrCat("Bearer ", kToken));
  watch->reader = media_->Watch(&watch->context, pb::WatchRequest());
  watch->reader->WaitForInitialMetadata();
  EXPECT_EQ(server_->watcher_count(), 1u);
  ASSERT_TRUE(vm_.cd0_media->SetTrayOpen(true, false).ok());
  pb::MediaEvent event;
  ASSERT_TRUE(watch->reader->Read(&event));
  EXPECT_EQ(event.type(), pb::MediaEvent::TRAY_OPENED);
  watch->context.TryCancel();
  while (watch->reader->Read(&event)) {
  }
  watch->reader->Finish();
}

// Server reflection is guarded too: cancelled before it answers without the token (a server
// interceptor cannot answer UNAUTHENTICATED), served with it.
TEST_F(ApiServerTest, ReflectionNeedsTheToken) {
  StartServer({.unix_socket_path = socket_path_, .auth_token = kToken});
  for (const std::string& authorization : {std::string(), std::string("Bearer nope")}) {
    grpc::ClientContext context;
    Deadline(context);
    Authorize(context, authorization);
    std::string text;
    const grpc::Status status = ListServicesByReflection(channel_.get(), context, &text);
    EXPECT_EQ(status.error_code(), StatusCode::CANCELLED) << authorization;
    EXPECT_EQ(text.find("vmm.v1"), std::string::npos) << text;
  }
  grpc::ClientContext context;
  Deadline(context);
  Authorize(context, absl::StrCat("Bearer ", kToken));
  std::string text;
  const grpc::Status status = ListServicesByReflection(channel_.get(), context, &text);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_NE(text.find("vmm.v1.VmService"), std::string::npos) << text;
}

// vmmctl, the real client, against the real server over TCP: --api-token-file (or
// MICROVM_API_TOKEN_FILE) is what lets it in.
TEST_F(ApiServerTest, VmmctlSendsTheTokenFromItsFile) {
  auto server = ApiServer::Start({.tcp_address = "127.0.0.1:0", .auth_token = kToken}, vm_);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->tcp_port());
  const std::string token_file = dir_ + "/token";
  std::ofstream(token_file) << kToken << "\n";
  chmod(token_file.c_str(), 0600);
  const std::string wrong_file = dir_ + "/wrong-token";
  std::ofstream(wrong_file) << "not-the-token\n";
  const std::string vmmctl =
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"), "/api/vmmctl");
  // Runs vmmctl; its exit status.
  auto run = [&](std::vector<std::string> args, const std::string& env_token_file) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
      if (env_token_file.empty()) {
        unsetenv("MICROVM_API_TOKEN_FILE");
      } else {
        setenv("MICROVM_API_TOKEN_FILE", env_token_file.c_str(), 1);
      }
      std::vector<char*> argv{const_cast<char*>("vmmctl")};
      for (std::string& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(vmmctl.c_str(), argv.data());
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(run({"--api", address, "vm", "info"}, ""), 1);  // UNAUTHENTICATED
  EXPECT_EQ(run({"--api", address, "--api-token-file", wrong_file, "vm", "info"}, ""), 1);
  EXPECT_EQ(run({"--api", address, "--api-token-file", token_file, "vm", "info"}, ""), 0);
  EXPECT_EQ(run({"--api", address, "vm", "info"}, token_file), 0);
  EXPECT_EQ(run({"--api", address, "--api-token-file", dir_ + "/missing", "vm", "info"}, ""), 2);
}

// ---- The socket's mode: the process's umask ----

// The socket is bound at its path, so its mode is what the umask leaves: a umask that lets group
// or others in is refused before anything is bound (a socket of mode 0755 would be anyone's to
// connect to, however briefly), and the server never changes the umask itself (other threads
// create files meanwhile).
TEST_F(ApiServerTest, APermissiveUmaskIsRefusedAndLeftAsItIs) {
  const mode_t saved = umask(0022);
  auto server = ApiServer::Start({.unix_socket_path = socket_path_}, vm_);
  EXPECT_EQ(umask(saved), 0022u) << "the server changed the umask";
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(server.status().message().find("umask is 0022"), std::string::npos) << server.status();
  struct stat st {};
  EXPECT_NE(lstat(socket_path_.c_str(), &st), 0) << "a socket was bound";
}

// ---- Requests as the user sends them (issue 17) ----

// Sends `bytes` as the request of the unary method `method` ("/vmm.v1.MediaService/Insert").
grpc::Status RawUnaryCall(grpc::Channel* channel, const std::string& method,
                          const std::string& bytes) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer reply;
  return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel, grpc::internal::RpcMethod(method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC),
      &context, request, &reply);
}

// A request that does not parse is the caller's mistake: INVALID_ARGUMENT naming the message,
// never gRPC's INTERNAL with an empty message. Nothing changes.
TEST_F(ApiServerTest, MalformedRequestIsInvalidArgument) {
  StartServer();
  const auto before = vm_.cd1_media->Current();
  // Field 2 (path), length 2, bytes that are not UTF-8: proto3 refuses to parse the string.
  const std::string not_utf8 = std::string(
      "\x0a\x03"
      "cd1"
      "\x12\x02"
      "\xff\xfe",
      9);
  const std::string truncated =
      "\x0a\x10"
      "cd1";  // a field longer than the message
  for (const auto& [method, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"/vmm.v1.MediaService/Insert", not_utf8},
           {"/vmm.v1.MediaService/Insert", truncated},
           {"/vmm.v1.MediaService/Eject", "\xff\xff\xff"},
           {"/vmm.v1.VmService/Shutdown", "\x0f"},
       }) {
    SCOPED_TRACE(method);
    const grpc::Status status = RawUnaryCall(channel_.get(), method, bytes);
    EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find("malformed request: not a vmm.v1."), std::string::npos)
        << status.error_message();
  }
  EXPECT_EQ(vm_.cd1_media->Current(), before);
  {
    absl::MutexLock lock(&vm_.mutex);
    EXPECT_TRUE(vm_.shutdowns.empty());
  }
  // A well-formed request still works, and a bad one on a stream is refused the same way.
  pb::DriveStatus status;
  EXPECT_TRUE(Status("cd0", &status).ok());
  grpc::ClientContext context;
  Deadline(context);
  grpc::internal::RpcMethod watch("/vmm.v1.MediaService/Watch",
                                  grpc::internal::RpcMethod::SERVER_STREAMING);
  grpc::Slice slice(std::string("\xff\xff"));
  grpc::ByteBuffer request(&slice, 1);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel_.get(), watch, &context,
                                                                    request));
  grpc::ByteBuffer event;
  EXPECT_FALSE(reader->Read(&event));
  const grpc::Status finished = reader->Finish();
  EXPECT_EQ(finished.error_code(), StatusCode::INVALID_ARGUMENT) << finished.error_message();
  EXPECT_NE(finished.error_message().find("vmm.v1.WatchRequest"), std::string::npos);
}

// A relative path is relative to the VMM's working directory; the medium's source is reported
// absolute (issue 17), so that it names the file for every reader.
TEST_F(ApiServerTest, RelativeInsertPathIsMadeAbsolute) {
  StartServer();
  char cwd[PATH_MAX];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(chdir(dir_.c_str()), 0);
  pb::DriveStatus status;
  const grpc::Status inserted = Insert("cd1", "./other.iso", &status);
  const grpc::Status missing = Insert("cd1", "sub/missing.iso", &status);
  ASSERT_EQ(chdir(cwd), 0);
  ASSERT_TRUE(inserted.ok()) << inserted.error_message();
  EXPECT_EQ(vm_.cd1_media->Current()->source, iso2_);
  pb::DriveStatus now;
  ASSERT_TRUE(Status("cd1", &now).ok());
  EXPECT_EQ(now.source(), iso2_);
  EXPECT_EQ(missing.error_code(), StatusCode::FAILED_PRECONDITION);  // cd1 is full now
  ASSERT_TRUE(Eject("cd1", false, &status).ok());
  ASSERT_EQ(chdir(dir_.c_str()), 0);
  const grpc::Status not_found = Insert("cd1", "sub/missing.iso", &status);
  ASSERT_EQ(chdir(cwd), 0);
  EXPECT_EQ(not_found.error_code(), StatusCode::NOT_FOUND);
  EXPECT_NE(not_found.error_message().find(dir_ + "/sub/missing.iso"), std::string::npos)
      << not_found.error_message();
}

// The block layer's "open PATH: reason" reads "insert: PATH: reason", not "cannot open the
// medium open PATH" (issue 17).
TEST_F(ApiServerTest, MediumErrorsNameThePathOnce) {
  StartServer();
  pb::DriveStatus status;
  const grpc::Status missing = Insert("cd1", dir_ + "/missing.iso", &status);
  EXPECT_EQ(missing.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(missing.error_message(),
            "insert: cannot use '" + dir_ + "/missing.iso': No such file or directory");
  {
    absl::MutexLock lock(&vm_.mutex);
    vm_.denied.insert(iso_);
  }
  const grpc::Status denied = Insert("cd1", iso_, &status);
  EXPECT_EQ(denied.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(denied.error_message(), "insert: " + iso_ + ": permission denied");
  EXPECT_EQ(denied.error_message().find("open"), std::string::npos);
}

}  // namespace
}  // namespace api
