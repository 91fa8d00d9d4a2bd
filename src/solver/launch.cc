#include "solver/launch.h"

#include <algorithm>

#include <fmt/core.h>

namespace tessera::solver {

Result<LaunchCluster> launch_cluster(const Problem& p, const Plan& plan) {
  LaunchCluster c;
  if (p.workload.model.path.empty())
    return failed_precondition("the workload's model has no 'path' (the checkpoint to serve)");
  c.model = p.workload.model.path;
  c.tokenizer = p.workload.model.tokenizer;
  c.strategy = p.router == RouterPolicy::kRoundRobin ? "round_robin" : "least_latency";
  const double kv = p.workload.model.kv_bytes;
  for (size_t i = 0; i < plan.pools.size(); ++i) {
    const PoolPlacement& pp = plan.pools[i];
    const Pool& pool = p.fleet.pools[i];
    if (pp.role == Role::kIdle || pp.instances == 0) continue;
    if (pool.launch.backend.empty())
      return failed_precondition(fmt::format("pool {} has no 'launch' backend (it does not exist here)", pool.name));
    if (pp.tp != 1)
      return failed_precondition(
          fmt::format("pool {}: instances of {} devices cannot be launched (one device per node)", pool.name, pp.tp));
    const int per = std::max(1, pool.launch.threads);
    for (int k = 0; k < pp.instances; ++k) {
      LaunchNode n;
      n.name = fmt::format("{}-{}", pool.name, k);
      n.role = role_name(pp.role);
      n.backend = pool.launch.backend;
      n.threads = pool.launch.threads;
      for (int j = 0; j < per && !pool.launch.cpus.empty(); ++j) {
        int cpu = pool.launch.cpus[static_cast<size_t>(k * per + j) % pool.launch.cpus.size()];
        if (std::find(n.cpus.begin(), n.cpus.end(), cpu) == n.cpus.end()) n.cpus.push_back(cpu);
      }
      n.args = {"--max-num-seqs", std::to_string(pp.max_batch), "--max-batch-tokens",
                std::to_string(p.fleet.token_budget)};
      if (kv == 2 || kv == 4) n.args.insert(n.args.end(), {"--kv-dtype", kv == 2 ? "f16" : "f32"});
      if (pp.role == Role::kDecode) n.args.insert(n.args.end(), {"--pd-min-tokens", "1"});
      n.args.insert(n.args.end(), pool.launch.args.begin(), pool.launch.args.end());
      c.nodes.push_back(std::move(n));
    }
  }
  if (c.nodes.empty()) return failed_precondition("the plan runs no instance");
  return c;
}

}  // namespace tessera::solver
