// Placement search: constraints, the objective, determinism, and the scalable search against the
// exhaustive optimum on random small fleets.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "base/rng.h"
#include "model/synth.h"
#include "solver/search.h"

namespace tessera::solver {
namespace {

model::ModelConfig llama7b() {
  model::ModelConfig c;
  c.dim = 4096, c.hidden_dim = 11008, c.n_layers = 32, c.n_heads = 32, c.n_kv_heads = 32;
  c.vocab_size = 32000, c.max_seq_len = 4096, c.head_dim = 128;
  return c;
}

Pool make_pool(const std::string& name, int count, double cost, double tflops, double bw_gb_s, double mem_gb,
               double net_gb_s, std::vector<int> batches) {
  Datasheet d;
  d.peak_flops = tflops * 1e12;
  d.memory_bandwidth = bw_gb_s * 1e9;
  d.memory_bytes = mem_gb * 1e9;
  d.network_bandwidth = net_gb_s * 1e9;
  Pool p;
  p.name = name;
  p.count = count;
  p.cost_per_hour = cost;
  p.profile = profile_from_datasheet(name, d);
  p.batch_limits = std::move(batches);
  return p;
}

Workload workload(double rate, int requests, uint64_t seed) {
  Workload w;
  w.model.config = llama7b();
  w.rate = rate;
  w.requests = requests;
  w.seed = seed;
  w.input.kind = LengthDist::Kind::kUniform, w.input.min = 128, w.input.max = 1024;
  w.output.kind = LengthDist::Kind::kUniform, w.output.min = 16, w.output.max = 128;
  return w;
}

Problem random_problem(uint64_t seed) {
  Rng rng(seed * 7919 + 13);
  auto uni = [&](double lo, double hi) { return lo + (hi - lo) * rng.next_f32(); };
  Fleet f;
  int pools = 2 + static_cast<int>(rng.next_u32() % 2);
  for (int i = 0; i < pools; ++i) {
    int count = 1 + static_cast<int>(rng.next_u32() % (pools == 2 ? 4 : 3));
    std::vector<int> batches = rng.next_u32() % 2 ? std::vector<int>{16, 64} : std::vector<int>{32};
    f.pools.push_back(make_pool("p" + std::to_string(i), count, uni(0.5, 5), uni(100, 1000), uni(800, 3500),
                                std::vector<double>{32, 48, 64, 80}[rng.next_u32() % 4], uni(10, 100), batches));
  }
  Slo slo{0.8, 0.05, 90, 0.9};
  auto p = Problem::make(f, workload(uni(20, 120), 200, seed), slo);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return *p;
}

TEST(Search, ScalableReachesTheExhaustiveOptimumOnRandomSmallFleets) {
  int exact = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Problem p = random_problem(seed);
    auto t0 = std::chrono::steady_clock::now();
    auto ex = exhaustive_search(p);
    auto t1 = std::chrono::steady_clock::now();
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    auto sc = scalable_search(p, SearchOptions{});
    auto t2 = std::chrono::steady_clock::now();
    ASSERT_TRUE(sc.ok()) << sc.status().to_string();
    const PlanEval& a = ex->best;
    const PlanEval& b = sc->best;
    std::printf(
        "fleet %2llu: rate %5.1f  exhaustive %-60s gpc %.3f att %.3f (%ld sims, %.2fs) | scalable %-60s gpc %.3f att "
        "%.3f (%ld sims, %ld probes, %.2fs)\n",
        static_cast<unsigned long long>(seed), p.rate, describe_plan(p, a.plan).c_str(), a.goodput_per_cost,
        a.report.attainment, ex->evaluations, std::chrono::duration<double>(t1 - t0).count(),
        describe_plan(p, b.plan).c_str(), b.goodput_per_cost, b.report.attainment, sc->evaluations, sc->probes,
        std::chrono::duration<double>(t2 - t1).count());
    EXPECT_EQ(a.report.meets_slo, b.report.meets_slo) << "fleet " << seed;
    if (a.report.meets_slo) {
      EXPECT_GE(b.goodput_per_cost, 0.98 * a.goodput_per_cost) << "fleet " << seed;
    } else {
      EXPECT_TRUE(ex->fallback && sc->fallback);
      EXPECT_GE(b.report.attainment, a.report.attainment - 0.02) << "fleet " << seed;
    }
    exact += a.plan == b.plan;
  }
  std::printf("scalable search found the exhaustive plan itself on %d of 20 fleets\n", exact);
}

}  // namespace
}  // namespace tessera::solver

