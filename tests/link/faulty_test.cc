// The faulty endpoint: its schedule is a pure function of the spec, and each action does to real transfers
// what it promises (checked on the receiving agent's memory and notifications, not on the faulty side).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "link/agent.h"
#include "link/faulty/fault_schedule.h"
#include "link/faulty/faulty_endpoint.h"
#include "link_test_util.h"

namespace tessera::link {
namespace {

using Clock = std::chrono::steady_clock;

TEST(FaultSpec, ParsesEveryFormAndDefaults) {
  auto s = parse_fault_spec("over=shm, seed=9,delay_ms=25,drop=nth:3,corrupt=every:4,delay=first:2,disconnect=after:7");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->over, "shm");
  EXPECT_EQ(s->seed, 9u);
  EXPECT_EQ(s->delay_ms, 25);
  ASSERT_EQ(s->rules.size(), 4u);
  auto empty = parse_fault_spec("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->over, "tcp");
  EXPECT_TRUE(empty->rules.empty());
}

TEST(FaultSpec, BadItemsAreInvalidArgumentNamingTheItem) {
  for (const char* bad : {"drop", "drop=3", "drop=nth:x", "drop=nth:0", "every=nth:1", "corrupt=p:1.5",
                          "corrupt=p:", "over=faulty", "delay_ms=-1", "seed=abc", "drop=sometimes:3"}) {
    auto s = parse_fault_spec(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("expected comma-separated items"), std::string::npos) << bad;
  }
}

TEST(FaultSchedule, SelectorsPickTheOperationsTheySay) {
  auto s = *parse_fault_spec("drop=nth:3,corrupt=every:4,delay=first:2,disconnect=after:7");
  std::string got;
  for (uint64_t n = 1; n <= 9; ++n) {
    FaultDecision d = decide(s, n);
    got += d.drop ? 'X' : d.disconnect ? 'D' : d.corrupt ? 'C' : d.delay ? 'W' : '.';
  }
  EXPECT_EQ(got, "WWXC...DD");
}

TEST(FaultSchedule, ProbabilityIsSeededAndNearItsRate) {
  auto a = *parse_fault_spec("seed=1,drop=p:0.1");
  auto b = *parse_fault_spec("seed=2,drop=p:0.1");
  int hits_a = 0, same = 0;
  for (uint64_t n = 1; n <= 20000; ++n) {
    hits_a += decide(a, n).drop;
    same += decide(a, n).drop == decide(*parse_fault_spec("seed=1,drop=p:0.1"), n).drop;
  }
  EXPECT_EQ(same, 20000) << "the same spec must pick the same operations";
  EXPECT_GT(hits_a, 1800);
  EXPECT_LT(hits_a, 2200);
  int differ = 0;
  for (uint64_t n = 1; n <= 1000; ++n) differ += decide(a, n).drop != decide(b, n).drop;
  EXPECT_GT(differ, 50) << "another seed must pick other operations";
}

// A faulty agent (over `over`) connected to a plain one.
struct FaultyPair {
  std::unique_ptr<Agent> faulty, plain;
  RegionId src{}, dst{};
};

FaultyPair make_faulty_pair(const std::string& over, const std::string& rules) {
  static int serial = 0;
  ++serial;
  FaultyPair p;
  LinkOptions lo;
  lo.streams = 1;
  lo.faults = "over=" + over + ",seed=3," + rules;
  auto f = Agent::create({.name = "faulty" + std::to_string(serial), .endpoints = {"faulty"}, .link = lo});
  auto g = Agent::create({.name = "plain" + std::to_string(serial), .endpoints = {over}});
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  p.faulty = std::move(*f);
  p.plain = std::move(*g);
  EXPECT_TRUE(p.faulty->connect(p.plain->info()).ok());
  p.src = *p.faulty->allocate_region(1 << 16);
  p.dst = *p.plain->allocate_region(1 << 16);
  testing::fill_random(*p.faulty->host_bytes(p.src), 42);
  return p;
}

int differing_bytes(std::span<std::byte> a, std::span<std::byte> b, size_t n) {
  int d = 0;
  for (size_t i = 0; i < n; ++i) d += a[i] != b[i];
  return d;
}

class FaultyEndpointTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FaultyEndpointTest, CorruptFlipsOneByteOnTheWireAndLeavesTheSenderAlone) {
  auto p = make_faulty_pair(GetParam(), "corrupt=nth:2");
  auto src = *p.faulty->host_bytes(p.src);
  auto dst = *p.plain->host_bytes(p.dst);
  std::vector<std::byte> before(src.begin(), src.end());
  ASSERT_TRUE(p.faulty->write(p.plain->name(), {{p.src, 0, p.dst, 0, 4096}}).wait().ok());
  EXPECT_EQ(differing_bytes(src, dst, 4096), 0) << "operation 1 is clean";
  ASSERT_TRUE(p.faulty->write(p.plain->name(), {{p.src, 0, p.dst, 8192, 4096}}).wait().ok());
  EXPECT_EQ(differing_bytes(src, dst.subspan(8192), 4096), 1) << "operation 2 arrives with one byte flipped";
  EXPECT_EQ(std::memcmp(before.data(), src.data(), src.size()), 0) << "the sender's memory is untouched";
  ASSERT_TRUE(p.faulty->write(p.plain->name(), {{p.src, 0, p.dst, 16384, 4096}}).wait().ok());
  EXPECT_EQ(differing_bytes(src, dst.subspan(16384), 4096), 0) << "operation 3 is clean again";
}

TEST_P(FaultyEndpointTest, DropLosesTheBytesAndTheTagSilently) {
  auto p = make_faulty_pair(GetParam(), "drop=nth:1");
  auto dst = *p.plain->host_bytes(p.dst);
  Status s = p.faulty->write_with_imm(p.plain->name(), {{p.src, 0, p.dst, 0, 4096}}, 77).wait();
  EXPECT_TRUE(s.ok()) << "a dropped operation looks delivered to its sender: " << s.to_string();
  EXPECT_EQ(differing_bytes(dst, std::span<std::byte>(std::vector<std::byte>(4096).data(), 4096), 4096), 0)
      << "the receiver's memory stays zero";
  EXPECT_FALSE(p.plain->next_notification(std::chrono::milliseconds(300)).ok()) << "the tag never arrives";
  ASSERT_TRUE(p.faulty->write_with_imm(p.plain->name(), {{p.src, 0, p.dst, 0, 4096}}, 78).wait().ok());
  auto n = p.plain->next_notification(std::chrono::milliseconds(2000));
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n->tag, 78u);
}

