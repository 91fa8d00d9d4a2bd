#include "solver/profile.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

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
  if (latency.kind == LatencyKind::kAdditive && !positive(latency.attention_flops_per_s))
    return invalid_argument(fmt::format("profile {}: an additive latency model needs attention_flops_per_s", family));
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
  const double decode_window =
      s.decode_seqs > 0 ? s.decode_seqs * c.windowed(s.decode_context_sum / s.decode_seqs) : 0.0;
  w.attention_flops = 4.0 * (c.full_q_dims * (s.decode_context_sum + s.prefill_positions) +
                             c.sliding_q_dims * (decode_window + s.prefill_window_positions));
  w.flops = c.linear_flops(w.tokens) + w.attention_flops + c.classifier_flops(s.sampled);
  // Weights are read once per step (the experts some token is routed to); the KV of every attended cached position
  // is read, new KV is written; each sequence's recurrent state is read and written.
  w.bytes = c.weight_read_bytes(w.tokens) + c.full_kv_read_bytes * (s.decode_context_sum + s.prefill_past) +
            c.sliding_kv_read_bytes * (decode_window + s.prefill_window_past) +
            c.kv_bytes_per_token * s.prefill_tokens + 2.0 * c.state_bytes * (s.decode_seqs + s.prefill_seqs);
  return w;
}

