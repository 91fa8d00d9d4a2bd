// `tessera fault-load`: the load driver of scripts/fault-suite.sh. C clients each send R streamed greedy
// completions through a router, optionally run a fault command (kill a node, cut a link...) once N requests
// have completed, and account for every token: the driver asks for token ids (`x-tessera-token-ids: 1`, which
// the router honours by forwarding, just before each data chunk, the ids of the tokens that chunk carries;
// api/resume.h), and each request's ids and text are compared with a fault-free reference run, so a lost
// or repeated token is counted exactly (by longest common subsequence). The summary is JSON on stdout (and a
// markdown row for docs/faults.md with --row LABEL); its "differing" list details the first 20 requests that
// differ from the reference: the node that answered and the prefill node (the router's x-tessera-node and
// x-tessera-prefill-node), wall-clock times, and the first token that differs.
//
// Recovery time: from the start of the fault command until the last request it disturbed has ended: every
// request in flight at that moment, and every later one that failed or was slow (latency above twice the
// pre-fault p99, and at least 250 ms above it) sent before the first run of C consecutive healthy requests
// (C = clients); and at least one request sent after the fault has succeeded. It is an upper bound: it
// includes the normal remainder of in-flight requests the fault did not touch.
// Latency phases: "before" ended before the fault, "after" started once recovered, "during" the rest.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "auth_flags.h"
#include "commands.h"
#include "http/http.h"

namespace tessera::cli {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct LoadArgs {
  std::string url;
  std::string model = "stories260K";
  int clients = 8;
  int requests = 100;
  int max_tokens = 32;
  std::string reference;        // compare with this file (JSON lines: {"i", "tokens"})
  std::string write_reference;  // write this run's tokens there
  int fault_after = -1;         // completed requests before the fault command runs
  std::string fault_cmd;
  double connect_retry_s = 15;  // a client retries refused connections this long (the router may restart)
  std::string row;              // markdown row label
  int prompt_words = 0;         // > 0: each prompt is padded with story text to about this many words
  double slo_ttft_ms = 0;       // > 0 (with slo_tpot_ms): count requests within this SLO (planner-shift.sh)
  double slo_tpot_ms = 0;
  std::string cluster_token_file;  // presented to the router: it then names the nodes that answered
  ClusterToken token;              // loaded from cluster_token_file
};

const char* const kStarters[] = {
    "Once upon a time, there was a little girl named Lily. She",
    "Tom and his dog went to the park on a sunny day. They",
    "The little bird sat on a tree and looked at the big sky. It",
    "Mom gave Ben a red ball for his birthday. He was so happy and",
    "One day, a small cat found a box in the garden. The cat",
    "Sue liked to draw pictures of flowers and trees. Every morning she",
};

std::string prompt_for(int i, int words = 0) {
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

struct Outcome {
  double start = 0, end = 0;  // seconds since the run began
  double first = -1;          // the first token's arrival, same clock
  bool ok = false;
  std::vector<std::string> tokens;  // token ids, as text
  std::string text;
  int usage_tokens = -1;
  std::string error;
  std::string node, prefill_node;  // the router's x-tessera-node / x-tessera-prefill-node: the request's path
};

http::Headers request_headers(const LoadArgs& a) {
  http::Headers h = {{"Content-Type", "application/json"}, {"x-tessera-token-ids", "1"}};
  http::add_cluster_token(h, a.token);
  return h;
}

Outcome run_request(const LoadArgs& a, int i, Clock::time_point t0) {
  Outcome o;
  const auto started = Clock::now();
  o.start = std::chrono::duration<double>(started - t0).count();
  const std::string body = json{{"model", a.model},
                                {"prompt", prompt_for(i, a.prompt_words)},
                                {"max_tokens", a.max_tokens},
                                {"temperature", 0},
                                {"ignore_eos", true},
                                {"stream", true},
                                {"stream_options", {{"include_usage", true}}}}
                               .dump();
  for (;;) {
    bool headers = false, done = false, errored = false;
    int status = 0;
    std::string buffer, finish;
    o.tokens.clear();
    o.text.clear();
    o.first = -1;
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
      buffer.append(piece);
      for (size_t end = buffer.find("\n\n"); end != std::string::npos; end = buffer.find("\n\n")) {
        std::string ev = buffer.substr(0, end);
        buffer.erase(0, end + 2);
        if (ev.rfind(": tessera-tokens ", 0) == 0) {
          if (o.first < 0) o.first = std::chrono::duration<double>(Clock::now() - t0).count();
          for (size_t at = 17; at < ev.size();) {
            size_t comma = ev.find(',', at);
            if (comma == std::string::npos) comma = ev.size();
            o.tokens.push_back(ev.substr(at, comma - at));
            at = comma + 1;
          }
          continue;
        }
        if (ev.rfind("data: ", 0) != 0) continue;
        if (ev == "data: [DONE]") {
          done = true;
          continue;
        }
        json j = json::parse(ev.substr(6), nullptr, false);
        if (!j.is_object()) continue;
        if (j.contains("error")) {
          errored = true;
          o.error = j["error"].value("message", "error event");
          continue;
        }
        if (j.contains("usage") && j["usage"].is_object()) o.usage_tokens = j["usage"].value("completion_tokens", -1);
        if (!j.contains("choices")) continue;
        for (const auto& c : j["choices"]) {
          if (c.contains("text") && c["text"].is_string()) o.text += c["text"].get<std::string>();
          if (c.contains("finish_reason") && c["finish_reason"].is_string()) finish = c["finish_reason"];
        }
      }
      return true;
    };
    auto r = http::fetch_streaming({.method = "POST",
                                    .url = a.url + "/v1/completions",
                                    .headers = request_headers(a),
                                    .body = body,
                                    .timeout_ms = 120000},
                                   on_headers, on_chunk);
    const double waited = std::chrono::duration<double>(Clock::now() - started).count();
    if (!r.ok() && !headers && waited < a.connect_retry_s) {  // nothing reached us: retry like a client would
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    o.end = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!r.ok()) {
      o.error = headers ? "stream broke: " + r.status().message() : r.status().message();
    } else if (status != 200) {
      o.error = fmt::format("HTTP {}", status);
    } else if (!errored && (!done || finish.empty())) {
      o.error = "stream ended without finish_reason and [DONE]";
    }
    o.ok = o.error.empty();
    return o;
  }
}

size_t lcs(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<size_t> prev(b.size() + 1, 0), cur(b.size() + 1, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

json percentiles(std::vector<double> v) {
  if (v.empty()) return json{{"n", 0}};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))] * 1000; };
  return json{{"n", v.size()}, {"p50_ms", at(0.5)}, {"p99_ms", at(0.99)}};
}