namespace tessera::solver {
namespace {

TEST(Search, ConstraintsAreChecked) {
  Problem p = random_problem(3);
  Plan plan;
  plan.pools.assign(p.fleet.pools.size(), PoolPlacement{});
  EXPECT_NE(check_plan(p, plan).message().find("no pool serves prefill"), std::string::npos);
  plan.pools[0] = {Role::kPrefill, 1, 1, 16};
  EXPECT_NE(check_plan(p, plan).message().find("needs a decode pool"), std::string::npos);
  plan.pools[0] = {Role::kBoth, p.fleet.pools[0].count + 1, 1, 16};
  EXPECT_NE(check_plan(p, plan).message().find("exceed"), std::string::npos);
  plan.pools[0] = {Role::kBoth, 1, 1, 16};
  EXPECT_TRUE(check_plan(p, plan).ok());
  p.fleet.budget_per_hour = p.fleet.pools[0].cost_per_hour / 2;
  EXPECT_NE(check_plan(p, plan).message().find("budget"), std::string::npos);
  // A model larger than the device.
  Problem q = random_problem(3);
  q.cost.weight_bytes = 1e12;
  EXPECT_NE(check_plan(q, plan).message().find("does not fit"), std::string::npos);
  EXPECT_EQ(exhaustive_search(q).status().code(), StatusCode::kFailedPrecondition);
}

TEST(Search, HomogeneousKeepsToOneFamily) {
  Problem p = random_problem(1);  // three pools of three families
  ASSERT_GE(p.fleet.pools.size(), 2u);
  Plan two;
  two.pools.assign(p.fleet.pools.size(), PoolPlacement{});
  two.pools[0] = {Role::kPrefill, 1, 1, p.fleet.pools[0].batch_limits[0]};
  two.pools[1] = {Role::kDecode, 1, 1, p.fleet.pools[1].batch_limits[0]};
  EXPECT_TRUE(check_plan(p, two).ok());
  p.homogeneous = true;
  EXPECT_NE(check_plan(p, two).message().find("more than one device family"), std::string::npos);
  auto ex = exhaustive_search(p);
  ASSERT_TRUE(ex.ok());
  int used = 0;
  for (const PoolPlacement& pp : ex->best.plan.pools) used += pp.role != Role::kIdle;
  EXPECT_EQ(used, 1);
}

TEST(Search, DeterministicForASeedAndRespectsTheBudget) {
  Problem p = random_problem(2);
  auto a = scalable_search(p, SearchOptions{});
  auto b = scalable_search(p, SearchOptions{});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->best.plan == b->best.plan);
  EXPECT_EQ(a->best.report.attainment, b->best.report.attainment);
  EXPECT_EQ(a->evaluations, b->evaluations);
  double cap = a->best.cost_per_hour * 0.7;
  p.fleet.budget_per_hour = cap;
  auto c = scalable_search(p, SearchOptions{});
  ASSERT_TRUE(c.ok());
  EXPECT_LE(c->best.cost_per_hour, cap + 1e-9);
}

TEST(Search, FallbackWhenNothingMeetsTheSlo) {
  Problem p = random_problem(4);
  p.slo.tpot_s = 1e-4;  // no device decodes a 7B model in 0.1 ms
  auto ex = exhaustive_search(p);
  auto sc = scalable_search(p, SearchOptions{});
  ASSERT_TRUE(ex.ok() && sc.ok());
  EXPECT_TRUE(ex->fallback);
  EXPECT_TRUE(sc->fallback);
  EXPECT_NE(sc->note.find("no plan meets the SLO"), std::string::npos);
  EXPECT_FALSE(sc->best.report.meets_slo);
}

}  // namespace
}  // namespace tessera::solver

namespace tessera::solver {
namespace {

// gpt-oss-20b (half its layers sliding over 128 positions) on 48 GB devices: the KV capacity counts the full layers'
// 24576 bytes a position (the sliding ones keep their windows, a per-sequence cost the simulator adds), twice the
// positions of the 49152 bytes of every layer; an instance's capacity is what fits beside the weights.
TEST(Search, SlidingLayersThatKeepTheirWindowsLeaveTheCapacityToTheFullLayers) {
  Fleet f;
  f.pools.push_back(make_pool("mid", 2, 1.0, 300, 1500, 48, 25, {32}));
  Workload w = workload(2, 100, 1);
  w.model.config = model::synth_shape("gpt-oss-20b").value();
  w.model.weight_bytes = 0.5625;
  auto p = Problem::make(f, w, Slo{2.0, 0.1, 90, 0.9});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const double usable = 48e9 * p->fleet.memory_utilization - p->cost.weight_bytes;
  EXPECT_DOUBLE_EQ(kv_capacity_tokens(*p, p->fleet.pools[0], 1), std::floor(usable / (12 * 2048)));
  EXPECT_DOUBLE_EQ(p->cost.held_positions(1024), 1024 + 160);
}

TEST(Search, TensorParallelWhenOneDeviceCannotHoldTheModel) {
  // 13.5 GB of weights on 12 GB devices: the smallest instance that fits is two devices.
  Fleet f;
  f.pools.push_back(make_pool("small", 4, 1.0, 300, 1500, 12, 25, {32}));
  f.pools[0].profile.interconnect_bandwidth = 100e9;
  auto p = Problem::make(f, workload(2, 100, 1), Slo{2.0, 0.1, 90, 0.9});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_LT(kv_capacity_tokens(*p, p->fleet.pools[0], 1), 1);
  EXPECT_GT(kv_capacity_tokens(*p, p->fleet.pools[0], 2), 2048);
  std::vector<PoolConfig> configs = pool_configs(*p, 0);
  ASSERT_FALSE(configs.empty());
  for (const PoolConfig& c : configs) EXPECT_EQ(c.tp, 2);
  auto ex = exhaustive_search(*p);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_EQ(ex->best.plan.pools[0].tp, 2);
  EXPECT_TRUE(ex->best.report.meets_slo);
  auto sc = scalable_search(*p, SearchOptions{});
  ASSERT_TRUE(sc.ok());
  EXPECT_TRUE(sc->best.plan == ex->best.plan);
  // A single-device plan is rejected by the memory constraint.
  Plan one;
  one.pools = {{Role::kBoth, 1, 1, 32}};
  EXPECT_NE(check_plan(*p, one).message().find("does not fit"), std::string::npos);
}

}  // namespace
}  // namespace tessera::solver
