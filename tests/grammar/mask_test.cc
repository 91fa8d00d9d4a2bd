// Token masks against a brute-force reference on real vocabularies: at every step of seeded random walks through
// several grammars, the mask Matcher::fill_mask computes (precomputed accepted sets + uncertain tokens checked
// against the stack) must equal feeding every token's bytes to a separate recognizer from the same place.
// Vocabularies: stories260K's llama2.c tokenizer (in the repository), and llama.cpp's Qwen2 (byte-level BPE,
// 151k tokens) and Llama SPM (32k, byte fallback) test vocabularies where they are present.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/core.h>

#include "grammar/compiler.h"
#include "grammar/matcher.h"
#include "grammar/stack.h"
#include "model/tokenizer/load_tokenizer.h"
#include "support/paths.h"

namespace tessera::grammar {
namespace {
namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct NamedVocab {
  std::string name;
  std::shared_ptr<const TokenVocab> vocab;
};

std::vector<NamedVocab> vocabularies(bool include_large) {
  std::vector<NamedVocab> out;
  auto add = [&](const std::string& name, const std::string& path) {
    auto tok = model::load_tokenizer(path);
    EXPECT_TRUE(tok.ok()) << path << ": " << tok.status().to_string();
    if (!tok.ok()) return;
    out.push_back({name, TokenVocab::from_tokenizer(**tok, {(*tok)->eos_id()})});
  };
  if (testing::have_stories260k()) add("stories260K", testing::stories260k_dir() + "/tok512.bin");
  const std::string dir = testing::llamacpp_vocab_dir();
  if (!dir.empty() && include_large) {
    add("qwen2", dir + "/ggml-vocab-qwen2.gguf");
    add("llama-spm", dir + "/ggml-vocab-llama-spm.gguf");
  }
  return out;
}

std::vector<Spec> specs() {
  std::vector<Spec> out = {
      {SpecKind::kJsonObject, "", ""},
      {SpecKind::kJsonSchema, R"({"type": "object", "properties": {
          "name": {"type": "string", "maxLength": 12}, "id": {"type": "string", "format": "uuid"},
          "n": {"type": "integer", "minimum": -50, "maximum": 1234}, "x": {"type": "number"},
          "kind": {"enum": ["alpha", "beta", "gamma delta"]}, "ok": {"type": "boolean"},
          "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
          "child": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"k": {"type": "string"}}}]}},
          "required": ["name", "id", "n", "kind", "tags"], "additionalProperties": false})",
       ""},
      {SpecKind::kRegex, R"((\d{1,3}\.){3}\d{1,3}|[a-z]+( [a-z]+)*\.)", ""},
      {SpecKind::kChoice, R"(["positive", "negative", "neutral", "n/a"])", ""},
      {SpecKind::kGbnf, "root ::= (\"- \" item \"\\n\")+\nitem ::= [^\\n]{1,30}\n", ""},
  };
  const std::string vocab_dir = testing::llamacpp_vocab_dir();
  if (!vocab_dir.empty()) {
    fs::path json = fs::path(vocab_dir).parent_path() / "grammars" / "json.gbnf";
    if (fs::exists(json)) out.push_back({SpecKind::kGbnf, read_text(json), ""});
  }
  return out;
}

// Every token's bytes fed from the reference state; end-of-generation tokens when the text may end.
std::vector<uint64_t> brute_force(StackMachine& ref, StateId at, const TokenVocab& v) {
  std::vector<uint64_t> mask(v.mask_words(), 0);
  for (TokenId t = 0; t < v.size(); ++t) {
    bool ok;
    if (v.is_eog(t)) {
      ok = (ref.flags(at) & kAccept) != 0;
    } else {
      const std::string_view b = v.bytes(t);
      ok = !b.empty();
      StateId s = at;
      for (size_t i = 0; ok && i < b.size(); ++i) {
        s = ref.step(s, static_cast<uint8_t>(b[i]));
        ok = s != kDeadState;
      }
    }
    if (ok) mask[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64);
  }
  return mask;
}

std::string describe(const TokenVocab& v, TokenId t) {
  std::string out;
  for (unsigned char c : v.bytes(t))
    out += c >= 0x20 && c < 0x7F ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02X}", c);
  return fmt::format("{} '{}'", t, out);
}

