// `tessera up [SPEC.yaml]`: starts a local cluster (nodes, then the router in front of them), waits until
// every process is healthy, prints the endpoint, and stops everything on Ctrl-C or SIGTERM.
//
// Spec (YAML):
//   model: ../models/stories260K            # directory (or checkpoint file + tokenizer:); relative paths are
//                                           # read against the spec's folder, then the working directory
//   chat_template: plain                    # passed to the nodes
//   router: {port: 8000, strategy: least_latency}   # "router: off" serves through the first decode node;
//                                                   # args: [...] adds `tessera route` flags
//   nodes:
//     - {name: prefill-0, role: prefill, backend: cpu, threads: 1, cpus: [0]}
//     - {name: decode-0, role: decode, backend: opencl, cpus: [1]}
// A plan written by `tessera solve --out` for pools that exist here is such a spec (solver/launch.h).
// With a router, `tessera up` first starts the embedded control plane (`tessera ctrl`); every node registers
// there and the router discovers them through it. Decode nodes get every prefill node as --prefill-nodes;
// the router pairs them.
// Every process gets the cluster token (--cluster-token-file): the given one, or a new one created in the run
// folder with mode 0600 (docs/security.md).
// cpus pins a process (sched_setaffinity).
//   planner: {fleet: fleet.yaml, workload: workload.yaml, slo: slo.yaml,   # optional: the planner runs in
//             interval_s: 5, cooldown_s: 60, min_gain: 0.15,               # this process (--planner on|off
//             windows_to_act: 2, min_requests: 8, scale: false, port: 0}  # overrides); nodes start with
//                                                                          # --role-switchable; docs/solver.md
// Without a spec: prefill on cpu, decode on opencl (ref when this machine has no OpenCL device).
#include <yaml-cpp/yaml.h>
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/cluster_token.h"
#include "commands.h"
#include "ctrl/store.h"
#include "http/http.h"
#include "model_paths.h"
#include "ops/registry.h"
#include "planner/launcher.h"
#include "planner/planner_loop.h"

