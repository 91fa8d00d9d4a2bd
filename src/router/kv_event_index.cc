#include "router/kv_event_index.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include <fmt/format.h>

#include "base/log.h"
#include "http/http.h"

namespace tessera::router {

namespace {
void set_tier(std::unordered_map<uint64_t, uint8_t>& held, std::array<size_t, api::kKvTiers>& count, uint64_t hash,
              int tier, bool on) {
  const uint8_t bit = static_cast<uint8_t>(1u << tier);
  auto it = held.find(hash);
  const bool had = it != held.end() && (it->second & bit) != 0;
  if (on == had) return;
  if (on) {
    held[hash] |= bit;
    count[tier]++;
    return;
  }
  it->second &= static_cast<uint8_t>(~bit);
  count[tier]--;
  if (it->second == 0) held.erase(it);
}
}  // namespace

Status KvEventIndex::apply(const std::string& url, const api::KvEventsBody& b) {
  std::lock_guard lock(mu_);
  Node& n = nodes_[url];
  if (b.reset) {
    n = Node{b.epoch, b.last, b.block_tokens, {}, {}};
    n.states = b.states;
    for (int t = 0; t < api::kKvTiers; ++t) {
      for (uint64_t h : b.held[t]) set_tier(n.held, n.count, h, t, true);
      for (uint64_t h : b.held_states[t]) set_tier(n.state_held, n.state_count, h, t, true);
    }
    return ok_status();
  }
  const bool continues = n.epoch != 0 && b.epoch == n.epoch && b.block_tokens == n.block_tokens &&
                         (b.events.empty() ? b.last == n.last : b.events.front().seq == n.last + 1);
  if (!continues) {
    nodes_.erase(url);
    return failed_precondition(fmt::format("{}: KV events do not continue the last read; reading it again", url));
  }
  for (const api::KvBlockEvent& e : b.events) {
    if (e.tier < 0 || e.tier >= api::kKvTiers) continue;
    if (e.state) {
      set_tier(n.state_held, n.state_count, e.hash, e.tier, e.stored);
    } else {
      set_tier(n.held, n.count, e.hash, e.tier, e.stored);
    }
    n.last = e.seq;
  }
  return ok_status();
}

std::pair<uint64_t, uint64_t> KvEventIndex::cursor(const std::string& url) const {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(url);
  return it == nodes_.end() ? std::pair<uint64_t, uint64_t>{0, 0} : std::pair{it->second.epoch, it->second.last};
}

KvEventIndex::Match KvEventIndex::match(const std::string& url, std::span<const uint64_t> chain,
                                        int block_tokens) const {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(url);
  if (it == nodes_.end() || it->second.block_tokens != block_tokens) return {};
  Match m{0, 0};
  size_t i = 0;
  auto tiers = [&](uint64_t h) {
    auto f = it->second.held.find(h);
    return f == it->second.held.end() ? uint8_t{0} : f->second;
  };
  for (; i < chain.size() && (tiers(chain[i]) & 1u); ++i) ++m.device;
  for (; i < chain.size() && tiers(chain[i]) != 0; ++i) ++m.lower;  // the host connector's run after the device's
  if (!it->second.states) return m;
  // A hybrid model's node goes on from the state after the last block it uses: the run ends at the last block after
  // which some tier holds one.
  int64_t usable = m.device + m.lower;
  while (usable > 0 && !it->second.state_held.contains(chain[static_cast<size_t>(usable - 1)])) --usable;
  m.device = std::min(m.device, usable);
  m.lower = usable - m.device;
  return m;
}

void KvEventIndex::annotate(std::span<NodeSnapshot> nodes, std::span<const uint64_t> chain, int block_tokens) const {
  for (NodeSnapshot& n : nodes) {
    const Match m = match(n.url, chain, block_tokens);
    n.cached_blocks = m.device;
    n.lower_tier_blocks = m.lower;
  }
}

std::array<size_t, api::kKvTiers> KvEventIndex::blocks(const std::string& url) const {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(url);
  return it == nodes_.end() ? std::array<size_t, api::kKvTiers>{} : it->second.count;
}

std::optional<std::array<size_t, api::kKvTiers>> KvEventIndex::states(const std::string& url) const {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(url);
  if (it == nodes_.end() || !it->second.states) return std::nullopt;
  return it->second.state_count;
}

void KvEventIndex::remove_node(const std::string& url) {
  std::lock_guard lock(mu_);
  nodes_.erase(url);
}

KvEventPoller::KvEventPoller(KvEventIndex& index, std::function<std::vector<std::string>()> nodes,
                             KvEventPollerOptions options)
    : index_(index),
      nodes_(std::move(nodes)),
      options_(std::move(options)),
      pool_("router kv events", options_.threads, std::numeric_limits<size_t>::max()) {}

KvEventPoller::~KvEventPoller() { stop(); }

void KvEventPoller::start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!stop_) {
      lock.unlock();
      for (const std::string& url : nodes_()) {
        {
          std::lock_guard busy(mu_);
          if (auto q = quiet_until_.find(url); q != quiet_until_.end()) {
            if (std::chrono::steady_clock::now() < q->second) continue;
            quiet_until_.erase(q);
          }
          if (!busy_.insert(url).second) continue;  // its last read is still going
        }
        const bool queued = pool_.submit([this, url] {
          poll(url);
          std::lock_guard busy(mu_);
          busy_.erase(url);
        });
        if (!queued) {
          std::lock_guard busy(mu_);
          busy_.erase(url);
        }
      }
      lock.lock();
      cv_.wait_for(lock, std::chrono::milliseconds(options_.interval_ms), [&] { return stop_; });
    }
    lock.unlock();
    pool_.drop_queued();
  });
}

void KvEventPoller::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool KvEventPoller::poll(const std::string& url) {
  const auto [epoch, after] = index_.cursor(url);
  http::ClientRequest req;
  http::add_cluster_token(req.headers, options_.cluster_token);
  req.tls_ca_file = options_.tls_ca_file;
  req.url = fmt::format("{}{}?epoch={}&after={}", url, api::kKvEventsPath, epoch, after);
  req.timeout_ms = options_.timeout_ms;
  auto r = http::fetch(req);
  if (!r.ok() || r->status != 200) {  // a node without the route (not a tessera node, or older), or one that is down
    // A refused credential is a misconfiguration the operator must hear of: the exact index is off for this node.
    if (r.ok() && (r->status == 401 || r->status == 403))
      log::warn("router: {} refused the cluster token for its KV events ({}); routing it by history only", url,
                r->status);
    std::lock_guard lock(mu_);
    quiet_until_[url] =
        std::chrono::steady_clock::now() + (r.ok() ? std::chrono::seconds(30) : std::chrono::seconds(2));
    return false;
  }
  auto body = api::parse_kv_events(r->body);
  if (!body.ok()) {
    log::warn("router: {}: {}", url, body.status().message());
    return false;
  }
  Status s = index_.apply(url, *body);
  if (!s.ok()) log::info("router: {}", s.message());
  return s.ok();
}

}  // namespace tessera::router
