// WordPieceTokenizer's rules on a small vocabulary, each worked out from Hugging Face's BertNormalizer,
// BertPreTokenizer and WordPiece model (the llama.cpp test vectors in llamacpp_vocab_test cover a real one);
// tokenizer.json reading, and the GGUF (phantom-space) form round trip.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/tokenizer/wordpiece_tokenizer.h"

namespace tessera::model {
namespace {

using Json = nlohmann::json;

// [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4, then word pieces.
const std::vector<std::string> kTokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able",
                                          "hello", "world", ",",     "!",     "σ",      "i",  "e",     "cafe",
                                          "你",    "好",    "##s",   "a",     "##a",    "x",  "##x",   "."};

std::string tokenizer_json(bool lowercase, const std::string& post = "template") {
  Json vocab = Json::object();
  for (size_t i = 0; i < kTokens.size(); ++i) vocab[kTokens[i]] = i;
  Json added = Json::array();
  for (int i = 0; i < 5; ++i)
    added.push_back({{"id", i},
                     {"content", kTokens[static_cast<size_t>(i)]},
                     {"special", true},
                     {"normalized", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"single_word", false}});
  Json pp;
  if (post == "template") {
    pp = {{"type", "TemplateProcessing"},
          {"single", Json::array({{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}},
                                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                  {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}})}};
  } else if (post == "bert") {
    pp = {{"type", "BertProcessing"}, {"sep", {"[SEP]", 3}}, {"cls", {"[CLS]", 2}}};
  }
  Json j = {{"version", "1.0"},
            {"added_tokens", added},
            {"normalizer",
             {{"type", "BertNormalizer"},
              {"clean_text", true},
              {"handle_chinese_chars", true},
              {"strip_accents", nullptr},
              {"lowercase", lowercase}}},
            {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
            {"post_processor", pp},
            {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
            {"model",
             {{"type", "WordPiece"},
              {"unk_token", "[UNK]"},
              {"continuing_subword_prefix", "##"},
              {"max_input_chars_per_word", 100},
              {"vocab", vocab}}}};
  return j.dump();
}

std::unique_ptr<WordPieceTokenizer> make(bool lowercase = true, const std::string& post = "template") {
  auto t = WordPieceTokenizer::from_json(tokenizer_json(lowercase, post), "", "test");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(*t) : nullptr;
}

using Ids = std::vector<TokenId>;
const Tokenizer::EncodeOptions kPlain{.add_special = false, .parse_special = false};

TEST(WordPiece, GreedyLongestMatchWithContinuations) {
  auto t = make();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->tokenize("unaffable", kPlain), (Ids{5, 6, 7}));  // un ##aff ##able
  EXPECT_EQ(t->encode("hello world", true), (Ids{2, 8, 9, 3}));
  // A word with no complete match is one [UNK], whatever pieces matched before.
  EXPECT_EQ(t->tokenize("unaffablez hello", kPlain), (Ids{1, 8}));
  // Longest first: "aa" is a ##a, never two words; "xxx" is x ##x ##x.
  EXPECT_EQ(t->tokenize("aa xxx", kPlain), (Ids{19, 20, 21, 22, 22}));
  // More than max_input_chars_per_word (100) characters: [UNK] even though the pieces exist.
  EXPECT_EQ(t->tokenize(std::string(100, 'x'), kPlain).size(), 100u);
  EXPECT_EQ(t->tokenize(std::string(101, 'x'), kPlain), (Ids{1}));
}

TEST(WordPiece, NormaliserCleansLowercasesStripsAccentsAndSplitsCjk) {
  auto t = make();
  ASSERT_TRUE(t);
  // Punctuation stands alone; case and accents go (é -> e + U+0301, the mark dropped).
  EXPECT_EQ(t->words("Hello,WORLD!"), (std::vector<std::string>{"hello", ",", "world", "!"}));
  EXPECT_EQ(t->tokenize("Café", kPlain), (Ids{15}));
  // Control and format characters are dropped (U+200B zero-width space is Cf, so the words join); tab, newline
  // and no-break space are whitespace.
  EXPECT_EQ(t->words("hel\xE2\x80\x8Blo\tworld\xC2\xA0x\x01"), (std::vector<std::string>{"hello", "world", "x"}));
  // CJK ideographs are words of their own, spaces or not.
  EXPECT_EQ(t->tokenize("你好", kPlain), (Ids{16, 17}));
  // Lowercasing is per character without context: a final capital sigma becomes σ, never ς.
  EXPECT_EQ(t->tokenize("Σ", kPlain), (Ids{12}));
  // İ: NFD gives I + U+0307 (a nonspacing mark, dropped), then i.
  EXPECT_EQ(t->tokenize("\xC4\xB0", kPlain), (Ids{13}));
  // Cased model (lowercase false, so strip_accents false too): nothing matches "Hello".
  auto cased = make(false);
  ASSERT_TRUE(cased);
  EXPECT_EQ(cased->tokenize("Hello hello", kPlain), (Ids{1, 8}));
}

TEST(WordPiece, SpecialTokensAndProcessors) {
  auto t = make(true, "bert");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("hello", true), (Ids{2, 8, 3}));
  EXPECT_EQ(t->tokenize("hello [MASK]", {.add_special = false, .parse_special = true}), (Ids{8, 4}));
  EXPECT_EQ(t->bos_id(), 2);
  EXPECT_EQ(t->eos_id(), 3);
  // Without a post-processor nothing is added.
  auto bare = make(true, "none");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->encode("hello", true), (Ids{8}));
  EXPECT_EQ(t->decode(Ids{2, 5, 6, 7, 9, 3}, /*skip_special=*/true), "unaffable world");
}

TEST(WordPiece, GgufFormRoundTrips) {
  auto t = make();
  ASSERT_TRUE(t);
  auto v = t->to_vocab();
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->kind_name(), "bert");
  EXPECT_EQ(v->tokens[8], "\xE2\x96\x81hello");  // word-initial: the phantom space
  EXPECT_EQ(v->tokens[6], "aff");                // continuation: the prefix dropped
  EXPECT_EQ(v->tokens[2], "[CLS]");
  EXPECT_EQ(v->types[2], kTokenControl);
  EXPECT_EQ(v->bos, 2);
  EXPECT_EQ(v->eos, 3);
  auto back = make_tokenizer(*v);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  for (const char* s : {"unaffable hello, world!", "Café 你好 aa xxx", "[MASK] hello"}) {
    EXPECT_EQ((*back)->encode(s, true), t->encode(s, true)) << s;
  }
}

TEST(WordPiece, RefusesWhatItDoesNotImplement) {
  Json j = Json::parse(tokenizer_json(true));
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  auto r = WordPieceTokenizer::from_json(j.dump(), "", "t.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Whitespace"), std::string::npos) << r.status().to_string();
  j = Json::parse(tokenizer_json(true));
  j["model"]["unk_token"] = "<nope>";
  r = WordPieceTokenizer::from_json(j.dump(), "", "t.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("[UNK]"), std::string::npos) << r.status().to_string();
  EXPECT_FALSE(WordPieceTokenizer::from_json("{not json", "", "t.json").ok());
}

}  // namespace
}  // namespace tessera::model