namespace tessera::cli {
namespace {

struct NodeSpec {
  std::string name, role = "both", backend = "cpu";
  int threads = 0;
  std::vector<int> cpus;
  std::vector<std::string> extra;  // further `tessera serve` flags
};

struct ClusterSpec {
  std::string model, tokenizer, chat_template = "plain";
  bool router = true;
  int router_port = 8000;
  std::string strategy = "least_latency";
  std::vector<std::string> router_args;  // further `tessera route` flags
  std::vector<NodeSpec> nodes;
  // The planner (src/planner/): on when the spec has a `planner:` section (or --planner on). Its specs are
  // read against the spec's folder.
  bool planner = false;
  std::string planner_fleet, planner_workload, planner_slo;
  double planner_interval_s = 5;
  int planner_port = 0;
  solver::PlannerPolicy planner_policy;
};

struct Child {
  std::string name;
  pid_t pid = -1;
  int out_fd = -1;
  std::string url;
};

Result<ClusterSpec> default_spec() {
  ClusterSpec s;
  TS_ASSIGN_OR_RETURN(s.model, default_model_dir());
  const bool opencl = ops::open_device("opencl").ok();
  s.nodes.push_back({"prefill-0", "prefill", "cpu", 1, {0}, {}});
  s.nodes.push_back({"decode-0", "decode", opencl ? "opencl" : "ref", 1, {1}, {}});
  if (!opencl) std::fprintf(stderr, "tessera up: no OpenCL device here; the decode node uses the ref backend\n");
  return s;
}

Result<ClusterSpec> load_spec(const std::string& path) {
  ClusterSpec s;
  try {
    YAML::Node y = YAML::LoadFile(path);
    if (!y.IsMap()) return invalid_argument(fmt::format("{}: the spec must be a mapping", path));
    // A plan from `tessera solve --out` is a spec when its pools exist here; otherwise it says why not.
    if (y["launchable"] && !y["launchable"].as<bool>()) {
      return invalid_argument(fmt::format("{}: this plan cannot be launched here: {}", path,
                                          y["launch_note"] ? y["launch_note"].as<std::string>() : "no reason given"));
    }
    const std::string spec_dir = std::filesystem::path(path).parent_path().string();
    if (y["model"]) {
      auto m = resolve_path(y["model"].as<std::string>(), spec_dir);
      if (!m.ok()) return m.status().with_context(fmt::format("{}: model", path));
      s.model = *m;
    } else {
      TS_ASSIGN_OR_RETURN(s.model, default_model_dir());
    }
    if (y["tokenizer"]) {
      auto t = resolve_path(y["tokenizer"].as<std::string>(), spec_dir);
      if (!t.ok()) return t.status().with_context(fmt::format("{}: tokenizer", path));
      s.tokenizer = *t;
    }
    if (y["chat_template"]) s.chat_template = y["chat_template"].as<std::string>();
    if (y["router"]) {
      if (y["router"].IsScalar()) {
        s.router = y["router"].as<std::string>() != "off";
      } else {
        s.router_port = y["router"]["port"] ? y["router"]["port"].as<int>() : s.router_port;
        s.strategy = y["router"]["strategy"] ? y["router"]["strategy"].as<std::string>() : s.strategy;
        if (y["router"]["args"]) s.router_args = y["router"]["args"].as<std::vector<std::string>>();
      }
    }
    if (y["planner"]) {
      const YAML::Node& p = y["planner"];
      if (p.IsScalar()) {
        s.planner = p.as<std::string>() == "on";
        if (s.planner)
          return invalid_argument(fmt::format("{}: 'planner: on' needs its fleet, workload and slo", path));
      } else {
        s.planner = p["enabled"] ? p["enabled"].as<bool>() : true;
        for (const char* k : {"fleet", "workload", "slo"}) {
          if (!p[k]) return invalid_argument(fmt::format("{}: planner: '{}' (a spec file) is required", path, k));
          auto f = resolve_path(p[k].as<std::string>(), spec_dir);
          if (!f.ok()) return f.status().with_context(fmt::format("{}: planner: {}", path, k));
          (std::string(k) == "fleet"      ? s.planner_fleet
           : std::string(k) == "workload" ? s.planner_workload
                                          : s.planner_slo) = *f;
        }
        if (p["interval_s"]) s.planner_interval_s = p["interval_s"].as<double>();
        if (p["port"]) s.planner_port = p["port"].as<int>();
        if (p["cooldown_s"]) s.planner_policy.cooldown_s = p["cooldown_s"].as<double>();
        if (p["min_gain"]) s.planner_policy.min_gain = p["min_gain"].as<double>();
        if (p["windows_to_act"]) s.planner_policy.windows_to_act = p["windows_to_act"].as<int>();
        if (p["min_requests"]) s.planner_policy.min_requests = p["min_requests"].as<double>();
        if (p["scale"]) s.planner_policy.scale = p["scale"].as<bool>();
        if (!(s.planner_interval_s > 0) || s.planner_policy.windows_to_act < 1 || s.planner_policy.cooldown_s < 0 ||
            s.planner_policy.min_gain < 0)
          return invalid_argument(fmt::format(
              "{}: planner: interval_s must be positive, windows_to_act at least 1, cooldown_s and min_gain >= 0",
              path));
      }
    }
    if (!y["nodes"] || !y["nodes"].IsSequence() || y["nodes"].size() == 0) {
      return invalid_argument(fmt::format("{}: 'nodes' must list at least one node", path));
    }
    int i = 0;
    for (const YAML::Node& n : y["nodes"]) {
      NodeSpec ns;
      ns.name = n["name"] ? n["name"].as<std::string>() : fmt::format("node-{}", i);
      ns.role = n["role"] ? n["role"].as<std::string>() : "both";
      ns.backend = n["backend"] ? n["backend"].as<std::string>() : "cpu";
      ns.threads = n["threads"] ? n["threads"].as<int>() : 0;
      if (n["cpus"]) ns.cpus = n["cpus"].as<std::vector<int>>();
      if (n["args"]) ns.extra = n["args"].as<std::vector<std::string>>();
      if (ns.role != "prefill" && ns.role != "decode" && ns.role != "both") {
        return invalid_argument(
            fmt::format("{}: node {} has unknown role '{}' (prefill, decode, both)", path, ns.name, ns.role));
      }
      s.nodes.push_back(std::move(ns));
      ++i;
    }
  } catch (const YAML::Exception& e) {
    return invalid_argument(fmt::format("{}: {}", path, e.what()));
  }
  return s;
}

// Starts `tessera ARGS...` with stdout piped (for its "listening on" line) and stderr into `log`.
Result<Child> spawn(const std::string& name, const std::vector<std::string>& args, const std::vector<int>& cpus,
                    const std::string& log) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return unavailable("pipe failed");
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return unavailable("fork failed");
  if (pid == 0) {
    // The cluster dies with `tessera up`, even a SIGKILLed one: the kernel sends each child SIGTERM (which it
    // takes as a drain) when this thread's process is gone. A parent already gone before prctl ran is caught by
    // getppid().
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    dup2(out[1], 1);
    int err = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err >= 0) dup2(err, 2);
    if (!cpus.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : cpus) CPU_SET(c, &set);
      sched_setaffinity(0, sizeof set, &set);  // best effort: an absent CPU just leaves the mask as it was
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> argv;
    std::string self = "/proc/self/exe";
    argv.push_back(self.data());
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(out[1]);
  return Child{name, pid, out[0], ""};
}

// Reads the child's stdout until it prints its address.
Status wait_listening(Child& c, int timeout_ms) {
  std::string buf;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char tmp[1024];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{c.out_fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t n = read(c.out_fd, tmp, sizeof tmp);
    if (n <= 0) return unavailable(fmt::format("{} exited before it was ready", c.name));
    buf.append(tmp, static_cast<size_t>(n));
    size_t at = buf.find("listening on http://");
    if (at != std::string::npos) {
      size_t end = buf.find_first_of(" \n", at + 13);
      if (end == std::string::npos) continue;
      c.url = buf.substr(at + 13, end - at - 13);
      return ok_status();
    }
  }
  return deadline_exceeded(fmt::format("{} did not start within {} ms", c.name, timeout_ms));
}

Status wait_healthy(const Child& c, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = http::fetch({.url = c.url + "/health", .timeout_ms = 1000});
    if (r.ok() && r->status == 200) return ok_status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return deadline_exceeded(fmt::format("{} at {} is not healthy", c.name, c.url));
}

// Until the router's node list (GET /admin/nodes) holds every url of `nodes`.
Status wait_router_knows(const std::string& router, const std::vector<std::string>& nodes, int timeout_ms,
                         const ClusterToken& token) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  size_t known = 0;
  http::Headers headers;
  http::add_cluster_token(headers, token);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = http::fetch({.url = router + "/admin/nodes", .headers = headers, .timeout_ms = 1000});
    if (r.ok() && r->status == 401) return ok_status();  // an API key guards the list: rely on discovery
    if (r.ok() && r->status == 200) {
      known = 0;
      for (const std::string& url : nodes) known += r->body.find("\"" + url + "\"") != std::string::npos;
      if (known == nodes.size()) return ok_status();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return deadline_exceeded(
      fmt::format("the router discovered {} of the {} nodes through the control plane", known, nodes.size()));
}

// SIGTERM (a node drains), SIGKILL after 15 s.
void stop_child(Child& c) {
  if (c.pid <= 0) return;
  kill(c.pid, SIGTERM);
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (waitpid(c.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(c.pid, SIGKILL);
      waitpid(c.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (c.out_fd >= 0) close(c.out_fd);
  c.pid = -1;
}

void stop_all(std::vector<Child>& children) {
  // Front to back: the router first, so nothing new reaches the nodes, then decode before prefill.
  for (auto it = children.rbegin(); it != children.rend(); ++it) stop_child(*it);
}

int run_up(const std::string& spec_path, int router_port_override, const std::string& token_file,
           const std::string& planner_flag) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto spec = spec_path.empty() ? default_spec() : load_spec(spec_path);
  if (!spec.ok()) return fail(spec.status().message());
  if (router_port_override >= 0) spec->router_port = router_port_override;
  if (planner_flag == "off") spec->planner = false;
  if (planner_flag == "on") {
    if (spec->planner_fleet.empty())
      return fail("--planner on needs a `planner:` section (fleet, workload, slo) in the spec");
    spec->planner = true;
  }
  if (spec->planner && !spec->router) return fail("the planner needs the router and its control plane (router: off)");
  std::printf("tessera up: model %s%s%s\n", spec->model.c_str(), spec->tokenizer.empty() ? "" : ", tokenizer ",
              spec->tokenizer.c_str());
  std::fflush(stdout);
  const std::string logs = fmt::format("{}/tessera-up-{}", std::filesystem::temp_directory_path().string(), getpid());
  std::filesystem::create_directories(logs);
  // One credential per cluster: every child proves it to the others (control plane, /internal/pd, link).
  const std::string token_path = token_file.empty() ? logs + "/cluster-token" : token_file;
  auto token = token_file.empty() ? ClusterToken::create(token_path) : ClusterToken::load(token_path);
  if (!token.ok()) return fail(token.status().with_context("cluster token").message());
  const std::vector<std::string> token_flag = {"--cluster-token-file", token_path};

  std::vector<Child> children;  // GUARDED_BY(children_mu): the planner's launcher starts and stops nodes too
  std::mutex children_mu;
  auto start_child = [&](const std::string& name, std::vector<std::string> args,
                         const std::vector<int>& cpus) -> Result<std::string> {
    args.insert(args.begin() + 1, token_flag.begin(), token_flag.end());
    auto c = spawn(name, args, cpus, logs + "/" + name + ".log");
    if (!c.ok()) return c.status();
    Status s = wait_listening(*c, 60000);
    if (s.ok()) s = wait_healthy(*c, 30000);
    std::lock_guard<std::mutex> lock(children_mu);
    children.push_back(*c);  // also when it failed: stop_all reaps it
    if (!s.ok()) return s.with_context(fmt::format("see {}/{}.log", logs, name));
    return c->url;
  };
  auto start = [&](const std::string& name, std::vector<std::string> args, const std::vector<int>& cpus) -> Status {
    return start_child(name, std::move(args), cpus).status();
  };
  auto node_args = [&](const NodeSpec& n) {
    std::vector<std::string> a = {"serve",
                                  "--model",
                                  spec->model,
                                  "--port",
                                  "0",
                                  "--role",
                                  n.role,
                                  "--backend",
                                  n.backend,
                                  "--chat-template",
                                  spec->chat_template,
                                  "--served-model-name",
                                  std::filesystem::path(spec->model).filename().string()};
    if (!spec->tokenizer.empty()) a.insert(a.end(), {"--tokenizer", spec->tokenizer});
    if (n.threads > 0) a.insert(a.end(), {"--threads", std::to_string(n.threads)});
    if (spec->planner) a.push_back("--role-switchable");  // the planner re-roles them (POST /admin/role)
    a.insert(a.end(), n.extra.begin(), n.extra.end());
    return a;
  };

  std::vector<std::string> prefill_urls, front_urls;
  Status st;
  // With a router, the embedded control plane comes first: every node registers there (role, backend,
  // capacity, host, under a lease) and the router discovers them and follows changes through it.
  std::string ctrl_url;
  if (spec->router) {
    st = start("ctrl", {"ctrl", "--port", "0"}, {});
    if (st.ok()) {
      ctrl_url = children.back().url;
      std::fprintf(stderr, "tessera up: control plane (embedded) at %s\n", ctrl_url.c_str());
    }
  }
  for (int pass = 0; pass < 3 && st.ok(); ++pass) {
    const char* role = pass == 0 ? "prefill" : pass == 1 ? "decode" : "both";
    for (const NodeSpec& n : spec->nodes) {
      if (n.role != role || !st.ok()) continue;
      std::vector<std::string> args = node_args(n);
      if (!ctrl_url.empty()) args.insert(args.end(), {"--ctrl", ctrl_url});
      if (n.role == "decode") {
        if (prefill_urls.empty()) {
          st = invalid_argument(fmt::format("decode node {} needs a prefill node in the spec", n.name));
          break;
        }
        args.push_back("--prefill-nodes");
        args.push_back(fmt::format("{}", fmt::join(prefill_urls, ",")));
      }
      st = start(n.name, args, n.cpus);
      if (!st.ok()) break;
      (n.role == "prefill" ? prefill_urls : front_urls).push_back(children.back().url);
      std::fprintf(stderr, "tessera up: %s (%s, %s) at %s\n", n.name.c_str(), n.role.c_str(), n.backend.c_str(),
                   children.back().url.c_str());
    }
  }
  if (st.ok() && front_urls.empty()) st = invalid_argument("the spec has no node that serves clients (decode or both)");
  std::string endpoint = front_urls.empty() ? "" : front_urls.front();
  if (st.ok() && spec->router) {
    // The router discovers every node, prefill nodes included, from the control plane: it learns their roles
    // there and chooses the prefill node of each request jointly with its decode node (docs/pd-protocol.md);
    // prefill nodes get no client request.
    std::vector<std::string> route = {
        "route", "--port", std::to_string(spec->router_port), "--ctrl", ctrl_url, "--strategy", spec->strategy};
    route.insert(route.end(), spec->router_args.begin(), spec->router_args.end());
    st = start("router", route, {});
    if (st.ok()) {
      endpoint = children.back().url;
      std::vector<std::string> all = front_urls;
      all.insert(all.end(), prefill_urls.begin(), prefill_urls.end());
      st = wait_router_knows(endpoint, all, 30000, *token);
    }
  }
  if (!st.ok()) {
    std::lock_guard<std::mutex> lock(children_mu);
    stop_all(children);
    return fail(st.message());
  }
  std::unique_ptr<planner::PlannerLoop> plan;
  int scaled = 0;  // nodes the planner started (names them); used by the planner thread until plan->stop()
  if (spec->planner) {
    // The local launcher: re-roles over /admin/role; scales by starting and stopping `tessera serve` processes
    // of a pool's launch section, like the spec's own nodes.
    auto config = planner::planner_config_from_files(spec->planner_fleet, spec->planner_workload, spec->planner_slo);
    planner::ScaleHooks hooks;
    if (config.ok()) {
      hooks.start = [&, fleet = config->fleet](const std::string& pool,
                                               const std::string& role) -> Result<std::string> {
        const solver::Pool* p = nullptr;
        for (const solver::Pool& q : fleet.pools) p = q.name == pool ? &q : p;
        if (p == nullptr || p->launch.backend.empty())
          return failed_precondition(fmt::format("pool {} has no launch section: it cannot be started here", pool));
        NodeSpec n{fmt::format("{}-planned-{}", pool, ++scaled),
                   role,
                   p->launch.backend,
                   p->launch.threads,
                   p->launch.cpus,
                   p->launch.args};
        std::vector<std::string> args = node_args(n);
        args.insert(args.end(), {"--ctrl", ctrl_url});
        std::fprintf(stderr, "tessera up: the planner starts %s (%s)\n", n.name.c_str(), role.c_str());
        return start_child(n.name, args, n.cpus);
      };
      hooks.stop = [&](const std::string& address) -> Status {
        Child c;
        {
          std::lock_guard<std::mutex> lock(children_mu);
          auto it = std::find_if(children.begin(), children.end(), [&](const Child& x) { return x.url == address; });
          if (it == children.end()) return not_found(fmt::format("no node of this cluster listens at {}", address));
          c = *it;
          children.erase(it);
        }
        std::fprintf(stderr, "tessera up: the planner stops %s at %s\n", c.name.c_str(), address.c_str());
        stop_child(c);
        return ok_status();
      };
    }
    Result<std::unique_ptr<planner::PlannerLoop>> loop =
        config.ok() ? Result<std::unique_ptr<planner::PlannerLoop>>(internal_error("planner not created"))
                    : Result<std::unique_ptr<planner::PlannerLoop>>(config.status());
    ctrl::StoreAuth auth;
    auth.cluster_token = *token;
    auto store = ctrl::make_store_from_flag(ctrl_url, auth);
    if (config.ok() && !store.ok()) loop = store.status();
    if (config.ok() && store.ok()) {
      config->policy = spec->planner_policy;
      config->interval_s = spec->planner_interval_s;
      config->port = spec->planner_port;
      config->cluster_token = *token;
      auto launcher = planner::make_local_launcher(config->fleet, *token, hooks);
      loop = planner::PlannerLoop::create(std::move(store).value(), std::move(launcher), std::move(*config));
    }
    Status started = loop.ok() ? (*loop)->start() : loop.status();
    if (!started.ok()) {
      std::lock_guard<std::mutex> lock(children_mu);
      stop_all(children);
      return fail(started.with_context("planner").message());
    }
    plan = std::move(loop).value();
    std::printf("tessera up: planner at http://127.0.0.1:%u (every %.3g s)\n", plan->port(), spec->planner_interval_s);
  }
  size_t processes = 0;
  {
    std::lock_guard<std::mutex> lock(children_mu);
    processes = children.size();
  }
  std::printf("tessera up: cluster ready: OpenAI API at %s/v1 (%zu processes, logs in %s)\n", endpoint.c_str(),
              processes, logs.c_str());
  if (spec->router) std::printf("tessera up: fleet dashboard at %s/dashboard\n", endpoint.c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "tessera up: %s received, stopping the cluster\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  if (plan) plan->stop();  // first: nothing re-roles or starts a node while the cluster stops
  std::lock_guard<std::mutex> lock(children_mu);
  stop_all(children);
  std::fprintf(stderr, "tessera up: stopped\n");
  return 0;
}

}  // namespace

Action add_up_command(CLI::App& app) {
  auto spec = std::make_shared<std::string>();
  auto port = std::make_shared<int>(-1);
  CLI::App* cmd =
      app.add_subcommand("up", "Start a local cluster from a spec (default: prefill on cpu, decode on opencl)");
  cmd->add_option("spec", *spec, "Cluster spec (YAML); see deploy/local-mixed.yaml");
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
