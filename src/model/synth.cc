#include "model/synth.h"

#include <set>

#include <fmt/format.h>

#include "base/check.h"
#include "base/rng.h"

namespace tessera::model {
namespace {

ModelConfig make_shape(int dim, int hidden, int layers, int heads, int kv_heads, int vocab, int seq) {
  ModelConfig c;
  c.dim = dim;
  c.hidden_dim = hidden;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.vocab_size = vocab;
  c.max_seq_len = seq;
  c.head_dim = dim / heads;
  return c;
}

}  // namespace

std::vector<std::string> synth_shape_names() { return {"tiny", "stories15M", "stories110M", "qwen2.5-0.5b"}; }

Result<ModelConfig> synth_shape(const std::string& name) {
  if (name == "tiny") return make_shape(64, 172, 5, 8, 4, 512, 512);
  if (name == "stories15M") return make_shape(288, 768, 6, 6, 6, 32000, 256);
  if (name == "stories110M") return make_shape(768, 2048, 12, 12, 12, 32000, 1024);
  if (name == "qwen2.5-0.5b") {
    // Qwen2.5-0.5B's published config: q/k/v biases, tied embeddings, rotate-half rotary, theta 1e6.
    ModelConfig c = make_shape(896, 4864, 24, 14, 2, 151936, 32768);
    c.arch = "qwen2";
    c.rope_theta = 1000000.0f;
    c.norm_eps = 1e-6f;
    c.rope_layout = RopeLayout::kHalf;
    c.tied_embeddings = true;
    return c;
  }
  return invalid_argument(
      fmt::format("unknown shape '{}'; known shapes: {}", name, fmt::join(synth_shape_names(), ", ")));
}

SynthModel synthesize_weights(const ModelConfig& c, uint64_t seed) {
  TS_CHECK(c.validate().ok());
  struct Spec {
    std::string name;
    std::vector<int64_t> shape;
    bool norm;
  };
  std::vector<Spec> specs;
  int64_t d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim();
  specs.push_back({"token_embd.weight", {c.vocab_size, d}, false});
  for (int l = 0; l < c.n_layers; ++l) {
    specs.push_back({layer_tensor_name(l, "attn_norm.weight"), {d}, true});
    specs.push_back({layer_tensor_name(l, "attn_q.weight"), {q, d}, false});
    specs.push_back({layer_tensor_name(l, "attn_k.weight"), {kv, d}, false});
    specs.push_back({layer_tensor_name(l, "attn_v.weight"), {kv, d}, false});
    if (c.arch == "qwen2") {
      specs.push_back({layer_tensor_name(l, "attn_q.bias"), {q}, false});
      specs.push_back({layer_tensor_name(l, "attn_k.bias"), {kv}, false});
      specs.push_back({layer_tensor_name(l, "attn_v.bias"), {kv}, false});
    }
    specs.push_back({layer_tensor_name(l, "attn_output.weight"), {d, q}, false});
    specs.push_back({layer_tensor_name(l, "ffn_norm.weight"), {d}, true});
    specs.push_back({layer_tensor_name(l, "ffn_gate.weight"), {h, d}, false});
    specs.push_back({layer_tensor_name(l, "ffn_down.weight"), {d, h}, false});
    specs.push_back({layer_tensor_name(l, "ffn_up.weight"), {h, d}, false});
  }
  specs.push_back({"output_norm.weight", {d}, true});
  if (!c.tied_embeddings) specs.push_back({"output.weight", {c.vocab_size, d}, false});

  size_t total = 0;
  for (const Spec& s : specs) {
    size_t n = 1;
    for (int64_t x : s.shape) n *= static_cast<size_t>(x);
    total += n;
  }
  auto storage = std::make_shared<std::vector<float>>(total);
  Rng rng(seed * 0x9E3779B97F4A7C15ull + 1);
  SynthModel out{c, ModelWeights(storage)};
  float* p = storage->data();
  for (const Spec& s : specs) {
    WeightTensor t{s.name, DType::kF32, s.shape, reinterpret_cast<const uint8_t*>(p), 0};
    size_t n = static_cast<size_t>(t.numel());
    for (size_t i = 0; i < n; ++i) p[i] = (s.norm ? 1.0f : 0.0f) + 0.02f * rng.next_normal();
    t.bytes = n * sizeof(float);
    p += n;
    out.weights.add(std::move(t));
  }
  return out;
}

std::unique_ptr<Llama2cTokenizer> synthesize_tokenizer(int vocab_size, uint64_t seed) {
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  for (int b = 0; b < 256; ++b) pieces.push_back(fmt::format("<0x{:02X}>", b));
  std::set<std::string> seen(pieces.begin(), pieces.end());
  std::vector<std::string> text_pieces;
  for (char ch = ' '; ch <= '~' && static_cast<int>(pieces.size()) < vocab_size; ++ch) {
    std::string s(1, ch);
    pieces.push_back(s);
    seen.insert(s);
    text_pieces.push_back(s);
  }
  Rng rng(seed ^ 0xA5A5A5A5ull);
  int guard = 0;
  while (static_cast<int>(pieces.size()) < vocab_size && guard++ < vocab_size * 64) {
    // Joining two existing pieces keeps every piece reachable by merges, as in a trained BPE vocabulary.
    const std::string& a = text_pieces[rng.next_u32() % text_pieces.size()];
    const std::string& b = text_pieces[rng.next_u32() % text_pieces.size()];
    std::string s = a + b;
    if (s.size() > 16 || !seen.insert(s).second) continue;
    pieces.push_back(s);
    text_pieces.push_back(s);
  }
  for (int i = 0; static_cast<int>(pieces.size()) < vocab_size; ++i) pieces.push_back(fmt::format("<extra_{}>", i));
  std::vector<float> scores(pieces.size(), 0.0f);
  for (size_t i = 259; i < pieces.size(); ++i) scores[i] = -static_cast<float>(i - 259);
  auto tok = Llama2cTokenizer::from_pieces(std::move(pieces), std::move(scores));
  TS_CHECK(tok.ok());
  return std::move(tok).value();
}

}  // namespace tessera::model
