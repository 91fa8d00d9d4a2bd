// Launchers: how the planner's orders (solver/planner.h) reach the machines. One small interface, so that the
// planner never knows whether its nodes are processes on this host or pods in a cluster:
//
//   local (here): re-role = POST /admin/role on the node (serve/role_admin.h); scale-out / scale-in = start or
//                 stop a `tessera serve` process, through hooks `tessera up` provides (planner/local_cluster.h);
//   Kubernetes (to come, deploy/kubernetes/): re-role = patch the pod's role label (its entrypoint makes the
//                 same /admin/role call, or the planner makes it); scale = patch the pool's Deployment replicas.
//
// What a launcher can do is data (LauncherCaps): the planner asks it before it plans a scaling, rather than
// comparing names. Which pool a node belongs to is also the launcher's to say (it started the node, or reads
// a label); a node of no pool is left alone.
//
// Thread-safety: a launcher is called from the planner's thread only, but must tolerate its own processes
// (or pods) changing underneath it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/cluster_token.h"
#include "base/status.h"
#include "ctrl/registry.h"
#include "solver/spec.h"

namespace tessera::planner {

struct LauncherCaps {
  bool re_role = true;
  bool scale = false;  // can start and stop nodes
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual std::string name() const = 0;
  virtual LauncherCaps caps() const = 0;
  // The fleet pool `node` belongs to; empty when it is not one of the planner's.
  virtual std::string pool_of(const ctrl::NodeInfo& node) const = 0;
  // Changes a running node's role; OK once the node took it (its re-registration follows on its own).
  virtual Status set_role(const ctrl::NodeInfo& node, const std::string& role) = 0;
  // Starts one node of `pool` in `role`; returns its address once it is healthy.
  virtual Result<std::string> scale_out(const std::string& pool, const std::string& role) = 0;
  // Stops `node` (drained: what it holds finishes first).
  virtual Status scale_in(const ctrl::NodeInfo& node) = 0;
};

// What `tessera up` lends the local launcher to start and stop its processes. Unset: the launcher cannot scale.
struct ScaleHooks {
  std::function<Result<std::string>(const std::string& pool, const std::string& role)> start;
  std::function<Status(const std::string& address)> stop;
};

// The local launcher: re-roles over HTTP (POST /admin/role with the cluster credential) and scales through
// `hooks`. A node belongs to the first pool whose launch backend is the node's backend (or to the only pool).
std::unique_ptr<Launcher> make_local_launcher(const solver::Fleet& fleet, ClusterToken token, ScaleHooks hooks = {});

}  // namespace tessera::planner
