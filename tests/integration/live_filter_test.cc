// The sandbox as a compromised thread meets it (issue 23's acceptance, the way its review worked):
// a real vhost-user-scsi runs jailed (no /dev/kvm needed); the seccomp programs installed on its
// threads and on its supervisor are copied off the live processes (PTRACE_SECCOMP_GET_FILTER),
// and probe processes run under exactly those programs, as root outside the jail (the filter the
// only barrier) or inside the VMM's jail as its user, with the VMM's own descriptors
// (pidfd_getfd). What a probe tries is what got through before:
//   N1  opening a file and a socket through the VMM's own io_uring ring; H19 a new ring made by a
//       control thread, which would carry no restriction;
//   N2  an outside path through any descriptor the VMM holds (the media directory's above all);
//   N4  TIOCSTI into a terminal, an ioctl the VMM never issues;
//   N5  MSG_FASTOPEN, UDP, connect, any internet socket, although the VMM serves --api-tcp (its
//       listener is bound before the sandbox, and the jail has a network namespace of its own);
//   N7  tgkill and kill of another process, PR_SET_DUMPABLE 1, chmod, link, rename and unlink of
//       files in and out of the jail, a setuid program made with open(O_CREAT);
//   N11 a descriptor inherited from whoever started the VMM.
// The vCPU threads' programs are microvm's, which needs KVM: thread_policy_test runs the same
// allowlists in process.
#include <fcntl.h>
#include <grp.h>
#include <liburing.h>
#include <linux/filter.h>
#include <linux/fs.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/integration/test_util.h"
#include "tests/support/raw_http2.h"
#include "tests/support/skip.h"
#include "vmm/sys_util/exit_now.h"

namespace tests {
namespace {

constexpr char kVhostUserScsi[] = "vmm/vhost-user-scsi";
constexpr uid_t kJailUser = 65534;

using ::sys_util::ExitNow;

using Program = std::vector<sock_filter>;

// Every seccomp program on thread `tid`, oldest first (the order to install them in again: each
// must allow seccomp() for the next). PTRACE_SECCOMP_GET_FILTER numbers them from the oldest (0).
std::vector<Program> FiltersOf(pid_t tid) {
  std::vector<Program> programs;
  if (ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) {
    ADD_FAILURE() << "PTRACE_SEIZE " << tid << ": " << strerror(errno);
    return programs;
  }
  ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
  int status = 0;
  waitpid(tid, &status, __WALL);
  for (long index = 0;; ++index) {
    const long count = ptrace(PTRACE_SECCOMP_GET_FILTER, tid, index, nullptr);
    if (count <= 0) break;
    Program program(count);
    ptrace(PTRACE_SECCOMP_GET_FILTER, tid, index, program.data());
    programs.push_back(std::move(program));
  }
  ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
  return programs;
}

void Install(const std::vector<Program>& programs) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ExitNow(120);
  for (const Program& program : programs) {
    sock_fprog fprog{static_cast<unsigned short>(program.size()),
                     const_cast<sock_filter*>(program.data())};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) != 0) ExitNow(121);
  }
}

// How a probe's attempt ended: "done" (it worked: the finding is back), "errno N" (refused
// quietly), "trapped" (SIGSYS: the filter's kill), or "status N" for anything else.
std::string Attempt(const std::function<void()>& set_up, const std::vector<Program>& programs,
                    const std::function<int()>& attempt) {
  const pid_t probe = fork();
  if (probe == 0) {
    set_up();
    Install(programs);
    const int result = attempt();  // >= 0 worked, < 0 -errno
    ExitNow(result >= 0 ? 0 : 1 + (-result % 100));
  }
  int status = 0;
  waitpid(probe, &status, 0);
  if (WIFSIGNALED(status)) {
    return WTERMSIG(status) == SIGSYS ? "trapped" : absl::StrCat("signal ", WTERMSIG(status));
  }
  const int code = WEXITSTATUS(status);
  if (code == 0) return "done";
  if (code > 100) return absl::StrCat("status ", code);
  return absl::StrCat("errno ", code - 1);
}

