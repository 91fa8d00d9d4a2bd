#include "link/internal/accept_loop.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "base/log.h"

namespace tessera::link::internal {
namespace {

constexpr int kHandshakeTimeoutMs = 5000;
constexpr int kMaxLanes = 64;

void set_recv_timeout(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

Status send_hello(int fd, const std::string& name, uint64_t conn_id, uint64_t lane, uint64_t lanes) {
  FrameHeader h = make_header(FrameType::kHello, 0);
  h.region = conn_id;
  h.offset = lane;
  h.aux = lanes;
  h.length = name.size();
  return send_frame(fd, h, name.data(), name.size());
}

Result<std::pair<FrameHeader, std::string>> read_hello(int fd) {
  FrameHeader h;
  TS_RETURN_IF_ERROR(read_exact(fd, &h, sizeof h));
  TS_RETURN_IF_ERROR(verify(h));
  if (h.type != static_cast<uint8_t>(FrameType::kHello) || h.length > 4096 || h.aux == 0 || h.aux > kMaxLanes ||
      h.offset >= h.aux) {
    return invalid_argument("malformed link handshake");
  }
  std::string name(h.length, '\0');
  TS_RETURN_IF_ERROR(read_exact(fd, name.data(), name.size()));
  return std::make_pair(h, std::move(name));
}

}  // namespace

AcceptLoop::AcceptLoop(int listen_fd, AgentCore& core, std::string endpoint, LinkOptions options,
                       LocalPathFactory local)
    : listen_fd_(listen_fd), core_(core), endpoint_(std::move(endpoint)), options_(options), local_(std::move(local)) {}

AcceptLoop::~AcceptLoop() {
  stop();
  ::close(listen_fd_);
}

void AcceptLoop::start() {
  thread_ = std::thread([this] { run(); });
}

void AcceptLoop::stop() {
  stop_.store(true);
  ::shutdown(listen_fd_, SHUT_RDWR);  // wakes the poll at once
  if (thread_.joinable()) thread_.join();
}

void AcceptLoop::run() {
  constexpr int kAcceptBackoffMs = 50;
  std::chrono::steady_clock::time_point accept_error_logged{};
  uint64_t accept_errors = 0;
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    int n = poll(&p, 1, 100);
    if (n <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors (or buffers) the connection stays in the backlog and poll() reports it again at once:
      // back off instead of spinning, and log at most once a second.
      const int err = errno;
      if (err == EINTR || err == EAGAIN || err == ECONNABORTED) continue;
      ++accept_errors;
      const auto now = std::chrono::steady_clock::now();
      if (now - accept_error_logged >= std::chrono::seconds(1)) {
        log::warn("link {}: accept failed ({} times since the last report): {}; retrying every {} ms", endpoint_,
                  accept_errors, std::strerror(err), kAcceptBackoffMs);
        accept_error_logged = now;
        accept_errors = 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(kAcceptBackoffMs));
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // fails harmlessly on Unix sockets
    handle(fd);
  }
  for (auto& [id, p] : pending_) {
    for (int fd : p.fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  pending_.clear();
}

void AcceptLoop::handle(int fd) {
  set_recv_timeout(fd, kHandshakeTimeoutMs);
  auto hello = read_hello(fd);
  if (!hello.ok()) {
    log::warn("link {}: rejected a connection: {}", endpoint_, hello.status().message());
    ::close(fd);
    return;
  }
  set_recv_timeout(fd, 0);
  const FrameHeader h = hello->first;
  Pending& p = pending_[h.region];
  if (p.fds.empty()) {
    p.peer = hello->second;
    p.fds.assign(h.aux, -1);
  }
  if (p.fds.size() != h.aux || p.fds[h.offset] >= 0 || p.peer != hello->second) {
    ::close(fd);
    return;
  }
  p.fds[h.offset] = fd;
  if (++p.have < static_cast<int>(p.fds.size())) {
    if (!send_hello(fd, core_.name(), h.region, h.offset, h.aux).ok())
      log::warn("link {}: handshake reply failed", endpoint_);
    return;
  }
  // The last lane: the connection is adopted before its reply goes out, so once the connector's handshake
  // returns, this side can already start transfers towards it.
  auto conn = std::make_shared<FramedConnection>(core_, endpoint_, p.peer, std::move(p.fds), options_,
                                                 local_ ? local_() : nullptr);
  pending_.erase(h.region);
  core_.adopt_connection(conn);
  if (!send_hello(fd, core_.name(), h.region, h.offset, h.aux).ok())
    log::warn("link {}: handshake reply failed", endpoint_);
  conn->start();
}

Result<std::shared_ptr<Connection>> finish_connect(AgentCore& core, const std::string& endpoint,
                                                   const std::string& peer, std::vector<int> fds,
                                                   const LinkOptions& options, std::unique_ptr<LocalDataPath> local) {
  std::random_device rd;
  uint64_t conn_id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  Status s;
  for (size_t i = 0; i < fds.size() && s.ok(); ++i) {
    set_recv_timeout(fds[i], kHandshakeTimeoutMs);
    s = send_hello(fds[i], core.name(), conn_id, i, fds.size());
    if (!s.ok()) break;
    auto reply = read_hello(fds[i]);
    if (!reply.ok()) {
      s = reply.status();
    } else if (reply->second != peer) {
      s = failed_precondition(fmt::format("expected agent '{}' at this address but found '{}'", peer, reply->second));
    }
    set_recv_timeout(fds[i], 0);
  }
  if (!s.ok()) {
    for (int fd : fds) ::close(fd);
    return s.with_context(fmt::format("{} handshake with {}", endpoint, peer));
  }
  auto conn = std::make_shared<FramedConnection>(core, endpoint, peer, std::move(fds), options, std::move(local));
  conn->start();
  return std::shared_ptr<Connection>(std::move(conn));
}

}  // namespace tessera::link::internal
