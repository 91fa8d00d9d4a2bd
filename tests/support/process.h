// Running real processes from tests: argv in; exit code, stdout and stderr out; a hard timeout so a hung
// child fails the test instead of hanging the suite.
#pragma once

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

}  // namespace tessera::testing
