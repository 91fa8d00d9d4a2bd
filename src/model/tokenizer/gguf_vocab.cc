#include "model/tokenizer/gguf_vocab.h"

#include <algorithm>
#include <cctype>

#include <fmt/core.h>

#include "base/mapped_file.h"
#include "model/tokenizer/gguf_pre_tokenizers.h"

namespace tessera::model {
namespace {

// Tokens llama.cpp treats as end-of-turn / end-of-message markers by their text, and therefore as control
// tokens even where the converter typed them normal (GPT-2's <|endoftext|>, Phi-3's <|end|>).
constexpr std::string_view kEndMarkers[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<end_of_utterance>",
    "<|eom_id|>",
    "<\uFF5Cend\u2581of\u2581sentence\uFF5C>",  // DeepSeek's <｜end▁of▁sentence｜>
    "end\xE2\x96\x81"
    "of\xE2\x96\x81"
    "sentence\xEF\xBD\x9C>",  // DeepSeek's <｜end▁of▁sentence｜>
};

Result<bool> get_bool(const GgufContents& c, const std::string& key, bool fallback) {
  if (c.find(key) == nullptr) return fallback;
  TS_ASSIGN_OR_RETURN(int64_t v, c.get_int(key));
  return v != 0;
}

}  // namespace

Result<Vocab> read_gguf_vocab(const GgufContents& c) {
  if (c.find("tokenizer.ggml.model") == nullptr) return not_found("the GGUF file has no tokenizer.ggml.model");
  Vocab v;
  TS_ASSIGN_OR_RETURN(std::string model, c.get_string("tokenizer.ggml.model"));
  if (model == "llama") {
    v.kind = VocabKind::kSentencePiece;
    v.add_bos = true;
    v.add_space_prefix = true;
  } else if (model == "gpt2") {
    v.kind = VocabKind::kByteLevelBpe;
    v.add_space_prefix = false;
    v.pre = "default";  // llama.cpp's choice (with a warning) when the file names none
    if (c.find("tokenizer.ggml.pre")) {
      TS_ASSIGN_OR_RETURN(v.pre, c.get_string("tokenizer.ggml.pre"));
    }
    TS_ASSIGN_OR_RETURN(GgufPreTokenizer pre, gguf_pre_tokenizer(v.pre));
    v.add_bos = pre.add_bos;
  } else if (model == "bert") {
    // llama.cpp's WPM defaults: [CLS] 101 as BOS, [SEP] 102, [UNK] 100, [PAD] 0, [MASK] 103 (overridden by the
    // file's ids below); [CLS] ... [SEP] added whatever add_bos_token says; the pre-tokenizer name is not read.
    v.kind = VocabKind::kWordPiece;
    v.add_bos = v.add_eos = true;
    v.add_space_prefix = false;
    v.bos = 101;
    v.eos = 102;
    v.unk = 100;
    v.pad = 0;
    v.mask = 103;
  } else if (model == "gemma4") {
    // llama.cpp ignores the file's tokenizer.ggml.pre for this model (its converter writes none).
    v.kind = VocabKind::kGemma4Bpe;
    v.add_bos = true;
    v.add_space_prefix = false;
    v.pre = "gemma4";
  } else {
    return unimplemented(
        fmt::format("GGUF tokenizer.ggml.model '{}' is not supported (llama, gpt2, gemma4 and bert are)", model));
  }
  const GgufValue* tokens = c.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != GgufType::kArray || tokens->elem_type != GgufType::kString)
    return invalid_argument("GGUF tokenizer.ggml.tokens is missing or not an array of strings");
  v.tokens = tokens->strings;
  const size_t n = v.tokens.size();
  if (n == 0) return invalid_argument("GGUF tokenizer.ggml.tokens is empty");
  for (size_t i = 0; i < n; ++i)  // as llama.cpp: an empty entry gets a placeholder that text never spells
    if (v.tokens[i].empty()) v.tokens[i] = fmt::format("[EMPTY_{}]", i);
  if (const GgufValue* s = c.find("tokenizer.ggml.scores")) {
    if (s->type != GgufType::kArray || (s->elem_type != GgufType::kFloat32 && s->elem_type != GgufType::kInt32))
      return invalid_argument("GGUF tokenizer.ggml.scores is not an array of float32 or int32");
    if (s->array_size() < n)
      return invalid_argument(
          fmt::format("GGUF tokenizer.ggml.scores has {} entries for {} tokens", s->array_size(), n));
    v.scores.resize(n);
    for (size_t i = 0; i < n; ++i)
      v.scores[i] =
          s->elem_type == GgufType::kInt32 ? static_cast<float>(s->ints[i]) : static_cast<float>(s->floats[i]);
  }
  if (const GgufValue* t = c.find("tokenizer.ggml.token_type")) {
    if (t->type != GgufType::kArray || t->elem_type != GgufType::kInt32)
      return invalid_argument("GGUF tokenizer.ggml.token_type is not an array of int32");
    if (t->ints.size() < n)
      return invalid_argument(
          fmt::format("GGUF tokenizer.ggml.token_type has {} entries for {} tokens", t->ints.size(), n));
    v.types.assign(t->ints.begin(), t->ints.begin() + static_cast<std::ptrdiff_t>(n));
  } else {
    v.types.assign(n, kTokenNormal);
  }
  if (const GgufValue* m = c.find("tokenizer.ggml.merges")) {
    if (m->type != GgufType::kArray || m->elem_type != GgufType::kString)
      return invalid_argument("GGUF tokenizer.ggml.merges is not an array of strings");
    v.merges = m->strings;
  }
  if ((v.kind == VocabKind::kByteLevelBpe || v.kind == VocabKind::kGemma4Bpe) && v.merges.empty())
    return invalid_argument(fmt::format("GGUF {} tokenizer has no tokenizer.ggml.merges", v.kind_name()));
  // llama.cpp's tools write "no such token" as -1, which a uint32 key holds as 4294967295 (its LLAMA_TOKEN_NULL):
  // read either as absent, as llama.cpp does. Any other id outside the vocabulary is an error: a model whose BOS,
  // EOS or UNK cannot be looked up would be computed wrongly.
  auto id = [&](const char* key, TokenId& out) -> Status {
    if (c.find(key) == nullptr) return ok_status();
    TS_ASSIGN_OR_RETURN(int64_t x, c.get_int(key));
    if (x == -1 || x == int64_t{0xFFFFFFFF}) {
      out = -1;
      return ok_status();
    }
    if (x < 0 || x >= static_cast<int64_t>(n))
      return invalid_argument(fmt::format("GGUF {} = {} is outside the vocabulary of {}", key, x, n));
    out = static_cast<TokenId>(x);
    return ok_status();
  };
  if (v.kind == VocabKind::kWordPiece) {
    for (TokenId* t : {&v.bos, &v.eos, &v.unk, &v.pad, &v.mask})
      if (*t >= static_cast<TokenId>(n)) *t = -1;  // a default beyond a small vocabulary: absent, as llama.cpp
  }
  TS_RETURN_IF_ERROR(id("tokenizer.ggml.bos_token_id", v.bos));
  TS_RETURN_IF_ERROR(id("tokenizer.ggml.eos_token_id", v.eos));
  TS_RETURN_IF_ERROR(id("tokenizer.ggml.unknown_token_id", v.unk));
  TS_RETURN_IF_ERROR(id("tokenizer.ggml.padding_token_id", v.pad));
  if (v.kind == VocabKind::kWordPiece) {
    // [CLS] and [SEP] are what a bert vocabulary adds; older files name them only as cls/seperator (sic).
    TS_RETURN_IF_ERROR(id("tokenizer.ggml.cls_token_id", v.bos));
    TS_RETURN_IF_ERROR(id("tokenizer.ggml.seperator_token_id", v.eos));
    TS_RETURN_IF_ERROR(id("tokenizer.ggml.mask_token_id", v.mask));
    TS_ASSIGN_OR_RETURN(v.lowercase, get_bool(c, "tokenizer.ggml.normalizer.lowercase", v.lowercase));
    v.strip_accents = v.lowercase;
    TS_ASSIGN_OR_RETURN(v.strip_accents, get_bool(c, "tokenizer.ggml.normalizer.strip_accents", v.strip_accents));
    if (v.unk < 0) return invalid_argument("GGUF bert tokenizer has no [UNK] (tokenizer.ggml.unknown_token_id)");
    if (v.bos < 0 || v.eos < 0)
      return invalid_argument("GGUF bert tokenizer has no [CLS] or [SEP] (cls_token_id / seperator_token_id)");
  }
  if (v.kind != VocabKind::kWordPiece) {
    TS_ASSIGN_OR_RETURN(v.add_bos, get_bool(c, "tokenizer.ggml.add_bos_token", v.add_bos));
    TS_ASSIGN_OR_RETURN(v.add_eos, get_bool(c, "tokenizer.ggml.add_eos_token", v.add_eos));
  }
  TS_ASSIGN_OR_RETURN(v.add_space_prefix, get_bool(c, "tokenizer.ggml.add_space_prefix", v.add_space_prefix));
  if (v.kind == VocabKind::kGemma4Bpe) {
    // As llama.cpp: Gemma 4 always starts with BOS (files that say otherwise are overridden), and a BPE
    // vocabulary never prepends a space.
    v.add_bos = true;
    v.add_space_prefix = false;
  }
  if (v.add_bos && v.bos < 0) return invalid_argument("GGUF tokenizer adds BOS but has no tokenizer.ggml.bos_token_id");
  if (v.add_eos && v.eos < 0) return invalid_argument("GGUF tokenizer adds EOS but has no tokenizer.ggml.eos_token_id");

