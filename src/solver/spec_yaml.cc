#include "solver/spec_yaml.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>
#include <sstream>

#include <fmt/core.h>
#include <fmt/format.h>

#include "base/mapped_file.h"
#include "model/loader.h"
#include "model/synth.h"

namespace tessera::solver {
namespace {

constexpr double kGB = 1e9;

std::string dir_of(const std::string& path) {
  std::filesystem::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

std::string resolve(const std::string& base_dir, const std::string& path) {
  std::filesystem::path p(path);
  return p.is_absolute() ? path : (std::filesystem::path(base_dir) / p).string();
}

// A YAML mapping with its location for messages; rejects keys nobody reads (typos).
class Map {
 public:
  Map(YAML::Node node, std::string where) : node_(std::move(node)), where_(std::move(where)) {}

  static Result<Map> from(const YAML::Node& node, const std::string& where) {
    if (!node.IsMap()) return invalid_argument(fmt::format("{}: expected a mapping", where));
    return Map(node, where);
  }
  bool has(const std::string& key) {
    known_.insert(key);
    return node_[key].IsDefined() && !node_[key].IsNull();
  }
  const std::string& where() const { return where_; }
  std::string at(const std::string& key) const { return fmt::format("{}.{}", where_, key); }
  YAML::Node node(const std::string& key) {
    known_.insert(key);
    return node_[key];
  }

  template <typename T>
  Status get(const std::string& key, T* out, bool required) {
    known_.insert(key);
    YAML::Node n = node_[key];
    if (!n.IsDefined() || n.IsNull()) return required ? missing(key) : ok_status();
    if (!n.IsScalar()) return invalid_argument(fmt::format("{}: expected a scalar", at(key)));
    try {
      *out = n.as<T>();
    } catch (const YAML::Exception&) {
      return invalid_argument(fmt::format("{}: '{}' is not a valid {}", at(key), n.Scalar(), type_name<T>()));
    }
    return ok_status();
  }
  template <typename T>
  Status get_list(const std::string& key, std::vector<T>* out) {
    known_.insert(key);
    YAML::Node n = node_[key];
    if (!n.IsDefined() || n.IsNull()) return ok_status();
    if (!n.IsSequence()) return invalid_argument(fmt::format("{}: expected a list", at(key)));
    out->clear();
    for (const auto& e : n) {
      try {
        out->push_back(e.as<T>());
      } catch (const YAML::Exception&) {
        return invalid_argument(fmt::format("{}: list item is not a valid {}", at(key), type_name<T>()));
      }
    }
    return ok_status();
  }
  // A required key is absent: if an unread key looks like it (a typo), name that instead.
  Status missing(const std::string& key) const {
    for (const auto& kv : node_) {
      std::string k = kv.first.as<std::string>();
      if (known_.count(k)) continue;
      if (k.compare(0, 3, key, 0, 3) == 0)
        return invalid_argument(fmt::format("{}: unknown key '{}'; did you mean '{}'?", where_, k, key));
    }
    return invalid_argument(fmt::format("{}: missing required key '{}'", where_, key));
  }
  // Declares the keys this mapping may hold and rejects any other before reading, so that a misspelt key
  // is reported as such rather than as the correctly spelt one missing.
  Status allow(std::initializer_list<const char*> keys) {
    for (const char* k : keys) known_.insert(k);
    return finish();
  }
  Status finish() const {
    for (const auto& kv : node_) {
      std::string k = kv.first.as<std::string>();
      if (!known_.count(k)) {
        return invalid_argument(
            fmt::format("{}: unknown key '{}'; known keys: {}", where_, k, fmt::join(known_, ", ")));
      }
    }
    return ok_status();
  }

 private:
  template <typename T>
  static const char* type_name() {
    if constexpr (std::is_same_v<T, std::string>) return "string";
    if constexpr (std::is_integral_v<T>) return "integer";
    return "number";
  }
  YAML::Node node_;
  std::string where_;
  std::set<std::string> known_;
};

Result<YAML::Node> parse_yaml(const std::string& text, const std::string& origin) {
  try {
    YAML::Node n = YAML::Load(text);
    if (!n.IsMap()) return invalid_argument(fmt::format("{}: expected a YAML mapping at the top level", origin));
    return n;
  } catch (const YAML::ParserException& e) {
    return invalid_argument(fmt::format("{}: YAML syntax error at line {}, column {}: {}", origin, e.mark.line + 1,
                                        e.mark.column + 1, e.msg));
  } catch (const YAML::Exception& e) {
    return invalid_argument(fmt::format("{}: {}", origin, e.what()));
  }
}

Result<Datasheet> parse_datasheet(Map m) {
  TS_RETURN_IF_ERROR(m.allow({"peak_tflops", "memory_bandwidth_gb_s", "memory_gb", "network_gb_s", "interconnect_gb_s",
                              "flops_efficiency", "bandwidth_efficiency", "step_overhead_ms", "source"}));
  Datasheet d;
  double tflops = 0, bw = 0, mem = 0, ic = 0, net = 0, overhead_ms = d.step_overhead_s * 1e3;
  TS_RETURN_IF_ERROR(m.get("peak_tflops", &tflops, true));
  TS_RETURN_IF_ERROR(m.get("memory_bandwidth_gb_s", &bw, true));
  TS_RETURN_IF_ERROR(m.get("memory_gb", &mem, true));
  TS_RETURN_IF_ERROR(m.get("network_gb_s", &net, true));
  TS_RETURN_IF_ERROR(m.get("interconnect_gb_s", &ic, false));
  TS_RETURN_IF_ERROR(m.get("flops_efficiency", &d.flops_efficiency, false));
  TS_RETURN_IF_ERROR(m.get("bandwidth_efficiency", &d.bandwidth_efficiency, false));
  TS_RETURN_IF_ERROR(m.get("step_overhead_ms", &overhead_ms, false));
  std::string source;
  TS_RETURN_IF_ERROR(m.get("source", &source, false));  // where the figures come from; documentation only
  TS_RETURN_IF_ERROR(m.finish());
  d.peak_flops = tflops * 1e12;
  d.memory_bandwidth = bw * kGB;
  d.memory_bytes = mem * kGB;
  d.interconnect_bandwidth = ic * kGB;
  d.network_bandwidth = net * kGB;
  d.step_overhead_s = overhead_ms / 1e3;
  TS_RETURN_IF_ERROR(validate_datasheet(d).with_context(m.where()));
  return d;
}

Result<DeviceProfile> parse_profile_node(const YAML::Node& root, const std::string& origin) {
  TS_ASSIGN_OR_RETURN(Map m, Map::from(root, origin));
  DeviceProfile p;
  double mem = 0, net = 0, ic = 0;
  TS_RETURN_IF_ERROR(m.get("family", &p.family, true));
  TS_RETURN_IF_ERROR(m.get("source", &p.source, true));
  TS_RETURN_IF_ERROR(m.get("model", &p.model, false));
  TS_RETURN_IF_ERROR(m.get("memory_gb", &mem, true));
  TS_RETURN_IF_ERROR(m.get("network_gb_s", &net, true));
  TS_RETURN_IF_ERROR(m.get("interconnect_gb_s", &ic, false));
  TS_RETURN_IF_ERROR(m.get("kv_bytes_per_token", &p.kv_bytes_per_token, false));
  if (p.source != "measured" && p.source != "datasheet")
    return invalid_argument(
        fmt::format("{}: unknown source '{}'; known: measured, datasheet", m.at("source"), p.source));
  p.memory_bytes = mem * kGB;
  p.network_bandwidth = net * kGB;
  p.interconnect_bandwidth = ic * kGB;
  if (!m.has("latency")) return invalid_argument(fmt::format("{}: missing required key 'latency'", origin));
  {
    TS_ASSIGN_OR_RETURN(Map l, Map::from(m.node("latency"), m.at("latency")));
    double overhead_ms = 0;
    TS_RETURN_IF_ERROR(l.get("overhead_ms", &overhead_ms, true));
    TS_RETURN_IF_ERROR(l.get("flops_per_s", &p.latency.flops_per_s, true));
    TS_RETURN_IF_ERROR(l.get("bytes_per_s", &p.latency.bytes_per_s, true));
    std::string kind = "roofline";
    TS_RETURN_IF_ERROR(l.get("kind", &kind, false));
    if (kind == "additive") {
      p.latency.kind = LatencyKind::kAdditive;
      TS_RETURN_IF_ERROR(l.get("attention_flops_per_s", &p.latency.attention_flops_per_s, true));
    } else if (kind != "roofline") {
      return invalid_argument(fmt::format("{}: unknown kind '{}'; known: roofline, additive", l.at("kind"), kind));
    }
    TS_RETURN_IF_ERROR(l.finish());
    p.latency.overhead_s = overhead_ms / 1e3;
  }
  if (m.has("fit")) {
    TS_ASSIGN_OR_RETURN(Map f, Map::from(m.node("fit"), m.at("fit")));
    TS_RETURN_IF_ERROR(f.get("points", &p.fit.points, true));
    TS_RETURN_IF_ERROR(f.get("mean_abs_rel_error", &p.fit.mean_abs_rel, true));
    TS_RETURN_IF_ERROR(f.get("max_abs_rel_error", &p.fit.max_abs_rel, true));
    TS_RETURN_IF_ERROR(f.finish());
  }
  auto list = [&](const char* key, auto fn) -> Status {
    if (!m.has(key)) return ok_status();
    YAML::Node n = m.node(key);
    if (!n.IsSequence()) return invalid_argument(fmt::format("{}: expected a list", m.at(key)));
    for (size_t i = 0; i < n.size(); ++i) {
      TS_ASSIGN_OR_RETURN(Map e, Map::from(n[i], fmt::format("{}[{}]", m.at(key), i)));
      TS_RETURN_IF_ERROR(fn(e));
      TS_RETURN_IF_ERROR(e.finish());
    }
    return ok_status();
  };
  TS_RETURN_IF_ERROR(list("prefill", [&](Map& e) -> Status {
    PrefillPoint pt;
    double ms = 0;
    TS_RETURN_IF_ERROR(e.get("tokens", &pt.tokens, true));
    TS_RETURN_IF_ERROR(e.get("batch", &pt.batch, true));
    TS_RETURN_IF_ERROR(e.get("ms", &ms, true));
    pt.seconds = ms / 1e3;
    p.prefill.push_back(pt);
    return ok_status();
  }));
  TS_RETURN_IF_ERROR(list("decode", [&](Map& e) -> Status {
    DecodePoint pt;
    double ms = 0;
    TS_RETURN_IF_ERROR(e.get("batch", &pt.batch, true));
    TS_RETURN_IF_ERROR(e.get("context", &pt.context, true));
    TS_RETURN_IF_ERROR(e.get("ms", &ms, true));
    pt.seconds = ms / 1e3;
    p.decode.push_back(pt);
    return ok_status();
  }));
  TS_RETURN_IF_ERROR(m.finish());
  TS_RETURN_IF_ERROR(p.validate().with_context(origin));
  return p;
}

Result<LengthDist> parse_length(Map& parent, const std::string& key) {
  if (!parent.has(key)) return invalid_argument(fmt::format("{}: missing required key '{}'", parent.where(), key));
  TS_ASSIGN_OR_RETURN(Map m, Map::from(parent.node(key), parent.at(key)));
  LengthDist d;
  int kinds = 0;
  if (m.has("fixed")) {
    ++kinds;
    TS_RETURN_IF_ERROR(m.get("fixed", &d.mean, true));
    d.kind = LengthDist::Kind::kFixed;
    d.min = d.max = std::max(1, static_cast<int>(d.mean));
  }
  if (m.has("uniform")) {
    ++kinds;
    std::vector<int> range;
    TS_RETURN_IF_ERROR(m.get_list("uniform", &range));
    if (range.size() != 2) return invalid_argument(fmt::format("{}: expected [min, max]", m.at("uniform")));
    d.kind = LengthDist::Kind::kUniform;
    d.min = range[0], d.max = range[1];
  }
  if (m.has("normal")) {
    ++kinds;
    TS_ASSIGN_OR_RETURN(Map n, Map::from(m.node("normal"), m.at("normal")));
    d.kind = LengthDist::Kind::kNormal;
    TS_RETURN_IF_ERROR(n.get("mean", &d.mean, true));
    TS_RETURN_IF_ERROR(n.get("stddev", &d.stddev, true));
    TS_RETURN_IF_ERROR(n.get("min", &d.min, true));
    TS_RETURN_IF_ERROR(n.get("max", &d.max, true));
    TS_RETURN_IF_ERROR(n.finish());
  }
  TS_RETURN_IF_ERROR(m.finish());
  if (kinds != 1)
    return invalid_argument(fmt::format("{}: give exactly one of fixed, uniform, normal", parent.at(key)));
  TS_RETURN_IF_ERROR(d.validate(key.c_str()));
  return d;
}

Result<std::vector<Request>> load_trace(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string text, read_file(path));
  std::vector<Request> out;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    if (line_no == 1 && line.find("arrival") != std::string::npos) continue;  // header
    Request r;
    char c1 = 0, c2 = 0;
    std::istringstream row(line);
    if (!(row >> r.arrival_s >> c1 >> r.input_tokens >> c2 >> r.output_tokens) || c1 != ',' || c2 != ',')
      return invalid_argument(
          fmt::format("{}:{}: expected 'arrival_s,input_tokens,output_tokens', got '{}'", path, line_no, line));
    out.push_back(r);
  }
  if (out.empty()) return invalid_argument(fmt::format("trace {} has no requests", path));
  return out;
}

}  // namespace

