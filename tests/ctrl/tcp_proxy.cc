// TcpProxy (tcp_proxy.h): blocking sockets, poll() with a short timeout so threads see stop_.
#include "tcp_proxy.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace tessera::ctrl::testing {

TcpProxy::TcpProxy(int upstream_port, std::string count_prefix)
    : upstream_port_(upstream_port), prefix_(std::move(count_prefix)) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listen_fd_, 64) != 0) return;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpProxy::~TcpProxy() {
  stop_.store(true);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
  std::lock_guard lock(mu_);
  for (int fd : fds_) close(fd);
  close(listen_fd_);
}

void TcpProxy::drop_connections() {
  std::lock_guard lock(mu_);
  for (int fd : fds_) shutdown(fd, SHUT_RDWR);
}

void TcpProxy::accept_loop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    int client = accept(listen_fd_, nullptr, nullptr);
    if (client < 0) continue;
    int upstream = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(upstream_port_));
    if (connect(upstream, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(client);
      close(upstream);
      continue;
    }
    int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(upstream, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard lock(mu_);
    fds_.push_back(client);
    fds_.push_back(upstream);
    threads_.emplace_back([this, client, upstream] { pump(client, upstream, true); });
    threads_.emplace_back([this, client, upstream] { pump(upstream, client, false); });
  }
}

void TcpProxy::pump(int from, int to, bool count) {
  char buf[16384];
  std::string window;  // the tail of the stream, to find a request line split across reads
  while (!stop_.load()) {
    pollfd p{from, POLLIN, 0};
    int r = poll(&p, 1, 20);
    if (r == 0) continue;
    if (r < 0) break;
    ssize_t n = read(from, buf, sizeof buf);
    if (n <= 0) break;
    if (count) {
      window.append(buf, static_cast<size_t>(n));
      for (size_t at = window.find(prefix_); at != std::string::npos; at = window.find(prefix_, at + 1)) {
        if (at == 0 || window[at - 1] == '\n') counted_.fetch_add(1);
      }
      if (window.size() >= prefix_.size()) window.erase(0, window.size() - prefix_.size() + 1);
    }
    if (silent_.load()) continue;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(to, buf + off, static_cast<size_t>(n - off));
      if (w <= 0) return;
      off += w;
    }
  }
  shutdown(to, SHUT_RDWR);
}

}  // namespace tessera::ctrl::testing
