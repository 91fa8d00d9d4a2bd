// The "etcd" Store: etcd's v3 JSON gateway (grpc-gateway over HTTP/1.1; etcd 3.4 serves it under /v3/), on
// one member or several ("etcd=http://a:2379,http://b:2379,http://c:2379"): unary calls fail over between
// members (etcd_client.h) and each watch is one long-lived stream resumed on another member (etcd_watch.h).
// Keys and values travel base64-encoded; 64-bit integers come back as JSON strings. Lease TTLs are whole
// seconds in etcd (see grant_lease for how a TTL in milliseconds maps onto them).
#include <algorithm>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ctrl/etcd_client.h"
#include "ctrl/etcd_watch.h"
#include "ctrl/etcd_wire.h"
#include "ctrl/store.h"

namespace tessera::ctrl {
namespace {

using nlohmann::json;
using namespace etcd_wire;

class EtcdStore final : public Store {
 public:
  static constexpr int64_t kMinTtlMs = 3000;

  explicit EtcdStore(std::unique_ptr<EtcdClient> client) : client_(std::move(client)) {}

  Result<LeaseId> grant_lease(std::chrono::milliseconds ttl) override {
    // etcd's leases are whole seconds, at least 2 (its minimum lease TTL), and its lessor checks for expiry
    // every 500 ms, so a lease of S seconds ends up to S + 0.5 s after its last renewal. Granting
    // floor((ttl - 1 s) / 1 s) seconds keeps the promise callers rely on, with 0.5 s to spare for a busy
    // server: the entry is gone within `ttl`.
    if (ttl.count() < kMinTtlMs) {
      return invalid_argument(fmt::format(
          "a lease TTL of {} ms is too short for etcd (leases last at least 2 s and expire up to 0.5 s late); "
          "use at least {} ms",
          ttl.count(), kMinTtlMs));
    }
    int64_t secs = (ttl.count() - 1000) / 1000;
    TS_ASSIGN_OR_RETURN(json r, call("/v3/lease/grant", {{"TTL", secs}}));
    int64_t id = to_i64(r, "ID");
    if (id == 0) return internal_error(fmt::format("etcd granted no lease: {}", r.dump()));
    return LeaseId{id};
  }

  Status keep_alive(LeaseId lease) override {
    TS_ASSIGN_OR_RETURN(json r, call("/v3/lease/keepalive", {{"ID", static_cast<int64_t>(lease)}}));
    // One keep-alive response; an expired lease answers with TTL 0 (or no TTL at all).
    const json& res = result_of(r);
    if (to_i64(res, "TTL") <= 0)
      return not_found(fmt::format("etcd lease {} has expired", static_cast<int64_t>(lease)));
    return ok_status();
  }

  Status revoke(LeaseId lease) override {
    return call("/v3/lease/revoke", {{"ID", static_cast<int64_t>(lease)}}).status();
  }

  Status put(const std::string& key, const std::string& value, LeaseId lease) override {
    json body = {{"key", b64_encode(key)}, {"value", b64_encode(value)}};
    if (lease != LeaseId::kNone) body["lease"] = static_cast<int64_t>(lease);
    return call("/v3/kv/put", body).status();
  }

  Status remove(const std::string& key) override {
    TS_ASSIGN_OR_RETURN(json r, call("/v3/kv/deleterange", {{"key", b64_encode(key)}}));
    if (to_i64(r, "deleted") == 0) return not_found(fmt::format("no key '{}'", key));
    return ok_status();
  }

  Result<std::vector<KeyValue>> range(const std::string& prefix) override {
    int64_t rev = 0;
    return range_at(prefix, &rev);
  }

  Result<std::unique_ptr<Watch>> watch(const std::string& prefix, WatchCallback callback) override {
    int64_t rev = 0;
    TS_RETURN_IF_ERROR(range_at(prefix, &rev).status());
    return std::unique_ptr<Watch>(std::make_unique<EtcdWatch>(*client_, prefix, rev, std::move(callback)));
  }

 private:
  Result<std::vector<KeyValue>> range_at(const std::string& prefix, int64_t* revision) {
    TS_ASSIGN_OR_RETURN(
        json r, call("/v3/kv/range", {{"key", b64_encode(prefix)}, {"range_end", b64_encode(prefix_end(prefix))}}));
    std::vector<KeyValue> out;
    for (const json& kv : array_of(r, "kvs")) {
      TS_ASSIGN_OR_RETURN(KeyValue k, kv_from_etcd(kv));
      out.push_back(std::move(k));
    }
    std::sort(out.begin(), out.end(), [](const KeyValue& a, const KeyValue& b) { return a.key < b.key; });
    *revision = r.is_object() && r.contains("header") ? to_i64(r.at("header"), "revision") : 0;
    return out;
  }

  Result<json> call(const std::string& path, const json& body) { return client_->call(path, body); }

  const std::unique_ptr<EtcdClient> client_;
};

}  // namespace

Result<std::unique_ptr<Store>> make_etcd_store(const std::string& endpoints, const StoreAuth& auth) {
  TS_ASSIGN_OR_RETURN(auto client, EtcdClient::create(endpoints, auth));
  return std::unique_ptr<Store>(std::make_unique<EtcdStore>(std::move(client)));
}

}  // namespace tessera::ctrl