int Result(long value) { return value >= 0 ? 0 : -errno; }

std::string Errno(int error) { return absl::StrCat("errno ", error); }

class LiveFilterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) MICROVM_SKIP("the jail and ptrace of its threads need root");
    // Short: the sockets' paths must fit in sun_path, which Bazel's TEST_TMPDIR does not.
    char directory[] = "/tmp/live-filter.XXXXXX";
    ASSERT_NE(mkdtemp(directory), nullptr);
    dir_ = directory;
    ASSERT_EQ(mkdir((dir_ + "/media").c_str(), 0755), 0);
    ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
    WriteFile(dir_ + "/disk.img", std::string(16 << 20, '\0'));
    WriteFile(dir_ + "/media/disc.iso", std::string(4096, 'x'));
    ASSERT_EQ(chmod((dir_ + "/media/disc.iso").c_str(), 0644), 0);
    // Descriptors whoever starts the VMM might leave open: a directory of the host's and a pipe.
    inherited_dir_ = open("/", O_RDONLY | O_DIRECTORY);
    ASSERT_EQ(pipe(inherited_pipe_), 0);
    struct stat pipe_stat {};
    fstat(inherited_pipe_[0], &pipe_stat);
    inherited_pipe_inode_ = absl::StrCat("pipe:[", pipe_stat.st_ino, "]");

    supervisor_ = fork();
    if (supervisor_ == 0) {
      const int log = open((dir_ + "/log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(log, 1);
      dup2(log, 2);
      const int devnull = open("/dev/null", O_RDONLY);
      dup2(devnull, 0);
      // An ASan build's LeakSanitizer reads /proc at exit, which the jail does not have.
      setenv("LSAN_OPTIONS", "detect_leaks=0", 1);
      const std::string socket = "--socket=" + dir_ + "/vhost.sock";
      const std::string disk = "--disk=" + dir_ + "/disk.img,cache=none";
      const std::string api = "--api-socket=" + dir_ + "/api.sock";
      const std::string media = "--media-dir=" + dir_ + "/media";
      // Port 0: the kernel's pick, printed in the log.
      execl(kVhostUserScsi, kVhostUserScsi, socket.c_str(), disk.c_str(), api.c_str(),
            "--api-tcp=127.0.0.1:0", "--api-tcp-insecure", media.c_str(), "--jail=on",
            static_cast<char*>(nullptr));
      ExitNow(127);
    }
    close(inherited_dir_);
    close(inherited_pipe_[0]);
    close(inherited_pipe_[1]);
    // Up when it listens (it enters the jail just before).
    for (int i = 0; i < 200 && !absl::StrContains(ReadFile(dir_ + "/log"), "listening on"); ++i) {
      int status = 0;
      if (waitpid(supervisor_, &status, WNOHANG) == supervisor_) {
        supervisor_ = -1;
        FAIL() << "vhost-user-scsi exited: " << ReadFile(dir_ + "/log");
      }
      usleep(50000);
    }
    ASSERT_TRUE(absl::StrContains(ReadFile(dir_ + "/log"), "listening on"))
        << ReadFile(dir_ + "/log");
    usleep(200000);
    const std::string children =
        ReadFile(absl::StrCat("/proc/", supervisor_, "/task/", supervisor_, "/children"));
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(children), &vmm_))
        << "no VMM under the supervisor";
    for (const std::string& task : Listing(absl::StrCat("/proc/", vmm_, "/task"))) {
      std::string name(absl::StripAsciiWhitespace(
          ReadFile(absl::StrCat("/proc/", vmm_, "/task/", task, "/comm"))));
      int tid = 0;
      if (absl::SimpleAtoi(task, &tid)) threads_[name] = tid;
    }
    // A process of no concern to the VMM, for the signal probes.
    bystander_ = fork();
    if (bystander_ == 0) {
      for (;;) pause();
    }
  }

  void TearDown() override {
    if (bystander_ > 0) {
      kill(bystander_, SIGKILL);
      waitpid(bystander_, nullptr, 0);
    }
    if (supervisor_ > 0) {
      kill(supervisor_, SIGTERM);
      int status = 0;
      waitpid(supervisor_, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n"
                                                                 << ReadFile(dir_ + "/log");
      // The jailed VMM cannot reach its sockets' paths; its janitor removed them before the
      // VMM's exit status was known.
      struct stat st {};
      EXPECT_NE(lstat((dir_ + "/vhost.sock").c_str(), &st), 0) << "the vhost-user socket stayed";
      EXPECT_NE(lstat((dir_ + "/api.sock").c_str(), &st), 0) << "the API socket stayed";
    }
    if (!dir_.empty()) std::system(("rm -rf " + dir_).c_str());
  }

  static std::vector<std::string> Listing(const std::string& directory) {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(directory)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }

  // The VMM's descriptors: number -> what /proc shows.
  std::map<int, std::string> Descriptors(pid_t pid) const {
    std::map<int, std::string> descriptors;
    for (const std::string& name : Listing(absl::StrCat("/proc/", pid, "/fd"))) {
      int fd = 0;
      char target[512] = {};
      const std::string link = absl::StrCat("/proc/", pid, "/fd/", name);
      if (absl::SimpleAtoi(name, &fd) && readlink(link.c_str(), target, sizeof(target) - 1) > 0) {
        descriptors[fd] = target;
      }
    }
    return descriptors;
  }

  // Copies of every descriptor of the VMM into this process (pidfd_getfd(2)): number -> copy.
  std::map<int, int> CopyDescriptors() const {
    std::map<int, int> copies;
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, vmm_, 0));
    EXPECT_GE(pidfd, 0) << strerror(errno);
    for (const auto& [fd, target] : Descriptors(vmm_)) {
      const int copy = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0));
      if (copy >= 0) copies[fd] = copy;
    }
    close(pidfd);
    return copies;
  }

  // For probes inside the jail: the VMM's mount namespace and root, its user.
  std::function<void()> IntoTheJail() const {
    const int ns = open(absl::StrCat("/proc/", vmm_, "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC);
    const int root =
        open(absl::StrCat("/proc/", vmm_, "/root").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    EXPECT_GE(ns, 0);
    EXPECT_GE(root, 0);
    return [ns, root] {
      if (setns(ns, CLONE_NEWNS) != 0 || fchdir(root) != 0 || chroot(".") != 0 || chdir("/") != 0)
        ExitNow(110);
      if (setgroups(0, nullptr) != 0 || setresgid(kJailUser, kJailUser, kJailUser) != 0 ||
          setresuid(kJailUser, kJailUser, kJailUser) != 0) {
        ExitNow(111);
      }
    };
  }

  std::string dir_;
  pid_t supervisor_ = -1;
  pid_t bystander_ = -1;
  int vmm_ = 0;
  std::map<std::string, int> threads_;
  int inherited_dir_ = -1;
  int inherited_pipe_[2] = {-1, -1};
  std::string inherited_pipe_inode_;
};

const auto kNothing = [] {};

TEST_F(LiveFilterTest, TheControlFilterHoldsAsInstalled) {
  ASSERT_TRUE(threads_.count("vhost-user-scsi")) << "no main thread";
  const std::vector<Program> control = FiltersOf(threads_["vhost-user-scsi"]);
  ASSERT_EQ(control.size(), 1u) << "the main thread carries the process's filter only";
  // N4: TIOCSTI into a terminal (a pty this probe controls: as root the kernel would allow it).
  int master = -1, terminal = -1;
  ASSERT_EQ(openpty(&master, &terminal, nullptr, nullptr, nullptr), 0);
  EXPECT_EQ(Attempt(kNothing, control,
                    [&] {
                      char c = 'x';
                      return Result(ioctl(terminal, TIOCSTI, &c));
                    }),
            Errno(EPERM));
  close(master);
  close(terminal);
  // ioctl by request: one the VMM never issues is refused before any driver sees it (FIGETBSZ,
  // which the VFS would answer for any file).
  const int file = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  EXPECT_EQ(Attempt(kNothing, control,
                    [&] {
                      int block_size = 0;
                      return Result(ioctl(file, FIGETBSZ, &block_size));
                    }),
            Errno(ENOTTY));
  close(file);
  // H19: no new io_uring, whose entries (IORING_OP_UNLINKAT, CONNECT, ...) no filter sees.
  EXPECT_EQ(Attempt(kNothing, control,
                    [] {
                      io_uring_params params{};
                      return Result(syscall(SYS_io_uring_setup, 8, &params));
                    }),
            Errno(EPERM));
  // N5: a TCP connection opened by sendto(MSG_FASTOPEN), a UDP datagram, connect().
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  ASSERT_EQ(listen(listener, 1), 0);
  const int tcp = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(Attempt(kNothing, control,
                    [&] {
                      return Result(sendto(tcp, "x", 1, MSG_FASTOPEN,
                                           reinterpret_cast<sockaddr*>(&address), sizeof(address)));
                    }),
            Errno(EACCES));
  EXPECT_EQ(
      Attempt(kNothing, control,
              [&] {
                return Result(connect(tcp, reinterpret_cast<sockaddr*>(&address), sizeof(address)));
              }),
      Errno(EACCES));
  EXPECT_EQ(Attempt(kNothing, control, [] { return Result(socket(AF_INET, SOCK_DGRAM, 0)); }),
            Errno(EACCES));
  // Although this VMM serves --api-tcp: not even a stream socket of either internet family.
  EXPECT_EQ(Attempt(kNothing, control, [] { return Result(socket(AF_INET, SOCK_STREAM, 0)); }),
            Errno(EACCES));
  EXPECT_EQ(Attempt(kNothing, control, [] { return Result(socket(AF_INET6, SOCK_STREAM, 0)); }),
            Errno(EACCES));
  close(tcp);
  close(listener);
  // N7: signals to another process, dumpable again; and no process of its own (fork, exec).
  EXPECT_EQ(Attempt(kNothing, control,
                    [&] { return Result(syscall(SYS_tgkill, bystander_, bystander_, SIGTERM)); }),
            "trapped");
  EXPECT_EQ(Attempt(kNothing, control, [] { return Result(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)); }),
            Errno(EPERM));
  EXPECT_EQ(Attempt(kNothing, control, [] { return Result(execl("/bin/true", "true", nullptr)); }),
            "trapped");
#if !defined(__SANITIZE_ADDRESS__)
  // An ASan build's filter allows these for LeakSanitizer (vmm/sandbox/thread_policy.cc).
  EXPECT_EQ(Attempt(kNothing, control, [&] { return Result(kill(bystander_, SIGTERM)); }),
            "trapped");
  EXPECT_EQ(Attempt(kNothing, control, [] { return Result(syscall(SYS_fork)); }), "trapped");
  EXPECT_EQ(Attempt(kNothing, control,
                    [&] { return Result(ptrace(PTRACE_ATTACH, bystander_, nullptr, nullptr)); }),
            "trapped");
#endif
  // The bystander lived through all of it.
  EXPECT_EQ(kill(bystander_, 0), 0);
  // N7 (H18): as root, files are never re-moded, linked, renamed or removed. A program to make
  // setuid, a file to remove: the test's own.
  const std::string program = dir_ + "/program";
  WriteFile(program, "#!/bin/sh\n");
  ASSERT_EQ(chmod(program.c_str(), 0755), 0);
  EXPECT_EQ(Attempt(kNothing, control, [&] { return Result(chmod(program.c_str(), 04755)); }),
            "trapped");
  EXPECT_EQ(Attempt(kNothing, control,
                    [&] {
                      const int fd = open(program.c_str(), O_RDONLY);
                      return Result(fchmod(fd, 04755));
                    }),
            "trapped");
  EXPECT_EQ(Attempt(kNothing, control,
                    [&] { return Result(link(program.c_str(), (dir_ + "/copy").c_str())); }),
            "trapped");
  EXPECT_EQ(Attempt(kNothing, control,
                    [&] { return Result(rename(program.c_str(), (dir_ + "/moved").c_str())); }),
            "trapped");
  EXPECT_EQ(Attempt(kNothing, control, [&] { return Result(unlink(program.c_str())); }),
            Errno(EPERM));
  EXPECT_EQ(Attempt(kNothing, control, [&] { return Result(mkdir((dir_ + "/d").c_str(), 0755)); }),
            Errno(EPERM));
  EXPECT_EQ(Attempt(kNothing, control, [] { return Result(umask(0)); }), "trapped");
  struct stat program_stat {};
  ASSERT_EQ(stat(program.c_str(), &program_stat), 0);
  EXPECT_EQ(program_stat.st_mode & 07777, 0755u) << "the program was re-moded";
  // What a thread may still create, it creates under the VMM's umask (0177, which it cannot
  // change): asked for a setuid executable, it gets a file nobody can execute.
  const std::string created = dir_ + "/created";
  EXPECT_EQ(
      Attempt([] { umask(0177); }, control,
              [&] { return Result(open(created.c_str(), O_WRONLY | O_CREAT | O_EXCL, 04755)); }),
      "done");
  struct stat created_stat {};
  ASSERT_EQ(stat(created.c_str(), &created_stat), 0);
  EXPECT_EQ(created_stat.st_mode & 0111, 0u) << std::oct << created_stat.st_mode;
}

TEST_F(LiveFilterTest, TheIothreadCannotOpenOrConnectEvenThroughTheVmmsOwnRing) {
  ASSERT_TRUE(threads_.count("scsi-io0")) << "no iothread";
  const std::vector<Program> io = FiltersOf(threads_["scsi-io0"]);
  ASSERT_EQ(io.size(), 2u) << "the process's filter and the iothread's own";
  EXPECT_EQ(Attempt(kNothing, io, [] { return Result(open("/etc/passwd", O_RDONLY)); }),
            Errno(EACCES));
  EXPECT_EQ(Attempt(kNothing, io, [] { return Result(socket(AF_INET, SOCK_STREAM, 0)); }),
            Errno(EACCES));
  EXPECT_EQ(Attempt(kNothing, io,
                    [] {
                      io_uring_params params{};
                      return Result(syscall(SYS_io_uring_setup, 8, &params));
                    }),
            Errno(EPERM));
  // N1: the VMM's own ring (copied off it), mapped the way its kernel laid it out (a ring of the
  // same geometry tells the offsets), then an IORING_OP_OPENAT and an IORING_OP_SOCKET on it.
  int ring_fd = -1;
  std::map<int, int> copies = CopyDescriptors();
  for (const auto& [fd, target] : Descriptors(vmm_)) {
    if (target == "anon_inode:[io_uring]" && copies.count(fd)) ring_fd = copies[fd];
  }
  ASSERT_GE(ring_fd, 0) << "the VMM holds no io_uring ring";
  unsigned entries = 0;
  for (absl::string_view line :
       absl::StrSplit(ReadFile(absl::StrCat("/proc/self/fdinfo/", ring_fd)), '\n')) {
    if (absl::ConsumePrefix(&line, "SqMask:")) {
      absl::SimpleHexAtoi(absl::StripAsciiWhitespace(line), &entries);
      ++entries;
    }
  }
  ASSERT_GT(entries, 0u);
  io_uring geometry{};
  io_uring_params params{};
  ASSERT_EQ(io_uring_queue_init_params(entries, &geometry, &params), 0);
  io_uring_queue_exit(&geometry);
  for (const bool socket_op : {false, true}) {
    SCOPED_TRACE(socket_op ? "IORING_OP_SOCKET" : "IORING_OP_OPENAT");
    const std::string outcome = Attempt(kNothing, io, [&] {
      io_uring ring{};
      io_uring_params mapped = params;
      if (io_uring_queue_mmap(ring_fd, &mapped, &ring) != 0) ExitNow(150);
      ring.sq.sqe_head = ring.sq.sqe_tail = *ring.sq.ktail;
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (socket_op) {
        io_uring_prep_socket(sqe, AF_INET, SOCK_STREAM, 0, 0);
      } else {
        io_uring_prep_openat(sqe, AT_FDCWD, "/etc/passwd", O_RDONLY, 0);
      }
      io_uring_sqe_set_data64(sqe, 0x5ec0);
      io_uring_cqe* cqe = nullptr;
      const int submitted = io_uring_submit_and_wait(&ring, 1);
      if (submitted < 0) return submitted;
      while (io_uring_peek_cqe(&ring, &cqe) == 0 && cqe->user_data != 0x5ec0)
        io_uring_cqe_seen(&ring, cqe);
      if (cqe == nullptr) ExitNow(151);
      return cqe->res;
    });
    EXPECT_EQ(outcome, Errno(EACCES));
  }
  for (const auto& [fd, copy] : copies) close(copy);
}

TEST_F(LiveFilterTest, NothingTheVmmHoldsLeadsOutOfItsJail) {
  const std::map<int, std::string> descriptors = Descriptors(vmm_);
  // N11: neither inherited descriptor made it into the VMM, nor into its supervisor.
  for (const pid_t pid : {static_cast<pid_t>(vmm_), supervisor_}) {
    for (const auto& [fd, target] : Descriptors(pid)) {
      EXPECT_NE(target, "/") << "process " << pid << " holds the inherited directory as descriptor "
                             << fd;
      EXPECT_NE(target, inherited_pipe_inode_)
          << "process " << pid << " holds the inherited pipe as " << fd;
    }
  }
  // N2: inside the jail, as its user, under the main thread's filter: every directory the VMM
  // holds (the media directory, reopened inside) leads nowhere outside, with ".." or otherwise;
  // no host path exists; and the media it may read it cannot change.
  const std::vector<Program> control = FiltersOf(threads_["vhost-user-scsi"]);
  const std::map<int, int> copies = CopyDescriptors();
  int directories = 0;
  for (const auto& [fd, copy] : copies) {
    struct stat status {};
    if (fstat(copy, &status) != 0 || !S_ISDIR(status.st_mode)) continue;
    ++directories;
    SCOPED_TRACE(absl::StrCat("the VMM's descriptor ", fd, " (", descriptors.at(fd), ")"));
    EXPECT_EQ(Attempt(IntoTheJail(), control,
                      [copy = copy] {
                        return Result(openat(copy, "../../../../../../etc/passwd", O_RDONLY));
                      }),
              Errno(ENOENT));
  }
  EXPECT_EQ(directories, 1) << "the media directory is the VMM's one directory";
  EXPECT_EQ(Attempt(IntoTheJail(), control, [] { return Result(open("/etc/passwd", O_RDONLY)); }),
            Errno(ENOENT));
  EXPECT_EQ(Attempt(IntoTheJail(), control,
                    [&] { return Result(chmod((dir_ + "/media/disc.iso").c_str(), 04777)); }),
            "trapped");
  EXPECT_EQ(Attempt(IntoTheJail(), control,
                    [&] { return Result(unlink((dir_ + "/media/disc.iso").c_str())); }),
            Errno(EPERM));
  EXPECT_EQ(Attempt(IntoTheJail(), control,
                    [&] { return Result(open((dir_ + "/media/disc.iso").c_str(), O_RDONLY)); }),
            "done");
  for (const auto& [fd, copy] : copies) close(copy);
}

// --api-tcp: the listener was bound in the host's network namespace before the sandbox; the jailed
// VMM lives in a namespace of its own (nothing it could make would reach the host's network) and
// still serves on that listener.
TEST_F(LiveFilterTest, TheTcpApiServesFromANetworkNamespaceOfItsOwn) {
  char ours[64] = {}, its[64] = {};
  ASSERT_GT(readlink("/proc/self/ns/net", ours, sizeof(ours) - 1), 0);
  ASSERT_GT(readlink(absl::StrCat("/proc/", vmm_, "/ns/net").c_str(), its, sizeof(its) - 1), 0);
  EXPECT_STRNE(ours, its) << "the jailed VMM shares the host's network namespace";
  const std::string log = ReadFile(dir_ + "/log");
  const size_t at = log.find("(port ");
  ASSERT_NE(at, std::string::npos) << log;
  const int port = std::atoi(log.c_str() + at + 6);
  ASSERT_GT(port, 0) << log;
  // A raw HTTP/2 client's first bytes: gRPC answers with its own SETTINGS.
  const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0)
      << strerror(errno);
  ASSERT_TRUE(tests::SendHttp2Preface(client).ok());
  EXPECT_TRUE(tests::ServerAnswered(client, absl::Seconds(10)))
      << "no answer on the API's TCP port";
  EXPECT_TRUE(tests::FirstFrameIsSettings(client)) << "not a SETTINGS frame";
  close(client);
}

