#include "serve/tokenize_api.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <variant>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace tessera::serve {
namespace {

using json = nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

TokenizeReply error(int status, std::string message, std::string param = "", std::string code = "") {
  return {status,
          api::error_body({status, std::move(message), "invalid_request_error", std::move(param), std::move(code)})};
}

// The body as an object, with "model" checked against the served one (absent: the served one).
std::variant<json, TokenizeReply> parse_body(std::string_view body, const std::vector<std::string>& names) {
  const std::string& model_name = names.front();
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return error(400, "the request body is not valid JSON");
  if (!j.is_object()) return error(400, "the request body must be a JSON object");
  auto m = j.find("model");
  if (m != j.end() && !m->is_null()) {
    if (!m->is_string()) return error(400, "'model' must be a string", "model");
    if (std::find(names.begin(), names.end(), m->get<std::string>()) == names.end())
      return error(
          404, fmt::format("The model '{}' does not exist; this server serves '{}'", m->get<std::string>(), model_name),
          "model", "model_not_found");
  }
  return j;
}

// An optional boolean field; an error reply when it has another type.
std::optional<TokenizeReply> get_bool(const json& j, const char* key, bool& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return error(400, fmt::format("'{}' must be a boolean", key), key);
  out = it->get<bool>();
  return std::nullopt;
}

TokenizeReply ids_reply(std::vector<model::TokenId> ids, int max_model_len) {
  json out = {{"count", ids.size()}, {"max_model_len", max_model_len}, {"tokens", ids}, {"token_strs", nullptr}};
  return {200, dump(out)};
}

}  // namespace

TokenizeReply tokenize_request(std::string_view body, const model::Tokenizer& tok, const ChatFormatter& chat,
                               const std::vector<std::string>& model_names, int max_model_len,
                               const std::function<bool()>& cancelled) {
  auto parsed = parse_body(body, model_names);
  if (auto* e = std::get_if<TokenizeReply>(&parsed)) return *e;
  json& j = std::get<json>(parsed);
  const std::string& model_name = model_names.front();
  const bool has_prompt = j.contains("prompt") && !j["prompt"].is_null();
  const bool has_messages = j.contains("messages") && !j["messages"].is_null();
  if (has_prompt == has_messages) return error(400, "give exactly one of 'prompt' and 'messages'");
  for (const char* unsupported : {"return_token_strs", "chat_template", "tools"}) {
    auto it = j.find(unsupported);
    if (it != j.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>()))
      return error(400, fmt::format("'{}' is not supported by this server", unsupported), unsupported);
  }
  if (has_prompt) {
    if (!j["prompt"].is_string()) return error(400, "'prompt' must be a string", "prompt");
    bool add_special = true;
    if (auto e = get_bool(j, "add_special_tokens", add_special)) return *e;
    return ids_reply(tok.tokenize(j["prompt"].get<std::string>(), {.add_special = add_special, .parse_special = true}),
                     max_model_len);
  }
  if (!chat) return error(400, "this model has no chat template; start the server with --chat-template", "messages");
  // The messages and the template fields are validated by the chat-completions parser itself, so both routes
  // accept the same.
  json as_chat = {{"model", model_name}, {"messages", j["messages"]}};
  for (const char* key : {"add_generation_prompt", "continue_final_message"})
    if (j.contains(key)) as_chat[key] = j[key];
  auto req = api::parse_request(dump(as_chat), /*chat=*/true);
  if (auto* e = std::get_if<api::ApiError>(&req)) return {e->status, api::error_body(*e)};
  auto rendered = chat(std::get<api::ApiRequest>(req), cancelled);
  if (!rendered.ok()) return error(400, rendered.status().message(), "messages");
  // vLLM's default for messages: add_special_tokens false, so the ids are the template's own, BOS included where
  // the template writes it: exactly what chat completions feeds the engine. True adds the tokenizer's special
  // tokens on top, as vLLM does (a second BOS after a template that wrote one).
  bool add_special = false;
  if (auto e = get_bool(j, "add_special_tokens", add_special)) return *e;
  std::vector<model::TokenId> ids =
      tok.tokenize(rendered->text, {.add_special = rendered->add_bos || add_special, .parse_special = true});
  if (add_special && rendered->add_bos && tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
  return ids_reply(std::move(ids), max_model_len);
}

TokenizeReply detokenize_request(std::string_view body, const model::Tokenizer& tok,
                                 const std::vector<std::string>& model_names) {
  auto parsed = parse_body(body, model_names);
  if (auto* e = std::get_if<TokenizeReply>(&parsed)) return *e;
  json& j = std::get<json>(parsed);
  auto it = j.find("tokens");
  if (it == j.end() || !it->is_array()) return error(400, "'tokens' must be an array of token ids", "tokens");
  std::vector<model::TokenId> ids;
  ids.reserve(it->size());
  for (const json& t : *it) {
    if (!t.is_number_integer()) return error(400, "'tokens' must be an array of token ids", "tokens");
    int64_t v = t.get<int64_t>();
    if (v < 0 || v >= tok.vocab_size())
      return error(400, fmt::format("token id {} is outside the vocabulary of {}", v, tok.vocab_size()), "tokens");
    ids.push_back(static_cast<model::TokenId>(v));
  }
  bool skip_special = false;
  if (auto e = get_bool(j, "skip_special_tokens", skip_special)) return *e;
  return {200, dump({{"prompt", tok.decode(ids, skip_special)}})};
}

}  // namespace tessera::serve
