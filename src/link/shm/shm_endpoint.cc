// The shm endpoint, for two agents on one host. Control frames (handshake, region descriptions, immediate
// tags, send/recv messages, errors) travel over Unix-domain sockets set up with Boost.Asio. The data of read
// and write does not: the initiator maps the peer's region segment (POSIX shared memory, see
// internal/shm_segment.h) and copies directly between the two mappings, one copy, striped over the lanes'
// writer threads; chunks default to 32 MiB, large enough for memcpy's streaming stores. Regions that are not in shared
// memory (memory registered by address, device memory) fall back to framed data over the same sockets, so every region
// works with every endpoint.
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "link/endpoint.h"
#include "link/internal/accept_loop.h"
#include "link/internal/shm_segment.h"

namespace tessera::link {
namespace {

namespace asio = boost::asio;
using asio::local::stream_protocol;

constexpr auto kDescribeTimeout = std::chrono::milliseconds(2000);

class ShmDataPath final : public internal::LocalDataPath {
 public:
  std::optional<Status> execute(internal::FramedConnection& conn, OpKind kind, const internal::Chunk& c) override {
    if (!c.local->data) return std::nullopt;  // device memory: framed path stages it
    auto seg = mapping(conn, c.remote);
    if (!seg.ok()) return seg.status();
    if (*seg == nullptr) return std::nullopt;  // the peer's region is not in shared memory
    const internal::ShmSegment& s = **seg;
    if (!s.valid()) {
      forget(c.remote);
      return not_found(fmt::format("region {} is no longer registered with agent {}", to_u64(c.remote), conn.peer()));
    }
    if (Status r = internal::check_range(s.length(), c.remote_offset, c.length, c.remote, "remote"); !r.ok()) return r;
    if (c.length == 0) return ok_status();
    if (kind == OpKind::kRead) {
      std::memcpy(c.local->data + c.local_offset, s.data() + c.remote_offset, c.length);
    } else {
      std::memcpy(s.data() + c.remote_offset, c.local->data + c.local_offset, c.length);
    }
    return ok_status();
  }

 private:
  // The mapped segment of a remote region; null when the region has no segment (use the wire).
  Result<std::shared_ptr<internal::ShmSegment>> mapping(internal::FramedConnection& conn, RegionId id) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = maps_.find(to_u64(id));
      if (it != maps_.end()) return it->second;
    }
    TS_ASSIGN_OR_RETURN(RegionDesc d, conn.describe_remote(id, kDescribeTimeout));
    std::shared_ptr<internal::ShmSegment> seg;
    if (!d.shm_name.empty() && d.kind == MemoryKind::kHost) {
      TS_ASSIGN_OR_RETURN(seg, internal::ShmSegment::open(d.shm_name, d.length));
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = maps_.emplace(to_u64(id), std::move(seg));
    return it->second;
  }
  void forget(RegionId id) {
    std::lock_guard<std::mutex> lock(mu_);
    maps_.erase(to_u64(id));
  }

  std::mutex mu_;
  // Mapped peer regions by id (ids are never reused); null for regions that are not in shared memory.
  // Chunks in flight hold their own reference, so forget() never unmaps bytes under a copy.
  std::map<uint64_t, std::shared_ptr<internal::ShmSegment>> maps_;  // guarded by mu_
};

class ShmEndpoint final : public Endpoint {
 public:
  explicit ShmEndpoint(EndpointConfig config) : config_(std::move(config)) {}
  ~ShmEndpoint() override {
    stop();
    if (!path_.empty()) ::unlink(path_.c_str());
  }

  std::string_view name() const override { return "shm"; }
  EndpointCaps caps() const override { return {true, true, 20, 32ull << 20}; }

  Result<std::string> listen(internal::AgentCore& core) override {
    std::random_device rd;
    path_ = fmt::format("/tmp/tessera-link-{}-{:08x}.sock", getpid(), rd());
    ::unlink(path_.c_str());
    boost::system::error_code ec;
    stream_protocol::acceptor acceptor(io_);
    stream_protocol::endpoint ep(path_);
    acceptor.open(ep.protocol(), ec);
    if (!ec) acceptor.bind(ep, ec);
    // Only this user may connect (as its segments are 0600); the handshake still proves the cluster token.
    if (!ec && ::chmod(path_.c_str(), 0600) != 0)
      ec = boost::system::error_code(errno, boost::system::system_category());
    if (!ec) acceptor.listen(128, ec);
    if (ec) return unavailable(fmt::format("cannot listen on unix socket {}: {}", path_, ec.message()));
    int fd = acceptor.release(ec);
    if (ec) return internal_error(fmt::format("cannot take the shm listening socket: {}", ec.message()));
    loop_ = std::make_unique<internal::AcceptLoop>(fd, core, "shm", config_.link,
                                                   [] { return std::make_unique<ShmDataPath>(); });
    loop_->start();
    return path_;
  }

  Result<std::shared_ptr<Connection>> connect(internal::AgentCore& core, const std::string& peer,
                                              const std::string& address) override {
    std::vector<int> fds;
    for (int i = 0; i < config_.link.streams; ++i) {
      boost::system::error_code ec;
      stream_protocol::socket sock(io_);
      sock.connect(stream_protocol::endpoint(address), ec);
      int fd = ec ? -1 : sock.release(ec);
      if (ec || fd < 0) {
        for (int f : fds) ::close(f);
        return unavailable(fmt::format("cannot connect to {} at unix socket {}: {}", peer, address, ec.message()));
      }
      fds.push_back(fd);
    }
    return internal::finish_connect(core, "shm", peer, std::move(fds), config_.link, std::make_unique<ShmDataPath>());
  }

  void stop() override {
    if (loop_) loop_->stop();
  }

 private:
  EndpointConfig config_;
  asio::io_context io_;
  std::string path_;
  std::unique_ptr<internal::AcceptLoop> loop_;
};

}  // namespace

std::unique_ptr<Endpoint> make_shm_endpoint(const EndpointConfig& config) {
  return std::make_unique<ShmEndpoint>(config);
}

}  // namespace tessera::link
