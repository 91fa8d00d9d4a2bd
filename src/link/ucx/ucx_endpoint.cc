// The ucx endpoint: data moves with UCX's one-sided RMA (ucp_put_nbx / ucp_get_nbx on the peer's registered
// memory, then a flush for remote completion). UCX picks the transport: RDMA verbs, CUDA IPC or NVLink where
// the hardware has them, shared memory (posix/cma) or tcp here; where a transport lacks native RMA, UCX
// emulates put/get with active messages. Control frames (handshake, region descriptions carrying the UCX
// remote key, tags, send/recv, errors) use the same framed TCP lanes as the tcp endpoint.
//
// Address: "HOST:PORT/<hex of the UCX worker address>". Regions are mapped with ucp_mem_map when a peer
// first describes them. One worker per endpoint (UCS_THREAD_MODE_MULTI), progressed by a thread that sleeps
// on the worker's event fd, so emulated RMA is served even while this side issues nothing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <ucp/api/ucp.h>

#include "base/log.h"
#include "link/endpoint.h"
#include "link/internal/accept_loop.h"

namespace tessera::link {
namespace {

// How long one UCX put or get may make no progress before it is cancelled and the chunk is sent framed.
constexpr auto kRmaStall = std::chrono::seconds(3);

std::string to_hex(const void* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    auto b = static_cast<const uint8_t*>(p)[i];
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}

Result<std::string> from_hex(std::string_view h) {
  if (h.size() % 2) return invalid_argument("odd-length hex string");
  std::string out(h.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    auto nib = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int hi = nib(h[2 * i]), lo = nib(h[2 * i + 1]);
    if (hi < 0 || lo < 0) return invalid_argument("bad hex digit");
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

Status ucx_error(const char* what, ucs_status_t s) {
  return unavailable(fmt::format("{} failed: {}", what, ucs_status_string(s)));
}

// One RMA operation handed to the UCX thread; completed by UCX callbacks (on that thread).
struct RmaOp {
  bool is_get = false;
  void* local = nullptr;
  size_t length = 0;
  uint64_t remote_addr = 0;
  ucp_rkey_h rkey = nullptr;
  ucp_ep_h ep = nullptr;
  void* request = nullptr;  // UCX thread only
  bool flushing = false;    // UCX thread only
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;             // guarded by mu
  ucs_status_t status = UCS_OK;  // guarded by mu
};

// The UCX context and worker one endpoint shares between its connections. Every UCX call happens on one
// thread (UCS_THREAD_MODE_SINGLE): other threads post tasks, which avoids UCX's multi-thread lock (it
// spins, and on a loaded machine a preempted holder stalls everyone). The thread polls while there is
// traffic (emulated RMA needs this side's progress to serve the peer), then sleeps on the worker's event
// fd and an eventfd that new tasks ring.
class UcxWorker {
 public:
  static Result<std::shared_ptr<UcxWorker>> create() {
    auto w = std::shared_ptr<UcxWorker>(new UcxWorker());
    ucp_config_t* config = nullptr;
    if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK)
      return ucx_error("ucp_config_read", s);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    ucs_status_t s = ucp_init(&params, config, &w->context_);
    ucp_config_release(config);
    if (s != UCS_OK) return ucx_error("ucp_init", s);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if ((s = ucp_worker_create(w->context_, &wp, &w->worker_)) != UCS_OK) return ucx_error("ucp_worker_create", s);
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    if ((s = ucp_worker_get_address(w->worker_, &addr, &len)) != UCS_OK) return ucx_error("ucp_worker_get_address", s);
    w->address_hex_ = to_hex(addr, len);
    ucp_worker_release_address(w->worker_, addr);
    if ((s = ucp_worker_get_efd(w->worker_, &w->efd_)) != UCS_OK) return ucx_error("ucp_worker_get_efd", s);
    w->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->wake_fd_ < 0) return internal_error("eventfd failed");
    w->thread_ = std::thread([p = w.get()] { p->loop(); });
    return w;
  }

  ~UcxWorker() {
    run([this] {
      for (auto& [id, m] : maps_) {
        ucp_rkey_buffer_release(m.rkey_buffer);
        ucp_mem_unmap(context_, m.memh);
      }
      maps_.clear();
    });
    stop_.store(true);
    ring();
    if (thread_.joinable()) thread_.join();
    if (worker_) ucp_worker_destroy(worker_);
    if (context_) ucp_cleanup(context_);
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  const std::string& address_hex() const { return address_hex_; }

  // Runs `task` on the UCX thread and waits for it.
  void run(std::function<void()> task) {
    auto done = std::make_shared<std::pair<std::mutex, std::condition_variable>>();
    bool finished = false;
    post([&, done] {
      task();
      std::lock_guard<std::mutex> lock(done->first);
      finished = true;
      done->second.notify_all();
    });
    std::unique_lock<std::mutex> lock(done->first);
    done->second.wait(lock, [&] { return finished; });
  }

  void start_rma(const std::shared_ptr<RmaOp>& op) {
    post([this, op] { issue(op); });
  }

  void cancel(const std::shared_ptr<RmaOp>& op) {
    post([this, op] {
      if (op->request) ucp_request_cancel(worker_, op->request);
    });
  }

  Result<ucp_ep_h> create_ep(const std::string& peer_address) {
    ucp_ep_h ep = nullptr;
    run([&] {
      ucp_ep_params_t p{};
      p.field_mask =
          UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
      p.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
      p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      // Peer failure is also seen on the control connection; requests in flight then complete with errors.
      p.err_handler.cb = [](void*, ucp_ep_h, ucs_status_t) {};
      p.err_handler.arg = nullptr;
      if (ucp_ep_create(worker_, &p, &ep) != UCS_OK) {
        // Some transports (posix shared memory) cannot report peer failure.
        p.field_mask &= ~static_cast<uint64_t>(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
        if (ucp_ep_create(worker_, &p, &ep) != UCS_OK) ep = nullptr;
      }
    });
    if (!ep) return unavailable("cannot create a UCX endpoint to the peer's worker");
    return ep;
  }

  void destroy_ep(ucp_ep_h ep, std::vector<ucp_rkey_h> rkeys) {
    run([&] {
      for (ucp_rkey_h r : rkeys) ucp_rkey_destroy(r);
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* req = ucp_ep_close_nbx(ep, &p);
      if (req && !UCS_PTR_IS_ERR(req)) {
        auto t0 = std::chrono::steady_clock::now();
        while (ucp_request_check_status(req) == UCS_INPROGRESS &&
               std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1)) {
          ucp_worker_progress(worker_);
        }
        ucp_request_free(req);
      }
    });
  }

  ucp_rkey_h unpack_rkey(ucp_ep_h ep, const std::string& packed) {
    ucp_rkey_h rkey = nullptr;
    run([&] {
      if (ucp_ep_rkey_unpack(ep, packed.data(), &rkey) != UCS_OK) rkey = nullptr;
    });
    return rkey;
  }

  // Maps a local region for remote access (once) and adds its address and packed rkey to `desc`.
  void describe(const std::shared_ptr<internal::Region>& region, RegionDesc& desc) {
    if (!region->data) return;
    std::string rkey_hex;
    run([&] {
      auto it = maps_.find(to_u64(region->id));
      if (it == maps_.end()) {
        Mapping m;
        ucp_mem_map_params_t mp{};
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
        mp.address = region->data;
        mp.length = region->length;
        if (ucp_mem_map(context_, &mp, &m.memh) != UCS_OK) return;
        if (ucp_rkey_pack(context_, m.memh, &m.rkey_buffer, &m.rkey_size) != UCS_OK) {
          ucp_mem_unmap(context_, m.memh);
          return;
        }
        m.region = region;  // mapped bytes stay valid until this worker goes, even if unregistered meanwhile
        it = maps_.emplace(to_u64(region->id), m).first;
      }
      rkey_hex = to_hex(it->second.rkey_buffer, it->second.rkey_size);
    });
    if (rkey_hex.empty()) return;
    desc.attrs["ucx.addr"] = fmt::format("{:x}", reinterpret_cast<uintptr_t>(region->data));
    desc.attrs["ucx.rkey"] = rkey_hex;
  }

 private:
  struct Mapping {
    ucp_mem_h memh = nullptr;
    void* rkey_buffer = nullptr;
    size_t rkey_size = 0;
    std::shared_ptr<internal::Region> region;
  };
  UcxWorker() = default;

  void post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    ring();
  }
  void ring() {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
  }

  static void finish(RmaOp& op, ucs_status_t s) {
    std::lock_guard<std::mutex> lock(op.mu);
    op.done = true;
    op.status = s;
    op.cv.notify_all();
  }

  static void on_complete(void* request, ucs_status_t status, void* user_data) {
    auto* self = static_cast<UcxWorker*>(user_data);
    auto it = self->active_.find(request);
    if (it == self->active_.end()) return;  // completed inline; handled by issue()
    std::shared_ptr<RmaOp> op = it->second;
    self->active_.erase(it);
    ucp_request_free(request);
    op->request = nullptr;
    self->advance(op, status);
  }

  // Puts, then flushes for remote completion; gets complete on arrival.
  void issue(const std::shared_ptr<RmaOp>& op) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &UcxWorker::on_complete;
    p.user_data = this;
    void* req = op->is_get ? ucp_get_nbx(op->ep, op->local, op->length, op->remote_addr, op->rkey, &p)
                           : ucp_put_nbx(op->ep, op->local, op->length, op->remote_addr, op->rkey, &p);
    track(op, req);
  }

