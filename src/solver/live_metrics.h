// What the serving system did over a window, from its Prometheus metrics: the live input of re-placement
// (replan.h, `tessera solve --watch`).
//
// The router's /metrics names its client-facing nodes (`tessera_router_node_healthy{node="URL"}`); each
// node's /metrics counts finished requests (`tessera_requests_total`), prompt and generated tokens, and
// keeps histograms of time to first token and inter-token latency (src/serve/metrics.cc). Two scrapes of
// the nodes, summed, give a window:
// - rate: finished completion requests (status 200) per second;
// - mean input / output lengths: prompt and generated tokens per finished request;
// - TTFT at the SLO percentile: interpolated inside the window's histogram buckets (a percentile beyond the
//   last finite bucket reads as that bucket's bound, an underestimate);
// - TPOT: the window's mean inter-token latency (a histogram of per-token gaps cannot give the percentile of
//   per-request means; the mean is what is known);
// - attainment: the fraction of requests whose TTFT is within target (TPOT per request is not exported).
//
// Pure: text in, values out. Thread-safety: values.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "solver/replan.h"
#include "solver/spec.h"

namespace tessera::solver {

// One Prometheus exposition: sample lines "name{labels} value", keyed by the text before the value.
using PromSamples = std::map<std::string, double>;
// InvalidArgument naming the line when a sample line is malformed; comments and blank lines are skipped.
Result<PromSamples> parse_prometheus(const std::string& text);

// The value of label `label` in every series of metric `name` (e.g. the node URLs of the router's gauges).
std::vector<std::string> label_values(const PromSamples& s, const std::string& name, const std::string& label);

struct Histogram {
  std::vector<double> bounds;  // finite upper bounds, ascending
  std::vector<double> counts;  // cumulative counts per bound, then +Inf
  double sum = 0, count = 0;
};

// The counters of a set of nodes, summed.
struct ServingCounters {
  double requests = 0;  // finished completion requests, status 200
  double prompt_tokens = 0;
  double generation_tokens = 0;
  Histogram ttft;
  Histogram itl;
};

// Sums node expositions (missing metrics count as zero).
ServingCounters serving_counters(const std::vector<PromSamples>& nodes);

// The quantile (0..100) of the observations between two cumulative histograms.
double histogram_percentile(const Histogram& before, const Histogram& after, double percentile);
// The fraction of those observations at or below `x` (1 when there are none).
double histogram_fraction_below(const Histogram& before, const Histogram& after, double x);

// The window between two scrapes `seconds` apart. FailedPrecondition when no request finished in it.
Result<LiveMetrics> window_metrics(const ServingCounters& before, const ServingCounters& after, double seconds,
                                   const Slo& slo);

}  // namespace tessera::solver
