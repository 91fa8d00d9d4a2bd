// The graph path: folding and the static memory plan on small recorded lists, and, on the real decode
// step, that replaying the compiled graph gives exactly what eager execution gives on the same backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "engine/model_runner.h"
#include "model/synth.h"
#include "ops/graph.h"
#include "ops/registry.h"

namespace tessera::engine {
namespace {

TEST(Graph, FoldsAnInPlaceAddFollowedByItsNormIntoOneOperator) {
  auto d = ops::open_device("ref");
  ASSERT_TRUE(d.ok());
  std::vector<std::unique_ptr<ops::Buffer>> keep;
  auto make = [&](std::initializer_list<int64_t> shape) {
    ops::Tensor t(nullptr, 0, DType::kF32, shape);
    keep.push_back(std::move((*d)->alloc(t.bytes())).value());
    t.buffer = keep.back().get();
    return t;
  };
  ops::Tensor x = make({2, 4}), delta = make({2, 4}), w = make({4}), out = make({2, 4}), other = make({2, 4});
  std::vector<ops::Op> ops = {ops::AddOp{x, delta, x}, ops::RmsNormOp{x, w, out, 1e-6f}, ops::AddOp{x, delta, other},
                              ops::RmsNormOp{x, w, out}};
  EXPECT_EQ(ops::fold_elementwise(ops), 1);
  ASSERT_EQ(ops.size(), 3u);
  const auto* fused = std::get_if<ops::AddRmsNormOp>(&ops[0]);
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->eps, 1e-6f);
  EXPECT_TRUE(std::holds_alternative<ops::AddOp>(ops[1])) << "not in place: left alone";

