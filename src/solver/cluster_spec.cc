#include "solver/cluster_spec.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "base/paths.h"
#include "model/hf_cache.h"

namespace tessera::solver {
namespace {

Result<std::string> path_key(const YAML::Node& y, const char* key, const std::string& dir, const std::string& what) {
  auto p = resolve_path(y[key].as<std::string>(), dir);
  if (!p.ok()) return p.status().with_context(what);
  return *p;
}

// A model: a path (as path_key), or ORG/NAME[@REV] found in the local Hugging Face cache (model/hf_cache.h); the
// reference is kept as written so that the node resolves it the same way (`tessera serve ORG/NAME`).
Result<std::string> model_key(const YAML::Node& y, const char* key, const std::string& dir, const std::string& what) {
  const std::string ref = y[key].as<std::string>();
  auto p = resolve_path(ref, dir);
  if (p.ok() || !model::looks_like_repo_id(ref)) return p.ok() ? p : p.status().with_context(what);
  auto cached = model::resolve_model_reference(ref);
  if (!cached.ok()) return cached.status().with_context(what);
  return ref;
}

Status read_models(const YAML::Node& y, const std::string& file, const std::string& dir,
                   const std::string& default_model, ClusterSpec& s) {
  if (y["model"] && y["models"])
    return invalid_argument(fmt::format("{}: give either 'model' (one) or 'models' (several), not both", file));
  if (y["models"]) {
    if (!y["models"].IsSequence() || y["models"].size() == 0)
      return invalid_argument(fmt::format("{}: 'models' must list at least one model", file));
    for (const YAML::Node& m : y["models"]) {
      SpecModel sm;
      if (!m.IsMap() || !m["name"] || !m["path"])
        return invalid_argument(fmt::format("{}: every entry of 'models' needs a name and a path", file));
      sm.name = m["name"].as<std::string>();
      TS_ASSIGN_OR_RETURN(sm.path, model_key(m, "path", dir, fmt::format("{}: model {}", file, sm.name)));
      if (m["tokenizer"]) {
        TS_ASSIGN_OR_RETURN(sm.tokenizer, path_key(m, "tokenizer", dir, fmt::format("{}: model {}", file, sm.name)));
      }
      if (m["chat_template"]) sm.chat_template = m["chat_template"].as<std::string>();
      if (m["args"]) sm.args = m["args"].as<std::vector<std::string>>();
      if (sm.name.empty()) return invalid_argument(fmt::format("{}: a model's name is empty", file));
      if (s.model(sm.name) != nullptr)
        return invalid_argument(fmt::format("{}: model name '{}' is given twice", file, sm.name));
      s.models.push_back(std::move(sm));
    }
    return ok_status();
  }
  SpecModel sm;
  if (y["model"]) {
    TS_ASSIGN_OR_RETURN(sm.path, model_key(y, "model", dir, fmt::format("{}: model", file)));
  } else {
    sm.path = default_model;
  }
  if (y["tokenizer"]) {
    TS_ASSIGN_OR_RETURN(sm.tokenizer, path_key(y, "tokenizer", dir, fmt::format("{}: tokenizer", file)));
  }
  if (y["chat_template"]) sm.chat_template = y["chat_template"].as<std::string>();
  // Served under its folder's (or file's) name; a Hugging Face reference under ORG/NAME, as `tessera serve` does.
  sm.name = model::looks_like_repo_id(sm.path) && !sm.path.starts_with("/")
                ? sm.path.substr(0, sm.path.find('@'))
                : std::filesystem::path(sm.path).filename().string();
  s.models.push_back(std::move(sm));
  return ok_status();
}

Status read_planner(const YAML::Node& p, const std::string& file, const std::string& dir, ClusterSpec& s) {
  if (p.IsScalar()) {
    s.planner = p.as<std::string>() == "on";
    if (s.planner) return invalid_argument(fmt::format("{}: 'planner: on' needs its fleet, workload and slo", file));
    return ok_status();
  }
  s.planner = p["enabled"] ? p["enabled"].as<bool>() : true;
  for (const char* k : {"fleet", "workload", "slo"}) {
    if (!p[k]) return invalid_argument(fmt::format("{}: planner: '{}' (a spec file) is required", file, k));
    TS_ASSIGN_OR_RETURN(std::string f, path_key(p, k, dir, fmt::format("{}: planner: {}", file, k)));
    (std::string(k) == "fleet"      ? s.planner_fleet
     : std::string(k) == "workload" ? s.planner_workload
                                    : s.planner_slo) = f;
  }
  if (p["model"]) s.planner_model = p["model"].as<std::string>();
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
        "{}: planner: interval_s must be positive, windows_to_act at least 1, cooldown_s and min_gain >= 0", file));
  return ok_status();
}

}  // namespace

