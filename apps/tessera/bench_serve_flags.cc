#include "bench_serve_flags.h"

#include <CLI/CLI.hpp>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace tessera::cli {

void add_bench_serve_flags(CLI::App& cmd, BenchServeFlags& f, bool with_rate) {
  cmd.add_option("--url", f.o.url, "Server base URL, e.g. http://127.0.0.1:8000")->required();
  cmd.add_option("--model", f.o.model, "Model id (default: the first the server lists)");
  cmd.add_option("--dataset", f.o.workload.dataset, "fixed | sharegpt-like | shared-prefix | trace:FILE")
      ->capture_default_str();
  cmd.add_option("--input-len", f.o.workload.input_len, "Prompt tokens (mean for sharegpt-like)")
      ->capture_default_str();
  cmd.add_option("--output-len", f.o.workload.output_len, "Output tokens (mean for sharegpt-like)")
      ->capture_default_str();
  cmd.add_option("--num-prefixes", f.o.workload.num_prefixes, "shared-prefix: number of distinct prefixes")
      ->capture_default_str();
  cmd.add_option("--prefix-len", f.o.workload.prefix_len, "shared-prefix: prefix tokens (default 3/4 of --input-len)");
  cmd.add_option("--num-prompts", f.o.workload.num_prompts, "Requests to send")->capture_default_str();
  if (with_rate) {
    cmd.add_option("--request-rate", f.rate, "Requests per second, or inf (all at once)")->capture_default_str();
  }
  cmd.add_option("--burstiness", f.o.workload.burstiness, "Gamma shape of the arrival gaps (1: Poisson)")
      ->capture_default_str();
  cmd.add_option("--max-concurrency", f.o.max_concurrency, "Requests in flight at most (0: unlimited)");
  cmd.add_option("--goodput", f.goodput, "SLOs for goodput, e.g. ttft:500,tpot:50");
  cmd.add_option("--seed", f.o.workload.seed, "Workload seed")->capture_default_str();
  cmd.add_option("--vocab-size", f.o.workload.vocab_size, "Token ids are drawn below this (default: from /v1/models)");
  cmd.add_option("--timeout", f.o.timeout_s, "Per-request timeout in seconds")->capture_default_str();
  cmd.add_option("--extra-body", f.o.extra_body,
                 "A JSON object merged into every request, e.g. '{\"response_format\": {...}}' for structured output");
}

Status finish_bench_serve_flags(BenchServeFlags& f) {
  if (!f.o.extra_body.empty()) {
    auto j = nlohmann::json::parse(f.o.extra_body, nullptr, false);
    if (!j.is_object()) return invalid_argument("--extra-body must be a JSON object");
  }
  if (f.rate != "inf") {
    try {
      f.o.workload.request_rate = std::stod(f.rate);
    } catch (...) {
      return invalid_argument(fmt::format("--request-rate must be a number or 'inf', got '{}'", f.rate));
    }
    if (!(f.o.workload.request_rate > 0)) return invalid_argument("--request-rate must be positive");
  }
  // --goodput ttft:MS,tpot:MS
  for (size_t pos = 0; pos < f.goodput.size();) {
    size_t comma = f.goodput.find(',', pos);
    std::string item = f.goodput.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t colon = item.find(':');
    double v = 0;
    try {
      v = colon == std::string::npos ? -1 : std::stod(item.substr(colon + 1));
    } catch (...) {
      v = -1;
    }
    std::string key = item.substr(0, colon);
    if (v <= 0 || (key != "ttft" && key != "tpot"))
      return invalid_argument(fmt::format("bad --goodput item '{}': expected ttft:MS or tpot:MS", item));
    (key == "ttft" ? f.o.goodput_ttft_ms : f.o.goodput_tpot_ms) = v;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ok_status();
}

}  // namespace tessera::cli
