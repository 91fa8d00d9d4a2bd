#include "link/internal/accept_loop.h"

#include <arpa/inet.h>
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
constexpr size_t kMaxPendingConnections = 64;
constexpr size_t kMaxHandshakes = 512;
constexpr size_t kMaxHandshakesPerAddress = 2 * kMaxLanes;  // a connector opens all its lanes at once

void set_recv_timeout(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

constexpr size_t kNonceBytes = 16;

struct Hello {
  FrameHeader header;
  std::string name;
  std::string nonce;
  std::string mac;  // empty from the connector, and from an acceptor without a token
};

Status send_hello(int fd, const std::string& name, const std::string& nonce, const std::string& mac, uint64_t conn_id,
                  uint64_t lane, uint64_t lanes) {
  FrameHeader h = make_header(FrameType::kHello, 0);
  h.region = conn_id;
  h.offset = lane;
  h.aux = lanes;
  const std::string payload = name + "\n" + nonce + "\n" + mac;
  h.length = payload.size();
  return send_frame(fd, h, payload.data(), payload.size());
}

Result<Hello> read_hello(int fd) {
  Hello out;
  FrameHeader& h = out.header;
  TS_RETURN_IF_ERROR(read_exact(fd, &h, sizeof h));
  TS_RETURN_IF_ERROR(verify(h));
  if (h.type != static_cast<uint8_t>(FrameType::kHello) || h.length > 4096 || h.aux == 0 || h.aux > kMaxLanes ||
      h.offset >= h.aux) {
    return invalid_argument("malformed link handshake");
  }
  std::string payload(h.length, '\0');
  TS_RETURN_IF_ERROR(read_exact(fd, payload.data(), payload.size()));
  // name \n nonce \n mac, split from the right (a name may hold anything but the nonce and mac are hex).
  const size_t second = payload.rfind('\n');
  const size_t first = second == std::string::npos || second == 0 ? std::string::npos : payload.rfind('\n', second - 1);
  if (first == std::string::npos) return invalid_argument("malformed link handshake (no nonce)");
  out.name = payload.substr(0, first);
  out.nonce = payload.substr(first + 1, second - first - 1);
  out.mac = payload.substr(second + 1);
  if (out.nonce.size() != 2 * kNonceBytes) return invalid_argument("malformed link handshake (bad nonce)");
  return out;
}

Status send_auth(int fd, const std::string& mac) {
  FrameHeader h = make_header(FrameType::kAuth, 0);
  h.length = mac.size();
  return send_frame(fd, h, mac.data(), mac.size());
}

Result<std::string> read_auth(int fd) {
  FrameHeader h;
  TS_RETURN_IF_ERROR(read_exact(fd, &h, sizeof h));
  TS_RETURN_IF_ERROR(verify(h));
  if (h.type != static_cast<uint8_t>(FrameType::kAuth) || h.length > 256) {
    return invalid_argument("malformed link handshake (expected the proof of the cluster token)");
  }
  std::string mac(h.length, '\0');
  TS_RETURN_IF_ERROR(read_exact(fd, mac.data(), mac.size()));
  return mac;
}

// What both proofs cover; `role` keeps the acceptor's proof from being replayed as the connector's.
std::string transcript(std::string_view role, const Hello& c, const std::string& acceptor_name,
                       const std::string& acceptor_nonce) {
  return fmt::format("tessera-link-auth-v1\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}", role, c.name, acceptor_name, c.nonce,
                     acceptor_nonce, c.header.region, c.header.offset, c.header.aux);
}

std::string prove(const ClusterToken& token, const std::string& message) {
  return token.configured() ? token.hmac_hex(message) : std::string();
}

// True when `mac` is the peer's valid proof, or when this side has no token (open mode: anyone is accepted).
bool proof_ok(const ClusterToken& token, const std::string& message, const std::string& mac) {
  return !token.configured() || token.verify_hmac(message, mac);
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
    return buf;
  }
  if (ss.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof buf);
    return buf;
  }
  return "a local socket";
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
  std::chrono::steady_clock::time_point accept_error_logged{}, busy_logged{};
  uint64_t accept_errors = 0, busy_refused = 0;
  while (!stop_.load()) {
    reap_finished();
    pollfd p{listen_fd_, POLLIN, 0};
    int n = poll(&p, 1, 100);
    if (n <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors (or buffers) the connection stays in the backlog and poll() reports it again at once:
      // back off instead of spinning, and log at most once a second.
      const int err = errno;
      if (stop_.load()) break;  // stop() shut the socket down: accept fails with EINVAL, which is no error
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
    const std::string address = peer_address(fd);
    std::lock_guard<std::mutex> lock(mu_);
    size_t in_flight = 0, from_address = 0;
    for (const Handshake& h : handshakes_) {
      if (h.done.load()) continue;
      ++in_flight;
      from_address += h.address == address;
    }
    if (in_flight >= kMaxHandshakes || from_address >= kMaxHandshakesPerAddress) {
      ::close(fd);
      ++busy_refused;
      const auto now = std::chrono::steady_clock::now();
      if (now - busy_logged >= std::chrono::seconds(1)) {
        log::warn("link {}: closed {} new connection(s) at once: {} handshakes in flight ({} from {})", endpoint_,
                  busy_refused, in_flight, from_address, address);
        busy_logged = now;
        busy_refused = 0;
      }
      continue;
    }
    Handshake& h = handshakes_.emplace_back();
    h.fd = fd;
    h.address = address;
    h.thread = std::thread([this, self = &h] { handshake(self); });
  }
  // Wake every handshake still reading (its fd is still its own while `active`), then wait for them all.
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Handshake& h : handshakes_) {
      if (h.active) ::shutdown(h.fd, SHUT_RDWR);
    }
  }
  for (Handshake& h : handshakes_) {
    if (h.thread.joinable()) h.thread.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  handshakes_.clear();
  for (auto& [id, p] : pending_) {
    for (int fd : p.fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  pending_.clear();
}

void AcceptLoop::reap_finished() {
  std::list<Handshake> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = handshakes_.begin(); it != handshakes_.end();) {
      auto next = std::next(it);
      if (it->done.load()) finished.splice(finished.end(), handshakes_, it);
      it = next;
    }
  }
  for (Handshake& h : finished) h.thread.join();
}

