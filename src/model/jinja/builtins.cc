// The methods values answer to and the global functions, as @huggingface/jinja defines them (so, for
// example, `strip` takes no characters to strip and `title` leaves the rest of each word as it is).
#include <ctime>

#include <fmt/format.h>

#include "model/jinja/budget.h"
#include "model/jinja/interpreter.h"
#include "model/jinja/text.h"

namespace tessera::model::jinja {
namespace {

bool is_word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

std::string title_case(std::string_view s) {
  std::string out(s);
  for (size_t i = 0; i < out.size(); ++i) {
    if (is_word(out[i]) && (i == 0 || !is_word(out[i - 1])) && out[i] >= 'a' && out[i] <= 'z')
      out[i] = static_cast<char>(out[i] - 'a' + 'A');
  }
  return out;
}

std::string js_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (count == 0) return s;
  int64_t remaining = count < 0 ? INT64_MAX : count;
  std::string out;
  if (from.empty()) {
    // JavaScript's /(?=)/gu matches before every code point and at the end.
    auto cps = code_points(s);
    for (const std::string& cp : cps) {
      if (remaining > 0) {
        out += to;
        --remaining;
      }
      out += cp;
      check_value_size(out.size());
    }
    if (remaining > 0) out += to;
    return out;
  }
  size_t pos = 0;
  while (true) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos || remaining == 0) break;
    out.append(s, pos, hit - pos);
    out += to;
    check_value_size(out.size());
    --remaining;
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

Value string_split(const std::string& s, std::vector<Value>& args) {
  Value sep = args.size() > 0 ? args[0] : Value::null();
  if (!sep.is_string() && !sep.is_null()) fail("split(): the separator must be a string or none");
  Value maxsplit = args.size() > 1 ? args[1] : Value::integer(-1);
  if (maxsplit.kind() != Kind::kInt) fail("split(): maxsplit must be an integer");
  const int64_t max = maxsplit.as_int();
  Array out;
  if (sep.is_null()) {
    std::string_view text = js_trim_start(s);
    size_t i = 0;
    while (i < text.size()) {
      while (size_t n = js_space_len(text, i)) i += n;
      if (i >= text.size()) break;
      size_t start = i;
      while (i < text.size() && js_space_len(text, i) == 0) ++i;
      if (max != -1 && static_cast<int64_t>(out.size()) >= max) {
        out.push_back(Value::string(std::string(text.substr(start))));
        break;
      }
      out.push_back(Value::string(std::string(text.substr(start, i - start))));
    }
    return Value::array(std::move(out));
  }
  const std::string& sp = sep.str();
  if (sp.empty()) fail("split(): empty separator");
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    size_t hit = s.find(sp, pos);
    if (hit == std::string::npos) {
      parts.push_back(s.substr(pos));
      break;
    }
    parts.push_back(s.substr(pos, hit - pos));
    pos = hit + sp.size();
  }
  if (max != -1 && static_cast<int64_t>(parts.size()) > max) {
    std::string rest;
    for (size_t i = static_cast<size_t>(max); i < parts.size(); ++i)
      rest += (i > static_cast<size_t>(max) ? sp : "") + parts[i];
    parts.resize(static_cast<size_t>(max));
    parts.push_back(rest);
  }
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::array(std::move(out));
}

bool affix_test(const std::string& s, const std::vector<Value>& args, bool prefix, const char* name) {
  if (args.empty()) fail(fmt::format("{}() needs an argument", name));
  auto test = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (args[0].is_string()) return test(args[0].str());
  if (args[0].is_array()) {
    for (const Value& v : args[0].items()) {
      if (!v.is_string()) fail(fmt::format("{}(): tuple elements must be strings", name));
      if (test(v.str())) return true;
    }
    return false;
  }
  fail(fmt::format("{}() needs a string or a tuple of strings", name));
}

Value string_builtin(const Value& self, const std::string& name) {
  const std::string& s = self.str();
  auto fn = [self](auto body) {
    return Value::function([self, body](std::vector<Value>& args, const EnvPtr&) { return body(self.str(), args); });
  };
  if (name == "length") return Value::integer(static_cast<int64_t>(utf16_length(s)));
  if (name == "upper") return fn([](const std::string& v, auto&) { return Value::string(ascii_upper(v)); });
  if (name == "lower") return fn([](const std::string& v, auto&) { return Value::string(ascii_lower(v)); });
  if (name == "strip") return fn([](const std::string& v, auto&) { return Value::string(std::string(js_trim(v))); });
  if (name == "rstrip")
    return fn([](const std::string& v, auto&) { return Value::string(std::string(js_trim_end(v))); });
  if (name == "lstrip")
    return fn([](const std::string& v, auto&) { return Value::string(std::string(js_trim_start(v))); });
  if (name == "title") return fn([](const std::string& v, auto&) { return Value::string(title_case(v)); });
  if (name == "capitalize") {
    return fn([](const std::string& v, auto&) {
      if (v.empty()) return Value::string("");
      size_t len = 1;
      decode_utf8(v, 0, &len);
      return Value::string(ascii_upper(v.substr(0, len)) + v.substr(len));
    });
  }
  if (name == "startswith")
    return fn([](const std::string& v, auto& a) { return Value::boolean(affix_test(v, a, true, "startswith")); });
  if (name == "endswith")
    return fn([](const std::string& v, auto& a) { return Value::boolean(affix_test(v, a, false, "endswith")); });
  if (name == "split") return fn([](const std::string& v, auto& a) { return string_split(v, a); });
  if (name == "replace") {
    return fn([](const std::string& v, std::vector<Value>& a) {
      if (a.size() < 2) fail("replace() needs two arguments");
      if (!a[0].is_string() || !a[1].is_string()) fail("replace() arguments must be strings");
      Value count = Value::null();
      if (a.size() > 2) {
        if (a[2].is_kwargs()) {
          const Value* c = a[2].obj().find("count");
          count = c ? *c : Value::null();
        } else {
          count = a[2];
        }
      }
      if (count.kind() != Kind::kInt && !count.is_null()) fail("replace(): count must be an integer or none");
      return Value::string(js_replace(v, a[0].str(), a[1].str(), count.is_null() ? -1 : count.as_int()));
    });
  }
  return Value();
}