Result<DeviceProfile> parse_profile(const std::string& text, const std::string& origin) {
  TS_ASSIGN_OR_RETURN(YAML::Node root, parse_yaml(text, origin));
  try {
    return parse_profile_node(root, origin);
  } catch (const YAML::Exception& e) {
    return invalid_argument(fmt::format("{}: {}", origin, e.what()));
  }
}

Result<Fleet> parse_fleet(const std::string& text, const std::string& origin, const std::string& base_dir) {
  TS_ASSIGN_OR_RETURN(YAML::Node root, parse_yaml(text, origin));
  try {
    TS_ASSIGN_OR_RETURN(Map m, Map::from(root, origin));
    Fleet f;
    TS_RETURN_IF_ERROR(m.get("budget_per_hour", &f.budget_per_hour, false));
    TS_RETURN_IF_ERROR(m.get("token_budget", &f.token_budget, false));
    TS_RETURN_IF_ERROR(m.get("router", &f.router, false));
    TS_RETURN_IF_ERROR(m.get("memory_utilization", &f.memory_utilization, false));
    double overhead_ms = 0;
    TS_RETURN_IF_ERROR(m.get("request_overhead_ms", &overhead_ms, false));
    if (!(overhead_ms >= 0 && overhead_ms < 1e6))
      return invalid_argument(fmt::format("{}: must be in [0, 1e6)", m.at("request_overhead_ms")));
    f.request_overhead_s = overhead_ms / 1e3;
    // Measured overhead distributions, in ms: each sample in [0, 1e6), stored in seconds.
    auto samples = [&](const std::string& key, std::vector<double>* out) -> Status {
      std::vector<double> ms;
      TS_RETURN_IF_ERROR(m.get_list(key, &ms));
      for (double v : ms) {
        if (!(v >= 0 && v < 1e6))
          return invalid_argument(fmt::format("{}: every sample must be in [0, 1e6)", m.at(key)));
        out->push_back(v / 1e3);
      }
      return ok_status();
    };
    TS_RETURN_IF_ERROR(samples("request_overhead_samples_ms", &f.request_overhead_samples_s));
    TS_RETURN_IF_ERROR(samples("request_overhead_busy_samples_ms", &f.request_overhead_busy_samples_s));
    if (!f.request_overhead_samples_s.empty() && m.has("request_overhead_ms"))
      return invalid_argument(fmt::format("{}: give request_overhead_ms or request_overhead_samples_ms, not both",
                                          m.at("request_overhead_samples_ms")));
    if (!f.request_overhead_busy_samples_s.empty() && f.request_overhead_samples_s.empty())
      return invalid_argument(fmt::format("{}: needs request_overhead_samples_ms too (for idle arrivals)",
                                          m.at("request_overhead_busy_samples_ms")));
    double token_ms = 0;
    TS_RETURN_IF_ERROR(m.get("token_overhead_ms", &token_ms, false));
    if (!(token_ms >= 0 && token_ms < 1e4))
      return invalid_argument(fmt::format("{}: must be in [0, 1e4)", m.at("token_overhead_ms")));
    f.token_overhead_s = token_ms / 1e3;
    double start_ms = 0;
    TS_RETURN_IF_ERROR(m.get("stream_start_overhead_ms", &start_ms, false));
    if (!(start_ms >= 0 && start_ms < 1e6))
      return invalid_argument(fmt::format("{}: must be in [0, 1e6)", m.at("stream_start_overhead_ms")));
    f.stream_start_overhead_s = start_ms / 1e3;
    TS_RETURN_IF_ERROR(m.get("colocated_slowdown", &f.colocated_slowdown, false));
    if (!(f.colocated_slowdown >= 0 && f.colocated_slowdown < 10))
      return invalid_argument(fmt::format("{}: must be in [0, 10)", m.at("colocated_slowdown")));
    if (!m.has("pools")) return invalid_argument(fmt::format("{}: missing required key 'pools'", origin));
    YAML::Node pools = m.node("pools");
    if (!pools.IsSequence()) return invalid_argument(fmt::format("{}: expected a list", m.at("pools")));
    for (size_t i = 0; i < pools.size(); ++i) {
      TS_ASSIGN_OR_RETURN(Map pm, Map::from(pools[i], fmt::format("{}.pools[{}]", origin, i)));
      Pool p;
      std::string family, profile_path;
      TS_RETURN_IF_ERROR(pm.get("name", &p.name, true));
      TS_RETURN_IF_ERROR(pm.get("family", &family, false));
      TS_RETURN_IF_ERROR(pm.get("count", &p.count, true));
      TS_RETURN_IF_ERROR(pm.get("cost_per_hour", &p.cost_per_hour, true));
      TS_RETURN_IF_ERROR(pm.get("profile", &profile_path, false));
      TS_RETURN_IF_ERROR(pm.get_list("instance_sizes", &p.instance_sizes));
      TS_RETURN_IF_ERROR(pm.get_list("batch_limits", &p.batch_limits));
      TS_RETURN_IF_ERROR(pm.get_list("roles", &p.roles));
      for (const std::string& r : p.roles)
        if (r != "prefill" && r != "decode" && r != "both")
          return invalid_argument(
              fmt::format("{}: unknown role '{}'; known: prefill, decode, both", pm.at("roles"), r));
      if (pm.has("launch")) {
        TS_ASSIGN_OR_RETURN(Map lm, Map::from(pm.node("launch"), pm.at("launch")));
        TS_RETURN_IF_ERROR(lm.get("backend", &p.launch.backend, true));
        TS_RETURN_IF_ERROR(lm.get("threads", &p.launch.threads, false));
        TS_RETURN_IF_ERROR(lm.get_list("cpus", &p.launch.cpus));
        TS_RETURN_IF_ERROR(lm.get_list("args", &p.launch.args));
        TS_RETURN_IF_ERROR(lm.finish());
        if (p.launch.threads < 0) return invalid_argument(fmt::format("{}: must be >= 0", lm.at("threads")));
        for (int c : p.launch.cpus)
          if (c < 0) return invalid_argument(fmt::format("{}: CPU ids must be >= 0", lm.at("cpus")));
      }
      bool has_sheet = pm.has("datasheet");
      if (has_sheet == !profile_path.empty())
        return invalid_argument(fmt::format("{}: give exactly one of 'profile' (a file) or 'datasheet'", pm.where()));
      if (has_sheet) {
        TS_ASSIGN_OR_RETURN(Map dm, Map::from(pm.node("datasheet"), pm.at("datasheet")));
        TS_ASSIGN_OR_RETURN(Datasheet d, parse_datasheet(dm));
        p.profile = profile_from_datasheet(family.empty() ? p.name : family, d);
      } else {
        TS_ASSIGN_OR_RETURN(p.profile, load_profile(resolve(base_dir, profile_path)));
        if (!family.empty() && family != p.profile.family)
          return invalid_argument(
              fmt::format("{}: family '{}' does not match profile family '{}'", pm.where(), family, p.profile.family));
      }
      TS_RETURN_IF_ERROR(pm.get("decode_points", &p.decode_points, false));
      if (p.decode_points && p.profile.decode.empty())
        return invalid_argument(fmt::format("{}: needs a measured profile with decode points", pm.at("decode_points")));
      TS_RETURN_IF_ERROR(pm.get("prefill_points", &p.prefill_points, false));
      if (p.prefill_points && std::none_of(p.profile.prefill.begin(), p.profile.prefill.end(),
                                           [](const PrefillPoint& q) { return q.batch == 1; }))
        return invalid_argument(
            fmt::format("{}: needs a measured profile with single-prompt prefill points", pm.at("prefill_points")));
      TS_RETURN_IF_ERROR(pm.finish());
      f.pools.push_back(std::move(p));
    }
    TS_RETURN_IF_ERROR(m.finish());
    TS_RETURN_IF_ERROR(f.validate().with_context(origin));
    return f;
  } catch (const YAML::Exception& e) {
    return invalid_argument(fmt::format("{}: {}", origin, e.what()));
  }
}

