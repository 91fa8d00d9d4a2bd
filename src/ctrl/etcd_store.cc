// The "etcd" Store: etcd's v3 JSON gateway (grpc-gateway over HTTP/1.1; etcd 3.4 serves it under /v3/).
// Keys and values travel base64-encoded; 64-bit integers come back as JSON strings. Lease TTLs are whole
// seconds in etcd (see grant_lease for how a TTL in milliseconds maps onto them).
#include <mutex>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ctrl/store.h"
#include "ctrl/watch_loop.h"
#include "http/http.h"

namespace tessera::ctrl {
namespace {

using nlohmann::json;

constexpr int kRequestTimeoutMs = 5000;
constexpr int kWatchWaitMs = 1000;
constexpr size_t kMaxWatchBuffer = 64 << 20;  // one watch message is far smaller

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string b64_encode(std::string_view in) {
  std::string out;
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kB64[(v >> s) & 63];
  }
  if (size_t left = in.size() - i; left > 0) {
    uint32_t v = uint8_t(in[i]) << 16 | (left == 2 ? uint8_t(in[i + 1]) << 8 : 0);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += left == 2 ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::string> b64_decode(std::string_view in) {
  std::string out;
  uint32_t v = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const char* p = std::strchr(kB64, c);
    if (!p || c == '\0') return data_loss("etcd sent invalid base64");
    v = (v << 6) | static_cast<uint32_t>(p - kB64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xff);
    }
  }
  return out;
}

int64_t to_i64(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return 0;
  const json& v = j.at(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    try {
      return std::stoll(v.get<std::string>());
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

// A string field, or "" when absent or not a string (etcd's answers are untrusted input: a wrong type must
// not throw on the watch thread).
std::string str_of(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The array under `key`, or an empty one.
const json& array_of(const json& j, const char* key) {
  static const json kEmpty = json::array();
  if (!j.is_object()) return kEmpty;
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : kEmpty;
}

// The object under `key`, or `j` itself when there is none (etcd wraps some answers in "result").
const json& result_of(const json& j) {
  if (!j.is_object()) return j;
  auto it = j.find("result");
  return it != j.end() && it->is_object() ? *it : j;
}

// The end of the key range holding every key with this prefix (etcd's convention).
std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<uint8_t>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(prefix.back() + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

Result<KeyValue> kv_from_etcd(const json& j) {
  if (!j.is_object()) return data_loss("etcd sent a key-value that is not an object");
  KeyValue kv;
  TS_ASSIGN_OR_RETURN(kv.key, b64_decode(str_of(j, "key")));
  TS_ASSIGN_OR_RETURN(kv.value, b64_decode(str_of(j, "value")));
  kv.mod_revision = to_i64(j, "mod_revision");
  kv.lease = LeaseId{to_i64(j, "lease")};
  return kv;
}

// Splits a stream of concatenated JSON objects; returns complete ones and keeps the rest in `buf`.
std::vector<json> take_objects(std::string& buf) {
  std::vector<json> out;
  int depth = 0;
  bool in_string = false, escape = false;
  size_t start = 0, consumed = 0;
  for (size_t i = 0; i < buf.size(); ++i) {
    char c = buf[i];
    if (in_string) {
      if (escape)
        escape = false;
      else if (c == '\\')
        escape = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '{') {
      if (depth++ == 0) start = i;
    } else if (c == '}' && depth > 0 && --depth == 0) {
      json j = json::parse(buf.substr(start, i + 1 - start), nullptr, false);
      if (!j.is_discarded()) out.push_back(std::move(j));
      consumed = i + 1;
    }
  }
  buf.erase(0, consumed);
  return out;
}

class EtcdStore final : public Store {
 public:
  static constexpr int64_t kMinTtlMs = 3000;

  EtcdStore(std::string base, StoreAuth auth) : base_(std::move(base)), auth_(std::move(auth)) {}

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
    if (id == 0) return internal_error(fmt::format("etcd {} granted no lease: {}", base_, r.dump()));
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
    PollFn poll = [this, prefix](int64_t since, int64_t* resume) -> Result<PollResult> {
      return poll_watch(prefix, since, resume);
    };
    return std::unique_ptr<Watch>(std::make_unique<WatchLoop>(rev, std::move(poll), std::move(callback)));
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

  // One watch stream for about a second: events after `since`.
  Result<PollResult> poll_watch(const std::string& prefix, int64_t since, int64_t* resume) {
    http::ClientRequest req;
    req.method = "POST";
    req.url = base_ + "/v3/watch";
    req.headers["Content-Type"] = "application/json";
    TS_RETURN_IF_ERROR(authorize(req));
    req.body = json{{"create_request",
                     {{"key", b64_encode(prefix)},
                      {"range_end", b64_encode(prefix_end(prefix))},
                      {"start_revision", since + 1}}}}
                   .dump();
    req.timeout_ms = kWatchWaitMs;
    PollResult out;
    out.revision = since;
    Status stream_error;
    std::string buf;
    auto r = http::fetch_streaming(req, [&](std::string_view chunk) {
      buf.append(chunk);
      if (buf.size() > kMaxWatchBuffer) {
        stream_error = data_loss("etcd watch: an unterminated message larger than 64 MiB");
        return false;
      }
      for (const json& msg : take_objects(buf)) {
        if (!msg.is_object()) continue;
        if (msg.contains("error")) {
          stream_error = unavailable(fmt::format("etcd watch: {}", msg.at("error").dump()));
          return false;
        }
        const json& res = result_of(msg);
        if (int64_t compact = to_i64(res, "compact_revision"); compact > 0) {
          *resume = compact - 1;
          stream_error = out_of_range(fmt::format("etcd compacted history to revision {}; re-read", compact));
          return false;
        }
        for (const json& e : array_of(res, "events")) {
          if (!e.is_object() || !e.contains("kv")) continue;
          auto kv = kv_from_etcd(e.at("kv"));
          if (!kv.ok()) continue;
          WatchEvent ev;
          ev.type = str_of(e, "type") == "DELETE" ? WatchEvent::Type::kDelete : WatchEvent::Type::kPut;
          ev.kv = std::move(*kv);
          out.revision = std::max(out.revision, ev.kv.mod_revision);
          out.events.push_back(std::move(ev));
        }
      }
      return true;  // keep reading until the deadline
    });
    if (!stream_error.ok()) return stream_error;
    if (!out.events.empty()) return out;
    if (!r.ok()) return r.status();
    if (r->status != 200) return unavailable(fmt::format("etcd watch answered HTTP {}", r->status));
    return out;
  }

  // etcd's user auth: a token from /v3/auth/authenticate, sent as the Authorization header; fetched on first
  // use and again when etcd says it expired. Also the CA file for https://.
  Status authorize(http::ClientRequest& req, bool refresh = false) {
    req.tls_ca_file = auth_.tls_ca_file;
    if (auth_.etcd_user.empty()) return ok_status();
    std::lock_guard lock(auth_mu_);
    if (auth_token_.empty() || refresh) {
      http::ClientRequest a;
      a.method = "POST";
      a.url = base_ + "/v3/auth/authenticate";
      a.headers["Content-Type"] = "application/json";
      a.body = json{{"name", auth_.etcd_user}, {"password", auth_.etcd_password}}.dump();
      a.timeout_ms = kRequestTimeoutMs;
      a.tls_ca_file = auth_.tls_ca_file;
      auto r = http::fetch(a);
      if (!r.ok()) return r.status().with_context(fmt::format("etcd {} authenticate", base_));
      json j = json::parse(r->body, nullptr, false);
      if (r->status != 200 || !j.is_object() || !j.contains("token") || !j["token"].is_string()) {
        return unauthenticated(fmt::format("etcd {} refused user '{}' (HTTP {})", base_, auth_.etcd_user, r->status));
      }
      auth_token_ = j["token"].get<std::string>();
    }
    req.headers["Authorization"] = auth_token_;
    return ok_status();
  }

  Result<json> call(const std::string& path, const json& body) {
    http::ClientRequest req;
    req.method = "POST";
    req.url = base_ + path;
    req.body = body.dump();
    req.headers["Content-Type"] = "application/json";
    req.timeout_ms = kRequestTimeoutMs;
    TS_RETURN_IF_ERROR(authorize(req));
    auto resp = http::fetch(req);
    // An expired auth token: authenticate again once.
    if (resp.ok() && !auth_.etcd_user.empty() && resp->status == 401) {
      TS_RETURN_IF_ERROR(authorize(req, true));
      resp = http::fetch(req);
    }
    if (!resp.ok()) return resp.status().with_context(fmt::format("etcd {}", base_));
    json j = json::parse(resp->body, nullptr, false);
    if (j.is_discarded()) return data_loss(fmt::format("etcd {} answered {} with non-JSON", base_, path));
    if (resp->status == 200 && !j.contains("error")) return j;
    std::string msg = j.is_object() ? str_of(j, "message") : resp->body.substr(0, 200);
    if (msg.empty()) msg = j.is_object() && j.contains("error") ? j.at("error").dump() : resp->body.substr(0, 200);
    int code = j.is_object() ? static_cast<int>(to_i64(j, "code")) : 0;
    if (code == 5 || msg.find("not found") != std::string::npos) return not_found(fmt::format("etcd: {}", msg));
    if (code == 3) return invalid_argument(fmt::format("etcd: {}", msg));
    if (code == 16 || resp->status == 401) return unauthenticated(fmt::format("etcd {}: {}", base_, msg));
    if (code == 7 || resp->status == 403) return permission_denied(fmt::format("etcd {}: {}", base_, msg));
    return unavailable(fmt::format("etcd {} {} failed (HTTP {}): {}", base_, path, resp->status, msg));
  }

  std::string base_;
  const StoreAuth auth_;
  std::mutex auth_mu_;
  std::string auth_token_;  // GUARDED_BY(auth_mu_)
};

}  // namespace

std::unique_ptr<Store> make_etcd_store(const std::string& endpoint, const StoreAuth& auth) {
  std::string base = endpoint;
  while (!base.empty() && base.back() == '/') base.pop_back();
  return std::make_unique<EtcdStore>(base, auth);
}

}  // namespace tessera::ctrl
