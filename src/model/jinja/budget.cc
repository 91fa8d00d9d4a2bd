#include "model/jinja/budget.h"

#include <fmt/format.h>

#include "model/jinja/interpreter.h"
#include "model/jinja/value.h"

namespace tessera::model::jinja {
namespace {

thread_local std::shared_ptr<RenderBudget> current;

// Charges `bytes` to `b`: fails (a limit RenderError) past either limit, leaving nothing charged.
void charge(RenderBudget& b, size_t bytes) {
  if (b.live_bytes + bytes > b.limits.max_memory_bytes)
    fail_limit(
        fmt::format("the template holds more than {} bytes of values (its memory limit)", b.limits.max_memory_bytes));
  if (b.built_bytes + bytes > b.limits.max_built_bytes)
    fail_limit(fmt::format("rendering built more than {} bytes of values (the template's copying limit)",
                           b.limits.max_built_bytes));
  b.live_bytes += bytes;
  b.built_bytes += bytes;
}

// Refunds the live bytes of a payload when its last reference goes.
template <class T>
struct Refund {
  std::shared_ptr<RenderBudget> budget;
  size_t bytes;
  void operator()(T* p) const {
    budget->live_bytes -= bytes;
    delete p;
  }
};

template <class T>
std::shared_ptr<T> charged(T* raw, size_t bytes) {
  std::unique_ptr<T> owned(raw);
  if (!current) return std::shared_ptr<T>(std::move(owned));
  charge(*current, bytes);
  return std::shared_ptr<T>(owned.release(), Refund<T>{current, bytes});
}

}  // namespace

BudgetScope::BudgetScope(std::shared_ptr<RenderBudget> budget) : previous_(std::move(current)) {
  current = std::move(budget);
}
BudgetScope::~BudgetScope() { current = std::move(previous_); }

std::shared_ptr<const std::string> charged_string(std::string s) {
  check_value_size(s.size());
  const size_t bytes = sizeof(std::string) + s.capacity();
  return charged<const std::string>(new std::string(std::move(s)), bytes);
}

std::shared_ptr<Array> charged_array(Array items) {
  const size_t bytes = sizeof(Array) + items.capacity() * sizeof(Value);
  return charged<Array>(new Array(std::move(items)), bytes);
}

ScopedCharge::ScopedCharge(size_t bytes) : budget_(current), bytes_(bytes) {
  if (budget_) charge(*budget_, bytes_);
}
ScopedCharge::~ScopedCharge() {
  if (budget_) budget_->live_bytes -= bytes_;
}

void check_value_size(size_t size) {
  if (current && size > current->limits.max_output_bytes)
    fail_limit(fmt::format("a value of the template grew past {} bytes (the template's output limit)",
                           current->limits.max_output_bytes));
}

}  // namespace tessera::model::jinja
