#include "model/jinja/template.h"

#include <fmt/format.h>

#include "model/jinja/budget.h"
#include "model/jinja/interpreter.h"
#include "model/jinja/lexer.h"
#include "model/jinja/parser.h"

namespace tessera::model::jinja {

Result<Template> Template::parse(std::string_view source) {
  TS_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source));
  TS_ASSIGN_OR_RETURN(NodePtr root, jinja::parse(tokens));
  Template t;
  t.root_ = std::shared_ptr<const Node>(std::move(root));
  return t;
}

Result<std::string> Template::render(const Object& context, const RenderOptions& options) const {
  if (!root_) return failed_precondition("the template was not parsed");
  // Values built from here on are charged to the budget; each holds it, so it outlives them.
  BudgetScope scope(std::make_shared<RenderBudget>(options.limits));
  auto globals = std::make_shared<Env>();
  install_globals(*globals, options);
  for (const auto& [k, v] : context.entries) globals->vars[k] = v;
  Interpreter interpreter(options);
  try {
    return interpreter.run(*root_, globals);
  } catch (const RenderError& e) {
    std::string msg = e.line > 0 ? fmt::format("line {}: {}", e.line, e.message) : e.message;
    if (e.cancelled) return cancelled(std::move(msg));
    return e.limit ? resource_exhausted(std::move(msg)) : invalid_argument(std::move(msg));
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory while rendering the template");
  }
}

}  // namespace tessera::model::jinja
