// The conformance harness: building a case on a device, running it, and comparing outputs with ref.
#include <cmath>
#include <cstring>

#include <fmt/core.h>

#include "base/quant.h"
#include "ops/conformance/conformance.h"

namespace tessera::ops::conformance {
namespace {

constexpr size_t kGuardBytes = 64;
constexpr uint8_t kGuardByte = 0xA5;

// An output's values as f32 (caches may be f16; i32 outputs are converted exactly for small ints).
std::vector<float> to_f32(const Tensor& t, const std::vector<uint8_t>& bytes) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::kI32) {
    for (size_t i = 0; i < out.size(); ++i) {
      int32_t v;
      std::memcpy(&v, bytes.data() + i * 4, 4);
      out[i] = static_cast<float>(v);
    }
  } else {
    (void)dequantize(bytes.data(), t.dtype, out);
  }
  return out;
}

struct Captured {
  std::vector<Tensor> tensors;               // per output: dtype and shape (the buffers are gone)
  std::vector<std::vector<uint8_t>> values;  // per output
  std::string guard_error;
};

// Builds and runs the case on one device. Unimplemented when the device does not support it.
tessera::Result<Captured> execute(const Case& c, Device& device, uint64_t seed, std::string* unsupported) {
  std::unique_ptr<Stream> stream = device.create_stream();
  CaseEnv env(device, *stream, seed);
  Op op = c.build(env);
  TS_RETURN_IF_ERROR(env.status());
  Support s = device.supports(op);
  if (!s.supported) {
    *unsupported = s.reason;
    return unimplemented(s.reason);
  }
  TS_RETURN_IF_ERROR(stream->run(op));
  TS_RETURN_IF_ERROR(stream->synchronize());
  Captured cap;
  for (const CaseEnv::Guarded& g : env.outputs()) {
    const Tensor& t = g.tensor;
    std::vector<uint8_t> all(t.bytes() + 2 * g.guard_bytes);
    TS_RETURN_IF_ERROR(stream->read(*t.buffer, t.offset - g.guard_bytes, all.data(), all.size()));
    TS_RETURN_IF_ERROR(stream->synchronize());
    for (size_t i = 0; i < g.guard_bytes; ++i) {
      if (all[i] != kGuardByte || all[all.size() - 1 - i] != kGuardByte) {
        cap.guard_error =
            fmt::format("the guard bytes around output {} {} were overwritten", cap.values.size(), t.shape_string());
        break;
      }
    }
    cap.tensors.push_back(t);
    cap.values.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(g.guard_bytes),
                            all.end() - static_cast<std::ptrdiff_t>(g.guard_bytes));
  }
  return cap;
}

enum class Kind { kFinite, kNan, kPosInf, kNegInf };
Kind kind(float v) {
  if (std::isnan(v)) return Kind::kNan;
  if (std::isinf(v)) return v > 0 ? Kind::kPosInf : Kind::kNegInf;
  return Kind::kFinite;
}

CaseResult compare(const Case& c, const Captured& want, const Captured& got) {
  const std::vector<Tensor>& shapes = want.tensors;
  CaseResult r;
  double err = 0.0, norm = 0.0;
  for (size_t o = 0; o < want.values.size(); ++o) {
    std::vector<float> a = to_f32(shapes[o], want.values[o]), b = to_f32(shapes[o], got.values[o]);
    for (size_t i = 0; i < a.size(); ++i) {
      if (kind(a[i]) != kind(b[i])) {
        r.outcome = Outcome::kFail;
        r.detail = fmt::format("output {} element {}: ref {} but {}", o, i, a[i], b[i]);
        return r;
      }
      if (kind(a[i]) != Kind::kFinite) continue;
      const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
      err += d * d;
      norm += static_cast<double>(a[i]) * static_cast<double>(a[i]);
    }
  }
  r.nmse = err == 0.0 ? 0.0 : err / std::max(norm, 1e-30);
  if (r.nmse > c.max_nmse || (c.max_nmse == 0.0 && err != 0.0)) {
    r.outcome = Outcome::kFail;
    r.detail = fmt::format("normalised error {:.3g} above the bound {:.3g}", r.nmse, c.max_nmse);
  }
  return r;
}

}  // namespace

CaseEnv::CaseEnv(Device& device, Stream& stream, uint64_t seed) : device_(device), stream_(stream), rng_(seed) {}
CaseEnv::~CaseEnv() = default;

