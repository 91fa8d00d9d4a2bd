// Link frames from a rogue peer (issue 20, items 2 and 3): a raw socket completes the link handshake with a
// real agent and then sends frames no Tessera agent would: a 64-byte header claiming a 1 GiB message (which
// made a node allocate 1 GiB), impossible lengths, payloads on frames that carry none, floods of requests
// whose replies it never reads, and seeded random headers. Each must end in the frame being refused or the
// connection closed; the agent's memory must not grow by what the headers claim, and afterwards a
// well-behaved peer still connects and moves bytes intact. Deterministic and bounded.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <fcntl.h>

#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#include "link/agent.h"
#include "link/internal/wire.h"
#include "link/link_test_util.h"

namespace tessera::link {
namespace {

using internal::FrameHeader;
using internal::FrameType;

// Resident memory of this process (the agent under attack runs in it).
uint64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

std::string tcp_address(const Agent& a) {
  for (const PeerAddress& p : a.info().addresses) {
    if (p.endpoint == "tcp") return p.address;
  }
  return "";
}

// Lane 0 of a connection of `lanes` lanes: hello (name, nonce, no proof), the acceptor's hello, an empty
// proof (the target runs without a cluster token, so anyone may connect) and its "accepted".
bool handshake(int fd, const std::string& name, uint64_t conn_id, uint64_t lanes) {
  FrameHeader h = internal::make_header(FrameType::kHello, 0);
  h.region = conn_id;
  h.offset = 0;
  h.aux = lanes;
  const std::string payload = name + "\n" + std::string(32, 'a') + "\n";
  h.length = payload.size();
  if (!internal::send_frame(fd, h, payload.data(), payload.size()).ok()) return false;
  FrameHeader reply;
  if (!internal::read_exact(fd, &reply, sizeof reply).ok() || !internal::verify(reply).ok() ||
      !internal::discard(fd, reply.length).ok()) {
    return false;
  }
  FrameHeader auth = internal::make_header(FrameType::kAuth, 0);
  if (!internal::send_frame(fd, auth, nullptr, 0).ok()) return false;
  return internal::read_exact(fd, &reply, sizeof reply).ok() && internal::verify(reply).ok() &&
         reply.type == static_cast<uint8_t>(FrameType::kAuth) && internal::discard(fd, reply.length).ok();
}

int tcp_socket(const Agent& target) {
  const std::string addr = tcp_address(target);
  const size_t colon = addr.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(addr.substr(colon + 1))));
  inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A socket that has completed the one-lane handshake with `target` as agent `name`; -1 on failure.
int rogue_connect(const Agent& target, const std::string& name, uint64_t conn_id) {
  int fd = tcp_socket(target);
  if (fd < 0) return -1;
  if (!handshake(fd, name, conn_id, 1)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True when the agent closed `fd` within `ms` (replies it sent before are read and thrown away).
bool closed_by_peer(int fd, int ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  char buf[65536];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    ssize_t got = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
  }
  return false;
}

FrameHeader header(FrameType type, uint64_t op, uint64_t region, uint64_t offset, uint64_t length) {
  FrameHeader h = internal::make_header(type, op);
  h.region = region;
  h.offset = offset;
  h.length = length;
  return h;
}

// A well-behaved peer still gets its bytes through, intact.
void expect_healthy(Agent& target, RegionId region, const std::string& name) {
  auto peer = Agent::create({.name = name, .endpoints = {"tcp"}});
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  ASSERT_TRUE((*peer)->connect(target.info()).ok());
  auto src = (*peer)->allocate_region(1 << 16);
  ASSERT_TRUE(src.ok());
  auto bytes = (*peer)->host_bytes(*src);
  testing::fill_random(*bytes, 5);
  ASSERT_TRUE((*peer)->write(target.name(), {{*src, 0, region, 0, 1 << 16}}).wait().ok());
  auto dst = target.host_bytes(region);
  EXPECT_EQ(std::memcmp(dst->data(), bytes->data(), 1 << 16), 0);
}

class RogueLinkPeer : public ::testing::Test {
 protected:
  void SetUp() override {
    auto a = Agent::create({.name = "target", .endpoints = {"tcp"}});
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    target_ = std::move(*a);
    auto r = target_->allocate_region(1 << 20);
    ASSERT_TRUE(r.ok());
    region_ = *r;
    device_mem_ = std::make_shared<testing::FakeDevice>(64ull << 20);
    auto d = target_->register_device_region(device_mem_);
    ASSERT_TRUE(d.ok());
    device_ = *d;
  }
  std::unique_ptr<Agent> target_;
  RegionId region_{};
  RegionId device_{};
  std::shared_ptr<testing::FakeDevice> device_mem_;
};

TEST_F(RogueLinkPeer, AHeaderClaimingAHugeMessageClosesTheConnectionWithoutAllocating) {
  const uint64_t before = rss_bytes();
  for (uint64_t claim : {uint64_t{1} << 30, uint64_t{1} << 32, ~uint64_t{0}}) {
    int fd = rogue_connect(*target_, "rogue-send", claim);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(internal::send_frame(fd, header(FrameType::kSend, 1, 0, 0, claim), nullptr, 0).ok());
    EXPECT_TRUE(closed_by_peer(fd, 3000)) << "a " << claim << "-byte send header was not refused";
    ::close(fd);
  }
  // One such header used to cost 1 GiB (a zero-filled buffer of the claimed size).
  EXPECT_LT(rss_bytes(), before + (64ull << 20));
  expect_healthy(*target_, region_, "honest-1");
}

TEST_F(RogueLinkPeer, ImpossibleFramesAreRefusedOrCloseTheConnection) {
  const uint64_t before = rss_bytes();
  struct Case {
    const char* what;
    FrameHeader h;
    bool closes;
    size_t payload = 0;  // bytes sent after the header (a refused write's payload and trailer)
  };
  const Case cases[] = {
      {"write past the region", header(FrameType::kWrite, 1, 1, (1 << 20) - 8, 16), false, 16 + 8},
      {"write at a wrapping offset", header(FrameType::kWrite, 2, 1, ~uint64_t{0} - 4, 16), false, 16 + 8},
      {"write of 1 TiB past the region", header(FrameType::kWrite, 10, 1, 0, 1ull << 40), true},
      {"read of 1 TiB", header(FrameType::kReadReq, 3, 1, 0, 1ull << 40), false},
      {"huge read of a device region", header(FrameType::kReadReq, 4, 0, 0, 1ull << 40), false},
      {"ack with a payload", header(FrameType::kWriteAck, 5, 0, 0, 1ull << 30), true},
      {"describe answer of 1 GiB", header(FrameType::kDescribeResp, 6, 0, 0, 1ull << 30), true},
      {"error of 1 GiB", header(FrameType::kError, 7, 0, 0, 1ull << 30), true},
      {"unknown type", header(static_cast<FrameType>(200), 8, 0, 0, 0), true},
      {"a second hello", header(FrameType::kHello, 9, 0, 0, 0), true},
  };
  uint64_t conn = 100;
  for (Case c : cases) {
    if (c.h.region == 1) c.h.region = static_cast<uint64_t>(region_);
    if (std::string(c.what).find("device") != std::string::npos) c.h.region = static_cast<uint64_t>(device_);
    int fd = rogue_connect(*target_, "rogue-frames", conn++);
    ASSERT_GE(fd, 0) << c.what;
    const std::vector<std::byte> payload(c.payload);
    internal::seal(c.h);
    ASSERT_TRUE(internal::write_all(fd, &c.h, sizeof c.h).ok()) << c.what;
    ASSERT_TRUE(internal::write_all(fd, payload.data(), payload.size()).ok()) << c.what;
    if (c.closes) {
      EXPECT_TRUE(closed_by_peer(fd, 3000)) << c.what;
    } else {
      // Refused with an error frame naming the operation; the connection stays usable.
      FrameHeader reply;
      ASSERT_TRUE(internal::read_exact(fd, &reply, sizeof reply).ok()) << c.what;
      EXPECT_EQ(reply.type, static_cast<uint8_t>(FrameType::kError)) << c.what;
      EXPECT_EQ(reply.op_id, c.h.op_id) << c.what;
      ASSERT_TRUE(internal::discard(fd, reply.length).ok());
    }
    ::close(fd);
  }
  EXPECT_LT(rss_bytes(), before + (64ull << 20));
  expect_healthy(*target_, region_, "honest-2");
}

TEST_F(RogueLinkPeer, AWriteToADeviceRegionIsStagedInPieces) {
  // A legitimate 48 MiB write into device memory: staged through a 4 MiB buffer, not one of 48 MiB.
  int fd = rogue_connect(*target_, "big-writer", 900);
  ASSERT_GE(fd, 0);
  std::vector<std::byte> data(48ull << 20);
  testing::fill_random(data, 9);
  const uint64_t before = rss_bytes();
  ASSERT_TRUE(internal::send_data_frame(fd, header(FrameType::kWrite, 1, static_cast<uint64_t>(device_), 1024, 0),
                                        data.data(), data.size())
                  .ok());
  FrameHeader reply;
  ASSERT_TRUE(internal::read_exact(fd, &reply, sizeof reply).ok());
  EXPECT_EQ(reply.type, static_cast<uint8_t>(FrameType::kWriteAck));
  EXPECT_EQ(std::memcmp(device_mem_->bytes().data() + 1024, data.data(), data.size()), 0);
  EXPECT_LT(rss_bytes(), before + (24ull << 20));
  ::close(fd);
}

TEST_F(RogueLinkPeer, APeerThatNeverReadsItsRepliesIsCutOff) {
  int fd = rogue_connect(*target_, "flooder", 1000);
  ASSERT_GE(fd, 0);
  // Acked requests (immediate tags) as fast as the socket takes them, never reading an ack.
  std::vector<FrameHeader> burst(1024);
  for (size_t i = 0; i < burst.size(); ++i) {
    burst[i] = header(FrameType::kImm, i + 1, 0, 0, 0);
    internal::seal(burst[i]);
  }
  bool cut = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!cut && std::chrono::steady_clock::now() < deadline) {
    if (!internal::write_all(fd, burst.data(), burst.size() * sizeof(FrameHeader)).ok()) cut = true;
  }
  EXPECT_TRUE(cut || closed_by_peer(fd, 3000)) << "the agent kept queueing replies for a peer that reads none";
  ::close(fd);
  expect_healthy(*target_, region_, "honest-3");
}

// Connections that announce many lanes and never bring the rest: their sockets must not pile up.
TEST_F(RogueLinkPeer, UnfinishedHandshakesDoNotPileUp) {
  auto open_fds = [] {
    int n = 0;
    for (int fd = 0; fd < 4096; ++fd) n += fcntl(fd, F_GETFD) != -1;
    return n;
  };
  const int before = open_fds();
  std::vector<int> mine;
  for (int i = 0; i < 200; ++i) {
    int fd = tcp_socket(*target_);
    ASSERT_GE(fd, 0);
    // A new connection each time, of 64 lanes of which only the first ever arrives.
    ASSERT_TRUE(handshake(fd, "half-" + std::to_string(i), 5000 + i, 64));
    mine.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // Ours (200) plus at most the agent's bound of unfinished connections (64) and a little slack.
  EXPECT_LE(open_fds() - before, 200 + 64 + 8);
  for (int fd : mine) ::close(fd);
  expect_healthy(*target_, region_, "honest-5");
}

TEST_F(RogueLinkPeer, SeededRandomFramesNeverTakeTheAgentDown) {
  const uint64_t before = rss_bytes();
  std::mt19937_64 rng(20261201);
  auto length = [&]() -> uint64_t {
    switch (rng() % 5) {
      case 0:
        return 0;
      case 1:
        return rng() % 4096;
      case 2:
        return 1ull << 20;
      case 3:
        return 1ull << (20 + rng() % 44);
      default:
        return rng();
    }
  };
  for (int conn = 0; conn < 60; ++conn) {
    int fd = rogue_connect(*target_, "fuzzer", 2000 + conn);
    ASSERT_GE(fd, 0);
    for (int i = 0; i < 20; ++i) {
      FrameHeader h =
          header(static_cast<FrameType>(1 + rng() % 13), rng() % 8,
                 rng() % 3 == 0 ? static_cast<uint64_t>(region_) : rng() % 4, length() % (2ull << 20), length());
      h.code = static_cast<uint8_t>(rng());
      h.aux = rng();
      std::vector<std::byte> payload(rng() % 512);
      testing::fill_random(payload, rng());
      if (!internal::send_frame(fd, h, payload.data(), payload.size()).ok()) break;
    }
    closed_by_peer(fd, 50);  // drain whatever was answered
    ::close(fd);
  }
  EXPECT_LT(rss_bytes(), before + (128ull << 20));
  expect_healthy(*target_, region_, "honest-4");
}

}  // namespace
}  // namespace tessera::link