  // Static plan: a and c never live at the same time, so they share memory; b overlaps both.
  ops::Tensor a = make({64}), b = make({64}), c = make({64}), in = make({64});
  std::vector<ops::Op> chain = {ops::AddOp{in, in, a}, ops::AddOp{a, in, b}, ops::AddOp{b, in, c},
                                ops::AddOp{c, in, c}};
  auto g = ops::compile(chain, {a.buffer, b.buffer, c.buffer}, **d);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ((*g)->stats().scratch_bytes, 3u * 256);
  EXPECT_EQ((*g)->stats().arena_bytes, 2u * 256);
  EXPECT_EQ((*g)->remap(a).offset, (*g)->remap(c).offset);
  EXPECT_NE((*g)->remap(a).offset, (*g)->remap(b).offset);
  auto s = (*d)->create_stream();
  std::vector<float> ones(64, 1.0f), got(64);
  ASSERT_TRUE(s->upload(in, ones.data()).ok());
  ASSERT_TRUE((*g)->replay(*s).ok());
  ASSERT_TRUE(s->download((*g)->remap(c), got.data()).ok());
  EXPECT_EQ(got[0], 5.0f);  // a = 1+1, b = a+1, c = b+1, c += 1: correct although a and c share memory
}

std::vector<float> run_decode(const std::string& backend, bool graph, std::vector<int>* buckets = nullptr,
                              std::set<std::string>* kinds = nullptr) {
  auto d = ops::open_device(backend, 0, ops::DeviceOptions{2, ""});
  EXPECT_TRUE(d.ok());
  if (!d.ok()) return {};
  auto c = model::synth_shape("tiny");
  c->n_layers = 2;
  c->max_seq_len = 64;
  model::SynthModel m = model::synthesize_weights(*c, 21);
  RunnerOptions o;
  o.max_batch_tokens = 8;
  o.max_sequences = 4;
  o.kv.block_tokens = 4;
  o.graph = graph;
  auto r = ModelRunner::create(**d, m.config, m.weights, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  std::vector<SequenceKv> seqs(3);
  std::vector<float> logits, all;
  for (size_t i = 0; i < seqs.size(); ++i) {
    std::vector<TokenId> prompt = {1, static_cast<TokenId>(10 + i), 42, static_cast<TokenId>(7 * i + 3)};
    EXPECT_TRUE((*r)->prefill(seqs[i], prompt, logits).ok());
  }
  // Steps with 3 sequences (bucket 4, one padding row), then 1, then 2; each bucket replays after its first.
  const std::vector<std::vector<int>> steps = {{0, 1, 2}, {0, 1, 2}, {0, 1, 2}, {1}, {1}, {0, 2}, {0, 2}, {0, 2}};
  for (size_t step = 0; step < steps.size(); ++step) {
    std::vector<SequenceKv*> batch;
    std::vector<TokenId> toks;
    for (int i : steps[step]) {
      batch.push_back(&seqs[static_cast<size_t>(i)]);
      toks.push_back(static_cast<TokenId>((step * 31 + static_cast<size_t>(i) * 7) % 500 + 1));
    }
    EXPECT_TRUE((*r)->decode(batch, toks, logits).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  for (const auto& [b, g] : (*r)->graphs()) {
    if (buckets) buckets->push_back(static_cast<int>(b));
    if (kinds) kinds->insert(std::string(g->replayed_as()));
  }
  return all;
}

bool have_backend(const std::string& name) {
  ops::register_builtin_backends();
  auto names = ops::BackendRegistry::global().names();
  return std::find(names.begin(), names.end(), name) != names.end() && ops::open_device(name).ok();
}

// Every backend that claims graphs: the decode steps replayed from its native recording (later steps with
// new positions, lengths and slots in the same recording) give exactly the eager logits.
TEST(Graph, ReplayEqualsEagerOnEveryBackendThatRecords) {
  struct Want {
    std::string backend, kind, env;  // env: TESSERA_OPENCL_COMMAND_BUFFER for the run
  };
  const std::vector<Want> wants = {{"cpu", "cpu op list", ""},
                                   {"opencl", "cl_khr_command_buffer", ""},
                                   {"opencl", "opencl kernel list (TESSERA_OPENCL_COMMAND_BUFFER=off)", "off"},
                                   {"vulkan", "vulkan command buffer", ""}};
  int checked = 0;
  for (const Want& w : wants) {
    if (!have_backend(w.backend)) {
      std::printf("skipping %s: not available here\n", w.backend.c_str());
      continue;
    }
    if (!w.env.empty()) setenv("TESSERA_OPENCL_COMMAND_BUFFER", w.env.c_str(), 1);
    auto d = ops::open_device(w.backend);
    ASSERT_TRUE(d.ok());
    ASSERT_TRUE((*d)->info().supports_graphs) << w.backend;
    std::vector<int> buckets;
    std::set<std::string> kinds;
    std::vector<float> eager = run_decode(w.backend, false);
    std::vector<float> replay = run_decode(w.backend, true, &buckets, &kinds);
    unsetenv("TESSERA_OPENCL_COMMAND_BUFFER");
    ASSERT_EQ(eager.size(), replay.size());
    ASSERT_FALSE(eager.empty());
    EXPECT_EQ(std::memcmp(eager.data(), replay.data(), eager.size() * sizeof(float)), 0) << w.backend << " " << w.kind;
    EXPECT_EQ(buckets, (std::vector<int>{1, 2, 4})) << w.backend;
    if (w.backend == "opencl" && w.env.empty() && kinds != std::set<std::string>{w.kind}) {
      // A platform without the extension records kernel lists: still a recording, say which.
      std::printf("opencl recorded as: %s\n", kinds.begin()->c_str());
      EXPECT_EQ(kinds.begin()->rfind("opencl kernel list", 0), 0u);
    } else {
      EXPECT_EQ(kinds, std::set<std::string>{w.kind}) << w.backend;
    }
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

// The engine drives the runner through step(); in graph mode a step of single next tokens must take the
// recorded path (what `serve --graph on` relies on), while prefill chunks stay eager.
TEST(Graph, DecodeOnlyStepsGoThroughTheRecordedGraphs) {
  auto d = ops::open_device("cpu", 0, ops::DeviceOptions{2, ""});
  ASSERT_TRUE(d.ok());
  auto c = model::synth_shape("tiny");
  c->n_layers = 2;
  c->max_seq_len = 64;
  model::SynthModel m = model::synthesize_weights(*c, 21);
  RunnerOptions o;
  o.max_batch_tokens = 8;
  o.max_sequences = 2;
  o.kv.block_tokens = 4;
  o.graph = true;
  auto r = ModelRunner::create(**d, m.config, m.weights, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  SequenceKv a, b;
  std::vector<TokenId> pa = {1, 5, 9}, pb = {1, 7};
  std::vector<float> logits;
  std::vector<Segment> prefill = {{&a, pa, true}, {&b, pb, true}};
  ASSERT_TRUE((*r)->step(prefill, logits).ok());
  EXPECT_TRUE((*r)->graphs().empty()) << "a prefill step is not recorded";
  for (int i = 0; i < 3; ++i) {
    const TokenId ta = 11 + i, tb = 20 + i;
    std::vector<Segment> dec = {{&a, std::span(&ta, 1), true}, {&b, std::span(&tb, 1), true}};
    ASSERT_TRUE((*r)->step(dec, logits).ok());
  }
  ASSERT_EQ((*r)->graphs().size(), 1u);
  EXPECT_EQ((*r)->graphs().begin()->first, 2);
  EXPECT_EQ((*r)->graphs().begin()->second->replayed_as(), "cpu op list");
  EXPECT_EQ(a.length, 6);
  EXPECT_EQ(b.length, 5);
}

// ref does not record: the graph path refuses it rather than pretend.
TEST(Graph, BackendsThatCannotRecordAreRefused) {
  auto d = ops::open_device("ref");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE((*d)->info().supports_graphs);
  auto c = model::synth_shape("tiny");
  model::SynthModel m = model::synthesize_weights(*c, 21);
  RunnerOptions o;
  o.graph = true;
  auto r = ModelRunner::create(**d, m.config, m.weights, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("cannot record graphs"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tessera::engine