Value pairs_of(const Object& o) {
  Array out;
  for (const auto& [k, v] : o.entries) out.push_back(Value::array({Value::string(k), v}));
  return Value::array(std::move(out));
}

Value object_builtin(const Value& self, const std::string& name) {
  auto fn = [self](auto body) {
    return Value::function([self, body](std::vector<Value>& args, const EnvPtr&) { return body(self, args); });
  };
  if (name == "get") {
    return fn([](const Value& o, std::vector<Value>& a) {
      if (a.empty() || !a[0].is_string())
        fail(fmt::format("get(): the key must be a string, not a {}", a.empty() ? "missing" : a[0].kind_name()));
      if (const Value* v = o.obj().find(a[0].str())) return *v;
      return a.size() > 1 ? a[1] : Value::null();
    });
  }
  if (name == "items") return fn([](const Value& o, auto&) { return pairs_of(o.obj()); });
  if (name == "keys") {
    return fn([](const Value& o, auto&) {
      Array out;
      for (const auto& [k, v] : o.obj().entries) out.push_back(Value::string(k));
      return Value::array(std::move(out));
    });
  }
  if (name == "values") {
    return fn([](const Value& o, auto&) {
      Array out;
      for (const auto& [k, v] : o.obj().entries) out.push_back(v);
      return Value::array(std::move(out));
    });
  }
  if (name == "dictsort") {
    return fn([](const Value& o, std::vector<Value>& args) {
      Object kw;
      std::vector<Value> pos;
      for (const Value& a : args) {
        if (a.is_kwargs()) {
          kw = a.obj();
        } else {
          pos.push_back(a);
        }
      }
      auto pick = [&](size_t i, const char* key, Value dflt) {
        if (i < pos.size()) return pos[i];
        if (const Value* v = kw.find(key)) return *v;
        return dflt;
      };
      Value cs = pick(0, "case_sensitive", Value::boolean(false));
      Value by = pick(1, "by", Value::string("key"));
      Value rev = pick(2, "reverse", Value::boolean(false));
      if (cs.kind() != Kind::kBool) fail("dictsort(): case_sensitive must be a boolean");
      if (!by.is_string() || (by.str() != "key" && by.str() != "value"))
        fail("dictsort(): by must be 'key' or 'value'");
      if (rev.kind() != Kind::kBool) fail("dictsort(): reverse must be a boolean");
      Array items = pairs_of(o.obj()).items();
      const size_t idx = by.str() == "key" ? 0 : 1;
      std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
        int c = compare_values(a.items()[idx], b.items()[idx], cs.as_bool());
        return rev.as_bool() ? c > 0 : c < 0;
      });
      return Value::array(std::move(items));
    });
  }
  return Value();
}

const char* kMonths[] = {"January", "February", "March",     "April",   "May",      "June",
                         "July",    "August",   "September", "October", "November", "December"};

std::string strftime_js(const std::string& format, const RenderOptions& o) {
  const time_t now = o.now_unix_seconds ? static_cast<time_t>(*o.now_unix_seconds) : std::time(nullptr);
  std::tm tm{};
  if (o.utc) {
    gmtime_r(&now, &tm);
  } else {
    localtime_r(&now, &tm);
  }
  // Only the directives the reference knows; any other is copied as written.
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size()) {
      const char d = format[i + 1];
      std::string rep;
      switch (d) {
        case 'Y':
          rep = std::to_string(tm.tm_year + 1900);
          break;
        case 'm':
          rep = fmt::format("{:02}", tm.tm_mon + 1);
          break;
        case 'd':
          rep = fmt::format("{:02}", tm.tm_mday);
          break;
        case 'b':
          rep = std::string(kMonths[tm.tm_mon]).substr(0, 3);
          break;
        case 'B':
          rep = kMonths[tm.tm_mon];
          break;
        case 'H':
          rep = fmt::format("{:02}", tm.tm_hour);
          break;
        case 'M':
          rep = fmt::format("{:02}", tm.tm_min);
          break;
        case '%':
          rep = "%";
          break;
        default:
          break;
      }
      if (!rep.empty()) {
        out += rep;
        ++i;
        continue;
      }
    }
    out += format[i];
  }
  return out;
}

}  // namespace

