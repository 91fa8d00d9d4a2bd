// Running real processes from tests: argv in; exit code, stdout and stderr out; a hard timeout so a hung
// child fails the test instead of hanging the suite.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace tessera::testing {

struct ProcessResult {
  int exit_code = -1;  // exit status, or 128 + signal number when killed by a signal
  bool timed_out = false;
  std::string out;
  std::string err;
};

ProcessResult run_process(const std::vector<std::string>& argv, double timeout_seconds = 60.0);

// A long-running child (a server): started with stdout piped, killed (SIGKILL) when destroyed unless it
// was stopped. stderr goes to the test's stderr.
class BackgroundProcess {
 public:
  explicit BackgroundProcess(const std::vector<std::string>& argv);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  bool started() const { return pid_ > 0; }
  int pid() const { return pid_; }
  // Reads stdout until a line contains `needle`; returns that line, or "" on timeout or exit.
  std::string wait_for_line(const std::string& needle, double timeout_seconds = 30.0);
  // Sends `signal` and waits up to `timeout_seconds`; returns the exit code (128 + signal when killed,
  // -1 on timeout, after which the child is SIGKILLed).
  int stop(int signal, double timeout_seconds = 15.0);

 private:
  int pid_ = -1;
  int out_fd_ = -1;
  std::string buffer_;
};

// The port in a "listening on http://HOST:PORT" line, or 0.
int port_from_line(const std::string& line);

// A `tessera` command that listens (serve, route, ctrl, ...): `args` after the binary's path, and its URL once it
// printed "listening on" (empty, with a test failure, when it did not within `timeout_seconds`).
struct TesseraServer {
  std::unique_ptr<BackgroundProcess> p;
  std::string url;
};
TesseraServer start_tessera(std::vector<std::string> args, double timeout_seconds = 60.0);

// A family's shape at test size as an f32 GGUF at `out` (`tessera synth --small`, 256 wide, a 512 hidden layer,
// `layers` layers, seed 7, byte tokens kept rare; `extra` flags after those). Returns `out`, or "" when it failed
// (the test has said why). Qwen3.5's pattern: linear and full attention in turn, full every other layer.
std::string synth_small_gguf(const std::string& out, const std::string& shape, int layers,
                             const std::vector<std::string>& extra = {});

}  // namespace tessera::testing
