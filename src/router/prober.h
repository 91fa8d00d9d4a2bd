// The router's active health checks: every node is asked GET /health on its interval (router/health.h says when)
// and what it answers is written into the NodeRegistry: in or out of rotation, draining, its capacity (KV blocks),
// its runner and the model names it serves; a node added without a role is asked GET /internal/pd/info once.
// Probes run on a fixed pool (a thread per due probe made the router's thread count grow with the fleet: 800 fake
// nodes, 72 -> 872 threads); a node is probed again only after its last probe finished, so the queue holds at most
// one probe per node.
//
// Thread-safety: start()/stop() from one thread; the callbacks run on the probe threads.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "base/cluster_token.h"
#include "base/task_pool.h"
#include "http/http.h"
#include "router/node_registry.h"

namespace tessera::router {

struct ProberOptions {
  ClusterToken cluster_token;  // sent on every probe
  std::string tls_ca_file;     // for https:// nodes
  int timeout_ms = 500;
  int threads = 8;  // probes in flight at once, whatever the node count
  // The node left rotation (its probes failed): what is open on it should be abandoned.
  std::function<void(const std::string& url)> on_out_of_rotation;
};

// A 503 carrying x-tessera-draining: 1 (a node finishing its work before it stops): alive, closed for new work.
bool draining_answer(const http::Response& r);

class Prober {
 public:
  Prober(NodeRegistry& registry, ProberOptions options);
  ~Prober();
  void start();
  void stop();

 private:
  void loop();
  void probe(const std::string& url);
  void learn_role(const std::string& url);

  NodeRegistry& registry_;
  const ProberOptions options_;
  TaskPool pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace tessera::router
