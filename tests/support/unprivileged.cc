#include "tests/support/unprivileged.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_format.h"

namespace tests {
namespace {

bool IdHasAProcess(uid_t id) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    struct stat st {};
    if (stat(entry.path().c_str(), &st) == 0 && (st.st_uid == id || st.st_gid == id)) return true;
  }
  return false;
}

void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

uid_t UnusedId() {
  for (uid_t id = 4000000;; ++id) {
    if (getpwuid(id) == nullptr && getgrgid(id) == nullptr && !IdHasAProcess(id)) return id;
  }
}

absl::StatusOr<std::string> RunUnprivileged(absl::FunctionRef<std::string()> check) {
  const bool root = geteuid() == 0;
  const uid_t id = root ? UnusedId() : geteuid();
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrFormat("pipe2: %s", strerror(errno)));
  }
  const pid_t child = fork();
  if (child < 0) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return absl::InternalError(absl::StrFormat("fork: %s", strerror(errno)));
  }
  if (child == 0) {
    close(pipe_fds[0]);
    if (root) {
      const gid_t gid = static_cast<gid_t>(id);
      if (setgroups(0, nullptr) != 0 || setresgid(gid, gid, gid) != 0 ||
          setresuid(id, id, id) != 0) {
        WriteAll(pipe_fds[1], absl::StrFormat("cannot drop to uid %u: %s", id, strerror(errno)));
        _exit(2);
      }
    }
    if (geteuid() == 0 || getegid() == 0) {
      WriteAll(pipe_fds[1], "still root after dropping the ids");
      _exit(2);
    }
    WriteAll(pipe_fds[1], check());
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string output;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(pipe_fds[0], buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output.append(buffer, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrFormat("the unprivileged child (uid %u) failed: %s", id,
                                               output.empty() ? "no output" : output));
  }
  return output;
}

}  // namespace tests
