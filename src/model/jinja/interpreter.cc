#include "model/jinja/interpreter.h"

#include <cmath>
#include <set>

#include <fmt/format.h>

#include "model/jinja/budget.h"
#include "model/jinja/text.h"

namespace tessera::model::jinja {

void fail(std::string message) { throw RenderError{std::move(message), 0, false}; }
void fail_limit(std::string message) { throw RenderError{std::move(message), 0, true}; }

Value Env::lookup(const std::string& name) const {
  for (const Env* e = this; e != nullptr; e = e->parent.get()) {
    auto it = e->vars.find(name);
    if (it != e->vars.end()) return it->second;
  }
  return Value();
}

namespace {

// Which of the special macro names `varargs` / `kwargs` a macro body reads without declaring them (the
// reference binds them only then, and otherwise rejects surplus arguments).
struct SpecialArgs {
  bool kwargs = false, varargs = false;
};

void declare_target(const Node& t, std::set<std::string>& declared) {
  if (t.kind == NodeKind::kIdentifier) declared.insert(t.str);
  if (t.kind == NodeKind::kTupleLit)
    for (const auto& e : t.list) declare_target(*e, declared);
}

void visit_special(const Node* n, std::set<std::string>& declared, SpecialArgs& out) {
  if (n == nullptr) return;
  auto visit_list = [&](const NodeList& l) {
    for (const auto& c : l) visit_special(c.get(), declared, out);
  };
  switch (n->kind) {
    case NodeKind::kIdentifier:
      if (n->str == "kwargs" && !declared.count("kwargs")) out.kwargs = true;
      if (n->str == "varargs" && !declared.count("varargs")) out.varargs = true;
      return;
    case NodeKind::kFor:
      declare_target(*n->x, declared);
      visit_special(n->y.get(), declared, out);
      visit_list(n->list);
      visit_list(n->list2);
      return;
    case NodeKind::kSet:
      declare_target(*n->x, declared);
      visit_special(n->y.get(), declared, out);
      visit_list(n->list);
      return;
    case NodeKind::kMacro:
    case NodeKind::kCallBlock:
      if (n->kind == NodeKind::kCallBlock) visit_special(n->x.get(), declared, out);
      for (const auto& p : n->list) {
        declared.insert(p->str);
        if (p->kind == NodeKind::kKwarg) visit_special(p->x.get(), declared, out);
      }
      visit_list(n->list2);
      return;
    case NodeKind::kMember:
      visit_special(n->x.get(), declared, out);
      if (n->flag) visit_special(n->y.get(), declared, out);
      return;
    case NodeKind::kFilter:
    case NodeKind::kFilterBlock:
      visit_special(n->x.get(), declared, out);
      visit_list(n->list);
      if (n->y && n->y->kind == NodeKind::kCall) visit_list(n->y->list);
      return;
    case NodeKind::kTest:
      visit_special(n->x.get(), declared, out);
      return;
    case NodeKind::kKwarg:
      visit_special(n->x.get(), declared, out);
      return;
    default:
      visit_special(n->x.get(), declared, out);
      visit_special(n->y.get(), declared, out);
      visit_special(n->z.get(), declared, out);
      visit_list(n->list);
      visit_list(n->list2);
      for (const auto& [k, v] : n->pairs) {
        visit_special(k.get(), declared, out);
        visit_special(v.get(), declared, out);
      }
  }
}

SpecialArgs find_special_args(const NodeList& params, const NodeList& body) {
  std::set<std::string> declared;
  for (const auto& p : params) declared.insert(p->str);
  SpecialArgs out;
  for (const auto& s : body) visit_special(s.get(), declared, out);
  return out;
}

bool numeric_like(const Value& v) { return v.is_numeric() || v.kind() == Kind::kBool; }

std::vector<Value> js_slice(const std::vector<Value>& a, const Value& start_v, const Value& stop_v,
                            const Value& step_v) {
  const int64_t len = static_cast<int64_t>(a.size());
  const int64_t step = step_v.is_undefined() ? 1 : step_v.as_int();
  std::vector<Value> out;
  if (step == 0) fail("a slice step must not be zero");
  int64_t start, stop;
  if (step > 0) {
    start = start_v.is_undefined() ? 0 : start_v.as_int();
    start = start < 0 ? std::max<int64_t>(len + start, 0) : std::min(start, len);
    stop = stop_v.is_undefined() ? len : stop_v.as_int();
    stop = stop < 0 ? std::max<int64_t>(len + stop, 0) : std::min(stop, len);
    for (int64_t i = start; i < stop; i += step) out.push_back(a[static_cast<size_t>(i)]);
  } else {
    start = start_v.is_undefined() ? len - 1 : start_v.as_int();
    start = start < 0 ? std::max<int64_t>(len + start, -1) : std::min(start, len - 1);
    stop = stop_v.is_undefined() ? -1 : stop_v.as_int();
    stop = stop < -1 ? std::max<int64_t>(len + stop, -1) : std::min(stop, len - 1);
    for (int64_t i = start; i > stop; i += step) out.push_back(a[static_cast<size_t>(i)]);
  }
  return out;
}

}  // namespace

void Interpreter::check_output(size_t size) const {
  if (size > options_.limits.max_output_bytes)
    fail_limit(fmt::format("the rendered text exceeds {} bytes", options_.limits.max_output_bytes));
}

std::string Interpreter::run(const Node& program, const EnvPtr& globals) {
  std::string out = block(program.list, globals);
  if (flow_ != Flow::kNormal) fail("'break' or 'continue' outside a loop");
  return out;
}

std::string Interpreter::block(const NodeList& body, const EnvPtr& env) {
  std::string out;
  for (const auto& s : body) {
    Value v = eval(*s, env);
    if (flow_ != Flow::kNormal) return out;
    if (v.is_null() || v.is_undefined()) continue;
    if (v.is_string()) {
      out += v.str();
    } else {
      out += v.to_display();
    }
    check_output(out.size());
  }
  return out;
}

Interpreter::Args Interpreter::eval_args(const NodeList& args, const EnvPtr& env) {
  Args a;
  for (const auto& arg : args) {
    if (arg->kind == NodeKind::kSpread) {
      Value v = eval(*arg->x, env);
      if (!v.is_array()) fail(fmt::format("cannot unpack a {} with '*'", v.kind_name()));
      for (const Value& e : v.items()) a.positional.push_back(e);
    } else if (arg->kind != NodeKind::kKwarg && arg->kind != NodeKind::kKwSpread) {
      a.positional.push_back(eval(*arg, env));
    }
  }
  auto add = [&](const std::string& k, Value v) {
    if (a.keywords.find(k) != nullptr) fail(fmt::format("got multiple values for keyword argument '{}'", k));
    a.keywords.set(k, std::move(v));
  };
  for (const auto& arg : args) {
    if (arg->kind == NodeKind::kKwarg) {
      add(arg->str, eval(*arg->x, env));
    } else if (arg->kind == NodeKind::kKwSpread) {
      Value v = eval(*arg->x, env);
      if (!v.is_object()) fail(fmt::format("the argument after ** must be a mapping, not a {}", v.kind_name()));
      for (const auto& [k, e] : v.obj().entries) add(k, e);
    }
  }
  return a;
}

void Interpreter::step() {
  if (++steps_ > options_.limits.max_steps)
    fail_limit(fmt::format("rendering took more than {} steps (the template's step limit)", options_.limits.max_steps));
  if ((steps_ & 4095) == 0 && options_.cancelled && options_.cancelled())
    throw RenderError{"rendering was cancelled (the client went away)", 0, false, true};
}

Value Interpreter::eval(const Node& n, const EnvPtr& env) {
  step();
  try {
    switch (n.kind) {
      case NodeKind::kProgram:
        return Value::string(block(n.list, env));
      case NodeKind::kText:
      case NodeKind::kString:
        return Value::string(n.str);
      case NodeKind::kComment:
        return Value::null();
      case NodeKind::kInt:
        return Value::integer(n.i);
      case NodeKind::kFloat:
        return Value::number(n.f);
      case NodeKind::kIdentifier:
        return env->lookup(n.str);
      case NodeKind::kArrayLit:
      case NodeKind::kTupleLit: {
        Array a;
        for (const auto& e : n.list) a.push_back(eval(*e, env));
        return Value::array(std::move(a), n.kind == NodeKind::kTupleLit);
      }
      case NodeKind::kObjectLit: {
        Object o;
        for (const auto& [k, v] : n.pairs) {
          Value key = eval(*k, env);
          if (!key.is_string()) fail(fmt::format("object keys must be strings, got a {}", key.kind_name()));
          o.set(key.str(), eval(*v, env));
        }
        return Value::object(std::move(o));
      }
      case NodeKind::kMember:
        return eval_member(n, env);
      case NodeKind::kCall:
        return eval_call(n, env);
      case NodeKind::kUnary: {
        Value a = eval(*n.x, env);
        if (n.str == "not") return Value::boolean(!a.truthy());
        if (!numeric_like(a)) fail(fmt::format("unary '{}' does not apply to a {}", n.str, a.kind_name()));
        const int sign = n.str == "-" ? -1 : 1;
        if (a.kind() == Kind::kFloat) return Value::number(sign * a.as_float());
        return Value::integer(sign * (a.kind() == Kind::kBool ? int64_t{a.as_bool()} : a.as_int()));
      }
      case NodeKind::kBinary:
        return eval_binary(n, env);
      case NodeKind::kFilter:
        return apply_filter(eval(*n.x, env), *n.y, env);
      case NodeKind::kFilterBlock:
        return apply_filter(Value::string(block(n.list, env)), *n.y, env);
      case NodeKind::kTest:
        return Value::boolean(apply_test(n.str, eval(*n.x, env), nullptr) != n.flag);
      case NodeKind::kSelect: {
        if (!eval(*n.y, env).truthy()) return Value();
        return eval(*n.x, env);
      }
      case NodeKind::kTernary:
        return eval(*n.x, env).truthy() ? eval(*n.y, env) : eval(*n.z, env);
      case NodeKind::kSet:
        return eval_set(n, env);
      case NodeKind::kIf:
        return Value::string(block(eval(*n.x, env).truthy() ? n.list : n.list2, env));
      case NodeKind::kFor:
        return eval_for(n, env);
      case NodeKind::kMacro:
        return eval_macro(n, env);
      case NodeKind::kCallBlock:
        return eval_call_block(n, env);
      case NodeKind::kBreak:
        flow_ = Flow::kBreak;
        return Value::null();
      case NodeKind::kContinue:
        flow_ = Flow::kContinue;
        return Value::null();
      case NodeKind::kSlice:
      case NodeKind::kKwarg:
      case NodeKind::kSpread:
      case NodeKind::kKwSpread:
        fail("this syntax is only allowed inside [] or an argument list");
    }
  } catch (RenderError& e) {
    if (e.line == 0) e.line = n.line;
    throw;
  }
  fail("unknown syntax node");
}

Value Interpreter::eval_binary(const Node& n, const EnvPtr& env) {
  const std::string& op = n.str;
  Value l = eval(*n.x, env);
  if (op == "and") return l.truthy() ? eval(*n.y, env) : l;
  if (op == "or") return l.truthy() ? l : eval(*n.y, env);
  Value r = eval(*n.y, env);
  if (op == "==") return Value::boolean(loose_equal(l, r));
  if (op == "!=") return Value::boolean(!loose_equal(l, r));
  if (l.is_undefined() || r.is_undefined()) {
    if (r.is_undefined() && (op == "in" || op == "not in")) return Value::boolean(op == "not in");
    fail(fmt::format("cannot apply '{}' to an undefined value", op));
  }
  if (l.is_null() || r.is_null()) fail(fmt::format("cannot apply '{}' to none", op));
  if (op == "~") return Value::string(l.to_raw_string() + r.to_raw_string());
  if (op == "**" && numeric_like(l) && numeric_like(r)) {
    const double a = l.as_number(), b = r.as_number();
    if (a == 0 && b < 0) fail("0.0 cannot be raised to a negative power");
    const double p = std::pow(a, b);
    if (!std::isfinite(p)) fail("the power is not a finite number");
    if (l.kind() == Kind::kFloat || r.kind() == Kind::kFloat || b < 0) return Value::number(p);
    return Value::integer(static_cast<int64_t>(p));
  }
  if (l.is_numeric() && r.is_numeric()) {
    const bool is_float = l.kind() == Kind::kFloat || r.kind() == Kind::kFloat;
    if (!is_float && (op == "+" || op == "-" || op == "*" || op == "//" || op == "%")) {
      const int64_t a = l.as_int(), b = r.as_int();
      if (op == "+") return Value::integer(a + b);
      if (op == "-") return Value::integer(a - b);
      if (op == "*") return Value::integer(a * b);
      if (b == 0) fail("integer division or modulo by zero");
      if (op == "%") return Value::integer(a % b);
      return Value::integer(static_cast<int64_t>(std::floor(static_cast<double>(a) / static_cast<double>(b))));
    }
    const double a = l.as_number(), b = r.as_number();
    if (op == "+") return Value::number(a + b);
    if (op == "-") return Value::number(a - b);
    if (op == "*") return Value::number(a * b);
    if (op == "/") return Value::number(a / b);
    if (op == "//") return Value::number(std::floor(a / b));
    if (op == "%") return Value::number(std::fmod(a, b));
    if (op == "<") return Value::boolean(a < b);
    if (op == ">") return Value::boolean(a > b);
    if (op == "<=") return Value::boolean(a <= b);
    if (op == ">=") return Value::boolean(a >= b);
  } else if (l.is_array() && r.is_array()) {
    if (op == "+") {
      Array a = l.items();
      a.insert(a.end(), r.items().begin(), r.items().end());
      return Value::array(std::move(a));
    }
  } else if (r.is_array()) {
    if (op == "in" || op == "not in") {
      bool member = false;
      for (const Value& e : r.items())
        if (strict_equal(e, l)) member = true;
      return Value::boolean(member == (op == "in"));
    }
  }
  if ((l.is_string() || r.is_string()) && op == "+") return Value::string(l.to_raw_string() + r.to_raw_string());
  if (l.is_string() && r.is_string() && (op == "in" || op == "not in"))
    return Value::boolean((r.str().find(l.str()) != std::string::npos) == (op == "in"));
  if (l.is_string() && r.is_object() && (op == "in" || op == "not in"))
    return Value::boolean((r.obj().find(l.str()) != nullptr) == (op == "in"));
  fail(fmt::format("unsupported operator '{}' between a {} and a {}", op, l.kind_name(), r.kind_name()));
}

Value Interpreter::eval_slice(const Value& object, const Node& s, const EnvPtr& env) {
  if (!object.is_array() && !object.is_string()) fail("only arrays and strings can be sliced");
  Value parts[3];
  const Node* nodes[3] = {s.x.get(), s.y.get(), s.z.get()};
  for (int i = 0; i < 3; ++i) {
    if (nodes[i] != nullptr) parts[i] = eval(*nodes[i], env);
    if (!parts[i].is_undefined() && parts[i].kind() != Kind::kInt) fail("slice bounds must be integers");
  }
  if (object.is_array()) return Value::array(js_slice(object.items(), parts[0], parts[1], parts[2]));
  std::vector<Value> chars;
  for (auto& c : code_points(object.str())) chars.push_back(Value::string(std::move(c)));
  std::string out;
  for (const Value& c : js_slice(chars, parts[0], parts[1], parts[2])) out += c.str();
  return Value::string(std::move(out));
}

Value Interpreter::eval_member(const Node& n, const EnvPtr& env) {
  Value object = eval(*n.x, env);
  Value prop;
  if (n.flag) {
    if (n.y->kind == NodeKind::kSlice) return eval_slice(object, *n.y, env);
    prop = eval(*n.y, env);
  } else if (n.y->kind == NodeKind::kInt) {
    prop = Value::integer(n.y->i);
  } else {
    prop = Value::string(n.y->str);
  }
  if (object.is_object() || object.kind() == Kind::kNamespace) {
    if (!prop.is_string()) fail(fmt::format("an object's attribute must be a string, not a {}", prop.kind_name()));
    if (const Value* v = object.obj().find(prop.str())) return *v;
    return object.is_object() ? member_builtin(object, prop.str()) : Value();
  }
  if (object.is_array() || object.is_string()) {
    if (prop.kind() == Kind::kInt) {
      if (object.is_array()) {
        int64_t i = prop.as_int();
        const auto len = static_cast<int64_t>(object.items().size());
        if (i < 0) i += len;
        if (i < 0 || i >= len) return Value();
        return object.items()[static_cast<size_t>(i)];
      }
      auto cps = code_points(object.str());
      int64_t i = prop.as_int();
      const auto len = static_cast<int64_t>(cps.size());
      if (i < 0) i += len;
      if (i < 0 || i >= len) return Value();
      return Value::string(cps[static_cast<size_t>(i)]);
    }
    if (prop.is_string()) return member_builtin(object, prop.str());
    fail(fmt::format("cannot index a {} with a {}", object.kind_name(), prop.kind_name()));
  }
  if (!prop.is_string()) fail(fmt::format("cannot index a {} with a {}", object.kind_name(), prop.kind_name()));
  return member_builtin(object, prop.str());
}

Value Interpreter::eval_call(const Node& n, const EnvPtr& env) {
  Args a = eval_args(n.list, env);
  std::vector<Value> args = std::move(a.positional);
  if (!a.keywords.entries.empty()) args.push_back(Value::object(std::move(a.keywords), /*kwargs=*/true));
  Value fn = eval(*n.x, env);
  if (fn.kind() != Kind::kFunction) fail(fmt::format("cannot call a {}", fn.kind_name()));
  if (++call_depth_ > options_.limits.max_call_depth)
    fail_limit(fmt::format("calls nest deeper than {} (endless recursion?)", options_.limits.max_call_depth));
  Value out = fn.fn()(args, env);
  --call_depth_;
  return out;
}

Value Interpreter::eval_set(const Node& n, const EnvPtr& env) {
  Value rhs = n.y ? eval(*n.y, env) : Value::string(block(n.list, env));
  const Node& t = *n.x;
  if (t.kind == NodeKind::kIdentifier) {
    env->vars[t.str] = std::move(rhs);
  } else if (t.kind == NodeKind::kTupleLit) {
    if (!rhs.is_array()) fail(fmt::format("cannot unpack a {} in set", rhs.kind_name()));
    const Array& a = rhs.items();
    if (a.size() != t.list.size())
      fail(fmt::format("too {} items to unpack in set", t.list.size() > a.size() ? "few" : "many"));
    for (size_t i = 0; i < a.size(); ++i) {
      if (t.list[i]->kind != NodeKind::kIdentifier) fail("set can unpack only into names");
      env->vars[t.list[i]->str] = a[i];
    }
  } else if (t.kind == NodeKind::kMember) {
    Value object = eval(*t.x, env);
    if (object.kind() != Kind::kNamespace) fail("attributes can be set only on a namespace");
    if (t.y->kind != NodeKind::kIdentifier || t.flag) fail("set needs a name after '.'");
    object.obj_mut().set(t.y->str, std::move(rhs));
  } else {
    fail("set needs a name, a tuple of names or a namespace attribute");
  }
  return Value::null();
}

Value Interpreter::eval_for(const Node& n, const EnvPtr& env) {
  auto scope = std::make_shared<Env>(env);
  const Node* test = nullptr;
  Value iterable;
  if (n.y->kind == NodeKind::kSelect) {
    iterable = eval(*n.y->x, scope);
    test = n.y->y.get();
  } else {
    iterable = eval(*n.y, scope);
  }
  if (!iterable.is_array() && !iterable.is_object())
    fail(fmt::format("a for loop needs an array or an object, not a {}", iterable.kind_name()));
  Array all;
  if (iterable.is_object()) {
    for (const auto& [k, v] : iterable.obj().entries) all.push_back(Value::string(k));
  } else {
    all = iterable.items();
  }
  const Node& target = *n.x;
  auto bind = [&](const EnvPtr& s, const Value& item) {
    if (target.kind == NodeKind::kIdentifier) {
      s->vars[target.str] = item;
      return;
    }
    // The reference unpacks arrays only, not tuples (its type check is by exact name).
    if (!item.is_array() || item.is_tuple()) fail(fmt::format("cannot unpack a {}", item.kind_name()));
    if (item.items().size() != target.list.size())
      fail(fmt::format("too {} items to unpack", target.list.size() > item.items().size() ? "few" : "many"));
    for (size_t j = 0; j < target.list.size(); ++j) {
      if (target.list[j]->kind != NodeKind::kIdentifier) fail("a loop can unpack only into names");
      s->vars[target.list[j]->str] = item.items()[j];
    }
  };
  // The loop's own copies of its items, held while it runs.
  ScopedCharge copies(2 * all.size() * sizeof(Value));
  Array items;
  for (const Value& item : all) {
    step();  // an iteration is a step even when nothing in it is evaluated
    if (test != nullptr) {
      auto loop_scope = std::make_shared<Env>(scope);
      bind(loop_scope, item);
      if (!eval(*test, loop_scope).truthy()) continue;
    }
    items.push_back(item);
  }
  std::string out;
  bool no_iteration = true;
  const auto len = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < len; ++i) {
    Object loop;
    loop.set("index", Value::integer(i + 1));
    loop.set("index0", Value::integer(i));
    loop.set("revindex", Value::integer(len - i));
    loop.set("revindex0", Value::integer(len - i - 1));
    loop.set("first", Value::boolean(i == 0));
    loop.set("last", Value::boolean(i == len - 1));
    loop.set("length", Value::integer(len));
    loop.set("previtem", i > 0 ? items[i - 1] : Value());
    loop.set("nextitem", i < len - 1 ? items[i + 1] : Value());
    scope->vars["loop"] = Value::object(std::move(loop));
    bind(scope, items[static_cast<size_t>(i)]);
    std::string body = block(n.list, scope);
    if (flow_ == Flow::kContinue) {
      flow_ = Flow::kNormal;
      continue;
    }
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    out += body;
    check_output(out.size());
    no_iteration = false;
  }
  if (no_iteration) out += block(n.list2, scope);
  return Value::string(std::move(out));
}

