// tokenizer.json BPE on small hand-made vocabularies (both styles, added tokens, errors) and SentencePiece:
// tok512.model run by libsentencepiece against the llama2.c tokenizer and the GGUF SentencePiece encoder.
#include "model/tokenizer/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include "base/mapped_file.h"
#include "model/tokenizer/llama2c_tokenizer.h"
#include "model/tokenizer/load_tokenizer.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"
#include "model/tokenizer/spm_tokenizer.h"
#include "support/paths.h"

namespace tessera::model {
namespace {

// Byte-level: "Ġ" is the space byte; merges build "he", "hel"... ; <|end|> is special.
const char* kByteLevel = R"({
  "added_tokens": [{"id": 12, "content": "<|end|>", "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7,
            "he": 8, "ll": 9, "hell": 10, "Ġw": 11},
            "merges": ["h e", "l l", "he ll", "Ġ w"]}
})";

TEST(BpeTokenizer, ByteLevelMergesByRank) {
  auto t = BpeTokenizer::from_json(kByteLevel, "", "t.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->encode("hello world", false), (std::vector<TokenId>{10, 3, 11, 3, 6, 2, 7}));
  EXPECT_EQ((*t)->encode("hello<|end|>", false), (std::vector<TokenId>{10, 3, 12}));
  EXPECT_EQ((*t)->decode((*t)->encode("hello world<|end|>", false), /*skip_special=*/false), "hello world<|end|>");
  EXPECT_EQ((*t)->decode((*t)->encode("hello world<|end|>", false)), "hello world");  // special: not text
}

TEST(BpeTokenizer, SentencePieceStyleWithByteFallback) {
  const char* j = R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "model": {"type": "BPE", "byte_fallback": true, "fuse_unk": true, "unk_token": "<unk>",
              "vocab": {"<unk>": 0, "<s>": 1, "<0xC3>": 2, "<0xA9>": 3, "▁": 4, "a": 5, "b": 6, "▁a": 7, "ab": 8, "▁ab": 9},
              "merges": ["▁ a", "a b", "▁a b"]}
  })";
  auto t = BpeTokenizer::from_json(j, R"({"bos_token": "<s>", "add_bos_token": true})", "t.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->bos_id(), 1);
  EXPECT_EQ((*t)->encode("ab é", true), (std::vector<TokenId>{1, 9, 4, 2, 3}));
  EXPECT_EQ((*t)->decode((*t)->encode("ab é", true)), "ab é");
}

TEST(BpeTokenizer, UnsupportedPartsAndBadJsonAreErrors) {
  EXPECT_EQ(BpeTokenizer::from_json("{", "", "t.json").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BpeTokenizer::from_json(R"({"model": {"type": "WordPiece", "vocab": {}}})", "", "t.json").status().code(),
            StatusCode::kUnimplemented);
  auto r = BpeTokenizer::from_json(
      R"({"normalizer": {"type": "BertNormalizer"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})", "",
      "t.json");
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("BertNormalizer"), std::string::npos);
  r = BpeTokenizer::from_json(
      R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated"},
          "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
      "", "t.json");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("regex"), std::string::npos);
}

TEST(BpeTokenizer, GgufByteLevelVocabularyRoundTrips) {
  auto t = BpeTokenizer::from_json(kByteLevel, "", "t.json");
  ASSERT_TRUE(t.ok());
  auto v = (*t)->to_vocab();
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->kind_name(), "gpt2");
  EXPECT_EQ(v->merges[2], "he ll");
  auto back = make_tokenizer(*v);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  for (std::string s : {"hello world", "well, hello<|end|>", "héllo 😀"})
    EXPECT_EQ((*back)->encode(s, false), (*t)->encode(s, false)) << s;
}

