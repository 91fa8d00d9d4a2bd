#include "serve/tool_parsers/forced_grammar.h"

#include "grammar/gbnf_writer.h"
#include "grammar/json_schema.h"

namespace tessera::serve {

using Json = nlohmann::ordered_json;
using grammar::Expr;

Result<std::string> parameters_rule(grammar::Ast& ast, const Json& parameters, std::string_view prefix) {
  const Json schema = parameters.is_object() ? parameters : Json{{"type", "object"}};
  TS_ASSIGN_OR_RETURN(grammar::Ast args, grammar::json_schema_grammar(schema.dump()));
  return grammar::merge_ast(ast, args, prefix);
}

std::string json_quoted(std::string_view s) {
  return Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string forced_calls_gbnf(grammar::Ast ast, std::vector<Expr> calls, bool parallel, std::string_view separator) {
  ast.add("call", Expr::alt(std::move(calls)));
  std::vector<Expr> root = {Expr::ref("call")};
  if (parallel) root.push_back(Expr::star(Expr::seq({Expr::lit(std::string(separator)), Expr::ref("call")})));
  ast.add("tool-calls", Expr::seq(std::move(root)));
  ast.root = "tool-calls";
  return grammar::write_gbnf(ast);
}

}  // namespace tessera::serve
