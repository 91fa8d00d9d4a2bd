#include "model/llama2c/llama2c_checkpoint.h"

#include <cmath>
#include <cstring>
#include <fstream>

#include <fmt/core.h>

#include "base/mapped_file.h"

namespace tessera::model {
namespace {

constexpr size_t kHeaderBytes = 7 * sizeof(int32_t);

struct Header {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

// Tensor order and shapes of the format; `per_layer` tensors are stored for all layers back to back.
struct Section {
  const char* suffix;  // GGUF-style name (per-layer tensors get "blk.N." prepended)
  bool per_layer;
  int64_t rows, cols;  // cols == 0 for vectors
};

std::vector<Section> sections(const ModelConfig& c) {
  int64_t d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim(), v = c.vocab_size;
  return {
      {"token_embd.weight", false, v, d}, {"attn_norm.weight", true, d, 0},    {"attn_q.weight", true, q, d},
      {"attn_k.weight", true, kv, d},     {"attn_v.weight", true, kv, d},      {"attn_output.weight", true, d, q},
      {"ffn_norm.weight", true, d, 0},    {"ffn_gate.weight", true, h, d},     {"ffn_down.weight", true, d, h},
      {"ffn_up.weight", true, h, d},      {"output_norm.weight", false, d, 0},
  };
}

int64_t freq_cis_floats(const ModelConfig& c) { return static_cast<int64_t>(c.max_seq_len) * c.head_dim; }

// Float count of the whole file body; config limits keep this far from overflow.
int64_t expected_floats(const ModelConfig& c) {
  int64_t n = 0;
  for (const Section& s : sections(c)) n += (s.per_layer ? c.n_layers : 1) * s.rows * (s.cols ? s.cols : 1);
  n += freq_cis_floats(c);
  if (!c.tied_embeddings) n += static_cast<int64_t>(c.vocab_size) * c.dim;
  return n;
}

Result<ModelConfig> parse_header(const uint8_t* p, size_t size, const std::string& path) {
  if (size < kHeaderBytes) {
    return invalid_argument(
        fmt::format("{} is not a llama2.c checkpoint: {} bytes is shorter than the 28-byte header", path, size));
  }
  Header h{};
  std::memcpy(&h, p, kHeaderBytes);
  ModelConfig c;
  c.arch = "llama";
  c.dim = h.dim;
  c.hidden_dim = h.hidden_dim;
  c.n_layers = h.n_layers;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.tied_embeddings = h.vocab_size > 0;
  c.vocab_size = h.vocab_size == INT32_MIN ? 0 : std::abs(h.vocab_size);
  c.max_seq_len = h.seq_len;
  c.head_dim = (h.n_heads > 0 && h.dim % h.n_heads == 0) ? h.dim / h.n_heads : 0;
  c.rope_layout = RopeLayout::kInterleaved;
  if (h.n_heads > 0 && h.dim > 0 && h.dim % h.n_heads != 0) {
    return invalid_argument(
        fmt::format("{}: corrupt llama2.c header: dim {} is not a multiple of n_heads {}", path, h.dim, h.n_heads));
  }
  if (Status s = c.validate(); !s.ok()) {
    return invalid_argument(fmt::format("{}: corrupt llama2.c header: {}", path, s.message()));
  }
  return c;
}

}  // namespace

bool looks_like_llama2c_checkpoint(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file.ok()) return false;
  auto config = parse_header((*file)->data(), (*file)->size(), path);
  if (!config.ok()) return false;
  return (*file)->size() == kHeaderBytes + static_cast<size_t>(expected_floats(*config)) * sizeof(float);
}

Result<Llama2cCheckpoint> load_llama2c_checkpoint(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  TS_ASSIGN_OR_RETURN(ModelConfig config, parse_header(file->data(), file->size(), path));
  size_t expected = kHeaderBytes + static_cast<size_t>(expected_floats(config)) * sizeof(float);
  if (file->size() < expected) {
    return invalid_argument(
        fmt::format("{} is truncated: the header describes {} bytes, the file has {}", path, expected, file->size()));
  }
  if (file->size() > expected) {
    return invalid_argument(
        fmt::format("{} is corrupt or not a llama2.c checkpoint: the header describes {} bytes, the file has {}", path,
                    expected, file->size()));
  }
  if (reinterpret_cast<uintptr_t>(file->data()) % alignof(float) != 0) return internal_error("unaligned mapping");

  Llama2cCheckpoint ckpt{config, ModelWeights(file)};
  const uint8_t* p = file->data() + kHeaderBytes;
  auto take = [&](std::string name, std::vector<int64_t> shape) {
    WeightTensor t{std::move(name), DType::kF32, std::move(shape), p, 0};
    t.bytes = static_cast<size_t>(t.numel()) * sizeof(float);
    p += t.bytes;
    ckpt.weights.add(std::move(t));
  };
  for (const Section& s : sections(config)) {
    std::vector<int64_t> shape = s.cols ? std::vector<int64_t>{s.rows, s.cols} : std::vector<int64_t>{s.rows};
    if (!s.per_layer) {
      take(s.suffix, shape);
      continue;
    }
    for (int l = 0; l < config.n_layers; ++l) take(layer_tensor_name(l, s.suffix), shape);
  }
  p += static_cast<size_t>(freq_cis_floats(config)) * sizeof(float);
  if (!config.tied_embeddings) take("output.weight", {config.vocab_size, config.dim});

  for (const WeightTensor& t : ckpt.weights.tensors()) {
    const auto* f = reinterpret_cast<const float*>(t.data);
    for (int64_t i = 0, n = t.numel(); i < n; ++i) {
      if (!std::isfinite(f[i])) {
        return invalid_argument(
            fmt::format("{} is corrupt: tensor {} holds a non-finite value ({}) at element {}", path, t.name, f[i], i));
      }
    }
  }
  return ckpt;
}

Status write_llama2c_checkpoint(const std::string& path, const ModelConfig& config, const ModelWeights& weights) {
  TS_RETURN_IF_ERROR(config.validate());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return unavailable(fmt::format("cannot create {}", path));
  Header h{config.dim,        config.hidden_dim, config.n_layers,
           config.n_heads,    config.n_kv_heads, config.tied_embeddings ? config.vocab_size : -config.vocab_size,
           config.max_seq_len};
  out.write(reinterpret_cast<const char*>(&h), sizeof h);
  auto put = [&](const std::string& name, const std::vector<int64_t>& shape) -> Status {
    TS_ASSIGN_OR_RETURN(const WeightTensor* t, weights.require(name, shape));
    if (t->dtype != DType::kF32)
      return invalid_argument(fmt::format("llama2.c checkpoints hold f32; {} is {}", name, dtype_name(t->dtype)));
    out.write(reinterpret_cast<const char*>(t->data), static_cast<std::streamsize>(t->bytes));
    return ok_status();
  };
  for (const Section& s : sections(config)) {
    std::vector<int64_t> shape = s.cols ? std::vector<int64_t>{s.rows, s.cols} : std::vector<int64_t>{s.rows};
    if (!s.per_layer) {
      TS_RETURN_IF_ERROR(put(s.suffix, shape));
      continue;
    }
    for (int l = 0; l < config.n_layers; ++l) TS_RETURN_IF_ERROR(put(layer_tensor_name(l, s.suffix), shape));
  }
  // freq_cis_real then freq_cis_imag, as llama2.c's legacy export writes them.
  int half = config.head_dim / 2;
  std::vector<float> re(static_cast<size_t>(config.max_seq_len) * half), im(re.size());
  for (int pos = 0; pos < config.max_seq_len; ++pos) {
    for (int i = 0; i < half; ++i) {
      double freq = 1.0 / std::pow(static_cast<double>(config.rope_theta), 2.0 * i / config.head_dim);
      re[static_cast<size_t>(pos) * half + i] = static_cast<float>(std::cos(pos * freq));
      im[static_cast<size_t>(pos) * half + i] = static_cast<float>(std::sin(pos * freq));
    }
  }
  out.write(reinterpret_cast<const char*>(re.data()), static_cast<std::streamsize>(re.size() * sizeof(float)));
  out.write(reinterpret_cast<const char*>(im.data()), static_cast<std::streamsize>(im.size() * sizeof(float)));
  if (!config.tied_embeddings) TS_RETURN_IF_ERROR(put("output.weight", {config.vocab_size, config.dim}));
  out.flush();
  if (!out) return unavailable(fmt::format("failed writing {}", path));
  return ok_status();
}

}  // namespace tessera::model
