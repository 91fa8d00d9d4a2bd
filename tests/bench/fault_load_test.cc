// The fault-load driver (src/bench/fault_load.h): the token-id stream, the token accounting against a
// reference, recovery time and latency phases, and a whole run against an in-process server that streams
// completions the way the router does (token-id comments before each data chunk).
#include "bench/fault_load.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "http/http.h"
#include "support/paths.h"

namespace tessera::bench {
namespace {

using json = nlohmann::json;

TEST(FaultLoad, PromptsAreDistinctAndPaddedToTheWordsAsked) {
  EXPECT_EQ(fault_load_prompt(0), "Once upon a time, there was a little girl named Lily. She 0");
  EXPECT_EQ(fault_load_prompt(7), "Tom and his dog went to the park on a sunny day. They 1");
  const std::string long_prompt = fault_load_prompt(7, 100);
  EXPECT_EQ(long_prompt.rfind("Story 7. ", 0), 0u) << "the request's number first: no shared cached prefix";
  EXPECT_TRUE(long_prompt.ends_with(fault_load_prompt(7))) << long_prompt;
  const auto words = std::count(long_prompt.begin(), long_prompt.end(), ' ') + 1;
  EXPECT_GE(words, 100);
  EXPECT_LT(words, 100 + 30);
  EXPECT_NE(fault_load_prompt(8, 100), long_prompt);
}

const char* const kStream =
    ": tessera-tokens 5,9\n\n"
    "data: {\"choices\":[{\"text\":\"Once upon\",\"finish_reason\":null}]}\n\n"
    ": tessera-tokens 13\n\n"
    "data: {\"choices\":[{\"text\":\" a\",\"finish_reason\":\"length\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":3}}\n\n"
    "data: [DONE]\n\n";

TEST(FaultLoad, StreamCollectsTokenIdsTextUsageAndTheEnd) {
  // Fed a byte at a time: events split anywhere across chunks are still read whole.
  CompletionStream s;
  const std::string all = kStream;
  for (size_t i = 0; i < all.size(); ++i) s.feed(all.substr(i, 1), 0.5 + static_cast<double>(i));
  EXPECT_EQ(s.tokens(), (std::vector<std::string>{"5", "9", "13"}));
  EXPECT_EQ(s.text(), "Once upon a");
  EXPECT_EQ(s.usage_tokens(), 3);
  EXPECT_EQ(s.finish_reason(), "length");
  EXPECT_TRUE(s.done());
  EXPECT_FALSE(s.errored());
  EXPECT_DOUBLE_EQ(s.first_token_s(), 0.5 + all.find("\n\n") + 1) << "the arrival of the first token-id comment";
}

TEST(FaultLoad, StreamErrorsAndOddBodiesNeverThrow) {
  CompletionStream s;
  s.feed(": tessera-tokens 1\n\ndata: not json\n\ndata: {\"usage\":{\"completion_tokens\":\"x\"}}\n\n", 1);
  s.feed("data: {\"choices\":\"no\"}\n\ndata: {\"error\":\"plain string\"}\n\n", 2);
  EXPECT_TRUE(s.errored());
  EXPECT_EQ(s.error(), "error event");
  EXPECT_EQ(s.usage_tokens(), -1);
  CompletionStream t;
  t.feed("data: {\"error\":{\"message\":\"node gone\"}}\n\n", 1);
  EXPECT_EQ(t.error(), "node gone");
  EXPECT_FALSE(t.done());
}

TEST(FaultLoad, LongestCommonSubsequenceCountsLostAndRepeatedTokens) {
  using V = std::vector<std::string>;
  EXPECT_EQ(longest_common_subsequence(V{"a", "b", "c", "d", "e"}, V{"a", "c", "e"}), 3u);
  EXPECT_EQ(longest_common_subsequence(V{"1", "2", "2", "3"}, V{"1", "2", "3"}), 3u);  // one repeated
  EXPECT_EQ(longest_common_subsequence(V{}, V{"1"}), 0u);
  EXPECT_EQ(longest_common_subsequence(V{"x"}, V{"y"}), 0u);
}

LoadOutcome outcome(double start, double end, std::vector<std::string> tokens, bool ok = true) {
  LoadOutcome o;
  o.start = start;
  o.end = end;
  o.first = start + 0.01;
  o.ok = ok;
  o.usage_tokens = static_cast<int>(tokens.size());
  o.tokens = std::move(tokens);
  o.text = "t";
  if (!ok) o.error = "HTTP 503";
  return o;
}

