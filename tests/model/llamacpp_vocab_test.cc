// Tokenizer parity with llama.cpp's own tokenizer test vectors: every models/ggml-vocab-*.gguf (vocab-only
// GGUF files, no tensors) with its .gguf.inp / .gguf.out pair, read exactly as llama.cpp's
// tests/test-tokenizer-0.cpp reads them (inputs separated by "\n__ggml_vocab_test__\n", one line of ids per
// input, a map from input to ids so a repeated input counts once), tokenized as that test does (no BOS/EOS,
// special-token text not parsed). The .out ids were written by Hugging Face's tokenizers, llama.cpp's own
// reference.
//
// The vectors come with llama.cpp's source, which scripts/llamacpp.sh unpacks into the cache; the test skips,
// saying where it looked, when they are absent. Families Tessera does not run (T5 Unigram) must be refused by
// name instead. Run alone: ctest -L llamacpp-vocab.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "base/mapped_file.h"
#include "model/generation_defaults.h"
#include "model/tokenizer/gguf_vocab.h"
#include "support/paths.h"

namespace tessera::model {
namespace {
namespace fs = std::filesystem;

std::string vocab_dir() { return testing::llamacpp_vocab_dir(); }

#define TS_REQUIRE_VOCABS()                                                                                 \
  do {                                                                                                      \
    if (vocab_dir().empty())                                                                                \
      GTEST_SKIP() << "llama.cpp's models/ folder is not here (scripts/llamacpp.sh unpacks it); looked in " \
                   << testing::llamacpp_vocab_candidates();                                                 \
  } while (0)

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

std::map<std::string, std::vector<TokenId>> read_vectors(const std::string& base) {
  std::map<std::string, std::vector<TokenId>> tests;
  auto inp = read_file(base + ".inp");
  auto out = read_file(base + ".out");
  EXPECT_TRUE(inp.ok() && out.ok()) << base;
  if (!inp.ok() || !out.ok()) return tests;
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < inp->size();) {
    size_t next = inp->find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(inp->substr(pos));
      break;
    }
    inputs.push_back(inp->substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < out->size();) {
    size_t eol = out->find('\n', pos);
    if (eol == std::string::npos) eol = out->size();
    lines.push_back(out->substr(pos, eol - pos));
    pos = eol + 1;
  }
  EXPECT_EQ(inputs.size(), lines.size()) << base << ": .inp and .out hold different numbers of tests";
  for (size_t i = 0; i < inputs.size() && i < lines.size(); ++i) {
    std::vector<TokenId> ids;
    std::string l = trim(lines[i]);
    for (size_t pos = 0; pos < l.size();) {
      size_t sp = l.find(' ', pos);
      if (sp == std::string::npos) sp = l.size();
      ids.push_back(std::stoi(l.substr(pos, sp - pos)));
      pos = sp + 1;
    }
    tests[inputs[i]] = ids;
  }
  return tests;
}

std::string escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) o += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
  return o;
}

class LlamaCppVocab : public ::testing::TestWithParam<const char*> {};

TEST_P(LlamaCppVocab, IdsEqualTheReferenceVectors) {
  TS_REQUIRE_VOCABS();
  const std::string dir = vocab_dir();
  const std::string base = dir + "/ggml-vocab-" + GetParam() + ".gguf";
  if (!fs::exists(base + ".inp")) GTEST_SKIP() << base << ".inp is not in this llama.cpp version";
  auto tok = load_gguf_tokenizer(base);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto tests = read_vectors(base);
  ASSERT_GE(tests.size(), 30u) << base;
  int pass = 0, shown = 0;
  for (const auto& [text, want] : tests) {
    std::vector<TokenId> got = (*tok)->tokenize(text, {.add_special = false, .parse_special = false});
    if (got == want) {
      ++pass;
      continue;
    }
    if (++shown <= 8)
      ADD_FAILURE() << GetParam() << ": '" << escape(text) << "'\n  ours: " << fmt::format("{}", fmt::join(got, " "))
                    << "\n  ref:  " << fmt::format("{}", fmt::join(want, " "));
  }
  std::printf("llama.cpp vocab %s: %d of %zu inputs give the reference ids\n", GetParam(), pass, tests.size());
  RecordProperty("pass", pass);
  RecordProperty("total", static_cast<int>(tests.size()));
  EXPECT_EQ(pass, static_cast<int>(tests.size()));
}

