// A plan as a local cluster: one `tessera serve` node per instance, in the cluster-spec format `tessera up`
// reads (solver/cluster_spec.h), so that `tessera solve --out plan.yaml` followed by `tessera up plan.yaml`
// runs the placement the solver chose. Only pools with a `launch:` section (a backend on this machine) can be
// launched, one device per instance.
//
// Each node gets the plan's limits as serve flags: --max-num-seqs (the batch limit) and --max-batch-tokens
// (the token budget, i.e. the prefill chunk), the KV dtype the workload assumed, and on decode nodes
// --pd-min-tokens 1, so that every prompt is prefilled on the prefill side as the simulator assumes.
//
// Thread-safety: pure.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "solver/placement.h"

namespace tessera::solver {

struct LaunchNode {
  std::string name;  // "<pool>-<k>"
  std::string role;  // prefill, decode, both
  std::string backend;
  int threads = 0;
  std::vector<int> cpus;
  std::vector<std::string> args;  // further `tessera serve` flags
};

struct LaunchCluster {
  std::string model;  // absolute checkpoint path
  std::string tokenizer;
  std::string chat_template = "plain";
  std::string strategy;  // the router strategy matching the fleet's router policy
  int router_port = 8000;
  std::vector<LaunchNode> nodes;
};

// FailedPrecondition (saying why) when the plan cannot run here: the workload names no model path, a
// serving pool has no launch backend, or an instance spans more than one device.
Result<LaunchCluster> launch_cluster(const Problem& p, const Plan& plan);

}  // namespace tessera::solver
