#include "planner/local_cluster.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "http/http.h"

namespace tessera::planner {
namespace {

// "... listening on http://HOST:PORT ..." -> "http://HOST:PORT".
std::string listening_url(const std::string& line) {
  const size_t at = line.find("listening on http");
  if (at == std::string::npos) return "";
  const size_t from = at + 13;
  const size_t end = line.find_first_of(" \n", from);
  return line.substr(from, end == std::string::npos ? std::string::npos : end - from);
}

Status wait_healthy(const std::string& url, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = http::fetch({.url = url + "/health", .timeout_ms = 1000});
    if (r.ok() && r->status == 200) return ok_status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return deadline_exceeded(fmt::format("{} is not healthy after {} ms", url, timeout_ms));
}

}  // namespace

LocalCluster::LocalCluster(solver::ClusterSpec spec, LocalClusterOptions options)
    : spec_(std::move(spec)), options_(std::move(options)) {}

LocalCluster::~LocalCluster() { stop(); }

void LocalCluster::progress(const std::string& line) const {
  if (options_.progress) options_.progress(line);
}

size_t LocalCluster::processes() const {
  std::lock_guard lock(mu_);
  return children_.size();
}

Result<std::string> LocalCluster::start_child(const std::string& name, std::vector<std::string> args,
                                              const std::vector<int>& cpus) {
  if (!options_.token_path.empty()) args.insert(args.begin() + 1, {"--cluster-token-file", options_.token_path});
  args.insert(args.begin(), options_.exe.empty() ? self_exe() : options_.exe);
  const std::string log = fmt::format("{}/{}.log", options_.log_dir, name);
  auto p = Process::spawn({.argv = std::move(args), .stderr_file = log, .cpus = cpus, .die_with_parent = true});
  if (!p.ok()) return p.status().with_context(name);
  auto child = std::make_unique<Child>(Child{name, "", std::move(*p)});
  auto line = child->process.wait_for_line("listening on http", options_.listen_timeout_ms);
  Status s = line.ok() ? ok_status() : line.status().with_context(fmt::format("{} did not start", name));
  if (s.ok()) {
    child->url = listening_url(*line);
    s = wait_healthy(child->url, options_.healthy_timeout_ms);
  }
  const std::string url = child->url;
  std::lock_guard lock(mu_);
  children_.push_back(std::move(child));  // also when it failed: stop() reaps it
  if (!s.ok()) return s.with_context(fmt::format("{} (see {})", name, log));
  return url;
}

Status LocalCluster::wait_router_knows(const std::vector<std::string>& urls, int timeout_ms) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  size_t known = 0;
  http::Headers headers;
  http::add_cluster_token(headers, options_.token);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = http::fetch({.url = endpoint_ + "/admin/nodes", .headers = headers, .timeout_ms = 1000});
    if (r.ok() && r->status == 401) return ok_status();  // an API key guards the list: rely on discovery
    if (r.ok() && r->status == 200) {
      known = 0;
      for (const std::string& url : urls) known += r->body.find("\"" + url + "\"") != std::string::npos;
      if (known == urls.size()) return ok_status();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return deadline_exceeded(
      fmt::format("the router discovered {} of the {} nodes through the control plane", known, urls.size()));
}

Status LocalCluster::start() {
  // With a router, the embedded control plane comes first: every node registers there (role, backend, models,
  // capacity, host, under a lease) and the router discovers them and follows changes through it.
  if (spec_.router) {
    auto ctrl = start_child("ctrl", {"ctrl", "--port", "0"}, {});
    if (!ctrl.ok()) return ctrl.status();
    ctrl_url_ = *ctrl;
    progress(fmt::format("control plane (embedded) at {}", ctrl_url_));
  }
  std::map<std::string, std::vector<std::string>> prefill_urls;  // by model
  std::vector<std::string> front_urls, all_urls;
  for (const char* role : {"prefill", "decode", "both"}) {
    for (const solver::SpecNode& n : spec_.nodes) {
      if (n.role != role) continue;
      std::vector<std::string> args = solver::serve_args(spec_, n);
      if (!ctrl_url_.empty()) args.insert(args.end(), {"--ctrl", ctrl_url_});
      if (n.role == "decode") {
        const std::vector<std::string>& mine = prefill_urls[n.model];
        if (mine.empty())
          return invalid_argument(
              fmt::format("decode node {} needs a prefill node of its model ({}) in the spec", n.name, n.model));
        args.insert(args.end(), {"--prefill-nodes", fmt::format("{}", fmt::join(mine, ","))});
      }
      TS_ASSIGN_OR_RETURN(std::string url, start_child(n.name, args, n.cpus));
      (n.role == "prefill" ? prefill_urls[n.model] : front_urls).push_back(url);
      all_urls.push_back(url);
      progress(spec_.models.size() > 1 ? fmt::format("{} ({}, {}, {}) at {}", n.name, n.role, n.backend, n.model, url)
                                       : fmt::format("{} ({}, {}) at {}", n.name, n.role, n.backend, url));
    }
  }
  if (front_urls.empty()) return invalid_argument("the spec has no node that serves clients (decode or both)");
  endpoint_ = front_urls.front();
  if (!spec_.router) return ok_status();
  // The router discovers every node, prefill nodes included, from the control plane: it learns their roles and
  // models there and pairs each request's decode node with a prefill node of the same model.
  std::vector<std::string> route = {"route",      "--port",      std::to_string(spec_.router_port), "--ctrl", ctrl_url_,
                                    "--strategy", spec_.strategy};
  route.insert(route.end(), spec_.router_args.begin(), spec_.router_args.end());
  TS_ASSIGN_OR_RETURN(endpoint_, start_child("router", route, {}));
  return wait_router_knows(all_urls, 30000);
}

Result<std::string> LocalCluster::start_node(const solver::SpecNode& node) {
  std::vector<std::string> args = solver::serve_args(spec_, node);
  if (!ctrl_url_.empty()) args.insert(args.end(), {"--ctrl", ctrl_url_});
  return start_child(node.name, args, node.cpus);
}

Status LocalCluster::stop_node(const std::string& address) {
  std::unique_ptr<Child> c;
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(children_.begin(), children_.end(), [&](const auto& x) { return x->url == address; });
    if (it == children_.end()) return not_found(fmt::format("no node of this cluster listens at {}", address));
    c = std::move(*it);
    children_.erase(it);
  }
  progress(fmt::format("stopping {} at {}", c->name, address));
  c->process.terminate(std::chrono::seconds(15));
  return ok_status();
}

void LocalCluster::stop() {
  std::vector<std::unique_ptr<Child>> children;
  {
    std::lock_guard lock(mu_);
    children.swap(children_);
  }
  // Back to front: the router first, so nothing new reaches the nodes, then decode before prefill.
  for (auto it = children.rbegin(); it != children.rend(); ++it) (*it)->process.terminate(std::chrono::seconds(15));
}

}  // namespace tessera::planner
