// The fault-load driver's I/O half (fault_load.h): prompts, the token-id stream, client and fault threads,
// the reference file.
#include "bench/fault_load.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "base/mapped_file.h"
#include "http/http.h"

namespace tessera::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* const kStarters[] = {
    "Once upon a time, there was a little girl named Lily. She",
    "Tom and his dog went to the park on a sunny day. They",
    "The little bird sat on a tree and looked at the big sky. It",
    "Mom gave Ben a red ball for his birthday. He was so happy and",
    "One day, a small cat found a box in the garden. The cat",
    "Sue liked to draw pictures of flowers and trees. Every morning she",
};

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

LoadOutcome run_request(const FaultLoadOptions& a, int i, Clock::time_point t0) {
  LoadOutcome o;
  const auto started = Clock::now();
  o.start = std::chrono::duration<double>(started - t0).count();
  const std::string body = json{{"model", a.model},
                                {"prompt", fault_load_prompt(i, a.prompt_words)},
                                {"max_tokens", a.max_tokens},
                                {"temperature", 0},
                                {"ignore_eos", true},
                                {"stream", true},
                                {"stream_options", {{"include_usage", true}}}}
                               .dump();
  http::Headers request_headers = {{"Content-Type", "application/json"}, {"x-tessera-token-ids", "1"}};
  http::add_cluster_token(request_headers, a.token);
  for (;;) {
    bool headers = false;
    int status = 0;
    CompletionStream stream;
    auto on_headers = [&](const http::Response& h) {
      headers = true;
      status = h.status;
      auto header = [&](std::string_view name) {
        auto it = h.headers.find(std::string(name));
        return it == h.headers.end() ? std::string() : it->second;
      };
      o.node = header("x-tessera-node");
      o.prefill_node = header("x-tessera-prefill-node");
      return true;
    };
    auto on_chunk = [&](std::string_view piece) {
      stream.feed(piece, since(t0));
      return true;
    };
    auto r = http::fetch_streaming({.method = "POST",
                                    .url = a.url + "/v1/completions",
                                    .headers = request_headers,
                                    .body = body,
                                    .timeout_ms = 120000},
                                   on_headers, on_chunk);
    if (!r.ok() && !headers && since(started) < a.connect_retry_s) {  // nothing reached us: retry like a client
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    o.end = since(t0);
    o.tokens = stream.tokens();
    o.text = stream.text();
    o.first = stream.first_token_s();
    o.usage_tokens = stream.usage_tokens();
    o.error = stream.error();
    if (!r.ok()) {
      o.error = headers ? "stream broke: " + r.status().message() : r.status().message();
    } else if (status != 200) {
      o.error = fmt::format("HTTP {}", status);
    } else if (!stream.errored() && (!stream.done() || stream.finish_reason().empty())) {
      o.error = "stream ended without finish_reason and [DONE]";
    }
    o.ok = o.error.empty();
    return o;
  }
}

}  // namespace

std::string fault_load_prompt(int i, int words) {
  std::string p = fmt::format("{} {}", kStarters[i % 6], i / 6);
  // Long prompts (a workload shift to long prompts): earlier starters as context, the request's own last. The
  // request's number comes first, so that no two prompts share a cached prefix (each is computed whole).
  if (words <= 0) return p;
  std::string pad = fmt::format("Story {}. ", i);
  for (int k = 1, n = 0; n < words; ++k) {
    const std::string s = kStarters[(i + k) % 6];
    pad += s + " ";
    n += 1 + static_cast<int>(std::count(s.begin(), s.end(), ' '));
  }
  return pad + p;
}