  void track(const std::shared_ptr<RmaOp>& op, void* req) {
    if (req == nullptr) return advance(op, UCS_OK);
    if (UCS_PTR_IS_ERR(req)) return advance(op, UCS_PTR_STATUS(req));
    op->request = req;
    active_[req] = op;
  }

  void advance(const std::shared_ptr<RmaOp>& op, ucs_status_t s) {
    if (s != UCS_OK || op->is_get || op->flushing) return finish(*op, s);
    op->flushing = true;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &UcxWorker::on_complete;
    p.user_data = this;
    track(op, ucp_ep_flush_nbx(op->ep, &p));
  }

  void loop() {
    auto last_active = std::chrono::steady_clock::now();
    while (true) {
      std::vector<std::function<void()>> tasks;
      {
        std::lock_guard<std::mutex> lock(mu_);
        tasks.swap(tasks_);
      }
      for (auto& t : tasks) t();
      if (stop_.load()) return;
      bool busy = !tasks.empty();
      while (ucp_worker_progress(worker_) != 0) busy = true;
      auto now = std::chrono::steady_clock::now();
      if (busy || !active_.empty()) last_active = now;
      if (now - last_active < std::chrono::milliseconds(2)) {
        std::this_thread::yield();
        continue;
      }
      if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;
      pollfd p[2] = {{efd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      // A short timeout, not a long sleep: on UCX's tcp transport a target worker whose event fd missed a
      // wakeup stalled every emulated put/get it serves until the timeout (100 ms each made a 1,300-chunk
      // batch take minutes). Waking every 2 ms when idle costs a few microseconds each time.
      poll(p, 2, 2);
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof v);
    }
  }

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::string address_hex_;
  int efd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::function<void()>> tasks_;  // guarded by mu_
  // UCX thread only:
  std::map<uint64_t, Mapping> maps_;
  std::map<void*, std::shared_ptr<RmaOp>> active_;
};

// Executes read/write chunks with UCX RMA towards one peer (connecting side only: the accepting side
// does not know the connector's worker address and uses the framed path when it initiates).
class UcxDataPath final : public internal::LocalDataPath {
 public:
  UcxDataPath(std::shared_ptr<UcxWorker> worker, std::string peer_address) : worker_(std::move(worker)) {
    if (peer_address.empty()) return;
    auto ep = worker_->create_ep(peer_address);
    if (ep.ok()) {
      ep_ = *ep;
    } else {
      log::warn("link ucx: {}; using the framed path", ep.status().message());
    }
  }
  ~UcxDataPath() override {
    if (!ep_) return;
    std::vector<ucp_rkey_h> rkeys;
    for (auto& [packed, rkey] : rkeys_) rkeys.push_back(rkey);
    worker_->destroy_ep(ep_, std::move(rkeys));
  }

