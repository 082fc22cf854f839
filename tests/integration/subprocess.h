#ifndef TESTS_INTEGRATION_SUBPROCESS_H_
#define TESTS_INTEGRATION_SUBPROCESS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tests {

struct ProcessResult {
  bool exited = false;  // exited normally (else killed by a signal, see term_signal)
  int exit_status = -1;
  int term_signal = 0;
  bool timed_out = false;  // killed by RunProcess after `timeout`
  std::string out;
  std::string err;
};

struct ProcessOptions {
  std::string stdin_data;        // written to the child's stdin, which is then closed
  bool keep_stdin_open = false;  // leave stdin open (until the child exits) after writing
  absl::Duration timeout = absl::Seconds(60);
  // If set, the signal is sent once `signal_after_output` appears on stdout.
  int signal = 0;
  std::string signal_after_output;
  // If set, called on the calling thread with every complete line of stdout (without its newline)
  // as it arrives; what it returns is written to the child's stdin (with keep_stdin_open; ignored
  // once stdin is closed). A test answers its guest's "@@..." lines this way.
  std::function<std::string(const std::string& line)> on_output_line;
  // Run as a caller that file permissions apply to: a root parent's child keeps its uid (it still
  // opens what root owns, /dev/kvm) but loses CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER
  // from its bounding set before exec, so a file of mode 0000 or a directory without search
  // permission is refused as it would be to an ordinary user. A non-root parent's child is already
  // such a caller. (A setresuid to an unused uid, tests/support/unprivileged.h, would also lose
  // /dev/kvm.)
  bool without_file_capabilities = false;
};

// Runs argv[0] with arguments, capturing stdout and stderr; kills it with SIGKILL after the timeout.
ProcessResult RunProcess(const std::vector<std::string>& argv, const ProcessOptions& options = {});

}  // namespace tests

#endif  // TESTS_INTEGRATION_SUBPROCESS_H_
