// Qwen3.5's hybrid models (qwen35, qwen35moe) in files and in the engine: the GGUF keys and tensors llama.cpp's
// converter writes, read back to the same layer kinds and shapes; the recurrent state a sequence carries (one slot
// per sequence beside the paged KV, taken at its start and freed with it; chunked prefill, token-by-token prefill
// and batched decode give the same logits, on cpu, ref and opencl); the KV and state moved between runners (cpu ->
// cpu, ref, opencl) continue the sequence, and a zeroed state in place of the carried one does not; what is refused
// (prefix reuse without state checkpoints, graph decode, KV transfer, a sequence with positions but no state, backends
// without the operators); prefix reuse through state checkpoints: tests/engine/state_checkpoint_test.cc.
// Hugging Face folders of these families: hybrid_hf_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "engine/model_runner.h"
#include "model/formats/gguf/gguf_model.h"
#include "model/model_writer.h"
#include "model/synth.h"
#include "ops/registry.h"
#include "support/paths.h"
#include "support/refusing_device.h"

namespace tessera::model {
namespace {

const std::vector<TokenId> kPrompt = {1, 300, 17, 42, 99, 7, 250, 3, 480, 12, 64, 201, 33, 5, 77, 18, 260};

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return num / std::max(den, 1e-30);
}

TokenId argmax(const std::vector<float>& v) {
  return static_cast<TokenId>(std::max_element(v.begin(), v.end()) - v.begin());
}

SynthModel small(const std::string& shape, int layers = 4) {
  ModelConfig c = *synth_shape_small(shape);
  c.n_layers = layers;
  return synthesize_weights(c, 3);
}

std::unique_ptr<engine::ModelRunner> runner(const std::string& backend, const SynthModel& m,
                                            engine::RunnerOptions o = {}) {
  auto device = ops::open_device(backend);
  EXPECT_TRUE(device.ok());
  static std::vector<std::unique_ptr<ops::Device>> keep;  // a runner refers to its device
  keep.push_back(std::move(*device));
  auto r = engine::ModelRunner::create(*keep.back(), m.config, m.weights, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(*r) : nullptr;
}

TEST(HybridModel, SynthShapesAreQwen35sPublishedConfigs) {
  ModelConfig dense = *synth_shape("qwen3.5-0.8b");
  EXPECT_EQ(dense.arch, "qwen35");
  EXPECT_EQ(dense.n_layers, 24);
  EXPECT_EQ(dense.linear_layer_count(), 18);  // every fourth layer is full attention
  EXPECT_EQ(dense.layer_kind(3).attention, AttentionKind::kFull);
  EXPECT_EQ(dense.layer_kind(4).attention, AttentionKind::kLinear);
  EXPECT_EQ(dense.rope_dims, 64);
  // Per sequence: 18 layers x (3 x 6144 window + 16 x 128 x 128 state) f32.
  EXPECT_EQ(dense.recurrent_state_bytes(), 18u * (3 * 6144 + 16 * 128 * 128) * 4);
  ModelConfig moe = *synth_shape("qwen3.5-35b-a3b");
  EXPECT_EQ(moe.arch, "qwen35moe");
  EXPECT_EQ(moe.linear.v_heads, 32);
  EXPECT_EQ(moe.moe.n_experts, 256);
  EXPECT_EQ(moe.moe.shared_expert_hidden_dim, 512);
  EXPECT_TRUE(moe.validate().ok());
}

TEST(HybridModel, GgufRoundTripKeepsKindsShapesAndBytes) {
  for (const char* shape : {"qwen3.5-0.8b", "qwen3.5-35b-a3b"}) {
    SynthModel m = small(shape);
    const std::string path = testing::scratch_dir() + "/m.gguf";
    ASSERT_TRUE(write_model("gguf", path, m.config, m.weights, {}).ok()) << shape;
    auto loaded = load_gguf_model(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    const ModelConfig& c = loaded->config;
    for (int l = 0; l < c.n_layers; ++l) EXPECT_EQ(c.layer_kind(l), m.config.layer_kind(l)) << shape << " layer " << l;
    EXPECT_EQ(c.linear.conv_kernel, m.config.linear.conv_kernel);
    EXPECT_EQ(c.linear.k_heads, m.config.linear.k_heads);
    EXPECT_EQ(c.linear.v_heads, m.config.linear.v_heads);
    EXPECT_EQ(c.linear.head_dim, m.config.linear.head_dim);
    EXPECT_EQ(c.rope_dims, m.config.rope_dims);
    EXPECT_EQ(c.rope_sections, m.config.rope_sections);
    EXPECT_EQ(c.moe.shared_expert_hidden_dim, m.config.moe.shared_expert_hidden_dim);
    EXPECT_TRUE(c.attn_output_gate);
    for (const WeightTensor& t : m.weights.tensors()) {
      const WeightTensor* r = loaded->weights.find(t.name);
      ASSERT_NE(r, nullptr) << t.name;
      EXPECT_EQ(r->shape, t.shape) << t.name;
      ASSERT_EQ(r->bytes, t.bytes) << t.name;
      EXPECT_TRUE(std::equal(t.data, t.data + t.bytes, r->data)) << t.name;
    }
  }
}

// The state is carried: the whole prompt at once, in chunks of 5 and token by token give the same logits (cpu: bit
// for bit; ref as the oracle within float tolerance), and a sequence decoded beside another equals it decoded alone.
TEST(HybridEngine, ChunksTokensAndBatchesCarryTheState) {
  for (const char* shape : {"qwen3.5-0.8b", "qwen3.5-35b-a3b"}) {
    SynthModel m = small(shape);
    engine::RunnerOptions o;
    o.max_sequences = 3;
    auto cpu = runner("cpu", m, o);
    auto ref = runner("ref", m, o);
    ASSERT_TRUE(cpu && ref);
    std::vector<float> whole, stepped, oracle;
    engine::SequenceKv a, b, r;
    ASSERT_TRUE(cpu->prefill(a, kPrompt, whole).ok());
    ASSERT_TRUE(ref->prefill(r, kPrompt, oracle).ok());
    for (size_t i = 0; i < kPrompt.size(); ++i) {
      engine::SequenceKv* p = &b;
      ASSERT_TRUE(cpu->decode(std::span(&p, 1), std::span(&kPrompt[i], 1), stepped).ok());
    }
    EXPECT_EQ(whole, stepped) << shape;
    ASSERT_EQ(whole.size(), oracle.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < whole.size(); ++i) {
      num += (whole[i] - oracle[i]) * (whole[i] - oracle[i]);
      den += oracle[i] * oracle[i];
    }
    EXPECT_LT(num / den, 1e-8) << shape;
    EXPECT_EQ(std::max_element(whole.begin(), whole.end()) - whole.begin(),
              std::max_element(oracle.begin(), oracle.end()) - oracle.begin());
    // opencl (its own kernels for every operator here), the prompt whole and then token by token, against ref.
    if (ops::open_device("opencl").ok()) {
      auto cl = runner("opencl", m, o);
      ASSERT_TRUE(cl);
      std::vector<float> cl_whole, cl_stepped;
      engine::SequenceKv x, y;
      ASSERT_TRUE(cl->prefill(x, kPrompt, cl_whole).ok());
      for (size_t i = 0; i < kPrompt.size(); ++i) {
        engine::SequenceKv* p = &y;
        ASSERT_TRUE(cl->decode(std::span(&p, 1), std::span(&kPrompt[i], 1), cl_stepped).ok());
      }
      EXPECT_LT(nmse(cl_whole, oracle), 1e-8) << shape;
      EXPECT_LT(nmse(cl_stepped, oracle), 1e-8) << shape;
      EXPECT_EQ(argmax(cl_whole), argmax(oracle)) << shape;
    }

    engine::RunnerOptions chunked = o;
    chunked.max_batch_tokens = 5;  // prefill() splits the prompt into chunks of 5
    auto small_steps = runner("cpu", m, chunked);
    std::vector<float> in_chunks;
    engine::SequenceKv c;
    ASSERT_TRUE(small_steps->prefill(c, kPrompt, in_chunks).ok());
    EXPECT_EQ(whole, in_chunks) << shape;

    // Batched decode: a and a fresh sequence s together; then b (a's twin) alone.
    engine::SequenceKv s;
    std::vector<float> tmp;
    ASSERT_TRUE(cpu->prefill(s, std::span(kPrompt).first(4), tmp).ok());
    engine::SequenceKv* pair[2] = {&a, &s};
    const TokenId next[2] = {17, 300};
    std::vector<float> both, alone;
    ASSERT_TRUE(cpu->decode(pair, next, both).ok());
    engine::SequenceKv* only = &b;
    ASSERT_TRUE(cpu->decode(std::span(&only, 1), std::span(next, 1), alone).ok());
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), both.begin())) << shape;
  }
}

