#include "link/agent.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "base/log.h"
#include "link/internal/agent_core.h"
#include "link/internal/region.h"
#include "link/internal/wire.h"

namespace tessera::link {
namespace {

// Bounds on what peers can make an agent hold before its owner claims it (peers are untrusted input).
constexpr size_t kMaxPendingNotifications = 1 << 16;
constexpr uint64_t kMaxUnclaimedMessageBytes = 2 * internal::kMaxMessagePayload;  // per peer

using internal::Chunk;
using internal::Operation;
using internal::Region;

struct PostedRecv {
  std::vector<std::pair<std::shared_ptr<Region>, Assignment>> pieces;
  uint64_t total = 0;
  std::shared_ptr<internal::OpState> state;
};

class AgentImpl final : public Agent, public internal::AgentCore {
 public:
  explicit AgentImpl(AgentOptions options) : options_(std::move(options)) {}
  ~AgentImpl() override {
    shutdown(std::chrono::milliseconds(1000));
    for (auto& e : endpoints_) e->stop();
    std::vector<std::shared_ptr<Connection>> conns;
    {
      std::lock_guard<std::mutex> lock(mu_);
      conns.swap(all_conns_);
      peers_.clear();
    }
    conns.clear();  // joins connection threads before the endpoints and regions go
    endpoints_.clear();
  }

  Status init() {
    if (options_.name.empty() || options_.name.find_first_of(" \t\n=") != std::string::npos) {
      return invalid_argument(fmt::format("agent name '{}' must be non-empty, without spaces or '='", options_.name));
    }
    if (options_.link.streams < 1 || options_.link.streams > 64) {
      return invalid_argument(fmt::format("link streams must be 1..64, got {}", options_.link.streams));
    }
    internal::remove_stale_segments();
    info_.name = options_.name;
    info_.host_id = local_host_id();
    EndpointConfig config{options_.host, options_.link};
    for (const std::string& n : options_.endpoints) {
      TS_ASSIGN_OR_RETURN(std::unique_ptr<Endpoint> e, make_endpoint(n, config));
      TS_ASSIGN_OR_RETURN(std::string address, e->listen(*this));
      default_split_[std::string(e->name())] = e->caps().default_split;
      info_.addresses.push_back({std::string(e->name()), address});  // a wrapper (faulty) answers for what it wraps
      endpoints_.push_back(std::move(e));
    }
    if (options_.discovery) TS_RETURN_IF_ERROR(options_.discovery->publish(info_));
    return ok_status();
  }

  const std::string& name() const override { return options_.name; }
  const AgentInfo& info() const override { return info_; }

  Result<RegionId> allocate_region(uint64_t length) override {
    if (length == 0) return invalid_argument("cannot allocate an empty region");
    static std::atomic<uint64_t> serial{0};
    std::string shm_name = fmt::format("/tessera-{}-{}", getpid(), serial.fetch_add(1));
    TS_ASSIGN_OR_RETURN(auto seg, internal::ShmSegment::create(shm_name, length));
    auto r = std::make_shared<Region>();
    r->data = seg->data();
    r->length = length;
    r->segment = std::move(seg);
    return regions_.add(std::move(r));
  }

  Result<RegionId> register_region(void* data, uint64_t length) override {
    if (data == nullptr || length == 0)
      return invalid_argument("register_region needs a non-null pointer and a length");
    auto r = std::make_shared<Region>();
    r->data = static_cast<std::byte*>(data);
    r->length = length;
    return regions_.add(std::move(r));
  }

  Result<RegionId> register_device_region(std::shared_ptr<DeviceMemory> memory) override {
    if (!memory || memory->length() == 0) return invalid_argument("register_device_region needs non-empty memory");
    auto r = std::make_shared<Region>();
    r->kind = MemoryKind::kDevice;
    r->length = memory->length();
    r->device = std::move(memory);
    return regions_.add(std::move(r));
  }