void AcceptLoop::handshake(Handshake* self) {
  const int fd = self->fd;
  set_recv_timeout(fd, kHandshakeTimeoutMs);
  const ClusterToken& token = options_.cluster_token;
  Status refused;
  auto hello = read_hello(fd);
  std::string nonce;
  if (!hello.ok()) {
    refused = hello.status();
  } else if (auto n = random_hex(kNonceBytes); !n.ok()) {
    refused = n.status();
  } else {
    nonce = *n;
    const FrameHeader& h = hello->header;
    refused = send_hello(fd, core_.name(), nonce, prove(token, transcript("acceptor", *hello, core_.name(), nonce)),
                         h.region, h.offset, h.aux);
    if (refused.ok()) {
      auto mac = read_auth(fd);
      if (!mac.ok()) {
        refused = mac.status();
      } else if (!proof_ok(token, transcript("connector", *hello, core_.name(), nonce), *mac)) {
        refused = permission_denied(mac->empty() ? "the peer presented no cluster token proof"
                                                 : "the peer's proof of the cluster token is wrong");
      }
    }
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    self->active = false;  // from here on stop() leaves the fd alone: it is closed or filed below
    if (refused.ok() && stop_.load()) refused = Status(StatusCode::kCancelled, "the endpoint is stopping");
    if (!refused.ok()) {
      // Once per address: a scanner or a misconfigured peer retrying in a loop must not flood the log.
      if (refused.code() != StatusCode::kCancelled && refused_.size() < 4096 && refused_.insert(self->address).second) {
        log::warn("link {}: refused a connection from {}{}: {} (further refusals from there are not logged)", endpoint_,
                  self->address, hello.ok() ? " (agent '" + hello->name + "')" : std::string(), refused.message());
      }
      lock.unlock();
      ::close(fd);
    } else {
      lock.unlock();
      set_recv_timeout(fd, 0);
      join_lane(fd, hello->header, hello->name);
    }
  }
  self->done.store(true);
}

