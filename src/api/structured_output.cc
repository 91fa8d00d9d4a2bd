#include "api/structured_output.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace tessera::api {
namespace {

using ojson = nlohmann::ordered_json;
using Kind = StructuredOutput::Kind;

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// One request for structured output; a second one in the same body is refused.
struct Collector {
  StructuredOutput& out;
  std::string& param;
  Status status;

  bool set(Kind kind, std::string spec, const std::string& field) {
    if (!status.ok()) return false;
    if (!out.none()) {
      param = field;
      status = invalid_argument(
          fmt::format("'{}' and '{}' both ask for structured output; send one of them", out.field, field));
      return false;
    }
    out.kind = kind;
    out.spec = std::move(spec);
    out.field = field;
    return true;
  }
  void fail(const std::string& field, std::string message) {
    if (!status.ok()) return;
    param = field;
    status = invalid_argument(std::move(message));
  }
};

// A schema given as an object (or, as vLLM allows, as a JSON string holding one).
bool schema_text(const ojson& v, std::string& text) {
  if (v.is_object() || v.is_boolean()) {
    text = dump(v);
    return true;
  }
  if (v.is_string()) {
    ojson parsed = ojson::parse(v.get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean())) return false;
    text = dump(parsed);
    return true;
  }
  return false;
}

bool choices_text(const ojson& v, std::string& text) {
  if (!v.is_array() || v.empty()) return false;
  for (const ojson& c : v)
    if (!c.is_string()) return false;
  text = dump(v);
  return true;
}

void response_format(const ojson& v, Collector& c) {
  if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
    return c.fail("response_format", "'response_format' must be an object with a string 'type'");
  const std::string type = v["type"].get<std::string>();
  if (type == "text") return;
  if (type == "json_object") {
    // llama-server's extension: {"type": "json_object", "schema": {...}}.
    if (v.contains("schema") && !v["schema"].is_null()) {
      std::string text;
      if (!schema_text(v["schema"], text))
        return c.fail("response_format", "'response_format.schema' must be a JSON schema object");
      c.set(Kind::kJsonSchema, text, "response_format");
      return;
    }
    c.set(Kind::kJsonObject, "", "response_format");
    return;
  }
  if (type == "json_schema") {
    if (!v.contains("json_schema") || !v["json_schema"].is_object())
      return c.fail("response_format", "'response_format' of type 'json_schema' needs a 'json_schema' object");
    const ojson& js = v["json_schema"];
    if (js.contains("name") && !js["name"].is_null() && !js["name"].is_string())
      return c.fail("response_format", "'response_format.json_schema.name' must be a string");
    if (js.contains("strict") && !js["strict"].is_null() && !js["strict"].is_boolean())
      return c.fail("response_format", "'response_format.json_schema.strict' must be a boolean");
    std::string text = "{}";  // no schema: any JSON value
    if (js.contains("schema") && !js["schema"].is_null() && !schema_text(js["schema"], text))
      return c.fail("response_format", "'response_format.json_schema.schema' must be a JSON schema object");
    c.set(Kind::kJsonSchema, text, "response_format");
    return;
  }
  c.fail("response_format", fmt::format("'response_format' type '{}' is not supported; use 'text', 'json_object' or "
                                        "'json_schema'",
                                        type));
}

void structured_outputs(const ojson& v, Collector& c, std::string& whitespace) {
  if (!v.is_object()) return c.fail("structured_outputs", "'structured_outputs' must be an object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& k = it.key();
    const ojson& x = it.value();
    if (x.is_null()) continue;
    std::string text;
    const std::string field = "structured_outputs." + k;
    if (k == "json") {
      if (!schema_text(x, text)) return c.fail("structured_outputs", "'structured_outputs.json' must be a JSON schema");
      c.set(Kind::kJsonSchema, text, "structured_outputs");
    } else if (k == "regex") {
      if (!x.is_string()) return c.fail("structured_outputs", "'structured_outputs.regex' must be a string");
      c.set(Kind::kRegex, x.get<std::string>(), "structured_outputs");
    } else if (k == "choice") {
      if (!choices_text(x, text))
        return c.fail("structured_outputs", "'structured_outputs.choice' must be a non-empty array of strings");
      c.set(Kind::kChoice, text, "structured_outputs");
    } else if (k == "grammar") {
      if (!x.is_string()) return c.fail("structured_outputs", "'structured_outputs.grammar' must be a string (GBNF)");
      c.set(Kind::kGrammar, x.get<std::string>(), "structured_outputs");
    } else if (k == "json_object") {
      if (!x.is_boolean()) return c.fail("structured_outputs", "'structured_outputs.json_object' must be a boolean");
      if (x.get<bool>()) c.set(Kind::kJsonObject, "", "structured_outputs");
    } else if (k == "whitespace_pattern") {
      if (!x.is_string())
        return c.fail("structured_outputs", "'structured_outputs.whitespace_pattern' must be a string");
      whitespace = x.get<std::string>();
    } else if (k == "disable_any_whitespace") {
      if (!x.is_boolean())
        return c.fail("structured_outputs", "'structured_outputs.disable_any_whitespace' must be a boolean");
      if (x.get<bool>() && whitespace.empty()) whitespace = "(?:)";
    } else if (k == "disable_fallback" || k == "disable_additional_properties") {
      // One engine, and no additional properties unless a schema allows them: nothing to switch.
      if (!x.is_boolean()) return c.fail("structured_outputs", fmt::format("'{}' must be a boolean", field));
    } else if (k == "structural_tag") {
      return c.fail("structured_outputs", "'structured_outputs.structural_tag' is not supported");
    } else {
      return c.fail("structured_outputs", fmt::format("unknown field '{}'", field));
    }
    if (!c.status.ok()) return;
  }
}

}  // namespace

