// Bad spec files never crash or hang the readers: every truncation and thousands of seeded byte mutations of
// valid fleet, workload, SLO and profile files either parse or return an error with a message.
#include <gtest/gtest.h>

#include <string>

#include "base/rng.h"
#include "solver/spec_yaml.h"

namespace tessera::solver {
namespace {

const char* kFleet = R"(budget_per_hour: 40
token_budget: 1024
pools:
  - name: fast
    family: h100
    count: 4
    cost_per_hour: 4.5
    batch_limits: [16, 64]
    instance_sizes: [1, 2]
    datasheet: {peak_tflops: 989, memory_bandwidth_gb_s: 3350, memory_gb: 80, network_gb_s: 50}
)";
const char* kWorkload =
    R"(model: {dim: 64, hidden_dim: 172, n_layers: 5, n_heads: 8, n_kv_heads: 4, vocab_size: 512, max_seq_len: 512}
rate: 5
requests: 10
input: {normal: {mean: 100, stddev: 20, min: 10, max: 200}}
output: {uniform: [1, 9]}
)";
const char* kSlo = "ttft_ms: 500\ntpot_ms: 50\npercentile: 99\nattainment: 0.95\n";
const char* kProfile = R"(family: cpu
source: measured
memory_gb: 16
network_gb_s: 2
latency: {overhead_ms: 0.5, flops_per_s: 2.0e11, bytes_per_s: 5.0e10}
fit: {points: 2, mean_abs_rel_error: 0.02, max_abs_rel_error: 0.05}
prefill:
  - {tokens: 64, batch: 1, ms: 3.1}
decode:
  - {batch: 8, context: 512, ms: 9.7}
)";

// Returns true if the text parsed; an error must carry a message.
bool parse_all(const std::string& text) {
  bool any = false;
  auto check = [&](const Status& s) {
    if (s.ok()) {
      any = true;
    } else {
      EXPECT_FALSE(s.message().empty());
    }
  };
  check(parse_fleet(text, "f", "/nonexistent").status());
  check(parse_workload(text, "w", "/nonexistent").status());
  check(parse_slo(text, "s").status());
  check(parse_profile(text, "p").status());
  return any;
}

TEST(SpecFuzz, TruncationsAndMutationsNeverCrash) {
  int parsed = 0, total = 0;
  const std::string yaml_chars = ":-[]{},\n #&*!|>'\"%@`0123456789.eE+";
  Rng rng(42);
  for (const char* base : {kFleet, kWorkload, kSlo, kProfile}) {
    std::string text(base);
    ASSERT_TRUE(parse_all(text));
    for (size_t n = 0; n < text.size(); ++n) parsed += parse_all(text.substr(0, n)), ++total;
    for (int k = 0; k < 400; ++k) {
      std::string m = text;
      int edits = 1 + static_cast<int>(rng.next_u32() % 3);
      for (int e = 0; e < edits; ++e) {
        size_t at = rng.next_u32() % m.size();
        switch (rng.next_u32() % 3) {
          case 0:
            m[at] = yaml_chars[rng.next_u32() % yaml_chars.size()];
            break;
          case 1:
            m.erase(at, 1 + rng.next_u32() % 4);
            break;
          default:
            m.insert(at, 1, static_cast<char>(rng.next_u32() % 256));
            break;
        }
        if (m.empty()) m = "x";
      }
      parsed += parse_all(m), ++total;
    }
  }
  // Keys that are not strings, aliases to nothing, deep nesting, tabs.
  for (const char* odd : {"{[1, 2]: 3}", "? [a]\n: b\n", "pools: *nope\n", "a: !!binary x\n",
                          "pools: [[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]\n", "\tttft_ms: 1\n"})
    EXPECT_FALSE(parse_all(odd)) << odd;
  // Most mutations are rejected; some (a changed digit) are still valid specs.
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, total);
}

}  // namespace
}  // namespace tessera::solver
