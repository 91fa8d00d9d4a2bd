// The planner as a running service: every interval it reads the node list from the control plane and each
// node's /metrics, turns two scrapes into a window (solver/live_metrics.h), asks the pure decision logic
// (solver/planner.h, with the simulator evaluator of solver/planner_eval.h) what to do, has a Launcher
// (launcher.h) carry it out, logs every decision with its reason and predicted gain, and writes its bounded
// history to the control-plane key /tessera/planner/decisions (the dashboard's contract, docs/solver.md).
// It serves GET /metrics (Prometheus, open like every /metrics) and GET /status (the same JSON as the key,
// behind the cluster credential).
//
// Losing the control plane or the metrics never makes it act: it holds, logs why once, and its state and
// reason say so (in /status and, once the control plane is back, in the key).
//
// Used by `tessera plan` (its own process) and by `tessera up --planner` (a thread of `tessera up`, with a
// launcher that can start and stop nodes). Thread-safety: start()/stop() from one thread; the loop runs on
// its own thread; status_json()/metrics_text() from any thread.
#pragma once

#include <memory>
#include <string>

#include "base/cluster_token.h"
#include "base/status.h"
#include "ctrl/store.h"
#include "planner/launcher.h"
#include "solver/planner.h"
#include "solver/planner_eval.h"

namespace tessera::planner {

struct PlannerConfig {
  solver::Fleet fleet;
  solver::Workload workload;  // the model (and, until metrics arrive, nothing else) the evaluator uses
  // The served model name whose nodes this planner places (one planner per model behind a shared router); nodes
  // registered with other names are not its own. Empty: every node.
  std::string served_model;
  solver::Slo slo;
  solver::PlannerPolicy policy;
  solver::PlannerEvalOptions eval;
  double interval_s = 5;
  bool act = true;  // false: decide and log, never carry out (state "off")
  std::string host = "127.0.0.1";
  int port = 0;  // its /metrics and /status; -1: no HTTP server
  ClusterToken cluster_token;
};

// The fleet, workload and SLO specs (solver/spec_yaml.h) as a config with the default policy; errors name the file.
Result<PlannerConfig> planner_config_from_files(const std::string& fleet, const std::string& workload,
                                                const std::string& slo);

class PlannerLoop {
 public:
  // InvalidArgument when the policy asks for scaling the launcher cannot do, or the interval is not positive.
  static Result<std::unique_ptr<PlannerLoop>> create(std::unique_ptr<ctrl::Store> store,
                                                     std::unique_ptr<Launcher> launcher, PlannerConfig config);
  ~PlannerLoop();

  // The HTTP server (unless port < 0) and, with `run_thread`, the loop thread (else the caller runs windows).
  Status start(bool run_thread = true);
  uint16_t port() const;
  void stop();

  // One window now, on the caller's thread (the loop thread calls it every interval).
  void run_window();

  std::string status_json() const;
  std::string metrics_text() const;

  struct Impl;

 private:
  explicit PlannerLoop(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::planner
