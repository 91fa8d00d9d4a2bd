// `tessera link`: the transfer runtime from the command line.
//   tessera link peer   : an agent with one region that serves peers until stdin closes (the remote side of
//                         `link bench`, and of tests that kill a peer mid-transfer)
//   tessera link bench  : see link_bench.cc
//   tessera link raw-sink: a plain TCP sink (link/raw_tcp.h), the ceiling `link bench --endpoint tcp` compares
//                          against
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "link/agent.h"
#include "link/raw_tcp.h"
#include "link_bench.h"

namespace tessera::cli {
namespace {

struct PeerArgs {
  std::string name = "peer";
  std::vector<std::string> endpoints = {"shm", "tcp"};
  uint64_t region_bytes = 1 << 20;
  uint64_t seed = 1;
  int streams = 4;
  uint64_t split = 0;  // 0: the endpoint's default (shm 32 MiB, tcp and ucx 1 MiB)
  std::string ctrl;    // publish through the control plane (store spec)
  int64_t ttl_ms = 3000;
};

void fill_pattern(std::span<std::byte> bytes, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(bytes.data() + i, &x, 8);
  }
}

// Blocks until stdin reaches EOF (the parent closed it or died).
void wait_for_stdin_eof() {
  char buf[256];
  while (true) {
    ssize_t n = read(0, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EINTR)) return;
  }
}

int run_peer(const PeerArgs& a) {
  link::AgentOptions o;
  o.name = a.name;
  o.endpoints = a.endpoints;
  o.link.streams = a.streams;
  o.link.split_threshold = a.split;
  std::unique_ptr<link::Discovery> discovery;
  if (!a.ctrl.empty()) {
    auto d = link::make_discovery("ctrl", fmt::format("{} ttl_ms={}", a.ctrl, a.ttl_ms));
    if (!d.ok()) return fail(d.status().message());
    discovery = std::move(*d);
    o.discovery = discovery.get();
  }
  auto agent = link::Agent::create(o);
  if (!agent.ok()) return fail(agent.status().message());
  auto region = (*agent)->allocate_region(a.region_bytes);
  if (!region.ok()) return fail(region.status().message());
  if (a.seed != 0) fill_pattern(*(*agent)->host_bytes(*region), a.seed);
  std::printf("info %s\nregion %llu\n", (*agent)->info().encode().c_str(),
              static_cast<unsigned long long>(link::to_u64(*region)));
  std::fflush(stdout);
  wait_for_stdin_eof();
  (*agent)->shutdown(std::chrono::milliseconds(1000));
  return 0;
}

// The raw TCP sink (link/raw_tcp.h) until stdin closes.
int run_raw_sink(uint64_t buffer_bytes, int streams) {
  auto sink = link::RawTcpSink::listen(buffer_bytes, streams);
  if (!sink.ok()) return fail(sink.status().message());
  std::printf("port %d\n", (*sink)->port());
  std::fflush(stdout);
  (*sink)->serve_until(0);
  return 0;
}

}  // namespace

Action add_link_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("link", "Transfer runtime: benchmark links, run a peer agent");
  cmd->require_subcommand(1);

  auto peer = std::make_shared<PeerArgs>();
  CLI::App* p = cmd->add_subcommand("peer", "Run an agent with one region, serving peers until stdin closes");
  p->add_option("--name", peer->name, "Agent name");
  p->add_option("--endpoint", peer->endpoints, "Endpoints to listen on (shm, tcp)")->delimiter(',');
  p->add_option("--region-bytes", peer->region_bytes, "Bytes of the region to allocate")->check(CLI::PositiveNumber);
  p->add_option("--seed", peer->seed, "Fill the region with this seed's pattern (0: leave zeroed)");
  p->add_option("--streams", peer->streams, "Striped connections per peer")->check(CLI::Range(1, 64));
  p->add_option("--split", peer->split, "Split threshold in bytes (0: the endpoint's default)")
      ->check(CLI::NonNegativeNumber);
  p->add_option("--ctrl", peer->ctrl,
                "Publish this agent in a control-plane store (e.g. embedded=http://127.0.0.1:7070)");
  p->add_option("--ttl-ms", peer->ttl_ms, "Lease TTL of the published entry")->check(CLI::PositiveNumber);

  auto sink_bytes = std::make_shared<uint64_t>(64 << 20);
  auto sink_streams = std::make_shared<int>(1);
  CLI::App* s = cmd->add_subcommand("raw-sink", "A plain TCP sink (the tcp ceiling of link bench)");
  s->add_option("--buffer-bytes", *sink_bytes, "Receive buffer")->check(CLI::PositiveNumber);
  s->add_option("--streams", *sink_streams, "Concurrent connections expected")->check(CLI::Range(1, 64));
  s->group("");  // internal: started by link bench

  auto bench = std::make_shared<LinkBenchArgs>();
  CLI::App* b = add_link_bench_options(*cmd, *bench);

  return [=]() -> int {
    if (p->parsed()) return run_peer(*peer);
    if (s->parsed()) return run_raw_sink(*sink_bytes, *sink_streams);
    if (b->parsed()) return run_link_bench(*bench);
    return 2;
  };
}

}  // namespace tessera::cli
