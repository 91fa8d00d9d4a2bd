#include "bench/internal/load_common.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/core.h>

#include "http/http.h"

namespace tessera::bench::internal {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

void put_stats(nlohmann::json& j, const std::string& name, const std::vector<double>& seconds) {
  std::vector<double> ms;
  ms.reserve(seconds.size());
  for (double s : seconds) ms.push_back(s * 1000.0);
  double mean = 0, sq = 0;
  if (!ms.empty()) mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
  for (double x : ms) sq += (x - mean) * (x - mean);
  j["mean_" + name + "_ms"] = mean;
  j["median_" + name + "_ms"] = percentile(ms, 50);
  j["std_" + name + "_ms"] = ms.empty() ? 0.0 : std::sqrt(sq / static_cast<double>(ms.size()));
  j["p90_" + name + "_ms"] = percentile(ms, 90);
  j["p99_" + name + "_ms"] = percentile(ms, 99);
}

void LoadTotals::add(int64_t prompt_len, int64_t output_tokens, double ttft_s, double latency_s,
                     const std::vector<double>& itl_s) {
  completed_++;
  total_in_ += prompt_len;
  total_out_ += output_tokens;
  ttfts_.push_back(ttft_s);
  e2els_.push_back(latency_s);
  itls_.insert(itls_.end(), itl_s.begin(), itl_s.end());
  const double tpot = output_tokens > 1 ? (latency_s - ttft_s) / static_cast<double>(output_tokens - 1) : 0.0;
  if (output_tokens > 1) tpots_.push_back(tpot);
  good_ += (slo_ttft_ms_ <= 0 || ttft_s * 1000 <= slo_ttft_ms_) && (slo_tpot_ms_ <= 0 || tpot * 1000 <= slo_tpot_ms_);
}

void LoadTotals::put(nlohmann::json& j, int64_t sent, double duration_s) const {
  j["duration"] = duration_s;
  j["completed"] = completed_;
  j["failed"] = sent - completed_;
  j["total_input_tokens"] = total_in_;
  j["total_output_tokens"] = total_out_;
  j["request_throughput"] = completed_ / duration_s;
  j["request_goodput"] = (slo_ttft_ms_ > 0 || slo_tpot_ms_ > 0) ? nlohmann::json(good_ / duration_s) : nlohmann::json();
  j["goodput_slo"] = {{"ttft_ms", slo_ttft_ms_}, {"tpot_ms", slo_tpot_ms_}};
  j["output_throughput"] = static_cast<double>(total_out_) / duration_s;
  j["total_token_throughput"] = static_cast<double>(total_in_ + total_out_) / duration_s;
  put_stats(j, "ttft", ttfts_);
  put_stats(j, "tpot", tpots_);
  put_stats(j, "itl", itls_);
  put_stats(j, "e2el", e2els_);
}

void SseSplitter::feed(std::string_view bytes) {
  pending_.append(bytes);
  size_t start = 0, end;
  while ((end = pending_.find("\n\n", start)) != std::string::npos) {
    std::string_view event(pending_.data() + start, end - start);
    start = end + 2;
    // An event may carry comment lines (": ...") before its data line.
    size_t at = 0;
    while (at < event.size()) {
      size_t eol = event.find('\n', at);
      std::string_view line = event.substr(at, eol == std::string_view::npos ? std::string_view::npos : eol - at);
      if (line.rfind("data: ", 0) == 0) on_data_(line.substr(6));
      if (eol == std::string_view::npos) break;
      at = eol + 1;
    }
  }
  pending_.erase(0, start);
}

Result<ServedModel> served_model(const std::string& url, const std::string& model) {
  using json = nlohmann::json;
  auto models = http::fetch({.method = "GET", .url = url + "/v1/models", .timeout_ms = 10000});
  if (!models.ok()) return unavailable(fmt::format("cannot reach {}: {}", url, models.status().message()));
  json mj = json::parse(models->body, nullptr, false);
  if (models->status != 200 || mj.is_discarded() || !mj.contains("data") || !mj["data"].is_array() ||
      mj["data"].empty())
    return unavailable(fmt::format("{}/v1/models did not list a model (HTTP {})", url, models->status));
  ServedModel served;
  served.id = model.empty() ? mj["data"][0].value("id", "") : model;
  for (const json& m : mj["data"]) {
    if (!m.is_object() || m.value("id", "") != served.id) continue;
    served.max_model_len = m.value("max_model_len", 0);
    served.vocab_size = m.value("vocab_size", 0);
  }
  return served;
}

StreamedCall stream_completion(
    const std::string& url, const nlohmann::json& body, int timeout_s,
    const std::function<void(const nlohmann::json& choice, const nlohmann::json& chunk)>& on_choice,
    const std::string& path) {
  using json = nlohmann::json;
  StreamedCall call;
  bool done = false;
  SseSplitter events([&](std::string_view payload) {
    if (payload == "[DONE]") {
      done = true;
      return;
    }
    json j = json::parse(payload, nullptr, false);
    if (j.is_discarded()) return;
    if (j.contains("error")) {
      call.error = j["error"].is_object() ? j["error"].value("message", "error event") : "error event";
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) call.usage = j["usage"];
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) on_choice(j["choices"][0], j);
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::string raw;  // the start of what came back (an error's body, which is not a stream)
  auto resp = http::fetch_streaming({.method = "POST",
                                     .url = url + path,
                                     .headers = {{"Content-Type", "application/json"}},
                                     .body = body.dump(),
                                     .timeout_ms = timeout_s * 1000},
                                    [&](std::string_view data) {
                                      if (raw.size() < 300) raw.append(data.substr(0, 300 - raw.size()));
                                      events.feed(data);
                                      return true;
                                    });
  call.latency_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!resp.ok())
    call.error = resp.status().message();
  else if (resp->status != 200)
    call.error = fmt::format("HTTP {}: {}", resp->status, resp->body.empty() ? raw : resp->body.substr(0, 300));
  else if (!done && call.error.empty())
    call.error = "stream ended without [DONE]";
  return call;
}

}  // namespace tessera::bench::internal
