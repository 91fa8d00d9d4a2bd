// BpeTokenizer from Hugging Face's tokenizer.json (+ tokenizer_config.json) and from OpenAI's GPT-2 files.
#include <filesystem>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "model/tokenizer/bpe_tokenizer.h"

namespace tessera::model {
namespace {

using Json = nlohmann::json;

Result<Json> parse_json(std::string_view text, const std::string& name) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(fmt::format("{} is not valid JSON", name));
  return j;
}

std::string str_or(const Json& j, const char* key, std::string fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool bool_or(const Json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

Status add_normalizer(const Json& n, BpeSpec& s) {
  if (n.is_null()) return ok_status();
  if (!n.is_object()) return invalid_argument("tokenizer.json: a normalizer is not an object");
  std::string type = str_or(n, "type", "");
  using N = BpeSpec::Normalizer;
  if (type == "Sequence") {
    auto it = n.find("normalizers");
    if (it == n.end() || !it->is_array()) return invalid_argument("tokenizer.json: Sequence normalizer without a list");
    for (const Json& x : *it) TS_RETURN_IF_ERROR(add_normalizer(x, s));
  } else if (type == "NFC") {
    s.normalizers.push_back({N::kNfc, "", ""});
  } else if (type == "NFKC") {
    s.normalizers.push_back({N::kNfkc, "", ""});
  } else if (type == "NFD") {
    s.normalizers.push_back({N::kNfd, "", ""});
  } else if (type == "NFKD") {
    s.normalizers.push_back({N::kNfkd, "", ""});
  } else if (type == "Lowercase") {
    s.normalizers.push_back({N::kLowercase, "", ""});
  } else if (type == "Prepend") {
    s.normalizers.push_back({N::kPrepend, str_or(n, "prepend", ""), ""});
    s.strip_first_space = true;
  } else if (type == "Replace") {
    auto p = n.find("pattern");
    if (p == n.end() || !p->is_object() || !p->contains("String") || !(*p)["String"].is_string())
      return unimplemented("tokenizer.json: only string patterns are supported in a Replace normalizer");
    s.normalizers.push_back({N::kReplace, (*p)["String"].get<std::string>(), str_or(n, "content", "")});
  } else {
    return unimplemented(fmt::format("tokenizer.json: normalizer '{}' is not supported", type));
  }
  return ok_status();
}

Status add_pre_tokenizer(const Json& p, BpeSpec& s) {
  if (p.is_null()) return ok_status();
  if (!p.is_object()) return invalid_argument("tokenizer.json: a pre-tokenizer is not an object");
  std::string type = str_or(p, "type", "");
  using P = BpeSpec::PreTokenizer;
  if (type == "Sequence") {
    auto it = p.find("pretokenizers");
    if (it == p.end() || !it->is_array())
      return invalid_argument("tokenizer.json: Sequence pre-tokenizer without a list");
    for (const Json& x : *it) TS_RETURN_IF_ERROR(add_pre_tokenizer(x, s));
  } else if (type == "ByteLevel") {
    s.byte_level = true;
    s.pre_tokenizers.push_back(
        {P::kByteLevel, "", bool_or(p, "add_prefix_space", false), bool_or(p, "use_regex", true)});
  } else if (type == "Split") {
    auto pat = p.find("pattern");
    if (pat == p.end() || !pat->is_object()) return invalid_argument("tokenizer.json: Split without a pattern");
    if (str_or(p, "behavior", "") != "Isolated" || bool_or(p, "invert", false))
      return unimplemented("tokenizer.json: only Split with behavior Isolated and invert false is supported");
    if (pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      s.pre_tokenizers.push_back({P::kSplitRegex, (*pat)["Regex"].get<std::string>(), false, false});
    } else {
      return unimplemented("tokenizer.json: only regex patterns are supported in a Split pre-tokenizer");
    }
  } else if (type == "Metaspace") {
    std::string scheme = str_or(p, "prepend_scheme", bool_or(p, "add_prefix_space", true) ? "always" : "never");
    s.pre_tokenizers.push_back({P::kMetaspace, "", scheme != "never", bool_or(p, "split", true)});
    s.strip_first_space = scheme != "never";
  } else {
    return unimplemented(fmt::format("tokenizer.json: pre-tokenizer '{}' is not supported", type));
  }
  return ok_status();
}

// A special token in tokenizer_config.json: a string or {"content": ...}.
std::string config_token(const Json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return str_or(*it, "content", "");
  return {};
}

std::string known_pre_name(const std::string& pattern) {
  if (pattern.find("\\p{N}{1,3}") != std::string::npos) return "llama3";
  if (pattern.find("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|") != std::string::npos) return "qwen2";
  return "default";
}

}  // namespace

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::from_json(std::string_view tokenizer_json,
                                                              std::string_view tokenizer_config_json,
                                                              const std::string& name) {
  TS_ASSIGN_OR_RETURN(Json j, parse_json(tokenizer_json, name));
  if (!j.is_object()) return invalid_argument(fmt::format("{}: the top level is not an object", name));
  auto model = j.find("model");
  if (model == j.end() || !model->is_object()) return invalid_argument(fmt::format("{}: no \"model\" object", name));
  std::string type = str_or(*model, "type", "BPE");
  if (type != "BPE") return unimplemented(fmt::format("{}: model type '{}' is not supported (BPE is)", name, type));
  BpeSpec s;
  auto ctx = [&](Status st) { return st.with_context(name); };
  if (Status st = add_normalizer(j.value("normalizer", Json()), s); !st.ok()) return ctx(st);
  if (Status st = add_pre_tokenizer(j.value("pre_tokenizer", Json()), s); !st.ok()) return ctx(st);
  for (const auto& p : s.pre_tokenizers)
    if (p.kind == BpeSpec::PreTokenizer::kSplitRegex) s.pre_name = known_pre_name(p.pattern);
  if (j.contains("decoder") && j["decoder"].is_object() && str_or(j["decoder"], "type", "") == "ByteLevel")
    s.byte_level = true;
  auto vocab = model->find("vocab");
  if (vocab == model->end() || !vocab->is_object())
    return invalid_argument(fmt::format("{}: model has no vocab", name));
  auto put = [&](const std::string& tok, int64_t id) -> Status {
    if (id < 0 || id >= (1 << 24)) return invalid_argument(fmt::format("{}: token id {} is out of range", name, id));
    if (static_cast<size_t>(id) >= s.tokens.size()) s.tokens.resize(static_cast<size_t>(id) + 1);
    s.tokens[static_cast<size_t>(id)] = tok;
    return ok_status();
  };
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer())
      return invalid_argument(fmt::format("{}: vocab id of '{}' is not an integer", name, it.key()));
    TS_RETURN_IF_ERROR(put(it.key(), it.value().get<int64_t>()));
  }
  if (auto m = model->find("merges"); m != model->end() && m->is_array()) {
    s.merges.reserve(m->size());
    for (const Json& x : *m) {
      if (x.is_string()) {
        const std::string& t = x.get_ref<const std::string&>();
        size_t sp = t.find(' ', 1);
        if (sp == std::string::npos) return invalid_argument(fmt::format("{}: merge '{}' has no space", name, t));
        s.merges.emplace_back(t.substr(0, sp), t.substr(sp + 1));
      } else if (x.is_array() && x.size() == 2 && x[0].is_string() && x[1].is_string()) {
        s.merges.emplace_back(x[0].get<std::string>(), x[1].get<std::string>());
      } else {
        return invalid_argument(fmt::format("{}: a merge is neither \"a b\" nor [\"a\", \"b\"]", name));
      }
    }
  }
  s.byte_fallback = bool_or(*model, "byte_fallback", false);
  s.fuse_unk = bool_or(*model, "fuse_unk", false);
  s.ignore_merges = bool_or(*model, "ignore_merges", false);
  if (auto added = j.find("added_tokens"); added != j.end() && added->is_array()) {
    for (const Json& a : *added) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        return invalid_argument(fmt::format("{}: an added token lacks id or content", name));
      BpeSpec::AddedToken t{a["id"].get<TokenId>(),       a["content"].get<std::string>(),
                            bool_or(a, "special", false), bool_or(a, "lstrip", false),
                            bool_or(a, "rstrip", false),  bool_or(a, "single_word", false)};
      TS_RETURN_IF_ERROR(put(t.content, t.id));
      s.added.push_back(std::move(t));
    }
  }
  std::string unk = str_or(*model, "unk_token", "");
  for (size_t i = 0; i < s.tokens.size() && !unk.empty(); ++i)
    if (s.tokens[i] == unk) s.unk = static_cast<TokenId>(i);
  // BOS: the post-processor's leading special token; tokenizer_config.json overrides.
  std::string bos, eos;
  if (auto pp = j.find("post_processor"); pp != j.end() && pp->is_object() && pp->contains("single") &&
                                          (*pp)["single"].is_array() && !(*pp)["single"].empty()) {
    const Json& first = (*pp)["single"][0];
    if (first.contains("SpecialToken") && first["SpecialToken"].is_object()) {
      bos = str_or(first["SpecialToken"], "id", "");
      s.add_bos = !bos.empty();
    }
  }
  if (!tokenizer_config_json.empty()) {
    TS_ASSIGN_OR_RETURN(Json cfg, parse_json(tokenizer_config_json, name + " (tokenizer_config.json)"));
    if (cfg.is_object()) {
      if (cfg.contains("bos_token")) bos = config_token(cfg, "bos_token");
      eos = config_token(cfg, "eos_token");
      std::string pad = config_token(cfg, "pad_token");
      s.add_bos = bool_or(cfg, "add_bos_token", s.add_bos) && !bos.empty();
      for (size_t i = 0; i < s.tokens.size(); ++i)
        if (!pad.empty() && s.tokens[i] == pad) s.pad = static_cast<TokenId>(i);
    }
  }
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    if (!bos.empty() && s.tokens[i] == bos && s.bos < 0) s.bos = static_cast<TokenId>(i);
    if (!eos.empty() && s.tokens[i] == eos && s.eos < 0) s.eos = static_cast<TokenId>(i);
  }
  auto t = create(std::move(s));
  if (!t.ok()) return ctx(t.status());
  return t;
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::load(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string text, read_file(path));
  std::string config;
  auto cfg_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(cfg_path, ec)) {
    TS_ASSIGN_OR_RETURN(config, read_file(cfg_path.string()));
  }
  return from_json(text, config, path);
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::load_gpt2(const std::string& encoder_json_path,
                                                              const std::string& vocab_bpe_path) {
  TS_ASSIGN_OR_RETURN(std::string enc_text, read_file(encoder_json_path));
  TS_ASSIGN_OR_RETURN(std::string bpe_text, read_file(vocab_bpe_path));
  TS_ASSIGN_OR_RETURN(Json enc, parse_json(enc_text, encoder_json_path));
  if (!enc.is_object()) return invalid_argument(fmt::format("{}: not a token -> id object", encoder_json_path));
  BpeSpec s;
  s.byte_level = true;
  s.pre_name = "gpt2";
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    if (!it.value().is_number_integer())
      return invalid_argument(fmt::format("{}: id is not an integer", encoder_json_path));
    int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= (1 << 24))
      return invalid_argument(fmt::format("{}: id {} out of range", encoder_json_path, id));
    if (static_cast<size_t>(id) >= s.tokens.size()) s.tokens.resize(static_cast<size_t>(id) + 1);
    s.tokens[static_cast<size_t>(id)] = it.key();
  }
  size_t pos = 0;
  bool first = true;
  while (pos < bpe_text.size()) {
    size_t eol = bpe_text.find('\n', pos);
    if (eol == std::string::npos) eol = bpe_text.size();
    std::string line = bpe_text.substr(pos, eol - pos);
    pos = eol + 1;
    if (first && line.rfind("#version", 0) == 0) {
      first = false;
      continue;
    }
    first = false;
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    if (sp == std::string::npos)
      return invalid_argument(fmt::format("{}: merge line '{}' has no space", vocab_bpe_path, line));
    s.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  // GPT-2's encoder applies its regex and maps bytes; <|endoftext|> is an ordinary entry, not matched in text.
  s.pre_tokenizers.push_back({BpeSpec::PreTokenizer::kByteLevel, "", false, true});
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    if (s.tokens[i] == "<|endoftext|>") s.bos = s.eos = static_cast<TokenId>(i);
  }
  return create(std::move(s));
}

}  // namespace tessera::model