TEST(SentencePiece, Tok512ModelAgreesWithLlama2cAndGgufEncoders) {
  TS_REQUIRE_STORIES260K();
  auto sp = SentencePieceTokenizer::load(testing::stories260k_dir() + "/tok512.model");
  ASSERT_TRUE(sp.ok()) << sp.status().to_string();
  auto l2c = Llama2cTokenizer::load(testing::stories260k_dir() + "/tok512.bin");
  ASSERT_TRUE(l2c.ok());
  auto vocab = (*l2c)->to_vocab();
  ASSERT_TRUE(vocab.ok());
  auto spm = SpmTokenizer::create(*vocab);
  ASSERT_TRUE(spm.ok());
  // The llama2.c export keeps the SentencePiece vocabulary: same pieces (spaces as U+2581), same scores.
  auto spv = (*sp)->to_vocab();
  ASSERT_TRUE(spv.ok());
  ASSERT_EQ(spv->tokens.size(), vocab->tokens.size());
  for (size_t i = 0; i < vocab->tokens.size(); ++i) {
    EXPECT_EQ(spv->tokens[i], vocab->tokens[i]) << i;
    EXPECT_EQ(spv->scores[i], vocab->scores[i]) << i;
    EXPECT_EQ(spv->types[i], vocab->types[i]) << i;
  }
  auto corpus = read_file(std::string(TESSERA_SOURCE_DIR_FOR_TESTS) + "/tests/data/tokenizer_corpus.jsonl");
  ASSERT_TRUE(corpus.ok());
  int checked = 0;
  size_t pos = 0;
  while (pos < corpus->size()) {
    size_t eol = corpus->find('\n', pos);
    std::string line = corpus->substr(pos, eol - pos);
    pos = eol + 1;
    // The corpus is JSON strings; only plain ones (no escapes) are used here to keep this test free of a
    // JSON parser.
    if (line.size() < 2 || line.find('\\') != std::string::npos) continue;
    std::string s = line.substr(1, line.size() - 2);
    // tok512.model normalises whitespace (drops leading/trailing spaces, collapses runs); llama2.c and
    // llama.cpp do not. Compare where that normalisation changes nothing.
    if (s.empty() || s.front() == ' ' || s.back() == ' ' || s.find("  ") != std::string::npos) continue;
    std::vector<TokenId> want = (*sp)->encode(s, true);
    EXPECT_EQ((*l2c)->encode(s, true), want) << s;
    // SentencePiece never reads "<s>" in text as the control token; llama.cpp does only with parse_special.
    EXPECT_EQ((*spm)->tokenize(s, {.add_special = true, .parse_special = false}), want) << s;
    EXPECT_EQ((*spm)->decode(want), (*sp)->decode(want)) << s;
    ++checked;
  }
  EXPECT_GT(checked, 100);
  // With parse_special (encode()'s default, what servers use on rendered chat templates) the text of a
  // control token is that token, and text after it gets the prefix space again, as in llama.cpp.
  std::vector<TokenId> expect = {1, 2, 1};
  for (TokenId t : (*spm)->encode("Hi there", false)) expect.push_back(t);
  EXPECT_EQ((*spm)->encode("</s><s>Hi there", true), expect);
}

TEST(SentencePiece, LongTextMergesLikeLlama2c) {
  TS_REQUIRE_STORIES260K();
  auto l2c = Llama2cTokenizer::load(testing::stories260k_dir() + "/tok512.bin");
  ASSERT_TRUE(l2c.ok());
  auto spm = SpmTokenizer::create(*(*l2c)->to_vocab());
  ASSERT_TRUE(spm.ok());
  std::string text;
  while (text.size() < 4000) text += "Once upon a time, there was a little girl named Lily. She loved to play!\n ";
  // llama2.c rescans every pair each round (quadratic); the heap-based encoder must agree with it exactly.
  EXPECT_EQ((*spm)->encode(text, true), (*l2c)->encode(text, true));
}

TEST(LoadTokenizer, RecognisesEveryFormat) {
  TS_REQUIRE_STORIES260K();
  auto a = load_tokenizer(testing::stories260k_dir() + "/tok512.bin");
  auto b = load_tokenizer(testing::stories260k_dir() + "/tok512.model");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->kind(), "llama2c");
  EXPECT_EQ((*b)->kind(), "sentencepiece");
  EXPECT_EQ(load_tokenizer("/nonexistent/tokenizer.json").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera::model
