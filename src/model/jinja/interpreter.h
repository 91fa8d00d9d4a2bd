// The Jinja evaluator (internal to model/jinja): walks the syntax tree over a chain of scopes and returns
// the rendered text, with the semantics of @huggingface/jinja (see value.h for why that one).
//
// Scopes: a `for` gets one scope for the whole loop (a `set` inside the loop is gone after it, as in Jinja);
// a macro runs in a new scope whose parent is the *caller's* scope, as in the reference. `break` and
// `continue` drop the output of the iteration they end, as the reference does.
//
// Errors unwind as RenderError (a private exception type: raise_exception and hundreds of type checks deep
// inside expressions make that far more readable than threading a Status through every call); Template
// catches it, so no exception leaves the module. Every evaluation step counts against a budget, output has
// a size cap, values built a memory budget (budget.h) and macro calls a depth cap, so no template can loop,
// recurse or grow without bound; every few thousand steps the caller's cancellation is polled.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/jinja/ast.h"
#include "model/jinja/template.h"
#include "model/jinja/value.h"

namespace tessera::model::jinja {

struct RenderError {
  std::string message;
  int line = 0;            // 0: not known yet; the interpreter adds the line of the node being evaluated
  bool limit = false;      // a RenderLimits cap, not a template error
  bool cancelled = false;  // RenderOptions::cancelled said stop
};
[[noreturn]] void fail(std::string message);
[[noreturn]] void fail_limit(std::string message);

struct Env {
  explicit Env(std::shared_ptr<Env> p = nullptr) : parent(std::move(p)) {}
  std::shared_ptr<Env> parent;
  std::unordered_map<std::string, Value> vars;
  Value lookup(const std::string& name) const;
};
using EnvPtr = std::shared_ptr<Env>;

class Interpreter {
 public:
  explicit Interpreter(const RenderOptions& options) : options_(options) {}

  std::string run(const Node& program, const EnvPtr& globals);
  Value eval(const Node& n, const EnvPtr& env);
  std::string block(const NodeList& body, const EnvPtr& env);
  const RenderOptions& options() const { return options_; }

  // filters.cc
  Value apply_filter(const Value& operand, const Node& filter, const EnvPtr& env);
  bool apply_test(const std::string& name, const Value& operand, const Value* arg);

  // Positional arguments, then keyword arguments (empty when none).
  struct Args {
    std::vector<Value> positional;
    Object keywords;
  };
  Args eval_args(const NodeList& args, const EnvPtr& env);

 private:
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };

  Value eval_binary(const Node& n, const EnvPtr& env);
  Value eval_member(const Node& n, const EnvPtr& env);
  Value eval_slice(const Value& object, const Node& slice, const EnvPtr& env);
  Value eval_call(const Node& n, const EnvPtr& env);
  Value eval_set(const Node& n, const EnvPtr& env);
  Value eval_for(const Node& n, const EnvPtr& env);
  Value eval_macro(const Node& n, const EnvPtr& env);
  Value eval_call_block(const Node& n, const EnvPtr& env);
  void bind_macro_arguments(const std::string& name, const NodeList& params, bool wants_kwargs, bool wants_varargs,
                            std::vector<Value> args, const EnvPtr& scope);
  void check_output(size_t size) const;
  // One step of the budget; every few thousand, the caller's cancellation is polled.
  void step();

  const RenderOptions& options_;
  Flow flow_ = Flow::kNormal;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
};

// builtins.cc: the methods a value answers to (`s.strip()`, `d.items()`, `xs.length`); undefined when none.
Value member_builtin(const Value& object, const std::string& name);
// The globals every template sees: range, namespace, raise_exception, strftime_now, true/false/none.
void install_globals(Env& env, const RenderOptions& options);
// Ordering for `sort` and `dictsort`; RenderError on values that do not compare.
int compare_values(const Value& a, const Value& b, bool case_sensitive);
// Attribute paths of `map(attribute=...)` and `sort(attribute=...)`: "a.b.0".
Value attribute_path(const Value& item, const std::string& path);

}  // namespace tessera::model::jinja
