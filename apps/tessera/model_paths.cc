#include "model_paths.h"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "base/paths.h"

namespace tessera::cli {
namespace fs = std::filesystem;

Result<std::string> default_model_dir() {
  const fs::path here = fs::path("models") / "stories260K";
  const fs::path built = fs::path(TESSERA_DEFAULT_MODELS_DIR) / "stories260K";
  std::error_code ec;
  if (fs::is_directory(here, ec)) return absolute_normal(here.string());
  if (fs::is_directory(built, ec)) return absolute_normal(built.string());
  return not_found(fmt::format("the bundled model stories260K is neither at {} nor at {}; pass --model or a spec",
                               absolute_normal(here.string()), built.string()));
}

}  // namespace tessera::cli
