// The link handshake proves the cluster token (accept_loop.h): agents holding one token connect and move
// bytes; a wrong token, a missing token on either side, and a raw socket that skips the handshake are refused
// before any frame is read, and the refused peer's frames touch no memory.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "link/agent.h"
#include "link/internal/wire.h"
#include "link_test_util.h"

namespace tessera::link {
namespace {

using internal::FrameHeader;
using internal::FrameType;

ClusterToken token(char c) { return std::move(ClusterToken::from_secret(std::string(40, c))).value(); }

std::unique_ptr<Agent> agent(const std::string& endpoint, const ClusterToken& t) {
  static int serial = 0;
  LinkOptions link;
  link.cluster_token = t;
  link.streams = 2;
  auto a = Agent::create({.name = "auth" + std::to_string(++serial), .endpoints = {endpoint}, .link = link});
  EXPECT_TRUE(a.ok()) << a.status().to_string();
  return std::move(a).value();
}

class LinkAuthTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LinkAuthTest, OneTokenConnectsAndMovesBytes) {
  auto a = agent(GetParam(), token('a')), b = agent(GetParam(), token('a'));
  ASSERT_TRUE(a->connect(b->info()).ok());
  RegionId src = *a->allocate_region(8192), dst = *b->allocate_region(8192);
  testing::fill_random(*a->host_bytes(src), 3);
  ASSERT_TRUE(a->write(b->name(), {{src, 0, dst, 0, 8192}}).wait().ok());
  EXPECT_EQ(0, std::memcmp(a->host_bytes(src)->data(), b->host_bytes(dst)->data(), 8192));
}

TEST_P(LinkAuthTest, WrongOrMissingTokenIsRefused) {
  struct Case {
    const char* what;
    ClusterToken connector, acceptor;
  };
  const Case cases[] = {{"wrong token", token('a'), token('b')},
                        {"connector without a token", ClusterToken(), token('b')},
                        {"acceptor without a token", token('a'), ClusterToken()}};
  for (const Case& c : cases) {
    auto a = agent(GetParam(), c.connector), b = agent(GetParam(), c.acceptor);
    RegionId src = *a->allocate_region(4096), dst = *b->allocate_region(4096);
    testing::fill_random(*a->host_bytes(src), 1);
    Status s = a->connect(b->info());
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << c.what << ": " << s.to_string();
    // Nothing reaches the acceptor's memory, and it adopted no connection from the refused peer.
    EXPECT_FALSE(a->write(b->name(), {{src, 0, dst, 0, 4096}}).wait().ok()) << c.what;
    for (std::byte x : *b->host_bytes(dst)) ASSERT_EQ(x, std::byte{0}) << c.what;
    EXPECT_FALSE(b->write(a->name(), {{dst, 0, src, 0, 16}}).wait().ok()) << c.what;
  }
}

// A raw socket to the agent's address (tcp, or shm's Unix control socket).
int raw_connect(const Agent& b, const std::string& endpoint) {
  std::string address;
  for (const PeerAddress& p : b.info().addresses) {
    if (p.endpoint == endpoint) address = p.address;
  }
  EXPECT_FALSE(address.empty());
  if (endpoint == "tcp") {
    const size_t colon = address.rfind(':');
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
    inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(0, ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa));
    return fd;
  }
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, address.data(), std::min(address.size(), sizeof sa.sun_path - 1));
  if (!address.empty() && address[0] == '@') sa.sun_path[0] = '\0';  // abstract namespace
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  EXPECT_EQ(0, ::connect(fd, reinterpret_cast<sockaddr*>(&sa),
                         static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size())));
  return fd;
}

// True when the peer closes the socket within `ms` (reads give EOF or an error).
bool closed_by_peer(int fd, int ms = 3000) {
  char buf[256];
  for (int i = 0; i < ms / 100; ++i) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
  return false;
}