INSTANTIATE_TEST_SUITE_P(Families, LlamaCppVocab,
                         ::testing::Values("llama-spm", "phi-3", "llama-bpe", "qwen2", "qwen35", "gpt-2", "mpt",
                                           "starcoder", "refact", "command-r", "falcon", "deepseek-llm",
                                           "deepseek-coder", "bert-bge", "gemma-4"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

std::unique_ptr<Tokenizer> load_vocab(const char* family) {
  auto t = load_gguf_tokenizer(vocab_dir() + "/ggml-vocab-" + family + ".gguf");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<TokenId> concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// What the vectors do not cover: special tokens in text, BOS/EOS per family, whitespace stripping.
TEST(LlamaCppVocabSpecial, ControlTokensParseOnlyWhenAskedAndBosFollowsTheFamily) {
  TS_REQUIRE_VOCABS();
  using Opt = Tokenizer::EncodeOptions;
  // Llama 3: BOS 128000 added (llama.cpp's default for the type; the file does not say), control tokens.
  auto llama3 = load_vocab("llama-bpe");
  ASSERT_TRUE(llama3);
  std::vector<TokenId> hello = llama3->tokenize("Hello", {.add_special = false, .parse_special = false});
  EXPECT_EQ(hello, std::vector<TokenId>{9906});
  EXPECT_EQ(llama3->encode("Hello", true), concat({128000}, hello));
  EXPECT_EQ(llama3->tokenize("<|begin_of_text|>Hello", Opt{.add_special = false, .parse_special = true}),
            concat({128000}, hello));
  std::vector<TokenId> plain =
      llama3->tokenize("<|begin_of_text|>Hello", {.add_special = false, .parse_special = false});
  EXPECT_GT(plain.size(), 3u);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 128000), 0);
  EXPECT_EQ(llama3->decode(plain), "<|begin_of_text|>Hello");  // plain text, not the control token
  EXPECT_TRUE(llama3->is_special(128009));                     // <|eot_id|>
  EXPECT_FALSE(llama3->is_special(9906));

  // Qwen2: no BOS even though the file names one; <|im_start|> parsed as one token.
  auto qwen = load_vocab("qwen2");
  ASSERT_TRUE(qwen);
  std::vector<TokenId> user = qwen->tokenize("user", {.add_special = false, .parse_special = false});
  EXPECT_EQ(qwen->encode("user", true), user);
  EXPECT_EQ(qwen->encode("<|im_start|>user", true), concat({151644}, user));
  EXPECT_EQ(qwen->decode(std::vector<TokenId>{151644, 151645}, /*skip_special=*/false), "<|im_start|><|im_end|>");
  // Generated text leaves special tokens out (vLLM's skip_special_tokens default).
  EXPECT_EQ(qwen->decode_piece(872, 151645), "");
  EXPECT_EQ(llama3->decode_piece(9906, 128009), "");
  EXPECT_EQ(qwen->decode(concat({151644}, user), /*skip_special=*/true), "user");

  // Llama 2 (SentencePiece): BOS 1; "</s>" is the EOS control token only with parse_special, and the text
  // after an added token gets the prefix space again.
  auto spm = load_vocab("llama-spm");
  ASSERT_TRUE(spm);
  std::vector<TokenId> hi = spm->tokenize("Hi", {.add_special = false, .parse_special = false});
  EXPECT_EQ(spm->encode("Hi", true), concat({1}, hi));
  EXPECT_EQ(spm->encode("</s>Hi", true), concat({1, 2}, hi));
  EXPECT_NE(spm->tokenize("</s>Hi", {.add_special = false, .parse_special = false}), concat({2}, hi));

  // Phi-3: its chat markers swallow the whitespace after them, so "<|user|>\nHi" is the marker then "Hi" as
  // at the start of a text; "</s>" there is a user-defined token, matched even without parse_special.
  auto phi = load_vocab("phi-3");
  ASSERT_TRUE(phi);
  std::vector<TokenId> phi_hi = phi->tokenize("Hi", {.add_special = false, .parse_special = false});
  EXPECT_EQ(phi->tokenize("<|user|>\nHi", {.add_special = false, .parse_special = true}), concat({32010}, phi_hi));
  EXPECT_EQ(phi->tokenize("</s>  Hi", {.add_special = false, .parse_special = false}), concat({2}, phi_hi));
}

// BERT (WordPiece): [CLS] ... [SEP] around the text with add_special, as llama.cpp adds them to a bert
// vocabulary; [MASK] only with parse_special; decoding glues continuations.
TEST(LlamaCppVocabSpecial, BertAddsClsAndSepAndParsesMaskOnlyWhenAsked) {
  TS_REQUIRE_VOCABS();
  auto bert = load_vocab("bert-bge");
  ASSERT_TRUE(bert);
  EXPECT_EQ(bert->kind(), "wordpiece");
  EXPECT_EQ(bert->encode("Hello world", true), (std::vector<TokenId>{101, 7592, 2088, 102}));
  EXPECT_EQ(bert->tokenize("Hello world", {.add_special = false, .parse_special = false}),
            (std::vector<TokenId>{7592, 2088}));
  EXPECT_EQ(bert->tokenize("hello [MASK]", {.add_special = false, .parse_special = true}),
            (std::vector<TokenId>{7592, 103}));
  std::vector<TokenId> plain = bert->tokenize("[MASK]", {.add_special = false, .parse_special = false});
  EXPECT_EQ(plain.size(), 3u);  // "[", "mask", "]"
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 103), 0);
  // " this is 🦙.cpp" -> this is [UNK] . cp ##p: the continuation is glued when decoding.
  std::vector<TokenId> ids = bert->tokenize("this is 🦙.cpp", {.add_special = false, .parse_special = false});
  EXPECT_EQ(ids, (std::vector<TokenId>{2023, 2003, 100, 1012, 18133, 2361}));
  EXPECT_EQ(bert->decode(std::vector<TokenId>{101, 7592, 18133, 2361, 102}, /*skip_special=*/true), "hello cpp");
  EXPECT_TRUE(bert->is_special(101));
  EXPECT_FALSE(bert->is_special(7592));
}

