// `tessera ctrl`: run the embedded control-plane store (ctrl/embedded_server.h) as a standalone HTTP service
// until SIGINT or SIGTERM.
#include <CLI/CLI.hpp>

#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include "auth_flags.h"
#include "commands.h"
#include "ctrl/embedded_server.h"

namespace tessera::cli {
namespace {

struct CtrlArgs {
  std::string host = "127.0.0.1";
  uint16_t port = 7070;
  std::string cluster_token_file;
};

int run_ctrl(const CtrlArgs& a) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread starts, so all inherit it
  auto token = cluster_token_from_flag(a.cluster_token_file, "ctrl", "the control plane's routes");
  if (!token.ok()) return fail(token.status().message());
  ctrl::EmbeddedServer server(SteadyClock::instance(), *token);
  if (Status s = server.start(a.host, a.port); !s.ok()) return fail(s.message());
  std::printf("ctrl store listening on http://%s:%u (embedded)\n", a.host.c_str(), server.port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  server.stop();
  return 0;
}

}  // namespace

Action add_ctrl_command(CLI::App& app) {
  auto args = std::make_shared<CtrlArgs>();
  CLI::App* cmd = app.add_subcommand("ctrl", "Run the embedded control-plane store (nodes, agents, leases, watches)");
  cmd->add_option("--host", args->host, "Listen address");
  cmd->add_option("--port", args->port, "Listen port (0: any free port)");
  cmd->add_option("--cluster-token-file", args->cluster_token_file,
                  "The cluster credential (mode 0600) every /v1/ctrl/ call must present; none: open");
  return [args] { return run_ctrl(*args); };
}

}  // namespace tessera::cli
