// The fault-load driver's accounting (fault_load.h): lost and repeated tokens, recovery time, latency phases,
// goodput, and the docs/faults.md row. Pure: values in, JSON out.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/fault_load.h"

namespace tessera::bench {
namespace {

using json = nlohmann::json;

json percentiles(std::vector<double> v) {
  if (v.empty()) return json{{"n", 0}};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))] * 1000; };
  return json{{"n", v.size()}, {"p50_ms", at(0.5)}, {"p99_ms", at(0.99)}};
}

std::string latency_cell(const json& p) {
  if (p["n"] == 0) return "-";
  return fmt::format("{:.0f} / {:.0f}", p["p50_ms"].get<double>(), p["p99_ms"].get<double>());
}

// When the disturbance the fault caused ended (see fault_load.h), or -1 when no request sent after the fault
// succeeded.
double recovered_at(const std::vector<LoadOutcome>& out, double f, int clients) {
  std::vector<double> pre;
  for (const LoadOutcome& o : out) {
    if (o.ok && o.end < f) pre.push_back(o.end - o.start);
  }
  std::sort(pre.begin(), pre.end());
  const double p99 =
      pre.empty() ? 0 : pre[std::min(pre.size() - 1, static_cast<size_t>(0.99 * (pre.size() - 1) + 0.5))];
  const double slow = std::max(2 * p99, p99 + 0.25);
  // Requests sent after the fault, by start time. The disturbance ends with the first run of `clients`
  // consecutive healthy ones (succeeded, not slow): a lone slow request later on is the machine's noise
  // (it happens without faults too), not the fault's.
  std::vector<const LoadOutcome*> later;
  double disturbed_end = f, first_new_ok = -1;
  for (const LoadOutcome& o : out) {
    if (o.start <= f && o.end >= f) disturbed_end = std::max(disturbed_end, o.end);  // in flight at the fault
    if (o.start > f) later.push_back(&o);
    if (o.start > f && o.ok && (first_new_ok < 0 || o.end < first_new_ok)) first_new_ok = o.end;
  }
  std::sort(later.begin(), later.end(), [](const LoadOutcome* x, const LoadOutcome* y) { return x->start < y->start; });
  auto healthy = [&](const LoadOutcome* o) { return o->ok && o->end - o->start <= slow; };
  size_t run = 0, settled = later.size();
  for (size_t i = 0; i < later.size(); ++i) {
    run = healthy(later[i]) ? run + 1 : 0;
    if (run == static_cast<size_t>(clients)) {
      settled = i + 1 - run;
      break;
    }
  }
  for (size_t i = 0; i < settled; ++i) {
    if (!healthy(later[i])) disturbed_end = std::max(disturbed_end, later[i]->end);
  }
  return first_new_ok < 0 ? -1 : std::max(disturbed_end, first_new_ok);
}

}  // namespace

