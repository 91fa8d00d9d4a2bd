#include "model/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/jinja/budget.h"

#include "model/jinja/text.h"

namespace tessera::model::jinja {

const Value* Object::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

void Object::set(std::string key, Value v) {
  for (auto& [k, old] : entries) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(v));
}

bool Object::erase(std::string_view key) {
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (it->first == key) {
      entries.erase(it);
      return true;
    }
  }
  return false;
}

Value Value::null() {
  Value v;
  v.kind_ = Kind::kNull;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = charged_string(std::move(s));
  return v;
}
Value Value::array(Array items, bool tuple) {
  Value v;
  v.kind_ = Kind::kArray;
  v.tuple_ = tuple;
  v.arr_ = charged_array(std::move(items));
  return v;
}
Value Value::object(Object o, bool kwargs) {
  Value v;
  v.kind_ = Kind::kObject;
  v.kwargs_ = kwargs;
  v.obj_ = std::make_shared<Object>(std::move(o));
  return v;
}
Value Value::ns(Object o) {
  Value v = object(std::move(o));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::function(Function f) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::make_shared<const Function>(std::move(f));
  return v;
}

const void* Value::identity() const {
  switch (kind_) {
    case Kind::kArray:
      return arr_.get();
    case Kind::kObject:
    case Kind::kNamespace:
      return obj_.get();
    case Kind::kFunction:
      return fn_.get();
    default:
      return nullptr;
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNull:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0 && !std::isnan(f_);
    case Kind::kString:
      return !s_->empty();
    case Kind::kArray:
      return !arr_->empty();
    case Kind::kObject:
      return !obj_->entries.empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string_view Value::kind_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNull:
      return "none";
    case Kind::kBool:
      return "boolean";
    case Kind::kInt:
      return "integer";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "string";
    case Kind::kArray:
      return tuple_ ? "tuple" : "array";
    case Kind::kObject:
      return kwargs_ ? "keyword arguments" : "object";
    case Kind::kNamespace:
      return "namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

std::string js_number_string(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0) return "0";
  // Shortest round-trip digits, then ECMAScript's Number::toString layout (fixed for 1e-7 <= |d| < 1e21).
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exp10 = std::atoi(sci.c_str() + e + 1);
  const int k = static_cast<int>(digits.size());
  const int n = exp10 + 1;
  std::string out;
  if (k <= n && n <= 21) {
    out = digits + std::string(n - k, '0');
  } else if (0 < n && n <= 21) {
    out = digits.substr(0, n) + "." + digits.substr(n);
  } else if (-6 < n && n <= 0) {
    out = "0." + std::string(-n, '0') + digits;
  } else {
    out = digits.substr(0, 1);
    if (k > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{}", n - 1 >= 0 ? "+" : "-", std::abs(n - 1));
  }
  return sign + out;
}

namespace {

std::string float_display(double f) {
  if (f == 0 && std::signbit(f)) return "-0.0";
  if (std::isfinite(f) && std::fmod(f, 1.0) == 0) {
    if (std::fabs(f) < 1e21) return fmt::format("{:.1f}", f);
    return js_number_string(f);
  }
  return js_number_string(f);
}

constexpr int kMaxJsonDepth = 256;

void json_into(std::string& out, const Value& v, const JsonOptions& o, int depth, bool undefined_as_null,
               Status& status) {
  if (!status.ok()) return;
  // Arrays and objects are shared by reference, so a template can put a list inside itself.
  if (depth > kMaxJsonDepth) {
    status =
        invalid_argument(fmt::format("cannot convert to JSON: values nest deeper than {} (a list that "
                                     "contains itself?)",
                                     kMaxJsonDepth));
    return;
  }
  check_value_size(out.size());
  std::string item_sep = o.has_separators ? o.item_separator : (o.indent > 0 ? "," : ", ");
  std::string key_sep = o.has_separators ? o.key_separator : ": ";
  switch (v.kind()) {
    case Kind::kNull:
      out += "null";
      return;
    case Kind::kUndefined:
      out += undefined_as_null ? "null" : "undefined";
      return;
    case Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Kind::kFloat:
      out += std::isfinite(v.as_float()) ? js_number_string(v.as_float()) : "null";
      return;
    case Kind::kString:
      out += json_quote(v.str(), o.ensure_ascii);
      check_value_size(out.size());
      return;
    case Kind::kFunction:
      status = invalid_argument("cannot convert a function to JSON");
      return;
    default:
      break;
  }
  if (v.is_tuple() || v.is_kwargs()) {
    status = invalid_argument(fmt::format("cannot convert a {} to JSON", v.kind_name()));
    return;
  }
  const std::string indent(static_cast<size_t>(std::max(o.indent, 0)), ' ');
  std::string base = "\n";
  for (int i = 0; i < depth; ++i) base += indent;
  const std::string child = base + indent;
  if (v.is_array()) {
    const Array& a = v.items();
    out += '[';
    for (size_t i = 0; i < a.size(); ++i) {
      if (i > 0) out += item_sep;
      if (o.indent > 0) out += child;
      json_into(out, a[i], o, depth + 1, undefined_as_null, status);
    }
    if (o.indent > 0 && !a.empty()) out += base;
    out += ']';
    return;
  }
  std::vector<const std::pair<std::string, Value>*> entries;
  for (const auto& e : v.obj().entries) entries.push_back(&e);
  if (o.sort_keys) {
    std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
  }
  out += '{';
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += item_sep;
    if (o.indent > 0) out += child;
    out += json_quote(entries[i]->first, o.ensure_ascii);
    out += key_sep;
    json_into(out, entries[i]->second, o, depth + 1, undefined_as_null, status);
  }
  if (o.indent > 0 && !entries.empty()) out += base;
  out += '}';
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::null();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: {
      double d = j.get<double>();
      if (std::isfinite(d) && std::fmod(d, 1.0) == 0 && std::fabs(d) < 9.0e15) {
        return Value::integer(static_cast<int64_t>(d));
      }
      return Value::number(d);
    }
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      a.reserve(j.size());
      for (const auto& e : j) a.push_back(from_json(e));
      return Value::array(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object o;
      for (auto it = j.begin(); it != j.end(); ++it) o.set(it.key(), from_json(it.value()));
      return Value::object(std::move(o));
    }
    default:
      return Value();
  }
}

// JavaScript's ToNumber on a string: surrounding whitespace ignored, "" is 0, anything unparsable NaN.
double js_string_to_number(std::string_view s) {
  std::string t(js_trim(s));
  if (t.empty()) return 0;
  if (t == "Infinity" || t == "+Infinity") return INFINITY;
  if (t == "-Infinity") return -INFINITY;
  for (char c : t) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' ||
          c == 'x' || c == 'X' || std::isxdigit(static_cast<unsigned char>(c))))
      return NAN;
  }
  char* end = nullptr;
  double d = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size() ? d : NAN;
}

}  // namespace

