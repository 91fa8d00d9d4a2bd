// A device that refuses the operators a predicate names, as a backend without their kernels would, and hands
// everything else to the device it wraps: the tests of the engine's refusals at load (a model whose layers need
// an operator the device lacks is refused by ModelRunner::create naming it, and `--backend auto` passes the device
// over) keep a device to refuse with now that every backend here runs every operator.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "ops/backend.h"

namespace tessera::testing {

class RefusingDevice final : public ops::Device {
 public:
  // `refuse` returns the reason an operator is declined, or "" to ask the wrapped device. `backend` is the name the
  // device reports (DeviceInfo::backend), so that messages read as they would for a real one.
  RefusingDevice(std::unique_ptr<ops::Device> inner, std::string backend,
                 std::function<std::string(const ops::Op&)> refuse)
      : inner_(std::move(inner)), info_(inner_->info()), refuse_(std::move(refuse)) {
    info_.backend = std::move(backend);
  }
  const ops::DeviceInfo& info() const override { return info_; }
  Result<std::unique_ptr<ops::Buffer>> alloc(size_t bytes) override { return inner_->alloc(bytes); }
  ops::Support supports(const ops::Op& op) const override {
    if (std::string why = refuse_(op); !why.empty()) return ops::Support::no(why);
    return inner_->supports(op);
  }
  std::unique_ptr<ops::Stream> create_stream() override { return inner_->create_stream(); }

 private:
  std::unique_ptr<ops::Device> inner_;
  ops::DeviceInfo info_;
  std::function<std::string(const ops::Op&)> refuse_;
};

}  // namespace tessera::testing
