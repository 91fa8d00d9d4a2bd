// reasoning_content from generated text, fed as a model streams it: one byte at a time, one token at a time
// (the pieces real tokenizers give these tags), and whole. Every split of a reply must give the same reasoning
// and content, tags never leak into either, and a reply cut inside its reasoning keeps it as reasoning.
#include "serve/reasoning.h"

#include <gtest/gtest.h>

namespace tessera::serve {
namespace {

// Feeds `text` in pieces of `step` bytes (0: the pieces given) and joins what comes out.
ReasoningDelta stream(ReasoningFormat f, std::string_view prompt, const std::vector<std::string>& pieces) {
  ReasoningParser p(f, prompt);
  ReasoningDelta all;
  for (const std::string& piece : pieces) {
    ReasoningDelta d = p.feed(piece);
    all.reasoning += d.reasoning;
    all.content += d.content;
  }
  ReasoningDelta d = p.finish();
  all.reasoning += d.reasoning;
  all.content += d.content;
  return all;
}
std::vector<std::string> bytes(std::string_view s) {
  std::vector<std::string> out;
  for (char c : s) out.emplace_back(1, c);
  return out;
}

void expect_split(ReasoningFormat f, std::string_view prompt, const std::vector<std::string>& tokens,
                  const std::string& reasoning, const std::string& content) {
  std::string whole;
  for (const std::string& t : tokens) whole += t;
  for (const auto& pieces : {tokens, bytes(whole), std::vector<std::string>{whole}}) {
    ReasoningDelta d = stream(f, prompt, pieces);
    EXPECT_EQ(d.reasoning, reasoning) << whole;
    EXPECT_EQ(d.content, content) << whole;
  }
}

TEST(Reasoning, Qwen3ThinkBlockThenAnswer) {
  expect_split(ReasoningFormat::kQwen3, "<|im_start|>assistant\n",
               {"<think>", "\n", "The user", " greets", ".\n", "</think>", "\n\n", "Hello", "!"},
               "\nThe user greets.\n", "\n\nHello!");
}

TEST(Reasoning, Qwen3WithoutThinkingIsAllContent) {
  // enable_thinking false: the template wrote an empty, closed think block into the prompt.
  expect_split(ReasoningFormat::kQwen3, "<|im_start|>assistant\n<think>\n\n</think>\n\n", {"Hi", " there"}, "",
               "Hi there");
  // No think tags at all: content, and a later <think> is content too.
  expect_split(ReasoningFormat::kQwen3, "", {"2 < 3", " and <think>"}, "", "2 < 3 and <think>");
}

TEST(Reasoning, APromptThatOpenedThinkStartsInReasoning) {
  expect_split(ReasoningFormat::kQwen3, "<|im_start|>assistant\n<think>\n", {"hmm", " ok", "</think>", "Yes"}, "hmm ok",
               "Yes");
}

TEST(Reasoning, DeepSeekR1IsReasoningUntilTheCloseTag) {
  expect_split(ReasoningFormat::kDeepSeekR1, "<｜Assistant｜>", {"Let me", " see", "</think>", "\n\n", "42"},
               "Let me see", "\n\n42");
  expect_split(ReasoningFormat::kDeepSeekR1, "", {"<think>", "\n", "x", "</think>", "y"}, "\nx", "y");
}

TEST(Reasoning, CutOffInsideTheReasoningKeepsItAsReasoning) {
  expect_split(ReasoningFormat::kQwen3, "", {"<think>", "still", " going", "</thi"}, "still going</thi", "");
}

TEST(Reasoning, StreamingHoldsBackOnlyWhatMayBeATag) {
  ReasoningParser p(ReasoningFormat::kQwen3, "");
  EXPECT_EQ(p.feed("<thi").reasoning, "");
  ReasoningDelta d = p.feed("nk>abc</");
  EXPECT_EQ(d.reasoning, "abc");
  d = p.feed("b>");  // not </think>: the held bytes are reasoning after all
  EXPECT_EQ(d.reasoning, "</b>");
  d = p.feed("</think>x");
  EXPECT_EQ(d.content, "x");
}

TEST(Reasoning, HarmonyAnalysisThenFinal) {
  expect_split(ReasoningFormat::kGptOss, "<|start|>assistant",
               {"<|channel|>", "analysis", "<|message|>", "User", " asks", ".", "<|end|>", "<|start|>", "assistant",
                "<|channel|>", "final", "<|message|>", "Paris", "."},
               "User asks.", "Paris.");
}

TEST(Reasoning, HarmonyCommentaryPassesThroughForToolParsers) {
  expect_split(ReasoningFormat::kGptOss, "",
               {"<|channel|>", "analysis", "<|message|>", "need weather", "<|end|>", "<|start|>", "assistant",
                "<|channel|>", "commentary to=functions.get_weather", " ", "<|constrain|>", "json", "<|message|>",
                "{\"city\":\"Paris\"}", "<|call|>"},
               "need weather",
               "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
               "{\"city\":\"Paris\"}<|call|>");
}

TEST(Reasoning, HarmonyRecipientInTheRoleContinuesThePrompt) {
  // gpt-oss's template writes calls as `<|start|>assistant to=functions.f<|channel|>commentary json<|message|>`;
  // after the prompt's `<|start|>assistant` a reply may begin with the recipient.
  expect_split(ReasoningFormat::kGptOss, "<|start|>assistant",
               {" to", "=functions", ".add", "<|channel|>", "commentary", " json", "<|message|>", "{\"a\": 1}"}, "",
               " to=functions.add<|channel|>commentary json<|message|>{\"a\": 1}");
}

TEST(Reasoning, NotHarmonyAtAllIsContent) {
  expect_split(ReasoningFormat::kGptOss, "", {"plain", " text"}, "", "plain text");
}

TEST(Reasoning, NamesAndDetection) {
  for (const std::string& n : reasoning_format_names()) {
    auto f = reasoning_format_from_name(n);
    ASSERT_TRUE(f.ok()) << n;
    EXPECT_EQ(reasoning_format_name(*f), n);
  }
  auto bad = reasoning_format_from_name("qwen2");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("deepseek_r1"), std::string::npos);
  EXPECT_EQ(detect_reasoning_format("{{ '<|im_start|>' }}{% if enable_thinking %}<think>{% endif %}"),
            ReasoningFormat::kQwen3);
  EXPECT_EQ(detect_reasoning_format("{{'<｜Assistant｜>'}}<think>\n"), ReasoningFormat::kDeepSeekR1);
  EXPECT_EQ(detect_reasoning_format("<|start|>assistant<|channel|>final<|message|>"), ReasoningFormat::kGptOss);
  EXPECT_EQ(detect_reasoning_format("{{ messages }}"), ReasoningFormat::kNone);
  EXPECT_EQ(*choose_reasoning_format("none", "<think>"), ReasoningFormat::kNone);
  EXPECT_EQ(*choose_reasoning_format("", "<think>"), ReasoningFormat::kQwen3);
}

}  // namespace
}  // namespace tessera::serve
