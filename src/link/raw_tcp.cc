// Plain TCP streams and their sink: the tcp ceiling of `tessera link bench` (raw_tcp.h).
#include "link/raw_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include "link/bench.h"

namespace tessera::link {

RawTcpStreams::~RawTcpStreams() {
  for (int fd : fds_) close(fd);
}

Status RawTcpStreams::connect_to(int port, int streams) {
  for (int i = 0; i < streams; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      if (fd >= 0) close(fd);
      return unavailable("cannot connect to the raw sink");
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fds_.push_back(fd);
  }
  return ok_status();
}

Result<double> RawTcpStreams::round(const std::byte* src, uint64_t region, uint64_t size, uint64_t total) {
  if (fds_.empty()) return failed_precondition("raw TCP streams: not connected");
  const auto streams = static_cast<uint64_t>(fds_.size());
  const uint64_t each = total / streams;
  std::atomic<bool> all_ok{true};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (uint64_t i = 0; i < streams; ++i) {
    threads.emplace_back([&, fd = fds_[i], i] {
      bool ok = send(fd, &each, 8, MSG_NOSIGNAL) == 8;
      uint64_t sent = 0, slot = i;
      while (ok && sent < each) {
        const uint64_t off = slot_offset(slot, size, region), n = std::min(size, each - sent);
        uint64_t done = 0;
        slot += streams;
        while (ok && done < n) {
          const ssize_t w = send(fd, src + off + done, n - done, MSG_NOSIGNAL);
          ok = w > 0;
          if (ok) done += static_cast<uint64_t>(w);
        }
        sent += n;
      }
      char ack = 0;
      ok = ok && recv(fd, &ack, 1, MSG_WAITALL) == 1;
      if (!ok) all_ok.store(false);
    });
  }
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!all_ok.load()) return unavailable("raw TCP stream to the sink failed");
  return static_cast<double>(each * streams) / secs / 1e9;
}

Result<std::unique_ptr<RawTcpSink>> RawTcpSink::listen(uint64_t buffer_bytes, int streams) {
  std::unique_ptr<RawTcpSink> sink(new RawTcpSink());
  sink->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const int lfd = sink->listen_fd_;
  if (lfd < 0 || bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(lfd, 64) != 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return unavailable("raw-sink: cannot listen on 127.0.0.1");
  }
  sink->port_ = ntohs(addr.sin_port);
  const uint64_t slice = std::max<uint64_t>(buffer_bytes / static_cast<uint64_t>(std::max(streams, 1)), 1 << 20);
  sink->buffers_.assign(static_cast<size_t>(std::max(streams, 1)), std::vector<char>(slice, 1));
  return sink;
}

RawTcpSink::~RawTcpSink() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : connections_) shutdown(fd, SHUT_RDWR);  // wakes each connection thread's recv
  }
  for (auto& t : threads_) t.join();
  for (int fd : connections_) close(fd);  // only now: a thread never closes the fd the shutdown above names
  if (listen_fd_ >= 0) close(listen_fd_);
}

void RawTcpSink::serve_until(int stop_fd) {
  uint64_t accepted = 0;
  while (true) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) continue;
    if (p[1].revents) return;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      connections_.push_back(fd);
    }
    std::vector<char>& buffer = buffers_[accepted++ % buffers_.size()];
    // Rounds until the sender closes: an 8-byte length, that many bytes, then a one-byte acknowledgement.
    threads_.emplace_back([fd, &buffer] {
      uint64_t total = 0, pos = 0;
      while (recv(fd, &total, 8, MSG_WAITALL) == 8) {
        uint64_t got = 0;
        while (got < total) {
          if (pos == buffer.size()) pos = 0;
          const uint64_t want = std::min({total - got, static_cast<uint64_t>(buffer.size()) - pos, uint64_t{4} << 20});
          const ssize_t n = recv(fd, buffer.data() + pos, want, 0);
          if (n <= 0) break;
          got += static_cast<uint64_t>(n);
          pos += static_cast<uint64_t>(n);
        }
        char ack = 1;
        if (got != total || write(fd, &ack, 1) != 1) break;
      }
    });
  }
}

}  // namespace tessera::link