void walk_and_compare(const NamedVocab& nv, const Spec& spec, uint64_t seed, int steps) {
  auto g = build_spec(spec);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto compiled = CompiledGrammar::compile(*g, nv.vocab);
  // Odd seeds: the matcher starts its tables afresh after every token (what a long generation does now and then).
  Matcher m(compiled, seed % 2 == 1 ? 1 : Matcher::kDefaultCompactBytes);
  StackMachine ref(**g);
  StateId at = ref.start();
  std::mt19937_64 rng(seed);
  const TokenVocab& v = *nv.vocab;
  std::vector<uint64_t> mask(v.mask_words());
  std::string text;
  for (int step = 0; step < steps; ++step) {
    m.fill_mask(mask);
    const std::vector<uint64_t> want = brute_force(ref, at, v);
    for (size_t w = 0; w < mask.size(); ++w) {
      if (mask[w] == want[w]) continue;
      const uint64_t diff = mask[w] ^ want[w];
      const auto t = static_cast<TokenId>(w * 64 + static_cast<size_t>(std::countr_zero(diff)));
      FAIL() << nv.name << " " << spec_kind_name(spec.kind) << " seed " << seed << " step " << step << " after '"
             << text << "': token " << describe(v, t)
             << (((want[w] >> (t % 64)) & 1u) ? " is allowed but masked out" : " is not allowed but in the mask");
    }
    std::vector<TokenId> allowed;
    for (TokenId t = 0; t < v.size(); ++t)
      if ((mask[static_cast<size_t>(t) / 64] >> (t % 64)) & 1u) allowed.push_back(t);
    ASSERT_FALSE(allowed.empty()) << "no token allowed after '" << text << "'";
    // Mostly short tokens, so that the walk reaches deeper structure, but long ones too.
    TokenId pick = allowed[rng() % allowed.size()];
    if (rng() % 2 == 0) {
      for (int tries = 0; tries < 8 && v.bytes(pick).size() > 2; ++tries) pick = allowed[rng() % allowed.size()];
    }
    if (v.is_eog(pick)) {
      EXPECT_TRUE(m.can_end());
      break;
    }
    ASSERT_TRUE(m.accept_token(pick)) << describe(v, pick);
    const std::string_view b = v.bytes(pick);
    for (char c : b) at = ref.step(at, static_cast<uint8_t>(c));
    ASSERT_NE(at, kDeadState);
    text += b;
    if (m.must_end()) break;
  }
}

TEST(Masks, EqualBruteForceOnTheBundledVocabulary) {
  TS_REQUIRE_STORIES260K();
  for (const NamedVocab& nv : vocabularies(false)) {
    for (const Spec& spec : specs()) {
      for (uint64_t seed = 1; seed <= 12; ++seed) walk_and_compare(nv, spec, seed, 120);
    }
  }
}

TEST(Masks, EqualBruteForceOnLlamaCppVocabularies) {
  if (testing::llamacpp_vocab_dir().empty())
    GTEST_SKIP() << "llama.cpp's ggml-vocab-*.gguf not found in " << testing::llamacpp_vocab_candidates();
  for (const NamedVocab& nv : vocabularies(true)) {
    if (nv.name == "stories260K") continue;
    for (const Spec& spec : specs()) {
      for (uint64_t seed = 1; seed <= 2; ++seed) walk_and_compare(nv, spec, seed, 25);
    }
  }
}

TEST(Masks, EndTokensOnlyWhenComplete) {
  auto v = TokenVocab::from_bytes({"a", "b", "ab", "", "c"}, {3});
  auto g = build_spec({SpecKind::kRegex, "ab?", ""});
  ASSERT_TRUE(g.ok());
  Matcher m(CompiledGrammar::compile(*g, v));
  std::vector<uint64_t> mask(1);
  m.fill_mask(mask);
  EXPECT_EQ(mask[0], 0b00101u);  // "a", "ab"; not EOG (nothing written yet)
  EXPECT_FALSE(m.accept_token(3));
  ASSERT_TRUE(m.accept_token(0));
  m.fill_mask(mask);
  EXPECT_EQ(mask[0], 0b01010u);  // "b" or the end
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.must_end());
  ASSERT_TRUE(m.accept_token(1));
  EXPECT_TRUE(m.must_end());
  m.fill_mask(mask);
  EXPECT_EQ(mask[0], 0b01000u);
  EXPECT_TRUE(m.accept_token(3));
  EXPECT_TRUE(m.ended());
}

TEST(Masks, ForcedBytesFollowTheOnlyContinuation) {
  auto v = TokenVocab::from_bytes({"{", "\"", "a", "}"}, {});
  auto g = build_spec(
      {SpecKind::kJsonSchema,
       R"({"type": "object", "properties": {"name": {"enum": ["alice", "albert"]}}, "required": ["name"]})", R"()"});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  Matcher m(CompiledGrammar::compile(*g, v));
  EXPECT_EQ(m.forced_bytes(), "{");
  ASSERT_TRUE(m.accept_bytes("{"));
  EXPECT_EQ(m.forced_bytes(), "");  // whitespace or the key
  ASSERT_TRUE(m.accept_bytes("\""));
  EXPECT_EQ(m.forced_bytes(), "name\"");  // then whitespace or ':'
  ASSERT_TRUE(m.accept_bytes("name\":\"al"));
  EXPECT_EQ(m.forced_bytes(), "");
  ASSERT_TRUE(m.accept_bytes("b"));
  EXPECT_EQ(m.forced_bytes(), "ert\"");
  ASSERT_TRUE(m.accept_bytes("ert\"}"));
  EXPECT_TRUE(m.must_end());
}

}  // namespace
}  // namespace tessera::grammar
