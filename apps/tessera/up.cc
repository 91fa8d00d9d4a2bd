// `tessera up [SPEC.yaml]`: starts a local cluster (the control plane, every model's nodes, then the router in
// front of them), waits until every process is healthy, prints the endpoint, and stops everything on Ctrl-C or
// SIGTERM. The spec format is solver/cluster_spec.h (one model or several behind one router; see
// deploy/local-mixed.yaml and deploy/two-models.yaml); the processes are run by planner/local_cluster.h.
// A plan written by `tessera solve --out` for pools that exist here is such a spec (solver/launch.h).
// Every process gets the cluster token (--cluster-token-file): the given one, or a new one created in the run
// folder with mode 0600 (docs/security.md).
// With a `planner:` section the planner runs in this process (--planner on|off overrides): it re-roles and, with
// `scale: true`, starts and stops nodes of its model (docs/solver.md).
// Without a spec: prefill on cpu, decode on opencl (ref when this machine has no OpenCL device).
#include <CLI/CLI.hpp>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "base/cluster_token.h"
#include "commands.h"
#include "ctrl/store.h"
#include "model_paths.h"
#include "ops/registry.h"
#include "planner/local_cluster.h"
#include "planner/planner_loop.h"
#include "solver/cluster_spec.h"

namespace tessera::cli {
namespace {

Result<solver::ClusterSpec> default_spec() {
  solver::ClusterSpec s;
  solver::SpecModel m;
  TS_ASSIGN_OR_RETURN(m.path, default_model_dir());
  m.name = std::filesystem::path(m.path).filename().string();
  s.models.push_back(m);
  const bool opencl = ops::open_device("opencl").ok();
  s.nodes.push_back({"prefill-0", "prefill", "cpu", 1, {0}, {}, m.name});
  s.nodes.push_back({"decode-0", "decode", opencl ? "opencl" : "ref", 1, {1}, {}, m.name});
  if (!opencl) std::fprintf(stderr, "tessera up: no OpenCL device here; the decode node uses the ref backend\n");
  return s;
}

// The planner as a thread of this process, acting on the nodes of its model through `cluster`.
Result<std::unique_ptr<planner::PlannerLoop>> start_planner(const solver::ClusterSpec& spec,
                                                            planner::LocalCluster& cluster, const ClusterToken& token) {
  TS_ASSIGN_OR_RETURN(auto config,
                      planner::planner_config_from_files(spec.planner_fleet, spec.planner_workload, spec.planner_slo));
  // The local launcher re-roles over /admin/role and scales by starting `tessera serve` processes of a pool's
  // launch section, serving the planner's model.
  auto scaled = std::make_shared<int>(0);
  planner::ScaleHooks hooks;
  hooks.start = [&spec, &cluster, fleet = config.fleet, scaled](const std::string& pool,
                                                                const std::string& role) -> Result<std::string> {
    const solver::Pool* p = nullptr;
    for (const solver::Pool& q : fleet.pools) p = q.name == pool ? &q : p;
    if (p == nullptr || p->launch.backend.empty())
      return failed_precondition(fmt::format("pool {} has no launch section: it cannot be started here", pool));
    solver::SpecNode n{fmt::format("{}-planned-{}", pool, ++*scaled),
                       role,
                       p->launch.backend,
                       p->launch.threads,
                       p->launch.cpus,
                       p->launch.args,
                       spec.planner_model};
    std::fprintf(stderr, "tessera up: the planner starts %s (%s)\n", n.name.c_str(), role.c_str());
    return cluster.start_node(n);
  };
  hooks.stop = [&cluster](const std::string& address) { return cluster.stop_node(address); };
  ctrl::StoreAuth auth;
  auth.cluster_token = token;
  TS_ASSIGN_OR_RETURN(auto store, ctrl::make_store_from_flag(cluster.ctrl_url(), auth));
  config.policy = spec.planner_policy;
  config.interval_s = spec.planner_interval_s;
  config.port = spec.planner_port;
  config.cluster_token = token;
  config.served_model = spec.planner_model;
  auto launcher = planner::make_local_launcher(config.fleet, token, hooks);
  TS_ASSIGN_OR_RETURN(auto loop,
                      planner::PlannerLoop::create(std::move(store), std::move(launcher), std::move(config)));
  TS_RETURN_IF_ERROR(loop->start());
  return loop;
}

int run_up(const std::string& spec_path, int router_port_override, const std::string& token_file,
           const std::string& planner_flag) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Result<solver::ClusterSpec> spec = default_spec();
  if (!spec_path.empty()) {
    auto bundled = default_model_dir();
    spec = solver::read_cluster_spec(spec_path, bundled.ok() ? *bundled : "");
  }
  if (!spec.ok()) return fail(spec.status().message());
  if (router_port_override >= 0) spec->router_port = router_port_override;
  if (planner_flag == "off") spec->planner = false;
  if (planner_flag == "on") {
    if (spec->planner_fleet.empty())
      return fail("--planner on needs a `planner:` section (fleet, workload, slo) in the spec");
    spec->planner = true;
  }
  if (spec->planner && !spec->router) return fail("the planner needs the router and its control plane (router: off)");
  for (const solver::SpecModel& m : spec->models) {
    if (m.path.empty()) return fail(fmt::format("model {} has no path", m.name));
    if (spec->models.size() == 1) {
      std::printf("tessera up: model %s%s%s\n", m.path.c_str(), m.tokenizer.empty() ? "" : ", tokenizer ",
                  m.tokenizer.c_str());
    } else {
      std::printf("tessera up: model %s served as %s\n", m.path.c_str(), m.name.c_str());
    }
  }
  std::fflush(stdout);
  // A new folder each run (mkdtemp): a folder left by an earlier process with the same pid (killed before it
  // cleaned up) must never hand this cluster its stale token or logs.
  std::string logs_template =
      fmt::format("{}/tessera-up-{}-XXXXXX", std::filesystem::temp_directory_path().string(), getpid());
  if (mkdtemp(logs_template.data()) == nullptr)
    return fail(fmt::format("cannot create the run folder {}: {}", logs_template, std::strerror(errno)));
  const std::string logs = logs_template;
  // One credential per cluster: every child proves it to the others (control plane, /internal/pd, link).
  const std::string token_path = token_file.empty() ? logs + "/cluster-token" : token_file;
  auto token = token_file.empty() ? ClusterToken::create(token_path) : ClusterToken::load(token_path);
  if (!token.ok()) return fail(token.status().with_context("cluster token").message());