// One state slot per sequence: taken when a sequence starts, refused when all are held, freed by release (which the
// scheduler calls on preemption, cancellation and the end of a request), and a freed slot starts clean.
TEST(HybridEngine, StateSlotsAreTakenFreedAndReusedClean) {
  SynthModel m = small("qwen3.5-0.8b");
  engine::RunnerOptions o;
  o.max_sequences = 2;
  auto r = runner("cpu", m, o);
  ASSERT_TRUE(r);
  engine::KvCache& kv = r->kv_cache();
  EXPECT_EQ(kv.state_slots(), 2);
  EXPECT_EQ(kv.state_bytes_per_slot(), m.config.recurrent_state_bytes());
  EXPECT_FALSE(kv.blocks().prefix_cache_enabled());  // a hybrid model without state checkpoints
  std::vector<float> first, again, tmp;
  engine::SequenceKv a, b, c;
  ASSERT_TRUE(r->prefill(a, kPrompt, first).ok());
  ASSERT_TRUE(r->prefill(b, std::span(kPrompt).first(3), tmp).ok());
  EXPECT_EQ(kv.free_state_slots(), 0);
  Status full = r->prefill(c, kPrompt, tmp);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.to_string();
  EXPECT_EQ(c.length, 0);
  r->release(a);  // e.g. preempted or cancelled
  EXPECT_EQ(a.state_slot, -1);
  ASSERT_TRUE(r->prefill(c, kPrompt, again).ok());  // a's slot, reset at position 0
  EXPECT_EQ(first, again);
  // Positions without state (a fork or an import that carried only KV) are refused, never computed from zeros.
  engine::SequenceKv orphan;
  orphan.length = 3;
  r->release(b);
  Status st = kv.reserve(orphan, 4);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
}