void CompletionStream::feed(std::string_view piece, double now_s) {
  buffer_.append(piece);
  for (size_t end = buffer_.find("\n\n"); end != std::string::npos; end = buffer_.find("\n\n")) {
    std::string ev = buffer_.substr(0, end);
    buffer_.erase(0, end + 2);
    if (ev.rfind(": tessera-tokens ", 0) == 0) {
      if (first_ < 0) first_ = now_s;
      for (size_t at = 17; at < ev.size();) {
        size_t comma = ev.find(',', at);
        if (comma == std::string::npos) comma = ev.size();
        tokens_.push_back(ev.substr(at, comma - at));
        at = comma + 1;
      }
      continue;
    }
    if (ev.rfind("data: ", 0) != 0) continue;
    if (ev == "data: [DONE]") {
      done_ = true;
      continue;
    }
    json j = json::parse(ev.substr(6), nullptr, false);
    if (!j.is_object()) continue;
    if (j.contains("error")) {
      errored_ = true;
      error_ = j["error"].is_object() ? j["error"].value("message", "error event") : "error event";
      continue;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const json& n = j["usage"]["completion_tokens"];
      usage_tokens_ = n.is_number_integer() ? n.get<int>() : -1;
    }
    if (!j.contains("choices") || !j["choices"].is_array()) continue;
    for (const auto& c : j["choices"]) {
      if (!c.is_object()) continue;
      if (c.contains("text") && c["text"].is_string()) text_ += c["text"].get<std::string>();
      if (c.contains("finish_reason") && c["finish_reason"].is_string()) finish_ = c["finish_reason"];
    }
  }
}

Result<LoadReference> read_load_reference(const std::string& path, int total) {
  auto text = read_file(path);  // refuses a named pipe or device (an ifstream would wait for a writer)
  if (!text.ok()) return text.status().with_context("the reference");
  std::istringstream in(*text);
  LoadReference ref;
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    const bool usable =
        j.is_object() && j.contains("i") && j["i"].is_number_integer() && j.contains("tokens") &&
        j["tokens"].is_array() &&
        std::all_of(j["tokens"].begin(), j["tokens"].end(), [](const json& t) { return t.is_string(); });
    if (!usable) return invalid_argument(fmt::format("{}: a line is not JSON: {}", path, line.substr(0, 80)));
    const int i = j["i"].get<int>();
    ref.tokens[i] = j["tokens"].get<std::vector<std::string>>();
    ref.text[i] = j.contains("text") && j["text"].is_string() ? j["text"].get<std::string>() : "";
  }
  for (int i = 0; i < total; ++i) {
    if (!ref.tokens.count(i))
      return invalid_argument(fmt::format("{} has no request {}; rerun the reference", path, i));
  }
  return ref;
}

Status write_load_reference(const std::string& path, const std::vector<LoadOutcome>& outcomes) {
  std::ofstream f(path);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    f << json{{"i", i}, {"tokens", outcomes[i].tokens}, {"text", outcomes[i].text}}.dump() << "\n";
  }
  if (!f) return internal_error(fmt::format("cannot write the reference {}", path));
  return ok_status();
}

LoadRun run_fault_load(const FaultLoadOptions& a) {
  const int total = a.clients * a.requests;
  LoadRun run;
  run.outcomes.resize(static_cast<size_t>(total));
  std::atomic<int> completed{0};
  std::atomic<double> fault_at{-1};
  const auto t0 = Clock::now();
  // The planner's decisions carry Unix milliseconds: the summary gives the run's start on the same clock.
  run.start_unix_ms =
      std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::thread fault;
  if (a.fault_after >= 0 && !a.fault_cmd.empty()) {
    fault = std::thread([&] {
      while (completed < a.fault_after) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      fault_at = since(t0);
      const int rc = std::system(a.fault_cmd.c_str());
      if (rc != 0) std::fprintf(stderr, "tessera: warning: the fault command exited with %d\n", rc);
    });
  }
  std::vector<std::thread> clients;
  clients.reserve(static_cast<size_t>(a.clients));
  for (int c = 0; c < a.clients; ++c) {
    clients.emplace_back([&, c] {
      for (int j = 0; j < a.requests; ++j) {
        const int i = c * a.requests + j;
        run.outcomes[static_cast<size_t>(i)] = run_request(a, i, t0);
        ++completed;
      }
    });
  }
  for (auto& t : clients) t.join();
  if (fault.joinable()) fault.join();
  run.wall_s = since(t0);
  run.fault_at = fault_at.load();
  return run;
}

}  // namespace tessera::bench
