// The "embedded" Store: a client of EmbeddedServer's JSON endpoints (see embedded_server.h).
#include <fmt/format.h>

#include "api/http_status.h"
#include "ctrl/json_codec.h"
#include "ctrl/store.h"
#include "ctrl/watch_loop.h"
#include "http/http.h"

namespace tessera::ctrl {
namespace {

using nlohmann::json;

constexpr int kRequestTimeoutMs = 5000;
constexpr int kWatchWaitMs = 1000;
// More entries than any store answer should hold (the server caps its keys far below this).
constexpr size_t kMaxEntries = 1 << 20;

class EmbeddedStore final : public Store {
 public:
  EmbeddedStore(std::string base, StoreAuth auth) : base_(std::move(base)), auth_(std::move(auth)) {}

  Result<LeaseId> grant_lease(std::chrono::milliseconds ttl) override {
    TS_ASSIGN_OR_RETURN(json r, call("lease/grant", {{"ttl_ms", ttl.count()}}));
    JsonFields f(r, fmt::format("ctrl store {} lease answer", base_));
    const int64_t id = f.integer("lease", 1, INT64_MAX);
    if (!f.ok()) return data_loss(f.status().message());
    return LeaseId{id};
  }
  Status keep_alive(LeaseId lease) override {
    return call("lease/keepalive", {{"lease", static_cast<int64_t>(lease)}}).status();
  }
  Status revoke(LeaseId lease) override {
    return call("lease/revoke", {{"lease", static_cast<int64_t>(lease)}}).status();
  }
  Status put(const std::string& key, const std::string& value, LeaseId lease) override {
    return call("kv/put", {{"key", key}, {"value", value}, {"lease", static_cast<int64_t>(lease)}}).status();
  }
  Status remove(const std::string& key) override { return call("kv/delete", {{"key", key}}).status(); }

  Result<std::vector<KeyValue>> range(const std::string& prefix) override {
    int64_t rev = 0;
    return range_at(prefix, &rev);
  }

  Result<std::unique_ptr<Watch>> watch(const std::string& prefix, WatchCallback callback) override {
    int64_t rev = 0;
    TS_RETURN_IF_ERROR(range_at(prefix, &rev).status());
    PollFn poll = [this, prefix](int64_t since, int64_t* resume) -> Result<PollResult> {
      json body = {{"prefix", prefix}, {"since", since}, {"timeout_ms", kWatchWaitMs}};
      auto r = call("watch", body, kWatchWaitMs + kRequestTimeoutMs, resume);
      if (!r.ok()) return r.status();
      PollResult out;
      JsonFields f(*r, fmt::format("ctrl store {} watch answer", base_));
      out.revision = f.integer("revision", 0, INT64_MAX, since);
      const json* events = f.array("events", kMaxEntries, true);
      if (!f.ok()) return data_loss(f.status().message());
      if (events != nullptr) {
        for (const json& e : *events) {
          auto ev = event_from_json(e);
          if (!ev.ok()) return data_loss(ev.status().message());
          out.events.push_back(std::move(*ev));
        }
      }
      return out;
    };
    return std::unique_ptr<Watch>(std::make_unique<WatchLoop>(rev, std::move(poll), std::move(callback)));
  }

 private:
  Result<std::vector<KeyValue>> range_at(const std::string& prefix, int64_t* revision) {
    TS_ASSIGN_OR_RETURN(json r, call("kv/range", {{"prefix", prefix}}));
    std::vector<KeyValue> out;
    JsonFields f(r, fmt::format("ctrl store {} range answer", base_));
    *revision = f.integer("revision", 0, INT64_MAX, 0);
    const json* kvs = f.array("kvs", kMaxEntries, true);
    if (!f.ok()) return data_loss(f.status().message());
    if (kvs != nullptr) {
      for (const json& kv : *kvs) {
        auto one = kv_from_json(kv);
        if (!one.ok()) return data_loss(one.status().message());
        out.push_back(std::move(*one));
      }
    }
    return out;
  }

  // POSTs `body` to /v1/ctrl/<op>; maps HTTP errors back to Status codes. On 410 stores the server's
  // revision in *resume.
  Result<json> call(const std::string& op, const json& body, int timeout_ms = kRequestTimeoutMs,
                    int64_t* resume = nullptr) {
    http::ClientRequest req;
    req.method = "POST";
    req.url = base_ + "/v1/ctrl/" + op;
    req.body = body.dump();
    req.headers["Content-Type"] = "application/json";
    http::add_cluster_token(req.headers, auth_.cluster_token);
    req.tls_ca_file = auth_.tls_ca_file;
    req.timeout_ms = timeout_ms;
    auto resp = http::fetch(req);
    if (!resp.ok()) return resp.status().with_context(fmt::format("ctrl store {}", base_));
    json j = json::parse(resp->body, nullptr, false);
    if (j.is_discarded()) return data_loss(fmt::format("ctrl store {} answered {} with non-JSON", base_, op));
    if (resp->status == 200) return j;
    // {"error": "..."} from the store itself; {"error": {"message": ...}} from the credential guard.
    std::string msg;
    if (j.is_object() && j.contains("error") && j["error"].is_object()) {
      JsonFields e(j["error"], "ctrl store error");
      msg = e.string("message", 4096, "");
      if (!e.ok()) msg = e.status().message();
    } else {
      JsonFields f(j, "ctrl store error");
      msg = f.string("error", 4096, "");
      if (resume) *resume = f.integer("revision", 0, INT64_MAX, 0);
      if (!f.ok()) msg = f.status().message();
    }
    // The credential refusals get advice; a compacted revision is 410 (embedded_server.cc); the rest is the
    // canonical table (api/http_status.h).
    switch (resp->status) {
      case 401:
        return unauthenticated(fmt::format("ctrl store {}: {} (give --cluster-token-file)", base_, msg));
      case 403:
        return permission_denied(fmt::format("ctrl store {}: {}", base_, msg));
      case 410:
        return out_of_range(msg);
      default:
        break;
    }
    Status s = api::status_from_http(resp->status, msg);
    if (s.code() == StatusCode::kInternal) {
      return internal_error(fmt::format("ctrl store {} answered {} with HTTP {}: {}", base_, op, resp->status, msg));
    }
    return s;
  }

  std::string base_;
  const StoreAuth auth_;
};

}  // namespace

std::unique_ptr<Store> make_embedded_store(const std::string& endpoint, const StoreAuth& auth) {
  std::string base = endpoint;
  while (!base.empty() && base.back() == '/') base.pop_back();
  return std::make_unique<EmbeddedStore>(base, auth);
}

}  // namespace tessera::ctrl