void Interpreter::bind_macro_arguments(const std::string& name, const NodeList& params, bool wants_kwargs,
                                       bool wants_varargs, std::vector<Value> args, const EnvPtr& scope) {
  Object keywords;
  if (!args.empty() && args.back().is_kwargs()) {
    keywords = args.back().obj();
    args.pop_back();
  }
  std::vector<const Node*> pending_defaults;
  for (size_t i = 0; i < params.size(); ++i) {
    const Node& p = *params[i];
    Value v;
    bool given = i < args.size();
    if (given) v = args[i];
    if (!given) {
      if (const Value* kv = keywords.find(p.str)) {
        v = *kv;
        keywords.erase(p.str);
        given = true;
      }
    }
    if (!given && p.kind == NodeKind::kKwarg) pending_defaults.push_back(&p);
    scope->vars[p.str] = v;
  }
  if (wants_kwargs) {
    scope->vars["kwargs"] = Value::object(keywords);
  } else if (!keywords.entries.empty()) {
    fail(fmt::format("macro {} takes no keyword argument '{}'", name, keywords.entries[0].first));
  }
  if (wants_varargs) {
    Array rest;
    for (size_t i = params.size(); i < args.size(); ++i) rest.push_back(args[i]);
    scope->vars["varargs"] = Value::array(std::move(rest));
  } else if (args.size() > params.size()) {
    fail(fmt::format("macro {} takes at most {} argument(s)", name, params.size()));
  }
  for (const Node* p : pending_defaults) scope->vars[p->str] = eval(*p->x, scope);
}