// The socket janitor (vmm/sandbox/socket_janitor.h): a process of its own, outside the jail, that
// may only read its pipe, look at paths and remove them.
TEST_F(LiveFilterTest, TheSocketJanitorMayOnlyReadStatAndRemove) {
  // Ours: named socket-janitor, with this test's --socket in its command line (a fork, no exec).
  pid_t janitor = -1;
  for (const std::string& name : Listing("/proc")) {
    int pid = 0;
    if (!absl::SimpleAtoi(name, &pid)) continue;
    if (absl::StripAsciiWhitespace(ReadFile(absl::StrCat("/proc/", pid, "/comm"))) !=
        "socket-janitor") {
      continue;
    }
    if (absl::StrContains(ReadFile(absl::StrCat("/proc/", pid, "/cmdline")), dir_)) janitor = pid;
  }
  ASSERT_GT(janitor, 0) << "no socket janitor for this VMM";
  // Not the supervisor's child (its one child is the VMM), nor the VMM's; a session of its own.
  const std::string status = ReadFile(absl::StrCat("/proc/", janitor, "/status"));
  EXPECT_EQ(status.find(absl::StrCat("PPid:\t", supervisor_, "\n")), std::string::npos) << status;
  EXPECT_EQ(status.find(absl::StrCat("PPid:\t", vmm_, "\n")), std::string::npos) << status;
  EXPECT_EQ(getsid(janitor), janitor);
  EXPECT_EQ(Descriptors(janitor).size(), 2u) << "the janitor holds more than its two pipes";
  const std::vector<Program> filter = FiltersOf(janitor);
  ASSERT_EQ(filter.size(), 1u);
  EXPECT_EQ(Attempt(kNothing, filter, [] { return Result(open("/etc/passwd", O_RDONLY)); }),
            "trapped");
  EXPECT_EQ(Attempt(kNothing, filter, [] { return Result(socket(AF_UNIX, SOCK_STREAM, 0)); }),
            "trapped");
  EXPECT_EQ(Attempt(kNothing, filter, [&] { return Result(chmod(dir_.c_str(), 0777)); }),
            "trapped");
  EXPECT_EQ(Attempt(kNothing, filter, [] { return Result(write(2, "x", 1)); }), "trapped");
  EXPECT_EQ(Attempt(kNothing, filter, [] { return Result(syscall(SYS_fork)); }), "trapped");
  const std::string scratch = dir_ + "/scratch";
  WriteFile(scratch, "x");
  EXPECT_EQ(Attempt(kNothing, filter, [&] { return Result(unlink(scratch.c_str())); }), "done");
}

TEST_F(LiveFilterTest, TheSupervisorMayOnlyWaitSignalAndExit) {
  const std::vector<Program> supervisor = FiltersOf(supervisor_);
  ASSERT_EQ(supervisor.size(), 1u);
  EXPECT_EQ(Attempt(kNothing, supervisor, [] { return Result(open("/etc/passwd", O_RDONLY)); }),
            "trapped");
  EXPECT_EQ(Attempt(kNothing, supervisor, [] { return Result(socket(AF_UNIX, SOCK_STREAM, 0)); }),
            "trapped");
  EXPECT_EQ(Attempt(kNothing, supervisor, [] { return Result(ioctl(0, TIOCSTI, "x")); }),
            "trapped");
  EXPECT_EQ(Attempt(kNothing, supervisor, [] { return Result(syscall(SYS_fork)); }), "trapped");
}

}  // namespace
}  // namespace tests
