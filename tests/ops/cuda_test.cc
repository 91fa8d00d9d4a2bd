// The cuda backend on a machine with an NVIDIA GPU (label `gpu`): every fast conformance case against ref,
// stories260K's greedy text byte for byte, expert ids out of range reported rather than read, and the operators
// that keep scratch or state (moe, linear attention, the encoder's) replayed from a CUDA graph equal to eager.
// Without the backend or a device the tests skip and say why.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "base/rng.h"

#include "base/mapped_file.h"
#include "ops/conformance/conformance.h"
#include "ops/registry.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera::ops {
namespace {

#define TS_REQUIRE_CUDA(dev)      \
  auto dev = open_device("cuda"); \
  if (!dev.ok()) GTEST_SKIP() << "no CUDA backend or device on this machine: " << dev.status().message()

TEST(Cuda, FastConformanceCasesMatchTheReference) {
  TS_REQUIRE_CUDA(dev);
  auto ref = open_device("ref");
  ASSERT_TRUE(ref.ok());
  int pass = 0, unsupported = 0;
  for (const conformance::Case& c : conformance::conformance_cases()) {
    if (c.slow) continue;
    conformance::CaseResult r = conformance::run_case(c, **ref, {dev->get()})[0];
    EXPECT_NE(r.outcome, conformance::Outcome::kFail)
        << c.op << " " << dtype_name(c.dtype) << " " << c.shape << ": " << r.detail;
    pass += r.outcome == conformance::Outcome::kPass;
    unsupported += r.outcome == conformance::Outcome::kUnsupported;
  }
  std::printf("[ cuda ] %d pass, %d unsupported\n", pass, unsupported);
}

TEST(Cuda, ReproducesLlama2cGreedyOutputByteForByte) {
  TS_REQUIRE_CUDA(dev);
  TS_REQUIRE_STORIES260K();
  auto want = read_file(testing::stories260k_dir() + "/greedy-256.txt");
  ASSERT_TRUE(want.ok());
  auto r = testing::run_process({testing::tessera_bin(), "generate", "--model", testing::stories260k_dir(),
                                 "--temperature", "0", "--max-tokens", "256", "--backend", "cuda", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, *want);
}

struct Scratch {
  Device& d;
  Stream& s;
  Rng rng{41};
  std::vector<std::unique_ptr<Buffer>> keep;
  Tensor make(DType t, std::initializer_list<int64_t> shape) {
    Tensor x(nullptr, 0, t, shape);
    keep.push_back(std::move(d.alloc(x.bytes())).value());
    x.buffer = keep.back().get();
    return x;
  }
  Tensor random(std::initializer_list<int64_t> shape, float scale = 1.0f) {
    Tensor x = make(DType::kF32, shape);
    std::vector<float> v(static_cast<size_t>(x.numel()));
    for (float& f : v) f = (rng.next_f32() * 2.0f - 1.0f) * scale;
    EXPECT_TRUE(s.upload(x, v.data()).ok());
    return x;
  }
  std::vector<uint8_t> bytes(const Tensor& t) {
    std::vector<uint8_t> b(t.bytes());
    EXPECT_TRUE(s.download(t, b.data()).ok());
    return b;
  }
};

TEST(Cuda, ExpertIdsOutOfRangeAreErrorsNotReads) {
  TS_REQUIRE_CUDA(dev);
  std::unique_ptr<Stream> s = (*dev)->create_stream();
  Scratch m{**dev, *s};
  Tensor x = m.random({2, 32}), out = m.make(DType::kF32, {2, 32}), w = m.make(DType::kQ8_0, {4, 32, 32});
  Tensor ids = m.make(DType::kI32, {2, 1}), weights = m.random({2, 1});
  for (int32_t bad : {4, -1}) {
    const int32_t experts[] = {3, bad};
    ASSERT_TRUE(s->upload(ids, experts).ok());
    ASSERT_TRUE(s->run(MoeExpertsOp{x, ids, weights, w, w, w, out}).ok());  // enqueued; the kernel flags the id
    Status st = s->synchronize();
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
    EXPECT_NE(st.message().find("expert id"), std::string::npos) << st.message();
    EXPECT_TRUE(s->synchronize().ok()) << "the flag is cleared once reported";
  }
}

// Replay must equal eager on the same backend: the moe operators (their hidden scratch sized by record()), the
// linear-attention ones (reset, so each run starts from the same state), the encoder's and the newer options.
TEST(Cuda, GraphReplayOfTheNewerOperatorsEqualsEager) {
  TS_REQUIRE_CUDA(dev);
  std::unique_ptr<Stream> s = (*dev)->create_stream();
  Scratch m{**dev, *s};
  const int64_t n = 5, dim = 64, ff = 96, experts = 8, k = 2;
  MoeRouteOp route{m.random({n, experts}, 3.0f), m.make(DType::kI32, {n, k}), m.make(DType::kF32, {n, k})};
  route.normalize = true;
  route.expert_scale = m.random({experts}, 2.0f);
  MoeExpertsOp moe{m.random({n, dim}),           route.ids, route.weights, {}, {}, m.random({experts, dim, ff}),
                   m.make(DType::kF32, {n, dim})};
  moe.gate_up = m.random({experts, 2 * ff, dim});
  moe.gate_bias = m.random({experts, ff});
  moe.down_bias = m.random({experts, dim});
  moe.act = Activation::kSwigluOai;
  const int64_t hk = 2, hv = 4, sw = 16, width = (2 * hk + hv) * sw;
  CausalConv1dOp conv{m.random({n, width}), m.random({width, 4}), m.random({3, width}), m.make(DType::kF32, {n, width}),
                      true};
  GatedDeltaRuleOp gdr{conv.out,
                       m.random({n, hv}, 4.0f),
                       m.random({n, hv}),
                       m.random({hv}),
                       m.random({hv}),
                       m.random({hv, sw, sw}),
                       m.make(DType::kF32, {n, hv, sw}),
                       static_cast<int32_t>(hk),
                       1e-6f,
                       true};
  SplitHeadsOp split{m.random({n, 4, 32}), m.make(DType::kF32, {n, 4, 16}), m.make(DType::kF32, {n, 4, 16})};
  SiluMulOp gate{m.random({n, 1}), m.random({n, dim}), m.make(DType::kF32, {n, dim}), Activation::kSigmoid};
  Tensor positions = m.make(DType::kI32, {n});
  const int32_t pos[] = {0, 3, 7, 100, 4095};
  ASSERT_TRUE(s->upload(positions, pos).ok());
  RopeOp rope{m.random({n, 4, 32}), m.random({n, 2, 32}), positions, 10000.0f, RopeLayout::kHalf};
  rope.rot_dims = 8;
  LayerNormOp norm{m.random({n, dim}, 3.0f), m.random({dim}), m.random({dim}), m.make(DType::kF32, {n, dim})};
  ActivationOp act{norm.out, m.make(DType::kF32, {n, dim}), Activation::kGeluErf};
  AttentionNonCausalOp att{m.random({n, 4, 32}), m.random({n, 2, 32}), m.random({n, 2, 32}),
                           m.make(DType::kF32, {n, 4, 32})};
  PoolOp pool{act.out, m.make(DType::kF32, {1, dim}), PoolKind::kMean};
  ScaleOp scale{pool.out, m.make(DType::kF32, {1, dim}), 0.125f};
  const std::vector<Op> ops = {route, moe, conv, gdr, split, gate, rope, norm, act, att, pool, scale};
  const std::vector<Tensor> outs = {route.ids, route.weights, moe.out, conv.out, conv.state,
                                    gdr.out,   gdr.state,     split.a, split.b,  gate.out,
                                    norm.out,  act.out,       att.out, pool.out, scale.out};
  // rope turns q and k in place: run it once eagerly and once replayed from the same starting values.
  const std::vector<uint8_t> q0 = m.bytes(rope.q), k0 = m.bytes(rope.k);
  for (const Op& op : ops) ASSERT_TRUE(s->run(op).ok()) << op_name(op);
  ASSERT_TRUE(s->synchronize().ok());
  std::vector<std::vector<uint8_t>> eager;
  for (const Tensor& t : outs) eager.push_back(m.bytes(t));
  eager.push_back(m.bytes(rope.q));
  eager.push_back(m.bytes(rope.k));
  ASSERT_TRUE(s->upload(rope.q, q0.data()).ok());
  ASSERT_TRUE(s->upload(rope.k, k0.data()).ok());
  auto rec = s->record(ops);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  ASSERT_TRUE((*rec)->replay().ok());
  ASSERT_TRUE(s->synchronize().ok());
  std::vector<std::vector<uint8_t>> replayed;
  for (const Tensor& t : outs) replayed.push_back(m.bytes(t));
  replayed.push_back(m.bytes(rope.q));
  replayed.push_back(m.bytes(rope.k));
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_EQ(eager[i], replayed[i]) << "output " << i;
}

}  // namespace
}  // namespace tessera::ops
