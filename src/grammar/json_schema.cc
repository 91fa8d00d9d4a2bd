#include "grammar/json_schema.h"

#include <cmath>
#include <map>
#include <set>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "grammar/json_parts.h"
#include "grammar/regex.h"

namespace tessera::grammar {
namespace {

using ojson = nlohmann::ordered_json;

constexpr int kMaxDepth = 128;

// Keywords that only describe (never constrain) a value.
const std::set<std::string> kAnnotations = {
    "title",    "description",      "default",         "examples",      "$schema", "$id",
    "$comment", "readOnly",         "writeOnly",       "deprecated",    "$anchor", "name",
    "strict",   "contentMediaType", "contentEncoding", "discriminator", "example", "x-order"};
// Keywords this compiler enforces (per type, checked where used).
const std::set<std::string> kHandled = {"type",
                                        "enum",
                                        "const",
                                        "nullable",
                                        "properties",
                                        "required",
                                        "additionalProperties",
                                        "items",
                                        "prefixItems",
                                        "minItems",
                                        "maxItems",
                                        "minLength",
                                        "maxLength",
                                        "pattern",
                                        "format",
                                        "minimum",
                                        "maximum",
                                        "exclusiveMinimum",
                                        "exclusiveMaximum",
                                        "anyOf",
                                        "oneOf",
                                        "allOf",
                                        "$ref",
                                        "$defs",
                                        "definitions",
                                        "unevaluatedProperties"};

std::string pointer_escape(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const ojson& root, const JsonSchemaOptions& options) : root_(root), options_(options) {}

  Result<Ast> run() {
    TS_RETURN_IF_ERROR(add_whitespace());
    Expr body = visit(root_, "", 0);
    if (!status_.ok()) return status_;
    ast_.add("root", std::move(body));
    return std::move(ast_);
  }

  Result<Ast> any_object() {
    TS_RETURN_IF_ERROR(add_whitespace());
    ast_.add("root", Expr::ref(any_object_rule()));
    return std::move(ast_);
  }

 private:
  void fail(const std::string& path, std::string what) {
    if (status_.ok())
      status_ = invalid_argument(fmt::format("JSON schema at '{}': {}", path.empty() ? "#" : "#" + path, what));
  }

  Status add_whitespace() {
    if (options_.whitespace_regex.empty()) {
      // Nothing, one space, or a line break and up to 32 spaces or tabs of indentation (the convention of llama.cpp's
      // JSON grammars): room for compact and pretty-printed JSON, none for a model to wander off in blanks.
      ast_.add("ws", Expr::opt(Expr::alt(
                         {Expr::lit(" "),
                          Expr::seq({Expr::lit("\n"), Expr::repeat(Expr::cls({{'\t', '\t'}, {' ', ' '}}), 0, 32)})})));
      return ok_status();
    }
    auto e = parse_regex(options_.whitespace_regex);
    if (!e.ok()) return e.status().with_context("the whitespace pattern");
    ast_.add("ws", std::move(*e));
    return ok_status();
  }

  Expr ws() { return Expr::ref("ws"); }

  std::string fresh(const std::string& base) {
    std::string name;
    for (char c : base) name += (std::isalnum(static_cast<unsigned char>(c)) != 0) ? c : '-';
    if (name.empty() || name == "-") name = "value";
    if (name.size() > 40) name = name.substr(name.size() - 40);
    return fmt::format("{}-{}", name, ++count_);
  }