size_t longest_common_subsequence(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<size_t> prev(b.size() + 1, 0), cur(b.size() + 1, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

json summarize_fault_load(const LoadRun& run, const LoadReference* reference, const FaultLoadOptions& a) {
  const std::vector<LoadOutcome>& out = run.outcomes;
  const int total = static_cast<int>(out.size());
  int ok = 0, failed = 0, mismatched = 0, usage_wrong = 0, text_wrong = 0;
  int64_t lost = 0, dup = 0, tokens = 0;
  std::map<std::string, int> errors;
  json differing = json::array();  // the first requests whose tokens differ from the reference, in detail
  for (int i = 0; i < total; ++i) {
    const LoadOutcome& o = out[static_cast<size_t>(i)];
    ok += o.ok;
    failed += !o.ok;
    if (!o.ok) errors[o.error.substr(0, 120)]++;
    tokens += static_cast<int64_t>(o.tokens.size());
    if (o.ok && o.usage_tokens != static_cast<int>(o.tokens.size())) ++usage_wrong;
    if (reference == nullptr) continue;
    const std::vector<std::string>& want = reference->tokens.at(i);
    const size_t common = longest_common_subsequence(o.tokens, want);
    const int64_t l = static_cast<int64_t>(want.size() - common), d = static_cast<int64_t>(o.tokens.size() - common);
    lost += l;
    dup += d;
    mismatched += (l + d) > 0;
    auto text = reference->text.find(i);
    text_wrong += o.ok && o.text != (text == reference->text.end() ? std::string() : text->second);
    if ((l + d) > 0 && differing.size() < 20) {
      size_t at = 0;
      while (at < o.tokens.size() && at < want.size() && o.tokens[at] == want[at]) ++at;
      auto unix_ms = [&](double s) { return s < 0 ? json() : json(static_cast<int64_t>(run.start_unix_ms + s * 1e3)); };
      differing.push_back({{"i", i},
                           {"client", i / a.requests},
                           {"node", o.node},
                           {"prefill_node", o.prefill_node},
                           {"start_unix_ms", unix_ms(o.start)},
                           {"first_token_unix_ms", unix_ms(o.first)},
                           {"end_unix_ms", unix_ms(o.end)},
                           {"tokens", o.tokens.size()},
                           {"reference_tokens", want.size()},
                           {"first_difference_at", at},
                           {"lost", l},
                           {"repeated", d},
                           {"error", o.error}});
    }
  }
  // Recovery and latency phases.
  const double f = run.fault_at;
  const double recovered = f >= 0 ? recovered_at(out, f, a.clients) : -1;
  std::vector<double> before, during, after;
  for (const LoadOutcome& o : out) {
    const double latency = o.end - o.start;
    if (!o.ok) continue;
    if (f < 0 || o.end < f) {
      before.push_back(latency);
    } else if (recovered >= 0 && o.start >= recovered) {
      after.push_back(latency);
    } else {
      during.push_back(latency);
    }
  }
  // Goodput: requests within the SLO (TTFT, and mean time per output token after the first), per second.
  int within = 0;
  std::vector<double> ttfts, tpots;
  for (const LoadOutcome& o : out) {
    if (!o.ok || o.first < 0) continue;
    const double ttft = o.first - o.start;
    const double tpot = o.tokens.size() > 1 ? (o.end - o.first) / static_cast<double>(o.tokens.size() - 1) : 0;
    ttfts.push_back(ttft);
    tpots.push_back(tpot);
    within += ttft * 1e3 <= a.slo_ttft_ms && tpot * 1e3 <= a.slo_tpot_ms;
  }
  const bool compared = reference != nullptr;
  json summary = {{"sent", total},
                  {"completed", ok},
                  {"failed", failed},
                  {"tokens", tokens},
                  {"lost_tokens", compared ? json(lost) : json()},
                  {"duplicated_tokens", compared ? json(dup) : json()},
                  {"mismatched_requests", compared ? json(mismatched) : json()},
                  {"usage_mismatches", usage_wrong},
                  {"text_mismatches", compared ? json(text_wrong) : json()},
                  {"fault_at_s", f < 0 ? json() : json(f)},
                  {"recovery_s", recovered < 0 ? json() : json(recovered - f)},
                  {"latency_before", percentiles(before)},
                  {"latency_during", percentiles(during)},
                  {"latency_after", percentiles(after)},
                  {"wall_s", run.wall_s},
                  {"start_unix_ms", static_cast<int64_t>(run.start_unix_ms)},
                  {"differing", differing},
                  {"errors", errors}};
  if (a.slo_ttft_ms > 0 && a.slo_tpot_ms > 0) {
    summary["slo"] = {{"ttft_ms", a.slo_ttft_ms}, {"tpot_ms", a.slo_tpot_ms}};
    summary["within_slo"] = within;
    summary["goodput_rps"] = run.wall_s > 0 ? within / run.wall_s : 0;
    summary["ttft"] = percentiles(ttfts);
    summary["tpot"] = percentiles(tpots);
  }
  return summary;
}

std::string fault_load_row(const std::string& label, const json& s) {
  auto count = [&](const char* key) { return s[key].is_null() ? std::string("-") : s[key].dump(); };
  const std::string recovery = s["fault_at_s"].is_null()   ? "-"
                               : s["recovery_s"].is_null() ? "never"
                                                           : fmt::format("{:.2f}", s["recovery_s"].get<double>());
  return fmt::format("ROW | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |", label, s["sent"].get<int>(),
                     s["completed"].get<int>(), s["failed"].get<int>(), count("lost_tokens"),
                     count("duplicated_tokens"), count("text_mismatches"), s["usage_mismatches"].get<int>(), recovery,
                     latency_cell(s["latency_before"]), latency_cell(s["latency_during"]),
                     latency_cell(s["latency_after"]));
}

}  // namespace tessera::bench
