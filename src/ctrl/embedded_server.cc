#include "ctrl/embedded_server.h"

#include <fmt/format.h>

#include "api/http_status.h"
#include "ctrl/json_codec.h"

namespace tessera::ctrl {
namespace {

using nlohmann::json;

constexpr int64_t kMaxWatchWaitMs = 30000;
// Long polls parked at once: each holds a connection and a writer; more are refused (429), not queued.
constexpr size_t kMaxPendingWatches = 10000;

// The canonical table (api/http_status.h), but for a compacted revision: 410 Gone, etcd's ErrCompacted, tells a
// watcher to re-read rather than retry (in the store, OutOfRange means only that; embedded_store.cc maps it back).
int http_status(const Status& s) { return s.code() == StatusCode::kOutOfRange ? 410 : api::http_status(s); }

void send_error(http::ResponseWriter& w, const Status& s, int64_t revision) {
  w.send(http_status(s), json{{"error", s.message()}, {"revision", revision}}.dump());
}

}  // namespace

EmbeddedServer::EmbeddedServer(const Clock& clock, ClusterToken token, MemoryLimits limits)
    : clock_(clock), token_(std::move(token)), core_(clock, 10000, limits) {}

void EmbeddedServer::set_privileged(std::function<bool(const http::Request&)> is_privileged) {
  privileged_ = std::move(is_privileged);
}

EmbeddedServer::~EmbeddedServer() { stop(); }

void EmbeddedServer::mount(http::Server& server) {
  for (const char* op :
       {"lease/grant", "lease/keepalive", "lease/revoke", "kv/put", "kv/delete", "kv/range", "watch"}) {
    std::string name = op;
    server.route("POST", std::string("/v1/ctrl/") + op,
                 http::require_cluster_token(
                     token_, [this, name](const http::Request& req, std::shared_ptr<http::ResponseWriter> w) {
                       handle(name, req, std::move(w));
                     }));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!ticker_.joinable()) ticker_ = std::thread([this] { tick_loop(); });
}

Status EmbeddedServer::start(const std::string& host, uint16_t port) {
  http::ServerOptions o;
  o.host = host;
  o.port = port;
  own_server_ = std::make_unique<http::Server>(o);
  // Standalone (`tessera ctrl`): a liveness probe for supervisors such as `tessera up`.
  own_server_->route("GET", "/health", [](const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
    w->send(200, R"({"status":"ok"})");
  });
  mount(*own_server_);
  return own_server_->start();
}

uint16_t EmbeddedServer::port() const { return own_server_ ? own_server_->port() : 0; }

void EmbeddedServer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (PendingWatch& p : pending_) p.writer->send(503, json{{"error", "store shutting down"}}.dump());
    pending_.clear();
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  if (own_server_) own_server_->stop(1000);
}

void EmbeddedServer::handle(const std::string& op, const http::Request& req, std::shared_ptr<http::ResponseWriter> w) {
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    w->send(400, json{{"error", "request body must be a JSON object"}}.dump());
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) {
    w->send(503, json{{"error", "store shutting down"}}.dump());
    return;
  }
  try {
    if (op == "lease/grant") {
      auto l = core_.grant(body.at("ttl_ms").get<int64_t>());
      if (!l.ok()) return send_error(*w, l.status(), core_.revision());
      w->send(200, json{{"lease", static_cast<int64_t>(*l)}}.dump());
    } else if (op == "lease/keepalive" || op == "lease/revoke") {
      LeaseId id{body.at("lease").get<int64_t>()};
      Status s = op == "lease/keepalive" ? core_.keep_alive(id) : core_.revoke(id);
      if (!s.ok()) return send_error(*w, s, core_.revision());
      w->send(200, "{}");
    } else if (op == "kv/put" || op == "kv/delete") {
      std::string key = body.at("key").get<std::string>();
      const PutOptions put_options{.privileged = !privileged_ || privileged_(req)};
      auto r = op == "kv/put" ? core_.put(key, body.at("value").get<std::string>(),
                                          LeaseId{body.value("lease", int64_t{0})}, put_options)
                              : core_.remove(key);
      if (!r.ok()) return send_error(*w, r.status(), core_.revision());
      w->send(200, json{{"revision", *r}}.dump());
    } else if (op == "kv/range") {
      json kvs = json::array();
      for (const KeyValue& kv : core_.range(body.value("prefix", ""))) kvs.push_back(kv_to_json(kv));
      w->send(200, json{{"revision", core_.revision()}, {"kvs", kvs}}.dump());
    } else if (op == "watch") {
      PendingWatch p;
      p.prefix = body.value("prefix", "");
      p.since = body.at("since").get<int64_t>();
      int64_t wait_ms = std::clamp<int64_t>(body.value("timeout_ms", int64_t{10000}), 0, kMaxWatchWaitMs);
      auto events = core_.events_since(p.since, p.prefix);
      if (!events.ok()) return send_error(*w, events.status(), core_.revision());
      if (!events->empty() || wait_ms == 0) {
        json evs = json::array();
        for (const WatchEvent& e : *events) evs.push_back(event_to_json(e));
        w->send(200, json{{"revision", core_.revision()}, {"events", evs}}.dump());
        return;
      }
      if (pending_.size() >= kMaxPendingWatches) {
        return send_error(*w, resource_exhausted(fmt::format("{} watches are already waiting", pending_.size())),
                          core_.revision());
      }
      p.deadline_ns = clock_.now_ns() + wait_ms * 1000000;
      p.writer = std::move(w);
      pending_.push_back(std::move(p));
    }
  } catch (const json::exception& e) {
    w->send(400, json{{"error", fmt::format("bad {} request: {}", op, e.what())}}.dump());
    return;
  }
  if (op != "watch" && op != "kv/range") answer_watches(false);
}

// Caller holds mu_. Answers watches that have events (or whose deadline passed).
void EmbeddedServer::answer_watches(bool check_deadlines) {
  int64_t now = clock_.now_ns();
  std::vector<PendingWatch> keep;
  for (PendingWatch& p : pending_) {
    auto events = core_.events_since(p.since, p.prefix);
    if (!events.ok()) {
      send_error(*p.writer, events.status(), core_.revision());
      continue;
    }
    if (events->empty() && !(check_deadlines && now >= p.deadline_ns) && !p.writer->client_gone()) {
      keep.push_back(std::move(p));
      continue;
    }
    json evs = json::array();
    for (const WatchEvent& e : *events) evs.push_back(event_to_json(e));
    p.writer->send(200, json{{"revision", core_.revision()}, {"events", evs}}.dump());
  }
  pending_.swap(keep);
}

void EmbeddedServer::tick_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::milliseconds(20));
    if (stopping_) break;
    core_.expire();
    answer_watches(true);
  }
}

}  // namespace tessera::ctrl