TEST_P(LinkAuthTest, FramesWithoutTheHandshakeAreNeverRead) {
  auto b = agent(GetParam(), token('a'));
  RegionId dst = *b->allocate_region(4096);
  // A write frame straight away, as if the handshake had happened.
  {
    int fd = raw_connect(*b, GetParam());
    std::vector<std::byte> payload(64, std::byte{0x5a});
    FrameHeader h = internal::make_header(FrameType::kWrite, 1);
    h.region = static_cast<uint64_t>(dst);
    EXPECT_TRUE(internal::send_data_frame(fd, h, payload.data(), payload.size()).ok());
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
  }
  // A well-formed HELLO, then a write frame instead of the proof.
  {
    int fd = raw_connect(*b, GetParam());
    FrameHeader h = internal::make_header(FrameType::kHello, 0);
    h.region = 42;
    h.offset = 0;
    h.aux = 1;
    const std::string hello = std::string("intruder\n") + std::string(32, '0') + "\n";
    h.length = hello.size();
    EXPECT_TRUE(internal::send_frame(fd, h, hello.data(), hello.size()).ok());
    FrameHeader reply;
    ASSERT_TRUE(internal::read_exact(fd, &reply, sizeof reply).ok());
    EXPECT_EQ(reply.type, static_cast<uint8_t>(FrameType::kHello));
    std::string rest(reply.length, '\0');
    ASSERT_TRUE(internal::read_exact(fd, rest.data(), rest.size()).ok());
    // The acceptor's proof is an HMAC, never the token itself.
    EXPECT_EQ(rest.find(std::string(40, 'a')), std::string::npos);
    std::vector<std::byte> payload(64, std::byte{0x5a});
    FrameHeader w = internal::make_header(FrameType::kWrite, 1);
    w.region = static_cast<uint64_t>(dst);
    EXPECT_TRUE(internal::send_data_frame(fd, w, payload.data(), payload.size()).ok());
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
  }
  // A guessed proof.
  {
    int fd = raw_connect(*b, GetParam());
    FrameHeader h = internal::make_header(FrameType::kHello, 0);
    h.region = 43;
    h.aux = 1;
    const std::string hello = std::string("intruder\n") + std::string(32, '1') + "\n";
    h.length = hello.size();
    EXPECT_TRUE(internal::send_frame(fd, h, hello.data(), hello.size()).ok());
    FrameHeader reply;
    ASSERT_TRUE(internal::read_exact(fd, &reply, sizeof reply).ok());
    std::string rest(reply.length, '\0');
    ASSERT_TRUE(internal::read_exact(fd, rest.data(), rest.size()).ok());
    const std::string guess(64, 'f');
    FrameHeader auth = internal::make_header(FrameType::kAuth, 0);
    auth.length = guess.size();
    EXPECT_TRUE(internal::send_frame(fd, auth, guess.data(), guess.size()).ok());
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
  }
  for (std::byte x : *b->host_bytes(dst)) ASSERT_EQ(x, std::byte{0});
  // The agent still serves a peer that holds the token.
  auto a = agent(GetParam(), token('a'));
  ASSERT_TRUE(a->connect(b->info()).ok());
  RegionId src = *a->allocate_region(4096);
  testing::fill_random(*a->host_bytes(src), 9);
  ASSERT_TRUE(a->write(b->name(), {{src, 0, dst, 0, 4096}}).wait().ok());
  EXPECT_EQ(0, std::memcmp(a->host_bytes(src)->data(), b->host_bytes(dst)->data(), 4096));
}

// Peers that connect and then say nothing hold a handshake each until its 5 s timeout; they must not hold up
// the accept of an honest peer behind them (each handshake runs on its own thread, accept_loop.h).
TEST_P(LinkAuthTest, SilentPeersDoNotHoldUpAnHonestOne) {
  auto b = agent(GetParam(), token('a'));
  RegionId dst = *b->allocate_region(4096);
  std::vector<int> silent;
  for (int i = 0; i < 12; ++i) silent.push_back(raw_connect(*b, GetParam()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // accepted, each waiting for a HELLO
  auto a = agent(GetParam(), token('a'));
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(a->connect(b->info()).ok());
  RegionId src = *a->allocate_region(4096);
  testing::fill_random(*a->host_bytes(src), 11);
  ASSERT_TRUE(a->write(b->name(), {{src, 0, dst, 0, 4096}}).wait().ok());
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Serial handshakes would have waited 12 x 5 s; one timeout is the bound that shows they overlap.
  EXPECT_LT(waited, 4.0) << "the honest peer waited behind the silent ones";
  EXPECT_EQ(0, std::memcmp(a->host_bytes(src)->data(), b->host_bytes(dst)->data(), 4096));
  for (int fd : silent) {
    EXPECT_TRUE(closed_by_peer(fd, 8000)) << "a silent handshake outlived its timeout";
    ::close(fd);
  }
}

INSTANTIATE_TEST_SUITE_P(Endpoints, LinkAuthTest, ::testing::Values("tcp", "shm"));

}  // namespace
}  // namespace tessera::link
