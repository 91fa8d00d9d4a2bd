#include "serve/tool_calls.h"

#include <nlohmann/json.hpp>

namespace tessera::serve {
namespace {

using Json = nlohmann::ordered_json;
constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>", kPythonTag = "<|python_tag|>";

std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// {"name": "f", "arguments"|"parameters": {...} or a JSON string} -> a call; false when it is not one.
bool call_from_json(std::string_view text, ToolCall& out) {
  Json j = Json::parse(trim(text), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const char* key = j.contains("arguments") ? "arguments" : j.contains("parameters") ? "parameters" : nullptr;
  Json args = key ? j[key] : Json::object();
  if (args.is_string()) {
    Json parsed = Json::parse(args.get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) return false;
    args = std::move(parsed);
  }
  if (!args.is_object()) return false;
  out.name = j["name"].get<std::string>();
  out.arguments = args.dump(-1, ' ', false, Json::error_handler_t::replace);
  return true;
}

ParsedReply parse_hermes(std::string_view text) {
  ParsedReply r;
  size_t first = text.find(kOpen);
  if (first == std::string_view::npos) {
    r.content = std::string(text);
    return r;
  }
  std::string content(text.substr(0, first));
  size_t pos = first;
  while (pos < text.size()) {
    size_t open = text.find(kOpen, pos);
    if (open == std::string_view::npos) {
      content += text.substr(pos);
      break;
    }
    content += text.substr(pos, open - pos);
    size_t body = open + kOpen.size();
    size_t close = text.find(kClose, body);
    std::string_view inner = text.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body);
    ToolCall c;
    if (!call_from_json(inner, c)) {
      r.calls.clear();
      r.content = std::string(text);
      return r;
    }
    r.calls.push_back(std::move(c));
    if (close == std::string_view::npos) break;
    pos = close + kClose.size();
  }
  r.content = std::string(trim(content));
  return r;
}

ParsedReply parse_llama3(std::string_view text) {
  ParsedReply r;
  std::string_view t = trim(text);
  if (t.substr(0, kPythonTag.size()) == kPythonTag) t = trim(t.substr(kPythonTag.size()));
  if (t.empty() || t.front() != '{') {
    r.content = std::string(text);
    return r;
  }
  // One object, or several separated by ';' (Llama 3.2 writes parallel calls so).
  ToolCall c;
  if (call_from_json(t, c)) {
    r.calls.push_back(std::move(c));
    return r;
  }
  size_t pos = 0;
  while (pos <= t.size()) {
    size_t semi = t.find(';', pos);
    std::string_view part = t.substr(pos, semi == std::string_view::npos ? std::string_view::npos : semi - pos);
    ToolCall one;
    if (!call_from_json(part, one)) {
      r.calls.clear();
      r.content = std::string(text);
      return r;
    }
    r.calls.push_back(std::move(one));
    if (semi == std::string_view::npos) break;
    pos = semi + 1;
  }
  return r;
}

// The longest suffix of `text` that is a proper prefix of `marker`.
size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace

ParsedReply parse_tool_calls(std::string_view text, model::ToolCallFormat format) {
  switch (format) {
    case model::ToolCallFormat::kHermes:
      return parse_hermes(text);
    case model::ToolCallFormat::kLlama3Json:
      return parse_llama3(text);
    case model::ToolCallFormat::kNone:
      break;
  }
  return ParsedReply{std::string(text), {}};
}

size_t releasable_content(std::string_view text, model::ToolCallFormat format) {
  switch (format) {
    case model::ToolCallFormat::kNone:
      return text.size();
    case model::ToolCallFormat::kHermes: {
      size_t open = text.find(kOpen);
      if (open != std::string_view::npos) return open;
      return text.size() - partial_marker_suffix(text, kOpen);
    }
    case model::ToolCallFormat::kLlama3Json: {
      // A reply is a call or not from its first non-space characters; hold back until they decide.
      size_t b = text.find_first_not_of(" \t\r\n");
      if (b == std::string_view::npos) return 0;
      std::string_view rest = text.substr(b);
      if (rest.front() == '{') return 0;
      if (kPythonTag.substr(0, std::min(rest.size(), kPythonTag.size())) == rest.substr(0, kPythonTag.size())) return 0;
      return text.size();
    }
  }
  return text.size();
}

}  // namespace tessera::serve
