// What a row of logits goes through before sampling, on hand-made rows: min_tokens masks the stop tokens, the
// bias is added, repetition_penalty divides positive and multiplies negative logits of every token seen in the
// prompt or generated (once, however often), and the OpenAI penalties subtract per occurrence and once.
#include "engine/logits_processors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tessera::engine {
namespace {

TEST(LogitsProcessors, MinTokensMasksStopTokensUntilReached) {
  api::SamplingParams p;
  p.min_tokens = 2;
  LogitsProcessors lp(p, {}, {3, 1, 3});
  std::vector<float> row = {1, 2, 3, 4, 5};
  lp.apply(row, {}, 1);
  EXPECT_TRUE(std::isinf(row[1]) && row[1] < 0);
  EXPECT_TRUE(std::isinf(row[3]) && row[3] < 0);
  EXPECT_EQ(row[4], 5.0f);
  std::vector<float> later = {1, 2, 3, 4, 5};
  lp.apply(later, {}, 2);
  EXPECT_EQ(later, (std::vector<float>{1, 2, 3, 4, 5}));
}

TEST(LogitsProcessors, LogitBiasIsAdded) {
  api::SamplingParams p;
  p.logit_bias = {{0, -100.0f}, {2, 0.5f}, {9, 100.0f}};  // 9 is outside this row: ignored
  LogitsProcessors lp(p, {}, {});
  std::vector<float> row = {1, 2, 3};
  lp.apply(row, {}, 0);
  EXPECT_EQ(row, (std::vector<float>{-99, 2, 3.5f}));
}

TEST(LogitsProcessors, RepetitionPenaltyOverPromptAndGeneratedTokens) {
  api::SamplingParams p;
  p.repetition_penalty = 2.0f;
  // Token 1 twice in the prompt, token 2 generated three times, token 3 in both: each is penalised once.
  LogitsProcessors lp(p, std::vector<model::TokenId>{1, 1, 3}, {});
  std::vector<float> row = {4, 4, -4, 6, 8};
  lp.apply(row, {{2, 3}, {3, 1}}, 4);
  EXPECT_EQ(row, (std::vector<float>{4, 2, -8, 3, 8}));
}

TEST(LogitsProcessors, FrequencyAndPresencePenaltiesAsOpenAiDefinesThem) {
  api::SamplingParams p;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 1.0f;
  LogitsProcessors lp(p, std::vector<model::TokenId>{0}, {});  // the prompt does not count
  std::vector<float> row = {0, 0, 0};
  lp.apply(row, {{1, 3}, {2, 1}}, 4);
  EXPECT_EQ(row, (std::vector<float>{0, -2.5f, -1.5f}));
}

TEST(LogitsProcessors, OrderIsMaskBiasThenPenalties) {
  api::SamplingParams p;
  p.logit_bias = {{0, 10.0f}, {1, 10.0f}};
  p.repetition_penalty = 2.0f;
  p.min_tokens = 1;
  LogitsProcessors lp(p, std::vector<model::TokenId>{0}, {1});
  std::vector<float> row = {2, 2};
  lp.apply(row, {}, 0);
  EXPECT_EQ(row[0], 6.0f) << "(2 + 10) / 2: the bias goes in before the penalty divides";
  EXPECT_EQ(row[1], -std::numeric_limits<float>::infinity()) << "a masked token stays masked whatever its bias";
}

}  // namespace
}  // namespace tessera::engine
