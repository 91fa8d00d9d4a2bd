// Tool-call parsers: generated text -> OpenAI `tool_calls`, incrementally, one plug-in per model family's call
// format, registered by vLLM's parser names (`tessera serve --tool-call-parser NAME`, or detected from the chat
// template):
//   hermes       Hermes, Qwen2.5, Qwen3:  <tool_call>{"name": "f", "arguments": {...}}</tool_call>
//   qwen3_coder  Qwen3-Coder, Qwen3.5:    <tool_call><function=f><parameter=p>value</parameter></function></tool_call>
//                                          (values typed by the tool's parameter schema)
//   llama3_json  Llama 3.1/3.2/3.3:       {"name": "f", "parameters": {...}} as the reply, after an optional
//                                          <|python_tag|>, several separated by ';'
//   pythonic     Llama 3.2/4 pythonic:    [f(a=1, b="x"), g()] as the reply, after an optional <|python_tag|>
//   mistral      Mistral, Devstral:       [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "..."}, ...] or
//                                          [TOOL_CALLS]f[CALL_ID]id[ARGS]{...} (the id optional), repeated
//   openai       gpt-oss (harmony):       <|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}
//
// A parser takes text as it is generated (feed) and gives back events in order: content, a call's start (its
// index, id and name), pieces of its arguments (JSON text, each piece continuing a valid document), its end. The
// node turns them into OpenAI's stream deltas; a whole reply is the same events assembled (assemble()). Text that
// could still become a call is held back until it is known; nothing else is.
//
// A call that turns out broken (bad JSON, a call cut off by the end of the reply, an unknown shape) loses
// nothing: a whole reply gives the call's text back as content, verbatim, and no call; a stream, whose earlier
// deltas cannot be taken back, ends the call where it broke and sends the rest of its text as content.
//
// Thread-safety: a parser belongs to one choice of one request; the registry is thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/registry.h"
#include "base/status.h"

namespace tessera::serve {

struct ToolEvent {
  enum class Kind : uint8_t {
    kContent,    // text: content
    kCallStart,  // index, id, text: the function's name
    kArguments,  // index, text: the next piece of the arguments' JSON
    kCallEnd,    // index: the call is complete (its arguments parse as a JSON object)
    kCallBroken  // index; text: the call's text the deltas did not carry; raw: all of the call's text
  };
  Kind kind = Kind::kContent;
  int index = -1;
  std::string text;
  std::string id;
  std::string raw;
};

// One function the request offers (its `parameters` schema types Qwen3-Coder's values).
struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON schema object, or null
};

struct ToolParserContext {
  std::vector<ToolSpec> tools;
  // Ids the parser makes for calls: "call_" + 24 letters and digits (0), or this many letters and digits (Mistral's
  // templates require 9 when the calls come back in the conversation).
  size_t id_chars = 0;
  // The request's tools (an OpenAI `tools` array); InvalidArgument when it is not one.
  static Result<ToolParserContext> from_tools_json(std::string_view tools_json);
  const ToolSpec* find(std::string_view name) const;
};

class ToolParser {
 public:
  explicit ToolParser(ToolParserContext context) : context_(std::move(context)) {}
  virtual ~ToolParser() = default;
  // Text generated since the last call; the events it completes.
  std::vector<ToolEvent> feed(std::string_view text);
  // The reply is over: what was held back is resolved (a call not finished is broken).
  std::vector<ToolEvent> finish();
  // Calls that ended complete, and calls that broke, so far.
  int completed_calls() const { return completed_; }
  int broken_calls() const { return broken_; }

 protected:
  // Consumes buf_ as far as it can decide; `final`: no more text will come.
  virtual void parse(bool final) = 0;
  // The id a call gets when the model wrote none (ToolParserContext::id_chars).
  std::string new_call_id();

  // Building events. The current call's text is raw_ (everything since its opening marker); covered_ is how much
  // of it the deltas already carried.
  void content(std::string_view text);
  void open_call(std::string_view marker);                 // a call's opening marker was read
  void start_call(std::string name, std::string id = {});  // its name is known: the first delta
  void call_arguments(std::string_view piece);             // after start_call
  void close_call();  // complete: checks the arguments ("{}" when none came); broken when they do not parse
  void break_call();  // broken: its text goes back as content
  bool in_call() const { return call_open_; }
  bool call_started() const { return started_; }
  const std::string& call_name() const { return name_; }

  const ToolParserContext context_;
  std::string buf_;  // text not consumed yet
  std::string raw_;  // the current call's text

 private:
  std::vector<ToolEvent> events_;
  bool call_open_ = false, started_ = false;
  size_t covered_ = 0;
  std::string name_, args_;
  int next_index_ = 0, completed_ = 0, broken_ = 0;
};

// A whole reply from a parser's events: content outside the calls (trimmed when there are calls) and the calls.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI sends arguments as a string)
};
struct ParsedReply {
  std::string content;
  std::vector<ToolCall> calls;
};
ParsedReply assemble(const std::vector<ToolEvent>& events);
// feed(text) + finish(), assembled.
ParsedReply parse_whole(ToolParser& parser, std::string_view text);

// The plug-in: how to make a parser, how to recognise the family's template, and what the parser must see.
struct ToolParserPlugin {
  std::function<std::unique_ptr<ToolParser>(ToolParserContext)> create;
  // Whether a chat template's source writes this family's calls (detection tries plug-ins in registration order).
  std::function<bool(std::string_view template_source)> detect;
  // The call markers are special tokens (Mistral's [TOOL_CALLS], harmony's <|channel|>): the node spells special
  // tokens in the text it gives this parser.
  bool reads_special_tokens = false;
  size_t id_chars = 0;  // ToolParserContext::id_chars for this family's calls, forced ones included
  // Forced calls (tool_choice "required" or a named function) in the family's own syntax: GBNF text for the calls
  // of `tools` (serve/tool_parsers/forced_grammar.h), or an error when the syntax cannot express them (then the
  // JSON form of serve/forced_tools.h is used). Empty: always the JSON form.
  std::function<Result<std::string>(const std::vector<ToolSpec>& tools, bool parallel)> forced_grammar;
};

Registry<ToolParserPlugin>& tool_parsers();  // the built-in parsers, registered on first use

// `--tool-call-parser`: a registered name, "none", or empty to detect from the template ("none" when no family
// matches). NotFound listing the names for an unknown one.
Result<std::string> choose_tool_parser(std::string_view flag, std::string_view template_source);

// The parser that reads forced calls (tool_choice "required" or a named function, serve/forced_tools.h) in the
// grammar's JSON form: a named function's arguments object, or [{"name", "parameters"}, ...].
std::unique_ptr<ToolParser> make_forced_json_parser(ToolParserContext context, std::string forced_function);

}  // namespace tessera::serve
