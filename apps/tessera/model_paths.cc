#include "model_paths.h"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

namespace tessera::cli {
namespace fs = std::filesystem;

namespace {
std::string absolute_normal(const fs::path& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec);
  return (ec ? p : a).lexically_normal().string();
}
}  // namespace

Result<std::string> default_model_dir() {
  const fs::path here = fs::path("models") / "stories260K";
  const fs::path built = fs::path(TESSERA_DEFAULT_MODELS_DIR) / "stories260K";
  std::error_code ec;
  if (fs::is_directory(here, ec)) return absolute_normal(here);
  if (fs::is_directory(built, ec)) return absolute_normal(built);
  return not_found(fmt::format("the bundled model stories260K is neither at {} nor at {}; pass --model or a spec",
                               absolute_normal(here), built.string()));
}

Result<std::string> resolve_path(const std::string& path, const std::string& base_dir) {
  if (path.empty()) return invalid_argument("empty path");
  fs::path p(path);
  if (p.is_absolute()) return p.lexically_normal().string();
  std::error_code ec;
  if (!base_dir.empty()) {
    fs::path in_base = fs::path(base_dir) / p;
    if (fs::exists(in_base, ec)) return absolute_normal(in_base);
  }
  if (fs::exists(p, ec)) return absolute_normal(p);
  if (base_dir.empty()) return not_found(fmt::format("{} does not exist (looked in {})", path, absolute_normal(".")));
  return not_found(fmt::format("{} does not exist (looked in the spec's folder {} and in the working directory {})",
                               path, absolute_normal(base_dir), absolute_normal(".")));
}

}  // namespace tessera::cli