void AcceptLoop::join_lane(int fd, const FrameHeader& h, const std::string& peer) {
  std::shared_ptr<FramedConnection> conn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Half-made connections hold sockets until their last lane arrives: a peer opening new ones without ever
    // finishing must not pile them up. The oldest incomplete one is dropped.
    if (!pending_.count(h.region) && pending_.size() >= kMaxPendingConnections) {
      auto oldest = pending_.begin();
      for (auto it = pending_.begin(); it != pending_.end(); ++it) {
        if (it->second.since < oldest->second.since) oldest = it;
      }
      log::warn("link {}: dropping an unfinished connection from {} ({} are waiting for lanes)", endpoint_,
                oldest->second.peer, pending_.size());
      for (int f : oldest->second.fds) {
        if (f >= 0) ::close(f);
      }
      pending_.erase(oldest);
    }
    Pending& p = pending_[h.region];
    if (p.fds.empty()) {
      p.since = next_pending_++;
      p.peer = peer;
      p.fds.assign(h.aux, -1);
    }
    if (p.fds.size() != h.aux || p.fds[h.offset] >= 0 || p.peer != peer) {
      ::close(fd);
      return;
    }
    p.fds[h.offset] = fd;
    if (++p.have == static_cast<int>(p.fds.size())) {
      // The last lane: the connection is adopted before its "accepted" goes out, so once the connector's
      // handshake returns, this side can already start transfers towards it.
      conn = std::make_shared<FramedConnection>(core_, endpoint_, p.peer, std::move(p.fds), options_,
                                                local_ ? local_() : nullptr);
      pending_.erase(h.region);
    }
  }
  if (!conn) {
    if (!send_auth(fd, "").ok()) log::warn("link {}: handshake reply failed", endpoint_);
    return;
  }
  core_.adopt_connection(conn);
  if (!send_auth(fd, "").ok()) log::warn("link {}: handshake reply failed", endpoint_);
  conn->start();
}

Result<std::shared_ptr<Connection>> finish_connect(AgentCore& core, const std::string& endpoint,
                                                   const std::string& peer, std::vector<int> fds,
                                                   const LinkOptions& options, std::unique_ptr<LocalDataPath> local) {
  std::random_device rd;
  uint64_t conn_id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  const ClusterToken& token = options.cluster_token;
  Status s;
  for (size_t i = 0; i < fds.size() && s.ok(); ++i) {
    set_recv_timeout(fds[i], kHandshakeTimeoutMs);
    auto nonce = random_hex(kNonceBytes);
    if (!nonce.ok()) {
      s = nonce.status();
      break;
    }
    Hello mine;
    mine.header.region = conn_id;
    mine.header.offset = i;
    mine.header.aux = fds.size();
    mine.name = core.name();
    mine.nonce = *nonce;
    s = send_hello(fds[i], core.name(), mine.nonce, "", conn_id, i, fds.size());
    if (!s.ok()) break;
    auto reply = read_hello(fds[i]);
    if (!reply.ok()) {
      s = reply.status();
    } else if (reply->name != peer) {
      s = failed_precondition(fmt::format("expected agent '{}' at this address but found '{}'", peer, reply->name));
    } else if (!proof_ok(token, transcript("acceptor", mine, reply->name, reply->nonce), reply->mac)) {
      s = permission_denied(reply->mac.empty() ? "the peer holds no cluster token"
                                               : "the peer's proof of the cluster token is wrong");
    } else {
      s = send_auth(fds[i], prove(token, transcript("connector", mine, reply->name, reply->nonce)));
      if (s.ok()) {
        auto accepted = read_auth(fds[i]);
        // A refused proof is answered by a closed socket.
        if (!accepted.ok()) {
          s = permission_denied(
              fmt::format("the peer refused this side's cluster token ({})", accepted.status().message()));
        }
      }
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
