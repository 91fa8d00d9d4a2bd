// The conformance suite, large part: long contexts, big decode batches, big matrices (label `slow`).
#include <gtest/gtest.h>

#include "ops/conformance_support.h"

namespace tessera::ops::conformance {
namespace {

class ConformanceSlow : public ::testing::TestWithParam<std::string> {};

TEST_P(ConformanceSlow, SlowCasesMatchTheReference) {
  std::string summary = check_cases(GetParam(), true);
  std::printf("[ conformance ] %s (slow): %s\n", GetParam().c_str(), summary.c_str());
}

INSTANTIATE_TEST_SUITE_P(Ops, ConformanceSlow, ::testing::Values("attention_prefill", "attention_decode", "matmul"));

}  // namespace
}  // namespace tessera::ops::conformance