  void describe(const std::shared_ptr<internal::Region>& region, RegionDesc& desc) override {
    worker_->describe(region, desc);
  }

  std::optional<Status> execute(internal::FramedConnection& conn, OpKind kind, const internal::Chunk& c) override {
    if (!ep_ || !c.local->data) return std::nullopt;
    auto remote = lookup(conn, c.remote);
    if (!remote.ok()) return remote.status();
    if (!remote->rkey) return std::nullopt;  // the peer could not map it: framed path
    if (Status r = internal::check_range(remote->length, c.remote_offset, c.length, c.remote, "remote"); !r.ok()) {
      return r;
    }
    if (c.length == 0) return ok_status();
    auto op = std::make_shared<RmaOp>();
    op->is_get = kind == OpKind::kRead;
    op->local = c.local->data + c.local_offset;
    op->length = c.length;
    op->remote_addr = remote->addr + c.remote_offset;
    op->rkey = remote->rkey;
    op->ep = ep_;
    worker_->start_rma(op);
    std::unique_lock<std::mutex> lock(op->mu);
    bool cancelled = false, stalled = false;
    const auto started = std::chrono::steady_clock::now();
    auto cancelled_at = started;
    while (!op->done) {
      op->cv.wait_for(lock, std::chrono::milliseconds(20));
      if (op->done) break;
      const auto now = std::chrono::steady_clock::now();
      // A UCX request that makes no progress (seen rarely with both agents in one process on UCX's default
      // transports) is cancelled and the chunk goes over the framed path instead, so nothing hangs.
      if (!cancelled && (conn.broken() || now - started > kRmaStall)) {
        stalled = !conn.broken();
        worker_->cancel(op);
        cancelled = true;
        cancelled_at = now;
      }
      if (cancelled && now - cancelled_at > std::chrono::seconds(1)) {
        return unavailable(fmt::format("link to {} lost; a UCX request did not finish", conn.peer()));
      }
    }
    if (op->status == UCS_OK) return ok_status();
    if (stalled && op->status == UCS_ERR_CANCELED) {
      log::warn("ucx: a {} of {} bytes to {} stalled for {} ms; sent over the framed path instead",
                op->is_get ? "get" : "put", c.length, conn.peer(),
                std::chrono::duration_cast<std::chrono::milliseconds>(kRmaStall).count());
      return std::nullopt;
    }
    if (cancelled || op->status == UCS_ERR_CANCELED) return unavailable(fmt::format("link to {} lost", conn.peer()));
    return ucx_error("ucx transfer", op->status);
  }