// Gemma 4 the other way round: the reference ids of every vector decode to the input text (spaces from U+2581,
// "<0xNN>" byte tokens to their bytes), and its special tokens behave as llama.cpp's loader makes them
// (llama-tokenize on the same file gives [2, 9259, 1902, 236743, 106, 236743, 50, 1454, 236751, 236813] for
// "Hello world <turn|> <|tool_response> </s>").
TEST(LlamaCppVocabGemma4, ReferenceIdsDecodeToTheInputAndSpecialTokensFollowLlamaCpp) {
  TS_REQUIRE_VOCABS();
  const std::string base = vocab_dir() + "/ggml-vocab-gemma-4.gguf";
  if (!fs::exists(base + ".inp")) GTEST_SKIP() << base << ".inp is not in this llama.cpp version";
  auto tok = load_vocab("gemma-4");
  ASSERT_TRUE(tok);
  auto tests = read_vectors(base);
  ASSERT_GE(tests.size(), 30u);
  int pass = 0;
  for (const auto& [text, ids] : tests) {
    std::string got = tok->decode(ids, /*skip_special=*/false);
    if (got == text) {
      ++pass;
    } else {
      ADD_FAILURE() << "'" << escape(text) << "' decodes to '" << escape(got) << "'";
    }
  }
  std::printf("llama.cpp vocab gemma-4: %d of %zu reference id lists decode to their input\n", pass, tests.size());
  EXPECT_EQ(pass, static_cast<int>(tests.size()));

  // BOS is added even though nothing asks (llama.cpp forces add_bos for Gemma 4); <turn|> is a control token
  // parsed only when asked; <|tool_response> is visible text but ends generation; "</s>" is plain text.
  std::vector<TokenId> want = {2, 9259, 1902, 236743, 106, 236743, 50, 1454, 236751, 236813};
  EXPECT_EQ(tok->encode("Hello world <turn|> <|tool_response> </s>", true), want);
  std::vector<TokenId> plain = tok->tokenize("Hello world <turn|>", {.add_special = false, .parse_special = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 106), 0);
  // <|tool_response> too is matched only with parse_special (llama.cpp adds the control attribute to it).
  plain = tok->tokenize("a<|tool_response>", {.add_special = false, .parse_special = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50), 0);
  EXPECT_EQ(tok->decode(plain), "a<|tool_response>");
  EXPECT_TRUE(tok->is_special(106));
  EXPECT_EQ(tok->decode_piece(1902, 106), "");
  EXPECT_EQ(tok->decode_piece(1902, 50), "<|tool_response>");
  std::vector<TokenId> eog = vocab_end_of_generation(*tok);
  for (TokenId id : {tok->eos_id(), TokenId{106}, TokenId{50}})
    EXPECT_NE(std::find(eog.begin(), eog.end(), id), eog.end()) << id;
}

// The families Tessera does not tokenize are refused with the name of what is missing.
TEST(LlamaCppVocabRefused, UnsupportedModelsAreNamed) {
  TS_REQUIRE_VOCABS();
  const std::string dir = vocab_dir();
  for (auto [file, name] : {std::pair{"nomic-bert-moe", "t5"}}) {
    std::string path = dir + "/ggml-vocab-" + file + ".gguf";
    if (!fs::exists(path)) continue;
    auto tok = load_gguf_tokenizer(path);
    ASSERT_FALSE(tok.ok()) << path;
    EXPECT_EQ(tok.status().code(), StatusCode::kUnimplemented) << tok.status().to_string();
    EXPECT_NE(tok.status().message().find(fmt::format("'{}'", name)), std::string::npos) << tok.status().to_string();
  }
}

}  // namespace
}  // namespace tessera::model
