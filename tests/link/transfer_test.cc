// Correctness of batched transfers on every endpoint: random batches (unaligned, zero-length, split into
// tiny chunks, backpressured), checked byte for byte and by checksum against a model of what must land;
// immediate tags exactly once and after their data; rejected accesses touch no memory.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "link/checksum.h"
#include "link/endpoint.h"
#include "link/internal/wire.h"
#include "link_test_util.h"

namespace tessera::link {
namespace {

using testing::AgentPair;
using testing::FakeDevice;
using testing::fill_random;

enum class Memory { kShared, kRegistered, kDevice };

struct Case {
  std::string endpoint;
  OpKind op;
  uint64_t split;
  Memory memory;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const char* mem = c.memory == Memory::kShared ? "shared" : c.memory == Memory::kRegistered ? "registered" : "device";
  return c.endpoint + "_" + std::string(op_kind_name(c.op)) + "_split" + std::to_string(c.split) + "_" + mem;
}

class RandomBatchTest : public ::testing::TestWithParam<Case> {};

// A region on `agent` of `n` random bytes, in the memory kind under test. Returns its id and a handle to the
// bytes (host span or device vector).
struct TestRegion {
  RegionId id{};
  std::vector<std::byte> owned;        // registered memory
  std::shared_ptr<FakeDevice> device;  // device memory
  std::span<std::byte> bytes;
};

TestRegion make_region(Agent& agent, Memory memory, uint64_t n, uint64_t seed) {
  TestRegion r;
  if (memory == Memory::kShared) {
    r.id = *agent.allocate_region(n);
    r.bytes = *agent.host_bytes(r.id);
  } else if (memory == Memory::kRegistered) {
    r.owned.resize(n);
    r.id = *agent.register_region(r.owned.data(), n);
    r.bytes = r.owned;
  } else {
    r.device = std::make_shared<FakeDevice>(n);
    r.id = *agent.register_device_region(r.device);
    r.bytes = r.device->bytes();
  }
  fill_random(r.bytes, seed);
  return r;
}

TEST_P(RandomBatchTest, RandomBatchesLandExactly) {
  const Case c = GetParam();
  if (c.endpoint == "ucx" && std::getenv("UCX_TLS") == nullptr) {
    // Under the parallel ctest run, UCX's default transport mix stalled a split-777 batch for minutes (not
    // diagnosed; see the closing note of 2026-11-30). These cases run in link_ucx_over_tcp and
    // link_ucx_over_posix, which name the transports.
    GTEST_SKIP() << "ucx random batches run with an explicit UCX_TLS (link_ucx_over_tcp, link_ucx_over_posix)";
  }
  LinkOptions link;
  link.streams = 3;
  link.split_threshold = c.split;
  link.max_inflight_bytes = 256 << 10;  // small: the backpressure queue is exercised
  AgentPair p = testing::make_pair(c.endpoint, link);
  constexpr uint64_t kBytes = 1 << 20;
  TestRegion local = make_region(*p.a, c.memory, kBytes, 1);
  TestRegion remote = make_region(*p.b, c.memory, kBytes, 2);
  std::mt19937_64 rng(42);
  for (int round = 0; round < 12; ++round) {
    // Destination ranges must not overlap (chunks land in any order); sources may.
    const bool is_read = c.op == OpKind::kRead;
    std::vector<Assignment> batch;
    std::vector<std::pair<uint64_t, uint64_t>> used;  // destination [begin, end)
    int n = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) {
      uint64_t len = rng() % 5 == 0 ? 0 : rng() % 70001;
      uint64_t dst = rng() % (kBytes - len + 1), src = rng() % (kBytes - len + 1);
      bool overlaps =
          std::any_of(used.begin(), used.end(), [&](auto& u) { return dst < u.second && u.first < dst + len; });
      if (overlaps) continue;
      used.emplace_back(dst, dst + len);
      batch.push_back(is_read ? Assignment{local.id, dst, remote.id, src, len}
                              : Assignment{local.id, src, remote.id, dst, len});
    }
    std::vector<std::byte> expect(is_read ? local.bytes.begin() : remote.bytes.begin(),
                                  is_read ? local.bytes.end() : remote.bytes.end());
    for (const Assignment& a : batch) {
      if (is_read) {
        std::memcpy(expect.data() + a.local_offset, remote.bytes.data() + a.remote_offset, a.length);
      } else {
        std::memcpy(expect.data() + a.remote_offset, local.bytes.data() + a.local_offset, a.length);
      }
    }
    TransferFuture f = is_read ? p.a->read(p.b->name(), batch) : p.a->write(p.b->name(), batch);
    ASSERT_TRUE(f.wait_for(std::chrono::seconds(20))) << "transfer hung";
    ASSERT_TRUE(f.status().ok()) << f.status().to_string();
    std::span<std::byte> got = is_read ? local.bytes : remote.bytes;
    ASSERT_EQ(checksum64(got.data(), got.size()), checksum64(expect.data(), expect.size())) << "round " << round;
    ASSERT_EQ(0, std::memcmp(got.data(), expect.data(), expect.size())) << "round " << round;
  }
}

// Every registered endpoint: shm and tcp always, ucx where UCX was found at build time.
std::vector<std::string> endpoints() {
  register_builtin_endpoints();
  std::vector<std::string> names = endpoint_names();
  std::erase(names, "faulty");  // a wrapper over the others, tested in faulty_test.cc
  return names;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const std::string& ep : endpoints()) {
    for (OpKind op : {OpKind::kRead, OpKind::kWrite}) {
      for (uint64_t split : {uint64_t{1} << 20, uint64_t{777}}) {
        for (Memory m : {Memory::kShared, Memory::kRegistered, Memory::kDevice}) {
          if (split == 777 && m != Memory::kShared) continue;
          cases.push_back({ep, op, split, m});
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Endpoints, RandomBatchTest, ::testing::ValuesIn(all_cases()), case_name);

class EndpointTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EndpointTest, ChoosesTheRequestedEndpoint) {
  AgentPair p = testing::make_pair(GetParam());
  EXPECT_EQ(*p.a->endpoint_to(p.b->name()), GetParam());
  // The accepting side can start transfers towards the connector, too.
  RegionId ra = *p.a->allocate_region(100), rb = *p.b->allocate_region(100);
  fill_random(*p.b->host_bytes(rb), 9);
  ASSERT_TRUE(p.b->write(p.a->name(), {{rb, 0, ra, 0, 100}}).wait().ok());
  EXPECT_EQ(0, std::memcmp(p.a->host_bytes(ra)->data(), p.b->host_bytes(rb)->data(), 100));
}

TEST_P(EndpointTest, ImmediateTagsArriveOnceAndAfterTheirData) {
  LinkOptions link;
  link.split_threshold = 4096;
  AgentPair p = testing::make_pair(GetParam(), link);
  constexpr int kOps = 40;
  constexpr uint64_t kSlot = 64 << 10;
  RegionId src = *p.a->allocate_region(kSlot * kOps), dst = *p.b->allocate_region(kSlot * kOps);
  fill_random(*p.a->host_bytes(src), 5);
  std::span<std::byte> s = *p.a->host_bytes(src), d = *p.b->host_bytes(dst);
  std::vector<TransferFuture> futures;
  for (int i = 0; i < kOps; ++i) {
    futures.push_back(p.a->write_with_imm(p.b->name(), {{src, i * kSlot, dst, i * kSlot, kSlot}}, 1000 + i));
  }
  std::multiset<uint64_t> tags;
  for (int i = 0; i < kOps; ++i) {
    auto n = p.b->next_notification(std::chrono::seconds(10));
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    EXPECT_EQ(n->peer, p.a->name());
    uint64_t slot = n->tag - 1000;
    ASSERT_LT(slot, kOps);
    // The tag is only delivered once every byte of its write is in place.
    EXPECT_EQ(0, std::memcmp(d.data() + slot * kSlot, s.data() + slot * kSlot, kSlot)) << "tag " << n->tag;
    tags.insert(n->tag);
  }
  for (auto& f : futures) EXPECT_TRUE(f.wait().ok());
  EXPECT_EQ(tags.size(), static_cast<size_t>(kOps));
  for (int i = 0; i < kOps; ++i) EXPECT_EQ(tags.count(1000 + i), 1u);
  EXPECT_EQ(p.b->next_notification(std::chrono::milliseconds(200)).status().code(), StatusCode::kDeadlineExceeded);
  // An empty batch still delivers its tag.
  ASSERT_TRUE(p.a->write_with_imm(p.b->name(), {}, 7).wait().ok());
  EXPECT_EQ(p.b->next_notification(std::chrono::seconds(5))->tag, 7u);
}

TEST_P(EndpointTest, RejectedAccessTouchesNoMemory) {
  AgentPair p = testing::make_pair(GetParam());
  RegionId la = *p.a->allocate_region(4096), rb = *p.b->allocate_region(4096);
  fill_random(*p.a->host_bytes(la), 1);
  fill_random(*p.b->host_bytes(rb), 2);
  std::vector<std::byte> local_before(p.a->host_bytes(la)->begin(), p.a->host_bytes(la)->end());
  std::vector<std::byte> remote_before(p.b->host_bytes(rb)->begin(), p.b->host_bytes(rb)->end());
  auto unchanged = [&] {
    EXPECT_EQ(0, std::memcmp(p.a->host_bytes(la)->data(), local_before.data(), 4096));
    EXPECT_EQ(0, std::memcmp(p.b->host_bytes(rb)->data(), remote_before.data(), 4096));
  };
  const std::string b = p.b->name();
  // Remote out of bounds (past the end, and offset + length overflowing), in a batch with a valid piece.
  EXPECT_EQ(p.a->write(b, {{la, 0, rb, 4000, 200}}).wait().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(p.a->write(b, {{la, 0, rb, ~uint64_t{0} - 10, 100}}).wait().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(p.a->read(b, {{la, 0, rb, 4090, 7}}).wait().code(), StatusCode::kOutOfRange);
  unchanged();
  // Unregistered remote region.
  EXPECT_EQ(p.a->write(b, {{la, 0, RegionId{999}, 0, 10}}).wait().code(), StatusCode::kNotFound);
  EXPECT_EQ(p.a->read(b, {{la, 0, RegionId{999}, 0, 10}}).wait().code(), StatusCode::kNotFound);
  unchanged();
  // Local out of bounds or unknown: rejected before anything moves.
  EXPECT_EQ(p.a->write(b, {{la, 4095, rb, 0, 2}}).wait().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(p.a->read(b, {{RegionId{12345}, 0, rb, 0, 2}}).wait().code(), StatusCode::kNotFound);
  unchanged();
  // A region that was used, then unregistered, is rejected afterwards (shm: through the segment's flag).
  ASSERT_TRUE(p.a->write(b, {{la, 0, rb, 0, 16}}).wait().ok());
  remote_before.assign(p.b->host_bytes(rb)->begin(), p.b->host_bytes(rb)->end());
  std::span<std::byte> keep = *p.b->host_bytes(rb);
  std::vector<std::byte> kept(keep.begin(), keep.end());
  ASSERT_TRUE(p.b->unregister_region(rb).ok());
  EXPECT_EQ(p.a->write(b, {{la, 100, rb, 0, 16}}).wait().code(), StatusCode::kNotFound);
  EXPECT_EQ(p.a->read(b, {{la, 100, rb, 0, 16}}).wait().code(), StatusCode::kNotFound);
  EXPECT_EQ(0, std::memcmp(p.a->host_bytes(la)->data(), local_before.data(), 4096));
  // Not connected.
  EXPECT_EQ(p.a->write("nobody", {{la, 0, rb, 0, 1}}).wait().code(), StatusCode::kFailedPrecondition);
}

TEST_P(EndpointTest, SendGathersAndRecvScatters) {
  AgentPair p = testing::make_pair(GetParam());
  RegionId s = *p.a->allocate_region(1000), r = *p.b->allocate_region(1000);
  fill_random(*p.a->host_bytes(s), 3);
  // Posted before the message arrives, and after.
  TransferFuture early = p.b->recv(p.a->name(), {{r, 500, {}, 0, 100}, {r, 0, {}, 0, 50}});
  ASSERT_TRUE(p.a->send(p.b->name(), {{s, 10, {}, 0, 100}, {s, 900, {}, 0, 50}}).wait().ok());
  ASSERT_TRUE(early.wait().ok());
  EXPECT_EQ(0, std::memcmp(p.b->host_bytes(r)->data() + 500, p.a->host_bytes(s)->data() + 10, 100));
  EXPECT_EQ(0, std::memcmp(p.b->host_bytes(r)->data(), p.a->host_bytes(s)->data() + 900, 50));
  ASSERT_TRUE(p.a->send(p.b->name(), {{s, 0, {}, 0, 300}}).wait().ok());
  ASSERT_TRUE(p.b->recv(p.a->name(), {{r, 700, {}, 0, 300}}).wait().ok());
  EXPECT_EQ(0, std::memcmp(p.b->host_bytes(r)->data() + 700, p.a->host_bytes(s)->data(), 300));
  // A size mismatch fails the receive rather than truncating.
  ASSERT_TRUE(p.a->send(p.b->name(), {{s, 0, {}, 0, 20}}).wait().ok());
  EXPECT_EQ(p.b->recv(p.a->name(), {{r, 0, {}, 0, 10}}).wait().code(), StatusCode::kOutOfRange);
}

TEST_P(EndpointTest, CancelStopsQueuedChunks) {
  LinkOptions link;
  link.streams = 1;
  link.split_threshold = 4096;
  link.max_inflight_bytes = 4096;
  AgentPair p = testing::make_pair(GetParam(), link);
  RegionId la = *p.a->allocate_region(64 << 20), rb = *p.b->allocate_region(64 << 20);
  TransferFuture f = p.a->write(p.b->name(), {{la, 0, rb, 0, 64 << 20}});
  f.cancel();
  ASSERT_TRUE(f.wait_for(std::chrono::seconds(10)));
  EXPECT_EQ(f.status().code(), StatusCode::kCancelled);
  // The link stays usable.
  EXPECT_TRUE(p.a->write(p.b->name(), {{la, 0, rb, 0, 100}}).wait().ok());
}

TEST_P(EndpointTest, ShutdownDrainsAndFailsTheRest) {
  LinkOptions link;
  link.streams = 1;
  link.split_threshold = 64 << 10;
  link.max_inflight_bytes = 64 << 10;
  AgentPair p = testing::make_pair(GetParam(), link);
  RegionId la = *p.a->allocate_region(32 << 20), rb = *p.b->allocate_region(32 << 20);
  std::vector<TransferFuture> fs;
  for (int i = 0; i < 32; ++i) fs.push_back(p.a->write(p.b->name(), {{la, 0, rb, 0, 32 << 20}}));  // 1 GiB
  p.a->shutdown(std::chrono::milliseconds(2000));
  int failed = 0;
  for (auto& f : fs) {
    ASSERT_TRUE(f.ready()) << "shutdown returned with a transfer still pending";
    if (!f.status().ok()) {
      ++failed;
      EXPECT_EQ(f.status().code(), StatusCode::kUnavailable) << f.status().to_string();
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_EQ(p.a->write(p.b->name(), {{la, 0, rb, 0, 1}}).wait().code(), StatusCode::kUnavailable);
}

INSTANTIATE_TEST_SUITE_P(Endpoints, EndpointTest, ::testing::ValuesIn(endpoints()));

TEST(LinkTest, UnknownEndpointListsKnownOnes) {
  auto a = Agent::create({.name = "x", .endpoints = {"carrier-pigeon"}});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kNotFound);
  EXPECT_NE(a.status().message().find("shm"), std::string::npos);
  EXPECT_NE(a.status().message().find("tcp"), std::string::npos);
}

TEST(LinkTest, PrefersShmOnOneHostAndTcpAcrossHosts) {
  StaticDiscovery disc;
  auto a = std::move(Agent::create({.name = "pa", .discovery = &disc})).value();
  auto b = std::move(Agent::create({.name = "pb", .discovery = &disc})).value();
  ASSERT_TRUE(a->connect("pb").ok());
  EXPECT_EQ(*a->endpoint_to("pb"), "shm");
  ASSERT_TRUE(b->connect(AgentInfo{a->name(), "another-host", a->info().addresses}).ok());
  EXPECT_EQ(*b->endpoint_to("pa"), "tcp");
  EXPECT_EQ(a->connect("nobody").code(), StatusCode::kNotFound);
}

TEST(LinkTest, ChecksumSeesEveryKindOfDamage) {
  std::vector<std::byte> v(4099);
  testing::fill_random(v, 8);
  uint64_t base = checksum64(v.data(), v.size());
  for (size_t i : {size_t{0}, size_t{31}, size_t{32}, size_t{4098}}) {
    auto w = v;
    w[i] ^= std::byte{1};
    EXPECT_NE(checksum64(w.data(), w.size()), base);
  }
  auto swapped = v;
  std::swap_ranges(swapped.begin(), swapped.begin() + 8, swapped.begin() + 8);
  EXPECT_NE(checksum64(swapped.data(), swapped.size()), base);
  EXPECT_NE(checksum64(v.data(), v.size() - 1), base);
}

TEST(LinkTest, ChecksumInPiecesEqualsTheWholeChecksum) {
  std::vector<std::byte> v(70001);
  testing::fill_random(v, 9);
  std::mt19937 rng(3);
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{4096}, v.size()}) {
    const uint64_t whole = checksum64(v.data(), n);
    for (int round = 0; round < 20; ++round) {
      Checksum64 c;
      size_t at = 0;
      while (at < n) {
        const size_t piece = std::min(n - at, static_cast<size_t>(rng() % 9000));
        c.update(v.data() + at, piece);
        at += piece;
      }
      ASSERT_EQ(c.value(), whole) << n << " bytes, round " << round;
    }
  }
}

// The checksum's values are part of the wire format: pinned here as the portable (SSE2/NEON) build computed
// them, so the AVX2 build this CPU may pick, and any other CPU's, must agree byte for byte.
TEST(LinkTest, ChecksumValuesArePinnedAcrossBuilds) {
  std::vector<unsigned char> v(1000003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<unsigned char>((i * 131u + 7u) >> 3);
  const std::pair<size_t, uint64_t> pinned[] = {{0, 0xaca98184e20e327dull},       {1, 0xf0938e609e1b5e7cull},
                                                {63, 0x6b1fa34d4083968full},      {64, 0xb2cf5c4cd5c9bcbeull},
                                                {65, 0x1d3c1acfa0a27740ull},      {1000, 0xd6d96a8725a82db8ull},
                                                {v.size(), 0x223dec3f51d1566aull}};
  for (auto [n, want] : pinned) EXPECT_EQ(checksum64(v.data(), n), want) << n << " bytes";
}

// The data-frame wire format on a real socket pair: payloads summed before they are sent (small) and after
// (large, in pieces) arrive intact, and a payload damaged after its checksum was taken is reported, with the stream
// still in step.
TEST(LinkTest, DataFramesCarryAChecksumTrailerThatCatchesDamage) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::vector<std::byte> small(1000), large((5 << 20) + 13);
  testing::fill_random(small, 1);
  testing::fill_random(large, 2);
  std::vector<std::byte> damaged = small;
  damaged[500] ^= std::byte{0x40};
  Status sent;
  std::thread sender([&] {
    sent = internal::send_data_frame(sv[0], internal::make_header(internal::FrameType::kWrite, 1), small.data(),
                                     small.size());
    if (sent.ok()) {
      sent = internal::send_data_frame(sv[0], internal::make_header(internal::FrameType::kWrite, 2), large.data(),
                                       large.size());
    }
    if (sent.ok()) {  // the bytes change between summing and the wire: header, damaged payload, original sum
      internal::FrameHeader h = internal::make_header(internal::FrameType::kWrite, 3);
      h.length = small.size();
      internal::seal(h);
      const uint64_t sum = checksum64(small.data(), small.size());
      iovec iov[3] = {{&h, sizeof h}, {damaged.data(), damaged.size()}, {const_cast<uint64_t*>(&sum), sizeof sum}};
      sent = internal::writev_all(sv[0], iov, 3);
    }
  });
  for (const auto* want : {&small, &large, &small}) {
    internal::FrameHeader h;
    ASSERT_TRUE(internal::read_exact(sv[1], &h, sizeof h).ok());
    ASSERT_TRUE(internal::verify(h).ok());
    ASSERT_EQ(h.length, want->size());
    std::vector<std::byte> got(h.length);
    bool intact = false;
    ASSERT_TRUE(internal::read_data_payload(sv[1], got.data(), got.size(), &intact).ok());
    if (h.op_id == 3) {
      EXPECT_FALSE(intact) << "a damaged payload must not pass";
    } else {
      EXPECT_TRUE(intact) << "frame " << h.op_id;
      EXPECT_TRUE(got == *want) << "frame " << h.op_id;
    }
  }
  sender.join();
  EXPECT_TRUE(sent.ok()) << sent.to_string();
  ::close(sv[0]);
  bool intact = true;
  std::byte one;
  EXPECT_EQ(internal::read_data_payload(sv[1], &one, 1, &intact).code(), StatusCode::kUnavailable)
      << "a closed peer is an error, not a hang";
  ::close(sv[1]);
}

TEST(LinkTest, DescriptionsRoundTrip) {
  RegionDesc d{"agent-1", RegionId{7}, 4096, MemoryKind::kHost, "/tessera-1-2"};
  auto back = RegionDesc::decode(d.encode());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->shm_name, d.shm_name);
  EXPECT_EQ(to_u64(back->id), 7u);
  EXPECT_FALSE(RegionDesc::decode("agent=x id=zz").ok());
  AgentInfo info{"n", "h", {{"tcp", "127.0.0.1:5"}, {"shm", "/tmp/s"}}};
  auto i2 = AgentInfo::decode(info.encode());
  ASSERT_TRUE(i2.ok());
  EXPECT_EQ(i2->addresses.size(), 2u);
  EXPECT_FALSE(AgentInfo::decode("garbage").ok());
}

}  // namespace
}  // namespace tessera::link
