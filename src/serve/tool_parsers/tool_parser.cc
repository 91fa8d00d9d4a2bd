#include "serve/tool_parsers/tool_parser.h"

#include <mutex>
#include <random>

#include <fmt/format.h>

#include "serve/tool_parsers/builtin.h"

namespace tessera::serve {
namespace {

using Json = nlohmann::ordered_json;

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

std::string random_alnum(size_t n) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 gen{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlnum) - 2);
  std::string out(n, ' ');
  for (char& c : out) c = kAlnum[pick(gen)];
  return out;
}

Result<ToolParserContext> ToolParserContext::from_tools_json(std::string_view tools_json) {
  ToolParserContext c;
  if (tools_json.empty()) return c;
  const Json tools = Json::parse(tools_json, nullptr, false);
  if (!tools.is_array()) return invalid_argument("'tools' must be an array");
  for (const Json& t : tools) {
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object() || !t["function"].contains("name") ||
        !t["function"]["name"].is_string())
      return invalid_argument("each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    const Json& f = t["function"];
    c.tools.push_back({f["name"].get<std::string>(), f.contains("parameters") ? f["parameters"] : Json()});
  }
  return c;
}

const ToolSpec* ToolParserContext::find(std::string_view name) const {
  for (const ToolSpec& t : tools)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<ToolEvent> ToolParser::feed(std::string_view text) {
  buf_.append(text);
  parse(false);
  return std::exchange(events_, {});
}

std::vector<ToolEvent> ToolParser::finish() {
  parse(true);
  if (call_open_) break_call();
  if (!buf_.empty()) content(std::exchange(buf_, {}));
  return std::exchange(events_, {});
}

std::string ToolParser::new_call_id() {
  return context_.id_chars > 0 ? random_alnum(context_.id_chars) : "call_" + random_alnum(24);
}

void ToolParser::content(std::string_view text) {
  if (text.empty()) return;
  if (!events_.empty() && events_.back().kind == ToolEvent::Kind::kContent) {
    events_.back().text.append(text);
    return;
  }
  events_.push_back({ToolEvent::Kind::kContent, -1, std::string(text), {}, {}});
}

void ToolParser::open_call(std::string_view marker) {
  call_open_ = true;
  started_ = false;
  covered_ = 0;
  raw_.assign(marker);
  name_.clear();
  args_.clear();
}

void ToolParser::start_call(std::string name, std::string id) {
  if (id.empty()) id = new_call_id();
  name_ = name;
  events_.push_back({ToolEvent::Kind::kCallStart, next_index_++, std::move(name), std::move(id), {}});
  started_ = true;
  covered_ = raw_.size();
}

void ToolParser::call_arguments(std::string_view piece) {
  covered_ = raw_.size();
  if (piece.empty()) return;
  args_.append(piece);
  const int index = next_index_ - 1;
  if (!events_.empty() && events_.back().kind == ToolEvent::Kind::kArguments && events_.back().index == index) {
    events_.back().text.append(piece);
    return;
  }
  events_.push_back({ToolEvent::Kind::kArguments, index, std::string(piece), {}, {}});
}

void ToolParser::close_call() {
  if (!started_) return break_call();
  if (trim(args_).empty()) call_arguments("{}");
  const Json args = Json::parse(args_, nullptr, false);
  if (!args.is_object()) return break_call();
  events_.push_back({ToolEvent::Kind::kCallEnd, next_index_ - 1, {}, {}, {}});
  completed_++;
  call_open_ = started_ = false;
  raw_.clear();
}

void ToolParser::break_call() {
  if (started_) {
    broken_++;
    events_.push_back(
        {ToolEvent::Kind::kCallBroken, next_index_ - 1, raw_.substr(std::min(covered_, raw_.size())), {}, raw_});
  } else {
    content(raw_);
  }
  call_open_ = started_ = false;
  raw_.clear();
}

ParsedReply assemble(const std::vector<ToolEvent>& events) {
  ParsedReply r;
  std::vector<ToolCall> calls;
  std::vector<int> state;  // per index: 0 open, 1 complete, 2 broken
  for (const ToolEvent& e : events) {
    switch (e.kind) {
      case ToolEvent::Kind::kContent:
        r.content += e.text;
        break;
      case ToolEvent::Kind::kCallStart:
        calls.resize(static_cast<size_t>(e.index) + 1);
        state.resize(calls.size(), 0);
        calls[static_cast<size_t>(e.index)] = {e.id, e.text, {}};
        break;
      case ToolEvent::Kind::kArguments:
        calls[static_cast<size_t>(e.index)].arguments += e.text;
        break;
      case ToolEvent::Kind::kCallEnd:
        state[static_cast<size_t>(e.index)] = 1;
        break;
      case ToolEvent::Kind::kCallBroken:
        state[static_cast<size_t>(e.index)] = 2;
        r.content += e.raw;  // the whole call's text, where it stood
        break;
    }
  }
  for (size_t i = 0; i < calls.size(); ++i)
    if (state[i] == 1) r.calls.push_back(std::move(calls[i]));
  if (!r.calls.empty()) r.content = std::string(trim(r.content));
  return r;
}

ParsedReply parse_whole(ToolParser& parser, std::string_view text) {
  std::vector<ToolEvent> events = parser.feed(text);
  std::vector<ToolEvent> rest = parser.finish();
  events.insert(events.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
  return assemble(events);
}

Registry<ToolParserPlugin>& tool_parsers() {
  static Registry<ToolParserPlugin> registry("tool-call parser");
  static std::once_flag once;
  std::call_once(once, [] { register_builtin_tool_parsers(registry); });
  return registry;
}

Result<std::string> choose_tool_parser(std::string_view flag, std::string_view template_source) {
  if (flag == "none") return std::string("none");
  if (!flag.empty()) {
    auto found = tool_parsers().find(flag);
    if (!found.ok()) return not_found(fmt::format("{}, none", found.status().message()));
    return std::string(flag);
  }
  if (template_source.empty()) return std::string("none");
  for (const auto& e : tool_parsers().entries())
    if (e.factory.detect && e.factory.detect(template_source)) return e.name;
  return std::string("none");
}

}  // namespace tessera::serve
