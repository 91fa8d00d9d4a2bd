#include "solver/profile.h"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>

namespace tessera::solver {
namespace {

bool positive(double v) { return std::isfinite(v) && v > 0; }

}  // namespace

Status DeviceProfile::validate() const {
  if (family.empty()) return invalid_argument("profile has no family");
  if (!positive(memory_bytes)) return invalid_argument(fmt::format("profile {}: memory must be positive", family));
  if (!positive(network_bandwidth))
    return invalid_argument(fmt::format("profile {}: network bandwidth must be positive", family));
  if (!positive(latency.flops_per_s) || !positive(latency.bytes_per_s))
    return invalid_argument(
        fmt::format("profile {}: latency model needs positive flops_per_s and bytes_per_s", family));
  if (!std::isfinite(latency.overhead_s) || latency.overhead_s < 0)
    return invalid_argument(fmt::format("profile {}: overhead_s must be >= 0", family));
  return ok_status();
}

StepWork step_work(const ModelCost& c, const StepShape& s) {
  StepWork w;
  w.tokens = s.decode_seqs + s.prefill_tokens;
  w.flops = c.linear_flops(w.tokens) + 4.0 * c.n_layers * c.q_dim * (s.decode_context_sum + s.prefill_positions) +
            c.classifier_flops(s.sampled);
  // Weights are read once per step; the KV of every attended cached position is read, new KV is written.
  w.bytes = c.weight_bytes + c.kv_bytes_per_token * (s.decode_context_sum + s.prefill_past + s.prefill_tokens);
  return w;
}

StepShape prefill_shape(double tokens, double batch) {
  StepShape s;
  s.prefill_tokens = tokens * batch;
  s.prefill_positions = batch * tokens * (tokens + 1.0) / 2.0;
  s.sampled = batch;
  return s;
}

StepShape decode_shape(double batch, double context) {
  StepShape s;
  s.decode_seqs = batch;
  s.decode_context_sum = batch * context;
  s.sampled = batch;
  return s;
}

double step_seconds(const LatencyModel& m, const StepWork& w, int tp, double interconnect_bandwidth,
                    const ModelCost& cost) {
  double compute = w.flops / (m.flops_per_s * tp);
  double memory = w.bytes / (m.bytes_per_s * tp);
  double comm = 0;
  if (tp > 1 && interconnect_bandwidth > 0) {
    // Two all-reduces per layer of tokens * dim activations at 2 bytes; a ring moves 2 (tp-1)/tp of it.
    double bytes = 2.0 * cost.n_layers * w.tokens * cost.dim * 2.0 * 2.0 * (tp - 1) / tp;
    comm = bytes / interconnect_bandwidth;
  }
  return m.overhead_s + std::max(compute, memory) + comm;
}

Status validate_datasheet(const Datasheet& d) {
  if (!positive(d.peak_flops)) return invalid_argument("datasheet peak_tflops must be positive");
  if (!positive(d.memory_bandwidth)) return invalid_argument("datasheet memory_bandwidth_gb_s must be positive");
  if (!positive(d.memory_bytes)) return invalid_argument("datasheet memory_gb must be positive");
  if (!positive(d.network_bandwidth)) return invalid_argument("datasheet network_gb_s must be positive");
  if (d.interconnect_bandwidth < 0) return invalid_argument("datasheet interconnect_gb_s must be >= 0");
  if (!(d.flops_efficiency > 0 && d.flops_efficiency <= 1))
    return invalid_argument("datasheet flops_efficiency must be in (0, 1]");
  if (!(d.bandwidth_efficiency > 0 && d.bandwidth_efficiency <= 1))
    return invalid_argument("datasheet bandwidth_efficiency must be in (0, 1]");
  if (!(d.step_overhead_s >= 0 && d.step_overhead_s < 10))
    return invalid_argument("datasheet step_overhead_ms must be in [0, 10000)");
  return ok_status();
}

DeviceProfile profile_from_datasheet(const std::string& family, const Datasheet& d) {
  DeviceProfile p;
  p.family = family;
  p.source = "datasheet";
  p.memory_bytes = d.memory_bytes;
  p.network_bandwidth = d.network_bandwidth;
  p.interconnect_bandwidth = d.interconnect_bandwidth;
  p.latency.overhead_s = d.step_overhead_s;
  p.latency.flops_per_s = d.peak_flops * d.flops_efficiency;
  p.latency.bytes_per_s = d.memory_bandwidth * d.bandwidth_efficiency;
  return p;
}

Result<std::pair<LatencyModel, FitError>> fit_latency_model(const ModelCost& cost,
                                                            const std::vector<PrefillPoint>& prefill,
                                                            const std::vector<DecodePoint>& decode) {
  std::vector<StepWork> work;
  std::vector<double> y;
  for (const auto& p : prefill) {
    if (p.tokens <= 0 || p.batch <= 0 || !positive(p.seconds))
      return invalid_argument(
          fmt::format("prefill point (tokens {}, batch {}, {} s) must be positive", p.tokens, p.batch, p.seconds));
    work.push_back(step_work(cost, prefill_shape(p.tokens, p.batch)));
    y.push_back(p.seconds);
  }
  for (const auto& p : decode) {
    if (p.batch <= 0 || p.context <= 0 || !positive(p.seconds))
      return invalid_argument(
          fmt::format("decode point (batch {}, context {}, {} s) must be positive", p.batch, p.context, p.seconds));
    work.push_back(step_work(cost, decode_shape(p.batch, p.context)));
    y.push_back(p.seconds);
  }
  if (work.size() < 3) return invalid_argument(fmt::format("need at least 3 points to fit, got {}", work.size()));

  // For fixed rates the best overhead (least squared relative error) has a closed form; the two rates are
  // searched on a log grid, refined three times around the best cell.
  auto evaluate = [&](double lf, double lb, LatencyModel* out) {
    LatencyModel m{0, std::pow(10.0, lf), std::pow(10.0, lb)};
    double num = 0, den = 0;
    for (size_t i = 0; i < work.size(); ++i) {
      double base = std::max(work[i].flops / m.flops_per_s, work[i].bytes / m.bytes_per_s);
      num += (y[i] - base) / (y[i] * y[i]);
      den += 1.0 / (y[i] * y[i]);
    }
    m.overhead_s = std::max(0.0, num / den);
    double err = 0;
    for (size_t i = 0; i < work.size(); ++i) {
      double pred = m.overhead_s + std::max(work[i].flops / m.flops_per_s, work[i].bytes / m.bytes_per_s);
      double r = (pred - y[i]) / y[i];
      err += r * r;
    }
    if (out) *out = m;
    return err;
  };
  double lo_f = 3, hi_f = 19, lo_b = 3, hi_b = 16;
  double best_f = 0, best_b = 0;
  constexpr int kGrid = 64;
  for (int round = 0; round < 4; ++round) {
    double best = INFINITY;
    double step_f = (hi_f - lo_f) / (kGrid - 1), step_b = (hi_b - lo_b) / (kGrid - 1);
    for (int i = 0; i < kGrid; ++i) {
      for (int j = 0; j < kGrid; ++j) {
        double lf = lo_f + i * step_f, lb = lo_b + j * step_b;
        double e = evaluate(lf, lb, nullptr);
        if (e < best) best = e, best_f = lf, best_b = lb;
      }
    }
    lo_f = best_f - 2 * step_f, hi_f = best_f + 2 * step_f;
    lo_b = best_b - 2 * step_b, hi_b = best_b + 2 * step_b;
  }
  LatencyModel m;
  evaluate(best_f, best_b, &m);
  FitError fe;
  fe.points = static_cast<int>(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    double pred = m.overhead_s + std::max(work[i].flops / m.flops_per_s, work[i].bytes / m.bytes_per_s);
    double r = std::abs(pred - y[i]) / y[i];
    fe.mean_abs_rel += r / work.size();
    fe.max_abs_rel = std::max(fe.max_abs_rel, r);
  }
  return std::make_pair(m, fe);
}

}  // namespace tessera::solver
