#include "grammar/compiler.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace tessera::grammar {

std::string Spec::key() const { return fmt::format("{}\x1f{}\x1f{}", spec_kind_name(kind), whitespace, text); }

std::string_view spec_kind_name(SpecKind k) {
  switch (k) {
    case SpecKind::kJsonSchema:
      return "json_schema";
    case SpecKind::kJsonObject:
      return "json_object";
    case SpecKind::kRegex:
      return "regex";
    case SpecKind::kChoice:
      return "choice";
    case SpecKind::kGbnf:
      return "grammar";
  }
  return "";
}

Result<SpecKind> parse_spec_kind(std::string_view name) {
  for (SpecKind k :
       {SpecKind::kJsonSchema, SpecKind::kJsonObject, SpecKind::kRegex, SpecKind::kChoice, SpecKind::kGbnf})
    if (spec_kind_name(k) == name) return k;
  return invalid_argument(fmt::format("unknown structured output kind '{}'", name));
}

Ast choice_grammar(const std::vector<std::string>& choices) {
  std::vector<Expr> alts;
  for (const std::string& c : choices) alts.push_back(Expr::lit(c));
  Ast ast;
  ast.add("root", alts.size() == 1 ? std::move(alts[0]) : Expr::alt(std::move(alts)));
  return ast;
}

Result<Ast> spec_ast(const Spec& spec) {
  JsonSchemaOptions json_options{spec.whitespace};
  switch (spec.kind) {
    case SpecKind::kJsonSchema:
      return json_schema_grammar(spec.text, json_options);
    case SpecKind::kJsonObject:
      return json_object_grammar(json_options);
    case SpecKind::kRegex:
      return regex_grammar(spec.text);
    case SpecKind::kGbnf:
      return parse_gbnf(spec.text);
    case SpecKind::kChoice: {
      auto j = nlohmann::json::parse(spec.text, nullptr, false);
      if (!j.is_array() || j.empty()) return invalid_argument("the choices must be a non-empty array of strings");
      std::vector<std::string> choices;
      for (const auto& c : j) {
        if (!c.is_string()) return invalid_argument("the choices must be a non-empty array of strings");
        choices.push_back(c.get<std::string>());
      }
      return choice_grammar(choices);
    }
  }
  return invalid_argument("unknown structured output kind");
}

Result<std::shared_ptr<const Grammar>> build_spec(const Spec& spec) {
  TS_ASSIGN_OR_RETURN(Ast ast, spec_ast(spec));
  TS_ASSIGN_OR_RETURN(Grammar g, build_grammar(ast));
  return std::make_shared<const Grammar>(std::move(g));
}

Compiler::Compiler(const model::Tokenizer& tokenizer, std::vector<TokenId> eog, size_t cache_entries)
    : tokenizer_(tokenizer), eog_(std::move(eog)), capacity_(std::max<size_t>(1, cache_entries)) {}

std::shared_ptr<const TokenVocab> Compiler::vocab() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!vocab_) vocab_ = TokenVocab::from_tokenizer(tokenizer_, eog_);
  return vocab_;
}

Result<std::shared_ptr<const CompiledGrammar>> Compiler::compile(const Spec& spec) {
  const std::string key = spec.key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  TS_ASSIGN_OR_RETURN(std::shared_ptr<const Grammar> g, build_spec(spec));
  std::shared_ptr<const CompiledGrammar> compiled = CompiledGrammar::compile(std::move(g), vocab(), spec);
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key) == 0) {
    lru_.emplace_front(key, compiled);
    index_[key] = lru_.begin();
    while (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  return compiled;
}

}  // namespace tessera::grammar
