// The "embedded" Store: a client of EmbeddedServer's JSON endpoints (see embedded_server.h).
#include <fmt/format.h>

#include "ctrl/json_codec.h"
#include "ctrl/store.h"
#include "ctrl/watch_loop.h"
#include "http/http.h"

namespace tessera::ctrl {
namespace {

using nlohmann::json;

constexpr int kRequestTimeoutMs = 5000;
constexpr int kWatchWaitMs = 1000;

class EmbeddedStore final : public Store {
 public:
  EmbeddedStore(std::string base, StoreAuth auth) : base_(std::move(base)), auth_(std::move(auth)) {}

  Result<LeaseId> grant_lease(std::chrono::milliseconds ttl) override {
    TS_ASSIGN_OR_RETURN(json r, call("lease/grant", {{"ttl_ms", ttl.count()}}));
    return LeaseId{r.value("lease", int64_t{0})};
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
      out.revision = r->value("revision", since);
      for (const json& e : r->value("events", json::array())) out.events.push_back(event_from_json(e));
      return out;
    };
    return std::unique_ptr<Watch>(std::make_unique<WatchLoop>(rev, std::move(poll), std::move(callback)));
  }

 private:
  Result<std::vector<KeyValue>> range_at(const std::string& prefix, int64_t* revision) {
    TS_ASSIGN_OR_RETURN(json r, call("kv/range", {{"prefix", prefix}}));
    std::vector<KeyValue> out;
    for (const json& kv : r.value("kvs", json::array())) out.push_back(kv_from_json(kv));
    *revision = r.value("revision", int64_t{0});
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
    if (j.is_object() && j.contains("error")) {
      const json& e = j["error"];
      if (e.is_string()) {
        msg = e.get<std::string>();
      } else if (e.is_object() && e.contains("message") && e["message"].is_string()) {
        msg = e["message"].get<std::string>();
      }
    }
    if (resume && j.is_object() && j.contains("revision") && j["revision"].is_number_integer()) {
      *resume = j["revision"].get<int64_t>();
    }
    switch (resp->status) {
      case 400:
        return invalid_argument(msg);
      case 401:
        return unauthenticated(fmt::format("ctrl store {}: {} (give --cluster-token-file)", base_, msg));
      case 403:
        return permission_denied(fmt::format("ctrl store {}: {}", base_, msg));
      case 404:
        return not_found(msg);
      case 410:
        return out_of_range(msg);
      case 503:
        return unavailable(msg);
      default:
        return internal_error(fmt::format("ctrl store {} answered {} with HTTP {}: {}", base_, op, resp->status, msg));
    }
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