std::string lat(const json& p) {
  if (p["n"] == 0) return "-";
  return fmt::format("{:.0f} / {:.0f}", p["p50_ms"].get<double>(), p["p99_ms"].get<double>());
}

int run_load(const LoadArgs& a) {
  const int total = a.clients * a.requests;
  std::map<int, std::vector<std::string>> want;
  std::map<int, std::string> want_text;
  if (!a.reference.empty()) {
    std::ifstream in(a.reference);
    if (!in) return fail(fmt::format("cannot read the reference {}", a.reference));
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line, nullptr, false);
      if (!j.is_object()) return fail(fmt::format("{}: a line is not JSON: {}", a.reference, line.substr(0, 80)));
      want[j["i"].get<int>()] = j["tokens"].get<std::vector<std::string>>();
      want_text[j["i"].get<int>()] = j.value("text", "");
    }
    for (int i = 0; i < total; ++i) {
      if (!want.count(i)) return fail(fmt::format("{} has no request {}; rerun the reference", a.reference, i));
    }
  }
  std::vector<Outcome> out(total);
  std::atomic<int> completed{0};
  std::atomic<double> fault_at{-1};
  const auto t0 = Clock::now();
  // The run's start on the wall clock, so that a differing request's times line up with other logs (the
  // planner's decisions carry Unix milliseconds).
  const double t0_unix_ms =
      std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::thread fault;
  if (a.fault_after >= 0 && !a.fault_cmd.empty()) {
    fault = std::thread([&] {
      while (completed < a.fault_after) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      fault_at = std::chrono::duration<double>(Clock::now() - t0).count();
      const int rc = std::system(a.fault_cmd.c_str());
      if (rc != 0) std::fprintf(stderr, "tessera: warning: the fault command exited with %d\n", rc);
    });
  }
  std::vector<std::thread> clients;
  for (int c = 0; c < a.clients; ++c) {
    clients.emplace_back([&, c] {
      for (int j = 0; j < a.requests; ++j) {
        const int i = c * a.requests + j;
        out[i] = run_request(a, i, t0);
        ++completed;
      }
    });
  }
  for (auto& t : clients) t.join();
  if (fault.joinable()) fault.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();

  if (!a.write_reference.empty()) {
    std::ofstream f(a.write_reference);
    for (int i = 0; i < total; ++i)
      f << json{{"i", i}, {"tokens", out[i].tokens}, {"text", out[i].text}}.dump() << "\n";
  }
  int ok = 0, failed = 0, mismatched = 0, usage_wrong = 0, text_wrong = 0;
  int64_t lost = 0, dup = 0, tokens = 0;
  std::map<std::string, int> errors;
  json differing = json::array();  // the first requests whose tokens differ from the reference, in detail
  for (int i = 0; i < total; ++i) {
    const Outcome& o = out[i];
    ok += o.ok;
    failed += !o.ok;
    if (!o.ok) errors[o.error.substr(0, 120)]++;
    tokens += static_cast<int64_t>(o.tokens.size());
    if (o.ok && o.usage_tokens != static_cast<int>(o.tokens.size())) ++usage_wrong;
    if (!want.empty()) {
      const size_t common = lcs(o.tokens, want[i]);
      const int64_t l = static_cast<int64_t>(want[i].size() - common),
                    d = static_cast<int64_t>(o.tokens.size() - common);
      lost += l;
      dup += d;
      mismatched += (l + d) > 0;
      text_wrong += o.ok && o.text != want_text[i];
      if ((l + d) > 0 && differing.size() < 20) {
        size_t at = 0;
        while (at < o.tokens.size() && at < want[i].size() && o.tokens[at] == want[i][at]) ++at;
        auto unix_ms = [&](double s) { return s < 0 ? json() : json(static_cast<int64_t>(t0_unix_ms + s * 1e3)); };
        differing.push_back({{"i", i},
                             {"client", i / a.requests},
                             {"node", o.node},
                             {"prefill_node", o.prefill_node},
                             {"start_unix_ms", unix_ms(o.start)},
                             {"first_token_unix_ms", unix_ms(o.first)},
                             {"end_unix_ms", unix_ms(o.end)},
                             {"tokens", o.tokens.size()},
                             {"reference_tokens", want[i].size()},
                             {"first_difference_at", at},
                             {"lost", l},
                             {"repeated", d},
                             {"error", o.error}});
      }
    }
  }
  // Recovery and latency phases.
  const double f = fault_at.load();
  double recovered = -1;
  std::vector<double> before, during, after;
  if (f >= 0) {
    std::vector<double> pre;
    for (const Outcome& o : out) {
      if (o.ok && o.end < f) pre.push_back(o.end - o.start);
    }
    std::sort(pre.begin(), pre.end());
    const double p99 =
        pre.empty() ? 0 : pre[std::min(pre.size() - 1, static_cast<size_t>(0.99 * (pre.size() - 1) + 0.5))];
    const double slow = std::max(2 * p99, p99 + 0.25);
    // Requests sent after the fault, by start time. The disturbance ends with the first run of `clients`
    // consecutive healthy ones (succeeded, not slow): a lone slow request later on is the machine's noise
    // (it happens without faults too), not the fault's.
    std::vector<const Outcome*> later;
    double disturbed_end = f, first_new_ok = -1;
    for (const Outcome& o : out) {
      if (o.start <= f && o.end >= f) disturbed_end = std::max(disturbed_end, o.end);  // in flight at the fault
      if (o.start > f) later.push_back(&o);
      if (o.start > f && o.ok && (first_new_ok < 0 || o.end < first_new_ok)) first_new_ok = o.end;
    }
    std::sort(later.begin(), later.end(), [](const Outcome* x, const Outcome* y) { return x->start < y->start; });
    auto healthy = [&](const Outcome* o) { return o->ok && o->end - o->start <= slow; };
    size_t run = 0, settled = later.size();
    for (size_t i = 0; i < later.size(); ++i) {
      run = healthy(later[i]) ? run + 1 : 0;
      if (run == static_cast<size_t>(a.clients)) {
        settled = i + 1 - run;
        break;
      }
    }
    for (size_t i = 0; i < settled; ++i) {
      if (!healthy(later[i])) disturbed_end = std::max(disturbed_end, later[i]->end);
    }
    recovered = first_new_ok < 0 ? -1 : std::max(disturbed_end, first_new_ok);
  }
  for (const Outcome& o : out) {
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
  for (const Outcome& o : out) {
    if (!o.ok || o.first < 0) continue;
    const double ttft = o.first - o.start;
    const double tpot = o.tokens.size() > 1 ? (o.end - o.first) / static_cast<double>(o.tokens.size() - 1) : 0;
    ttfts.push_back(ttft);
    tpots.push_back(tpot);
    within += ttft * 1e3 <= a.slo_ttft_ms && tpot * 1e3 <= a.slo_tpot_ms;
  }
  json summary = {{"sent", total},
                  {"completed", ok},
                  {"failed", failed},
                  {"tokens", tokens},
                  {"lost_tokens", want.empty() ? json() : json(lost)},
                  {"duplicated_tokens", want.empty() ? json() : json(dup)},
                  {"mismatched_requests", want.empty() ? json() : json(mismatched)},
                  {"usage_mismatches", usage_wrong},
                  {"text_mismatches", want.empty() ? json() : json(text_wrong)},
                  {"fault_at_s", f < 0 ? json() : json(f)},
                  {"recovery_s", recovered < 0 ? json() : json(recovered - f)},
                  {"latency_before", percentiles(before)},
                  {"latency_during", percentiles(during)},
                  {"latency_after", percentiles(after)},
                  {"wall_s", wall},
                  {"start_unix_ms", static_cast<int64_t>(t0_unix_ms)},
                  {"differing", differing},
                  {"errors", errors}};
  if (a.slo_ttft_ms > 0 && a.slo_tpot_ms > 0) {
    summary["slo"] = {{"ttft_ms", a.slo_ttft_ms}, {"tpot_ms", a.slo_tpot_ms}};
    summary["within_slo"] = within;
    summary["goodput_rps"] = wall > 0 ? within / wall : 0;
    summary["ttft"] = percentiles(ttfts);
    summary["tpot"] = percentiles(tpots);
  }
  std::printf("%s\n", summary.dump().c_str());
  if (!a.row.empty()) {
    const std::string rec = f < 0 ? "-" : recovered < 0 ? "never" : fmt::format("{:.2f}", recovered - f);
    std::printf("ROW | %s | %d | %d | %d | %s | %s | %s | %d | %s | %s | %s | %s |\n", a.row.c_str(), total, ok, failed,
                want.empty() ? "-" : std::to_string(lost).c_str(), want.empty() ? "-" : std::to_string(dup).c_str(),
                want.empty() ? "-" : std::to_string(text_wrong).c_str(), usage_wrong, rec.c_str(),
                lat(summary["latency_before"]).c_str(), lat(summary["latency_during"]).c_str(),
                lat(summary["latency_after"]).c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

Action add_fault_load_command(CLI::App& app) {
  auto a = std::make_shared<LoadArgs>();
  CLI::App* cmd = app.add_subcommand(
      "fault-load", "Streamed greedy load with exact token accounting and an optional fault (scripts/fault-suite.sh)");
  cmd->add_option("--url", a->url, "Router (or node) URL")->required();
  cmd->add_option("--model", a->model, "Model id")->capture_default_str();
  cmd->add_option("--clients", a->clients, "Concurrent clients")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--requests", a->requests, "Requests per client")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens per request (EOS ignored)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--reference", a->reference, "Fault-free run to compare tokens with (from --write-reference)");
  cmd->add_option("--write-reference", a->write_reference, "Write this run's tokens here");
  cmd->add_option("--fault-after", a->fault_after, "Run --fault-cmd once this many requests have completed");
  cmd->add_option("--fault-cmd", a->fault_cmd, "Shell command that injects the fault");
  cmd->add_option("--connect-retry-s", a->connect_retry_s, "Retry refused connections this long")
      ->capture_default_str();
  cmd->add_option("--prompt-words", a->prompt_words, "Pad each prompt with story text to about this many words")
      ->check(CLI::Range(0, 4000));
  cmd->add_option("--slo-ttft-ms", a->slo_ttft_ms, "With --slo-tpot-ms: report requests within this TTFT and goodput");
  cmd->add_option("--slo-tpot-ms", a->slo_tpot_ms, "With --slo-ttft-ms: ... and this mean time per output token");
  cmd->add_option("--cluster-token-file", a->cluster_token_file,
                  "Present this cluster token: the router then names the node and prefill node of each request");
  cmd->add_option("--row", a->row, "Also print a docs/faults.md row with this label");
  return [a] {
    auto token = cli::cluster_token_from_flag(a->cluster_token_file);
    if (!token.ok()) return fail(token.status().to_string());
    a->token = std::move(*token);
    return run_load(*a);
  };
}

}  // namespace tessera::cli