  for (size_t i = 0; i < n; ++i) {
    for (std::string_view m : kEndMarkers)
      if (v.tokens[i] == m && v.types[i] != kTokenControl) v.types[i] = kTokenControl;
    // Gemma 4's end of turn, which llama.cpp ends generation on. Its <|tool_response> ends generation too, and
    // llama.cpp adds the control attribute to the user-defined type the converter gave it: matched in text only
    // with parse_special, yet spelled in decoded text. With <|tool_response> in the vocabulary, llama.cpp makes
    // "</s>" a normal token.
    if (v.kind == VocabKind::kGemma4Bpe && (v.tokens[i] == "<eos>" || v.tokens[i] == "<turn|>"))
      v.types[i] = kTokenControl;
    if (v.kind == VocabKind::kGemma4Bpe && v.tokens[i] == "<|tool_response>" && v.types[i] == kTokenUserDefined) {
      v.types[i] = kTokenControl;
      v.visible_control.push_back(static_cast<TokenId>(i));
    }
  }
  if (std::find(v.tokens.begin(), v.tokens.end(), "<|tool_response>") != v.tokens.end())
    for (size_t i = 0; i < n; ++i)
      if (v.tokens[i] == "</s>") v.types[i] = kTokenNormal;
  // gpt-oss's harmony format (o200k_harmony), as llama.cpp's vocabulary loader treats it: the structure tokens
  // <|channel|>, <|message|>, <|start|>, <|constrain|> are user-defined, so generated text spells them (a client
  // parses the channels from them); and with <|return|> and <|call|> ending turns, <|end|> only ends a message:
  // user-defined too, neither a stop nor hidden.
  const bool harmony = std::find(v.tokens.begin(), v.tokens.end(), "<|return|>") != v.tokens.end() &&
                       std::find(v.tokens.begin(), v.tokens.end(), "<|call|>") != v.tokens.end();
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = v.tokens[i];
    if (t == "<|channel|>" || t == "<|message|>" || t == "<|start|>" || t == "<|constrain|>" ||
        (harmony && t == "<|end|>"))
      v.types[i] = kTokenUserDefined;
  }
  // Phi-3's tokenizer.json strips the whitespace after its special tokens (rstrip) except after these;
  // llama.cpp recognises the model by name, and so does this reader.
  std::string name;
  if (c.find("general.name")) {
    auto s = c.get_string("general.name");
    if (s.ok()) name = *s;
  }
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    v.strip.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      int32_t t = v.types[i];
      bool keep = v.tokens[i] == "<unk>" || v.tokens[i] == "<s>" || v.tokens[i] == "<|endoftext|>";
      if ((t == kTokenControl || t == kTokenUserDefined || t == kTokenUnknown || v.tokens[i] == "</s>") && !keep)
        v.strip[i] = kStripRight;
    }
  }
  TS_RETURN_IF_ERROR(v.validate());
  return v;
}

Result<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  TS_ASSIGN_OR_RETURN(GgufContents c, parse_gguf(file->bytes(), path));
  auto v = read_gguf_vocab(c);
  if (!v.ok()) return v.status().with_context(path);
  auto t = make_tokenizer(*v);
  if (!t.ok()) return t.status().with_context(path);
  return std::move(*t);
}

}  // namespace tessera::model
