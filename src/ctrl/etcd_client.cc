// EtcdClient (etcd_client.h): failover across the members of one etcd cluster, per-member auth tokens.
#include "ctrl/etcd_client.h"

#include <fmt/format.h>

#include "base/log.h"
#include "ctrl/etcd_wire.h"

namespace tessera::ctrl {

using nlohmann::json;
using namespace etcd_wire;

namespace {

// Failures that say something about the member (or the way to it), not about the request: another member
// may well answer.
bool member_failure(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

}  // namespace

Result<std::unique_ptr<EtcdClient>> EtcdClient::create(const std::string& endpoints, StoreAuth auth,
                                                       EtcdTimeouts timeouts) {
  std::vector<std::string> list;
  size_t pos = 0;
  while (pos <= endpoints.size()) {
    size_t comma = endpoints.find(',', pos);
    if (comma == std::string::npos) comma = endpoints.size();
    std::string e = endpoints.substr(pos, comma - pos);
    while (!e.empty() && e.back() == '/') e.pop_back();
    if (e.rfind("http://", 0) != 0 && e.rfind("https://", 0) != 0) {
      return invalid_argument(
          fmt::format("etcd endpoint '{}' in '{}' must be an http:// or https:// URL (several are separated by commas)",
                      e, endpoints));
    }
    TS_RETURN_IF_ERROR(http::parse_url(e).status());
    list.push_back(std::move(e));
    pos = comma + 1;
  }
  if (list.empty()) return invalid_argument("no etcd endpoint given");
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(list), std::move(auth), timeouts));
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints, StoreAuth auth, EtcdTimeouts t)
    : endpoints_(std::move(endpoints)), auth_(std::move(auth)), timeouts_(t), tokens_(endpoints_.size()) {}

void EtcdClient::mark_failed(size_t i) {
  size_t expected = i;
  preferred_.compare_exchange_strong(expected, (i + 1) % endpoints_.size());
}

Status EtcdClient::authenticate(size_t i) {
  http::ClientRequest a;
  a.method = "POST";
  a.url = endpoints_[i] + "/v3/auth/authenticate";
  a.headers["Content-Type"] = "application/json";
  a.headers["Grpc-Metadata-hasleader"] = "true";
  a.body = json{{"name", auth_.etcd_user}, {"password", auth_.etcd_password}}.dump();
  a.timeout_ms = timeouts_.attempt_ms;
  a.tls_ca_file = auth_.tls_ca_file;
  auto r = http::fetch(a);
  if (!r.ok()) return r.status().with_context(fmt::format("etcd {} authenticate", endpoints_[i]));
  json j = json::parse(r->body, nullptr, false);
  if (r->status != 200 || !j.is_object() || !j.contains("token") || !j["token"].is_string()) {
    Status s = error_of(i, "/v3/auth/authenticate", r->status, r->body);
    if (member_failure(s)) return s;
    return unauthenticated(
        fmt::format("etcd {} refused user '{}' (HTTP {})", endpoints_[i], auth_.etcd_user, r->status));
  }
  tokens_[i] = j["token"].get<std::string>();
  return ok_status();
}

Status EtcdClient::prepare(size_t i, const std::string& path, http::ClientRequest& req, bool refresh) {
  req.method = "POST";
  req.url = endpoints_[i] + path;
  req.headers["Content-Type"] = "application/json";
  req.headers["Grpc-Metadata-hasleader"] = "true";
  req.tls_ca_file = auth_.tls_ca_file;
  if (auth_.etcd_user.empty()) return ok_status();
  std::lock_guard lock(auth_mu_);
  if (tokens_[i].empty() || refresh) TS_RETURN_IF_ERROR(authenticate(i));
  req.headers["Authorization"] = tokens_[i];
  return ok_status();
}

Status EtcdClient::error_of(size_t i, const std::string& path, int http_status, const std::string& body) const {
  json j = json::parse(body, nullptr, false);
  std::string msg = j.is_object() ? str_of(j, "message") : body.substr(0, 200);
  if (msg.empty()) msg = j.is_object() && j.contains("error") ? j.at("error").dump() : body.substr(0, 200);
  const int code = j.is_object() ? static_cast<int>(to_i64(j, "code")) : 0;
  const std::string& base = endpoints_[i];
  if (code == 5 || msg.find("not found") != std::string::npos) return not_found(fmt::format("etcd: {}", msg));
  if (code == 3) return invalid_argument(fmt::format("etcd: {}", msg));
  if (code == 16 || http_status == 401) return unauthenticated(fmt::format("etcd {}: {}", base, msg));
  if (code == 7 || http_status == 403) return permission_denied(fmt::format("etcd {}: {}", base, msg));
  return unavailable(fmt::format("etcd {} {} failed (HTTP {}): {}", base, path, http_status, msg));
}

Result<json> EtcdClient::call_one(size_t i, const std::string& path, const json& body, int timeout_ms) {
  http::ClientRequest req;
  TS_RETURN_IF_ERROR(prepare(i, path, req));
  req.body = body.dump();
  req.timeout_ms = timeout_ms;
  auto resp = http::fetch(req);
  // An expired auth token (or one another member issued): authenticate again once.
  if (resp.ok() && !auth_.etcd_user.empty() && resp->status == 401) {
    TS_RETURN_IF_ERROR(prepare(i, path, req, true));
    resp = http::fetch(req);
  }
  if (!resp.ok()) return resp.status().with_context(fmt::format("etcd {}", endpoints_[i]));
  json j = json::parse(resp->body, nullptr, false);
  if (j.is_discarded()) return data_loss(fmt::format("etcd {} answered {} with non-JSON", endpoints_[i], path));
  if (resp->status == 200 && !j.contains("error")) return j;
  return error_of(i, path, resp->status, resp->body);
}

Result<json> EtcdClient::call(const std::string& path, const json& body) {
  const size_t n = endpoints_.size();
  const size_t start = preferred_.load();
  Status last;
  std::string answers;  // every member's, in the order asked: a caller tells an election from an absent cluster
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (start + k) % n;
    auto r = call_one(i, path, body, timeouts_.attempt_ms);
    if (r.ok() || !member_failure(r.status())) {
      if (r.ok() && i != start) {
        log::info("ctrl: etcd {} answers; using it instead of {}", endpoints_[i], endpoints_[start]);
        preferred_.store(i);
      }
      return r;
    }
    last = r.status();
    answers += (answers.empty() ? "" : "; ") + last.message();
  }
  if (n == 1) return last;
  return unavailable(fmt::format("none of the {} etcd endpoints answered {}: {}", n, path, answers));
}

Status EtcdClient::probe(size_t i) {
  // A serializable read is answered by the member itself (no round of consensus), and the hasleader metadata
  // makes a member that lost its cluster refuse it.
  auto r = call_one(i, "/v3/kv/range", json{{"key", b64_encode("/")}, {"count_only", true}, {"serializable", true}},
                    timeouts_.probe_timeout_ms);
  return r.status();
}

}  // namespace tessera::ctrl
