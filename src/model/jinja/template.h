// A compiled Jinja template, the entry point of model/jinja: parse once (at model load), render per
// request. This is the engine that chat templates (tokenizer.chat_template, chat_template.jinja) run on;
// its output equals @huggingface/jinja's (the renderer transformers.js uses) on the real templates of
// llama.cpp's models/templates/ (tests/model/jinja_templates_test.cc checks it).
//
// What it covers: expressions with Python's operators, `a if b else c`, filters, tests, `for` (loop.*,
// tuple unpacking, `if` filter, else), `if/elif/else`, `set` (tuples, namespace attributes, block set),
// macros with defaults, varargs/kwargs and call blocks, `namespace()`, `raise_exception()`,
// `strftime_now()`, `range()`, `tojson` (indent, separators, ensure_ascii, sort_keys), slicing and the
// string and dict methods templates call. Whitespace control is what transformers sets: trim_blocks and
// lstrip_blocks on, plus `{%-`/`-%}`.
//
// Thread-safety: a Template is immutable after parse(); render() may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "model/jinja/value.h"

namespace tessera::model::jinja {

struct Node;

struct RenderLimits {
  size_t max_output_bytes = 8u << 20;  // any one block's text, and so the whole prompt
  uint64_t max_steps = 20'000'000;     // evaluated nodes; a real chat template needs thousands
  int max_call_depth = 64;             // nested macro calls
  int64_t max_range = 1'000'000;       // elements of one range()
};

struct RenderOptions {
  // strftime_now's clock: seconds since the epoch, local time unless utc; unset: the system clock.
  std::optional<int64_t> now_unix_seconds;
  bool utc = false;
  RenderLimits limits;
};

class Template {
 public:
  // InvalidArgument "line N: ..." when the source does not lex or parse.
  static Result<Template> parse(std::string_view source);

  // Renders with `context` as the global variables. InvalidArgument "line N: ..." for a runtime error (a
  // type mismatch, raise_exception's message, an unknown filter); ResourceExhausted past a limit.
  Result<std::string> render(const Object& context, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Node> root_;
};

}  // namespace tessera::model::jinja