 private:
  struct Remote {
    uint64_t addr = 0;
    uint64_t length = 0;
    ucp_rkey_h rkey = nullptr;
  };

  // Asks the peer about the region for every chunk (one control round trip): the peer checks that it is
  // still registered, so an unregistered region is rejected before any byte moves. Unpacked rkeys are
  // cached by their packed form.
  Result<Remote> lookup(internal::FramedConnection& conn, RegionId id) {
    TS_ASSIGN_OR_RETURN(RegionDesc d, conn.describe_remote(id, std::chrono::milliseconds(2000)));
    Remote r;
    r.length = d.length;
    auto a = d.attrs.find("ucx.addr"), k = d.attrs.find("ucx.rkey");
    if (a == d.attrs.end() || k == d.attrs.end()) return r;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = rkeys_.find(k->second);
    if (it == rkeys_.end()) {
      auto packed = from_hex(k->second);
      if (!packed.ok()) return r;
      ucp_rkey_h rkey = worker_->unpack_rkey(ep_, *packed);
      if (!rkey) return r;
      it = rkeys_.emplace(k->second, rkey).first;
    }
    // The peer's text: a malformed address (std::stoull would throw on this thread) means the framed path.
    const std::string& hex = a->second;
    uint64_t addr = 0;
    auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), addr, 16);
    if (ec != std::errc() || end != hex.data() + hex.size() || hex.empty()) return r;
    r.addr = addr;
    r.rkey = it->second;
    return r;
  }

