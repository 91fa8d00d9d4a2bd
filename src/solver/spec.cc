#include "solver/spec.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/core.h>

#include "base/rng.h"

namespace tessera::solver {

Status Fleet::validate() const {
  if (pools.empty()) return invalid_argument("fleet has no pools");
  std::set<std::string> names;
  for (const Pool& p : pools) {
    if (p.name.empty()) return invalid_argument("a fleet pool has no name");
    if (!names.insert(p.name).second) return invalid_argument(fmt::format("pool name '{}' is used twice", p.name));
    if (p.count < 1 || p.count > 100000)
      return invalid_argument(fmt::format("pool {}: count {} must be in [1, 100000]", p.name, p.count));
    if (!(p.cost_per_hour >= 0) || !std::isfinite(p.cost_per_hour))
      return invalid_argument(fmt::format("pool {}: cost_per_hour must be >= 0", p.name));
    TS_RETURN_IF_ERROR(p.profile.validate().with_context(fmt::format("pool {}", p.name)));
    for (int s : p.instance_sizes) {
      if (s < 1 || s > 64 || (s & (s - 1)) != 0)
        return invalid_argument(fmt::format("pool {}: instance size {} must be a power of two in [1, 64]", p.name, s));
    }
    for (int b : p.batch_limits) {
      if (b < 1 || b > 4096)
        return invalid_argument(fmt::format("pool {}: batch limit {} must be in [1, 4096]", p.name, b));
    }
  }
  if (!(budget_per_hour >= 0)) return invalid_argument("budget_per_hour must be >= 0");
  if (token_budget < 16 || token_budget > (1 << 20))
    return invalid_argument(fmt::format("token_budget {} must be in [16, 1048576]", token_budget));
  if (!(memory_utilization > 0 && memory_utilization <= 1))
    return invalid_argument("memory_utilization must be in (0, 1]");
  return ok_status();
}

Status LengthDist::validate(const char* what) const {
  if (min < 1 || max < min || max > (1 << 20))
    return invalid_argument(
        fmt::format("{} length range [{}, {}] must satisfy 1 <= min <= max <= 1048576", what, min, max));
  if (kind == Kind::kFixed && (mean < 1 || mean > (1 << 20)))
    return invalid_argument(fmt::format("{} length {} must be in [1, 1048576]", what, mean));
  if (kind == Kind::kNormal && (!(stddev >= 0) || !(mean >= 1)))
    return invalid_argument(fmt::format("{} length: normal needs mean >= 1 and stddev >= 0", what));
  return ok_status();
}

double LengthDist::expected() const {
  switch (kind) {
    case Kind::kFixed:
      return std::round(mean);
    case Kind::kUniform:
      return (min + max) / 2.0;
    case Kind::kNormal:
      return std::clamp(mean, static_cast<double>(min), static_cast<double>(max));
  }
  return mean;
}

Status Workload::validate() const {
  TS_RETURN_IF_ERROR(model.config.validate().with_context("workload model"));
  if (!(model.weight_bytes > 0 && model.weight_bytes <= 8))
    return invalid_argument("model weight_bytes must be in (0, 8]");
  if (!(model.kv_bytes > 0 && model.kv_bytes <= 8)) return invalid_argument("model kv_bytes must be in (0, 8]");
  if (!trace.empty()) {
    for (size_t i = 0; i < trace.size(); ++i) {
      const Request& r = trace[i];
      if (!(r.arrival_s >= 0) || r.input_tokens < 1 || r.output_tokens < 1)
        return invalid_argument(fmt::format("trace row {}: needs arrival >= 0, input >= 1, output >= 1", i + 1));
      if (i > 0 && r.arrival_s < trace[i - 1].arrival_s)
        return invalid_argument(fmt::format("trace row {}: arrivals must not decrease", i + 1));
    }
    return ok_status();
  }
  if (!(rate > 0 && rate < 1e7))
    return invalid_argument(fmt::format("workload rate {} must be in (0, 1e7) requests/s", rate));
  if (arrival != "poisson" && arrival != "uniform")
    return invalid_argument(fmt::format("unknown arrival '{}'; known: poisson, uniform", arrival));
  if (requests < 1 || requests > 10000000)
    return invalid_argument(fmt::format("workload requests {} must be in [1, 10000000]", requests));
  TS_RETURN_IF_ERROR(input.validate("input"));
  TS_RETURN_IF_ERROR(output.validate("output"));
  return ok_status();
}

Status Slo::validate() const {
  if (!(ttft_s > 0 && std::isfinite(ttft_s))) return invalid_argument("slo ttft_ms must be positive");
  if (!(tpot_s > 0 && std::isfinite(tpot_s))) return invalid_argument("slo tpot_ms must be positive");
  if (!(percentile > 0 && percentile <= 100)) return invalid_argument("slo percentile must be in (0, 100]");
  if (!(attainment > 0 && attainment <= 1)) return invalid_argument("slo attainment must be in (0, 1]");
  return ok_status();
}

namespace {

int draw(const LengthDist& d, Rng& rng) {
  switch (d.kind) {
    case LengthDist::Kind::kFixed:
      return static_cast<int>(std::lround(d.mean));
    case LengthDist::Kind::kUniform:
      return d.min + static_cast<int>(rng.next_u32() % static_cast<uint32_t>(d.max - d.min + 1));
    case LengthDist::Kind::kNormal: {
      double v = d.mean + d.stddev * rng.next_normal();
      return static_cast<int>(std::clamp(std::lround(v), static_cast<long>(d.min), static_cast<long>(d.max)));
    }
  }
  return d.min;
}

}  // namespace

std::vector<Request> generate_requests(const Workload& w) {
  if (!w.trace.empty()) return w.trace;
  Rng rng(w.seed);
  std::vector<Request> out;
  out.reserve(w.requests);
  double t = 0;
  for (int i = 0; i < w.requests; ++i) {
    Request r;
    if (w.arrival == "uniform") {
      t = i / w.rate;
    } else {
      double u = 1.0 - rng.next_f32();  // (0, 1]
      t += -std::log(u) / w.rate;
    }
    r.arrival_s = t;
    r.input_tokens = draw(w.input, rng);
    r.output_tokens = draw(w.output, rng);
    out.push_back(r);
  }
  return out;
}

}  // namespace tessera::solver
