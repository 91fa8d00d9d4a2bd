// Helpers for backends implementing Stream::copy_runs (ops/backend.h).
#pragma once

#include <span>

#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops {

// OutOfRange naming the first run that leaves `buffer` or `staging`.
Status check_runs(const Buffer& buffer, const HostStaging& staging, std::span<const CopyRun> runs);

}  // namespace tessera::ops
