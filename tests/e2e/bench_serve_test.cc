// `tessera bench serve` against a real `tessera serve`: every request completes and the report carries
// vLLM's field names with consistent numbers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using testing::tessera_bin;

TEST(BenchServe, ProducesAVllmStyleReport) {
  TS_REQUIRE_STORIES260K();
  testing::BackgroundProcess server({tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0"});
  int port = testing::port_from_line(server.wait_for_line("listening on"));
  ASSERT_GT(port, 0);
  std::string out = testing::scratch_dir() + "/result.json";
  auto r = testing::run_process({tessera_bin(),
                                 "bench",
                                 "serve",
                                 "--url",
                                 "http://127.0.0.1:" + std::to_string(port),
                                 "--dataset",
                                 "shared-prefix",
                                 "--num-prompts",
                                 "24",
                                 "--input-len",
                                 "40",
                                 "--output-len",
                                 "12",
                                 "--request-rate",
                                 "200",
                                 "--max-concurrency",
                                 "8",
                                 "--goodput",
                                 "ttft:5000,tpot:1000",
                                 "--seed",
                                 "7",
                                 "--out",
                                 out},
                                120);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto j = nlohmann::json::parse(*read_file(out));
  EXPECT_EQ(j["completed"], 24);
  EXPECT_EQ(j["total_input_tokens"], 24 * 40);
  EXPECT_EQ(j["total_output_tokens"], 24 * 12);
  for (const char* key : {"request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
                          "mean_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "request_goodput", "duration"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_GT(j[key].get<double>(), 0.0) << key;
  }
  EXPECT_LE(j["median_ttft_ms"].get<double>(), j["p99_ttft_ms"].get<double>());
  EXPECT_EQ(j["ttfts"].size(), 24u);
  EXPECT_EQ(server.stop(SIGTERM), 0);
}

TEST(BenchServe, UnreachableServerIsAClearError) {
  auto r = testing::run_process({tessera_bin(), "bench", "serve", "--url", "http://127.0.0.1:1", "--num-prompts", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot reach"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera
