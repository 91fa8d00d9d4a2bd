// A child process this one supervises: started with fork/exec, its stdout piped back (read line by line), its
// stdin optionally piped (closing it is the child's cue to exit), its stderr into a file, optionally pinned to
// CPUs and tied to this process's life. The one supervisor of the project: `tessera up` runs its cluster with
// it, `tessera link bench` its remote side.
//
// Stopping: terminate() sends SIGTERM (a node drains) and SIGKILL after the grace period; the destructor closes
// stdin, waits a second for the child to exit on its own, then kills it. A stopped child is always reaped.
//
// Thread-safety: one Process is used from one thread at a time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera {

struct ProcessOptions {
  std::vector<std::string> argv;  // argv[0] is the executable's path
  bool pipe_stdin = false;        // a pipe to the child's stdin (write_stdin); otherwise it inherits ours
  std::string stderr_file;        // the child's stderr goes here (truncated); empty: inherited
  std::vector<int> cpus;          // pin the child to these CPUs (best effort); empty: not pinned
  // The kernel sends the child SIGTERM when this thread's process is gone, even SIGKILLed (PR_SET_PDEATHSIG).
  bool die_with_parent = false;
};

class Process {
 public:
  // Unavailable naming argv[0] when it cannot be started (the pipe, fork, or exec failed).
  static Result<Process> spawn(ProcessOptions options);
  Process(Process&& o) noexcept;
  Process& operator=(Process&&) = delete;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();

  // The next line of its stdout, without the newline. DeadlineExceeded after timeout_ms; Unavailable when the
  // child closed its stdout (exited) first.
  Result<std::string> read_line(int timeout_ms);
  // Reads lines until one contains `marker`; returns that line (earlier ones are dropped).
  Result<std::string> wait_for_line(std::string_view marker, int timeout_ms);
  Status write_stdin(std::string_view bytes);
  // SIGTERM, then SIGKILL if it has not exited within `grace`; reaps it. Returns its exit status as waitpid
  // gave it (-1 when it was not running).
  int terminate(std::chrono::milliseconds grace);
  void kill_now();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  Process(pid_t pid, int in, int out) : pid_(pid), in_(in), out_(out) {}
  void close_fds();
  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
  std::string buffer_;
};

// The path of the running executable (/proc/self/exe resolved), for starting another of ourselves.
std::string self_exe();

}  // namespace tessera