// What a prefill node would send: the full-attention layers' K/V and the state, exported from one runner and imported
// into another (cpu -> cpu, and cpu -> ref as unlike devices); the next tokens equal the first runner's own.
TEST(HybridEngine, KvAndStateExportedAndImportedContinueTheSequence) {
  const bool have_opencl = ops::open_device("opencl").ok();
  std::vector<std::pair<std::string, const char*>> runs;  // (from, shape)
  for (const char* shape : {"qwen3.5-0.8b", "qwen3.5-35b-a3b"}) {
    runs.emplace_back("cpu", shape);
    if (have_opencl) runs.emplace_back("opencl", shape);  // the state read back from opencl's buffers
  }
  for (const auto& [from, shape] : runs) {
    SynthModel m = small(shape);
    auto a = runner(from, m);
    ASSERT_TRUE(a);
    engine::SequenceKv src;
    std::vector<float> logits;
    ASSERT_TRUE(a->prefill(src, kPrompt, logits).ok());
    const int n = src.length, kv_dim = m.config.kv_dim();
    std::vector<std::vector<float>> k(static_cast<size_t>(m.config.n_layers)), v = k;
    for (int l = 0; l < m.config.n_layers; ++l) {
      if (m.config.layer_kind(l).attention == AttentionKind::kLinear) {
        std::vector<float> kk(static_cast<size_t>(n * kv_dim)), vv = kk;
        EXPECT_EQ(a->export_kv(src, l, 0, n, DType::kF32, kk.data(), vv.data()).code(), StatusCode::kUnimplemented);
        continue;
      }
      k[static_cast<size_t>(l)].resize(static_cast<size_t>(n * kv_dim));
      v[static_cast<size_t>(l)].resize(static_cast<size_t>(n * kv_dim));
      ASSERT_TRUE(
          a->export_kv(src, l, 0, n, DType::kF32, k[static_cast<size_t>(l)].data(), v[static_cast<size_t>(l)].data())
              .ok());
    }
    std::vector<uint8_t> state(a->kv_cache().state_bytes_per_slot());
    ASSERT_TRUE(a->export_state(src, state.data()).ok());
    // The first runner's own continuation.
    std::vector<TokenId> want;
    std::vector<float> first_step;  // the logits after the first generated token
    engine::SequenceKv* ps = &src;
    for (int i = 0; i < 6; ++i) {
      const TokenId t = argmax(logits);
      want.push_back(t);
      ASSERT_TRUE(a->decode(std::span(&ps, 1), std::span(&t, 1), logits).ok());
      if (i == 0) first_step = logits;
    }
    std::vector<std::string> targets = {"cpu"};
    if (from == "cpu") targets.push_back("ref");
    if (from == "cpu" && have_opencl) targets.push_back("opencl");  // the state uploaded into opencl's buffers
    for (const std::string& to : targets) {
      // With the state, then (the negative control) with a zeroed state in its place: the first step's logits must
      // then depart from the source's, so the check above is one that can fail.
      for (bool carried : {true, false}) {
        auto b = runner(to, m);
        ASSERT_TRUE(b);
        engine::SequenceKv dst;
        ASSERT_TRUE(b->kv_cache().reserve(dst, n).ok());  // blocks and a state slot
        for (int l = 0; l < m.config.n_layers; ++l) {
          if (k[static_cast<size_t>(l)].empty()) continue;
          ASSERT_TRUE(b->import_kv(dst, l, 0, n, DType::kF32, k[static_cast<size_t>(l)].data(),
                                   v[static_cast<size_t>(l)].data())
                          .ok());
        }
        const std::vector<uint8_t> zeros(state.size(), 0);
        ASSERT_TRUE(b->import_state(dst, carried ? state.data() : zeros.data()).ok());
        dst.length = n;
        // Continue from the prompt's last logits (the first runner's first token), then greedily.
        std::vector<TokenId> got = {want[0]};
        std::vector<float> l2;
        engine::SequenceKv* pd = &dst;
        for (int i = 0; i < 5; ++i) {
          ASSERT_TRUE(b->decode(std::span(&pd, 1), std::span(&got.back(), 1), l2).ok());
          if (i == 0) {
            const double e = nmse(l2, first_step);
            std::printf("[ hybrid ] %s %s -> %s, %s: first step's logits nmse %.3g\n", shape, from.c_str(), to.c_str(),
                        carried ? "state carried" : "state zeroed", e);
            if (carried) {
              EXPECT_LT(e, 1e-8) << shape << " " << from << " -> " << to;
            } else {
              EXPECT_GT(e, 1e-4) << shape << " " << from << " -> " << to << ": a zeroed state changed nothing";
            }
          }
          got.push_back(argmax(l2));
        }
        if (carried) {
          EXPECT_EQ(got, want) << shape << " " << from << " -> " << to;
        }
      }
    }
    engine::SequenceKv none;
    EXPECT_EQ(a->export_state(none, state.data()).code(), StatusCode::kFailedPrecondition);
  }
}

