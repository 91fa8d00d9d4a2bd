// Paths named in spec files: a relative path is read against the spec's own folder first, then against the
// working directory, so `tessera up deploy/x.yaml` works from anywhere.
#pragma once

#include <string>

#include "base/status.h"

namespace tessera {

// `path` made absolute: as is when absolute; else against `base_dir` (when not empty) if it exists there,
// else against the working directory if it exists there; NotFound naming both otherwise.
Result<std::string> resolve_path(const std::string& path, const std::string& base_dir);

// `path` absolute and normalised (lexically; it need not exist).
std::string absolute_normal(const std::string& path);

}  // namespace tessera
