// `tessera bench serve` against a real `tessera serve`: every request completes and the report carries
// vLLM's field names with consistent numbers.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "support/paths.h"
#include "support/process.h"
#include "support/xml_check.h"

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

// A tiny sweep over two request rates: one report per run with the requested rate, the index, and
// well-formed plots; then `bench plot` redraws them from the saved files alone.
TEST(BenchSweep, TinySweepWritesReportsIndexAndPlots) {
  TS_REQUIRE_STORIES260K();
  testing::BackgroundProcess server({tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0"});
  int port = testing::port_from_line(server.wait_for_line("listening on"));
  ASSERT_GT(port, 0);
  const std::string dir = testing::scratch_dir() + "/sweep-e2e";
  std::filesystem::remove_all(dir);
  auto r = testing::run_process({tessera_bin(), "bench", "sweep", "--url", "http://127.0.0.1:" + std::to_string(port),
                                 "--num-prompts", "6", "--input-len", "24", "--output-len", "8", "--request-rates",
                                 "20,100", "--seed", "3", "--label", "tiny", "--out-dir", dir},
                                120);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto index = nlohmann::json::parse(*read_file(dir + "/tiny-sweep.json"));
  EXPECT_EQ(index["mode"], "rate");
  ASSERT_EQ(index["points"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(index["points"][i]["runs"].size(), 1u);
    auto j = nlohmann::json::parse(*read_file(dir + "/" + index["points"][i]["runs"][0].get<std::string>()));
    EXPECT_EQ(j["request_rate"].get<double>(), i == 0 ? 20.0 : 100.0);
    EXPECT_EQ(j["seed"].get<int>(), 3 + static_cast<int>(i));  // fresh prompts per point: no prefix-cache reuse
    EXPECT_EQ(j["completed"], 6);
    EXPECT_EQ(j["total_output_tokens"], 6 * 8);
  }
  for (const char* f : {"tiny-latency-throughput.svg", "tiny-tpot-throughput.svg", "tiny-tiny-ttft-cdf.svg",
                        "tiny-tiny-tpot-cdf.svg", "tiny-summary.md"}) {
    auto text = read_file(dir + "/" + f);
    ASSERT_TRUE(text.ok()) << f;
    if (std::string(f).ends_with(".svg")) {
      auto x = testing::check_xml(*text);
      EXPECT_TRUE(x.ok) << f << ": " << x.error;
      EXPECT_NE(text->find("<polyline"), std::string::npos) << f;
    }
  }
  auto replot = testing::run_process(
      {tessera_bin(), "bench", "plot", dir + "/tiny-sweep.json", "--out-dir", dir + "/again", "--prefix", "p-"});
  ASSERT_EQ(replot.exit_code, 0) << replot.err;
  EXPECT_EQ(*read_file(dir + "/again/p-latency-throughput.svg"), *read_file(dir + "/tiny-latency-throughput.svg"));
  EXPECT_EQ(server.stop(SIGTERM), 0);
}

TEST(BenchServe, UnreachableServerIsAClearError) {
  auto r = testing::run_process({tessera_bin(), "bench", "serve", "--url", "http://127.0.0.1:1", "--num-prompts", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot reach"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera
