#include "model/tokenizer/wordpiece_tokenizer.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <filesystem>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "model/tokenizer/unicode.h"

namespace tessera::model {
namespace {

using Json = nlohmann::json;
constexpr std::string_view kPhantomSpace = "\xE2\x96\x81";  // U+2581: llama.cpp's mark of a word-initial piece

// Other (C*) categories: what BertNormalizer's clean_text drops.
bool is_other(uint32_t c) {
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_CONTROL_CHAR || t == U_FORMAT_CHAR || t == U_SURROGATE || t == U_PRIVATE_USE_CHAR || t == U_UNASSIGNED;
}

// Rust's char::is_whitespace (the White_Space property), which BertNormalizer and BertPreTokenizer use.
bool is_whitespace(uint32_t c) {
  return c == '\t' || c == '\n' || c == '\r' || u_isUWhiteSpace(static_cast<UChar32>(c));
}

bool is_control(uint32_t c) { return c != '\t' && c != '\n' && c != '\r' && is_other(c); }

bool is_punctuation(uint32_t c) {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_CONNECTOR_PUNCTUATION || t == U_DASH_PUNCTUATION || t == U_START_PUNCTUATION ||
         t == U_END_PUNCTUATION || t == U_INITIAL_PUNCTUATION || t == U_FINAL_PUNCTUATION || t == U_OTHER_PUNCTUATION;
}

// The CJK Unified Ideographs blocks BERT separates (Hugging Face's list, 0x2B920 included).
bool is_cjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Full lowercase mapping of one character, without context (Rust's char::to_lowercase).
void append_lower(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  icu::UnicodeString u(static_cast<UChar32>(c));
  u.toLower(icu::Locale::getRoot());
  u.toUTF8String(out);
}

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(utf8_next(s, i));
  return out;
}

std::string str_or(const Json& j, const char* key, std::string fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool bool_or(const Json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace

WordPieceTokenizer::WordPieceTokenizer(WordPieceSpec spec) : spec_(std::move(spec)) {
  std::vector<AddedToken> added;
  for (size_t i = 0; i < spec_.tokens.size(); ++i) {
    const std::string& t = spec_.tokens[i];
    const auto id = static_cast<TokenId>(i);
    if (spec_.special[i]) {
      added.push_back({id, t, true, false, false, false});
      continue;
    }
    // A later duplicate does not replace an earlier entry (Hugging Face's vocab is a map: ids are unique).
    if (t.size() > spec_.prefix.size() && t.compare(0, spec_.prefix.size(), spec_.prefix) == 0) {
      continuation_.emplace(t.substr(spec_.prefix.size()), id);
      max_piece_bytes_ = std::max(max_piece_bytes_, t.size() - spec_.prefix.size());
    } else {
      initial_.emplace(t, id);
      max_piece_bytes_ = std::max(max_piece_bytes_, t.size());
    }
  }
  added_ = AddedTokenMatcher(added);
}

Result<std::unique_ptr<WordPieceTokenizer>> WordPieceTokenizer::create(WordPieceSpec spec) {
  const size_t n = spec.tokens.size();
  if (n < 1 || n > (1u << 24)) return invalid_argument(fmt::format("WordPiece vocabulary of {} tokens", n));
  if (spec.special.empty()) spec.special.assign(n, false);
  if (spec.special.size() != n) return invalid_argument("WordPiece: special flags do not match the vocabulary");
  for (auto [what, id] :
       {std::pair{"unk", spec.unk}, {"cls", spec.cls}, {"sep", spec.sep}, {"pad", spec.pad}, {"mask", spec.mask}}) {
    if (id < -1 || id >= static_cast<TokenId>(n))
      return invalid_argument(fmt::format("WordPiece: {} token id {} is outside the vocabulary of {}", what, id, n));
  }
  if (spec.unk < 0) return invalid_argument("WordPiece needs an unknown token ([UNK])");
  if (spec.add_cls_sep && (spec.cls < 0 || spec.sep < 0))
    return invalid_argument("WordPiece adds [CLS] and [SEP] but the vocabulary lacks one of them");
  if (spec.prefix.empty()) return invalid_argument("WordPiece: the continuation prefix is empty");
  if (spec.max_input_chars_per_word < 1) return invalid_argument("WordPiece: max_input_chars_per_word must be >= 1");
  return std::unique_ptr<WordPieceTokenizer>(new WordPieceTokenizer(std::move(spec)));
}

std::vector<std::string> WordPieceTokenizer::words(std::string_view text) const {
  // Normaliser: clean_text, handle_chinese_chars, strip_accents, lowercase, in Hugging Face's order.
  std::string cleaned;
  cleaned.reserve(text.size());
  for (uint32_t c : code_points(text)) {
    if (spec_.clean_text) {
      if (c == 0 || c == 0xFFFD || is_control(c)) continue;
      if (is_whitespace(c)) c = ' ';
    }
    if (spec_.handle_chinese_chars && is_cjk(c)) {
      cleaned += ' ';
      utf8_append(cleaned, c);
      cleaned += ' ';
      continue;
    }
    utf8_append(cleaned, c);
  }
  std::vector<uint32_t> cps = code_points(spec_.strip_accents ? unicode_normalize(cleaned, NormalForm::kNfd) : cleaned);
  // Pre-tokeniser: split at whitespace (removed) and around each punctuation character (kept, alone).
  std::vector<std::string> out(1);
  for (uint32_t c : cps) {
    if (spec_.strip_accents && c >= 0x80 && u_charType(static_cast<UChar32>(c)) == U_NON_SPACING_MARK) continue;
    if (is_whitespace(c)) {
      if (!out.back().empty()) out.emplace_back();
      continue;
    }
    std::string ch;
    if (spec_.lowercase) {
      append_lower(ch, c);
    } else {
      utf8_append(ch, c);
    }
    if (is_punctuation(c)) {
      if (!out.back().empty()) out.emplace_back();
      out.back() = std::move(ch);
      out.emplace_back();
    } else {
      out.back() += ch;
    }
  }
  if (out.back().empty()) out.pop_back();
  return out;
}

void WordPieceTokenizer::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  std::vector<size_t> bounds;  // byte offsets of the characters, and the end
  for (size_t i = 0; i < word.size();) {
    bounds.push_back(i);
    utf8_next(word, i);
  }
  bounds.push_back(word.size());
  const size_t chars = bounds.size() - 1;
  if (chars > static_cast<size_t>(spec_.max_input_chars_per_word)) {
    out.push_back(spec_.unk);
    return;
  }
  const size_t first = out.size();
  size_t start = 0;  // index into bounds
  while (start < chars) {
    TokenId found = -1;
    size_t end = chars;
    const auto& table = start == 0 ? initial_ : continuation_;
    for (; end > start; --end) {
      const size_t bytes = bounds[end] - bounds[start];
      if (bytes > max_piece_bytes_) continue;
      auto it = table.find(std::string(word.substr(bounds[start], bytes)));
      if (it != table.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {
      out.resize(first);
      out.push_back(spec_.unk);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

std::vector<TokenId> WordPieceTokenizer::tokenize(std::string_view text, const EncodeOptions& options) const {
  std::vector<TokenId> out;
  if (options.add_special && spec_.add_cls_sep) out.push_back(spec_.cls);
  for (const AddedTokenMatcher::Piece& p : added_.split(text, options.parse_special)) {
    if (p.id >= 0) {
      out.push_back(p.id);
      continue;
    }
    for (const std::string& w : words(p.text)) encode_word(w, out);
  }
  if (options.add_special && spec_.add_cls_sep) out.push_back(spec_.sep);
  return out;
}

bool WordPieceTokenizer::is_special(TokenId token) const {
  return token >= 0 && static_cast<size_t>(token) < spec_.tokens.size() && spec_.special[static_cast<size_t>(token)];
}

std::string WordPieceTokenizer::special_text(TokenId token) const {
  return is_special(token) ? spec_.tokens[static_cast<size_t>(token)] : std::string();
}

std::string WordPieceTokenizer::decode_piece(TokenId prev, TokenId token) const {
  if (token < 0 || static_cast<size_t>(token) >= spec_.tokens.size() || is_special(token)) return {};
  const std::string& t = spec_.tokens[static_cast<size_t>(token)];
  if (t.size() > spec_.prefix.size() && t.compare(0, spec_.prefix.size(), spec_.prefix) == 0)
    return t.substr(spec_.prefix.size());
  const bool first = prev < 0 || is_special(prev);
  return first ? t : " " + t;
}

Result<Vocab> WordPieceTokenizer::to_vocab() const {
  Vocab v;
  v.kind = VocabKind::kWordPiece;
  v.tokens.reserve(spec_.tokens.size());
  v.types.reserve(spec_.tokens.size());
  for (size_t i = 0; i < spec_.tokens.size(); ++i) {
    const std::string& t = spec_.tokens[i];
    if (spec_.special[i]) {
      v.tokens.push_back(t);
      v.types.push_back(kTokenControl);
    } else if (t.size() > spec_.prefix.size() && t.compare(0, spec_.prefix.size(), spec_.prefix) == 0) {
      v.tokens.push_back(t.substr(spec_.prefix.size()));
      v.types.push_back(kTokenNormal);
    } else {
      v.tokens.push_back(std::string(kPhantomSpace) + t);
      v.types.push_back(kTokenNormal);
    }
  }
  v.bos = spec_.cls;  // as llama.cpp's converter writes a BERT vocabulary: BOS is [CLS], EOS is [SEP]
  v.eos = spec_.sep;
  v.unk = spec_.unk;
  v.pad = spec_.pad;
  v.mask = spec_.mask;
  v.add_bos = v.add_eos = spec_.add_cls_sep;
  v.add_space_prefix = false;
  v.lowercase = spec_.lowercase;
  v.strip_accents = spec_.strip_accents;
  return v;
}

std::string WordPieceTokenizer::tokenizer_json() const {
  Json vocab = Json::object();
  Json added = Json::array();
  for (size_t i = 0; i < spec_.tokens.size(); ++i) {
    vocab[spec_.tokens[i]] = i;
    if (spec_.special[i])
      added.push_back({{"id", i},
                       {"content", spec_.tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
  }
  Json post = nullptr;
  if (spec_.add_cls_sep) {
    const std::string& cls = spec_.tokens[static_cast<size_t>(spec_.cls)];
    const std::string& sep = spec_.tokens[static_cast<size_t>(spec_.sep)];
    auto special = [](const std::string& id) { return Json{{"SpecialToken", {{"id", id}, {"type_id", 0}}}}; };
    post = {{"type", "TemplateProcessing"},
            {"single", {special(cls), {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, special(sep)}},
            {"pair",
             {special(cls),
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
              special(sep),
              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}},
              {{"SpecialToken", {{"id", sep}, {"type_id", 1}}}}}},
            {"special_tokens",
             {{cls, {{"id", cls}, {"ids", {spec_.cls}}, {"tokens", {cls}}}},
              {sep, {{"id", sep}, {"ids", {spec_.sep}}, {"tokens", {sep}}}}}}};
  }
  Json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added},
            {"normalizer",
             {{"type", "BertNormalizer"},
              {"clean_text", spec_.clean_text},
              {"handle_chinese_chars", spec_.handle_chinese_chars},
              {"strip_accents", spec_.strip_accents == spec_.lowercase ? Json(nullptr) : Json(spec_.strip_accents)},
              {"lowercase", spec_.lowercase}}},
            {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
            {"post_processor", post},
            {"decoder", {{"type", "WordPiece"}, {"prefix", spec_.prefix}, {"cleanup", true}}},
            {"model",
             {{"type", "WordPiece"},
              {"unk_token", spec_.tokens[static_cast<size_t>(spec_.unk)]},
              {"continuing_subword_prefix", spec_.prefix},
              {"max_input_chars_per_word", spec_.max_input_chars_per_word},
              {"vocab", vocab}}}};
  return j.dump(2) + "\n";
}

Result<std::unique_ptr<WordPieceTokenizer>> WordPieceTokenizer::from_vocab(const Vocab& v) {
  TS_RETURN_IF_ERROR(v.validate());
  if (v.kind != VocabKind::kWordPiece) return invalid_argument("WordPieceTokenizer needs a bert vocabulary");
  WordPieceSpec s;
  s.tokens.reserve(v.tokens.size());
  s.special.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string& t = v.tokens[i];
    const int32_t type = v.types.empty() ? kTokenNormal : v.types[i];
    const bool special = type == kTokenControl || type == kTokenUnknown || type == kTokenUserDefined;
    s.special.push_back(special);
    if (special) {
      s.tokens.push_back(t);
    } else if (t.compare(0, kPhantomSpace.size(), kPhantomSpace) == 0) {
      s.tokens.push_back(t.substr(kPhantomSpace.size()));
    } else {
      s.tokens.push_back(s.prefix + t);
    }
  }
  s.unk = v.unk;
  s.cls = v.bos;
  s.sep = v.eos;
  s.pad = v.pad;
  s.mask = v.mask;
  s.lowercase = v.lowercase;
  s.strip_accents = v.strip_accents;
  // llama.cpp adds [CLS] and [SEP] to a `bert` vocabulary whatever add_bos_token says.
  s.add_cls_sep = true;
  return create(std::move(s));
}

Result<std::unique_ptr<WordPieceTokenizer>> WordPieceTokenizer::from_json(std::string_view tokenizer_json,
                                                                          std::string_view tokenizer_config_json,
                                                                          const std::string& name) {
  Json j = Json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(fmt::format("{} is not a JSON object", name));
  auto ctx = [&](const std::string& what) { return fmt::format("{}: {}", name, what); };
  const Json& model = j.contains("model") ? j["model"] : Json();
  if (!model.is_object()) return invalid_argument(ctx("no \"model\" object"));
  const std::string type = str_or(model, "type", "");
  if (type != "WordPiece") return unimplemented(ctx(fmt::format("model type '{}' is not WordPiece", type)));
  WordPieceSpec s;
  s.prefix = str_or(model, "continuing_subword_prefix", "##");
  if (auto m = model.find("max_input_chars_per_word"); m != model.end() && m->is_number_integer())
    s.max_input_chars_per_word = static_cast<int>(std::clamp<int64_t>(m->get<int64_t>(), 1, 1 << 20));
  const Json& norm = j.contains("normalizer") ? j["normalizer"] : Json();
  if (norm.is_object()) {
    if (str_or(norm, "type", "") != "BertNormalizer")
      return unimplemented(ctx(fmt::format("normalizer '{}' is not supported with WordPiece (BertNormalizer is)",
                                           str_or(norm, "type", "?"))));
    s.clean_text = bool_or(norm, "clean_text", true);
    s.handle_chinese_chars = bool_or(norm, "handle_chinese_chars", true);
    s.lowercase = bool_or(norm, "lowercase", true);
    s.strip_accents = norm.contains("strip_accents") && norm["strip_accents"].is_boolean()
                          ? norm["strip_accents"].get<bool>()
                          : s.lowercase;
  } else {
    s.clean_text = s.handle_chinese_chars = s.lowercase = s.strip_accents = false;
  }
  const Json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : Json();
  if (!pre.is_object() || str_or(pre, "type", "") != "BertPreTokenizer")
    return unimplemented(ctx(fmt::format("pre-tokenizer '{}' is not supported with WordPiece (BertPreTokenizer is)",
                                         pre.is_object() ? str_or(pre, "type", "?") : "none")));
  const Json& vocab = model.contains("vocab") ? model["vocab"] : Json();
  if (!vocab.is_object() || vocab.empty()) return invalid_argument(ctx("the WordPiece model has no vocab"));
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer())
      return invalid_argument(ctx(fmt::format("the id of '{}' is not an integer", it.key())));
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= (1 << 24)) return invalid_argument(ctx(fmt::format("token id {} is out of range", id)));
    if (static_cast<size_t>(id) >= s.tokens.size()) s.tokens.resize(static_cast<size_t>(id) + 1);
    s.tokens[static_cast<size_t>(id)] = it.key();
  }
  s.special.assign(s.tokens.size(), false);
  if (auto added = j.find("added_tokens"); added != j.end() && added->is_array()) {
    for (const Json& a : *added) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        return invalid_argument(ctx("an added token lacks id or content"));
      const int64_t id = a["id"].get<int64_t>();
      if (id < 0 || id >= (1 << 24)) return invalid_argument(ctx(fmt::format("added token id {} is out of range", id)));
      if (static_cast<size_t>(id) >= s.tokens.size()) {
        s.tokens.resize(static_cast<size_t>(id) + 1);
        s.special.resize(static_cast<size_t>(id) + 1, false);
      }
      s.tokens[static_cast<size_t>(id)] = a["content"].get<std::string>();
      s.special[static_cast<size_t>(id)] = bool_or(a, "special", false);
    }
  }
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    if (s.tokens[i].empty())
      return invalid_argument(ctx(fmt::format("token id {} has no entry (ids must be dense)", i)));
  }
  auto find = [&](const std::string& t) -> TokenId {
    for (size_t i = 0; i < s.tokens.size(); ++i)
      if (s.tokens[i] == t) return static_cast<TokenId>(i);
    return -1;
  };
  s.unk = find(str_or(model, "unk_token", "[UNK]"));
  std::string cls = "[CLS]", sep = "[SEP]";
  s.add_cls_sep = false;
  if (const Json& pp = j.contains("post_processor") ? j["post_processor"] : Json(); pp.is_object()) {
    const std::string pt = str_or(pp, "type", "");
    if (pt == "BertProcessing") {
      if (pp.contains("cls") && pp["cls"].is_array() && !pp["cls"].empty() && pp["cls"][0].is_string())
        cls = pp["cls"][0].get<std::string>();
      if (pp.contains("sep") && pp["sep"].is_array() && !pp["sep"].empty() && pp["sep"][0].is_string())
        sep = pp["sep"][0].get<std::string>();
      s.add_cls_sep = true;
    } else if (pt == "TemplateProcessing" && pp.contains("single") && pp["single"].is_array()) {
      const Json& single = pp["single"];
      auto special_id = [](const Json& e) -> std::string {
        return e.is_object() && e.contains("SpecialToken") && e["SpecialToken"].is_object()
                   ? str_or(e["SpecialToken"], "id", "")
                   : std::string();
      };
      if (single.size() != 3 || special_id(single[0]).empty() || special_id(single[2]).empty())
        return unimplemented(ctx("only a [CLS] $A [SEP] TemplateProcessing is supported with WordPiece"));
      cls = special_id(single[0]);
      sep = special_id(single[2]);
      s.add_cls_sep = true;
    } else {
      return unimplemented(ctx(fmt::format("post-processor '{}' is not supported with WordPiece", pt)));
    }
  }
  if (!tokenizer_config_json.empty()) {
    Json cfg = Json::parse(tokenizer_config_json.begin(), tokenizer_config_json.end(), nullptr, false);
    if (cfg.is_object()) {
      cls = str_or(cfg, "cls_token", cls);
      sep = str_or(cfg, "sep_token", sep);
      if (std::string mask = str_or(cfg, "mask_token", ""); !mask.empty()) s.mask = find(mask);
      if (std::string pad = str_or(cfg, "pad_token", ""); !pad.empty()) s.pad = find(pad);
    }
  }
  s.cls = find(cls);
  s.sep = find(sep);
  if (s.pad < 0) s.pad = find("[PAD]");
  if (s.mask < 0) s.mask = find("[MASK]");
  auto t = create(std::move(s));
  if (!t.ok()) return t.status().with_context(name);
  return t;
}

Result<std::unique_ptr<WordPieceTokenizer>> WordPieceTokenizer::load(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string text, read_file(path));
  std::string config;
  auto cfg = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(cfg, ec)) {
    TS_ASSIGN_OR_RETURN(config, read_file(cfg.string()));
  }
  return from_json(text, config, path);
}

}  // namespace tessera::model
