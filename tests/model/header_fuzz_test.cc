// Randomised mutation fuzzing of the GGUF and safetensors parsers: at least 100,000 mutated files each
// (TESSERA_FUZZ_ITERATIONS overrides), derived from valid seeds by byte and bit flips, boundary integers
// written over length and count fields, insertions, deletions, truncations and splices. Every input must
// parse or fail with a Status; a crash, hang or sanitizer report fails the run. The seed is fixed and
// printed, so a failure can be replayed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "base/mapped_file.h"
#include "base/rng.h"
#include "model/formats/gguf/gguf_model.h"
#include "model/formats/safetensors/hf_model.h"
#include "model/formats/safetensors/safetensors_file.h"
#include "model/synth.h"
#include "model/tokenizer/bpe_tokenizer.h"
#include "support/paths.h"

namespace tessera::model {
namespace {

int iterations() {
  const char* e = std::getenv("TESSERA_FUZZ_ITERATIONS");
  return e ? std::max(1, std::atoi(e)) : 100000;
}

std::string mutate(const std::string& seed, const std::string& other, Rng& rng) {
  std::string b = seed;
  int n = 1 + static_cast<int>(rng.next_u32() % 4);
  for (int k = 0; k < n; ++k) {
    uint32_t kind = rng.next_u32() % 8;
    size_t size = b.size();
    size_t pos = size ? rng.next_u32() % size : 0;
    // Half the mutations land in the first 512 bytes, where the headers' lengths and counts live.
    if (rng.next_u32() % 2 == 0 && size > 0) pos = rng.next_u32() % std::min<size_t>(size, 512);
    switch (kind) {
      case 0:
        if (size) b[pos] = static_cast<char>(rng.next_u32());
        break;
      case 1:
        if (size) b[pos] = static_cast<char>(b[pos] ^ (1u << (rng.next_u32() % 8)));
        break;
      case 2: {  // a boundary integer over 1, 2, 4 or 8 bytes
        static const uint64_t kValues[] = {0,
                                           1,
                                           2,
                                           3,
                                           31,
                                           32,
                                           33,
                                           127,
                                           128,
                                           255,
                                           256,
                                           0x7FFF,
                                           0xFFFF,
                                           0x7FFFFFFF,
                                           0x80000000,
                                           0xFFFFFFFF,
                                           uint64_t{1} << 32,
                                           uint64_t{1} << 40,
                                           0x7FFFFFFFFFFFFFFF,
                                           ~uint64_t{0},
                                           ~uint64_t{0} - 1};
        uint64_t v = kValues[rng.next_u32() % (sizeof(kValues) / sizeof(kValues[0]))];
        size_t w = size_t{1} << (rng.next_u32() % 4);
        if (pos + w <= size) std::memcpy(b.data() + pos, &v, w);
        break;
      }
      case 3:
        b.insert(pos, std::string(1 + rng.next_u32() % 16, static_cast<char>(rng.next_u32())));
        break;
      case 4:
        if (size) b.erase(pos, 1 + rng.next_u32() % std::min<size_t>(64, size - pos));
        break;
      case 5:
        b.resize(size ? rng.next_u32() % size : 0);
        break;
      case 6: {  // splice a piece of another valid file
        if (other.empty()) break;
        size_t from = rng.next_u32() % other.size();
        size_t len = std::min<size_t>(1 + rng.next_u32() % 64, other.size() - from);
        if (pos + len <= size) b.replace(pos, len, other, from, len);
        break;
      }
      case 7: {  // an ASCII digit changed (JSON numbers in safetensors headers)
        for (size_t t = 0; t < 32 && size; ++t) {
          size_t p = (pos + t) % size;
          if (b[p] >= '0' && b[p] <= '9') {
            b[p] = static_cast<char>('0' + rng.next_u32() % 10);
            break;
          }
        }
        break;
      }
    }
  }
  return b;
}

struct Counts {
  int total = 0, accepted = 0;
};

template <typename Parse>
Counts fuzz(const std::string& seed, const std::string& other, uint64_t rng_seed, Parse parse) {
  Rng rng(rng_seed);
  Counts c;
  const int n = iterations();
  for (int i = 0; i < n; ++i) {
    std::string in = mutate(seed, other, rng);
    // A copy in its own allocation, so that an overrun is a sanitizer report, not a silent read.
    std::unique_ptr<uint8_t[]> buf(new uint8_t[in.size() + 1]);
    std::memcpy(buf.get(), in.data(), in.size());
    c.accepted += parse(std::span<const uint8_t>(buf.get(), in.size())) ? 1 : 0;
    ++c.total;
  }
  return c;
}

std::string small_gguf(uint64_t seed) {
  ModelConfig cfg = *synth_shape("tiny");
  cfg.n_layers = 1;
  cfg.dim = 32;
  cfg.n_heads = 4;
  cfg.n_kv_heads = 2;
  cfg.head_dim = 8;
  cfg.hidden_dim = 32;
  cfg.vocab_size = 300;
  SynthModel m = synthesize_weights(cfg, seed);
  auto vocab = synthesize_tokenizer(cfg.vocab_size, seed)->to_vocab();
  std::string path = testing::scratch_dir() + "/seed.gguf";
  EXPECT_TRUE(write_gguf_model(path, cfg, m.weights, &*vocab, {}).ok());
  return *read_file(path);
}

TEST(HeaderFuzz, GgufParserSurvivesMutatedFiles) {
  std::string seed = small_gguf(1), other = small_gguf(2);
  auto t0 = std::chrono::steady_clock::now();
  Counts c = fuzz(seed, other, 0xC0FFEE,
                  [](std::span<const uint8_t> b) { return parse_gguf_model(b, "fuzz.gguf", nullptr).ok(); });
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("gguf: %d mutated inputs (seed file %zu bytes, rng seed 0xC0FFEE), %d accepted, %d rejected, %.1f s\n",
              c.total, seed.size(), c.accepted, c.total - c.accepted, s);
  RecordProperty("inputs", c.total);
  EXPECT_EQ(c.total, iterations());
  EXPECT_LT(c.accepted, c.total);  // the mutations do reach the checks
}

TEST(HeaderFuzz, SafetensorsParserSurvivesMutatedFiles) {
  std::vector<float> a(64, 1.0f);
  std::vector<uint16_t> h(48, 0x3C00);
  std::string path = testing::scratch_dir() + "/seed.safetensors";
  ASSERT_TRUE(write_safetensors(
                  path,
                  {{"model.embed_tokens.weight", DType::kF32, {8, 8}, reinterpret_cast<const uint8_t*>(a.data()), 256},
                   {"model.norm.weight", DType::kF16, {48}, reinterpret_cast<const uint8_t*>(h.data()), 96},
                   {"lm_head.weight", DType::kBF16, {6, 8}, reinterpret_cast<const uint8_t*>(h.data()), 96}},
                  {{"format", "pt"}})
                  .ok());
  std::string seed = *read_file(path);
  auto t0 = std::chrono::steady_clock::now();
  Counts c = fuzz(seed, seed, 0xBEEF, [](std::span<const uint8_t> b) { return parse_safetensors(b, "fuzz").ok(); });
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "safetensors: %d mutated inputs (seed file %zu bytes, rng seed 0xBEEF), %d accepted, %d rejected, %.1f s\n",
      c.total, seed.size(), c.accepted, c.total - c.accepted, s);
  RecordProperty("inputs", c.total);
  EXPECT_EQ(c.total, iterations());
  EXPECT_LT(c.accepted, c.total);
}

// The JSON readers (tokenizer.json, tokenizer_config.json, config.json) on mutated text: no exception may
// escape (one would end the test), every input parses or is a Status.
TEST(HeaderFuzz, JsonReadersSurviveMutatedText) {
  const std::string tokenizer = R"({"added_tokens": [{"id": 12, "content": "<|end|>", "special": true,
    "lstrip": false, "rstrip": true, "single_word": false}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Prepend", "prepend": "x"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "y"}]},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\s+|\\p{L}+"},
      "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|end|>", "type_id": 0}}]},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "byte_fallback": false, "ignore_merges": true, "unk_token": null,
      "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "\u0120": 4, "w": 5, "r": 6, "d": 7, "he": 8, "ll": 9, "hell": 10,
                "\u0120w": 11}, "merges": ["h e", ["l", "l"], "he ll", "\u0120 w"]}})";
  const std::string tconfig = R"({"bos_token": {"content": "<|end|>"}, "eos_token": "<|end|>", "add_bos_token": true,
    "pad_token": null, "chat_template": [{"name": "default", "template": "<|im_start|>"}]})";
  const std::string config = R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
    "max_position_embeddings": 128, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "tie_word_embeddings": true,
    "head_dim": 16, "rope_scaling": null})";
  ASSERT_TRUE(BpeTokenizer::from_json(tokenizer, tconfig, "t").ok())
      << BpeTokenizer::from_json(tokenizer, tconfig, "t").status().to_string();
  ASSERT_TRUE(parse_hf_config(config, "c").ok()) << parse_hf_config(config, "c").status().to_string();
  const int n = iterations();
  Rng rng(0xFACE);
  // Half the inputs stay valid JSON with one value swapped for another type, to reach the type checks.
  auto swap_value = [&rng](const std::string& j) {
    static const char* kValues[] = {"null",       "true",
                                    "-1",         "1e300",
                                    "4294967296", "\"x\"",
                                    "[]",         "{}",
                                    "[1, \"a\"]", "{\"type\": \"x\"}",
                                    "\"\"",       "18446744073709551615"};
    std::string out = j;
    for (int tries = 0; tries < 8; ++tries) {
      size_t colon = out.find(':', rng.next_u32() % out.size());
      if (colon == std::string::npos) continue;
      size_t end = out.find_first_of(",}]", colon + 1);
      if (end == std::string::npos || out.find_first_of("[{", colon + 1) < end) continue;
      out.replace(colon + 1, end - colon - 1, kValues[rng.next_u32() % (sizeof(kValues) / sizeof(kValues[0]))]);
      break;
    }
    return out;
  };
  int accepted = 0;
  for (int i = 0; i < n; ++i) {
    bool structured = i % 2 == 0;
    std::string t = structured ? swap_value(tokenizer) : mutate(tokenizer, config, rng);
    std::string c = structured ? swap_value(tconfig) : mutate(tconfig, tokenizer, rng);
    auto tok = BpeTokenizer::from_json(t, c, "fuzz");
    if (tok.ok()) {
      ++accepted;
      (*tok)->decode((*tok)->encode("hello world<|end|> h\xC3", true));
    }
    accepted += parse_hf_config(structured ? swap_value(config) : mutate(config, tokenizer, rng), "fuzz").ok();
  }
  std::printf("json: %d mutated tokenizer.json + tokenizer_config.json pairs and %d config.json, %d accepted\n", n, n,
              accepted);
  EXPECT_LT(accepted, 2 * n);
}

}  // namespace
}  // namespace tessera::model
