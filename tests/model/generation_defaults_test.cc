// Generation defaults (issue 17 item 4): generation_config.json's sampling and EOS list, GGUF's
// general.sampling.* keys, and llama.cpp's end-of-generation tokens by spelling; through load_model for an HF
// folder, Llama 3's two stop tokens both end generation.
#include "model/generation_defaults.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "model/loader.h"
#include "model/model_writer.h"
#include "model/synth.h"
#include "model/tokenizer/vocab.h"

namespace tessera::model {
namespace {

TEST(GenerationDefaults, GenerationConfigSamplingAndEosList) {
  auto g = parse_generation_config(
      R"({"bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128008, 128009],
          "temperature": 0.6, "top_p": 0.9, "transformers_version": "4.45.0"})",
      128256);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->end_of_generation, (std::vector<TokenId>{128001, 128008, 128009}));
  EXPECT_FLOAT_EQ(g->temperature.value_or(-1), 0.6f);
  EXPECT_FLOAT_EQ(g->top_p.value_or(-1), 0.9f);
  EXPECT_FALSE(g->top_k.has_value());
  EXPECT_EQ(g->source, "generation_config.json");
  auto one = parse_generation_config(R"({"eos_token_id": 2, "top_k": 20})", 100);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->end_of_generation, (std::vector<TokenId>{2}));
  EXPECT_EQ(one->top_k.value_or(-1), 20);
  // Bad input is a clear error naming the key, never a crash.
  for (const char* bad : {R"({"eos_token_id": "x"})", R"({"eos_token_id": [1, 500]})", R"({"temperature": "hot"})",
                          R"({"top_k": 1.5})", "[1]", "not json"}) {
    auto r = parse_generation_config(bad, 100);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

// A SentencePiece vocabulary with Llama 3's end tokens as control tokens.
Vocab llama3_like_vocab() {
  Vocab v;
  v.kind = VocabKind::kSentencePiece;
  v.tokens = {"<unk>", "<s>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "a", "b", "<|eom_id|>"};
  v.types = {kTokenUnknown, kTokenControl, kTokenControl, kTokenControl,
             kTokenControl, kTokenNormal,  kTokenNormal,  kTokenControl};
  v.scores.assign(v.tokens.size(), 0.0f);
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  return v;
}

TEST(GenerationDefaults, VocabEndOfGenerationIsLlamaCppsList) {
  auto tok = make_tokenizer(llama3_like_vocab());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  // EOS, <|eot_id|> and <|eom_id|>; not BOS, not <|start_header_id|>, not text.
  EXPECT_EQ(vocab_end_of_generation(**tok), (std::vector<TokenId>{2, 3, 7}));
}

// gpt-oss's harmony vocabulary: <|end|> ends a message, not the reply (llama.cpp's rule: with <|return|> and
// <|call|> present it leaves the list), so the analysis channel is followed by the final one.
TEST(GenerationDefaults, HarmonyEndsAtReturnAndCallNotAtEnd) {
  Vocab v = llama3_like_vocab();
  for (const char* t : {"<|end|>", "<|return|>", "<|call|>"}) {
    v.tokens.push_back(t);
    v.types.push_back(kTokenControl);
    v.scores.push_back(0.0f);
  }
  auto tok = make_tokenizer(v);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(vocab_end_of_generation(**tok), (std::vector<TokenId>{2, 3, 7, 9, 10}));
  v.tokens.pop_back();  // without <|call|>, <|end|> ends generation as before
  v.types.pop_back();
  v.scores.pop_back();
  auto plain = make_tokenizer(v);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(vocab_end_of_generation(**plain), (std::vector<TokenId>{2, 3, 7, 8, 9}));
}

TEST(GenerationDefaults, LoadModelReadsGenerationConfigOfAnHfFolder) {
  const std::string dir = ::testing::TempDir() + "/gen_defaults_hf";
  std::filesystem::remove_all(dir);
  auto cfg = synth_shape_small("llama3.2-1b");
  ASSERT_TRUE(cfg.ok());
  cfg->n_layers = 1;
  SynthModel m = synthesize_weights(*cfg, 3);
  ASSERT_TRUE(write_model("safetensors", dir, m.config, m.weights, {}).ok());
  std::ofstream(dir + "/generation_config.json")
      << R"({"do_sample": true, "eos_token_id": [3, 7], "temperature": 0.6, "top_p": 0.9})";
  auto loaded = load_model(dir, "", /*require_tokenizer=*/false);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_FLOAT_EQ(loaded->generation.temperature.value_or(-1), 0.6f);
  EXPECT_EQ(loaded->generation.end_of_generation, (std::vector<TokenId>{3, 7}));  // no tokenizer: the file's list

  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": [3, 9999]})";
  auto refused = load_model(dir, "", false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("eos_token_id 9999"), std::string::npos) << refused.status().message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::model
