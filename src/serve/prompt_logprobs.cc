#include "serve/prompt_logprobs.h"

#include <string>

namespace tessera::serve {

using json = nlohmann::json;

namespace {

// The text of prompt token i as the client sees it in the echoed prompt.
std::string piece(const std::vector<int32_t>& prompt, size_t i, const model::Tokenizer& tok) {
  return tok.decode_piece(i == 0 ? prompt[0] : prompt[i - 1], prompt[i]);
}

}  // namespace

json vllm_prompt_logprobs(const std::vector<int32_t>& prompt, const std::vector<engine::TokenLogprobs>& lps,
                          const model::Tokenizer& tok) {
  json out = json::array();
  if (prompt.empty()) return out;
  out.push_back(nullptr);
  for (size_t i = 1; i < prompt.size() && i - 1 < lps.size(); ++i) {
    const engine::TokenLogprobs& lp = lps[i - 1];
    json entry = json::object();
    int rank = 1;
    for (const auto& [id, logprob] : lp.top) {
      entry[std::to_string(id)] = {
          {"logprob", logprob}, {"rank", rank++}, {"decoded_token", tok.decode_piece(prompt[i - 1], id)}};
    }
    entry[std::to_string(prompt[i])] = {
        {"logprob", lp.logprob}, {"rank", lp.rank}, {"decoded_token", piece(prompt, i, tok)}};
    out.push_back(std::move(entry));
  }
  return out;
}

json echo_logprobs(const std::vector<int32_t>& prompt, const std::vector<engine::TokenLogprobs>& lps,
                   const model::Tokenizer& tok, size_t& text_offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::string text = piece(prompt, i, tok);
    tokens.push_back(text);
    offsets.push_back(text_offset);
    text_offset += text.size();
    if (i == 0 || i - 1 >= lps.size()) {  // nothing predicts the first token
      token_lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    const engine::TokenLogprobs& lp = lps[i - 1];
    token_lps.push_back(lp.logprob);
    json t = json::object();
    for (const auto& [id, logprob] : lp.top) t[tok.decode_piece(prompt[i - 1], id)] = logprob;
    tops.push_back(std::move(t));
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

}  // namespace tessera::serve
