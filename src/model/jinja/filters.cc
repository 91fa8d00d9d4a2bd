// Filters (`x | name`, `x | name(args)`) and tests (`x is name`), with @huggingface/jinja's rules for
// which filter applies to which kind of value: a filter it does not define for a kind is an error here too.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "model/jinja/budget.h"
#include "model/jinja/interpreter.h"
#include "model/jinja/text.h"

namespace tessera::model::jinja {
namespace {

// JavaScript's parseInt(s, 10) / parseFloat(s); nullopt where they give NaN.
std::optional<double> js_parse_number(const std::string& s, bool integer) {
  std::string t(js_trim_start(s));
  const char* p = t.c_str();
  char* end = nullptr;
  if (integer) {
    long long v = std::strtoll(p, &end, 10);
    if (end == p) return std::nullopt;
    return static_cast<double>(v);
  }
  if (t.rfind("Infinity", 0) == 0 || t.rfind("+Infinity", 0) == 0) return INFINITY;
  if (t.rfind("-Infinity", 0) == 0) return -INFINITY;
  // strtod accepts hex and "inf"/"nan", which parseFloat does not: accept only a decimal prefix.
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
  size_t digits = 0;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i, ++digits;
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i, ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    size_t j = i + 1;
    if (j < t.size() && (t[j] == '+' || t[j] == '-')) ++j;
    if (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) {
      while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) ++j;
      i = j;
    }
  }
  return std::strtod(t.substr(0, i).c_str(), nullptr);
}

