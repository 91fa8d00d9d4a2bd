// Stream::copy_runs: the bounds check every backend shares and the default one-call-per-run implementation.
#include <fmt/format.h>

#include "ops/backend.h"
#include "ops/copy_runs.h"

namespace tessera::ops {

Status check_runs(const Buffer& buffer, const HostStaging& staging, std::span<const CopyRun> runs) {
  const size_t host = staging.bytes().size();
  for (const CopyRun& r : runs) {
    if (r.device_offset > buffer.size() || r.bytes > buffer.size() - r.device_offset || r.host_offset > host ||
        r.bytes > host - r.host_offset) {
      return out_of_range(
          fmt::format("copy run of {} bytes (device offset {}, host offset {}) runs past a {}-byte "
                      "buffer or a {}-byte staging region",
                      r.bytes, r.device_offset, r.host_offset, buffer.size(), host));
    }
  }
  return ok_status();
}

Status Stream::copy_runs(Buffer& buffer, HostStaging& staging, std::span<const CopyRun> runs, CopyDirection dir) {
  TS_RETURN_IF_ERROR(check_runs(buffer, staging, runs));
  std::byte* host = staging.bytes().data();
  for (const CopyRun& r : runs) {
    if (r.bytes == 0) continue;
    TS_RETURN_IF_ERROR(dir == CopyDirection::kToHost ? read(buffer, r.device_offset, host + r.host_offset, r.bytes)
                                                     : write(buffer, r.device_offset, host + r.host_offset, r.bytes));
  }
  return ok_status();
}

}  // namespace tessera::ops
