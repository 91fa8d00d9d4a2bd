// Values of the Jinja engine (model/jinja): what templates compute with, and how they print.
//
// Chat templates are written for Python's Jinja2 but the renderer Tessera must agree with byte for byte is
// @huggingface/jinja (the one transformers.js uses), which runs on JavaScript values. So the kinds below
// are its kinds, and printing follows it: integers and floats are distinct kinds (`1.0` prints as "1.0",
// but `1.0 ~ ""` and `tojson` print "1", as JavaScript's String() and JSON.stringify do), booleans print
// "true"/"false", arrays and objects print as JSON with ", " and ": " separators, and `==` is JavaScript's
// loose equality (arrays and objects compare by identity). Arrays, objects and namespaces are shared by
// reference, as in both Python and JavaScript: a namespace set inside a loop is seen outside it.
//
// Objects keep insertion order (JSON input order), which is what `items()` and `tojson` print.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tessera::model::jinja {

class Value;
class Interpreter;
struct Env;

using Array = std::vector<Value>;
// Insertion-ordered; chat-template objects are small (a message, a tool schema), so lookups are linear.
struct Object {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value v);
  bool erase(std::string_view key);
};
// Arguments arrive positionally; keyword arguments, when any, are one trailing Object value marked kwargs.
using Function = std::function<Value(std::vector<Value>& args, const std::shared_ptr<Env>& env)>;

enum class Kind : uint8_t { kUndefined, kNull, kBool, kInt, kFloat, kString, kArray, kObject, kNamespace, kFunction };

class Value {
 public:
  Value() = default;  // undefined
  static Value null();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);  // a float
  static Value string(std::string s);
  static Value array(Array items, bool tuple = false);
  static Value object(Object o, bool kwargs = false);
  static Value ns(Object o);
  static Value function(Function f);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }  // includes keyword-argument objects
  bool is_numeric() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_tuple() const { return tuple_; }
  bool is_kwargs() const { return kwargs_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_float() const { return f_; }
  double as_number() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : kind_ == Kind::kBool ? b_ : f_; }
  const std::string& str() const { return *s_; }
  const Array& items() const { return *arr_; }
  Array& items_mut() { return *arr_; }
  const Object& obj() const { return *obj_; }
  Object& obj_mut() { return *obj_; }
  const Function& fn() const { return *fn_; }
  // Identity of the shared payload, for JavaScript's reference equality on arrays, objects and functions.
  const void* identity() const;

  // Python truthiness as @huggingface/jinja defines it (empty array/object false; a namespace always true).
  bool truthy() const;
  // The text `{{ v }}` prints (undefined and none print nothing; that is decided by the caller).
  std::string to_display() const;
  // JavaScript's String(v.value): what `~`, string `+` and `join` use (floats lose ".0", objects are
  // "[object Map]", null and undefined are "").
  std::string to_raw_string() const;
  // A kind name for error messages: "string", "integer", ...
  std::string_view kind_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  bool kwargs_ = false;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<Array> arr_;
  std::shared_ptr<Object> obj_;
  std::shared_ptr<const Function> fn_;
};

struct JsonOptions {
  int indent = 0;  // 0: one line
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool has_separators = false;
  std::string item_separator, key_separator;
};
// `tojson` as @huggingface/jinja writes it; InvalidArgument for what has no JSON form (a function, a tuple).
Result<std::string> to_json(const Value& v, const JsonOptions& options = {}, bool undefined_as_null = true);

// Parses JSON text (a chat request's messages, tools) into values: integral numbers become integers, as
// JavaScript's Number.isInteger decides.
Result<Value> value_from_json(std::string_view json_text);

// JavaScript's Number -> String for a double ("1", "0.1", "1e+21", "NaN").
std::string js_number_string(double d);
// JavaScript's loose (==) and strict (===) equality on the values' payloads.
bool loose_equal(const Value& a, const Value& b);
bool strict_equal(const Value& a, const Value& b);

}  // namespace tessera::model::jinja