Value Interpreter::eval_macro(const Node& n, const EnvPtr& env) {
  const SpecialArgs special = find_special_args(n.list, n.list2);
  const Node* node = &n;
  env->vars[n.str] = Value::function([this, node, special](std::vector<Value>& args, const EnvPtr& caller_env) {
    auto scope = std::make_shared<Env>(caller_env);
    bind_macro_arguments("'" + node->str + "'", node->list, special.kwargs, special.varargs, args, scope);
    return Value::string(block(node->list2, scope));
  });
  return Value::null();
}

Value Interpreter::eval_call_block(const Node& n, const EnvPtr& env) {
  const SpecialArgs special = find_special_args(n.list, n.list2);
  const Node* node = &n;
  EnvPtr defining = env;
  Value caller = Value::function([this, node, special, defining](std::vector<Value>& args, const EnvPtr&) {
    auto scope = std::make_shared<Env>(defining);
    bind_macro_arguments("caller", node->list, special.kwargs, special.varargs, args, scope);
    return Value::string(block(node->list2, scope));
  });
  const Node& call = *n.x;
  Args a = eval_args(call.list, env);
  std::vector<Value> args = std::move(a.positional);
  args.push_back(Value::object(std::move(a.keywords), /*kwargs=*/true));
  Value fn = eval(*call.x, env);
  if (fn.kind() != Kind::kFunction) fail(fmt::format("cannot call a {}", fn.kind_name()));
  auto scope = std::make_shared<Env>(env);
  scope->vars["caller"] = caller;
  if (++call_depth_ > options_.limits.max_call_depth)
    fail_limit(fmt::format("calls nest deeper than {} (endless recursion?)", options_.limits.max_call_depth));
  Value out = fn.fn()(args, scope);
  --call_depth_;
  return out;
}

}  // namespace tessera::model::jinja
