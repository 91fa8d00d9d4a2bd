// The devices the conformance tests check: every registered backend that opens here, plus every other cpu
// kernel variant this processor runs (amx, avx512, avx2 and the portable fallback, which this machine would
// otherwise never exercise); a variant it cannot run is named with the reason.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ops/backend.h"
#include "ops/conformance/conformance.h"

namespace tessera::ops::conformance {

struct DeviceUnderTest {
  std::string name;
  std::unique_ptr<Device> device;
  std::set<std::string> only_ops;  // the operators checked on it; empty: every one
};

std::vector<DeviceUnderTest> devices_under_test();

// Runs the cases of `op` (all of them, or only slow / only fast ones) on every device and adds a gtest
// failure, with the case and the reason, for each FAIL. Returns per-device "pass/FAIL/unsupported" counts.
std::string check_cases(const std::string& op, bool slow);

}  // namespace tessera::ops::conformance
