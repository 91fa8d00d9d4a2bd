// EmbeddedServer: the "embedded" store's HTTP face. Hosts a MemoryCore behind JSON endpoints under
// /v1/ctrl/ on an http::Server: standalone (`tessera ctrl`) or mounted on a server another process already
// runs (the router). A ticker thread expires leases and answers long-polling watches.
//
//   POST /v1/ctrl/lease/grant     {"ttl_ms": N}                        -> {"lease": id}
//   POST /v1/ctrl/lease/keepalive {"lease": id}                        -> {} | 404
//   POST /v1/ctrl/lease/revoke    {"lease": id}                        -> {} | 404
//   POST /v1/ctrl/kv/put          {"key", "value", "lease"}            -> {"revision"}
//   POST /v1/ctrl/kv/delete       {"key"}                              -> {"revision"} | 404
//   POST /v1/ctrl/kv/range        {"prefix"}                           -> {"revision", "kvs": [...]}
//   POST /v1/ctrl/watch           {"prefix", "since", "timeout_ms"}    -> {"revision", "events": [...]} | 410
// Errors are {"error": message} with 400 (bad request), 404 (unknown lease/key), 410 (watch must re-read).
//
// With a cluster token every /v1/ctrl/ route requires it (x-tessera-cluster-token: 401 without, 403 wrong);
// without one the store is open to anyone who reaches its port (docs/security.md). /health stays open.
//
// Thread-safety: all methods thread-safe; handlers run on the http server's io threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/cluster_token.h"
#include "ctrl/memory_core.h"
#include "http/http.h"

namespace tessera::ctrl {

class EmbeddedServer {
 public:
  explicit EmbeddedServer(const Clock& clock = SteadyClock::instance(), ClusterToken token = {});
  ~EmbeddedServer();
  EmbeddedServer(const EmbeddedServer&) = delete;
  EmbeddedServer& operator=(const EmbeddedServer&) = delete;

  // Adds the /v1/ctrl/ routes to `server` (before it starts) and starts the ticker. The routes point at this
  // object: stop `server` before destroying it (after stop() they answer 503).
  void mount(http::Server& server);
  // Runs its own http server on host:port (0: a free port).
  Status start(const std::string& host, uint16_t port);
  uint16_t port() const;
  void stop();

 private:
  struct PendingWatch {
    std::string prefix;
    int64_t since = 0;
    int64_t deadline_ns = 0;
    std::shared_ptr<http::ResponseWriter> writer;
  };
  void handle(const std::string& op, const http::Request& req, std::shared_ptr<http::ResponseWriter> w);
  void answer_watches(bool check_deadlines);
  void tick_loop();

  const Clock& clock_;
  const ClusterToken token_;
  std::unique_ptr<http::Server> own_server_;
  std::mutex mu_;
  std::condition_variable cv_;
  MemoryCore core_;                    // guarded by mu_
  std::vector<PendingWatch> pending_;  // guarded by mu_
  bool stopping_ = false;              // guarded by mu_
  std::thread ticker_;
};

}  // namespace tessera::ctrl
