// `tessera plan --ctrl URL --fleet SPEC --workload SPEC --slo SPEC`: the planner (src/planner/planner_loop.h)
// as its own process, next to a running cluster. It re-roles the cluster's nodes (POST /admin/role); it cannot
// start or stop processes it did not start, so scaling needs the planner inside `tessera up` (--planner).
// Prints "tessera plan: listening on http://HOST:PORT" (its /metrics and /status), then logs a line per
// decision; stops on SIGINT/SIGTERM, or after --windows windows.
#include <CLI/CLI.hpp>

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "auth_flags.h"
#include "commands.h"
#include "ctrl/store.h"
#include "planner/launcher.h"
#include "planner/planner_loop.h"

namespace tessera::cli {
namespace {

struct PlanArgs {
  std::string ctrl, fleet, workload, slo, host = "127.0.0.1", cluster_token_file, served_model;
  int port = 0;
  double interval_s = 5;
  solver::PlannerPolicy policy;
  bool observe = false;
  int windows = 0;
};

int run_plan(const PlanArgs& a) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto token = cluster_token_from_flag(a.cluster_token_file);
  if (!token.ok()) return fail(token.status().message());
  auto auth = store_auth_from_flags(*token, "", "", "");
  if (!auth.ok()) return fail(auth.status().message());
  auto config = planner::planner_config_from_files(a.fleet, a.workload, a.slo);
  if (!config.ok()) return fail(config.status().message());
  config->policy = a.policy;
  config->interval_s = a.interval_s;
  config->act = !a.observe;
  config->host = a.host;
  config->port = a.port;
  config->cluster_token = *token;
  config->served_model = a.served_model;
  auto store = ctrl::make_store_from_flag(a.ctrl, *auth);
  if (!store.ok()) return fail(store.status().message());
  auto launcher = planner::make_local_launcher(config->fleet, *token);
  auto loop = planner::PlannerLoop::create(std::move(store).value(), std::move(launcher), std::move(*config));
  if (!loop.ok()) return fail(loop.status().message());
  if (Status s = (*loop)->start(a.windows <= 0); !s.ok()) return fail(s.message());
  warn_if_open(*token, "plan", "/status and the control plane");
  std::printf("tessera plan: listening on http://%s:%u (every %.3g s%s)\n", a.host.c_str(), (*loop)->port(),
              a.interval_s, a.observe ? ", observing only" : "");
  std::fflush(stdout);
  if (a.windows > 0) {
    for (int w = 0; w < a.windows; ++w) {
      if (w > 0) std::this_thread::sleep_for(std::chrono::duration<double>(a.interval_s));
      (*loop)->run_window();
    }
    std::printf("%s\n", (*loop)->status_json().c_str());
    (*loop)->stop();
    return 0;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  (*loop)->stop();
  return 0;
}

}  // namespace

Action add_plan_command(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* cmd =
      app.add_subcommand("plan", "Run the planner: re-place a running cluster's nodes as its traffic changes");
  cmd->add_option("--ctrl", a->ctrl, "The cluster's control plane (http://HOST:PORT or etcd=...)")->required();
  cmd->add_option("--fleet", a->fleet, "Fleet spec (YAML): the pools the nodes belong to")->required();
  cmd->add_option("--workload", a->workload, "Workload spec (YAML): the model served (rate and lengths are measured)")
      ->required();
  cmd->add_option("--slo", a->slo, "SLO spec (YAML): the goodput the planner maximises counts requests within it")
      ->required();
  cmd->add_option("--served-model", a->served_model,
                  "Plan only the nodes serving this model name (one planner per model behind a shared router)");
  cmd->add_option("--interval", a->interval_s, "Seconds between windows")->capture_default_str();
  cmd->add_option("--min-gain", a->policy.min_gain, "Relative predicted gain needed to act")->capture_default_str();
  cmd->add_option("--windows-to-act", a->policy.windows_to_act, "Consecutive windows a better placement must win")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--cooldown", a->policy.cooldown_s, "Seconds after an action before the next")->capture_default_str();
  cmd->add_option("--min-requests", a->policy.min_requests, "Finished requests a window needs to be acted on")
      ->capture_default_str();
  cmd->add_flag("--observe", a->observe, "Decide and log, never act (state \"off\")");
  cmd->add_option("--windows", a->windows,
                  "Stop after this many windows and print the status (0: run until signalled)");
  cmd->add_option("--host", a->host, "Listen address of /metrics and /status")->capture_default_str();
  cmd->add_option("--port", a->port, "Listen port (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--cluster-token-file", a->cluster_token_file,
                  "The cluster credential: sent to the control plane and the nodes, required on /status");
  return [a] { return run_plan(*a); };
}

}  // namespace tessera::cli
