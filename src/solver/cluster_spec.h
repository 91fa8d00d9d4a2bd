// The cluster spec `tessera up` runs: models, nodes, the router and the planner, read from YAML. Its writer is
// beside it (plan_yaml.cc writes a launchable plan in this format, from launch.h), so `tessera solve --out
// plan.yaml` then `tessera up plan.yaml` runs the placement the solver chose.
//
//   model: ../models/stories260K            # one model: a folder, GGUF file or checkpoint (+ tokenizer:);
//   chat_template: plain                    # served under its folder's name
//   models:                                 # or several, each under its own name (not both keys):
//     - {name: stories, path: ../models/stories260K, chat_template: plain, args: [...]}
//     - {name: qwen3, path: qwen3.gguf}
//   router: {port: 8000, strategy: least_latency, args: [...]}   # "router: off": the first front node serves
//   nodes:
//     - {name: prefill-0, role: prefill, backend: cpu, threads: 1, cpus: [0], model: stories, args: [...]}
//     - {name: decode-0, role: decode, backend: opencl, cpus: [1], model: stories}
//   planner: {fleet: f.yaml, workload: w.yaml, slo: s.yaml, model: stories,   # optional (docs/solver.md);
//             interval_s: 5, cooldown_s: 60, min_gain: 0.15, windows_to_act: 2,  # `model` is required when
//             min_requests: 8, scale: false, port: 0}                            # there are several
//
// Relative paths are read against the spec's folder, then the working directory (base/paths.h). A node's
// `model` names one of `models` (required when there are several). Each decode node is paired with the prefill
// nodes of its own model only. Every error names the spec file and the key.
//
// Thread-safety: pure.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "solver/planner.h"

namespace tessera::solver {

struct SpecModel {
  std::string name;  // what clients send as "model" (--served-model-name)
  std::string path;  // absolute
  std::string tokenizer;
  std::string chat_template = "plain";
  std::vector<std::string> args;  // further `tessera serve` flags for every node of this model
};

struct SpecNode {
  std::string name, role = "both", backend = "cpu";
  int threads = 0;
  std::vector<int> cpus;
  std::vector<std::string> args;  // further `tessera serve` flags
  std::string model;              // a SpecModel's name
};

struct ClusterSpec {
  std::vector<SpecModel> models;  // at least one
  bool router = true;
  int router_port = 8000;
  std::string strategy = "least_latency";
  std::vector<std::string> router_args;  // further `tessera route` flags
  std::vector<SpecNode> nodes;
  // The planner (src/planner/): on when the spec has a `planner:` section. Its spec files are absolute.
  bool planner = false;
  std::string planner_fleet, planner_workload, planner_slo;
  std::string planner_model;  // the model whose nodes it plans (a SpecModel's name)
  double planner_interval_s = 5;
  int planner_port = 0;
  PlannerPolicy planner_policy;

  const SpecModel* model(const std::string& name) const;
};

// Reads a spec file. `default_model` (absolute) is served when the spec names no model. InvalidArgument naming
// the file and key for anything malformed; NotFound for a path that does not exist.
Result<ClusterSpec> read_cluster_spec(const std::string& path, const std::string& default_model);

// The `tessera serve` arguments (after the program name) of `node`: its model, role, backend, served name,
// chat template, threads, the model's and the node's own flags. Planner-run clusters add --role-switchable.
std::vector<std::string> serve_args(const ClusterSpec& spec, const SpecNode& node);

}  // namespace tessera::solver