Value member_builtin(const Value& object, const std::string& name) {
  if (object.is_string()) return string_builtin(object, name);
  if (object.is_object()) return object_builtin(object, name);
  if (object.is_array() && name == "length") return Value::integer(static_cast<int64_t>(object.items().size()));
  return Value();
}

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_null() && b.is_null()) return 0;
  if (a.is_null() || b.is_null()) fail(fmt::format("cannot compare a {} with a {}", a.kind_name(), b.kind_name()));
  if (a.is_undefined() && b.is_undefined()) return 0;
  if (a.is_undefined() || b.is_undefined())
    fail(fmt::format("cannot compare a {} with a {}", a.kind_name(), b.kind_name()));
  auto num = [](const Value& v) { return v.is_numeric() || v.kind() == Kind::kBool; };
  if (num(a) && num(b)) {
    const double x = a.as_number(), y = b.as_number();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind() != b.kind() || !a.is_string())
    fail(fmt::format("cannot compare a {} with a {}", a.kind_name(), b.kind_name()));
  std::string x = case_sensitive ? a.str() : ascii_lower(a.str());
  std::string y = case_sensitive ? b.str() : ascii_lower(b.str());
  return x < y ? -1 : x > y ? 1 : 0;
}

Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t pos = 0;
  while (true) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (v.is_object() || v.kind() == Kind::kNamespace) {
      const Value* e = v.obj().find(part);
      v = e ? *e : Value();
    } else if (v.is_array()) {
      char* end = nullptr;
      long idx = std::strtol(part.c_str(), &end, 10);
      if (end == part.c_str() || idx < 0 || static_cast<size_t>(idx) >= v.items().size()) return Value();
      v = v.items()[static_cast<size_t>(idx)];
    } else {
      return Value();
    }
    if (dot == std::string::npos) return v;
    pos = dot + 1;
  }
}

void install_globals(Env& env, const RenderOptions& options) {
  env.vars["true"] = env.vars["True"] = Value::boolean(true);
  env.vars["false"] = env.vars["False"] = Value::boolean(false);
  env.vars["none"] = env.vars["None"] = Value::null();
  env.vars["raise_exception"] = Value::function([](std::vector<Value>& args, const EnvPtr&) -> Value {
    fail(args.empty() ? std::string("raise_exception() was called") : args[0].to_raw_string());
  });
  const int64_t max_range = options.limits.max_range;
  env.vars["range"] = Value::function([max_range](std::vector<Value>& args, const EnvPtr&) {
    for (const Value& a : args)
      if (!a.is_numeric() && a.kind() != Kind::kBool) fail("range() takes integers");
    int64_t start = 0, stop = 0, step = 1;
    if (args.size() == 1) {
      stop = static_cast<int64_t>(args[0].as_number());
    } else if (args.size() >= 2) {
      start = static_cast<int64_t>(args[0].as_number());
      stop = static_cast<int64_t>(args[1].as_number());
      if (args.size() > 2) step = static_cast<int64_t>(args[2].as_number());
    }
    if (step == 0) fail("range() step must not be zero");
    const int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                               : (start > stop ? (start - stop - step - 1) / -step : 0);
    if (n > max_range) fail_limit(fmt::format("range() of {} elements exceeds the limit of {}", n, max_range));
    Array out;
    for (int64_t i = 0, v = start; i < n; ++i, v += step) out.push_back(Value::integer(v));
    return Value::array(std::move(out));
  });
  env.vars["strftime_now"] = Value::function([options](std::vector<Value>& args, const EnvPtr&) {
    if (args.empty() || !args[0].is_string()) fail("strftime_now() takes a format string");
    return Value::string(strftime_js(args[0].str(), options));
  });
  env.vars["namespace"] = Value::function([](std::vector<Value>& args, const EnvPtr&) {
    std::vector<Value> pos = args;
    Object kw;
    if (!pos.empty() && pos.back().is_kwargs()) {
      kw = pos.back().obj();
      pos.pop_back();
    }
    if (pos.size() > 1) fail(fmt::format("namespace() takes at most one positional argument, got {}", pos.size()));
    Object entries;
    if (pos.size() == 1) {
      const Value& src = pos[0];
      if (src.is_object()) {
        for (const auto& [k, v] : src.obj().entries) entries.set(k, v);
      } else if (src.is_array()) {
        for (const Value& pair : src.items()) {
          if (!pair.is_array() || pair.items().size() != 2 || !pair.items()[0].is_string())
            fail("namespace() takes an object or [key, value] pairs");
          entries.set(pair.items()[0].str(), pair.items()[1]);
        }
      } else {
        fail(fmt::format("namespace() cannot iterate a {}", src.kind_name()));
      }
    }
    for (const auto& [k, v] : kw.entries) entries.set(k, v);
    return Value::ns(std::move(entries));
  });
}

}  // namespace tessera::model::jinja