  Status unregister_region(RegionId id) override {
    std::shared_ptr<Region> r = regions_.remove(id);
    if (!r) return not_found(fmt::format("region {} is not registered with agent {}", to_u64(id), name()));
    if (r->segment) r->segment->invalidate();  // peers mapping it now see it gone
    return ok_status();
  }

  Result<std::span<std::byte>> host_bytes(RegionId id) const override {
    std::shared_ptr<Region> r = regions_.find(id);
    if (!r) return not_found(fmt::format("region {} is not registered with agent {}", to_u64(id), name()));
    if (!r->data) return failed_precondition(fmt::format("region {} is device memory", to_u64(id)));
    return std::span<std::byte>(r->data, r->length);
  }

  Result<RegionDesc> describe(RegionId id) const override {
    std::shared_ptr<Region> r = regions_.find(id);
    if (!r) return not_found(fmt::format("region {} is not registered with agent {}", to_u64(id), name()));
    return RegionDesc{name(), r->id, r->length, r->kind, r->shm_name()};
  }

  Status connect(const AgentInfo& peer) override {
    if (shut_down_.load()) return unavailable(fmt::format("agent {} is shut down", name()));
    // Candidates: our endpoints the peer also listens on, usable from here, best preference first.
    std::vector<std::pair<Endpoint*, std::string>> candidates;
    for (auto& e : endpoints_) {
      if (e->caps().same_host_only && peer.host_id != info_.host_id) continue;
      for (const PeerAddress& a : peer.addresses) {
        if (a.endpoint == e->name()) candidates.emplace_back(e.get(), a.address);
      }
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](auto& a, auto& b) { return a.first->caps().preference > b.first->caps().preference; });
    if (candidates.empty()) {
      return unavailable(fmt::format("no common endpoint with agent {} ({}); this agent uses {}", peer.name,
                                     peer.encode(), fmt::join(options_.endpoints, ", ")));
    }
    Status last;
    for (auto& [e, address] : candidates) {
      auto conn = e->connect(*this, peer.name, address);
      if (conn.ok()) {
        adopt_connection(std::move(*conn));
        return ok_status();
      }
      last = conn.status();
    }
    return last;
  }

  Status connect(const std::string& peer) override {
    if (!options_.discovery)
      return failed_precondition(fmt::format("agent {} has no discovery to find '{}'", name(), peer));
    TS_ASSIGN_OR_RETURN(AgentInfo info, options_.discovery->lookup(peer));
    return connect(info);
  }

  Result<std::string> endpoint_to(const std::string& peer) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = peers_.find(peer);
    if (it == peers_.end()) return not_found(fmt::format("agent {} is not connected to {}", name(), peer));
    return std::string(it->second->endpoint());
  }

  TransferFuture read(const std::string& peer, std::vector<Assignment> batch) override {
    return submit(peer, OpKind::kRead, batch, 0);
  }
  TransferFuture write(const std::string& peer, std::vector<Assignment> batch) override {
    return submit(peer, OpKind::kWrite, batch, 0);
  }
  TransferFuture write_with_imm(const std::string& peer, std::vector<Assignment> batch, uint64_t tag) override {
    return submit(peer, OpKind::kWriteWithImm, batch, tag);
  }
  TransferFuture send(const std::string& peer, std::vector<Assignment> batch) override {
    return submit(peer, OpKind::kSend, batch, 0);
  }