Result<Workload> parse_workload(const std::string& text, const std::string& origin, const std::string& base_dir) {
  TS_ASSIGN_OR_RETURN(YAML::Node root, parse_yaml(text, origin));
  try {
    TS_ASSIGN_OR_RETURN(Map m, Map::from(root, origin));
    Workload w;
    if (!m.has("model")) return invalid_argument(fmt::format("{}: missing required key 'model'", origin));
    {
      TS_ASSIGN_OR_RETURN(Map mm, Map::from(m.node("model"), m.at("model")));
      std::string shape;
      TS_RETURN_IF_ERROR(mm.get("shape", &shape, false));
      TS_RETURN_IF_ERROR(mm.get("name", &w.model.name, false));
      TS_RETURN_IF_ERROR(mm.get("path", &w.model.path, false));
      TS_RETURN_IF_ERROR(mm.get("tokenizer", &w.model.tokenizer, false));
      // Launched plans run elsewhere (another working directory): keep these absolute.
      if (!w.model.path.empty())
        w.model.path = std::filesystem::absolute(resolve(base_dir, w.model.path)).lexically_normal().string();
      if (!w.model.tokenizer.empty())
        w.model.tokenizer = std::filesystem::absolute(resolve(base_dir, w.model.tokenizer)).lexically_normal().string();
      model::ModelConfig& c = w.model.config;
      bool from_file = false;
      if (!shape.empty()) {
        auto r = model::synth_shape(shape);
        if (!r.ok()) return invalid_argument(fmt::format("{}: {}", mm.at("shape"), r.status().message()));
        c = *r;
        if (w.model.name.empty()) w.model.name = shape;
      } else if (!w.model.path.empty()) {
        // The checkpoint's own config (every family's layer pattern, which a few keys cannot state) and its bytes per
        // parameter as stored; the weights are mapped, not read.
        auto m = model::load_model(w.model.path, w.model.tokenizer, /*require_tokenizer=*/false);
        if (!m.ok()) return invalid_argument(fmt::format("{}: {}", mm.at("path"), m.status().message()));
        c = m->config;
        if (w.model.name.empty()) w.model.name = m->name;
        double bytes = 0, params = 0;
        for (const model::WeightTensor& t : m->weights.tensors())
          bytes += static_cast<double>(t.bytes), params += static_cast<double>(t.numel());
        if (params > 0) w.model.weight_bytes = bytes / params;
        from_file = true;
      }
      bool need = shape.empty() && !from_file;
      TS_RETURN_IF_ERROR(mm.get("dim", &c.dim, need));
      TS_RETURN_IF_ERROR(mm.get("hidden_dim", &c.hidden_dim, need));
      TS_RETURN_IF_ERROR(mm.get("n_layers", &c.n_layers, need));
      TS_RETURN_IF_ERROR(mm.get("n_heads", &c.n_heads, need));
      TS_RETURN_IF_ERROR(mm.get("n_kv_heads", &c.n_kv_heads, need));
      TS_RETURN_IF_ERROR(mm.get("vocab_size", &c.vocab_size, need));
      TS_RETURN_IF_ERROR(mm.get("max_seq_len", &c.max_seq_len, need));
      if (need && c.n_heads > 0) c.head_dim = c.dim / c.n_heads;
      TS_RETURN_IF_ERROR(mm.get("head_dim", &c.head_dim, false));
      TS_RETURN_IF_ERROR(mm.get("weight_bytes", &w.model.weight_bytes, false));
      TS_RETURN_IF_ERROR(mm.get("kv_bytes", &w.model.kv_bytes, false));
      TS_RETURN_IF_ERROR(mm.finish());
    }
    std::string trace;
    TS_RETURN_IF_ERROR(m.get("trace", &trace, false));
    if (!trace.empty()) {
      TS_ASSIGN_OR_RETURN(w.trace, load_trace(resolve(base_dir, trace)));
    } else {
      TS_RETURN_IF_ERROR(m.get("rate", &w.rate, true));
      TS_RETURN_IF_ERROR(m.get("arrival", &w.arrival, false));
      TS_RETURN_IF_ERROR(m.get("requests", &w.requests, false));
      TS_RETURN_IF_ERROR(m.get("seed", &w.seed, false));
      TS_ASSIGN_OR_RETURN(w.input, parse_length(m, "input"));
      TS_ASSIGN_OR_RETURN(w.output, parse_length(m, "output"));
    }
    TS_RETURN_IF_ERROR(m.finish());
    TS_RETURN_IF_ERROR(w.validate().with_context(origin));
    return w;
  } catch (const YAML::Exception& e) {
    return invalid_argument(fmt::format("{}: {}", origin, e.what()));
  }
}

