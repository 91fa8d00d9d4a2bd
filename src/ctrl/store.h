// ctrl::Store: the control plane's key-value store with leases and watches, behind one interface with two
// implementations registered by name: "embedded" (an HTTP service, embedded_server.h, run by `tessera
// ctrl` or hosted inside another process) and "etcd" (etcd's v3 JSON gateway).
//
// Keys are slash-separated paths ("/tessera/nodes/n1"); values are opaque strings (JSON by convention).
// A key put with a lease disappears when the lease expires: a process that dies stops renewing its lease,
// so its entries vanish within the TTL. Watches push every change under a prefix, in revision order.
//
// Thread-safety: every Store method may be called from any thread. Watch callbacks run on a thread owned
// by the watch; destroying the Watch stops them (it waits for a callback in progress).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/cluster_token.h"
#include "base/registry.h"
#include "base/status.h"

namespace tessera::ctrl {

enum class LeaseId : int64_t { kNone = 0 };

struct KeyValue {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;  // store revision of the last change to this key
  LeaseId lease = LeaseId::kNone;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // for kDelete only key and mod_revision are meaningful
};

// Receives a batch of events, or a non-OK status when the watch broke (the store went away, or history
// was compacted); after an error the watch keeps retrying and the callback should re-read with range().
using WatchCallback = std::function<void(const std::vector<WatchEvent>& events, const Status& status)>;

class Watch {
 public:
  virtual ~Watch() = default;
};

class Store {
 public:
  virtual ~Store() = default;
  virtual Result<LeaseId> grant_lease(std::chrono::milliseconds ttl) = 0;
  // Renews the lease for another TTL. NotFound when it has expired (or the store forgot it on restart).
  virtual Status keep_alive(LeaseId lease) = 0;
  virtual Status revoke(LeaseId lease) = 0;
  virtual Status put(const std::string& key, const std::string& value, LeaseId lease = LeaseId::kNone) = 0;
  virtual Status remove(const std::string& key) = 0;
  // All keys starting with `prefix`, sorted by key.
  virtual Result<std::vector<KeyValue>> range(const std::string& prefix) = 0;
  virtual Result<std::unique_ptr<Watch>> watch(const std::string& prefix, WatchCallback callback) = 0;
};

// How a client proves itself to the store (docs/security.md). The embedded store takes the cluster token (in
// x-tessera-cluster-token); etcd takes a user and password (its v3 auth: a token from /v3/auth/authenticate
// in the Authorization header). Either may use https:// with `tls_ca_file` as the trusted authorities.
struct StoreAuth {
  ClusterToken cluster_token;
  std::string tls_ca_file;
  std::string etcd_user;
  std::string etcd_password;
};

// `kind` is "embedded" or "etcd"; `endpoint` the base URL ("http://127.0.0.1:2379" or https://). Unknown
// kinds list the known ones.
using StoreFactory = std::function<Result<std::unique_ptr<Store>>(const std::string& endpoint, const StoreAuth& auth)>;
using StoreRegistry = Registry<StoreFactory>;  // base/registry.h
StoreRegistry& store_registry();
// AlreadyExists for a taken kind.
Status register_store(const std::string& kind, StoreFactory factory);
Result<std::unique_ptr<Store>> make_store(const std::string& kind, const std::string& endpoint,
                                          const StoreAuth& auth = {});
// "embedded=http://host:port" or "etcd=http://host:port".
Result<std::unique_ptr<Store>> make_store(const std::string& spec, const StoreAuth& auth = {});
// A command-line --ctrl value: "KIND=URL" as above, or a bare "http://host:port", which is the embedded store.
Result<std::unique_ptr<Store>> make_store_from_flag(const std::string& flag, const StoreAuth& auth = {});
void register_builtin_stores();

}  // namespace tessera::ctrl