  TransferFuture recv(const std::string& peer, std::vector<Assignment> batch) override {
    if (shut_down_.load()) return TransferFuture::ready_with(unavailable(fmt::format("agent {} is shut down", name())));
    PostedRecv post;
    post.state = std::make_shared<internal::OpState>();
    for (const Assignment& a : batch) {
      auto r = local_piece(a);
      if (!r.ok()) return TransferFuture::ready_with(r.status());
      post.pieces.emplace_back(std::move(*r), a);
      post.total += a.length;
    }
    TransferFuture f(post.state);
    std::vector<std::byte> message;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& inbox = inbox_[peer];
      if (inbox.empty()) {
        posted_[peer].push_back(std::move(post));
        return f;
      }
      message = std::move(inbox.front());
      inbox.pop_front();
      inbox_bytes_[peer] -= message.size();
    }
    scatter(post, message);
    return f;
  }

  Result<Notification> next_notification(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!notify_cv_.wait_for(lock, timeout, [&] { return !notifications_.empty(); })) {
      return deadline_exceeded(fmt::format("no immediate tag arrived at {} within {} ms", name(), timeout.count()));
    }
    Notification n = std::move(notifications_.front());
    notifications_.pop_front();
    return n;
  }

  void shutdown(std::chrono::milliseconds drain_timeout) override {
    if (shut_down_.exchange(true)) return;
    if (options_.discovery) (void)options_.discovery->withdraw(name());
    for (auto& e : endpoints_) e->stop();
    std::vector<std::shared_ptr<Connection>> conns;
    std::map<std::string, std::deque<PostedRecv>> posted;
    {
      std::lock_guard<std::mutex> lock(mu_);
      conns = all_conns_;
      posted.swap(posted_);
    }
    Status why = unavailable(fmt::format("agent {} shut down before the transfer started", name()));
    for (auto& c : conns) c->drain_and_close(why, drain_timeout);
    for (auto& [p, q] : posted) {
      for (auto& r : q) r.state->set(unavailable(fmt::format("agent {} shut down before a message arrived", name())));
    }
  }

  // AgentCore
  std::shared_ptr<Region> find_region(RegionId id) const override { return regions_.find(id); }

  void deliver_notification(Notification n) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Nobody draining them, or a peer flooding: the oldest unclaimed tags go (their waiters time out and
      // fall back), memory does not grow without bound.
      if (notifications_.size() >= kMaxPendingNotifications) {
        if (!notifications_dropped_) {
          log::warn("link agent {}: more than {} unclaimed notifications; dropping the oldest", name(),
                    kMaxPendingNotifications);
        }
        notifications_dropped_ = true;
        notifications_.pop_front();
      }
      notifications_.push_back(std::move(n));
    }
    notify_cv_.notify_all();
  }

  Status deliver_message(const std::string& peer, std::vector<std::byte> bytes) override {
    PostedRecv post;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& q = posted_[peer];
      if (q.empty()) {
        uint64_t& held = inbox_bytes_[peer];
        if (held + bytes.size() > kMaxUnclaimedMessageBytes) {
          return resource_exhausted(
              fmt::format("agent {} already holds {} bytes of messages from {} that no recv "
                          "claimed; post a recv first",
                          name(), held, peer));
        }
        held += bytes.size();
        inbox_[peer].push_back(std::move(bytes));
        return ok_status();
      }
      post = std::move(q.front());
      q.pop_front();
    }
    scatter(post, bytes);
    return ok_status();
  }

  void adopt_connection(std::shared_ptr<Connection> conn) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_.load()) {
      conn->close(unavailable(fmt::format("agent {} is shut down", name())));
    }
    peers_[conn->peer()] = conn;
    all_conns_.push_back(std::move(conn));
  }

 private:
  Result<std::shared_ptr<Region>> local_piece(const Assignment& a) const {
    std::shared_ptr<Region> r = regions_.find(a.local);
    if (!r) return not_found(fmt::format("local region {} is not registered with agent {}", to_u64(a.local), name()));
    TS_RETURN_IF_ERROR(internal::check_range(r->length, a.local_offset, a.length, a.local, "local"));
    return r;
  }

  void scatter(PostedRecv& post, const std::vector<std::byte>& message) {
    if (message.size() != post.total) {
      post.state->set(
          out_of_range(fmt::format("a {}-byte message arrived for a {}-byte receive", message.size(), post.total)));
      return;
    }
    uint64_t at = 0;
    for (auto& [r, a] : post.pieces) {
      if (Status s = r->copy_in(a.local_offset, message.data() + at, a.length); !s.ok()) {
        post.state->set(s);
        return;
      }
      at += a.length;
    }
    post.state->set(ok_status());
  }

  TransferFuture submit(const std::string& peer, OpKind kind, const std::vector<Assignment>& batch, uint64_t tag) {
    if (shut_down_.load()) return TransferFuture::ready_with(unavailable(fmt::format("agent {} is shut down", name())));
    std::shared_ptr<Connection> conn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = peers_.find(peer);
      if (it != peers_.end()) conn = it->second;
    }
    if (!conn) {
      return TransferFuture::ready_with(
          failed_precondition(fmt::format("agent {} is not connected to '{}': call connect() first", name(), peer)));
    }
    auto op = std::make_shared<Operation>();
    op->kind = kind;
    op->tag = tag;
    std::vector<Chunk> chunks;
    if (kind == OpKind::kSend) {
      uint64_t total = 0;
      for (const Assignment& a : batch) total += a.length;
      if (total > internal::kMaxMessagePayload) {
        return TransferFuture::ready_with(invalid_argument(fmt::format(
            "a {}-byte message is more than the {} one send() may carry", total, internal::kMaxMessagePayload)));
      }
      Chunk c;
      c.op = op;
      for (const Assignment& a : batch) {
        auto r = local_piece(a);
        if (!r.ok()) return TransferFuture::ready_with(r.status());
        size_t at = c.payload.size();
        c.payload.resize(at + a.length);
        if (Status s = (*r)->copy_out(a.local_offset, c.payload.data() + at, a.length); !s.ok()) {
          return TransferFuture::ready_with(s);
        }
      }
      chunks.push_back(std::move(c));
    } else {
      uint64_t split = options_.link.split_threshold;
      if (split == 0) {
        auto it = default_split_.find(std::string(conn->endpoint()));
        split = it != default_split_.end() ? it->second : uint64_t{1} << 20;
      }
      for (const Assignment& a : batch) {
        auto r = local_piece(a);
        if (!r.ok()) return TransferFuture::ready_with(r.status());
        uint64_t done = 0;
        do {  // a zero-length piece is still one chunk: the peer checks that the region exists
          uint64_t n = std::min(split, a.length - done);
          Chunk c;
          c.op = op;
          c.local = *r;
          c.local_offset = a.local_offset + done;
          c.remote = a.remote;
          c.remote_offset = a.remote_offset + done;
          c.length = n;
          chunks.push_back(std::move(c));
          done += n;
        } while (done < a.length);
      }
      if (chunks.empty() && kind == OpKind::kWriteWithImm) {
        op->imm_sent = true;
        Chunk c;
        c.op = op;
        c.is_imm = true;
        chunks.push_back(std::move(c));
      }
    }
    TransferFuture f(op->state);
    if (chunks.empty()) {
      op->state->set(ok_status());
      return f;
    }
    op->remaining.store(static_cast<int64_t>(chunks.size()));
    conn->submit(op, std::move(chunks));
    return f;
  }

  AgentOptions options_;
  AgentInfo info_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::map<std::string, uint64_t> default_split_;  // by endpoint name; written in init() only
  internal::RegionTable regions_;
  std::atomic<bool> shut_down_{false};

  mutable std::mutex mu_;
  std::condition_variable notify_cv_;
  std::map<std::string, std::shared_ptr<Connection>> peers_;         // guarded by mu_
  std::vector<std::shared_ptr<Connection>> all_conns_;               // guarded by mu_
  std::deque<Notification> notifications_;                           // guarded by mu_
  std::map<std::string, std::deque<std::vector<std::byte>>> inbox_;  // guarded by mu_
  std::map<std::string, uint64_t> inbox_bytes_;                      // guarded by mu_: bytes in inbox_[peer]
  bool notifications_dropped_ = false;                               // guarded by mu_
  std::map<std::string, std::deque<PostedRecv>> posted_;             // guarded by mu_
};

}  // namespace

Result<std::unique_ptr<Agent>> Agent::create(AgentOptions options) {
  auto agent = std::make_unique<AgentImpl>(std::move(options));
  TS_RETURN_IF_ERROR(agent->init());
  return std::unique_ptr<Agent>(std::move(agent));
}

}  // namespace tessera::link
