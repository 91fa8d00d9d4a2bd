#include "bench/serve_bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <mutex>
#include <numeric>
#include <thread>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "bench/internal/load_common.h"

namespace tessera::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One streamed completion; fills `r`.
void run_one(const ServeBenchOptions& o, const std::string& model, const RequestSpec& spec, RequestResult& r) {
  json body = {{"model", model},
               {"prompt", spec.prompt},
               {"max_tokens", spec.output_len},
               {"temperature", 0},
               {"ignore_eos", true},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (!o.extra_body.empty()) body.update(json::parse(o.extra_body, nullptr, false), /*merge_objects=*/true);
  r.prompt_len = static_cast<int>(spec.prompt.size());
  const auto t0 = Clock::now();
  auto last = t0;
  bool first = true;
  internal::StreamedCall call =
      internal::stream_completion(o.url, body, o.timeout_s, [&](const json& choice, const json&) {
        std::string text = choice.value("text", "");
        if (text.empty()) return;
        const auto now = Clock::now();
        if (first) {
          r.ttft_s = std::chrono::duration<double>(now - t0).count();
          first = false;
        } else {
          r.itl_s.push_back(std::chrono::duration<double>(now - last).count());
        }
        last = now;
        r.text += text;
      });
  r.latency_s = call.latency_s;
  r.error = call.error;
  if (call.usage.is_object()) r.output_tokens = call.usage.value("completion_tokens", 0);
  r.success = r.error.empty() && !first;
  if (r.success && r.output_tokens == 0) r.output_tokens = static_cast<int>(r.itl_s.size()) + 1;
}

}  // namespace

Result<ServeBenchResult> run_serve_bench(const ServeBenchOptions& o) {
  TS_ASSIGN_OR_RETURN(internal::ServedModel served, internal::served_model(o.url, o.model));
  ServeBenchResult result;
  result.model = served.id;
  WorkloadOptions w = o.workload;
  if (w.max_context == 0) w.max_context = served.max_model_len;
  if (w.vocab_size == 0) w.vocab_size = served.vocab_size;
  TS_ASSIGN_OR_RETURN(std::vector<RequestSpec> specs, make_workload(w));

  result.requests.resize(specs.size());
  std::atomic<size_t> next{0}, finished{0};
  const size_t workers =
      std::min<size_t>(specs.size(), o.max_concurrency > 0 ? static_cast<size_t>(o.max_concurrency) : 512);
  const bool tty = o.progress && isatty(STDERR_FILENO);
  std::mutex print_mu;
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (size_t t = 0; t < workers; ++t) {
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < specs.size();) {
        std::this_thread::sleep_until(
            start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(specs[i].arrival_s)));
        run_one(o, result.model, specs[i], result.requests[i]);
        size_t n = ++finished;
        if (tty) {
          std::lock_guard<std::mutex> lock(print_mu);
          const int width = 40;
          const auto filled = static_cast<int>(width * n / specs.size());
          std::fprintf(stderr, "\r[%s%s] %zu/%zu requests, %.1f s",
                       std::string(static_cast<size_t>(filled), '=').c_str(),
                       std::string(static_cast<size_t>(width - filled), ' ').c_str(), n, specs.size(), since(start));
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
  if (tty) std::fprintf(stderr, "\n");
  result.duration_s = since(start);

  // The report, in vLLM benchmark_serving's field names.
  internal::LoadTotals totals(o.goodput_ttft_ms, o.goodput_tpot_ms);
  json input_lens = json::array(), output_lens = json::array(), ttft_list = json::array(), itl_list = json::array(),
       errors = json::array(), texts = json::array();
  for (const RequestResult& r : result.requests) {
    input_lens.push_back(r.prompt_len);
    output_lens.push_back(r.output_tokens);
    ttft_list.push_back(r.ttft_s);
    itl_list.push_back(r.itl_s);
    errors.push_back(r.error);
    texts.push_back(r.text);
    if (r.success) totals.add(r.prompt_len, r.output_tokens, r.ttft_s, r.latency_s, r.itl_s);
  }
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y%m%d-%H%M%S", std::localtime(&now));
  json j;
  j["date"] = date;
  j["backend"] = "openai";
  j["model_id"] = result.model;
  j["tokenizer_id"] = result.model;
  j["dataset"] = w.dataset;
  j["num_prompts"] = specs.size();
  j["request_rate"] = w.request_rate > 0 ? json(w.request_rate) : json("inf");
  j["burstiness"] = w.burstiness;
  j["max_concurrency"] = o.max_concurrency > 0 ? json(o.max_concurrency) : json(nullptr);
  j["seed"] = w.seed;
  totals.put(j, static_cast<int64_t>(specs.size()), result.duration_s);
  j["input_lens"] = input_lens;
  j["output_lens"] = output_lens;
  j["ttfts"] = ttft_list;
  j["itls"] = itl_list;
  j["generated_texts"] = texts;
  j["errors"] = errors;
  result.json = j.dump(2, ' ', false, json::error_handler_t::replace);
  return result;
}

}  // namespace tessera::bench
