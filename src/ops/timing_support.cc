#include "ops/timing_support.h"

#include <algorithm>

#include <fmt/core.h>

namespace tessera::ops {

Status check_timed_elements(double elems, const char* what) {
  if (elems > static_cast<double>(kMaxTimedElements)) {
    return invalid_argument(fmt::format("{}: {:.3g} elements, more than the {} a timing fills (4 GiB of f32)", what,
                                        elems, kMaxTimedElements));
  }
  return ok_status();
}

double best_seconds(const std::vector<double>& seconds) {
  return seconds.empty() ? 0.0 : *std::min_element(seconds.begin(), seconds.end());
}

double median_seconds(const std::vector<double>& seconds) {
  if (seconds.empty()) return 0.0;
  std::vector<double> s = seconds;
  std::sort(s.begin(), s.end());
  return s.size() % 2 ? s[s.size() / 2] : (s[s.size() / 2 - 1] + s[s.size() / 2]) / 2;
}

Result<Tensor> TimedTensors::make(DType type, std::initializer_list<int64_t> dims, const void* host) {
  Tensor x(nullptr, 0, type, dims);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> b, device_.alloc(x.bytes()));
  x.buffer = b.get();
  buffers_.push_back(std::move(b));
  if (host != nullptr) TS_RETURN_IF_ERROR(stream_.upload(x, host));
  return x;
}

}  // namespace tessera::ops
