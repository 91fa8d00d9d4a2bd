#include "model/jinja/parser.h"

#include <cstdlib>
#include <initializer_list>
#include <set>
#include <string_view>

#include <fmt/format.h>

namespace tessera::model::jinja {
namespace {

// Unwinds a parse to parse(), which turns it into a Status; never leaves this file.
struct ParseError {
  std::string message;
};

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  NodePtr program() {
    auto p = make_node(NodeKind::kProgram, 1);
    while (cur_ < t_.size()) p->list.push_back(any());
    return p;
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > kMaxParseDepth) p.fail(fmt::format("the template nests deeper than {} levels", kMaxParseDepth));
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  int line() const {
    if (t_.empty()) return 1;
    return cur_ < t_.size() ? t_[cur_].line : t_.back().line;
  }
  [[noreturn]] void fail(const std::string& msg) const { throw ParseError{fmt::format("line {}: {}", line(), msg)}; }
  const Token& at(size_t k = 0) const {
    if (cur_ + k >= t_.size()) fail("unexpected end of template (an unclosed block or expression?)");
    return t_[cur_ + k];
  }
  bool is(Tok type, size_t k = 0) const { return cur_ + k < t_.size() && t_[cur_ + k].type == type; }
  bool is_ident(std::string_view name, size_t k = 0) const {
    return is(Tok::kIdentifier, k) && t_[cur_ + k].value == name;
  }
  bool is_statement(std::initializer_list<std::string_view> names) const {
    if (!is(Tok::kOpenStatement) || !is(Tok::kIdentifier, 1)) return false;
    for (auto n : names)
      if (t_[cur_ + 1].value == n) return true;
    return false;
  }
  const Token& expect(Tok type, const char* what) {
    const Token& tok = at();
    if (tok.type != type) fail(fmt::format("expected {}, found '{}'", what, tok.value));
    ++cur_;
    return tok;
  }
  void expect_ident(std::string_view name) {
    if (!is_ident(name)) fail(fmt::format("expected '{}'", name));
    ++cur_;
  }
  void end_block(std::string_view name) {
    expect(Tok::kOpenStatement, "'{%'");
    expect_ident(name);
    expect(Tok::kCloseStatement, "'%}'");
  }
  // Parses statements until one of `names` opens (or fails at the end of the template naming them).
  void body_until(NodeList& out, std::initializer_list<std::string_view> names, std::string_view opener) {
    while (!is_statement(names)) {
      if (cur_ >= t_.size()) fail(fmt::format("'{}' is never closed", opener));
      out.push_back(any());
    }
  }

  NodePtr any() {
    DepthGuard g(*this);
    const Token& tok = at();
    switch (tok.type) {
      case Tok::kComment:
        ++cur_;
        return make_node(NodeKind::kComment, tok.line);
      case Tok::kText: {
        ++cur_;
        auto n = make_node(NodeKind::kText, tok.line);
        n->str = tok.value;
        return n;
      }
      case Tok::kOpenStatement:
        return statement();
      case Tok::kOpenExpression: {
        ++cur_;
        NodePtr e = expression();
        expect(Tok::kCloseExpression, "'}}'");
        return e;
      }
      default:
        fail(fmt::format("unexpected '{}'", tok.value));
    }
  }

  NodePtr statement() {
    expect(Tok::kOpenStatement, "'{%'");
    if (!is(Tok::kIdentifier)) fail(fmt::format("expected a statement name after '{{%', found '{}'", at().value));
    const Token& name_tok = at();
    const std::string name = name_tok.value;
    const int ln = name_tok.line;
    ++cur_;
    if (name == "set") return set_statement(ln);
    if (name == "if") {
      NodePtr n = if_statement(ln);
      end_block("endif");
      return n;
    }
    if (name == "macro") {
      auto n = make_node(NodeKind::kMacro, ln);
      NodePtr id = primary();
      if (id->kind != NodeKind::kIdentifier) fail("expected a macro name");
      n->str = id->str;
      args(n->list, true);
      expect(Tok::kCloseStatement, "'%}'");
      body_until(n->list2, {"endmacro"}, "macro");
      end_block("endmacro");
      return n;
    }
    if (name == "for") {
      NodePtr n = for_statement(ln);
      end_block("endfor");
      return n;
    }
    if (name == "call") {
      auto n = make_node(NodeKind::kCallBlock, ln);
      if (is(Tok::kOpenParen)) args(n->list, true);
      NodePtr callee = primary();
      if (callee->kind != NodeKind::kIdentifier) fail("expected a macro name after 'call'");
      auto call = make_node(NodeKind::kCall, ln);
      call->x = std::move(callee);
      args(call->list, false);
      n->x = std::move(call);
      expect(Tok::kCloseStatement, "'%}'");
      body_until(n->list2, {"endcall"}, "call");
      end_block("endcall");
      return n;
    }
    if (name == "break" || name == "continue") {
      expect(Tok::kCloseStatement, "'%}'");
      return make_node(name == "break" ? NodeKind::kBreak : NodeKind::kContinue, ln);
    }
    if (name == "filter") {
      auto n = make_node(NodeKind::kFilterBlock, ln);
      NodePtr f = primary();
      if (f->kind == NodeKind::kIdentifier && is(Tok::kOpenParen)) f = call_expression(std::move(f));
      n->y = std::move(f);
      expect(Tok::kCloseStatement, "'%}'");
      body_until(n->list, {"endfilter"}, "filter");
      end_block("endfilter");
      return n;
    }
    cur_--;
    fail(fmt::format("unknown statement '{}'", name));
  }

