// The families section of the support matrix (support_matrix.h, run_family_matrix): one seeded random model per
// architecture family at test size, written as GGUF with its matrices in each of the types of llama.cpp's F16, Q8_0
// and Q4_K_M files, run on every backend beside ref.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "bench/support_matrix.h"
#include "engine/model_runner.h"
#include "model/loader.h"
#include "model/model_writer.h"
#include "model/synth.h"
#include "model/synth_gemma4.h"

namespace tessera::bench {
namespace {

constexpr int kGreedyTokens = 16;
// Prompt logits further than this from ref's (normalised squared error) fail the cell: with f16 matrices every
// backend multiplies in f32 (seen: below 1e-11); with block types the cpu backend quantises the activations to 8
// bits (llama.cpp's scheme; seen up to 1.5e-3, gemma4 q4_k over 6 layers). A wrong kernel lands near 1.
double logits_bound(const std::string& dtype) { return dtype == "f16" ? 1e-6 : 1e-2; }

using engine::TokenId;

const std::vector<TokenId> kPrompt = {1, 300, 17, 42, 99, 7, 250, 3, 480, 12, 64, 201, 33, 5};

struct Run {
  std::vector<float> prompt_logits;  // an embedding model's pooled vector
  std::vector<TokenId> greedy;
};

// The embedding shapes and the pooling each is served with (its GGUF pooling_type).
std::optional<ops::PoolKind> pooling_of(const std::string& shape) {
  if (shape == "bge-small") return ops::PoolKind::kFirst;
  if (shape == "bert-base") return ops::PoolKind::kMean;
  if (shape == "qwen3-embedding-0.6b") return ops::PoolKind::kLast;
  return std::nullopt;
}

Result<Run> greedy(ops::Device& device, const model::LoadedModel& m, std::optional<ops::PoolKind> pool) {
  engine::RunnerOptions o;
  o.max_batch_tokens = 64;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<engine::ModelRunner> runner,
                      engine::ModelRunner::create(device, m.config, m.weights, o));
  engine::SequenceKv seq;
  std::vector<float> logits;
  if (pool) {  // one step over the whole prompt, pooled
    Run run;
    engine::Segment s;
    s.seq = &seq;
    s.tokens = kPrompt;
    s.want_logits = false;
    s.pool = *pool;
    s.pooled = [&run](std::span<const float> v) { run.prompt_logits.assign(v.begin(), v.end()); };
    TS_RETURN_IF_ERROR(runner->step(std::span(&s, 1), logits));
    if (run.prompt_logits.empty()) return internal_error("the step pooled nothing");
    return run;
  }
  TS_RETURN_IF_ERROR(runner->prefill(seq, kPrompt, logits));
  Run run;
  run.prompt_logits = logits;
  for (int i = 0; i < kGreedyTokens; ++i) {
    TokenId next = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    run.greedy.push_back(next);
    engine::SequenceKv* s = &seq;
    TS_RETURN_IF_ERROR(runner->decode(std::span(&s, 1), std::span(&next, 1), logits));
  }
  return run;
}

// The shape at test size, 2 layers (gemma4: 6, its layer pattern's least), rows of 256 so that the K-quants
// fill every matrix, clear winners (--decisive), as an f32 GGUF file at `path`.
Status write_base(const std::string& shape, const std::string& path) {
  if (model::is_gemma4_shape(shape)) {
    TS_ASSIGN_OR_RETURN(model::Gemma4Shape s, model::gemma4_shape(shape, /*small=*/true));
    TS_RETURN_IF_ERROR(model::resize_gemma4_shape(s, 6, 256, 512, -1));
    model::Gemma4WriteOptions wo;
    wo.post_norm_scale = 0.25f;
    wo.q_norm_scale = 0.25f;
    wo.router_scale = 8.0f * std::sqrt(static_cast<float>(s.dim));
    return model::write_gemma4_gguf(s, 7, wo, path);
  }
  TS_ASSIGN_OR_RETURN(model::ModelConfig c, model::synth_shape_small(shape));
  c.n_layers = 2;
  TS_RETURN_IF_ERROR(model::resize_synth_shape(c, 256, 512, -1));
  model::SynthWeightOptions so;
  so.decisive = true;
  const model::SynthModel m = model::synthesize_weights(c, 7, so);
  model::ModelWriteOptions wo;
  wo.dtype = DType::kF32;
  return model::write_model("gguf", path, c, m.weights, wo);
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = static_cast<double>(got[i]) - want[i];
    err += e * e;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return err / std::max(norm, 1e-30);
}

ModelCheck compare(const Result<Run>& got, const Run& want, double bound) {
  if (!got.ok()) {
    if (got.status().code() == StatusCode::kUnimplemented) return {"unsupported", got.status().message()};
    return {"tested: FAIL", got.status().message()};
  }
  const double e = nmse(got->prompt_logits, want.prompt_logits);
  size_t first = 0;
  while (first < got->greedy.size() && got->greedy[first] == want.greedy[first]) ++first;
  if (want.greedy.empty()) {  // an embedding model
    if (!(e <= bound)) return {"tested: FAIL", fmt::format("embedding nmse {:.1e} vs ref (bound {:.0e})", e, bound)};
    return {"tested: pass", fmt::format("embedding nmse {:.1e}", e)};
  }
  const std::string tokens = first == want.greedy.size() ? fmt::format("ref's {} greedy tokens", first)
                                                         : fmt::format("departs from ref at greedy token {}", first);
  if (e <= bound) return {"tested: pass", fmt::format("logits nmse {:.1e}, {}", e, tokens)};
  // Block types on cpu: an 8-bit activation's rounding can tip a near tie of a random model (seen: one token's
  // expert choice in qwen3.5-35b-a3b q8_0, that row's FFN output off by nmse 0.8), which moves the prompt's last
  // logits past the bound while greedy decoding, a sharper test of the computation, keeps every token.
  if (bound > 1e-6 && first == want.greedy.size())
    return {"tested: pass", fmt::format("logits nmse {:.1e}, beyond {:.0e}: a near tie tipped by 8-bit activations; {}",
                                        e, bound, tokens)};
  return {"tested: FAIL", fmt::format("prompt logits nmse {:.1e} vs ref (bound {:.0e}); {}", e, bound, tokens)};
}

}  // namespace