TEST(FaultLoad, SummaryAccountsForEveryTokenAndTheRecovery) {
  FaultLoadOptions options;
  options.clients = 2;
  options.requests = 4;
  LoadRun run;
  run.fault_at = 1.0;
  run.wall_s = 4;
  run.start_unix_ms = 1e12;
  run.outcomes = {
      outcome(0.0, 0.1, {"1", "2", "3"}),       // before the fault
      outcome(0.1, 0.2, {"1", "2", "3"}),       // before
      outcome(0.9, 1.5, {"1", "3"}),            // in flight at the fault; lost one token
      outcome(1.1, 2.0, {}, false),             // sent after the fault, failed
      outcome(2.0, 2.1, {"1", "2", "2", "3"}),  // healthy, one token repeated
      outcome(2.1, 2.2, {"1", "2", "3"}),       // healthy: the second in a row (clients = 2): settled
      outcome(2.2, 2.3, {"1", "2", "3"}),       // after the recovery
      outcome(2.3, 9.9, {"1", "2", "3"}),       // slow, but after the system settled: noise, not the fault's
  };
  LoadReference ref;
  for (int i = 0; i < 8; ++i) {
    ref.tokens[i] = {"1", "2", "3"};
    ref.text[i] = "t";
  }
  const json s = summarize_fault_load(run, &ref, options);
  EXPECT_EQ(s["sent"], 8);
  EXPECT_EQ(s["completed"], 7);
  EXPECT_EQ(s["failed"], 1);
  EXPECT_EQ(s["lost_tokens"], 1 + 3);  // request 2 lost one, the failed request all three
  EXPECT_EQ(s["duplicated_tokens"], 1);
  EXPECT_EQ(s["mismatched_requests"], 3);
  EXPECT_EQ(s["usage_mismatches"], 0);
  EXPECT_EQ(s["text_mismatches"], 0);
  EXPECT_DOUBLE_EQ(s["fault_at_s"].get<double>(), 1.0);
  // Disturbed until the failed request ended (2.0); recovered once a request sent after the fault succeeded
  // (request 4, at 2.1).
  EXPECT_NEAR(s["recovery_s"].get<double>(), 2.1 - 1.0, 1e-9);
  EXPECT_EQ(s["latency_before"]["n"], 2);
  EXPECT_EQ(s["latency_after"]["n"], 3);   // started at or after 2.1: requests 5, 6 and 7
  EXPECT_EQ(s["latency_during"]["n"], 2);  // requests 2 and 4
  ASSERT_EQ(s["differing"].size(), 3u);
  EXPECT_EQ(s["differing"][0]["i"], 2);
  EXPECT_EQ(s["differing"][0]["client"], 0);
  EXPECT_EQ(s["differing"][0]["first_difference_at"], 1);
  EXPECT_EQ(s["differing"][0]["start_unix_ms"], int64_t{1000000000900});
  EXPECT_EQ(s["errors"]["HTTP 503"], 1);
  EXPECT_FALSE(s.contains("goodput_rps")) << "no SLO asked";

  EXPECT_EQ(fault_load_row("kill decode", s).rfind("ROW | kill decode | 8 | 7 | 1 | 4 | 1 | 0 | 0 | 1.10 | ", 0), 0u)
      << fault_load_row("kill decode", s);

  // Without a reference or a fault: nulls, and dashes in the row.
  run.fault_at = -1;
  options.slo_ttft_ms = 50;
  options.slo_tpot_ms = 1000;
  const json bare = summarize_fault_load(run, nullptr, options);
  EXPECT_TRUE(bare["lost_tokens"].is_null());
  EXPECT_TRUE(bare["recovery_s"].is_null());
  EXPECT_EQ(bare["latency_before"]["n"], 7);
  EXPECT_EQ(bare["within_slo"], 6) << "the last one's time per output token is 3.8 s";
  EXPECT_DOUBLE_EQ(bare["goodput_rps"].get<double>(), 6 / 4.0);
  EXPECT_EQ(fault_load_row("none", bare).rfind("ROW | none | 8 | 7 | 1 | - | - | - | 0 | - | ", 0), 0u)
      << fault_load_row("none", bare);
}

TEST(FaultLoad, ReferenceFileRoundTripsAndMustCoverEveryRequest) {
  const std::string dir = testing::scratch_dir();
  std::vector<LoadOutcome> out = {outcome(0, 1, {"4", "5"}), outcome(0, 1, {"6"})};
  out[1].text = "a \"quoted\"\nline";
  ASSERT_TRUE(write_load_reference(dir + "/ref.jsonl", out).ok());
  auto ref = read_load_reference(dir + "/ref.jsonl", 2);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  EXPECT_EQ(ref->tokens.at(0), (std::vector<std::string>{"4", "5"}));
  EXPECT_EQ(ref->text.at(1), out[1].text);
  auto short_ref = read_load_reference(dir + "/ref.jsonl", 3);
  ASSERT_FALSE(short_ref.ok());
  EXPECT_NE(short_ref.status().message().find("has no request 2"), std::string::npos);
  std::ofstream(dir + "/bad.jsonl") << "{\"i\": \"zero\", \"tokens\": []}\n";
  EXPECT_FALSE(read_load_reference(dir + "/bad.jsonl", 1).ok());
  EXPECT_FALSE(read_load_reference(dir + "/missing.jsonl", 1).ok());
}

