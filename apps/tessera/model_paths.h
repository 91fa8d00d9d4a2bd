// Where the CLI finds models: the bundled stories260K and relative paths in specs.
//
// The repository ships stories260K under models/ (models/stories260K/SOURCE.md), so a bare clone needs
// nothing beside it. Commands that default to it look in the working directory first (a checkout's root)
// and then in the source tree the binary was built from. A relative path in a spec file is read against the
// spec's own folder, then against the working directory, so `tessera up deploy/x.yaml` works from anywhere.
#pragma once

#include <string>

#include "base/status.h"

namespace tessera::cli {

// The bundled stories260K folder: ./models/stories260K when it exists, else the build's source tree copy.
// Returns an absolute path, or NotFound naming the places looked at.
Result<std::string> default_model_dir();

// `path` made absolute: as is when absolute; else against `base_dir` (when not empty) if it exists there,
// else against the working directory if it exists there; NotFound naming both otherwise.
Result<std::string> resolve_path(const std::string& path, const std::string& base_dir);

}  // namespace tessera::cli
