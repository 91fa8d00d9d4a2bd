// The multi-turn replay's pure parts: the infinite-cache oracle, worked by hand, and the SSE splitter.
#include "bench/conversations.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "bench/internal/load_common.h"

namespace tessera::bench {
namespace {

std::vector<int32_t> ids(int from, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

TurnResult turn(std::vector<int32_t> prompt, std::vector<int32_t> output, double start, double latency) {
  TurnResult t;
  t.success = true;
  t.prompt = std::move(prompt);
  t.output = std::move(output);
  t.start_s = start;
  t.latency_s = latency;
  return t;
}

TEST(ConversationOracle, ReusesFinishedRepliesAndStartedPromptsButNeverTheLastPosition) {
  // Blocks of 4. Turn 1: 10 prompt tokens, reply of 3 (the last reply token is never computed).
  std::vector<int32_t> p1 = ids(100, 10), r1 = {7, 8, 9};
  // Turn 2, after turn 1 ended: the history (13 tokens) + 3 new ones = 16 tokens. The cache holds the full blocks
  // of turn 1's 12 computed tokens (3 blocks); the prompt's last position is computed, so at most 3 blocks.
  std::vector<int32_t> p2 = p1;
  p2.insert(p2.end(), r1.begin(), r1.end());
  for (int32_t t : {1, 2, 3}) p2.push_back(t);
  // Turn 3 starts while turn 2 runs, with turn 2's first 8 tokens and something else: 2 blocks from started prompts.
  std::vector<int32_t> p3(p2.begin(), p2.begin() + 8);
  for (int32_t t : ids(500, 6)) p3.push_back(t);
  std::vector<TurnResult> turns = {turn(p1, r1, 0.0, 1.0), turn(p2, {4, 5}, 2.0, 1.0), turn(p3, {6}, 2.5, 1.0)};
  const double expected = (0.0 + 12.0 + 8.0) / (10.0 + 16.0 + 14.0);
  EXPECT_DOUBLE_EQ(oracle_hit_rate(turns, 4), expected);
  // Turn 2 starting before turn 1 ended only finds turn 1's prompt blocks (2 full blocks of 10 tokens).
  turns[1].start_s = 0.5;
  turns[2].start_s = 3.0;
  EXPECT_DOUBLE_EQ(oracle_hit_rate(turns, 4), (0.0 + 8.0 + 8.0) / 40.0);
  // A failed turn counts for nothing, neither as a request nor as a source.
  turns[0].success = false;
  EXPECT_DOUBLE_EQ(oracle_hit_rate(turns, 4), (0.0 + 8.0) / 30.0);
}

TEST(SseSplitter, EventsSplitAnywhereAndCommentLinesAreSkipped) {
  std::vector<std::string> got;
  internal::SseSplitter s([&](std::string_view d) { got.emplace_back(d); });
  const std::string stream = ": tokens 1,2\ndata: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n";
  for (char c : stream) s.feed(std::string_view(&c, 1));  // one byte at a time
  EXPECT_EQ(got, (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}", "[DONE]"}));
  got.clear();
  s.feed("data: x\n\ndata: partial");
  EXPECT_EQ(got, (std::vector<std::string>{"x"}));
  s.feed("\n\n");
  EXPECT_EQ(got, (std::vector<std::string>{"x", "partial"}));
}

TEST(LoadStats, PercentilesInterpolateBetweenRanks) {
  EXPECT_DOUBLE_EQ(internal::percentile({}, 50), 0.0);
  EXPECT_DOUBLE_EQ(internal::percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(internal::percentile({1, 2, 3, 4, 5}, 100), 5.0);
  EXPECT_DOUBLE_EQ(internal::percentile({1, 2, 3, 4, 5}, 25), 2.0);
}

}  // namespace
}  // namespace tessera::bench