std::string Value::to_display() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNull:
      return "undefined";
    case Kind::kBool:
      return b_ ? "true" : "false";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return float_display(f_);
    case Kind::kString:
      return *s_;
    case Kind::kFunction:
      return "[function]";
    default: {
      auto j = to_json(*this, {}, /*undefined_as_null=*/false);
      return j.ok() ? *j : std::string("[object]");
    }
  }
}

std::string Value::to_raw_string() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNull:
      return "";
    case Kind::kBool:
      return b_ ? "true" : "false";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return js_number_string(f_);
    case Kind::kString:
      return *s_;
    case Kind::kArray: {
      std::string out;
      for (size_t i = 0; i < arr_->size(); ++i) {
        if (i > 0) out += ',';
        out += (*arr_)[i].to_display();
        check_value_size(out.size());
      }
      return out;
    }
    case Kind::kObject:
    case Kind::kNamespace:
      return "[object Map]";
    case Kind::kFunction:
      return "[function]";
  }
  return "";
}

Result<std::string> to_json(const Value& v, const JsonOptions& options, bool undefined_as_null) {
  std::string out;
  Status status;
  json_into(out, v, options, 0, undefined_as_null, status);
  if (!status.ok()) return status;
  return out;
}

Result<Value> value_from_json(std::string_view json_text) {
  auto j = nlohmann::ordered_json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("the template context is not valid JSON");
  return from_json(j);
}

bool strict_equal(const Value& a, const Value& b) {
  const bool a_undef = a.is_undefined() || a.is_null(), b_undef = b.is_undefined() || b.is_null();
  if (a_undef || b_undef) return a_undef && b_undef;
  if (a.is_numeric() && b.is_numeric()) return a.as_number() == b.as_number();
  if (a.kind() != b.kind()) {
    const bool a_obj = a.kind() == Kind::kObject || a.kind() == Kind::kNamespace;
    const bool b_obj = b.kind() == Kind::kObject || b.kind() == Kind::kNamespace;
    return a_obj && b_obj && a.identity() == b.identity();
  }
  switch (a.kind()) {
    case Kind::kBool:
      return a.as_bool() == b.as_bool();
    case Kind::kString:
      return a.str() == b.str();
    default:
      return a.identity() == b.identity();
  }
}

bool loose_equal(const Value& a, const Value& b) {
  const bool a_undef = a.is_undefined() || a.is_null(), b_undef = b.is_undefined() || b.is_null();
  if (a_undef || b_undef) return a_undef && b_undef;
  auto is_ref = [](const Value& v) {
    return v.kind() == Kind::kArray || v.kind() == Kind::kObject || v.kind() == Kind::kNamespace ||
           v.kind() == Kind::kFunction;
  };
  if (is_ref(a) && is_ref(b)) return a.identity() == b.identity();
  // One side an object: JavaScript compares its primitive (string) form.
  if (is_ref(a)) return loose_equal(Value::string(a.to_raw_string()), b);
  if (is_ref(b)) return loose_equal(a, Value::string(b.to_raw_string()));
  if (a.is_string() && b.is_string()) return a.str() == b.str();
  auto num = [](const Value& v) { return v.is_string() ? js_string_to_number(v.str()) : v.as_number(); };
  return num(a) == num(b);
}

}  // namespace tessera::model::jinja
