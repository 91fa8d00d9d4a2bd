#include "bench/dataset.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>

#include "support/paths.h"

namespace tessera::bench {
namespace {

TEST(Workload, FixedIsExactAndSeeded) {
  WorkloadOptions o{
      .dataset = "fixed", .num_prompts = 5, .input_len = 10, .output_len = 7, .seed = 1, .vocab_size = 100};
  auto a = make_workload(o), b = make_workload(o);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->size(), 5u);
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].prompt.size(), 10u);
    EXPECT_EQ((*a)[i].output_len, 7);
    EXPECT_EQ((*a)[i].prompt, (*b)[i].prompt);
    EXPECT_EQ((*a)[i].arrival_s, 0.0);
    for (int32_t t : (*a)[i].prompt) EXPECT_TRUE(t >= 3 && t < 100);
  }
  o.seed = 2;
  EXPECT_NE(make_workload(o)->at(0).prompt, a->at(0).prompt);
}

TEST(Workload, PoissonArrivalsHaveTheRequestedRate) {
  WorkloadOptions o{
      .num_prompts = 2000, .input_len = 4, .output_len = 4, .request_rate = 50, .seed = 3, .vocab_size = 100};
  auto w = make_workload(o);
  ASSERT_TRUE(w.ok());
  double span = w->back().arrival_s;
  EXPECT_NEAR(1999 / span, 50.0, 5.0);
  for (size_t i = 1; i < w->size(); ++i) EXPECT_GE((*w)[i].arrival_s, (*w)[i - 1].arrival_s);
}

TEST(Workload, SharedPrefixGroupsShareTheirPrefix) {
  WorkloadOptions o{.dataset = "shared-prefix",
                    .num_prompts = 8,
                    .input_len = 20,
                    .output_len = 4,
                    .num_prefixes = 2,
                    .prefix_len = 15,
                    .seed = 4,
                    .vocab_size = 100};
  auto w = make_workload(o);
  ASSERT_TRUE(w.ok());
  auto prefix = [](const RequestSpec& r) { return std::vector<int32_t>(r.prompt.begin(), r.prompt.begin() + 15); };
  EXPECT_EQ(prefix((*w)[0]), prefix((*w)[2]));
  EXPECT_NE(prefix((*w)[0]), prefix((*w)[1]));
  EXPECT_NE((*w)[0].prompt, (*w)[2].prompt);
}

TEST(Workload, ShareGptLikeStaysInsideTheContext) {
  WorkloadOptions o{.dataset = "sharegpt-like",
                    .num_prompts = 500,
                    .input_len = 100,
                    .output_len = 100,
                    .seed = 5,
                    .vocab_size = 100,
                    .max_context = 256};
  auto w = make_workload(o);
  ASSERT_TRUE(w.ok());
  double in_sum = 0;
  for (const RequestSpec& r : *w) {
    EXPECT_LE(static_cast<int>(r.prompt.size()) + r.output_len, 256);
    in_sum += r.prompt.size();
  }
  EXPECT_NEAR(in_sum / 500, 90, 25);  // the mean, a little below 100 after clipping the tail
}

TEST(Workload, TraceFileAndErrors) {
  std::string path = testing::scratch_dir() + "/trace.jsonl";
  std::ofstream(path) << R"({"timestamp": 10.0, "input_len": 5, "output_len": 3})"
                      << "\n"
                      << R"({"timestamp": 10.5, "input_len": 8, "output_len": 2})"
                      << "\n";
  auto w = make_workload({.dataset = "trace:" + path, .num_prompts = 10, .vocab_size = 100});
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_EQ(w->size(), 2u);
  EXPECT_EQ((*w)[1].arrival_s, 0.5);
  EXPECT_EQ((*w)[1].prompt.size(), 8u);
  std::ofstream(path) << "not json\n";
  EXPECT_FALSE(make_workload({.dataset = "trace:" + path, .vocab_size = 100}).ok());
  EXPECT_FALSE(make_workload({.dataset = "trace:/nonexistent", .vocab_size = 100}).ok());
  // A named pipe without a writer is refused at once (reading it would wait forever).
  const std::string fifo = testing::scratch_dir() + "/trace.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto piped = make_workload({.dataset = "trace:" + fifo, .vocab_size = 100});
  ASSERT_FALSE(piped.ok());
  EXPECT_NE(piped.status().message().find("not a regular file"), std::string::npos) << piped.status().message();
  EXPECT_FALSE(make_workload({.dataset = "nope", .vocab_size = 100}).ok());
  EXPECT_FALSE(make_workload({.vocab_size = 0}).ok());
}

}  // namespace
}  // namespace tessera::bench
