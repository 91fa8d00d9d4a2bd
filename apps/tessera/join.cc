// `tessera join`: the one command to run on each host of a multi-host cluster. It starts one node (prefill,
// decode or both) that registers itself in the cluster's control plane under a lease, advertises an address
// the other hosts reach (HTTP and the link's tcp endpoint), offers only link endpoints that work between
// hosts, and proves itself with the cluster credential. A router anywhere (`tessera route --ctrl ...`)
// discovers it; decode nodes are told which prefill node to use by the router, so no host lists another.
//
//   tessera join --ctrl etcd=http://10.0.0.1:2379,http://10.0.0.2:2379 --role decode --backend cpu
//                --model models/stories260K --advertise 10.0.0.3 --cluster-token-file /etc/tessera/token
//   (one command, shown on two lines)
//
// It is `tessera serve` with the multi-host defaults filled in and checked: after validation it replaces
// itself with `tessera serve ...` (execv), so signals, draining and exit codes are exactly serve's. Flags
// after `--` go to serve unchanged (--threads, --kv-memory, --chat-template, ...).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/status.h"
#include "commands.h"

namespace tessera::cli {
namespace {

struct JoinArgs {
  std::string ctrl;
  std::string role;
  std::string backend;
  std::string model;
  std::string tokenizer;
  std::string advertise;
  std::string listen;
  int port = 8000;
  std::vector<std::string> link_endpoints = {"tcp"};
  std::string cluster_token_file;
  int ctrl_ttl_ms = 6000;
  std::string etcd_user, etcd_password_file, tls_ca;
  std::vector<std::string> serve_args;
};

bool wildcard(const std::string& host) { return host == "0.0.0.0" || host == "::" || host.empty(); }

// "HOST" in a URL: IPv6 literals in brackets.
std::string url_host(const std::string& host) { return host.find(':') != std::string::npos ? "[" + host + "]" : host; }

Result<std::vector<std::string>> serve_argv(const JoinArgs& a) {
  if (wildcard(a.advertise) || a.advertise == "localhost" || a.advertise.rfind("127.", 0) == 0) {
    return invalid_argument(fmt::format(
        "--advertise '{}' is not an address other hosts can reach; give this host's address on the cluster network",
        a.advertise));
  }
  for (const std::string& e : a.link_endpoints) {
    if (e != "tcp" && e != "ucx" && e != "shm") {
      return invalid_argument(
          fmt::format("unknown link endpoint '{}'; between hosts: tcp, ucx (shm: this host only)", e));
    }
  }
  bool crosses = false;
  for (const std::string& e : a.link_endpoints) crosses = crosses || e != "shm";
  if (!crosses) return invalid_argument("--link-endpoints needs tcp or ucx: shm does not reach other hosts");
  const std::string listen = a.listen.empty() ? a.advertise : a.listen;
  if (listen != a.advertise && a.port == 0) {
    return invalid_argument(
        "--listen differs from --advertise: give a fixed --port, so that the advertised URL is known");
  }
  std::string endpoints;
  for (const std::string& e : a.link_endpoints) endpoints += (endpoints.empty() ? "" : ",") + e;
  std::vector<std::string> argv = {"tessera",
                                   "serve",
                                   "--model",
                                   a.model,
                                   "--backend",
                                   a.backend,
                                   "--role",
                                   a.role,
                                   "--host",
                                   listen,
                                   "--port",
                                   std::to_string(a.port),
                                   "--link-host",
                                   wildcard(listen) ? a.advertise : listen,
                                   "--link-endpoints",
                                   endpoints,
                                   "--ctrl",
                                   a.ctrl,
                                   "--ctrl-ttl-ms",
                                   std::to_string(a.ctrl_ttl_ms),
                                   "--cluster-token-file",
                                   a.cluster_token_file};
  if (listen != a.advertise) {
    argv.insert(argv.end(), {"--advertise-url", fmt::format("http://{}:{}", url_host(a.advertise), a.port)});
  }
  if (!a.tokenizer.empty()) argv.insert(argv.end(), {"--tokenizer", a.tokenizer});
  if (!a.etcd_user.empty()) argv.insert(argv.end(), {"--etcd-user", a.etcd_user});
  if (!a.etcd_password_file.empty()) argv.insert(argv.end(), {"--etcd-password-file", a.etcd_password_file});
  if (!a.tls_ca.empty()) argv.insert(argv.end(), {"--tls-ca", a.tls_ca});
  argv.insert(argv.end(), a.serve_args.begin(), a.serve_args.end());
  return argv;
}

int run_join(const JoinArgs& a) {
  auto argv = serve_argv(a);
  if (!argv.ok()) return fail(argv.status().message());
  std::string line;
  for (const std::string& s : *argv) line += (line.empty() ? "" : " ") + s;
  std::fprintf(stderr, "tessera join: %s\n", line.c_str());
  std::fflush(stderr);
  std::vector<char*> cargv;
  for (const std::string& s : *argv) cargv.push_back(const_cast<char*>(s.c_str()));
  cargv.push_back(nullptr);
  execv("/proc/self/exe", cargv.data());
  return fail(fmt::format("cannot start tessera serve: {}", std::strerror(errno)));
}

}  // namespace

Action add_join_command(CLI::App& app) {
  auto a = std::make_shared<JoinArgs>();
  CLI::App* cmd = app.add_subcommand(
      "join",
      "Start this host's node of a multi-host cluster: registers in the control plane, reachable from "
      "other hosts (flags after -- go to `tessera serve`)");
  cmd->add_option("--ctrl", a->ctrl, "The cluster's control plane: etcd=URL[,URL...] (or embedded=URL)")->required();
  cmd->add_option("--role", a->role, "prefill, decode or both")
      ->required()
      ->check(CLI::IsMember({"prefill", "decode", "both"}));
  cmd->add_option("--backend", a->backend, "Operator backend")->required();
  cmd->add_option("--model", a->model, "Checkpoint file, or a directory holding one checkpoint and its tokenizer")
      ->required();
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file (needed when --model is a file)");
  cmd->add_option("--advertise", a->advertise,
                  "This host's address on the cluster network: what routers and peers connect to")
      ->required();
  cmd->add_option("--listen", a->listen, "Listen address (default: --advertise; 0.0.0.0 for every interface)");
  cmd->add_option("--port", a->port, "HTTP port")->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--link-endpoints", a->link_endpoints, "Link endpoints to offer: tcp, ucx (shm: this host only)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--cluster-token-file", a->cluster_token_file,
                  "The cluster credential (mode 0600) every member proves itself with (docs/security.md)")
      ->required();
  cmd->add_option("--ctrl-ttl-ms", a->ctrl_ttl_ms,
                  "Lease TTL: a host that dies leaves the cluster within it (long enough to renew on another etcd "
                  "member when one is lost)")
      ->check(CLI::Range(3000, 600000))
      ->capture_default_str();
  cmd->add_option("--etcd-user", a->etcd_user, "Authenticate to etcd as this user");
  cmd->add_option("--etcd-password-file", a->etcd_password_file, "--etcd-user's password (first line of the file)");
  cmd->add_option("--tls-ca", a->tls_ca, "CA file trusted for https:// etcd endpoints");
  cmd->add_option("serve_args", a->serve_args, "More `tessera serve` flags, after --");
  return [a] { return run_join(*a); };
}

}  // namespace tessera::cli
