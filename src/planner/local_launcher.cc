// The local launcher (launcher.h).
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "http/http.h"
#include "planner/launcher.h"

namespace tessera::planner {
namespace {

using json = nlohmann::json;

class LocalLauncher final : public Launcher {
 public:
  LocalLauncher(const solver::Fleet& fleet, ClusterToken token, ScaleHooks hooks)
      : fleet_(fleet), token_(std::move(token)), hooks_(std::move(hooks)) {}

  std::string name() const override { return "local"; }
  LauncherCaps caps() const override { return {true, hooks_.start && hooks_.stop}; }

  std::string pool_of(const ctrl::NodeInfo& node) const override {
    for (const solver::Pool& p : fleet_.pools) {
      if (!p.launch.backend.empty() && p.launch.backend == node.backend) return p.name;
    }
    return fleet_.pools.size() == 1 ? fleet_.pools.front().name : std::string();
  }

  Status set_role(const ctrl::NodeInfo& node, const std::string& role) override {
    http::ClientRequest r;
    r.method = "POST";
    r.url = node.address + "/admin/role";
    r.body = json{{"role", role}}.dump();
    r.timeout_ms = 5000;
    http::add_cluster_token(r.headers, token_);
    auto res = http::fetch(r);
    if (!res.ok()) return res.status().with_context(r.url);
    if (res->status != 200) return unavailable(fmt::format("{} answered {}: {}", r.url, res->status, res->body));
    return ok_status();
  }

  Result<std::string> scale_out(const std::string& pool, const std::string& role) override {
    if (!hooks_.start) return unimplemented("this launcher cannot start nodes (run the planner in `tessera up`)");
    return hooks_.start(pool, role);
  }

  Status scale_in(const ctrl::NodeInfo& node) override {
    if (!hooks_.stop) return unimplemented("this launcher cannot stop nodes (run the planner in `tessera up`)");
    return hooks_.stop(node.address);
  }

 private:
  const solver::Fleet fleet_;
  const ClusterToken token_;
  const ScaleHooks hooks_;
};

}  // namespace

std::unique_ptr<Launcher> make_local_launcher(const solver::Fleet& fleet, ClusterToken token, ScaleHooks hooks) {
  return std::make_unique<LocalLauncher>(fleet, std::move(token), std::move(hooks));
}

}  // namespace tessera::planner
