// The measuring half of `tessera link bench` (src/link/bench.h, src/link/raw_tcp.h): size specs, slots and
// statistics; the transfer loop between two agents moves the bytes it claims to; the raw TCP streams and
// sink exchange rounds of exactly the bytes announced.
#include "link/bench.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "link/raw_tcp.h"
#include "link_test_util.h"

namespace tessera::link {
namespace {

TEST(LinkBenchSizes, RangesArePowersOfTwoAndListsAreTakenAsWritten) {
  auto range = parse_byte_sizes("4K..1M");
  ASSERT_TRUE(range.ok()) << range.status().to_string();
  EXPECT_EQ(*range, (std::vector<uint64_t>{4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576}));
  auto list = parse_byte_sizes("4K,1M,64M,3");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(*list, (std::vector<uint64_t>{4096, 1 << 20, 64 << 20, 3}));
  EXPECT_EQ(*parse_byte_size("2G"), uint64_t{2} << 30);
  for (const char* bad : {"", "0", "4X", "abc", "-1", "4K,", "1M..4K", "K"}) {
    EXPECT_FALSE(parse_byte_sizes(bad).ok()) << bad;
  }
  EXPECT_NE(parse_byte_sizes("1M..4K").status().message().find("runs backwards"), std::string::npos);
}

TEST(LinkBenchSizes, HumanNamesUseTheLargestExactUnit) {
  EXPECT_EQ(human_bytes(1 << 20), "1M");
  EXPECT_EQ(human_bytes(256u << 20), "256M");
  EXPECT_EQ(human_bytes(4096), "4K");
  EXPECT_EQ(human_bytes((1 << 20) + 1024), "1025K");
  EXPECT_EQ(human_bytes(1000), "1000");
}

TEST(LinkBenchSizes, SlotsWrapInsideTheRegion) {
  EXPECT_EQ(slot_offset(0, 4096, 16384), 0u);
  EXPECT_EQ(slot_offset(3, 4096, 16384), 12288u);
  EXPECT_EQ(slot_offset(4, 4096, 16384), 0u);
  EXPECT_EQ(slot_offset(7, 1 << 20, 4096), 0u) << "a size larger than the region always uses its start";
}

TEST(LinkBenchStats, PercentileAndSpreadOfUnsortedValues) {
  const std::vector<double> v = {5, 1, 4, 2, 3};
  EXPECT_EQ(percentile(v, 0.5), 3);
  EXPECT_EQ(percentile(v, 0.99), 5);
  EXPECT_EQ(percentile(v, 0), 1);
  EXPECT_EQ(percentile({}, 0.5), 0);
  const Spread s = spread({0.9, 1.1, 1.0, 1.4});
  EXPECT_EQ(s.median, 1.1);  // the upper median of an even count
  EXPECT_EQ(s.lo, 0.9);
  EXPECT_EQ(s.hi, 1.4);
}

TEST(LinkBenchTransfers, WritesAndReadsMoveTheBytesAndTimeEveryTransfer) {
  for (const char* endpoint : {"shm", "tcp"}) {
    SCOPED_TRACE(endpoint);
    testing::AgentPair p = testing::make_pair(endpoint);
    constexpr uint64_t kRegion = 1 << 20, kSize = 64 << 10;
    auto local = p.a->allocate_region(kRegion);
    auto remote = p.b->allocate_region(kRegion);
    ASSERT_TRUE(local.ok() && remote.ok());
    std::span<std::byte> src = *p.a->host_bytes(*local), dst = *p.b->host_bytes(*remote);
    testing::fill_random(src, 7);
    std::memset(dst.data(), 0, dst.size());
    const TransferPattern pattern{2, 3, 0.05, false};
    auto w = measure_transfers(*p.a, p.b->info().name, *local, *remote, kRegion, kSize, pattern);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_GT(w->gbps, 0);
    EXPECT_GE(w->latency_ms.size(), 4u) << "at least 4 transfers, each timed";
    // 4 transfers of 2 assignments cover the first 8 slots at least.
    EXPECT_EQ(std::memcmp(src.data(), dst.data(), 8 * kSize), 0);

    testing::fill_random(dst, 8);
    auto r = measure_transfers(*p.a, p.b->info().name, *local, *remote, kRegion, kSize, {1, 1, 0.0, true});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->latency_ms.size(), 4u) << "no measuring time: exactly the 4 minimum transfers";
    EXPECT_EQ(std::memcmp(src.data(), dst.data(), 4 * kSize), 0) << "a read brings the peer's bytes here";

    auto bad = measure_transfers(*p.a, "nobody", *local, *remote, kRegion, kSize, pattern);
    EXPECT_FALSE(bad.ok()) << "an unknown peer is an error, not a rate";
  }
}

TEST(LinkBenchTransfers, MemcpyCeilingCopiesTheSameSlots) {
  std::vector<std::byte> src(1 << 20), dst(1 << 20);
  testing::fill_random(src, 3);
  EXPECT_GT(measure_memcpy(src.data(), dst.data(), src.size(), 4096, {4, 1, 0.01, false}), 0);
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), 4 * 4096), 0);
}

TEST(RawTcp, StreamsDeliverEachRoundToTheSinkAndGetItAcknowledged) {
  auto sink = RawTcpSink::listen(4 << 20, 2);
  ASSERT_TRUE(sink.ok()) << sink.status().to_string();
  int stop[2];
  ASSERT_EQ(pipe(stop), 0);
  std::thread server([&] { (*sink)->serve_until(stop[0]); });
  {
    RawTcpStreams streams;
    EXPECT_FALSE(streams.round(nullptr, 0, 1, 1).ok()) << "not connected yet";
    ASSERT_TRUE(streams.connect_to((*sink)->port(), 2).ok());
    std::vector<std::byte> src(1 << 20);
    testing::fill_random(src, 5);
    for (uint64_t total : {uint64_t{8} << 20, uint64_t{1} << 20}) {
      auto rate = streams.round(src.data(), src.size(), 64 << 10, total);
      ASSERT_TRUE(rate.ok()) << rate.status().to_string();
      EXPECT_GT(*rate, 0);
    }
  }
  close(stop[1]);  // the sink stops accepting
  server.join();
  sink->reset();  // closes its connections, joins their threads
  close(stop[0]);

  RawTcpStreams nobody;
  EXPECT_FALSE(nobody.connect_to(1, 1).ok()) << "nothing listens on port 1";
}

}  // namespace
}  // namespace tessera::link
