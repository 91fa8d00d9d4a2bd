// The sampler's loops over a whole row (engine/sampler.cc): a softmax, a max, a scan for the next value above a
// bar and a log-sum-exp's sum, each in a plain build and (x86-64 CPUs with AVX2 and FMA) an eight-lane one.
// host_vector() says which one this process runs; tests call both. Stateless; any thread.
#pragma once

#include <cstddef>
#include <span>

namespace tessera::engine::internal {

enum class HostVector { kScalar, kAvx2 };

// kAvx2 where the CPU reports AVX2 and FMA and TESSERA_CPU_ISA is not "generic" (read once).
HostVector host_vector();

// softmax(x * scale) in place: e^((x - max) * scale), divided by its sum.
void softmax(std::span<float> x, float scale, HostVector v = host_vector());
// The first i >= from with x[i] > bar, or x.size().
size_t first_above(std::span<const float> x, size_t from, float bar, HostVector v = host_vector());
// The largest value that is not NaN; -inf when there is none.
float max_value(std::span<const float> x, HostVector v = host_vector());
// The sum of e^(x - mx), accumulated in double.
double sum_exp(std::span<const float> x, float mx, HostVector v = host_vector());

}  // namespace tessera::engine::internal