std::string indent_lines(const std::string& s, int64_t width, bool first, bool blank) {
  const std::string pad(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
  std::string out;
  size_t pos = 0, line = 0;
  while (true) {
    size_t nl = s.find('\n', pos);
    std::string part = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    if (line > 0) out += '\n';
    check_value_size(out.size() + pad.size() + part.size());
    if ((!first && line == 0) || (!blank && part.empty())) {
      out += part;
    } else {
      out += pad + part;
    }
    ++line;
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  return out;
}

std::string join_values(const Value& operand, const std::string& sep) {
  std::string out;
  if (operand.is_string()) {
    auto cps = code_points(operand.str());
    for (size_t i = 0; i < cps.size(); ++i) {
      out += (i ? sep : "") + cps[i];
      check_value_size(out.size());
    }
    return out;
  }
  const Array& a = operand.items();
  for (size_t i = 0; i < a.size(); ++i) {
    if (i) out += sep;
    out += a[i].to_raw_string();
    check_value_size(out.size());
  }
  return out;
}

const Value* arg_or_kw(const Interpreter::Args& a, size_t i, const char* key) {
  if (i < a.positional.size()) return &a.positional[i];
  return a.keywords.find(key);
}

}  // namespace

bool Interpreter::apply_test(const std::string& name, const Value& v, const Value* arg) {
  const Kind k = v.kind();
  if (name == "boolean") return k == Kind::kBool;
  if (name == "callable") return k == Kind::kFunction;
  if (name == "odd" || name == "even") {
    if (k != Kind::kInt) fail(fmt::format("cannot test '{}' on a {}", name, v.kind_name()));
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "false") return k == Kind::kBool && !v.as_bool();
  if (name == "true") return k == Kind::kBool && v.as_bool();
  if (name == "none") return k == Kind::kNull;
  if (name == "string") return k == Kind::kString;
  if (name == "number") return v.is_numeric();
  if (name == "integer") return k == Kind::kInt;
  if (name == "iterable") return (k == Kind::kArray && !v.is_tuple()) || k == Kind::kString;
  if (name == "mapping") return k == Kind::kObject;
  if (name == "sequence") return k == Kind::kArray || k == Kind::kObject || k == Kind::kString;
  if (name == "lower") return k == Kind::kString && v.str() == ascii_lower(v.str());
  if (name == "upper") return k == Kind::kString && v.str() == ascii_upper(v.str());
  if (name == "defined") return k != Kind::kUndefined;
  if (name == "undefined") return k == Kind::kUndefined;
  if (name == "equalto" || name == "eq") {
    if (arg == nullptr) fail(fmt::format("the '{}' test needs a value to compare with", name));
    return strict_equal(v, *arg);
  }
  fail(fmt::format("unknown test '{}'", name));
}

Value Interpreter::apply_filter(const Value& operand, const Node& filter, const EnvPtr& env) {
  if (filter.kind == NodeKind::kIdentifier) {
    const std::string& f = filter.str;
    if (f == "safe") return operand;
    if (f == "tojson") {
      auto j = to_json(operand);
      if (!j.ok()) fail(j.status().message());
      return Value::string(*j);
    }
    if (operand.is_array()) {
      const Array& a = operand.items();
      if (f == "list") return operand;
      if (f == "first") return a.empty() ? Value() : a.front();
      if (f == "last") return a.empty() ? Value() : a.back();
      if (f == "length") return Value::integer(static_cast<int64_t>(a.size()));
      if (f == "reverse") return Value::array(Array(a.rbegin(), a.rend()));
      if (f == "sort") {
        Array s = a;
        std::stable_sort(s.begin(), s.end(),
                         [](const Value& x, const Value& y) { return compare_values(x, y, false) < 0; });
        return Value::array(std::move(s));
      }
      if (f == "join") return Value::string(join_values(operand, ""));
      if (f == "string") {
        auto j = to_json(operand, {}, false);
        if (!j.ok()) fail(j.status().message());
        return Value::string(*j);
      }
      if (f == "unique") {
        Array out;
        for (const Value& v : a) {
          bool seen = false;
          for (const Value& o : out)
            if (strict_equal(o, v)) seen = true;
          if (!seen) out.push_back(v);
        }
        return Value::array(std::move(out));
      }
      fail(fmt::format("unknown filter '{}' for an array", f));
    }
    if (operand.is_string()) {
      const std::string& s = operand.str();
      if (f == "length" || f == "upper" || f == "lower" || f == "title" || f == "capitalize") {
        Value b = member_builtin(operand, f);
        if (b.kind() == Kind::kFunction) {
          std::vector<Value> none;
          return b.fn()(none, env);
        }
        return b;
      }
      if (f == "trim") return Value::string(std::string(js_trim(s)));
      if (f == "indent") return Value::string(indent_lines(s, 4, false, false));
      if (f == "join" || f == "string") return operand;
      if (f == "int") {
        auto v = js_parse_number(s, true);
        return Value::integer(v ? static_cast<int64_t>(*v) : 0);
      }
      if (f == "float") {
        auto v = js_parse_number(s, false);
        return Value::number(v ? *v : 0.0);
      }
      fail(fmt::format("unknown filter '{}' for a string", f));
    }
    if (operand.is_numeric()) {
      if (f == "abs")
        return operand.kind() == Kind::kInt ? Value::integer(std::llabs(operand.as_int()))
                                            : Value::number(std::fabs(operand.as_float()));
      if (f == "int") return Value::integer(static_cast<int64_t>(std::floor(operand.as_number())));
      if (f == "float") return Value::number(operand.as_number());
      if (f == "string") return Value::string(operand.to_display());
      fail(fmt::format("unknown filter '{}' for a number", f));
    }
    if (operand.is_object()) {
      if (f == "items") {
        Array out;
        for (const auto& [k, v] : operand.obj().entries) out.push_back(Value::array({Value::string(k), v}));
        return Value::array(std::move(out));
      }
      if (f == "length") return Value::integer(static_cast<int64_t>(operand.obj().entries.size()));
      Value b = member_builtin(operand, f);
      if (b.kind() == Kind::kFunction) {
        std::vector<Value> none;
        return b.fn()(none, env);
      }
      if (!b.is_undefined()) return b;
      fail(fmt::format("unknown filter '{}' for an object", f));
    }
    if (operand.kind() == Kind::kBool) {
      const bool b = operand.as_bool();
      if (f == "bool") return Value::boolean(b);
      if (f == "int") return Value::integer(b ? 1 : 0);
      if (f == "float") return Value::number(b ? 1 : 0);
      if (f == "string") return Value::string(b ? "true" : "false");
      fail(fmt::format("unknown filter '{}' for a boolean", f));
    }
    fail(fmt::format("cannot apply the filter '{}' to a {}", f, operand.kind_name()));
  }
  if (filter.kind != NodeKind::kCall || filter.x->kind != NodeKind::kIdentifier) fail("a filter must be a name");
  const std::string& f = filter.x->str;
  if (f == "tojson") {
    Args a = eval_args(filter.list, env);
    JsonOptions o;
    if (const Value* v = a.keywords.find("indent")) {
      if (v->kind() != Kind::kInt && !v->is_null()) fail("tojson: indent must be an integer");
      if (v->kind() == Kind::kInt) o.indent = static_cast<int>(v->as_int());
    }
    if (const Value* v = a.keywords.find("ensure_ascii")) {
      if (v->kind() != Kind::kBool) fail("tojson: ensure_ascii must be a boolean");
      o.ensure_ascii = v->as_bool();
    }
    if (const Value* v = a.keywords.find("sort_keys")) {
      if (v->kind() != Kind::kBool) fail("tojson: sort_keys must be a boolean");
      o.sort_keys = v->as_bool();
    }
    if (const Value* v = a.keywords.find("separators"); v && !v->is_null()) {
      if (!v->is_array() || v->items().size() != 2 || !v->items()[0].is_string() || !v->items()[1].is_string())
        fail("tojson: separators must be a tuple of two strings");
      o.has_separators = true;
      o.item_separator = v->items()[0].str();
      o.key_separator = v->items()[1].str();
    }
    auto j = to_json(operand, o);
    if (!j.ok()) fail(j.status().message());
    return Value::string(*j);
  }
  if (f == "join") {
    if (!operand.is_string() && !operand.is_array())
      fail(fmt::format("cannot apply the filter 'join' to a {}", operand.kind_name()));
    Args a = eval_args(filter.list, env);
    const Value* sep = arg_or_kw(a, 0, "separator");
    if (sep != nullptr && !sep->is_string()) fail("join: the separator must be a string");
    return Value::string(join_values(operand, sep ? sep->str() : ""));
  }
  if (f == "int" || f == "float") {
    Args a = eval_args(filter.list, env);
    const Value* d = arg_or_kw(a, 0, "default");
    Value dflt = d ? *d : (f == "int" ? Value::integer(0) : Value::number(0));
    if (operand.is_string()) {
      auto v = js_parse_number(operand.str(), f == "int");
      if (!v) return dflt;
      return f == "int" ? Value::integer(static_cast<int64_t>(*v)) : Value::number(*v);
    }
    if (operand.is_numeric()) return operand;
    if (operand.kind() == Kind::kBool)
      return f == "int" ? Value::integer(operand.as_bool()) : Value::number(operand.as_bool());
    fail(fmt::format("cannot apply the filter '{}' to a {}", f, operand.kind_name()));
  }
  if (f == "default") {
    Args a = eval_args(filter.list, env);
    Value dflt = a.positional.size() > 0 ? a.positional[0] : Value::string("");
    const Value* b = arg_or_kw(a, 1, "boolean");
    if (b != nullptr && b->kind() != Kind::kBool) fail("default: the boolean flag must be a boolean");
    if (operand.is_undefined() || (b && b->as_bool() && !operand.truthy())) return dflt;
    return operand;
  }
  if (operand.is_array()) {
    const Array& arr = operand.items();
    if (f == "sort") {
      Args a = eval_args(filter.list, env);
      const Value* rev = arg_or_kw(a, 0, "reverse");
      const Value* cs = arg_or_kw(a, 1, "case_sensitive");
      const Value* attr = arg_or_kw(a, 2, "attribute");
      if (rev && rev->kind() != Kind::kBool) fail("sort: reverse must be a boolean");
      if (cs && cs->kind() != Kind::kBool) fail("sort: case_sensitive must be a boolean");
      if (attr && !attr->is_string() && attr->kind() != Kind::kInt && !attr->is_null())
        fail("sort: attribute must be a string, an integer or none");
      const bool reverse = rev && rev->as_bool(), case_sensitive = cs && cs->as_bool();
      std::string path;
      const bool by_attr = attr && !attr->is_null();
      if (by_attr) path = attr->is_string() ? attr->str() : std::to_string(attr->as_int());
      Array s = arr;
      std::stable_sort(s.begin(), s.end(), [&](const Value& x, const Value& y) {
        int c = by_attr ? compare_values(attribute_path(x, path), attribute_path(y, path), case_sensitive)
                        : compare_values(x, y, case_sensitive);
        return reverse ? c > 0 : c < 0;
      });
      return Value::array(std::move(s));
    }
    if (f == "selectattr" || f == "rejectattr") {
      const bool select = f == "selectattr";
      for (const Value& item : arr)
        if (!item.is_object() && item.kind() != Kind::kNamespace)
          fail(fmt::format("{} applies only to an array of objects", f));
      for (const auto& arg : filter.list)
        if (arg->kind != NodeKind::kString) fail(fmt::format("the arguments of {} must be string literals", f));
      if (filter.list.empty()) fail(fmt::format("{} needs an attribute name", f));
      const std::string attr = filter.list[0]->str;
      const std::string test = filter.list.size() > 1 ? filter.list[1]->str : "";
      Value cmp = filter.list.size() > 2 ? Value::string(filter.list[2]->str) : Value();
      Array out;
      for (const Value& item : arr) {
        const Value* v = item.obj().find(attr);
        bool r = false;
        if (v != nullptr)
          r = test.empty() ? v->truthy() : apply_test(test, *v, filter.list.size() > 2 ? &cmp : nullptr);
        if (r == select) out.push_back(item);
      }
      return Value::array(std::move(out));
    }
    if (f == "map") {
      Args a = eval_args(filter.list, env);
      const Value* attr = a.keywords.find("attribute");
      if (attr == nullptr) fail("map is supported only with attribute=...");
      if (!attr->is_string()) fail("map: attribute must be a string");
      const Value* d = a.keywords.find("default");
      Array out;
      for (const Value& item : arr) {
        if (!item.is_object() && item.kind() != Kind::kNamespace) fail("map: the items must be objects");
        Value v = attribute_path(item, attr->str());
        out.push_back(v.is_undefined() && d ? *d : v);
      }
      return Value::array(std::move(out));
    }
    fail(fmt::format("unknown filter '{}' for an array", f));
  }
  if (operand.is_string()) {
    if (f == "indent") {
      Args a = eval_args(filter.list, env);
      const Value* w = arg_or_kw(a, 0, "width");
      if (w && w->kind() != Kind::kInt) fail("indent: width must be an integer");
      const Value* first = arg_or_kw(a, 1, "first");
      const Value* blank = arg_or_kw(a, 2, "blank");
      return Value::string(
          indent_lines(operand.str(), w ? w->as_int() : 4, first && first->truthy(), blank && blank->truthy()));
    }
    if (f == "replace") {
      Args a = eval_args(filter.list, env);
      Value fn = member_builtin(operand, "replace");
      std::vector<Value> args = std::move(a.positional);
      args.push_back(Value::object(std::move(a.keywords), true));
      return fn.fn()(args, env);
    }
    fail(fmt::format("unknown filter '{}' for a string", f));
  }
  if (operand.is_object()) {
    Value b = member_builtin(operand, f);
    if (b.kind() == Kind::kFunction) {
      Args a = eval_args(filter.list, env);
      std::vector<Value> args = std::move(a.positional);
      if (!a.keywords.entries.empty()) args.push_back(Value::object(std::move(a.keywords), true));
      return b.fn()(args, env);
    }
    fail(fmt::format("unknown filter '{}' for an object", f));
  }
  fail(fmt::format("cannot apply the filter '{}' to a {}", f, operand.kind_name()));
}

}  // namespace tessera::model::jinja