  // A named shared rule, defined on first use.
  std::string shared(const std::string& name, Expr (SchemaCompiler::*make)()) {
    if (defined_.insert(name).second) ast_.add(name, (this->*make)());
    return name;
  }
  Expr make_string() {
    return Expr::seq(
        {Expr::lit("\""), Expr::star(Expr::ref(shared("char", &SchemaCompiler::make_char))), Expr::lit("\"")});
  }
  Expr make_char() { return json::string_char(); }
  Expr make_value() {
    return Expr::alt({Expr::ref(any_object_rule()), Expr::ref(shared("array", &SchemaCompiler::make_array)),
                      Expr::ref(shared("string", &SchemaCompiler::make_string)),
                      Expr::ref(shared("number", &SchemaCompiler::make_number)), Expr::lit("true"), Expr::lit("false"),
                      Expr::lit("null")});
  }
  Expr make_number() { return json::number_expr(); }
  Expr make_object() {
    Expr member = Expr::seq({Expr::ref(shared("string", &SchemaCompiler::make_string)), ws(), Expr::lit(":"), ws(),
                             Expr::ref(shared("value", &SchemaCompiler::make_value))});
    return Expr::seq({Expr::lit("{"), ws(),
                      Expr::opt(Expr::seq({member, Expr::star(Expr::seq({ws(), Expr::lit(","), ws(), member})), ws()})),
                      Expr::lit("}")});
  }
  Expr make_array() {
    Expr v = Expr::ref(shared("value", &SchemaCompiler::make_value));
    return Expr::seq({Expr::lit("["), ws(),
                      Expr::opt(Expr::seq({v, Expr::star(Expr::seq({ws(), Expr::lit(","), ws(), v})), ws()})),
                      Expr::lit("]")});
  }
  std::string any_object_rule() { return shared("object", &SchemaCompiler::make_object); }
  Expr any_value() { return Expr::ref(shared("value", &SchemaCompiler::make_value)); }

  Expr literal_json(const ojson& v) { return Expr::lit(v.dump(-1, ' ', false, ojson::error_handler_t::replace)); }

  // Resolves a local $ref to a rule (visited once; recursion refers back to the rule).
  Expr ref(const std::string& target, const std::string& path, int depth) {
    if (target.empty() || target[0] != '#') {
      fail(path, fmt::format("$ref '{}' is not a local reference (only '#...' references are supported)", target));
      return {};
    }
    auto it = ref_rules_.find(target);
    if (it != ref_rules_.end()) return Expr::ref(it->second);
    const ojson* node = &root_;
    std::string pointer = target.substr(1);
    if (!pointer.empty()) {
      try {
        node = &root_.at(ojson::json_pointer(pointer));
      } catch (const std::exception&) {
        fail(path, fmt::format("$ref '{}' does not resolve within the schema", target));
        return {};
      }
    }
    const std::string name = fresh(pointer.empty() ? "root-ref" : pointer);
    ref_rules_[target] = name;
    Expr body = visit(*node, pointer, depth + 1);
    ast_.add(name, std::move(body));
    return Expr::ref(name);
  }

