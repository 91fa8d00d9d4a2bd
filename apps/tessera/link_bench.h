// `tessera link bench`: bandwidth and per-transfer latency of a link between two processes, beside a ceiling
// measured in the same run (memcpy for shm, a plain TCP stream between two processes for tcp).
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace tessera::cli {

struct LinkBenchArgs {
  std::string endpoint = "shm";
  std::string sizes = "4K..256M";
  int batch = 1;
  int streams = 4;
  int depth = 4;
  int repeats = 3;
  std::string op = "write";
  uint64_t split = 0;    // 0: the endpoint's default (shm 32 MiB, tcp and ucx 1 MiB)
  double seconds = 0.3;  // per size and repeat
};

CLI::App* add_link_bench_options(CLI::App& link_cmd, LinkBenchArgs& args);
int run_link_bench(const LinkBenchArgs& args);

}  // namespace tessera::cli
