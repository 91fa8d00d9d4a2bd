// Plots and the summary table drawn from saved sweep reports (no server): the figures are well-formed, hold
// one line per sweep and percentile, and the table gives the median and spread over repeats.
#include "bench/sweep.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "support/paths.h"
#include "support/xml_check.h"

namespace tessera::bench {
namespace {

using json = nlohmann::json;

void write(const std::string& path, const json& j) { std::ofstream(path) << j.dump(); }

json report(double rate, double ttft_ms) {
  return {{"completed", 2},
          {"failed", 0},
          {"num_prompts", 2},
          {"request_throughput", rate},
          {"output_throughput", rate * 10},
          {"median_ttft_ms", ttft_ms},
          {"p99_ttft_ms", ttft_ms * 2},
          {"median_tpot_ms", 5.0},
          {"p99_tpot_ms", 7.0},
          {"p99_e2el_ms", 100.0},
          {"ttfts", {ttft_ms / 1000, ttft_ms / 500}},
          {"itls", {{0.004, 0.006}, {0.005}}},
          {"errors", {"", ""}}};
}

TEST(Sweep, PlotsAndSummaryFromSavedReports) {
  const std::string dir = testing::scratch_dir() + "/sweep";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // Two sweeps ("a": 2 points x 2 repeats, "b": 1 point) as `bench sweep` lays them out.
  write(dir + "/a-rate-1-r1.json", report(0.9, 100));
  write(dir + "/a-rate-1-r2.json", report(1.1, 120));
  write(dir + "/a-rate-2-r1.json", report(1.8, 300));
  write(dir + "/a-rate-2-r2.json", report(1.9, 500));
  write(dir + "/b-rate-1-r1.json", report(1.0, 80));
  write(dir + "/a-sweep.json",
        {{"label", "a"},
         {"mode", "rate"},
         {"points",
          {{{"value", 1}, {"runs", {"a-rate-1-r1.json", "a-rate-1-r2.json"}}, {"load_1min", {2.5, 3.5}}},
           {{"value", 2}, {"runs", {"a-rate-2-r1.json", "a-rate-2-r2.json"}}}}}});
  write(dir + "/b-sweep.json",
        {{"label", "b"}, {"mode", "rate"}, {"points", {{{"value", 1}, {"runs", {"b-rate-1-r1.json"}}}}}});
  auto files = plot_sweeps({dir + "/a-sweep.json", dir + "/b-sweep.json"}, dir + "/plots", "x-");
  ASSERT_TRUE(files.ok()) << files.status().to_string();
  EXPECT_EQ(files->size(), 7u);  // 2 throughput curves + 2 CDFs per sweep + summary
  for (const char* name : {"x-latency-throughput.svg", "x-tpot-throughput.svg", "x-a-ttft-cdf.svg", "x-a-tpot-cdf.svg",
                           "x-b-ttft-cdf.svg", "x-b-tpot-cdf.svg"}) {
    auto text = read_file(dir + "/plots/" + name);
    ASSERT_TRUE(text.ok()) << name;
    auto x = testing::check_xml(*text);
    EXPECT_TRUE(x.ok) << name << ": " << x.error;
  }
  auto lat = testing::check_xml(*read_file(dir + "/plots/x-latency-throughput.svg"));
  std::vector<std::string> names;
  for (const auto& e : lat.elements)
    if (e.attrs.count("data-name")) names.push_back(e.attrs.at("data-name"));
  EXPECT_EQ(names, (std::vector<std::string>{"a TTFT p50", "a TTFT p99", "b TTFT p50", "b TTFT p99"}));
  auto md = read_file(dir + "/plots/x-summary.md");
  ASSERT_TRUE(md.ok());
  EXPECT_NE(md->find("| 0 | 2.5-3.5 |\n"), std::string::npos) << *md;  // point 1's load before each run
  // Point 2 of sweep a: median TTFT p50 of 300 and 500 is 400, spread 300-500.
  EXPECT_NE(md->find("| 2 | 1.85 (1.8-1.9) | 18.5 (18.0-19.0) | 400 (300-500) | 800 (600-1000) |"), std::string::npos)
      << *md;
}

TEST(Sweep, BadInputIsAnErrorNotACrash) {
  EXPECT_FALSE(plot_sweeps({}, testing::scratch_dir(), "").ok());
  EXPECT_FALSE(plot_sweeps({"/nonexistent/sweep.json"}, testing::scratch_dir(), "").ok());
  const std::string bad = testing::scratch_dir() + "/bad-sweep.json";
  std::ofstream(bad) << "{\"points\": [{\"value\": \"x\"}]}";
  EXPECT_FALSE(plot_sweeps({bad}, testing::scratch_dir(), "").ok());
  SweepOptions o;
  EXPECT_FALSE(run_sweep(o, nullptr).ok());  // no points
  o.points = {1};
  o.mode = "bogus";
  o.out_dir = testing::scratch_dir();
  EXPECT_FALSE(run_sweep(o, nullptr).ok());
  o.mode = "concurrency";
  o.points = {1.5};
  EXPECT_FALSE(run_sweep(o, nullptr).ok());
}

}  // namespace
}  // namespace tessera::bench
