// The HTTP side of the cluster credential and of API keys: a guard for internal routes and the small checks
// handlers share. Refusals are logged once per peer IP address so that a scanner hammering an internal route
// cannot flood the log; the set of addresses seen is bounded.
#include <mutex>
#include <set>

#include <fmt/core.h>

#include "base/log.h"
#include "http/http.h"

namespace tessera::http {
namespace {

constexpr size_t kMaxLoggedPeers = 4096;

std::string peer_ip(const std::string& remote) {
  const size_t colon = remote.rfind(':');
  return colon == std::string::npos ? remote : remote.substr(0, colon);
}

std::string auth_error(std::string_view message, std::string_view code) {
  return fmt::format(R"({{"error":{{"message":"{}","type":"authentication_error","param":null,"code":"{}"}}}})",
                     message, code);
}

// Peers already logged, shared by every guarded route of the process.
class RefusalLog {
 public:
  void refused(const Request& r, int status) {
    const std::string ip = peer_ip(r.remote);
    std::lock_guard lock(mu_);
    if (seen_.count(ip) != 0) return;
    if (seen_.size() >= kMaxLoggedPeers) {
      if (!full_logged_)
        log::warn("cluster token: more than {} refused peers; no longer logging new ones", seen_.size());
      full_logged_ = true;
      return;
    }
    seen_.insert(ip);
    log::warn("cluster token: refused {} {} from {} ({}); further refusals of this peer are not logged", r.method,
              r.path, ip, status == 401 ? "no x-tessera-cluster-token header" : "wrong token");
  }

 private:
  std::mutex mu_;
  std::set<std::string> seen_;  // GUARDED_BY(mu_)
  bool full_logged_ = false;    // GUARDED_BY(mu_)
};

RefusalLog& refusal_log() {
  static RefusalLog* log = new RefusalLog();  // never destroyed: io threads may still refuse during exit
  return *log;
}

}  // namespace

bool presents_cluster_token(const Request& r, const ClusterToken& token) {
  if (!token.configured()) return false;
  auto it = r.headers.find(std::string(kClusterTokenHeader));
  return it != r.headers.end() && token.matches(it->second);
}

bool internal_caller(const Request& r, const ClusterToken& token) {
  return !token.configured() || presents_cluster_token(r, token);
}

Handler require_cluster_token(const ClusterToken& token, Handler handler) {
  if (!token.configured()) return handler;
  return [token, handler = std::move(handler)](const Request& r, std::shared_ptr<ResponseWriter> w) {
    auto it = r.headers.find(std::string(kClusterTokenHeader));
    if (it == r.headers.end()) {
      refusal_log().refused(r, 401);
      return w->send(401, auth_error("this route is internal: present the cluster token in x-tessera-cluster-token",
                                     "cluster_token_required"));
    }
    if (!token.matches(it->second)) {
      refusal_log().refused(r, 403);
      return w->send(403, auth_error("wrong cluster token", "cluster_token_wrong"));
    }
    handler(r, std::move(w));
  };
}

void add_cluster_token(Headers& headers, const ClusterToken& token) {
  if (token.configured()) headers[std::string(kClusterTokenHeader)] = token.secret();
}

std::string bearer_token(const Request& r) {
  const std::string h = r.header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (h.size() <= kBearer.size()) return {};
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(h[i])) != std::tolower(static_cast<unsigned char>(kBearer[i]))) {
      return {};
    }
  }
  return h.substr(kBearer.size());
}

bool api_key_matches(std::string_view presented, const std::vector<std::string>& keys) {
  bool match = false;
  for (const std::string& k : keys) match |= constant_time_equal(presented, k);
  return match;
}

}  // namespace tessera::http
