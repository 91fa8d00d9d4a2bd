// The child-process supervisor: lines from its stdout, its stderr in a file, its stdin as its cue to exit,
// SIGTERM then SIGKILL, and a program that does not exist or exits early reported, never waited on.
#include "base/process.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera {
namespace {

using namespace std::chrono_literals;

Process sh(const std::string& script, ProcessOptions o = {}) {
  o.argv = {"/bin/sh", "-c", script};
  auto p = Process::spawn(std::move(o));
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return std::move(*p);
}

TEST(Process, LinesFromStdoutAndStderrIntoAFile) {
  const std::string log = std::filesystem::temp_directory_path() / ("tessera-process-" + std::to_string(getpid()));
  Process p = sh("echo one; echo oops >&2; echo 'two listening on http://x:1 ok'; sleep 5", {.stderr_file = log});
  auto first = p.read_line(5000);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(*first, "one");
  auto found = p.wait_for_line("listening on", 5000);
  ASSERT_TRUE(found.ok()) << found.status().to_string();
  EXPECT_EQ(*found, "two listening on http://x:1 ok");
  auto none = p.read_line(100);
  EXPECT_EQ(none.status().code(), StatusCode::kDeadlineExceeded);
  const auto t0 = std::chrono::steady_clock::now();
  const int status = p.terminate(5s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "sh dies of SIGTERM at once";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_FALSE(p.running());
  std::stringstream err;
  err << std::ifstream(log).rdbuf();
  EXPECT_EQ(err.str(), "oops\n");
  std::filesystem::remove(log);
}

TEST(Process, SigkillAfterTheGraceWhenSigtermIsIgnored) {
  Process p = sh("trap '' TERM; echo ready; while :; do sleep 0.05; done");
  ASSERT_TRUE(p.wait_for_line("ready", 5000).ok());
  const int status = p.terminate(300ms);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

TEST(Process, StdinIsAPipeAndClosingItEndsTheChild) {
  Process p = sh("while read line; do echo \"got $line\"; done; echo bye", {.pipe_stdin = true});
  ASSERT_TRUE(p.write_stdin("hello\n").ok());
  auto got = p.read_line(5000);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "got hello");
  const pid_t pid = p.pid();
  {
    Process gone = std::move(p);  // the destructor closes stdin: the loop ends, the child exits, it is reaped
  }
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1) << "the child was reaped";
  EXPECT_FALSE(p.write_stdin("x").ok()) << "a moved-from process has no stdin";
}

TEST(Process, AChildThatExitsEarlyOrCannotStartIsReportedNotWaitedOn) {
  Process quick = sh("echo partial-line-without-newline; exit 3");
  auto r = quick.wait_for_line("listening", 30000);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().to_string();
  auto missing = Process::spawn({.argv = {"/nonexistent/tessera"}});
  ASSERT_TRUE(missing.ok()) << "exec fails in the child";
  EXPECT_EQ(missing->read_line(5000).status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(Process::spawn({}).ok());
  EXPECT_FALSE(self_exe().empty());
}

}  // namespace
}  // namespace tessera