Result<Slo> parse_slo(const std::string& text, const std::string& origin) {
  TS_ASSIGN_OR_RETURN(YAML::Node root, parse_yaml(text, origin));
  try {
    TS_ASSIGN_OR_RETURN(Map m, Map::from(root, origin));
    Slo s;
    double ttft_ms = 0, tpot_ms = 0;
    TS_RETURN_IF_ERROR(m.get("ttft_ms", &ttft_ms, true));
    TS_RETURN_IF_ERROR(m.get("tpot_ms", &tpot_ms, true));
    TS_RETURN_IF_ERROR(m.get("percentile", &s.percentile, false));
    s.attainment = s.percentile / 100.0;
    TS_RETURN_IF_ERROR(m.get("attainment", &s.attainment, false));
    TS_RETURN_IF_ERROR(m.finish());
    s.ttft_s = ttft_ms / 1e3;
    s.tpot_s = tpot_ms / 1e3;
    TS_RETURN_IF_ERROR(s.validate().with_context(origin));
    return s;
  } catch (const YAML::Exception& e) {
    return invalid_argument(fmt::format("{}: {}", origin, e.what()));
  }
}

Result<Fleet> load_fleet(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_fleet(text, path, dir_of(path));
}
Result<Workload> load_workload(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_workload(text, path, dir_of(path));
}
Result<Slo> load_slo(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_slo(text, path);
}
Result<DeviceProfile> load_profile(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_profile(text, path);
}

