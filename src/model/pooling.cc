#include "model/pooling.h"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"

namespace tessera::model {
namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string_view pooling_name(PoolingType t) {
  switch (t) {
    case PoolingType::kNone:
      return "none";
    case PoolingType::kMean:
      return "mean";
    case PoolingType::kCls:
      return "cls";
    case PoolingType::kLast:
      return "last";
    case PoolingType::kRank:
      return "rank";
  }
  return "?";
}

Result<PoolingType> parse_pooling(std::string_view name) {
  if (name == "none") return PoolingType::kNone;
  if (name == "mean") return PoolingType::kMean;
  if (name == "cls") return PoolingType::kCls;
  if (name == "last" || name == "lasttoken") return PoolingType::kLast;
  return invalid_argument(fmt::format("pooling '{}' is not one of none, mean, cls, last", name));
}

Result<PoolingType> pooling_from_gguf(int64_t value) {
  if (value == 4) return unimplemented("pooling_type 4 (rank: a reranker's classification head) is not served");
  if (value < 0 || value > 4) return invalid_argument(fmt::format("pooling_type {} is not one of 0..4", value));
  return static_cast<PoolingType>(value);
}

namespace {

Result<Json> read_json(const fs::path& p) {
  TS_ASSIGN_OR_RETURN(std::string text, read_file(p.string()));
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded()) return invalid_argument(fmt::format("{} is not valid JSON", p.string()));
  return j;
}

// A module folder named by modules.json must stay inside the model folder.
bool safe_relative(const std::string& p) { return !p.empty() && p[0] != '/' && p.find("..") == std::string::npos; }

Result<PoolingType> pooling_mode(const Json& cfg, const std::string& name) {
  if (!cfg.is_object()) return invalid_argument(fmt::format("{} is not an object", name));
  auto flag = [&](const char* k) { return cfg.contains(k) && cfg[k] == true; };
  for (const char* k :
       {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens"})
    if (flag(k)) return unimplemented(fmt::format("{}: {} is not supported (cls, mean and lasttoken are)", name, k));
  if (flag("pooling_mode_mean_tokens")) return PoolingType::kMean;
  if (flag("pooling_mode_cls_token")) return PoolingType::kCls;
  if (flag("pooling_mode_lasttoken")) return PoolingType::kLast;
  if (cfg.contains("pooling_mode") && cfg["pooling_mode"].is_string()) {
    const std::string m = cfg["pooling_mode"].get<std::string>();
    if (m == "mean" || m == "cls" || m == "lasttoken") return parse_pooling(m);
    return unimplemented(fmt::format("{}: pooling_mode '{}' is not supported (cls, mean and lasttoken are)", name, m));
  }
  return invalid_argument(fmt::format("{} names no pooling mode", name));
}

}  // namespace

Result<EmbeddingSpec> read_sentence_transformers(const std::string& dir) {
  EmbeddingSpec spec;
  fs::path d(dir);
  std::error_code ec;
  if (fs::exists(d / "config.json", ec)) {
    TS_ASSIGN_OR_RETURN(Json cfg, read_json(d / "config.json"));
    if (cfg.is_object()) {
      if (auto m = cfg.find("matryoshka_dimensions"); m != cfg.end() && !m->is_null()) {
        if (!m->is_array())
          return invalid_argument(fmt::format("{}/config.json: matryoshka_dimensions is not a list", dir));
        for (const Json& x : *m) {
          if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > (1 << 20))
            return invalid_argument(fmt::format("{}/config.json: matryoshka_dimensions holds {}", dir, x.dump()));
          spec.matryoshka_dimensions.push_back(x.get<int>());
        }
        spec.matryoshka = !spec.matryoshka_dimensions.empty();
      }
      if (cfg.contains("is_matryoshka") && cfg["is_matryoshka"] == true) spec.matryoshka = true;
    }
  }
  const fs::path modules = d / "modules.json";
  if (!fs::exists(modules, ec)) return spec;
  TS_ASSIGN_OR_RETURN(Json mods, read_json(modules));
  if (!mods.is_array()) return invalid_argument(fmt::format("{} is not a list of modules", modules.string()));
  bool normalize = false;
  for (const Json& m : mods) {
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string())
      return invalid_argument(fmt::format("{}: a module has no type", modules.string()));
    const std::string type = m["type"].get<std::string>();
    if (type.ends_with("Normalize")) normalize = true;
    if (!type.ends_with("Pooling")) continue;
    const std::string path = m.contains("path") && m["path"].is_string() ? m["path"].get<std::string>() : "";
    if (!safe_relative(path))
      return invalid_argument(
          fmt::format("{}: the Pooling module's path '{}' must be a folder inside the model", modules.string(), path));
    const fs::path pcfg = d / path / "config.json";
    TS_ASSIGN_OR_RETURN(Json cfg, read_json(pcfg));
    TS_ASSIGN_OR_RETURN(spec.pooling, pooling_mode(cfg, pcfg.string()));
  }
  spec.normalize = normalize;
  return spec;
}

std::vector<std::pair<std::string, std::string>> sentence_transformers_files(const EmbeddingSpec& spec) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!spec.declared()) return out;
  Json mods = Json::array(
      {{{"idx", 0}, {"name", "0"}, {"path", ""}, {"type", "sentence_transformers.models.Transformer"}},
       {{"idx", 1}, {"name", "1"}, {"path", "1_Pooling"}, {"type", "sentence_transformers.models.Pooling"}}});
  if (spec.normalize)
    mods.push_back(
        {{"idx", 2}, {"name", "2"}, {"path", "2_Normalize"}, {"type", "sentence_transformers.models.Normalize"}});
  out.emplace_back("modules.json", mods.dump(2) + "\n");
  Json pool = {{"pooling_mode_cls_token", spec.pooling == PoolingType::kCls},
               {"pooling_mode_mean_tokens", spec.pooling == PoolingType::kMean},
               {"pooling_mode_max_tokens", false},
               {"pooling_mode_mean_sqrt_len_tokens", false},
               {"pooling_mode_weightedmean_tokens", false},
               {"pooling_mode_lasttoken", spec.pooling == PoolingType::kLast},
               {"include_prompt", true}};
  out.emplace_back("1_Pooling/config.json", pool.dump(2) + "\n");
  if (spec.normalize) out.emplace_back("2_Normalize/", "");  // the Normalize module's folder is empty
  return out;
}

}  // namespace tessera::model
