#include "bench/dataset.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"

namespace tessera::bench {
namespace {

std::vector<int32_t> random_tokens(std::mt19937_64& rng, int n, int vocab) {
  std::uniform_int_distribution<int32_t> d(3, vocab - 1);  // skip <unk>, BOS, EOS
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = d(rng);
  return t;
}

// Log-normal with the given mean and a ShareGPT-like spread (sigma 1.0 in log space).
int lognormal_len(std::mt19937_64& rng, double mean, int lo, int hi) {
  const double sigma = 1.0;
  const double mu = std::log(mean) - sigma * sigma / 2;
  std::lognormal_distribution<double> d(mu, sigma);
  return std::clamp(static_cast<int>(std::lround(d(rng))), lo, hi);
}

}  // namespace

Result<std::vector<RequestSpec>> make_workload(const WorkloadOptions& o) {
  if (o.num_prompts < 1) return invalid_argument("--num-prompts must be at least 1");
  if (o.vocab_size < 4) return invalid_argument("the vocabulary size is unknown; pass --vocab-size");
  if (o.input_len < 1 || o.output_len < 1) return invalid_argument("--input-len and --output-len must be at least 1");
  if (o.burstiness <= 0) return invalid_argument("--burstiness must be positive");
  const int context = o.max_context > 0 ? o.max_context : (1 << 30);
  std::mt19937_64 rng(o.seed * 0x9E3779B97F4A7C15ull + 17);
  std::vector<RequestSpec> out;

  if (o.dataset.rfind("trace:", 0) == 0) {
    std::string path = o.dataset.substr(6);
    auto text = read_file(path);  // refuses a named pipe or device (an ifstream would wait for a writer)
    if (!text.ok()) return text.status().with_context("trace file");
    std::istringstream in(*text);
    std::string line;
    int lineno = 0;
    while (std::getline(in, line) && static_cast<int>(out.size()) < o.num_prompts) {
      ++lineno;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("input_len") || !j.contains("output_len") ||
          !j["input_len"].is_number_integer() || !j["output_len"].is_number_integer()) {
        return invalid_argument(
            fmt::format("{}:{}: expected {{\"timestamp\": s, \"input_len\": n, \"output_len\": m}}", path, lineno));
      }
      RequestSpec r;
      int in_len = std::clamp(j["input_len"].get<int>(), 1, std::max(1, context - 1));
      r.output_len = std::clamp(j["output_len"].get<int>(), 1, std::max(1, context - in_len));
      r.prompt = random_tokens(rng, in_len, o.vocab_size);
      r.arrival_s = j.value("timestamp", 0.0);
      out.push_back(std::move(r));
    }
    if (out.empty()) return invalid_argument(fmt::format("trace {} holds no requests", path));
    const double t0 = out.front().arrival_s;
    for (RequestSpec& r : out) r.arrival_s -= t0;
    return out;
  }

  std::vector<std::vector<int32_t>> prefixes;
  if (o.dataset == "shared-prefix") {
    const int plen = o.prefix_len > 0 ? o.prefix_len : o.input_len * 3 / 4;
    if (plen >= o.input_len) return invalid_argument("--prefix-len must be shorter than --input-len");
    for (int g = 0; g < std::max(1, o.num_prefixes); ++g) prefixes.push_back(random_tokens(rng, plen, o.vocab_size));
  } else if (o.dataset != "fixed" && o.dataset != "sharegpt-like") {
    return invalid_argument(
        fmt::format("unknown dataset '{}'; known: fixed, sharegpt-like, shared-prefix, trace:FILE", o.dataset));
  }

  // Gamma-distributed gaps with mean 1/rate: shape 1 is a Poisson process.
  std::gamma_distribution<double> gap(o.burstiness, o.request_rate > 0 ? 1.0 / (o.request_rate * o.burstiness) : 1.0);
  double t = 0;
  for (int i = 0; i < o.num_prompts; ++i) {
    RequestSpec r;
    int in_len = o.input_len, out_len = o.output_len;
    if (o.dataset == "sharegpt-like") {
      in_len = lognormal_len(rng, o.input_len, 4, std::max(4, context - 2));
      out_len = lognormal_len(rng, o.output_len, 1, std::max(1, context - in_len));
    }
    in_len = std::min(in_len, std::max(1, context - 1));
    out_len = std::clamp(out_len, 1, std::max(1, context - in_len));
    if (!prefixes.empty()) {
      const auto& p = prefixes[static_cast<size_t>(i) % prefixes.size()];
      r.prompt = p;
      auto suffix = random_tokens(rng, in_len - static_cast<int>(p.size()), o.vocab_size);
      r.prompt.insert(r.prompt.end(), suffix.begin(), suffix.end());
    } else {
      r.prompt = random_tokens(rng, in_len, o.vocab_size);
    }
    r.output_len = out_len;
    if (o.request_rate > 0 && i > 0) t += gap(rng);
    r.arrival_s = t;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace tessera::bench
