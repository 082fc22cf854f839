#include "tests/integration/subprocess.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "absl/time/clock.h"

namespace tests {

ProcessResult RunProcess(const std::vector<std::string>& argv, const ProcessOptions& options) {
  ProcessResult result;
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 ||
      pipe2(err_pipe, O_CLOEXEC) != 0) {
    result.err = "pipe failed";
    return result;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    if (options.without_file_capabilities && geteuid() == 0) {
      for (const int capability : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER}) {
        if (prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0) _exit(126);
      }
    }
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  signal(SIGPIPE, SIG_IGN);
  if (!options.stdin_data.empty()) {
    (void)!write(in_pipe[1], options.stdin_data.data(), options.stdin_data.size());
  }
  int stdin_fd = in_pipe[1];
  if (!options.keep_stdin_open) {
    close(stdin_fd);
    stdin_fd = -1;
  }

  const absl::Time deadline = absl::Now() + options.timeout;
  bool signalled = false;
  int open_fds = 2;
  int fds[2] = {out_pipe[0], err_pipe[0]};
  size_t lines_seen = 0;  // result.out up to here went to on_output_line
  while (open_fds > 0) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      kill(pid, SIGKILL);
      result.timed_out = true;
      break;
    }
    pollfd polled[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    const int ready = poll(polled, 2, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || polled[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t count = read(fds[i], buffer, sizeof(buffer));
      if (count <= 0) {
        close(fds[i]);
        fds[i] = -1;
        --open_fds;
        continue;
      }
      (i == 0 ? result.out : result.err).append(buffer, static_cast<size_t>(count));
    }
    if (options.on_output_line) {
      size_t newline;
      while ((newline = result.out.find('\n', lines_seen)) != std::string::npos) {
        const std::string reply =
            options.on_output_line(result.out.substr(lines_seen, newline - lines_seen));
        lines_seen = newline + 1;
        if (!reply.empty() && stdin_fd >= 0) (void)!write(stdin_fd, reply.data(), reply.size());
      }
    }
    if (options.signal != 0 && !signalled &&
        result.out.find(options.signal_after_output) != std::string::npos) {
      kill(pid, options.signal);
      signalled = true;
    }
  }
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (stdin_fd >= 0) close(stdin_fd);
  if (WIFEXITED(status)) {
    result.exited = true;
    result.exit_status = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace tests
