#include "backend_auto.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "base/dtype.h"
#include "engine/model_runner.h"
#include "ops/registry.h"

namespace tessera::cli {
namespace {}  // namespace

Result<ChosenBackend> open_backend(const std::string& requested, const model::ModelConfig& config,
                                   const model::ModelWeights& weights, const ops::DeviceOptions& options,
                                   DType kv_dtype) {
  if (requested != "auto") {
    TS_ASSIGN_OR_RETURN(auto device, ops::open_device(requested, 0, options));
    return ChosenBackend{requested, std::move(device), ""};
  }
  ops::register_builtin_backends();
  const std::vector<std::string> known = ops::BackendRegistry::global().names();
  std::vector<std::string> passed;
  for (const char* name : {"cuda", "cpu", "ref"}) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      passed.push_back(fmt::format("{}: not compiled in", name));
      continue;
    }
    auto device = ops::open_device(name, 0, options);
    if (!device.ok()) {
      const std::string why(device.status().message());
      passed.push_back(why.rfind(std::string(name) + ":", 0) == 0 ? why : fmt::format("{}: {}", name, why));
      continue;
    }
    if (std::vector<std::string> missing = engine::unsupported_layer_features(**device, config); !missing.empty()) {
      passed.push_back(fmt::format("{}: no {}", name, fmt::join(missing, ", ")));
      continue;
    }
    if (config.causal) {
      if (Status kv = engine::check_kv_cache_type(**device, config, kv_dtype); !kv.ok()) {
        if (kv.code() == StatusCode::kInvalidArgument) return kv;  // the model cannot hold the type on any backend
        passed.push_back(fmt::format("{}: no {} KV cache", name, dtype_name(kv_dtype)));
        continue;
      }
    }
    const std::vector<DType> widened = engine::widened_weight_types(**device, weights);
    if (!widened.empty() && std::string_view(name) != "ref") {
      std::vector<std::string> types;
      for (DType d : widened) types.emplace_back(dtype_name(d));
      passed.push_back(fmt::format("{}: no kernels for {}", name, fmt::join(types, ", ")));
      continue;
    }
    std::string reason = fmt::format("auto: {}", name);
    if (!passed.empty()) reason += fmt::format(" ({})", fmt::join(passed, "; "));
    return ChosenBackend{name, std::move(device).value(), std::move(reason)};
  }
  return unavailable(fmt::format("no backend can run this model: {}", fmt::join(passed, "; ")));
}

}  // namespace tessera::cli