std::vector<std::string> matrix_family_shapes() {
  return {"llama3.2-1b", "mistral-7b",     "qwen2.5-0.5b", "qwen3-0.6b",          "gemma2-2b",    "gemma3-1b",
          "phi3-mini",   "qwen3-30b-a3b",  "mixtral-8x7b", "gpt-oss-20b",         "qwen3.5-0.8b", "qwen3.5-35b-a3b",
          "gemma4-e2b",  "gemma4-26b-a4b", "bge-small",    "qwen3-embedding-0.6b"};
}

std::vector<std::string> matrix_family_dtypes() { return {"f16", "q8_0", "q4_k"}; }

void run_family_matrix(const std::vector<MatrixBackend>& backends, ops::Device& reference,
                       const std::vector<std::string>& shapes, SupportMatrix& m,
                       const std::function<void(const std::string&)>& progress) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "tessera-matrix-XXXXXX").string();
  const char* dir = mkdtemp(tmpl.data());
  for (const std::string& shape : shapes) {
    if (progress) progress(shape);
    const std::string base = dir ? fmt::format("{}/{}-f32.gguf", dir, shape) : std::string();
    Status made = dir ? write_base(shape, base) : internal_error("cannot create a temporary folder");
    Result<model::LoadedModel> f32 = made.ok() ? model::load_model(base, "", false) : Result<model::LoadedModel>(made);
    for (const std::string& dtype : matrix_family_dtypes()) {
      FamilyRow row{shape, dtype, std::vector<ModelCheck>(backends.size())};
      auto fill_all = [&](const std::string& why) {
        for (size_t b = 0; b < backends.size(); ++b) row.cells[b] = {"tested: FAIL", why};
      };
      const std::string path = fmt::format("{}/{}-{}.gguf", dir ? dir : "", shape, dtype);
      model::ModelWriteOptions wo;
      wo.dtype = parse_dtype(dtype);
      Status written = f32.ok() ? model::write_model("gguf", path, f32->config, f32->weights, wo) : f32.status();
      Result<model::LoadedModel> loaded =
          written.ok() ? model::load_model(path, "", false) : Result<model::LoadedModel>(written);
      const std::optional<ops::PoolKind> pool = pooling_of(shape);
      Result<Run> want = loaded.ok() ? greedy(reference, *loaded, pool) : Result<Run>(loaded.status());
      if (!want.ok()) {
        fill_all("the model or ref's run failed: " + want.status().message());
        m.families.push_back(std::move(row));
        continue;
      }
      for (size_t b = 0; b < backends.size(); ++b) {
        if (!backends[b].device) {
          row.cells[b] = {"untested", "not run here (no device): " + backends[b].column.detail};
          continue;
        }
        row.cells[b] = compare(greedy(*backends[b].device, *loaded, pool), *want, logits_bound(dtype));
      }
      m.families.push_back(std::move(row));
      std::filesystem::remove(path);
    }
    if (dir) std::filesystem::remove(base);
  }
  if (dir) std::filesystem::remove_all(dir);
}

}  // namespace tessera::bench