std::string_view structured_kind_name(Kind k) {
  switch (k) {
    case Kind::kNone:
      return "";
    case Kind::kJsonObject:
      return "json_object";
    case Kind::kJsonSchema:
      return "json_schema";
    case Kind::kRegex:
      return "regex";
    case Kind::kChoice:
      return "choice";
    case Kind::kGrammar:
      return "grammar";
  }
  return "";
}

Status parse_structured_output(std::string_view body, StructuredOutput& out, std::string& param) {
  out = StructuredOutput{};
  const ojson j = ojson::parse(body, nullptr, false);
  if (!j.is_object()) return ok_status();  // parse_request reports that
  Collector c{out, param, ok_status()};
  std::string whitespace;
  auto present = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  if (present("response_format")) response_format(j["response_format"], c);
  if (present("structured_outputs")) structured_outputs(j["structured_outputs"], c, whitespace);
  if (present("guided_json")) {
    std::string text;
    if (!schema_text(j["guided_json"], text))
      c.fail("guided_json", "'guided_json' must be a JSON schema (an object or its JSON text)");
    else
      c.set(Kind::kJsonSchema, text, "guided_json");
  }
  if (present("guided_regex")) {
    if (!j["guided_regex"].is_string())
      c.fail("guided_regex", "'guided_regex' must be a string");
    else
      c.set(Kind::kRegex, j["guided_regex"].get<std::string>(), "guided_regex");
  }
  if (present("guided_choice")) {
    std::string text;
    if (!choices_text(j["guided_choice"], text))
      c.fail("guided_choice", "'guided_choice' must be a non-empty array of strings");
    else
      c.set(Kind::kChoice, text, "guided_choice");
  }
  if (present("guided_grammar")) {
    if (!j["guided_grammar"].is_string())
      c.fail("guided_grammar", "'guided_grammar' must be a string (GBNF)");
    else
      c.set(Kind::kGrammar, j["guided_grammar"].get<std::string>(), "guided_grammar");
  }
  if (present("guided_whitespace_pattern")) {
    if (!j["guided_whitespace_pattern"].is_string())
      c.fail("guided_whitespace_pattern", "'guided_whitespace_pattern' must be a string");
    else
      whitespace = j["guided_whitespace_pattern"].get<std::string>();
  }
  if (present("guided_decoding_backend") && !j["guided_decoding_backend"].is_string())
    c.fail("guided_decoding_backend", "'guided_decoding_backend' must be a string");
  // llama-server's fields.
  if (present("json_schema")) {
    std::string text;
    if (!schema_text(j["json_schema"], text))
      c.fail("json_schema", "'json_schema' must be a JSON schema object");
    else
      c.set(Kind::kJsonSchema, text, "json_schema");
  }
  if (present("grammar")) {
    if (!j["grammar"].is_string())
      c.fail("grammar", "'grammar' must be a string (GBNF)");
    else if (!j["grammar"].get<std::string>().empty())
      c.set(Kind::kGrammar, j["grammar"].get<std::string>(), "grammar");
  }
  if (!c.status.ok()) return c.status;
  if (!whitespace.empty() && out.kind != Kind::kJsonSchema && out.kind != Kind::kJsonObject) {
    param = "guided_whitespace_pattern";
    return invalid_argument("a whitespace pattern applies to JSON output only");
  }
  out.whitespace = whitespace;
  return ok_status();
}

nlohmann::json structured_to_json(const StructuredOutput& s) {
  return {{"kind", std::string(structured_kind_name(s.kind))}, {"spec", s.spec}, {"whitespace", s.whitespace}};
}

Result<StructuredOutput> structured_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("kind") || !j["kind"].is_string() || !j.contains("spec") || !j["spec"].is_string())
    return invalid_argument("'structured' must be {\"kind\", \"spec\", \"whitespace\"}");
  StructuredOutput s;
  const std::string kind = j["kind"].get<std::string>();
  bool known = false;
  for (Kind k : {Kind::kNone, Kind::kJsonObject, Kind::kJsonSchema, Kind::kRegex, Kind::kChoice, Kind::kGrammar}) {
    if (structured_kind_name(k) == kind) s.kind = k, known = true;
  }
  if (!known) return invalid_argument(fmt::format("'structured.kind' '{}' is unknown", kind));
  s.spec = j["spec"].get<std::string>();
  if (j.contains("whitespace")) {
    if (!j["whitespace"].is_string()) return invalid_argument("'structured.whitespace' must be a string");
    s.whitespace = j["whitespace"].get<std::string>();
  }
  constexpr size_t kMaxSpec = 1 << 20;
  if (s.spec.size() > kMaxSpec || s.whitespace.size() > 4096) return invalid_argument("'structured' is too large");
  s.field = "structured";
  return s;
}

}  // namespace tessera::api
