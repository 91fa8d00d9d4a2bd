#include "base/process.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace tessera {

Result<Process> Process::spawn(ProcessOptions o) {
  if (o.argv.empty()) return invalid_argument("no program to start");
  int out[2] = {-1, -1}, in[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0) return unavailable(fmt::format("cannot start {}: pipe failed", o.argv[0]));
  if (o.pipe_stdin && pipe2(in, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return unavailable(fmt::format("cannot start {}: pipe failed", o.argv[0]));
  }
  // Everything the child needs is prepared before fork(): after it, only async-signal-safe calls.
  std::vector<char*> argv;
  for (std::string& a : o.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : o.cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], in[0], in[1]}) {
      if (fd >= 0) close(fd);
    }
    return unavailable(fmt::format("cannot start {}: fork failed: {}", o.argv[0], std::strerror(errno)));
  }
  if (pid == 0) {
    if (o.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(1);  // the parent was gone before prctl ran
    }
    dup2(out[1], 1);
    if (in[0] >= 0) dup2(in[0], 0);
    if (!o.stderr_file.empty()) {
      const int err = open(o.stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (err >= 0) dup2(err, 2);
    }
    if (!o.cpus.empty()) sched_setaffinity(0, sizeof set, &set);  // an absent CPU leaves the mask as it was
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  if (in[0] >= 0) close(in[0]);
  return Process(pid, in[1], out[0]);
}

Process::Process(Process&& o) noexcept : pid_(o.pid_), in_(o.in_), out_(o.out_), buffer_(std::move(o.buffer_)) {
  o.pid_ = -1;
  o.in_ = o.out_ = -1;
}

Process::~Process() {
  if (in_ >= 0) {
    close(in_);  // a child that reads its stdin sees EOF and exits
    in_ = -1;
  }
  if (pid_ > 0) {
    for (int i = 0; i < 50 && pid_ > 0; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) pid_ = -1;
      if (pid_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill_now();
  }
  close_fds();
}

void Process::close_fds() {
  if (in_ >= 0) close(in_);
  if (out_ >= 0) close(out_);
  in_ = out_ = -1;
}

void Process::kill_now() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int Process::terminate(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pid_ = -1;
  return status;
}

Status Process::write_stdin(std::string_view bytes) {
  if (in_ < 0) return failed_precondition("the child's stdin is not a pipe");
  while (!bytes.empty()) {
    const ssize_t n = write(in_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return unavailable("the child closed its stdin");
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return ok_status();
}

Result<std::string> Process::read_line(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return deadline_exceeded(fmt::format("no line within {} ms", timeout_ms));
    if (out_ < 0) return unavailable("the child's stdout is closed");
    pollfd p{out_, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buf[4096];
    const ssize_t got = read(out_, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return unavailable("the child exited (closed its stdout) first");
    buffer_.append(buf, static_cast<size_t>(got));
  }
}

Result<std::string> Process::wait_for_line(std::string_view marker, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return deadline_exceeded(fmt::format("no line with '{}' within {} ms", marker, timeout_ms));
    auto line = read_line(static_cast<int>(left.count()));
    if (!line.ok()) {
      if (line.status().code() == StatusCode::kDeadlineExceeded)
        return deadline_exceeded(fmt::format("no line with '{}' within {} ms", marker, timeout_ms));
      return line.status();
    }
    if (line->find(marker) != std::string::npos) return line;
  }
}

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("tessera");
}

}  // namespace tessera