  NodePtr set_statement(int ln) {
    auto n = make_node(NodeKind::kSet, ln);
    n->x = expression_sequence(false);
    if (is(Tok::kEquals)) {
      ++cur_;
      n->y = expression_sequence(false);
    } else {
      expect(Tok::kCloseStatement, "'=' or '%}'");
      body_until(n->list, {"endset"}, "set");
      expect(Tok::kOpenStatement, "'{%'");
      expect_ident("endset");
    }
    expect(Tok::kCloseStatement, "'%}'");
    return n;
  }

  NodePtr if_statement(int ln) {
    DepthGuard g(*this);
    auto n = make_node(NodeKind::kIf, ln);
    n->x = expression();
    expect(Tok::kCloseStatement, "'%}'");
    body_until(n->list, {"elif", "else", "endif"}, "if");
    if (is_statement({"elif"})) {
      int l2 = at(1).line;
      cur_ += 2;
      n->list2.push_back(if_statement(l2));
    } else if (is_statement({"else"})) {
      cur_ += 2;
      expect(Tok::kCloseStatement, "'%}'");
      body_until(n->list2, {"endif"}, "if");
    }
    return n;
  }

  NodePtr for_statement(int ln) {
    auto n = make_node(NodeKind::kFor, ln);
    n->x = expression_sequence(true);
    if (n->x->kind != NodeKind::kIdentifier && n->x->kind != NodeKind::kTupleLit)
      fail("expected a name or a tuple of names as the loop variable");
    if (!is_ident("in")) fail("expected 'in' after the loop variable");
    ++cur_;
    n->y = expression();
    expect(Tok::kCloseStatement, "'%}'");
    body_until(n->list, {"endfor", "else"}, "for");
    if (is_statement({"else"})) {
      cur_ += 2;
      expect(Tok::kCloseStatement, "'%}'");
      body_until(n->list2, {"endfor"}, "for");
    }
    return n;
  }

  NodePtr expression_sequence(bool primary_only) {
    NodePtr first = primary_only ? primary() : expression();
    if (!is(Tok::kComma)) return first;
    auto t = make_node(NodeKind::kTupleLit, first->line);
    t->list.push_back(std::move(first));
    while (is(Tok::kComma)) {
      ++cur_;
      t->list.push_back(primary_only ? primary() : expression());
    }
    return t;
  }

  NodePtr expression() {
    DepthGuard g(*this);
    NodePtr a = logical_or();
    if (is_ident("if")) {
      int ln = at().line;
      ++cur_;
      NodePtr test = logical_or();
      if (is_ident("else")) {
        ++cur_;
        auto n = make_node(NodeKind::kTernary, ln);
        n->x = std::move(test);
        n->y = std::move(a);
        n->z = expression();
        return n;
      }
      auto n = make_node(NodeKind::kSelect, ln);
      n->x = std::move(a);
      n->y = std::move(test);
      return n;
    }
    return a;
  }

  NodePtr binary(std::string op, NodePtr l, NodePtr r) {
    auto n = make_node(NodeKind::kBinary, l->line);
    n->str = std::move(op);
    n->x = std::move(l);
    n->y = std::move(r);
    return n;
  }

