#include "link_bench.h"

#include <CLI/CLI.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "child_process.h"
#include "commands.h"
#include "link/agent.h"

namespace tessera::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Result<uint64_t> parse_size(const std::string& s) {
  if (s.empty()) return invalid_argument("empty size");
  size_t end = 0;
  uint64_t v = 0;
  try {
    v = std::stoull(s, &end);
  } catch (const std::exception&) {
    return invalid_argument(fmt::format("size '{}' is not a number with an optional K/M/G suffix", s));
  }
  std::string unit = s.substr(end);
  uint64_t mult = unit.empty() ? 1 : unit == "K" ? 1ull << 10 : unit == "M" ? 1ull << 20 : unit == "G" ? 1ull << 30 : 0;
  if (mult == 0 || v == 0)
    return invalid_argument(fmt::format("size '{}' is not a number with an optional K/M/G suffix", s));
  return v * mult;
}

// "4K..256M" (powers of two from..to) or "4K,1M,64M".
Result<std::vector<uint64_t>> parse_sizes(const std::string& spec) {
  std::vector<uint64_t> out;
  size_t dots = spec.find("..");
  if (dots != std::string::npos) {
    TS_ASSIGN_OR_RETURN(uint64_t lo, parse_size(spec.substr(0, dots)));
    TS_ASSIGN_OR_RETURN(uint64_t hi, parse_size(spec.substr(dots + 2)));
    if (lo > hi) return invalid_argument(fmt::format("size range '{}' runs backwards", spec));
    for (uint64_t s = lo; s <= hi; s *= 2) out.push_back(s);
    return out;
  }
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    TS_ASSIGN_OR_RETURN(uint64_t v, parse_size(spec.substr(start, comma - start)));
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string human(uint64_t n) {
  if (n >= (1ull << 20) && n % (1ull << 20) == 0) return fmt::format("{}M", n >> 20);
  if (n >= 1024 && n % 1024 == 0) return fmt::format("{}K", n >> 10);
  return fmt::format("{}", n);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// Offsets of the i-th assignment: consecutive slots, wrapping inside a region of `region` bytes.
uint64_t slot_offset(uint64_t i, uint64_t size, uint64_t region) {
  uint64_t slots = std::max<uint64_t>(1, region / size);
  return (i % slots) * size;
}

struct Run {
  double gbps = 0;
  std::vector<double> latency_ms;
};

Result<Run> run_link(link::Agent& agent, const std::string& peer, link::RegionId local, link::RegionId remote,
                     uint64_t region, uint64_t size, const LinkBenchArgs& a) {
  Run r;
  std::deque<std::pair<link::TransferFuture, Clock::time_point>> window;
  uint64_t bytes = 0, transfers = 0, slot = 0;
  auto t0 = Clock::now();
  auto retire = [&]() -> Status {
    auto [f, start] = std::move(window.front());
    window.pop_front();
    TS_RETURN_IF_ERROR(f.wait());
    r.latency_ms.push_back(seconds_since(start) * 1e3);
    return ok_status();
  };
  while (seconds_since(t0) < a.seconds || transfers < 4) {
    std::vector<link::Assignment> batch;
    for (int i = 0; i < a.batch; ++i, ++slot) {
      uint64_t off = slot_offset(slot, size, region);
      batch.push_back({local, off, remote, off, size});
    }
    auto start = Clock::now();
    link::TransferFuture f = a.op == "read" ? agent.read(peer, std::move(batch)) : agent.write(peer, std::move(batch));
    window.emplace_back(std::move(f), start);
    bytes += size * static_cast<uint64_t>(a.batch);
    ++transfers;
    if (static_cast<int>(window.size()) >= a.depth) TS_RETURN_IF_ERROR(retire());
  }
  while (!window.empty()) TS_RETURN_IF_ERROR(retire());
  r.gbps = static_cast<double>(bytes) / seconds_since(t0) / 1e9;
  return r;
}

// memcpy between two buffers of this process, with the same access pattern and volume as the link run.
double memcpy_ceiling(std::byte* src, std::byte* dst, uint64_t region, uint64_t size, const LinkBenchArgs& a) {
  uint64_t bytes = 0, slot = 0;
  auto t0 = Clock::now();
  while (seconds_since(t0) < a.seconds || bytes < 4 * size) {
    for (int i = 0; i < a.batch; ++i, ++slot) {
      uint64_t off = slot_offset(slot, size, region);
      std::memcpy(dst + off, src + off, size);
      bytes += size;
    }
  }
  return static_cast<double>(bytes) / seconds_since(t0) / 1e9;
}

// `streams` plain TCP streams to the raw sink, connected once and kept open for the whole run (like the link's
// own lanes, so both have their windows grown by the same loopback traffic). Each round writes total/streams
// bytes per stream in writes of `size` bytes from the same buffer slots, until the sink acknowledges every
// last byte.
class RawStreams {
 public:
  ~RawStreams() {
    for (int fd : fds_) close(fd);
  }
  Status connect_to(int port, int streams) {
    for (int i = 0; i < streams; ++i) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        if (fd >= 0) close(fd);
        return unavailable("cannot connect to the raw sink");
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      fds_.push_back(fd);
    }
    return ok_status();
  }
  Result<double> round(const std::byte* src, uint64_t region, uint64_t size, uint64_t total) {
    const auto streams = static_cast<uint64_t>(fds_.size());
    const uint64_t each = total / streams;
    std::atomic<bool> all_ok{true};
    auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (uint64_t i = 0; i < streams; ++i) {
      threads.emplace_back([&, fd = fds_[i], i] {
        bool ok = send(fd, &each, 8, MSG_NOSIGNAL) == 8;
        uint64_t sent = 0, slot = i;
        while (ok && sent < each) {
          uint64_t off = slot_offset(slot, size, region), n = std::min(size, each - sent), done = 0;
          slot += streams;
          while (ok && done < n) {
            ssize_t w = send(fd, src + off + done, n - done, MSG_NOSIGNAL);
            ok = w > 0;
            if (ok) done += static_cast<uint64_t>(w);
          }
          sent += n;
        }
        char ack = 0;
        ok = ok && recv(fd, &ack, 1, MSG_WAITALL) == 1;
        if (!ok) all_ok.store(false);
      });
    }
    for (auto& t : threads) t.join();
    double secs = seconds_since(t0);
    if (!all_ok.load()) return unavailable("raw TCP stream to the sink failed");
    return static_cast<double>(each * streams) / secs / 1e9;
  }

 private:
  std::vector<int> fds_;
};

struct Spread {
  double median, lo, hi;
};
Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

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
  auto sizes = parse_sizes(a.sizes);
  if (!sizes.ok()) return fail(sizes.status().message());
  uint64_t max_size = *std::max_element(sizes->begin(), sizes->end());
  // Regions hold at least 4 transfers' worth (capped), so consecutive transfers touch fresh memory.
  uint64_t region = std::max<uint64_t>(max_size, std::min<uint64_t>(uint64_t{256} << 20, max_size * a.batch * 4));
  region = std::max<uint64_t>(region, 16 << 20);

  auto peer = ChildProcess::spawn({self_exe(), "link", "peer", "--name", "bench-peer", "--endpoint", a.endpoint,
                                   "--region-bytes", std::to_string(region), "--streams", std::to_string(a.streams),
                                   "--split", std::to_string(a.split), "--seed", "0"});
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
  std::optional<ChildProcess> sink;
  int sink_port = 0;
  RawStreams raw;
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
    auto s = ChildProcess::spawn({self_exe(), "link", "raw-sink", "--buffer-bytes", std::to_string(region), "--streams",
                                  std::to_string(a.streams)});
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
      a.split ? human(a.split).c_str() : "endpoint default", a.repeats, a.seconds);
  std::printf("# ceiling: %s%s%s\n",
              memcpy_ceiling_wanted ? "memcpy between two shared-memory segments in one process, same sizes and volume"
                                    : "plain TCP streams between two processes (raw sink), as many as --streams",
              a.endpoint == "ucx" ? "; UCX_TLS=" : "", a.endpoint == "ucx" ? (tls ? tls : "(unset)") : "");
  std::printf("%8s %10s %17s %9s %9s %10s %17s %9s %13s\n", "size", "GB/s", "(min..max)", "p50 ms", "p99 ms",
              "ceil GB/s", "(min..max)", "fraction", "(min..max)");
  for (uint64_t size : *sizes) {
    std::vector<double> link_gbps, ceil_gbps, ratio, lat;
    // Each repeat measures the link and its ceiling back to back, in alternating order, and the fraction is
    // the median of those paired ratios: this machine's throughput drifts by 10% or more between seconds,
    // which a ratio of two separate medians would fold into the result.
    for (int rep = 0; rep < a.repeats; ++rep) {
      double link_rate = 0, ceil_rate = 0;
      auto measure_link = [&]() -> Status {
        auto r = run_link(**agent, "bench-peer", *local, remote, region, size, a);
        if (!r.ok()) return r.status();
        link_rate = r->gbps;
        lat.insert(lat.end(), r->latency_ms.begin(), r->latency_ms.end());
        return ok_status();
      };
      auto measure_ceiling = [&]() -> Status {
        if (memcpy_ceiling_wanted) {
          ceil_rate = memcpy_ceiling(local_bytes.data(), scratch.data(), region, size, a);
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
    Spread l = spread(link_gbps), c = spread(ceil_gbps), f = spread(ratio);
    std::printf("%8s %10.2f %17s %9.3f %9.3f %10.2f %17s %8.0f%% %13s\n", human(size).c_str(), l.median,
                fmt::format("({:.2f}..{:.2f})", l.lo, l.hi).c_str(), percentile(lat, 0.5), percentile(lat, 0.99),
                c.median, fmt::format("({:.2f}..{:.2f})", c.lo, c.hi).c_str(), 100.0 * f.median,
                fmt::format("({:.0f}..{:.0f}%)", 100.0 * f.lo, 100.0 * f.hi).c_str());
    std::fflush(stdout);
  }
  (*agent)->shutdown(std::chrono::milliseconds(1000));
  return 0;
}

}  // namespace tessera::cli
