// A cluster spec (solver/cluster_spec.h) as processes on this machine: the embedded control plane, then every
// model's prefill nodes, decode nodes (each given its own model's prefill nodes) and colocated nodes, then the
// router, which discovers them all through the control plane. Each process is a child of this one (base/process.h):
// it is started with the cluster credential, waited for until it prints its address and answers /health, its
// stderr goes to <log_dir>/<name>.log, and it dies with this process. `tessera up` is this plus flag parsing; the
// planner's local launcher starts and stops nodes through start_node() / stop_node().
//
// Thread-safety: start() and stop() from one thread; start_node(), stop_node(), processes() from any (the
// planner's thread) once start() returned.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/cluster_token.h"
#include "base/process.h"
#include "base/status.h"
#include "solver/cluster_spec.h"

namespace tessera::planner {

struct LocalClusterOptions {
  std::string exe;         // the `tessera` executable the processes run (default: this one)
  std::string log_dir;     // each process's stderr: <log_dir>/<name>.log
  std::string token_path;  // the cluster credential file every process gets (--cluster-token-file)
  ClusterToken token;      // its contents, for the checks this process makes
  int listen_timeout_ms = 60000;
  int healthy_timeout_ms = 30000;
  // Progress lines ("prefill-0 (prefill, cpu) at http://..."); unset: none.
  std::function<void(const std::string&)> progress;
};

class LocalCluster {
 public:
  LocalCluster(solver::ClusterSpec spec, LocalClusterOptions options);
  ~LocalCluster();

  // Starts everything; on failure stops what it started and says which process failed and where its log is.
  Status start();
  // The clients' endpoint: the router, or the first decode/colocated node with `router: off`.
  std::string endpoint() const { return endpoint_; }
  std::string ctrl_url() const { return ctrl_url_; }
  size_t processes() const;
  // One more node (the planner scales out): registered with the control plane; its URL once healthy.
  Result<std::string> start_node(const solver::SpecNode& node);
  // Stops the node listening at `address` (it drains); NotFound when no process of this cluster listens there.
  Status stop_node(const std::string& address);
  // Router first, then the nodes, newest first (decode before prefill), each drained (SIGTERM, 15 s).
  void stop();

 private:
  struct Child {
    std::string name;
    std::string url;
    Process process;
  };
  Result<std::string> start_child(const std::string& name, std::vector<std::string> args, const std::vector<int>& cpus);
  Status wait_router_knows(const std::vector<std::string>& urls, int timeout_ms) const;
  void progress(const std::string& line) const;

  const solver::ClusterSpec spec_;
  const LocalClusterOptions options_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Child>> children_;  // GUARDED_BY(mu_), in start order
  std::string ctrl_url_, endpoint_;
};

}  // namespace tessera::planner
