#include "ops/conformance_support.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include <fmt/core.h>

#include "ops/cpu/cpu_backend.h"
#include "ops/registry.h"

namespace tessera::ops::conformance {

namespace {

// TESSERA_CONFORMANCE_BACKENDS=vulkan,cpu narrows a run to those backends (a developer iterating on one);
// unset, every backend is checked.
bool wanted(const std::string& name) {
  const char* env = std::getenv("TESSERA_CONFORMANCE_BACKENDS");
  if (env == nullptr || *env == '\0') return true;
  const std::string list = std::string(",") + env + ",";
  return list.find("," + name + ",") != std::string::npos;
}

}  // namespace

std::vector<DeviceUnderTest> devices_under_test() {
  register_builtin_backends();
  std::vector<DeviceUnderTest> out;
  for (const std::string& name : BackendRegistry::global().names()) {
    if (!wanted(name)) continue;
    auto d = open_device(name, 0, DeviceOptions{2, ""});
    if (d.ok()) {
      out.push_back({name, std::move(d).value()});
    } else {
      std::printf("[ conformance ] backend %s not tested here: %s\n", name.c_str(), d.status().message().c_str());
    }
  }
  // Every cpu kernel variant this processor runs, beside the one the registry's "cpu" picked; the others are
  // named with the reason (e.g. cpu(amx) on a processor or kernel without AMX tiles).
  for (cpu::Isa isa : {cpu::Isa::kAmx, cpu::Isa::kAvx512, cpu::Isa::kAvx2, cpu::Isa::kGeneric}) {
    if (!wanted("cpu")) break;
    if (cpu::detected_isa().rfind(std::string(cpu::isa_name(isa)), 0) == 0) continue;
    auto variant = cpu::create_backend(isa);
    if (!variant.ok()) {
      std::printf("[ conformance ] cpu(%s) not tested here: %s\n", std::string(cpu::isa_name(isa)).c_str(),
                  variant.status().message().c_str());
      continue;
    }
    auto d = (*variant)->open_device_with(0, DeviceOptions{2, ""});
    if (d.ok()) out.push_back({fmt::format("cpu({})", cpu::isa_name(isa)), std::move(d).value(), {}});
  }
  // Where the processor has no tile unit, the amx kernels with their tiles in software: only the operators the amx
  // build has its own kernels for (its others are the avx512 build's, checked above).
  if (wanted("cpu") && !cpu::isa_supported(cpu::Isa::kAmx)) {
    auto emulated = cpu::create_backend(cpu::Isa::kAmxEmulated);
    if (!emulated.ok()) {
      std::printf("[ conformance ] cpu(amx-emulated) not tested here: %s\n", emulated.status().message().c_str());
    } else if (auto d = (*emulated)->open_device_with(0, DeviceOptions{2, ""}); d.ok()) {
      out.push_back({"cpu(amx-emulated)", std::move(d).value(), {"matmul", "moe_route", "moe_experts"}});
    }
  }
  return out;
}

std::string check_cases(const std::string& op, bool slow) {
  static std::vector<DeviceUnderTest> devices = devices_under_test();
  auto ref = open_device("ref");
  EXPECT_TRUE(ref.ok());
  std::vector<Device*> targets;
  std::vector<size_t> checked;  // the devices this operator is checked on
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!devices[i].only_ops.empty() && devices[i].only_ops.count(op) == 0) continue;
    targets.push_back(devices[i].device.get());
    checked.push_back(i);
  }
  std::vector<std::array<int, 3>> counts(devices.size(), {0, 0, 0});
  for (const Case& c : conformance_cases()) {
    if (c.op != op || c.slow != slow) continue;
    std::vector<CaseResult> results = run_case(c, **ref, targets);
    for (size_t j = 0; j < results.size(); ++j) {
      const size_t i = checked[j];
      counts[i][static_cast<size_t>(results[j].outcome)]++;
      EXPECT_NE(results[j].outcome, Outcome::kFail) << devices[i].name << " " << c.op << " " << dtype_name(c.dtype)
                                                    << " " << c.shape << ": " << results[j].detail;
    }
  }
  std::string summary;
  for (size_t i : checked) {
    summary += fmt::format("{}{}: {} pass, {} FAIL, {} unsupported", summary.empty() ? "" : "; ", devices[i].name,
                           counts[i][0], counts[i][1], counts[i][2]);
  }
  return summary;
}

}  // namespace tessera::ops::conformance