namespace {

// Linear through (x0, y0), (x1, y1) at x; the single value when the two x are equal.
double line(double x0, double y0, double x1, double y1, double x) {
  return x1 == x0 ? y0 : y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

// y at x on the polyline through points sorted by x, the end segments extended.
double polyline(const std::vector<std::pair<double, double>>& xy, double x) {
  if (xy.size() == 1) return xy[0].second;
  size_t k = 1;
  while (k + 1 < xy.size() && xy[k].first < x) ++k;
  return line(xy[k - 1].first, xy[k - 1].second, xy[k].first, xy[k].second, x);
}

}  // namespace

Result<double> interpolate_decode(const std::vector<DecodePoint>& points, double batch, double context) {
  if (points.empty()) return invalid_argument("no measured decode points to interpolate");
  std::vector<int> contexts;
  for (const DecodePoint& p : points) contexts.push_back(p.context);
  std::sort(contexts.begin(), contexts.end());
  contexts.erase(std::unique(contexts.begin(), contexts.end()), contexts.end());
  std::vector<std::pair<double, double>> by_context;  // (context, seconds at this batch)
  for (int c : contexts) {
    std::vector<std::pair<double, double>> by_batch;
    for (const DecodePoint& p : points)
      if (p.context == c) by_batch.emplace_back(p.batch, p.seconds);
    std::sort(by_batch.begin(), by_batch.end());
    by_context.emplace_back(c, polyline(by_batch, batch));
  }
  return std::max(0.0, polyline(by_context, context));
}

Result<double> interpolate_prefill(const std::vector<PrefillPoint>& points, double tokens) {
  std::vector<std::pair<double, double>> xy;
  for (const PrefillPoint& p : points)
    if (p.batch == 1) xy.emplace_back(p.tokens, p.seconds);
  if (xy.empty()) return invalid_argument("no measured single-prompt prefill points to interpolate");
  std::sort(xy.begin(), xy.end());
  return std::max(0.0, polyline(xy, tokens));
}

void add_prefill_chunk(StepShape& s, const ModelCost& c, double past, double chunk) {
  s.prefill_tokens += chunk;
  s.prefill_positions += windowed_positions(past, chunk, 0);
  s.prefill_past += past;
  s.prefill_window_positions += windowed_positions(past, chunk, c.sliding_window);
  s.prefill_window_past += c.windowed(past);
  s.prefill_seqs += 1;
}

StepShape prefill_shape(const ModelCost& c, double tokens, double batch) {
  StepShape s;
  add_prefill_chunk(s, c, 0, tokens);
  s.prefill_tokens *= batch;
  s.prefill_positions *= batch;
  s.prefill_window_positions *= batch;
  s.prefill_seqs = batch;
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
  if (m.kind == LatencyKind::kAdditive) {
    double attention = w.attention_flops / (m.attention_flops_per_s * tp);
    compute = (w.flops - w.attention_flops) / (m.flops_per_s * tp);
    return m.overhead_s + compute + attention + memory + comm;
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

namespace {

// Relative error of a model on the points, using the simulator's own step time (tp 1, no interconnect).
FitError fit_error(const LatencyModel& m, const ModelCost& cost, const std::vector<StepWork>& work,
                   const std::vector<double>& y) {
  FitError fe;
  fe.points = static_cast<int>(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    double r = std::abs(step_seconds(m, work[i], 1, 0, cost) - y[i]) / y[i];
    fe.mean_abs_rel += r / work.size();
    fe.max_abs_rel = std::max(fe.max_abs_rel, r);
  }
  return fe;
}

LatencyModel fit_roofline(const std::vector<StepWork>& work, const std::vector<double>& y) {
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
  return m;
}

// Solves the k x k system a x = b in place (Gaussian elimination, partial pivoting); false if singular.
bool solve_small(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>* x) {
  size_t k = b.size();
  for (size_t c = 0; c < k; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < k; ++r)
      if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
    if (std::abs(a[piv][c]) < 1e-300) return false;
    std::swap(a[c], a[piv]);
    std::swap(b[c], b[piv]);
    for (size_t r = c + 1; r < k; ++r) {
      double f = a[r][c] / a[c][c];
      for (size_t j = c; j < k; ++j) a[r][j] -= f * a[c][j];
      b[r] -= f * b[c];
    }
  }
  x->assign(k, 0);
  for (size_t c = k; c-- > 0;) {
    double v = b[c];
    for (size_t j = c + 1; j < k; ++j) v -= a[c][j] * (*x)[j];
    (*x)[c] = v / a[c][c];
  }
  return true;
}

// t = c0 + c1 * matmul flops + c2 * attention flops + c3 * bytes with every c >= 0, least squared relative
// error. With four unknowns the exact non-negative solution is found by trying every support set.
std::optional<LatencyModel> fit_additive(const std::vector<StepWork>& work, const std::vector<double>& y) {
  // Features scaled to comparable magnitudes (each divided by its largest value) for a stable solve.
  std::vector<std::array<double, 4>> f(work.size());
  std::array<double, 4> scale{1, 0, 0, 0};
  for (size_t i = 0; i < work.size(); ++i) {
    f[i] = {1.0, work[i].flops - work[i].attention_flops, work[i].attention_flops, work[i].bytes};
    for (int j = 1; j < 4; ++j) scale[j] = std::max(scale[j], f[i][j]);
  }
  for (auto& row : f)
    for (int j = 1; j < 4; ++j) row[j] = scale[j] > 0 ? row[j] / scale[j] : 0;
  double best_err = INFINITY;
  std::array<double, 4> best{};
  for (int mask = 1; mask < 16; ++mask) {
    std::vector<int> cols;
    for (int j = 0; j < 4; ++j)
      if (mask & (1 << j)) cols.push_back(j);
    size_t k = cols.size();
    std::vector<std::vector<double>> a(k, std::vector<double>(k, 0));
    std::vector<double> b(k, 0), x;
    for (size_t i = 0; i < work.size(); ++i) {
      double w = 1.0 / (y[i] * y[i]);
      for (size_t r = 0; r < k; ++r) {
        b[r] += w * f[i][cols[r]] * y[i];
        for (size_t c = 0; c < k; ++c) a[r][c] += w * f[i][cols[r]] * f[i][cols[c]];
      }
    }
    if (!solve_small(a, b, &x)) continue;
    if (std::any_of(x.begin(), x.end(), [](double v) { return v < 0; })) continue;
    std::array<double, 4> coef{};
    for (size_t r = 0; r < k; ++r) coef[cols[r]] = x[r];
    double err = 0;
    for (size_t i = 0; i < work.size(); ++i) {
      double pred = 0;
      for (int j = 0; j < 4; ++j) pred += coef[j] * f[i][j];
      err += (pred - y[i]) * (pred - y[i]) / (y[i] * y[i]);
    }
    if (err < best_err) best_err = err, best = coef;
  }
  if (!std::isfinite(best_err)) return std::nullopt;
  // A zero coefficient is a rate too fast to matter: keep it finite so profiles stay valid numbers.
  auto rate = [&](int j) { return best[j] > 0 ? scale[j] / best[j] : 1e30; };
  LatencyModel m;
  m.kind = LatencyKind::kAdditive;
  m.overhead_s = best[0];
  m.flops_per_s = rate(1);
  m.attention_flops_per_s = rate(2);
  m.bytes_per_s = rate(3);
  return m;
}

}  // namespace

Result<std::pair<LatencyModel, FitError>> fit_latency_model(const ModelCost& cost,
                                                            const std::vector<PrefillPoint>& prefill,
                                                            const std::vector<DecodePoint>& decode) {
  std::vector<StepWork> work;
  std::vector<double> y;
  for (const auto& p : prefill) {
    if (p.tokens <= 0 || p.batch <= 0 || !positive(p.seconds))
      return invalid_argument(
          fmt::format("prefill point (tokens {}, batch {}, {} s) must be positive", p.tokens, p.batch, p.seconds));
    work.push_back(step_work(cost, prefill_shape(cost, p.tokens, p.batch)));
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
  LatencyModel roof = fit_roofline(work, y);
  FitError roof_err = fit_error(roof, cost, work, y);
  std::optional<LatencyModel> add = fit_additive(work, y);
  if (add) {
    FitError add_err = fit_error(*add, cost, work, y);
    // The roofline is kept unless the additive shape is clearly better (it has one more parameter).
    if (add_err.mean_abs_rel < 0.9 * roof_err.mean_abs_rel) return std::make_pair(*add, add_err);
  }
  return std::make_pair(roof, roof_err);
}

}  // namespace tessera::solver
