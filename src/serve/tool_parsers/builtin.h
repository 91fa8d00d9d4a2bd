// The built-in tool-call parsers (one file each) and what they share: JSON call objects and argument objects read
// byte by byte, markers that may arrive split across tokens. Internal to serve/tool_parsers/.
#pragma once

#include <string>
#include <string_view>

#include "serve/tool_parsers/json_scanner.h"
#include "serve/tool_parsers/tool_parser.h"

namespace tessera::serve {

void register_builtin_tool_parsers(Registry<ToolParserPlugin>& registry);

ToolParserPlugin hermes_tool_parser();
ToolParserPlugin qwen3_coder_tool_parser();
ToolParserPlugin llama3_json_tool_parser();
ToolParserPlugin pythonic_tool_parser();
ToolParserPlugin mistral_tool_parser();
ToolParserPlugin openai_tool_parser();

std::string random_alnum(size_t n);

// The longest suffix of `text` that is a proper prefix of `marker`: bytes to hold back.
size_t partial_suffix(std::string_view text, std::string_view marker);
// `text` (not empty) is a proper prefix of `marker`.
bool is_partial(std::string_view text, std::string_view marker);
bool is_space(char c);

// Reads one call object, {"name": "f", "arguments"|"parameters": {...} or "{...}", "id": "...", "type": "..."},
// a byte at a time. Any other member, or a member of the wrong type, is an error: the text is not a call.
class CallObjectReader {
 public:
  JsonScanner::Step feed(char c);
  bool has_name() const { return has_name_; }
  const std::string& name() const { return name_; }
  const std::string& id() const { return id_; }
  // Argument text read since the last take: an object as written, byte by byte; one given as a JSON string
  // arrives decoded when the string closes.
  std::string take_arguments() { return std::exchange(args_, {}); }

 private:
  enum class Member : uint8_t { kNone, kName, kArguments, kId, kType };
  JsonScanner scan_;
  Member member_ = Member::kNone;
  std::string key_, value_, args_, name_, id_;
  bool in_value_ = false, args_string_ = false, has_name_ = false;
};

// A parser of calls written as JSON: call objects (CallObjectReader) and bare argument objects.
class JsonCallParser : public ToolParser {
 protected:
  using ToolParser::ToolParser;
  // A call object starts after `marker`; object_byte() feeds it. kDone: the call closed (complete, or broken
  // when its arguments do not parse); kError: broken (its text went back as content).
  void begin_object_call(std::string_view marker);
  JsonScanner::Step object_byte(char c);
  // A call whose name is known starts after `marker`; args_byte() feeds its arguments object.
  void begin_args_call(std::string_view marker, std::string name, std::string id = {});
  JsonScanner::Step args_byte(char c);

 private:
  CallObjectReader object_;
  JsonScanner args_scan_;
};

}  // namespace tessera::serve