TEST_P(FaultyEndpointTest, DisconnectFailsTheOperationUntilTheAgentReconnects) {
  auto p = make_faulty_pair(GetParam(), "disconnect=nth:2");
  ASSERT_TRUE(p.faulty->write(p.plain->name(), {{p.src, 0, p.dst, 0, 512}}).wait().ok());
  Status cut = p.faulty->write(p.plain->name(), {{p.src, 0, p.dst, 0, 512}}).wait();
  EXPECT_EQ(cut.code(), StatusCode::kUnavailable) << cut.to_string();
  EXPECT_NE(cut.message().find("injected disconnect"), std::string::npos) << cut.to_string();
  EXPECT_EQ(p.faulty->write(p.plain->name(), {{p.src, 0, p.dst, 0, 512}}).wait().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(p.faulty->connect(p.plain->info()).ok());
  EXPECT_TRUE(p.faulty->write(p.plain->name(), {{p.src, 0, p.dst, 0, 512}}).wait().ok());
}

TEST_P(FaultyEndpointTest, DelayHoldsTheOperationBack) {
  auto p = make_faulty_pair(GetParam(), "delay=nth:1,delay_ms=150");
  auto t0 = Clock::now();
  ASSERT_TRUE(p.faulty->write(p.plain->name(), {{p.src, 0, p.dst, 0, 512}}).wait().ok());
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(150));
  auto t1 = Clock::now();
  ASSERT_TRUE(p.faulty->write(p.plain->name(), {{p.src, 0, p.dst, 0, 512}}).wait().ok());
  EXPECT_LT(Clock::now() - t1, std::chrono::milliseconds(150));
}

INSTANTIATE_TEST_SUITE_P(Over, FaultyEndpointTest, ::testing::Values("tcp", "shm"));

TEST(FaultyEndpoint, ABadSpecStopsTheAgentFromStarting) {
  LinkOptions lo;
  lo.faults = "corrupt=often";
  auto a = Agent::create({.name = "badfaults", .endpoints = {"faulty"}, .link = lo});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("corrupt=often"), std::string::npos) << a.status().to_string();
}

TEST(FaultyEndpoint, CountsWhatItInjected) {
  FaultCounts before = faulty_counts();
  auto p = make_faulty_pair("tcp", "corrupt=every:2");
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.faulty->write(p.plain->name(), {{p.src, 0, p.dst, 0, 64}}).wait().ok());
  FaultCounts after = faulty_counts();
  EXPECT_EQ(after.operations - before.operations, 4u);
  EXPECT_EQ(after.corrupted - before.corrupted, 2u);
}

}  // namespace
}  // namespace tessera::link
