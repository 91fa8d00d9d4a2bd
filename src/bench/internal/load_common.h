// What the load generators (serve_bench, conversations) share: latency statistics written in vLLM
// benchmark_serving's field names, and the server-sent-events splitter of a streamed completion.
//
// Thread-safety: SseSplitter is one stream's; the functions are pure.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace tessera::bench::internal {

// The p-th percentile (0..100) of v, interpolated between ranks; 0 for an empty v.
double percentile(std::vector<double> v, double p);

// j["mean_<name>_ms"], median, std, p90, p99 of `seconds`, in milliseconds.
void put_stats(nlohmann::json& j, const std::string& name, const std::vector<double>& seconds);

// The totals of a load run, gathered request by request, written in vLLM benchmark_serving's field names.
class LoadTotals {
 public:
  LoadTotals(double goodput_ttft_ms, double goodput_tpot_ms)
      : slo_ttft_ms_(goodput_ttft_ms), slo_tpot_ms_(goodput_tpot_ms) {}
  // One request that completed: its prompt and output lengths and its timings.
  void add(int64_t prompt_len, int64_t output_tokens, double ttft_s, double latency_s,
           const std::vector<double>& itl_s);
  int completed() const { return completed_; }
  // completed, failed (of `sent`), totals, throughputs, goodput and its objectives, and the latency statistics.
  void put(nlohmann::json& j, int64_t sent, double duration_s) const;

 private:
  double slo_ttft_ms_, slo_tpot_ms_;
  int completed_ = 0, good_ = 0;
  int64_t total_in_ = 0, total_out_ = 0;
  std::vector<double> ttfts_, tpots_, itls_, e2els_;
};

// Feeds the bytes of an SSE stream in pieces of any size; calls `on_data` with each complete event's
// `data: ` payload ("[DONE]" included), in order. Other event lines are skipped.
class SseSplitter {
 public:
  explicit SseSplitter(std::function<void(std::string_view payload)> on_data) : on_data_(std::move(on_data)) {}
  void feed(std::string_view bytes);

 private:
  std::function<void(std::string_view)> on_data_;
  std::string pending_;
};

// The model a load generator drives, as the server's /v1/models lists it (0 for what it does not say).
struct ServedModel {
  std::string id;
  int max_model_len = 0;
  int vocab_size = 0;
};

// `model` ("": the first listed) from url's /v1/models; Unavailable when the server cannot be reached or lists none.
Result<ServedModel> served_model(const std::string& url, const std::string& model);

// What one streamed POST of `body` to url + "/v1/completions" ended with.
struct StreamedCall {
  std::string error;     // "" when the stream ended with [DONE] and no error event
  nlohmann::json usage;  // the usage chunk's object (stream_options.include_usage), or null
  double latency_s = 0;
};

// Sends the request to `path` and calls `on_choice` with the first choice of every chunk that has one, and the
// chunk itself, as it arrives.
StreamedCall stream_completion(
    const std::string& url, const nlohmann::json& body, int timeout_s,
    const std::function<void(const nlohmann::json& choice, const nlohmann::json& chunk)>& on_choice,
    const std::string& path = "/v1/completions");

}  // namespace tessera::bench::internal