  Expr visit(const ojson& s, const std::string& path, int depth) {
    if (!status_.ok()) return {};
    if (depth > kMaxDepth) {
      fail(path, fmt::format("nested deeper than {} levels", kMaxDepth));
      return {};
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      fail(path, "the schema 'false' allows no value");
      return {};
    }
    if (!s.is_object()) {
      fail(path, "a schema must be an object or a boolean");
      return {};
    }
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (kHandled.count(k) != 0 || kAnnotations.count(k) != 0) continue;
      if (k.rfind("x-", 0) == 0) continue;  // vendor extensions
      if (k == "uniqueItems" && it.value() == false) continue;
      if (k == "additionalItems" || k == "minProperties" || k == "maxProperties" || k == "multipleOf" ||
          k == "uniqueItems" || k == "not" || k == "if" || k == "then" || k == "else" || k == "patternProperties" ||
          k == "propertyNames" || k == "contains" || k == "minContains" || k == "maxContains" ||
          k == "dependentRequired" || k == "dependentSchemas" || k == "dependencies" || k == "unevaluatedItems") {
        fail(path, fmt::format("'{}' is not supported by the grammar compiler", k));
        return {};
      }
      fail(path, fmt::format("unknown keyword '{}'", k));
      return {};
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) {
        fail(path, "'$ref' must be a string");
        return {};
      }
      return ref(s["$ref"].get<std::string>(), path, depth);
    }
    Expr e = visit_value(s, path, depth);
    if (s.contains("nullable") && s["nullable"] == true) return Expr::alt({std::move(e), Expr::lit("null")});
    return e;
  }

  static bool type_allows(const ojson& s, const std::string& t) {
    if (!s.contains("type")) return true;
    const ojson& ty = s["type"];
    if (ty.is_string()) return ty == t || (t == "integer" && ty == "number");
    for (const ojson& x : ty)
      if (x == t || (t == "integer" && x == "number")) return true;
    return false;
  }
  static bool value_has_type(const ojson& v, const ojson& s) {
    if (!s.contains("type")) return true;
    std::string t = v.is_null()                                       ? "null"
                    : v.is_boolean()                                  ? "boolean"
                    : v.is_number_integer() || v.is_number_unsigned() ? "integer"
                    : v.is_number()                                   ? "number"
                    : v.is_string()                                   ? "string"
                    : v.is_array()                                    ? "array"
                                                                      : "object";
    if (t == "number" && std::floor(v.get<double>()) == v.get<double>()) t = "integer";
    return type_allows(s, t);
  }

  Expr visit_value(const ojson& s, const std::string& path, int depth) {
    if (s.contains("const")) {
      if (!value_has_type(s["const"], s)) {
        fail(path + "/const", "the constant does not have the schema's type");
        return {};
      }
      return literal_json(s["const"]);
    }
    if (s.contains("enum")) {
      const ojson& values = s["enum"];
      if (!values.is_array() || values.empty()) {
        fail(path + "/enum", "'enum' must be a non-empty array");
        return {};
      }
      std::vector<Expr> alts;
      for (const ojson& v : values)
        if (value_has_type(v, s)) alts.push_back(literal_json(v));
      if (alts.empty()) {
        fail(path + "/enum", "no value of the enum has the schema's type");
        return {};
      }
      return alts.size() == 1 ? std::move(alts[0]) : Expr::alt(std::move(alts));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const ojson& branches = s[key];
      if (!branches.is_array() || branches.empty()) {
        fail(path + "/" + key, fmt::format("'{}' must be a non-empty array", key));
        return {};
      }
      std::vector<Expr> alts;
      for (size_t i = 0; i < branches.size(); ++i) {
        alts.push_back(
            visit(merged_with_parent(s, branches[i], key), path + "/" + key + "/" + std::to_string(i), depth + 1));
      }
      return alts.size() == 1 ? std::move(alts[0]) : Expr::alt(std::move(alts));
    }
    if (s.contains("allOf")) return visit_all_of(s, path, depth);
    if (s.contains("type")) {
      const ojson& ty = s["type"];
      if (ty.is_string()) return visit_typed(s, ty.get<std::string>(), path, depth);
      if (!ty.is_array() || ty.empty()) {
        fail(path + "/type", "'type' must be a string or a non-empty array of strings");
        return {};
      }
      std::vector<Expr> alts;
      for (const ojson& t : ty) {
        if (!t.is_string()) {
          fail(path + "/type", "'type' must be a string or a non-empty array of strings");
          return {};
        }
        alts.push_back(visit_typed(s, t.get<std::string>(), path, depth));
      }
      return alts.size() == 1 ? std::move(alts[0]) : Expr::alt(std::move(alts));
    }
    // No type: what the keywords imply, else any value.
    if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
      return visit_typed(s, "object", path, depth);
    if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems"))
      return visit_typed(s, "array", path, depth);
    if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") || s.contains("format"))
      return visit_typed(s, "string", path, depth);
    if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
        s.contains("exclusiveMaximum"))
      return visit_typed(s, "number", path, depth);
    return any_value();
  }

  // A branch of anyOf/oneOf inherits the type-specific keywords written beside the anyOf (a common style).
  static ojson merged_with_parent(const ojson& parent, const ojson& branch, const char* key) {
    if (!branch.is_object()) return branch;
    ojson out = branch;
    for (auto it = parent.begin(); it != parent.end(); ++it) {
      if (it.key() == key || it.key() == "$defs" || it.key() == "definitions" || kAnnotations.count(it.key()) != 0)
        continue;
      if (!out.contains(it.key()) && !branch.contains("$ref")) out[it.key()] = it.value();
    }
    return out;
  }

  Expr visit_all_of(const ojson& s, const std::string& path, int depth) {
    const ojson& parts = s["allOf"];
    if (!parts.is_array() || parts.empty()) {
      fail(path + "/allOf", "'allOf' must be a non-empty array");
      return {};
    }
    ojson merged = s;
    merged.erase("allOf");
    // A part that closes its object (additionalProperties false or a schema) must list every property the others
    // add: JSON Schema checks each part on its own.
    std::vector<std::pair<std::string, std::set<std::string>>> closed;
    std::set<std::string> all_props;
    for (size_t i = 0; i < parts.size(); ++i) {
      const ojson* p = &parts[i];
      std::string where = path + "/allOf/" + std::to_string(i);
      // Follow references so that their object keywords can merge.
      for (int hops = 0; p->is_object() && p->contains("$ref") && hops < 16; ++hops) {
        const std::string target = (*p)["$ref"].is_string() ? (*p)["$ref"].get<std::string>() : "";
        if (target.empty() || target[0] != '#') break;
        try {
          p = target.size() == 1 ? &root_ : &root_.at(ojson::json_pointer(target.substr(1)));
        } catch (const std::exception&) {
          fail(where, fmt::format("$ref '{}' does not resolve within the schema", target));
          return {};
        }
      }
      if (!p->is_object()) {
        fail(where, "allOf parts must be schema objects");
        return {};
      }
      std::set<std::string> mine;
      if (p->contains("properties") && (*p)["properties"].is_object())
        for (auto pr = (*p)["properties"].begin(); pr != (*p)["properties"].end(); ++pr) mine.insert(pr.key());
      all_props.insert(mine.begin(), mine.end());
      if (p->contains("additionalProperties") && (*p)["additionalProperties"] != true) closed.emplace_back(where, mine);
      for (auto it = p->begin(); it != p->end(); ++it) {
        const std::string& k = it.key();
        if (kAnnotations.count(k) != 0 || k == "$defs" || k == "definitions") continue;
        if (k == "properties" && it.value().is_object()) {
          for (auto pr = it.value().begin(); pr != it.value().end(); ++pr) {
            if (merged["properties"].contains(pr.key()) && merged["properties"][pr.key()] != pr.value()) {
              fail(where, fmt::format("allOf parts give property '{}' different schemas", pr.key()));
              return {};
            }
            merged["properties"][pr.key()] = pr.value();
          }
        } else if (k == "required" && it.value().is_array()) {
          for (const ojson& r : it.value()) merged["required"].push_back(r);
        } else if (!merged.contains(k) || merged[k] == it.value()) {
          merged[k] = it.value();
        } else {
          fail(where, fmt::format("allOf parts disagree on '{}' (only object schemas that merge are supported)", k));
          return {};
        }
      }
    }
    for (const auto& [where, mine] : closed) {
      for (const std::string& prop : all_props) {
        if (mine.count(prop) == 0) {
          fail(where, fmt::format("this allOf part forbids property '{}', which another part defines", prop));
          return {};
        }
      }
    }
    return visit(merged, path, depth + 1);
  }

  Expr visit_typed(const ojson& s, const std::string& type, const std::string& path, int depth) {
    if (type == "string") return visit_string(s, path);
    if (type == "integer" || type == "number") return visit_number(s, path, type == "integer");
    if (type == "boolean") return Expr::alt({Expr::lit("true"), Expr::lit("false")});
    if (type == "null") return Expr::lit("null");
    if (type == "object") return visit_object(s, path, depth);
    if (type == "array") return visit_array(s, path, depth);
    fail(path + "/type", fmt::format("unknown type '{}'", type));
    return {};
  }

  std::optional<int64_t> count_field(const ojson& s, const char* key, const std::string& path) {
    if (!s.contains(key)) return std::nullopt;
    const ojson& v = s[key];
    if (!v.is_number_integer() && !v.is_number_unsigned()) {
      fail(path + "/" + key, fmt::format("'{}' must be a non-negative integer", key));
      return std::nullopt;
    }
    const int64_t n = v.get<int64_t>();
    if (n < 0 || n > 100000) {
      fail(path + "/" + key, fmt::format("'{}' must be between 0 and 100000", key));
      return std::nullopt;
    }
    return n;
  }

  Expr visit_string(const ojson& s, const std::string& path) {
    const auto min = count_field(s, "minLength", path);
    const auto max = count_field(s, "maxLength", path);
    if (!status_.ok()) return {};
    const bool lengths = min.has_value() || max.has_value();
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) {
        fail(path + "/pattern", "'pattern' must be a string");
        return {};
      }
      if (lengths || s.contains("format")) {
        fail(path, "'pattern' together with minLength, maxLength or format is not supported");
        return {};
      }
      auto e = parse_regex(s["pattern"].get<std::string>());
      if (!e.ok()) {
        fail(path + "/pattern", std::string(e.status().message()));
        return {};
      }
      return Expr::seq({Expr::lit("\""), json::json_encoded(*e), Expr::lit("\"")});
    }
    if (s.contains("format") && s["format"].is_string()) {
      if (auto re = json::format_regex(s["format"].get<std::string>())) {
        if (lengths) {
          fail(path, "'format' together with minLength or maxLength is not supported");
          return {};
        }
        auto e = parse_regex(*re);
        if (!e.ok()) {
          fail(path + "/format", std::string(e.status().message()));
          return {};
        }
        return Expr::seq({Expr::lit("\""), std::move(*e), Expr::lit("\"")});
      }
    }
    if (!lengths) return Expr::ref(shared("string", &SchemaCompiler::make_string));
    const uint32_t lo = static_cast<uint32_t>(min.value_or(0));
    const uint32_t hi = max ? static_cast<uint32_t>(*max) : kUnbounded;
    if (hi != kUnbounded && hi < lo) {
      fail(path, "maxLength is below minLength");
      return {};
    }
    return Expr::seq({Expr::lit("\""), Expr::repeat(Expr::ref(shared("char", &SchemaCompiler::make_char)), lo, hi),
                      Expr::lit("\"")});
  }

  Expr visit_number(const ojson& s, const std::string& path, bool integer) {
    std::optional<double> lo, hi;
    bool lo_strict = false, hi_strict = false;
    auto bound = [&](const char* key, std::optional<double>& out, bool& strict, bool is_strict, bool lower) {
      if (!s.contains(key)) return;
      const ojson& v = s[key];
      if (v.is_boolean()) return;  // draft 4 style exclusive flags are read below
      if (!v.is_number()) {
        fail(path + "/" + key, fmt::format("'{}' must be a number", key));
        return;
      }
      const double x = v.get<double>();
      if (!out || (lower ? x > *out || (x == *out && is_strict) : x < *out || (x == *out && is_strict))) {
        out = x;
        strict = is_strict;
      }
    };
    bound("minimum", lo, lo_strict, false, true);
    bound("exclusiveMinimum", lo, lo_strict, true, true);
    bound("maximum", hi, hi_strict, false, false);
    bound("exclusiveMaximum", hi, hi_strict, true, false);
    if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"] == true) lo_strict = true;
    if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"] == true) hi_strict = true;
    if (!status_.ok()) return {};
    if (!lo && !hi) {
      if (integer) return Expr::ref(shared("integer", &SchemaCompiler::make_integer));
      return Expr::ref(shared("number", &SchemaCompiler::make_number));
    }
    constexpr double kLimit = 9e15;
    if ((lo && std::fabs(*lo) > kLimit) || (hi && std::fabs(*hi) > kLimit)) {
      fail(path, "bounds beyond 9e15 are not supported");
      return {};
    }
    // The integers within the bounds.
    std::optional<int64_t> ilo, ihi;
    if (lo) ilo = static_cast<int64_t>(lo_strict ? std::floor(*lo) + 1 : std::ceil(*lo));
    if (hi) ihi = static_cast<int64_t>(hi_strict ? std::ceil(*hi) - 1 : std::floor(*hi));
    auto ints = json::integer_range(ilo, ihi);
    if (!ints.ok()) {
      fail(path, std::string(ints.status().message()));
      return {};
    }
    if (integer) return std::move(*ints);
    // Numbers: also k.ddd where the whole interval [k, k+1) (or (-(k+1), -k] for negatives) lies inside.
    std::vector<Expr> alts{std::move(*ints)};
    Expr frac = Expr::seq({Expr::lit("."), Expr::repeat(Expr::cls({{'0', '9'}}), 1, 16)});
    {
      std::optional<int64_t> a = ilo ? std::optional<int64_t>(std::max<int64_t>(*ilo, 0)) : std::optional<int64_t>(0);
      std::optional<int64_t> b;
      if (hi) b = static_cast<int64_t>(std::floor(*hi)) - 1;  // k + 1 <= hi (k + frac < k + 1 <= hi)
      if (!b || *a <= *b) {
        auto r = json::integer_range(a, b);
        if (r.ok()) alts.push_back(Expr::seq({std::move(*r), frac}));
      }
    }
    {
      // -(k + f) with k >= 0: needs -(k + 1) >= lo (or strictly above when lo is exclusive... -(k+1) is never
      // reached) and -k <= hi.
      std::optional<int64_t> a =
          hi ? std::optional<int64_t>(std::max<int64_t>(0, static_cast<int64_t>(std::ceil(-*hi))))
             : std::optional<int64_t>(0);
      if (hi && *hi <= 0 && hi_strict && std::floor(*hi) == *hi) a = static_cast<int64_t>(-*hi);
      std::optional<int64_t> b;
      if (lo) b = static_cast<int64_t>(std::floor(-*lo)) - 1;
      if (!b || *a <= *b) {
        auto r = json::integer_range(a, b);
        if (r.ok()) alts.push_back(Expr::seq({Expr::lit("-"), std::move(*r), frac}));
      }
    }
    return Expr::alt(std::move(alts));
  }
  Expr make_integer() { return json::integer_expr(); }

  Expr visit_object(const ojson& s, const std::string& path, int depth) {
    std::vector<std::pair<std::string, const ojson*>> props;
    static const ojson kAny = true;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) {
        fail(path + "/properties", "'properties' must be an object");
        return {};
      }
      for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it)
        props.emplace_back(it.key(), &it.value());
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) {
        fail(path + "/required", "'required' must be an array of strings");
        return {};
      }
      for (const ojson& r : s["required"]) {
        if (!r.is_string()) {
          fail(path + "/required", "'required' must be an array of strings");
          return {};
        }
        const std::string name = r.get<std::string>();
        required.insert(name);
        bool known = false;
        for (const auto& p : props) known = known || p.first == name;
        if (!known) props.emplace_back(name, &kAny);
      }
    }
    // Extra members: allowed by a true/schema additionalProperties, or when no property is listed at all.
    const ojson* extra = nullptr;
    const char* extra_key = s.contains("additionalProperties") ? "additionalProperties" : "unevaluatedProperties";
    if (s.contains(extra_key)) {
      const ojson& a = s[extra_key];
      if (a.is_object() || (a.is_boolean() && a.get<bool>()))
        extra = &a;
      else if (!a.is_boolean()) {
        fail(path + "/" + extra_key, fmt::format("'{}' must be a boolean or a schema", extra_key));
        return {};
      }
    } else if (props.empty()) {
      extra = &kAny;
    }
    if (props.empty() && extra != nullptr && extra->is_boolean()) return Expr::ref(any_object_rule());

    const std::string base = fresh(path.empty() ? "object" : path);
    std::vector<Expr> members;
    for (const auto& [name, schema] : props) {
      Expr value = visit(*schema, path + "/properties/" + pointer_escape(name), depth + 1);
      members.push_back(Expr::seq({literal_json(ojson(name)), ws(), Expr::lit(":"), ws(), std::move(value)}));
    }
    std::optional<Expr> extra_member;
    if (extra != nullptr) {
      std::vector<std::string> names;
      for (const auto& p : props) names.push_back(p.first);
      Expr key =
          Expr::seq({Expr::lit("\""), names.empty() ? Expr::star(json::plain_string_char()) : json::key_not_in(names),
                     Expr::lit("\"")});
      Expr value = extra->is_boolean() ? any_value() : visit(*extra, path + "/" + extra_key, depth + 1);
      const std::string key_rule = base + "-extra";
      ast_.add(key_rule, Expr::seq({std::move(key), ws(), Expr::lit(":"), ws(), std::move(value)}));
      extra_member = Expr::ref(key_rule);
    }
    if (!status_.ok()) return {};
    // Rules, from the last property back: after(i) follows something already written (so starts with a comma);
    // first(i) writes the first member. Optional properties may be skipped.
    const Expr comma = Expr::seq({ws(), Expr::lit(","), ws()});
    const size_t n = members.size();
    std::string after_next = base + "-a" + std::to_string(n);
    {
      Expr tail = extra_member ? Expr::star(Expr::seq({comma, *extra_member})) : Expr::seq();
      ast_.add(after_next, std::move(tail));
    }
    std::optional<std::string> first_next;
    if (extra_member) {
      first_next = base + "-f" + std::to_string(n);
      ast_.add(*first_next, Expr::seq({*extra_member, Expr::star(Expr::seq({comma, *extra_member}))}));
    }
    bool any_required = false;
    for (size_t i = n; i-- > 0;) {
      const bool req = required.count(props[i].first) != 0;
      any_required = any_required || req;
      const std::string after = base + "-a" + std::to_string(i);
      Expr with = Expr::seq({comma, members[i], Expr::ref(after_next)});
      ast_.add(after, req ? std::move(with) : Expr::alt({std::move(with), Expr::ref(after_next)}));
      const std::string first = base + "-f" + std::to_string(i);
      Expr lead = Expr::seq({members[i], Expr::ref(after_next)});
      // An optional property may be skipped when something can still be written after it.
      ast_.add(first, req || !first_next ? std::move(lead) : Expr::alt({std::move(lead), Expr::ref(*first_next)}));
      after_next = after;
      first_next = first;
    }
    if (!first_next) return Expr::seq({Expr::lit("{"), ws(), Expr::lit("}")});
    Expr body = Expr::seq({Expr::ref(*first_next), ws()});
    return Expr::seq(
        {Expr::lit("{"), ws(), any_required ? std::move(body) : Expr::opt(std::move(body)), Expr::lit("}")});
  }

  Expr visit_array(const ojson& s, const std::string& path, int depth) {
    const int64_t min = count_field(s, "minItems", path).value_or(0);
    const auto max_opt = count_field(s, "maxItems", path);
    if (!status_.ok()) return {};
    if (max_opt && *max_opt < min) {
      fail(path, "maxItems is below minItems");
      return {};
    }
    std::vector<Expr> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) {
        fail(path + "/prefixItems", "'prefixItems' must be an array");
        return {};
      }
      for (size_t i = 0; i < s["prefixItems"].size(); ++i)
        prefix.push_back(visit(s["prefixItems"][i], path + "/prefixItems/" + std::to_string(i), depth + 1));
    }
    std::optional<Expr> item;
    if (s.contains("items")) {
      const ojson& it = s["items"];
      if (it.is_array()) {  // draft 4 tuples
        fail(path + "/items", "array-valued 'items' (tuples) is not supported: use prefixItems");
        return {};
      }
      if (!(it.is_boolean() && !it.get<bool>())) item = visit(it, path + "/items", depth + 1);
    } else {
      item = any_value();
    }
    if (!status_.ok()) return {};
    const Expr comma = Expr::seq({ws(), Expr::lit(","), ws()});
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (max_opt && *max_opt < k) {
      fail(path, "maxItems is below the number of prefixItems");
      return {};
    }
    // Every prefix item is written, then the rest: between max(0, min - k) and max - k more items.
    const int64_t rest_min = std::max<int64_t>(0, min - k);
    const int64_t rest_max = max_opt ? *max_opt - k : -1;
    if (!item && rest_min > 0) {
      fail(path, "minItems needs more items than prefixItems gives and 'items' is false");
      return {};
    }
    std::vector<Expr> seq{Expr::lit("["), ws()};
    if (k > 0) {
      for (int64_t i = 0; i < k; ++i) {
        if (i > 0) seq.push_back(comma);
        seq.push_back(std::move(prefix[static_cast<size_t>(i)]));
      }
      if (item && rest_max != 0) {
        const uint32_t hi = rest_max < 0 ? kUnbounded : static_cast<uint32_t>(rest_max);
        seq.push_back(Expr::repeat(Expr::seq({comma, *item}), static_cast<uint32_t>(rest_min), hi));
      }
      seq.push_back(ws());
    } else if (item && rest_max != 0) {
      const uint32_t more_max = rest_max < 0 ? kUnbounded : static_cast<uint32_t>(rest_max - 1);
      const uint32_t more_min = static_cast<uint32_t>(std::max<int64_t>(0, rest_min - 1));
      Expr items = Expr::seq({*item, Expr::repeat(Expr::seq({comma, *item}), more_min, more_max), ws()});
      seq.push_back(rest_min > 0 ? std::move(items) : Expr::opt(std::move(items)));
    }
    seq.push_back(Expr::lit("]"));
    return Expr::seq(std::move(seq));
  }

  const ojson& root_;
  JsonSchemaOptions options_;
  Ast ast_;
  Status status_;
  int count_ = 0;
  std::set<std::string> defined_;
  std::map<std::string, std::string> ref_rules_;
};

}  // namespace

Result<Ast> json_schema_grammar(std::string_view schema_json, const JsonSchemaOptions& options) {
  ojson schema = ojson::parse(schema_json, nullptr, false);
  if (schema.is_discarded()) return invalid_argument("the JSON schema is not valid JSON");
  return SchemaCompiler(schema, options).run();
}

Result<Ast> json_object_grammar(const JsonSchemaOptions& options) {
  static const ojson kEmpty = ojson::object();
  return SchemaCompiler(kEmpty, options).any_object();
}

}  // namespace tessera::grammar
