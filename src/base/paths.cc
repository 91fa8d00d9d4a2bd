#include "base/paths.h"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

namespace tessera {
namespace fs = std::filesystem;

std::string absolute_normal(const std::string& path) {
  std::error_code ec;
  fs::path a = fs::absolute(path, ec);
  return (ec ? fs::path(path) : a).lexically_normal().string();
}

Result<std::string> resolve_path(const std::string& path, const std::string& base_dir) {
  if (path.empty()) return invalid_argument("empty path");
  fs::path p(path);
  if (p.is_absolute()) return p.lexically_normal().string();
  std::error_code ec;
  if (!base_dir.empty()) {
    fs::path in_base = fs::path(base_dir) / p;
    if (fs::exists(in_base, ec)) return absolute_normal(in_base.string());
  }
  if (fs::exists(p, ec)) return absolute_normal(path);
  if (base_dir.empty()) return not_found(fmt::format("{} does not exist (looked in {})", path, absolute_normal(".")));
  return not_found(fmt::format("{} does not exist (looked in the spec's folder {} and in the working directory {})",
                               path, absolute_normal(base_dir), absolute_normal(".")));
}

}  // namespace tessera