  planner::LocalClusterOptions options;
  options.log_dir = logs;
  options.token_path = token_path;
  options.token = *token;
  options.progress = [](const std::string& line) { std::fprintf(stderr, "tessera up: %s\n", line.c_str()); };
  planner::LocalCluster cluster(*spec, options);
  if (Status s = cluster.start(); !s.ok()) {
    cluster.stop();
    return fail(s.message());
  }
  std::unique_ptr<planner::PlannerLoop> plan;
  if (spec->planner) {
    auto loop = start_planner(*spec, cluster, *token);
    if (!loop.ok()) {
      cluster.stop();
      return fail(loop.status().with_context("planner").message());
    }
    plan = std::move(loop).value();
    std::printf("tessera up: planner at http://127.0.0.1:%u (every %.3g s)\n", plan->port(), spec->planner_interval_s);
  }
  std::printf("tessera up: cluster ready: OpenAI API at %s/v1 (%zu processes, logs in %s)\n",
              cluster.endpoint().c_str(), cluster.processes(), logs.c_str());
  if (spec->router) std::printf("tessera up: fleet dashboard at %s/dashboard\n", cluster.endpoint().c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "tessera up: %s received, stopping the cluster\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  if (plan) plan->stop();  // first: nothing re-roles or starts a node while the cluster stops
  cluster.stop();
  std::fprintf(stderr, "tessera up: stopped\n");
  return 0;
}

}  // namespace

Action add_up_command(CLI::App& app) {
  auto spec = std::make_shared<std::string>();
  auto port = std::make_shared<int>(-1);
  CLI::App* cmd =
      app.add_subcommand("up", "Start a local cluster from a spec (default: prefill on cpu, decode on opencl)");
  cmd->add_option("spec", *spec, "Cluster spec (YAML); see deploy/local-mixed.yaml and deploy/two-models.yaml");
  cmd->add_option("--port", *port, "Router port (overrides the spec; 0: any free port)")->check(CLI::Range(0, 65535));
  auto token_file = std::make_shared<std::string>();
  cmd->add_option("--cluster-token-file", *token_file,
                  "The cluster credential given to every process (default: a new one, mode 0600, in the run folder)");
  auto planner = std::make_shared<std::string>();
  cmd->add_option("--planner", *planner,
                  "on: run the planner (the spec's `planner:` section) inside this process; off: do not, even when "
                  "the spec has one")
      ->check(CLI::IsMember({"on", "off"}));
  return [spec, port, token_file, planner] { return run_up(*spec, *port, *token_file, *planner); };
}

}  // namespace tessera::cli