  NodePtr logical_or() {
    NodePtr l = logical_and();
    while (is_ident("or")) {
      ++cur_;
      l = binary("or", std::move(l), logical_and());
    }
    return l;
  }
  NodePtr logical_and() {
    NodePtr l = logical_not();
    while (is_ident("and")) {
      ++cur_;
      l = binary("and", std::move(l), logical_not());
    }
    return l;
  }
  NodePtr logical_not() {
    if (is_ident("not")) {
      DepthGuard g(*this);
      int ln = at().line;
      ++cur_;
      auto n = make_node(NodeKind::kUnary, ln);
      n->str = "not";
      n->x = logical_not();
      return n;
    }
    return comparison();
  }
  NodePtr comparison() {
    NodePtr l = additive();
    while (true) {
      std::string op;
      if (is_ident("not") && is_ident("in", 1)) {
        op = "not in";
        cur_ += 2;
      } else if (is_ident("in")) {
        op = "in";
        ++cur_;
      } else if (is(Tok::kComparison)) {
        op = at().value;
        ++cur_;
      } else {
        break;
      }
      l = binary(op, std::move(l), additive());
    }
    return l;
  }
  NodePtr additive() {
    NodePtr l = multiplicative();
    while (is(Tok::kAdditive)) {
      std::string op = at().value;
      ++cur_;
      l = binary(op, std::move(l), multiplicative());
    }
    return l;
  }
  NodePtr multiplicative() {
    NodePtr l = power();
    while (is(Tok::kMultiplicative)) {
      std::string op = at().value;
      ++cur_;
      l = binary(op, std::move(l), power());
    }
    return l;
  }
  NodePtr power() {
    NodePtr l = test_expression();
    while (is(Tok::kPower)) {
      ++cur_;
      l = binary("**", std::move(l), test_expression());
    }
    return l;
  }
  NodePtr test_expression() {
    NodePtr operand = filter_expression();
    while (is_ident("is")) {
      int ln = at().line;
      ++cur_;
      const bool negate = is_ident("not");
      if (negate) ++cur_;
      NodePtr name = primary();
      if (name->kind != NodeKind::kIdentifier) fail("expected a test name after 'is'");
      auto n = make_node(NodeKind::kTest, ln);
      n->x = std::move(operand);
      n->str = name->str;
      n->flag = negate;
      operand = std::move(n);
    }
    return operand;
  }
  NodePtr filter_expression() {
    NodePtr operand = unary_sign();
    while (is(Tok::kPipe)) {
      int ln = at().line;
      ++cur_;
      NodePtr f = primary();
      if (f->kind != NodeKind::kIdentifier) fail("expected a filter name after '|'");
      if (is(Tok::kOpenParen)) f = call_expression(std::move(f));
      auto n = make_node(NodeKind::kFilter, ln);
      n->x = std::move(operand);
      n->y = std::move(f);
      operand = std::move(n);
    }
    return operand;
  }
  NodePtr unary_sign() {
    if ((is(Tok::kUnary) || is(Tok::kAdditive)) && (at().value == "-" || at().value == "+")) {
      DepthGuard g(*this);
      auto n = make_node(NodeKind::kUnary, at().line);
      n->str = at().value;
      ++cur_;
      n->x = unary_sign();
      return n;
    }
    NodePtr m = member(primary());
    if (is(Tok::kOpenParen)) return call_expression(std::move(m));
    return m;
  }
  NodePtr call_expression(NodePtr callee) {
    DepthGuard g(*this);
    auto n = make_node(NodeKind::kCall, callee->line);
    n->x = std::move(callee);
    args(n->list, false);
    NodePtr e = member(std::move(n));
    if (is(Tok::kOpenParen)) e = call_expression(std::move(e));
    return e;
  }
  // `(a, b=1, *xs, **kw)`; `parameters`: a macro's declaration (names and defaults only).
  void args(NodeList& out, bool parameters) {
    expect(Tok::kOpenParen, "'('");
    std::set<std::string> names;
    bool saw_keyword = false, saw_spread = false;
    while (!is(Tok::kCloseParen)) {
      if (cur_ >= t_.size()) fail("unclosed '('");
      const bool kw_spread = is(Tok::kPower);
      const bool spread = is(Tok::kMultiplicative) && at().value == "*";
      if (parameters && (kw_spread || spread)) fail("argument unpacking is not allowed in parameter declarations");
      if (kw_spread) {
        ++cur_;
        auto n = make_node(NodeKind::kKwSpread, line());
        n->x = expression();
        out.push_back(std::move(n));
        if (is(Tok::kComma)) ++cur_;
        if (!is(Tok::kCloseParen)) fail("'**' must be applied to the last argument");
        break;
      }
      NodePtr arg;
      if (spread) {
        if (saw_spread) fail("only one '*' argument unpacking is allowed");
        saw_spread = true;
        ++cur_;
        arg = make_node(NodeKind::kSpread, line());
        arg->x = expression();
      } else {
        arg = expression();
        if (is(Tok::kEquals)) {
          ++cur_;
          if (arg->kind != NodeKind::kIdentifier) fail("expected a name before '=' in an argument list");
          auto kw = make_node(NodeKind::kKwarg, arg->line);
          kw->str = arg->str;
          kw->x = expression();
          arg = std::move(kw);
        }
        if (parameters) {
          if (arg->kind != NodeKind::kIdentifier && arg->kind != NodeKind::kKwarg) fail("expected a parameter name");
          if (!names.insert(arg->str).second) fail(fmt::format("duplicate parameter '{}'", arg->str));
        }
        if (arg->kind == NodeKind::kKwarg) {
          saw_keyword = true;
        } else if (saw_keyword) {
          fail(parameters ? "a parameter without a default follows one with a default"
                          : "positional arguments must come before keyword arguments");
        } else if (saw_spread) {
          fail("positional arguments must not follow '*' unpacking");
        }
      }
      out.push_back(std::move(arg));
      if (is(Tok::kComma)) ++cur_;
    }
    expect(Tok::kCloseParen, "')'");
  }
  NodePtr subscript() {
    std::vector<NodePtr> parts;
    bool is_slice = false;
    int ln = line();
    while (!is(Tok::kCloseSquare)) {
      if (cur_ >= t_.size()) fail("unclosed '['");
      if (is(Tok::kColon)) {
        parts.push_back(nullptr);
        ++cur_;
        is_slice = true;
      } else {
        parts.push_back(expression());
        if (is(Tok::kColon)) {
          ++cur_;
          is_slice = true;
        }
      }
    }
    if (parts.empty()) fail("expected an index or a slice inside '[]'");
    if (!is_slice) return std::move(parts[0]);
    if (parts.size() > 3) fail("a slice takes at most three parts");
    auto n = make_node(NodeKind::kSlice, ln);
    n->x = std::move(parts[0]);
    if (parts.size() > 1) n->y = std::move(parts[1]);
    if (parts.size() > 2) n->z = std::move(parts[2]);
    return n;
  }
  NodePtr member(NodePtr object) {
    while (is(Tok::kDot) || is(Tok::kOpenSquare)) {
      const bool computed = is(Tok::kOpenSquare);
      int ln = at().line;
      ++cur_;
      NodePtr prop;
      if (computed) {
        prop = subscript();
        expect(Tok::kCloseSquare, "']'");
      } else {
        prop = primary();
        if (prop->kind != NodeKind::kIdentifier && prop->kind != NodeKind::kInt)
          fail("expected a name or an integer after '.'");
      }
      auto n = make_node(NodeKind::kMember, ln);
      n->x = std::move(object);
      n->y = std::move(prop);
      n->flag = computed;
      object = std::move(n);
    }
    return object;
  }
  NodePtr primary() {
    DepthGuard g(*this);
    const Token& tok = at();
    ++cur_;
    switch (tok.type) {
      case Tok::kNumber: {
        if (tok.value.find('.') != std::string::npos) {
          auto n = make_node(NodeKind::kFloat, tok.line);
          n->f = std::strtod(tok.value.c_str(), nullptr);
          return n;
        }
        auto n = make_node(NodeKind::kInt, tok.line);
        n->i = std::strtoll(tok.value.c_str(), nullptr, 10);
        return n;
      }
      case Tok::kString: {
        auto n = make_node(NodeKind::kString, tok.line);
        n->str = tok.value;
        while (is(Tok::kString)) n->str += t_[cur_++].value;  // adjacent literals concatenate
        return n;
      }
      case Tok::kIdentifier: {
        auto n = make_node(NodeKind::kIdentifier, tok.line);
        n->str = tok.value;
        return n;
      }
      case Tok::kOpenParen: {
        NodePtr e = expression_sequence(false);
        expect(Tok::kCloseParen, "')'");
        return e;
      }
      case Tok::kOpenSquare: {
        auto n = make_node(NodeKind::kArrayLit, tok.line);
        while (!is(Tok::kCloseSquare)) {
          if (cur_ >= t_.size()) fail("unclosed '['");
          n->list.push_back(expression());
          if (is(Tok::kComma)) ++cur_;
        }
        ++cur_;
        return n;
      }
      case Tok::kOpenCurly: {
        auto n = make_node(NodeKind::kObjectLit, tok.line);
        while (!is(Tok::kCloseCurly)) {
          if (cur_ >= t_.size()) fail("unclosed '{'");
          NodePtr k = expression();
          expect(Tok::kColon, "':' between a key and its value");
          NodePtr v = expression();
          n->pairs.emplace_back(std::move(k), std::move(v));
          if (is(Tok::kComma)) ++cur_;
        }
        ++cur_;
        return n;
      }
      default:
        cur_--;
        fail(fmt::format("unexpected '{}'", tok.value));
    }
  }

  const std::vector<Token>& t_;
  size_t cur_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<NodePtr> parse(const std::vector<Token>& tokens) {
  try {
    Parser p(tokens);
    return p.program();
  } catch (const ParseError& e) {
    return invalid_argument(e.message);
  }
}

}  // namespace tessera::model::jinja
