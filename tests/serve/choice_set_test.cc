// One call's choices answered together: complete only when the last choice ends, in index order whatever order
// they end in, with usage counting each prompt once and every choice's completion tokens.
#include "serve/choice_set.h"

#include <gtest/gtest.h>

namespace tessera::serve {
namespace {

engine::RequestOutput last(int prompt_tokens, int completion_tokens, int cached = 0) {
  engine::RequestOutput o;
  o.finish = engine::FinishReason::kLength;
  o.prompt_tokens = prompt_tokens;
  o.completion_tokens = completion_tokens;
  o.cached_tokens = cached;
  return o;
}

TEST(ChoiceSet, CompleteWhenTheLastChoiceEndsWithUsageSummedAsOpenAiCounts) {
  ChoiceSet set(2, 3);  // two prompts, n = 3
  ASSERT_EQ(set.total(), 6);
  // Prompt 0 has 10 tokens (4 cached), prompt 1 has 7; choices end out of order.
  const int order[] = {4, 0, 5, 2, 1};
  for (int i : order) {
    const int prompt = i / 3;
    EXPECT_FALSE(set.finish_choice(i, {{"index", i}}, last(prompt == 0 ? 10 : 7, i + 1, prompt == 0 ? 4 : 0)));
    EXPECT_FALSE(set.over());
  }
  EXPECT_TRUE(set.finish_choice(3, {{"index", 3}}, last(7, 4)));
  EXPECT_TRUE(set.over());
  const nlohmann::json u = set.usage();
  EXPECT_EQ(u["prompt_tokens"], 17) << "each prompt once, not once per choice";
  EXPECT_EQ(u["completion_tokens"], 1 + 2 + 3 + 4 + 5 + 6);
  EXPECT_EQ(u["total_tokens"], 17 + 21);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 4);
  const nlohmann::json choices = set.choices();
  ASSERT_EQ(choices.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(choices[static_cast<size_t>(i)]["index"], i);
}

TEST(ChoiceSet, TimeToFirstTokenIsMeasuredOnce) {
  ChoiceSet set(1, 4);
  EXPECT_TRUE(set.first_token());
  EXPECT_FALSE(set.first_token());
}

}  // namespace
}  // namespace tessera::serve
