// `tessera tokenize --model FILE TEXT`: a model's tokenizer on the command line, to check it against another
// implementation (llama.cpp's llama-tokenize, Hugging Face). Works on any model Tessera loads and on
// vocab-only GGUF files (llama.cpp's ggml-vocab-*.gguf), which carry a tokenizer and no tensors.
//
// Default output: one line per token, "<id> '<text>'" (control characters and bytes that are not whole
// UTF-8 escaped). --ids: the ids only, as a JSON array. --detokenize IDS: the text of the ids (a JSON array
// or ids separated by spaces or commas); special tokens are left out unless --keep-special.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "model/formats/gguf/gguf_model.h"
#include "model/loader.h"
#include "model/tokenizer/gguf_vocab.h"
#include "model/tokenizer/load_tokenizer.h"
#include "model/tokenizer/unicode.h"

namespace tessera::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  std::string tokenizer;
  std::string text;
  std::string detokenize;
  bool ids = false;
  bool no_special = false;
  bool no_parse_special = false;
  bool keep_special = false;
};

// Printable on one line: \n \r \t and other control bytes escaped, invalid UTF-8 bytes as \xNN.
std::string escape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      size_t j = i;
      uint32_t cp = model::utf8_next(s, j);
      if (cp == 0xFFFD && s.compare(i, 3, "\xEF\xBF\xBD") != 0) {
        out += fmt::format("\\x{:02x}", c);
        ++i;
        continue;
      }
      out.append(s, i, j - i);
      i = j;
      continue;
    }
    ++i;
  }
  return out;
}

// "[1, 2, 3]", "1 2 3" or "1,2,3"; anything else is an error naming the bad part.
Result<std::vector<model::TokenId>> parse_ids(const std::string& text, int vocab_size) {
  std::string body = text;
  size_t a = body.find_first_not_of(" \t\n"), b = body.find_last_not_of(" \t\n");
  if (a != std::string::npos && body[a] == '[') {
    if (body[b] != ']') return invalid_argument("--detokenize: a '[' list must end with ']'");
    body = body.substr(a + 1, b - a - 1);
  }
  std::vector<model::TokenId> ids;
  const std::string seps = " ,\t\n";
  for (size_t i = body.find_first_not_of(seps); i != std::string::npos; i = body.find_first_not_of(seps, i)) {
    size_t end = std::min(body.find_first_of(seps, i), body.size());
    std::string word = body.substr(i, end - i);
    long long v = 0;
    auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
    if (ec != std::errc() || ptr != word.data() + word.size())
      return invalid_argument(fmt::format("--detokenize: '{}' is not a token id", word));
    if (v < 0 || v >= vocab_size)
      return out_of_range(fmt::format("--detokenize: token id {} is outside the vocabulary of {}", v, vocab_size));
    ids.push_back(static_cast<model::TokenId>(v));
    i = end;
  }
  return ids;
}

Result<std::unique_ptr<model::Tokenizer>> open_tokenizer(const TokenizeArgs& a) {
  if (!a.tokenizer.empty()) return model::load_tokenizer(a.tokenizer);
  // A GGUF file needs only its header (vocab-only files have no tensors to load).
  if (model::looks_like_gguf(a.model)) return model::load_gguf_tokenizer(a.model);
  TS_ASSIGN_OR_RETURN(model::LoadedModel m, model::load_model(a.model, "", /*require_tokenizer=*/true));
  return std::move(m.tokenizer);
}

int run_tokenize(const TokenizeArgs& a) {
  auto tok = open_tokenizer(a);
  if (!tok.ok()) return fail(tok.status().message());
  const model::Tokenizer& t = **tok;
  if (!a.detokenize.empty()) {
    auto ids = parse_ids(a.detokenize, t.vocab_size());
    if (!ids.ok()) return fail(ids.status().message());
    std::string text = t.decode(*ids, /*skip_special=*/!a.keep_special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  std::string text = a.text;
  if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  std::vector<model::TokenId> ids =
      t.tokenize(text, {.add_special = !a.no_special, .parse_special = !a.no_parse_special});
  if (a.ids) {
    fmt::print("[{}]\n", fmt::join(ids, ", "));
    return 0;
  }
  model::TokenId prev = -1;
  for (model::TokenId id : ids) {
    std::string piece = t.is_special(id) ? t.special_text(id) : t.decode_piece(prev, id);
    fmt::print("{:>7} '{}'\n", id, escape(piece));
    prev = id;
  }
  return 0;
}

}  // namespace

Action add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Text to token ids (or ids to text) with a model's tokenizer");
  cmd->add_option("--model", args->model, "GGUF file (vocab-only files too), HF folder, or a model directory")
      ->required();
  cmd->add_option("--tokenizer", args->tokenizer, "Use this tokenizer file instead of the model's");
  cmd->add_option("text", args->text, "Text to tokenize ('-': read standard input)");
  cmd->add_option("--detokenize", args->detokenize, "Token ids to turn into text: \"[1, 2]\", \"1 2\" or \"1,2\"");
  cmd->add_flag("--ids", args->ids, "Print only the ids, as a JSON array");
  cmd->add_flag("--no-special", args->no_special, "Do not add the BOS/EOS the model's tokenizer adds");
  cmd->add_flag("--no-parse-special", args->no_parse_special,
                "Tokenize the spelling of control tokens (\"<|im_end|>\") as plain text");
  cmd->add_flag("--keep-special", args->keep_special, "--detokenize: keep special tokens' text");
  return [args, cmd] {
    if (args->detokenize.empty() && cmd->count("text") == 0)
      return fail("tokenize: give TEXT to tokenize (or '-' for standard input), or --detokenize IDS");
    if (!args->detokenize.empty() && cmd->count("text") > 0)
      return fail("tokenize: give either TEXT or --detokenize IDS, not both");
    return run_tokenize(*args);
  };
}

}  // namespace tessera::cli
