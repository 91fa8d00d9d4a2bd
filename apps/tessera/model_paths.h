// Where the CLI finds the bundled model.
//
// The repository ships stories260K under models/ (models/stories260K/SOURCE.md), so a bare clone needs
// nothing beside it. Commands that default to it look in the working directory first (a checkout's root)
// and then in the source tree the binary was built from.
#pragma once

#include <string>

#include "base/status.h"

namespace tessera::cli {

// The bundled stories260K folder: ./models/stories260K when it exists, else the build's source tree copy.
// Returns an absolute path, or NotFound naming the places looked at. (Paths in specs: base/paths.h.)
Result<std::string> default_model_dir();

}  // namespace tessera::cli