// A router stand-in: streams max_tokens tokens whose ids are the prompt's length plus the position, each
// data chunk preceded by its token-id comment; the node headers name "n1" / "p1".
TEST(FaultLoad, RunAgainstAStreamingServerAccountsForEveryRequestAndRunsTheFault) {
  http::Server server(http::ServerOptions{});
  std::atomic<int> seen{0};
  server.route("POST", "/v1/completions", [&](const http::Request& req, std::shared_ptr<http::ResponseWriter> w) {
    ++seen;
    const json body = json::parse(req.body);
    EXPECT_EQ(req.header("x-tessera-token-ids"), "1");
    EXPECT_EQ(body["stream"], true);
    const int n = body["max_tokens"];
    const size_t base = body["prompt"].get<std::string>().size();
    w->start_stream(200, "text/event-stream", {{"x-tessera-node", "n1"}, {"x-tessera-prefill-node", "p1"}});
    for (int k = 0; k < n; ++k) {
      w->write(fmt::format(": tessera-tokens {}\n\n", base + k));
      json chunk = {{"choices", {{{"text", "w"}, {"finish_reason", k + 1 == n ? json("length") : json()}}}}};
      w->write("data: " + chunk.dump() + "\n\n");
    }
    w->write("data: " + json{{"choices", json::array()}, {"usage", {{"completion_tokens", n}}}}.dump() + "\n\n");
    w->write("data: [DONE]\n\n");
    w->end();
  });
  ASSERT_TRUE(server.start().ok());
  const std::string dir = testing::scratch_dir();
  FaultLoadOptions options;
  options.url = fmt::format("http://127.0.0.1:{}", server.port());
  options.clients = 3;
  options.requests = 4;
  options.max_tokens = 5;
  options.fault_after = 6;
  options.fault_cmd = "touch " + dir + "/fault-ran";
  const LoadRun run = run_fault_load(options);
  EXPECT_EQ(seen.load(), 12);
  ASSERT_EQ(run.outcomes.size(), 12u);
  EXPECT_GE(run.fault_at, 0);
  EXPECT_TRUE(std::filesystem::exists(dir + "/fault-ran"));
  for (size_t i = 0; i < run.outcomes.size(); ++i) {
    const LoadOutcome& o = run.outcomes[i];
    EXPECT_TRUE(o.ok) << i << ": " << o.error;
    ASSERT_EQ(o.tokens.size(), 5u);
    EXPECT_EQ(o.tokens[0], std::to_string(fault_load_prompt(static_cast<int>(i)).size())) << "request i's prompt";
    EXPECT_EQ(o.text, "wwwww");
    EXPECT_EQ(o.node, "n1");
    EXPECT_EQ(o.prefill_node, "p1");
    EXPECT_GE(o.first, o.start);
    EXPECT_GE(o.end, o.first);
  }
  // The same run as its own reference: nothing lost or repeated.
  ASSERT_TRUE(write_load_reference(dir + "/ref.jsonl", run.outcomes).ok());
  auto ref = read_load_reference(dir + "/ref.jsonl", 12);
  ASSERT_TRUE(ref.ok());
  const json s = summarize_fault_load(run, &*ref, options);
  EXPECT_EQ(s["completed"], 12);
  EXPECT_EQ(s["lost_tokens"], 0);
  EXPECT_EQ(s["duplicated_tokens"], 0);
  EXPECT_EQ(s["usage_mismatches"], 0);
  server.stop(1000);
}

TEST(FaultLoad, ARefusedConnectionIsRetriedThenReportedAsAFailure) {
  FaultLoadOptions options;
  options.url = "http://127.0.0.1:1";  // nothing listens on port 1
  options.clients = 1;
  options.requests = 1;
  options.connect_retry_s = 0.3;
  const LoadRun run = run_fault_load(options);
  ASSERT_EQ(run.outcomes.size(), 1u);
  EXPECT_FALSE(run.outcomes[0].ok);
  EXPECT_FALSE(run.outcomes[0].error.empty());
  EXPECT_GE(run.outcomes[0].end, 0.3) << "retried for --connect-retry-s before giving up";
  EXPECT_LT(run.fault_at, 0);
}

}  // namespace
}  // namespace tessera::bench
