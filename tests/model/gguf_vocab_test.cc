// GGUF vocabularies without llama.cpp's files: a vocab-only GGUF (metadata, no tensors) written here loads
// through load_gguf_tokenizer() and load_tokenizer(); unknown tokenizer models and pre-tokenizer types are
// refused by name; every pre-tokenizer name in the table compiles and splits as its family does.
#include <gtest/gtest.h>

#include "model/formats/gguf/gguf_file.h"
#include "model/tokenizer/bpe_tokenizer.h"
#include "model/tokenizer/gguf_pre_tokenizers.h"
#include "model/tokenizer/gguf_vocab.h"
#include "model/tokenizer/load_tokenizer.h"
#include "support/paths.h"

namespace tessera::model {
namespace {

// A byte-level vocabulary: the 256 byte symbols (id = byte value), merged pieces up to "hello" and " wo",
// control tokens <|end|> (262, EOS) and <|begin|> (263, BOS).
std::vector<std::pair<std::string, GgufValue>> byte_level_metadata(const std::string& pre) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_to_unicode(static_cast<uint8_t>(b)));
  std::vector<std::string> merges = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "\xC4\xA0w o"};
  for (const char* t : {"he", "ll", "hell", "hello", "\xC4\xA0w", "\xC4\xA0wo", "<|end|>", "<|begin|>"})
    tokens.push_back(t);
  std::vector<int32_t> types(tokens.size(), kTokenNormal);
  types[262] = types[263] = kTokenControl;
  return {{"general.architecture", GgufValue::str("llama")},
          {"tokenizer.ggml.model", GgufValue::str("gpt2")},
          {"tokenizer.ggml.pre", GgufValue::str(pre)},
          {"tokenizer.ggml.tokens", GgufValue::string_array(tokens)},
          {"tokenizer.ggml.token_type", GgufValue::i32_array(types)},
          {"tokenizer.ggml.merges", GgufValue::string_array(merges)},
          {"tokenizer.ggml.bos_token_id", GgufValue::u32(263)},
          {"tokenizer.ggml.eos_token_id", GgufValue::u32(262)}};
}

TEST(GgufVocab, VocabOnlyFileLoadsAndTokenizes) {
  std::string path = testing::scratch_dir() + "/vocab.gguf";
  ASSERT_TRUE(write_gguf(path, byte_level_metadata("gpt-2"), {}).ok());
  for (bool generic : {false, true}) {
    auto tok = generic ? load_tokenizer(path) : load_gguf_tokenizer(path);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    const TokenId hello = 259, space_wo = 261, end = 262;
    // "hello" merges whole; " wo" merges; "r" stays a byte symbol ('r' is byte 0x72).
    EXPECT_EQ((*tok)->encode("hello wor", true), (std::vector<TokenId>{hello, space_wo, 'r'}));
    EXPECT_EQ((*tok)->encode("hello<|end|>", false), (std::vector<TokenId>{hello, end}));
    EXPECT_EQ((*tok)->tokenize("<|end|>", {.add_special = false, .parse_special = false}).size(), 7u);
    EXPECT_EQ((*tok)->decode(std::vector<TokenId>{hello, space_wo, end}, /*skip_special=*/false), "hello wo<|end|>");
    EXPECT_EQ((*tok)->decode(std::vector<TokenId>{hello, space_wo, end}), "hello wo");
    EXPECT_EQ((*tok)->decode(std::vector<TokenId>{hello, space_wo, end}, /*skip_special=*/true), "hello wo");
  }
}

// gpt-oss's harmony vocabulary (pre-tokenizer gpt-4o, as its GGUF states): llama.cpp makes the structure tokens and,
// next to <|return|> and <|call|>, <|end|> user-defined, so generated text spells them.
TEST(GgufVocab, HarmonyStructureTokensAreSpelledInText) {
  auto md = byte_level_metadata("gpt-4o");
  std::vector<std::string> tokens = md[3].second.strings;
  std::vector<int32_t> types(md[4].second.ints.begin(), md[4].second.ints.end());
  for (const char* t : {"<|channel|>", "<|message|>", "<|return|>", "<|call|>"}) {
    tokens.push_back(t);
    types.push_back(kTokenControl);
  }
  md[3].second = GgufValue::string_array(tokens);
  md[4].second = GgufValue::i32_array(types);
  md.back().second = GgufValue::u32(266);  // EOS <|return|>, as gpt-oss's files state
  const std::string path = testing::scratch_dir() + "/harmony.gguf";
  ASSERT_TRUE(write_gguf(path, md, {}).ok());
  auto tok = load_gguf_tokenizer(path);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const TokenId hello = 259, end = 262, channel = 264, message = 265, ret = 266;
  EXPECT_EQ((*tok)->decode(std::vector<TokenId>{channel, hello, message, end, ret}),
            "<|channel|>hello<|message|><|end|>");  // <|return|> stays a control token, not text
  EXPECT_EQ((*tok)->encode("<|channel|>hello", false), (std::vector<TokenId>{channel, hello}));
}

TEST(GgufVocab, UnknownModelsAndPreTokenizersAreRefusedByName) {
  std::string dir = testing::scratch_dir();
  ASSERT_TRUE(write_gguf(dir + "/pre.gguf", byte_level_metadata("no-such-pre"), {}).ok());
  auto t = load_gguf_tokenizer(dir + "/pre.gguf");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("'no-such-pre'"), std::string::npos) << t.status().to_string();
  EXPECT_NE(t.status().message().find("llama-bpe"), std::string::npos) << "the message lists the known types";

  auto md = byte_level_metadata("gpt-2");
  md[1].second = GgufValue::str("t5");
  ASSERT_TRUE(write_gguf(dir + "/t5.gguf", md, {}).ok());
  t = load_gguf_tokenizer(dir + "/t5.gguf");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("'t5'"), std::string::npos) << t.status().to_string();

  // A bad header is an error, not a crash: eos outside the vocabulary, merges missing.
  md = byte_level_metadata("gpt-2");
  md.back().second = GgufValue::u32(1u << 30);
  ASSERT_TRUE(write_gguf(dir + "/eos.gguf", md, {}).ok());
  EXPECT_EQ(load_gguf_tokenizer(dir + "/eos.gguf").status().code(), StatusCode::kInvalidArgument);
  md = byte_level_metadata("gpt-2");
  md.erase(md.begin() + 5);
  ASSERT_TRUE(write_gguf(dir + "/nomerges.gguf", md, {}).ok());
  EXPECT_EQ(load_gguf_tokenizer(dir + "/nomerges.gguf").status().code(), StatusCode::kInvalidArgument);
}

// Every name compiles into a working tokenizer, and the families split digits as their regexes say.
TEST(GgufVocab, EveryPreTokenizerNameWorks) {
  std::string dir = testing::scratch_dir();
  auto names = gguf_pre_tokenizer_names();
  EXPECT_GE(names.size(), 40u) << names.size();
  for (const std::string& name : names) {
    ASSERT_TRUE(write_gguf(dir + "/v.gguf", byte_level_metadata(name), {}).ok());
    auto t = load_gguf_tokenizer(dir + "/v.gguf");
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().to_string();
    // Only byte symbols for digits: the id count is the digit count whatever the split.
    EXPECT_EQ((*t)->encode("12345", false).size(), 5u) << name;
    EXPECT_EQ((*t)->decode((*t)->encode("hello world 12345!", false)), "hello world 12345!") << name;
  }
}

}  // namespace
}  // namespace tessera::model
