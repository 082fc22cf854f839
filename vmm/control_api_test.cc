// The control API through its plugin, as microvm loads it: libmicrovm_api.so from beside the
// executable, a real server on a unix socket that answers only after Serve(), one real call, Stop
// removing the socket; and the
// errors for a directory without the plugin. The call goes through gRPC's generic stub: this test
// must not link the generated vmm.v1 code, which the plugin registers with protobuf itself.

#include "vmm/control_api.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "api/listen_address.h"
#include "api/vm_control.h"
#include "gtest/gtest.h"

namespace vmm {
namespace {

class NoDrivesVm : public api::VmControl {
 public:
  std::vector<api::DriveEntry> Drives() const override { return {}; }
  absl::StatusOr<std::shared_ptr<block::BlockBackend>> OpenMedium(const std::string&) override {
    return absl::UnimplementedError("no media here");
  }
  api::VmStatus Status() const override {
    api::VmStatus status;
    status.vcpus = 3;
    status.kernel = "plugin-test-kernel";
    return status;
  }
  absl::Status Pause() override { return absl::OkStatus(); }
  absl::Status Resume() override { return absl::OkStatus(); }
  absl::Status Shutdown(bool, absl::Duration) override { return absl::OkStatus(); }
};

// A file in the directory Bazel builds microvm and the plugin into (the runfiles' vmm/).
std::string ExecutableBesidePlugin() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"),
                      "/vmm/microvm");
}

// Unix socket paths are short (108 bytes): Bazel's TEST_TMPDIR is too deep for one.
std::string ShortTempDir() {
  char dir[] = "/tmp/control_api_test.XXXXXX";
  return mkdtemp(dir) != nullptr ? dir : "/tmp";
}

bool IsSocket(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// VmService.GetInfo with an empty request over the unix socket at `path`; the reply's bytes.
grpc::Status GetInfo(const std::string& path, absl::Duration timeout, std::string* bytes) {
  auto channel = grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::CompletionQueue queue;
  grpc::Slice empty_message;  // GetInfoRequest has no fields: zero bytes, but a real buffer
  grpc::ByteBuffer request(&empty_message, 1), reply;
  auto call = stub.PrepareUnaryCall(&context, "/vmm.v1.VmService/GetInfo", request, &queue);
  call->StartCall();
  grpc::Status status;
  call->Finish(&reply, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  queue.Next(&tag, &ok);
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  if (status.ok()) {
    std::vector<grpc::Slice> slices;
    if (reply.Dump(&slices).ok()) {
      for (const grpc::Slice& slice : slices) bytes->append(slice.begin(), slice.end());
    }
  }
  return status;
}

// The launchers' order (vmm/launch_sequence.h): the plugin's server listens from the start, and
// answers only once Serve() is called (inside the jail).
TEST(ControlApiTest, PluginListensServesOnServeAndStopRemovesTheSocket) {
  NoDrivesVm vm;
  api::ApiServerOptions options;
  const std::string dir = ShortTempDir();
  umask(0177);  // the launchers' (vmm/command_line.h): the server binds its socket under it
  options.unix_socket_path = absl::StrCat(dir, "/api.sock");
  options.stop_grace = absl::Milliseconds(100);
  auto listeners = api::BindApiListeners(options);
  ASSERT_TRUE(listeners.ok()) << listeners.status();
  auto server = StartControlApi(options, *std::move(listeners), vm, ExecutableBesidePlugin());
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->unix_socket_path(), options.unix_socket_path);
  EXPECT_EQ((*server)->tcp_port(), 0);
  ASSERT_TRUE(IsSocket(options.unix_socket_path));

  // Not serving yet: the caller's connection waits in the backlog, and nobody answers.
  std::string bytes;
  EXPECT_EQ(GetInfo(options.unix_socket_path, absl::Milliseconds(700), &bytes).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);

  // Serving: the reply carries the fake's kernel name.
  ASSERT_TRUE((*server)->Serve().ok());
  ASSERT_TRUE((*server)->Serve().ok());  // idempotent
  const grpc::Status status = GetInfo(options.unix_socket_path, absl::Seconds(10), &bytes);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_NE(bytes.find("plugin-test-kernel"), std::string::npos);

  (*server)->Stop();
  EXPECT_FALSE(IsSocket(options.unix_socket_path));
  EXPECT_EQ((*server)->Serve().code(), absl::StatusCode::kFailedPrecondition);
  server->reset();  // and the plugin is unloaded after its server
  rmdir(dir.c_str());
}

TEST(ControlApiTest, MissingPluginIsAClearError) {
  NoDrivesVm vm;
  api::ApiServerOptions options;
  options.unix_socket_path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/never.sock");
  const std::string lonely = absl::StrCat(std::getenv("TEST_TMPDIR"), "/bin/microvm");
  auto server = StartControlApi(options, api::ApiListeners{}, vm, lonely);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(server.status().message().find(
                absl::StrCat(std::getenv("TEST_TMPDIR"), "/bin/libmicrovm_api.so")),
            std::string::npos)
      << server.status();
  EXPECT_FALSE(IsSocket(options.unix_socket_path));
}

TEST(ControlApiTest, ALibraryWithoutTheEntryPointIsRefused) {
  // zlib is a shared object that loads fine but is no plugin: name it as the plugin.
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/wrong");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(
      symlink("/lib/x86_64-linux-gnu/libz.so.1", absl::StrCat(dir, "/libmicrovm_api.so").c_str()),
      0);
  NoDrivesVm vm;
  api::ApiServerOptions options;
  options.unix_socket_path = absl::StrCat(dir, "/api.sock");
  auto server = StartControlApi(options, api::ApiListeners{}, vm, absl::StrCat(dir, "/microvm"));
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("microvm_start_control_server"), std::string::npos)
      << server.status();
}

}  // namespace
}  // namespace vmm
