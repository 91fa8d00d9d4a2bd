// The memory budget of one render (internal to model/jinja). A chat template is untrusted input (whoever publishes
// a model writes it), and a few steps of it can build gigabytes: `{% set s = s ~ s %}` forty times, `join` over a
// list holding one large string many times, or a loop copying an 8 MB string a million times. So the places that
// build values charge the render running on this thread, two ways:
// - live bytes: every string and array a Value holds (Value::string, Value::array, a loop's copy of its items)
//   counts while it is alive and is refunded when the last reference goes; past RenderLimits::max_memory_bytes
//   the render stops. This bounds the memory a template can hold.
// - bytes built: the same charges, never refunded; past RenderLimits::max_built_bytes the render stops. This
//   bounds the copying work, which steps alone do not (one step can copy megabytes).
// The loops that grow one string (JSON, join, replace, indent) check its size against max_output_bytes as it
// grows, before the memory is spent. Past any limit the render stops with a limit error (RenderError{limit}:
// ResourceExhausted, a 400 naming the limit at the API).
//
// Thread-safety: a render runs on one thread from start to end, and so do its values; the budget in use is
// thread-local. Outside a render (no BudgetScope on this thread) nothing is charged: values built while reading
// a request are not a render's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "model/jinja/template.h"
#include "model/jinja/value.h"

namespace tessera::model::jinja {

struct RenderBudget {
  explicit RenderBudget(const RenderLimits& l) : limits(l) {}
  RenderLimits limits;
  uint64_t live_bytes = 0;
  uint64_t built_bytes = 0;
};

// Installs `budget` as this thread's for its lifetime (restoring the previous one after).
class BudgetScope {
 public:
  explicit BudgetScope(std::shared_ptr<RenderBudget> budget);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  std::shared_ptr<RenderBudget> previous_;
};

// Holders of a value's payload, charged to the running render (plain make_shared outside one).
std::shared_ptr<const std::string> charged_string(std::string s);
std::shared_ptr<Array> charged_array(Array items);

// `bytes` held by the running render for this object's lifetime (a loop's copy of its items).
class ScopedCharge {
 public:
  explicit ScopedCharge(size_t bytes);
  ~ScopedCharge();
  ScopedCharge(const ScopedCharge&) = delete;
  ScopedCharge& operator=(const ScopedCharge&) = delete;

 private:
  std::shared_ptr<RenderBudget> budget_;
  size_t bytes_;
};

// One string about to reach `size` bytes: fails past the size limit of any one value (max_output_bytes).
void check_value_size(size_t size);

}  // namespace tessera::model::jinja
