// What the load generators (serve_bench, conversations) share: latency statistics written in vLLM
// benchmark_serving's field names, and the server-sent-events splitter of a streamed completion.
//
// Thread-safety: SseSplitter is one stream's; the functions are pure.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::bench::internal {

// The p-th percentile (0..100) of v, interpolated between ranks; 0 for an empty v.
double percentile(std::vector<double> v, double p);

// j["mean_<name>_ms"], median, std, p90, p99 of `seconds`, in milliseconds.
void put_stats(nlohmann::json& j, const std::string& name, const std::vector<double>& seconds);

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

}  // namespace tessera::bench::internal
