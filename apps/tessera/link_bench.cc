// `tessera link bench` (link_bench.h): starts the peer process and the ceiling (a second shared-memory
// segment for memcpy, or the raw TCP sink process), measures each size with src/link/bench.h and prints the
// table.
#include "link_bench.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "base/process.h"
#include "commands.h"
#include "link/agent.h"
#include "link/bench.h"
#include "link/raw_tcp.h"

namespace tessera::cli {

CLI::App* add_link_bench_options(CLI::App& link_cmd, LinkBenchArgs& a) {
  CLI::App* b = link_cmd.add_subcommand("bench", "Bandwidth and latency of a link between two processes");
  b->add_option("--endpoint", a.endpoint, "shm, tcp or ucx (UCX_TLS picks UCX's transports)")
      ->check(CLI::IsMember({"shm", "tcp", "ucx"}));
  b->add_option("--sizes", a.sizes, "Assignment sizes: FROM..TO (powers of two) or a comma list, e.g. 4K..256M");
  b->add_option("--batch", a.batch, "Assignments per transfer")->check(CLI::Range(1, 4096));
  b->add_option("--streams", a.streams, "Striped connections")->check(CLI::Range(1, 64));
  b->add_option("--depth", a.depth, "Transfers in flight")->check(CLI::Range(1, 1024));
  b->add_option("--repeats", a.repeats, "Repeats per size (median and spread reported)")->check(CLI::Range(1, 100));
  b->add_option("--op", a.op, "write or read")->check(CLI::IsMember({"write", "read"}));
  b->add_option("--split", a.split, "Split threshold in bytes (0: the endpoint's default)")
      ->check(CLI::NonNegativeNumber);
  b->add_option("--seconds", a.seconds, "Measuring time per size and repeat")->check(CLI::PositiveNumber);
  return b;
}

int run_link_bench(const LinkBenchArgs& a) {
  auto sizes = link::parse_byte_sizes(a.sizes);
  if (!sizes.ok()) return fail(sizes.status().message());
  uint64_t max_size = *std::max_element(sizes->begin(), sizes->end());
  // Regions hold at least 4 transfers' worth (capped), so consecutive transfers touch fresh memory.
  uint64_t region = std::max<uint64_t>(max_size, std::min<uint64_t>(uint64_t{256} << 20, max_size * a.batch * 4));
  region = std::max<uint64_t>(region, 16 << 20);

  auto peer = Process::spawn({.argv = {self_exe(), "link", "peer", "--name", "bench-peer", "--endpoint", a.endpoint,
                                       "--region-bytes", std::to_string(region), "--streams", std::to_string(a.streams),
                                       "--split", std::to_string(a.split), "--seed", "0"},
                              .pipe_stdin = true});
  if (!peer.ok()) return fail(peer.status().message());
  auto info_line = peer->read_line(20000);
  auto region_line = info_line.ok() ? peer->read_line(5000) : info_line;
  if (!region_line.ok() || info_line->rfind("info ", 0) != 0 || region_line->rfind("region ", 0) != 0) {
    return fail("link bench: the peer process did not start");
  }
  auto info = link::AgentInfo::decode(info_line->substr(5));
  if (!info.ok()) return fail(info.status().message());
  link::RegionId remote{std::stoull(region_line->substr(7))};

  link::AgentOptions o;
  o.name = "bench";
  o.endpoints = {a.endpoint};
  o.link.streams = a.streams;
  o.link.split_threshold = a.split;
  auto agent = link::Agent::create(o);
  if (!agent.ok()) return fail(agent.status().message());
  auto local = (*agent)->allocate_region(region);
  if (!local.ok()) return fail(local.status().message());
  std::span<std::byte> local_bytes = *(*agent)->host_bytes(*local);
  std::memset(local_bytes.data(), 0x5a, local_bytes.size());
  if (Status s = (*agent)->connect(*info); !s.ok()) return fail(s.message());

  // memcpy ceiling destination: a second POSIX shared-memory segment, the same kind of memory the shm path
  // writes into (memcpy into private anonymous memory measured up to ~1.4x faster here at 256 MiB).
  std::span<std::byte> scratch;
  std::optional<Process> sink;
  int sink_port = 0;
  link::RawTcpStreams raw;
  // ucx: compare with memcpy when UCX is told to use shared memory only, else with a plain TCP stream.
  const char* tls = std::getenv("UCX_TLS");
  const bool memcpy_ceiling_wanted =
      a.endpoint == "shm" || (a.endpoint == "ucx" && tls && std::string(tls).find("tcp") == std::string::npos);
  if (memcpy_ceiling_wanted) {
    auto r = (*agent)->allocate_region(region);
    if (!r.ok()) return fail(r.status().message());
    scratch = *(*agent)->host_bytes(*r);
    std::memset(scratch.data(), 1, scratch.size());
  } else {
    auto s = Process::spawn({.argv = {self_exe(), "link", "raw-sink", "--buffer-bytes", std::to_string(region),
                                      "--streams", std::to_string(a.streams)},
                             .pipe_stdin = true});
    if (!s.ok()) return fail(s.status().message());
    sink.emplace(std::move(*s));
    auto line = sink->read_line(10000);
    if (!line.ok() || line->rfind("port ", 0) != 0) return fail("link bench: the raw TCP sink did not start");
    sink_port = std::stoi(line->substr(5));
    if (Status st = raw.connect_to(sink_port, a.streams); !st.ok()) return fail(st.message());
    // One untimed round so the streams start the measurements with grown windows, as the link's lanes do.
    if (auto w = raw.round(local_bytes.data(), region, 1 << 20, uint64_t{64} << 20); !w.ok())
      return fail(w.status().message());
  }

  std::printf(
      "# tessera link bench: endpoint %s, op %s, batch %d, streams %d, depth %d, split %s, %d repeats of %.2fs\n",
      a.endpoint.c_str(), a.op.c_str(), a.batch, a.streams, a.depth,
      a.split ? link::human_bytes(a.split).c_str() : "endpoint default", a.repeats, a.seconds);
  std::printf("# ceiling: %s%s%s\n",
              memcpy_ceiling_wanted ? "memcpy between two shared-memory segments in one process, same sizes and volume"
                                    : "plain TCP streams between two processes (raw sink), as many as --streams",
              a.endpoint == "ucx" ? "; UCX_TLS=" : "", a.endpoint == "ucx" ? (tls ? tls : "(unset)") : "");
  std::printf("%8s %10s %17s %9s %9s %10s %17s %9s %13s\n", "size", "GB/s", "(min..max)", "p50 ms", "p99 ms",
              "ceil GB/s", "(min..max)", "fraction", "(min..max)");
  const link::TransferPattern pattern{a.batch, a.depth, a.seconds, a.op == "read"};
  for (uint64_t size : *sizes) {
    std::vector<double> link_gbps, ceil_gbps, ratio, lat;
    // Each repeat measures the link and its ceiling back to back, in alternating order, and the fraction is
    // the median of those paired ratios: this machine's throughput drifts by 10% or more between seconds,
    // which a ratio of two separate medians would fold into the result.
    for (int rep = 0; rep < a.repeats; ++rep) {
      double link_rate = 0, ceil_rate = 0;
      auto measure_link = [&]() -> Status {
        auto r = link::measure_transfers(**agent, "bench-peer", *local, remote, region, size, pattern);
        if (!r.ok()) return r.status();
        link_rate = r->gbps;
        lat.insert(lat.end(), r->latency_ms.begin(), r->latency_ms.end());
        return ok_status();
      };
      auto measure_ceiling = [&]() -> Status {
        if (memcpy_ceiling_wanted) {
          ceil_rate = link::measure_memcpy(local_bytes.data(), scratch.data(), region, size, pattern);
          return ok_status();
        }
        // About as many bytes as the link moves in its measuring time (its last rate, or a guess at first).
        const double guess = link_rate > 0 ? link_rate : (link_gbps.empty() ? 1.0 : link_gbps.back());
        uint64_t total = std::max<uint64_t>(static_cast<uint64_t>(guess * 1e9 * a.seconds), 4 * size);
        auto c = raw.round(local_bytes.data(), region, size, total);
        if (!c.ok()) return c.status();
        ceil_rate = *c;
        return ok_status();
      };
      Status st = rep % 2 == 0 ? measure_link() : measure_ceiling();
      if (st.ok()) st = rep % 2 == 0 ? measure_ceiling() : measure_link();
      if (!st.ok()) return fail(st.message());
      link_gbps.push_back(link_rate);
      ceil_gbps.push_back(ceil_rate);
      ratio.push_back(link_rate / ceil_rate);
    }
    link::Spread l = link::spread(link_gbps), c = link::spread(ceil_gbps), f = link::spread(ratio);
    std::printf("%8s %10.2f %17s %9.3f %9.3f %10.2f %17s %8.0f%% %13s\n", link::human_bytes(size).c_str(), l.median,
                fmt::format("({:.2f}..{:.2f})", l.lo, l.hi).c_str(), link::percentile(lat, 0.5),
                link::percentile(lat, 0.99), c.median, fmt::format("({:.2f}..{:.2f})", c.lo, c.hi).c_str(),
                100.0 * f.median, fmt::format("({:.0f}..{:.0f}%)", 100.0 * f.lo, 100.0 * f.hi).c_str());
    std::fflush(stdout);
  }
  (*agent)->shutdown(std::chrono::milliseconds(1000));
  return 0;
}

}  // namespace tessera::cli