  std::shared_ptr<UcxWorker> worker_;
  ucp_ep_h ep_ = nullptr;
  std::mutex mu_;
  std::map<std::string, ucp_rkey_h> rkeys_;  // packed hex -> unpacked; guarded by mu_
};

class UcxEndpoint final : public Endpoint {
 public:
  explicit UcxEndpoint(EndpointConfig config) : config_(std::move(config)) {}
  ~UcxEndpoint() override { stop(); }

  std::string_view name() const override { return "ucx"; }
  EndpointCaps caps() const override { return {false, true, 15, 1ull << 20}; }

  Result<std::string> listen(internal::AgentCore& core) override {
    TS_RETURN_IF_ERROR(ensure_worker());
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    if (fd < 0 || inet_pton(AF_INET, config_.host.c_str(), &a.sin_addr) != 1) {
      if (fd >= 0) close(fd);
      return invalid_argument(fmt::format("ucx listen host '{}' must be an IPv4 address", config_.host));
    }
    socklen_t len = sizeof a;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 128) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      close(fd);
      return unavailable(fmt::format("cannot listen on {} for ucx control", config_.host));
    }
    auto worker = worker_;
    loop_ = std::make_unique<internal::AcceptLoop>(fd, core, "ucx", config_.link,
                                                   [worker] { return std::make_unique<UcxDataPath>(worker, ""); });
    loop_->start();
    return fmt::format("{}:{}/{}", config_.host, ntohs(a.sin_port), worker_->address_hex());
  }

  Result<std::shared_ptr<Connection>> connect(internal::AgentCore& core, const std::string& peer,
                                              const std::string& address) override {
    TS_RETURN_IF_ERROR(ensure_worker());
    size_t colon = address.find(':'), slash = address.find('/');
    if (colon == std::string::npos || slash == std::string::npos || slash < colon) {
      return invalid_argument(fmt::format("ucx address '{}' is not HOST:PORT/WORKER", address));
    }
    TS_ASSIGN_OR_RETURN(std::string worker_addr, from_hex(address.substr(slash + 1)));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    int port = std::atoi(address.substr(colon + 1, slash - colon - 1).c_str());
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr) != 1 || port <= 0) {
      return invalid_argument(fmt::format("ucx address '{}' is not HOST:PORT/WORKER", address));
    }
    std::vector<int> fds;
    for (int i = 0; i < config_.link.streams; ++i) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        if (fd >= 0) close(fd);
        for (int f : fds) close(f);
        return unavailable(fmt::format("cannot connect to {} at ucx control {}", peer, address.substr(0, slash)));
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      fds.push_back(fd);
    }
    return internal::finish_connect(core, "ucx", peer, std::move(fds), config_.link,
                                    std::make_unique<UcxDataPath>(worker_, worker_addr));
  }

  void stop() override {
    if (loop_) loop_->stop();
  }

 private:
  Status ensure_worker() {
    std::lock_guard<std::mutex> lock(mu_);
    if (worker_) return ok_status();
    TS_ASSIGN_OR_RETURN(worker_, UcxWorker::create());
    return ok_status();
  }

  EndpointConfig config_;
  std::mutex mu_;
  std::shared_ptr<UcxWorker> worker_;
  std::unique_ptr<internal::AcceptLoop> loop_;
};

}  // namespace

std::unique_ptr<Endpoint> make_ucx_endpoint(const EndpointConfig& config) {
  return std::make_unique<UcxEndpoint>(config);
}

}  // namespace tessera::link
