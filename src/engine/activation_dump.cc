#include "engine/activation_dump.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/core.h>

namespace tessera::engine {

ActivationTap activation_file_dump(std::string dir) {
  struct State {
    std::string dir;
    std::map<std::string, int> calls;
    bool warned = false;
  };
  auto state = std::make_shared<State>();
  state->dir = std::move(dir);
  std::error_code ec;
  std::filesystem::create_directories(state->dir, ec);
  return [state](std::string_view name, int layer, int64_t rows, std::span<const float> values) {
    const std::string point = fmt::format("{}-{}", name, layer < 0 ? std::string("out") : std::to_string(layer));
    const int k = state->calls[point]++;
    const std::string path = fmt::format("{}/{}.{}.f32", state->dir, point, k);
    const int64_t header[2] = {rows, rows > 0 ? static_cast<int64_t>(values.size()) / rows : 0};
    std::FILE* f = std::fopen(path.c_str(), "wb");
    bool ok = f != nullptr && std::fwrite(header, sizeof header, 1, f) == 1 &&
              std::fwrite(values.data(), sizeof(float), values.size(), f) == values.size();
    if (f != nullptr) ok = std::fclose(f) == 0 && ok;
    if (!ok && !state->warned) {
      state->warned = true;
      std::fprintf(stderr, "tessera: cannot write activation dump %s; further dump errors are not reported\n",
                   path.c_str());
    }
  };
}

}  // namespace tessera::engine