const SpecModel* ClusterSpec::model(const std::string& name) const {
  for (const SpecModel& m : models) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

Result<ClusterSpec> read_cluster_spec(const std::string& path, const std::string& default_model) {
  ClusterSpec s;
  try {
    YAML::Node y = YAML::LoadFile(path);
    if (!y.IsMap()) return invalid_argument(fmt::format("{}: the spec must be a mapping", path));
    // A plan from `tessera solve --out` is a spec when its pools exist here; otherwise it says why not.
    if (y["launchable"] && !y["launchable"].as<bool>()) {
      return invalid_argument(fmt::format("{}: this plan cannot be launched here: {}", path,
                                          y["launch_note"] ? y["launch_note"].as<std::string>() : "no reason given"));
    }
    const std::string dir = std::filesystem::path(path).parent_path().string();
    TS_RETURN_IF_ERROR(read_models(y, path, dir, default_model, s));
    if (y["router"]) {
      if (y["router"].IsScalar()) {
        s.router = y["router"].as<std::string>() != "off";
      } else {
        if (y["router"]["port"]) s.router_port = y["router"]["port"].as<int>();
        if (y["router"]["strategy"]) s.strategy = y["router"]["strategy"].as<std::string>();
        if (y["router"]["args"]) s.router_args = y["router"]["args"].as<std::vector<std::string>>();
      }
    }
    if (y["planner"]) TS_RETURN_IF_ERROR(read_planner(y["planner"], path, dir, s));
    if (!y["nodes"] || !y["nodes"].IsSequence() || y["nodes"].size() == 0)
      return invalid_argument(fmt::format("{}: 'nodes' must list at least one node", path));
    std::set<std::string> names;
    int i = 0;
    for (const YAML::Node& n : y["nodes"]) {
      SpecNode ns;
      ns.name = n["name"] ? n["name"].as<std::string>() : fmt::format("node-{}", i);
      ns.role = n["role"] ? n["role"].as<std::string>() : "both";
      ns.backend = n["backend"] ? n["backend"].as<std::string>() : "cpu";
      ns.threads = n["threads"] ? n["threads"].as<int>() : 0;
      if (n["cpus"]) ns.cpus = n["cpus"].as<std::vector<int>>();
      if (n["args"]) ns.args = n["args"].as<std::vector<std::string>>();
      if (ns.role != "prefill" && ns.role != "decode" && ns.role != "both")
        return invalid_argument(
            fmt::format("{}: node {} has unknown role '{}' (prefill, decode, both)", path, ns.name, ns.role));
      if (!names.insert(ns.name).second)
        return invalid_argument(fmt::format("{}: node name '{}' is given twice", path, ns.name));
      if (n["model"]) {
        ns.model = n["model"].as<std::string>();
        if (s.model(ns.model) == nullptr)
          return invalid_argument(
              fmt::format("{}: node {} names model '{}', which 'models' does not list", path, ns.name, ns.model));
      } else if (s.models.size() > 1) {
        return invalid_argument(fmt::format(
            "{}: node {} must say which model it serves ('model:'): the spec lists several", path, ns.name));
      } else {
        ns.model = s.models.front().name;
      }
      s.nodes.push_back(std::move(ns));
      ++i;
    }
    if (s.planner) {
      if (s.planner_model.empty() && s.models.size() > 1)
        return invalid_argument(fmt::format("{}: planner: 'model' is required when the spec serves several", path));
      if (s.planner_model.empty()) s.planner_model = s.models.front().name;
      if (s.model(s.planner_model) == nullptr)
        return invalid_argument(fmt::format("{}: planner: model '{}' is not in 'models'", path, s.planner_model));
    }
  } catch (const YAML::Exception& e) {
    return invalid_argument(fmt::format("{}: {}", path, e.what()));
  }
  return s;
}

std::vector<std::string> serve_args(const ClusterSpec& spec, const SpecNode& node) {
  const SpecModel* m = spec.model(node.model);
  if (m == nullptr) m = &spec.models.front();
  std::vector<std::string> a = {"serve",      "--model",         m->path,          "--port",
                                "0",          "--role",          node.role,        "--backend",
                                node.backend, "--chat-template", m->chat_template, "--served-model-name",
                                m->name};
  if (!m->tokenizer.empty()) a.insert(a.end(), {"--tokenizer", m->tokenizer});
  if (node.threads > 0) a.insert(a.end(), {"--threads", std::to_string(node.threads)});
  if (spec.planner) a.push_back("--role-switchable");  // the planner re-roles them (POST /admin/role)
  a.insert(a.end(), m->args.begin(), m->args.end());
  a.insert(a.end(), node.args.begin(), node.args.end());
  return a;
}

}  // namespace tessera::solver
