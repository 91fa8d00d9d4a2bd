// `tessera serve --graph on`: decode steps replayed from recorded graphs serve the same greedy text as
// single-node eager generation, on every backend that records (cpu, and opencl and vulkan where a device exists),
// with concurrent requests so that batches of several sequences (padded buckets) replay too; and a backend
// that cannot record is refused at startup with a clear message instead of silently running eagerly.
#include <gtest/gtest.h>

#include <csignal>
#include <thread>

#include "support/node_http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using testing::tessera_bin;

const std::vector<std::string> kPrompts = {"Once upon a time, there was a little girl named",
                                           "Lily went to the park with her mom and she saw",
                                           "The cat sat on the mat and looked at the big dog"};

std::string eager(const std::string& prompt, int n, const std::string& backend) {
  auto r = testing::run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--prompt", prompt,
                                 "--max-tokens", std::to_string(n), "--temperature", "0", "--no-echo", "--quiet",
                                 "--backend", backend, "--threads", "2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out.empty() ? r.out : r.out.substr(0, r.out.size() - 1);
}

class GraphServe : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { TS_REQUIRE_STORIES260K(); }
};

TEST_P(GraphServe, ConcurrentGreedyCompletionsEqualEagerGeneration) {
  const std::string backend = GetParam();
  auto probe = testing::run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend",
                                     backend, "--max-tokens", "1", "--quiet"});
  if (probe.exit_code != 0) GTEST_SKIP() << backend << " not available here: " << probe.err;
  testing::BackgroundProcess node({tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0",
                                   "--backend", backend, "--threads", "2", "--graph", "on"});
  const int port = testing::port_from_line(node.wait_for_line("listening on"));
  ASSERT_GT(port, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  constexpr int kTokens = 48;
  for (int round = 0; round < 2; ++round) {  // the second round replays every bucket the first recorded
    std::vector<std::string> got(kPrompts.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      clients.emplace_back([&, i] { got[i] = testing::complete_greedy(url, kPrompts[i], kTokens); });
    }
    for (auto& t : clients) t.join();
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      EXPECT_EQ(got[i], eager(kPrompts[i], kTokens, backend)) << backend << " round " << round << ": " << kPrompts[i];
    }
  }
  EXPECT_EQ(node.stop(SIGTERM), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, GraphServe, ::testing::Values("cpu", "opencl", "vulkan"));

TEST(GraphServeRefusal, ABackendThatCannotRecordIsRefusedAtStartup) {
  TS_REQUIRE_STORIES260K();
  auto r = testing::run_process({tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0",
                                 "--backend", "ref", "--graph", "on"},
                                30.0);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot record graphs"), std::string::npos) << r.err;
}

// `tessera bench decode-step` reports both modes per batch size and checks replay == eager itself.
TEST(BenchDecodeStep, ReportsEagerAndGraphRowsWithEqualLogits) {
  TS_REQUIRE_STORIES260K();
  auto r = testing::run_process({tessera_bin(), "bench", "decode-step", "--model", testing::stories260k_dir(),
                                 "--backend", "cpu", "--batch", "1,3", "--steps", "3", "--context", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| 1 | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 3 | "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("| NO |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| yes | cpu op list |"), std::string::npos) << r.out;
  auto bad = testing::run_process({tessera_bin(), "bench", "decode-step", "--model", testing::stories260k_dir(),
                                   "--backend", "ref", "--batch", "1", "--steps", "1"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("cannot record graphs"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace tessera
