// EtcdClient: the connection side of the etcd store. It holds every endpoint of one etcd cluster
// ("http://a:2379,http://b:2379,..."), sends each unary call to the member that answered last and fails over
// to the next one when a member cannot be reached, times out, or has no leader, and keeps etcd's user-auth
// token per member (etcd's simple tokens are only valid on the member that issued them).
//
// Every request carries the gRPC metadata "hasleader: true" (grpc-gateway forwards `Grpc-Metadata-*`
// headers): a member cut off from its cluster then refuses at once with "no leader" instead of waiting out
// its request timeout, which is what lets a lease be renewed on another member well within its TTL.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ctrl/store.h"
#include "http/http.h"

namespace tessera::ctrl {

struct EtcdTimeouts {
  int attempt_ms = 1500;         // one unary request to one member
  int probe_interval_ms = 1000;  // how often a watch checks that its member still has a leader
  int probe_timeout_ms = 1500;
};

class EtcdClient {
 public:
  // `endpoints` is one URL or several separated by commas, each http:// or https://.
  static Result<std::unique_ptr<EtcdClient>> create(const std::string& endpoints, StoreAuth auth,
                                                    EtcdTimeouts timeouts = {});

  // POSTs `body` to `path` ("/v3/kv/put"), failing over across members. Answers from etcd that are not about
  // the member's health (NotFound, InvalidArgument, PermissionDenied, Unauthenticated) are returned as they
  // are; Unavailable once every member has been tried.
  Result<nlohmann::json> call(const std::string& path, const nlohmann::json& body);

  // The member to use now: the one that answered last.
  size_t preferred() const { return preferred_.load(); }
  // Moves away from member `i` if it is the preferred one (a watch found it unhealthy).
  void mark_failed(size_t i);
  size_t size() const { return endpoints_.size(); }
  const std::string& endpoint(size_t i) const { return endpoints_[i]; }
  const EtcdTimeouts& timeouts() const { return timeouts_; }

  // Fills in the URL of member `i` + `path`, the CA file, the hasleader metadata and the auth token (fetched
  // from that member when there is none yet, or again when `refresh`).
  Status prepare(size_t i, const std::string& path, http::ClientRequest& req, bool refresh = false);
  // OK when member `i` answers a cheap serializable read and has a leader.
  Status probe(size_t i);
  // Maps an etcd error answer (HTTP status + JSON body) to a status with a standard code.
  Status error_of(size_t i, const std::string& path, int http_status, const std::string& body) const;

 private:
  EtcdClient(std::vector<std::string> endpoints, StoreAuth auth, EtcdTimeouts t);
  Result<nlohmann::json> call_one(size_t i, const std::string& path, const nlohmann::json& body, int timeout_ms);
  Status authenticate(size_t i);  // requires auth_mu_

  const std::vector<std::string> endpoints_;
  const StoreAuth auth_;
  const EtcdTimeouts timeouts_;
  std::atomic<size_t> preferred_{0};
  std::mutex auth_mu_;
  std::vector<std::string> tokens_;  // GUARDED_BY(auth_mu_), one per endpoint
};

}  // namespace tessera::ctrl