std::vector<uint8_t> CaseEnv::encode(DType dtype, const std::vector<float>& v) {
  if (dtype == DType::kI32) {
    std::vector<uint8_t> b(v.size() * 4);
    for (size_t i = 0; i < v.size(); ++i) {
      auto x = static_cast<int32_t>(v[i]);
      std::memcpy(b.data() + i * 4, &x, 4);
    }
    return b;
  }
  std::vector<uint8_t> b(dtype_bytes(dtype, v.size()));
  Status s = quantize(v, dtype, b.data());
  if (!s.ok() && status_.ok()) status_ = s;
  return b;
}

Tensor CaseEnv::place(DType dtype, std::initializer_list<int64_t> shape, const std::vector<uint8_t>& bytes,
                      bool guarded) {
  Tensor t(nullptr, 0, dtype, shape);
  const size_t guard = guarded ? kGuardBytes : 0;
  auto buf = device_.alloc(t.bytes() + 2 * guard);
  if (!buf.ok()) {
    if (status_.ok()) status_ = buf.status();
    return t;
  }
  t.buffer = buf->get();
  t.offset = guard;
  if (guarded) {
    std::vector<uint8_t> pad(guard, kGuardByte);
    Status a = stream_.write(*t.buffer, 0, pad.data(), guard);
    Status b = stream_.write(*t.buffer, guard + t.bytes(), pad.data(), guard);
    if (!a.ok() && status_.ok()) status_ = a;
    if (!b.ok() && status_.ok()) status_ = b;
    outputs_.push_back({t, guard});
  }
  Status w = stream_.write(*t.buffer, guard, bytes.data(), bytes.size());
  if (!w.ok() && status_.ok()) status_ = w;
  buffers_.push_back(std::move(buf).value());
  return t;
}

Tensor CaseEnv::random(DType dtype, std::initializer_list<int64_t> shape, float scale) {
  Tensor probe(nullptr, 0, dtype, shape);
  std::vector<float> v(static_cast<size_t>(probe.numel()));
  for (float& x : v) x = (rng_.next_f32() * 2.0f - 1.0f) * scale;
  return place(dtype, shape, encode(dtype, v), false);
}

Tensor CaseEnv::weight(DType dtype, std::initializer_list<int64_t> shape, float scale) {
  Tensor t = random(dtype, shape, scale);
  if (!t.valid()) return t;
  Status s = stream_.synchronize();
  if (s.ok()) s = device_.prepare_matmul_weight(t);
  if (!s.ok() && status_.ok()) status_ = s;
  return t;
}

Tensor CaseEnv::values(DType dtype, std::initializer_list<int64_t> shape, const std::vector<float>& v) {
  return place(dtype, shape, encode(dtype, v), false);
}

Tensor CaseEnv::ints(std::initializer_list<int64_t> shape, const std::vector<int32_t>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return place(DType::kI32, shape, b, false);
}

Tensor CaseEnv::output(DType dtype, std::initializer_list<int64_t> shape, float scale) {
  Tensor probe(nullptr, 0, dtype, shape);
  std::vector<float> v(static_cast<size_t>(probe.numel()));
  for (float& x : v) x = (rng_.next_f32() * 2.0f - 1.0f) * scale;
  return place(dtype, shape, encode(dtype, v), true);
}

std::string_view outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kPass:
      return "pass";
    case Outcome::kFail:
      return "FAIL";
    case Outcome::kUnsupported:
      return "unsupported";
  }
  return "?";
}

std::vector<CaseResult> run_case(const Case& c, Device& reference, const std::vector<Device*>& targets) {
  const uint64_t seed = std::hash<std::string>{}(c.op + "/" + std::string(dtype_name(c.dtype)) + "/" + c.shape) | 1;
  std::vector<CaseResult> results(targets.size());
  std::string why;
  auto want = execute(c, reference, seed, &why);
  for (size_t i = 0; i < targets.size(); ++i) {
    CaseResult& r = results[i];
    if (!want.ok()) {
      r.outcome = Outcome::kFail;
      r.detail = "the reference failed: " + want.status().to_string();
      continue;
    }
    std::string unsupported;
    auto got = execute(c, *targets[i], seed, &unsupported);
    if (!unsupported.empty()) {
      r.outcome = Outcome::kUnsupported;
      r.detail = unsupported;
    } else if (!got.ok()) {
      r.outcome = Outcome::kFail;
      r.detail = got.status().to_string();
    } else if (!got->guard_error.empty()) {
      r.outcome = Outcome::kFail;
      r.detail = got->guard_error;
    } else {
      r = compare(c, *want, *got);
    }
  }
  return results;
}

}  // namespace tessera::ops::conformance
