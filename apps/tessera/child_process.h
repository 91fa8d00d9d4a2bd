// A child process with a pipe to its stdin and from its stdout, for commands that drive a second process
// (link bench runs its remote side this way). Killed and reaped on destruction.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::cli {

class ChildProcess {
 public:
  static Result<ChildProcess> spawn(const std::vector<std::string>& argv);
  ChildProcess(ChildProcess&& o) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ~ChildProcess();

  // The next line of the child's stdout (without the newline); DeadlineExceeded after timeout_ms.
  Result<std::string> read_line(int timeout_ms);
  pid_t pid() const { return pid_; }
  void kill_now();

 private:
  ChildProcess(pid_t pid, int in, int out) : pid_(pid), in_(in), out_(out) {}
  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
  std::string buffer_;
};

// The path of the running executable (/proc/self/exe).
std::string self_exe();

}  // namespace tessera::cli