TEST(HybridEngine, RefusesWhatItDoesNotCarry) {
  SynthModel m = small("qwen3.5-0.8b");
  auto cpu = ops::open_device("cpu");
  ASSERT_TRUE(cpu.ok());
  engine::RunnerOptions graph;
  graph.graph = true;
  auto g = engine::ModelRunner::create(**cpu, m.config, m.weights, graph);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("recurrent state"), std::string::npos) << g.status().message();
  auto r = runner("cpu", m);
  engine::SequenceKv s;
  std::vector<float> logits;
  ASSERT_TRUE(r->prefill(s, kPrompt, logits).ok());
  std::vector<float> k(1024), v(1024);
  Status ex = r->export_kv(s, 0, 0, 4, DType::kF32, k.data(), v.data());  // layer 0 is a linear layer
  EXPECT_EQ(ex.code(), StatusCode::kUnimplemented) << ex.to_string();
  // A device without the operators is refused at load, naming what is missing; opencl, vulkan and cuda have them.
  testing::RefusingDevice bare(std::move(ops::open_device("ref").value()), "without-linear", [](const ops::Op& op) {
    const bool linear = std::holds_alternative<ops::CausalConv1dOp>(op) ||
                        std::holds_alternative<ops::GatedDeltaRuleOp>(op) ||
                        std::holds_alternative<ops::SplitHeadsOp>(op);
    return linear ? std::string("no linear-attention kernels") : std::string();
  });
  const auto missing = engine::unsupported_layer_features(bare, m.config);
  ASSERT_EQ(missing.size(), 2u);
  EXPECT_EQ(missing[0], "linear-attention layers (causal_conv1d, gated_delta_rule)");
  EXPECT_EQ(missing[1], "gated attention (split_heads, sigmoid silu_mul)");
  for (const char* backend : {"opencl", "vulkan", "cuda"}) {
    auto dev = ops::open_device(backend);
    if (!dev.ok()) continue;
    for (const char* shape : {"qwen3.5-0.8b", "qwen3.5-35b-a3b"}) {
      const auto missing = engine::unsupported_layer_features(**dev, small(shape).config);
      EXPECT_TRUE(missing.empty()) << backend << " " << shape << ": " << (missing.empty() ? "" : missing.front());
    }
  }
  EXPECT_TRUE(engine::unsupported_layer_features(**cpu, m.config).empty());
}

}  // namespace
}  // namespace tessera::model
