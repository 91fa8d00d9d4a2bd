#include "support/process.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>

#include "support/paths.h"

extern char** environ;

namespace tessera::testing {

ProcessResult run_process(const std::vector<std::string>& argv, double timeout_seconds) {
  ProcessResult r;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return r;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    r.err = "spawn failed";
    return r;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    int n = poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(got));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status))
    r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    r.exit_code = 128 + WTERMSIG(status);
  return r;
}

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& argv) {
  int out_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    return;
  }
  pid_ = pid;
  out_fd_ = out_pipe[0];
}

BackgroundProcess::~BackgroundProcess() {
  if (pid_ > 0) stop(SIGKILL, 5.0);
  if (out_fd_ >= 0) close(out_fd_);
}

std::string BackgroundProcess::wait_for_line(const std::string& needle, double timeout_seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  char buf[4096];
  for (;;) {
    size_t nl;
    while ((nl = buffer_.find('\n')) != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (line.find(needle) != std::string::npos) return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || out_fd_ < 0) return "";
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n <= 0) return "";
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

int BackgroundProcess::stop(int signal, double timeout_seconds) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      pid_ = -1;
      return -1;
    }
    usleep(5000);
  }
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

int port_from_line(const std::string& line) {
  size_t at = line.find("http://");
  if (at == std::string::npos) return 0;
  size_t colon = line.find(':', at + 7);
  if (colon == std::string::npos) return 0;
  return std::atoi(line.c_str() + colon + 1);
}

TesseraServer start_tessera(std::vector<std::string> args, double timeout_seconds) {
  const std::string what = args.empty() ? std::string("tessera") : args[0];
  args.insert(args.begin(), tessera_bin());
  TesseraServer out;
  out.p = std::make_unique<BackgroundProcess>(args);
  const int port = port_from_line(out.p->wait_for_line("listening on", timeout_seconds));
  EXPECT_GT(port, 0) << "tessera " << what << " did not start listening";
  out.url = port > 0 ? "http://127.0.0.1:" + std::to_string(port) : "";
  return out;
}

std::string synth_small_gguf(const std::string& out, const std::string& shape, int layers,
                             const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {tessera_bin(),
                                   "synth",
                                   "--shape",
                                   shape,
                                   "--small",
                                   "--dim",
                                   "256",
                                   "--hidden-dim",
                                   "512",
                                   "--layers",
                                   std::to_string(layers),
                                   "--rare-byte-tokens",
                                   "--format",
                                   "gguf",
                                   "--dtype",
                                   "f32",
                                   "--seed",
                                   "7",
                                   "--out",
                                   out};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const ProcessResult synth = run_process(argv, 300.0);
  EXPECT_EQ(synth.exit_code, 0) << synth.err;
  return synth.exit_code == 0 ? out : "";
}

}  // namespace tessera::testing