std::string profile_to_yaml(const DeviceProfile& p) {
  YAML::Emitter e;
  e.SetDoublePrecision(9);
  e << YAML::BeginMap;
  e << YAML::Key << "family" << YAML::Value << p.family;
  e << YAML::Key << "source" << YAML::Value << p.source;
  if (!p.model.empty()) e << YAML::Key << "model" << YAML::Value << p.model;
  e << YAML::Key << "memory_gb" << YAML::Value << p.memory_bytes / kGB;
  e << YAML::Key << "network_gb_s" << YAML::Value << p.network_bandwidth / kGB;
  e << YAML::Key << "interconnect_gb_s" << YAML::Value << p.interconnect_bandwidth / kGB;
  if (p.kv_bytes_per_token > 0) e << YAML::Key << "kv_bytes_per_token" << YAML::Value << p.kv_bytes_per_token;
  e << YAML::Key << "latency" << YAML::Value << YAML::BeginMap;
  bool additive = p.latency.kind == LatencyKind::kAdditive;
  e << YAML::Key << "kind" << YAML::Value << (additive ? "additive" : "roofline");
  e << YAML::Key << "overhead_ms" << YAML::Value << p.latency.overhead_s * 1e3;
  if (additive) e << YAML::Key << "attention_flops_per_s" << YAML::Value << p.latency.attention_flops_per_s;
  e << YAML::Key << "flops_per_s" << YAML::Value << p.latency.flops_per_s;
  e << YAML::Key << "bytes_per_s" << YAML::Value << p.latency.bytes_per_s;
  e << YAML::EndMap;
  if (p.fit.points > 0) {
    e << YAML::Key << "fit" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "points" << YAML::Value << p.fit.points;
    e << YAML::Key << "mean_abs_rel_error" << YAML::Value << p.fit.mean_abs_rel;
    e << YAML::Key << "max_abs_rel_error" << YAML::Value << p.fit.max_abs_rel;
    e << YAML::EndMap;
  }
  if (!p.prefill.empty()) {
    e << YAML::Key << "prefill" << YAML::Value << YAML::BeginSeq;
    for (const auto& pt : p.prefill) {
      e << YAML::Flow << YAML::BeginMap << YAML::Key << "tokens" << YAML::Value << pt.tokens << YAML::Key << "batch"
        << YAML::Value << pt.batch << YAML::Key << "ms" << YAML::Value << pt.seconds * 1e3 << YAML::EndMap;
    }
    e << YAML::EndSeq;
  }
  if (!p.decode.empty()) {
    e << YAML::Key << "decode" << YAML::Value << YAML::BeginSeq;
    for (const auto& pt : p.decode) {
      e << YAML::Flow << YAML::BeginMap << YAML::Key << "batch" << YAML::Value << pt.batch << YAML::Key << "context"
        << YAML::Value << pt.context << YAML::Key << "ms" << YAML::Value << pt.seconds * 1e3 << YAML::EndMap;
    }
    e << YAML::EndSeq;
  }
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace tessera::solver
