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
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "model/jinja/value.h"

namespace tessera::model::jinja {

struct Node;

// What one render may spend (docs/security.md, "Chat templates"). The real templates of llama.cpp's models/templates
// render a long conversation in a few thousand steps and well under a megabyte; these leave orders of magnitude
// of room while a hostile template stops within about a second of one core (kDefaultTemplateSteps).
struct RenderLimits {
  size_t max_output_bytes = 8u << 20;      // the whole prompt, any one block's text, and any one string value
  uint64_t max_memory_bytes = 256u << 20;  // strings and arrays the render holds at once (budget.h)
  uint64_t max_built_bytes = 4ull << 30;   // strings and arrays built over the whole render: the copying work
  uint64_t max_steps = 2'000'000;          // evaluated nodes
  int max_call_depth = 64;                 // nested macro calls
  int64_t max_range = 1'000'000;           // elements of one range()
};

struct RenderOptions {
  // strftime_now's clock: seconds since the epoch, local time unless utc; unset: the system clock.
  std::optional<int64_t> now_unix_seconds;
  bool utc = false;
  RenderLimits limits;
  // Polled every few thousand steps; true stops the render with Cancelled (the client went away). May be empty.
  std::function<bool()> cancelled;
};

class Template {
 public:
  // InvalidArgument "line N: ..." when the source does not lex or parse.
  static Result<Template> parse(std::string_view source);

  // Renders with `context` as the global variables. InvalidArgument "line N: ..." for a runtime error (a
  // type mismatch, raise_exception's message, an unknown filter); ResourceExhausted past a limit (the message
  // names it); Cancelled when options.cancelled() said so.
  Result<std::string> render(const Object& context, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Node> root_;
};

}  // namespace tessera::model::jinja
