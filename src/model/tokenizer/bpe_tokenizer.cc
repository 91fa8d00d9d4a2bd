#include "model/tokenizer/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <climits>
#include <queue>

#include <fmt/format.h>

#include "model/tokenizer/gguf_pre_tokenizers.h"
#include "model/tokenizer/unicode.h"

namespace tessera::model {
namespace {

constexpr std::string_view kMeta = "\xE2\x96\x81";  // U+2581

// The regex of a ByteLevel pre-tokenizer with use_regex (GPT-2's).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct ByteMap {
  std::string to_unicode[256];
  int from_cp[512];
  ByteMap() {
    std::fill(std::begin(from_cp), std::end(from_cp), -1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(next++);
      utf8_append(to_unicode[b], cp);
      from_cp[cp] = b;
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

uint64_t pair_key(TokenId a, TokenId b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

std::string byte_piece(uint8_t b) { return fmt::format("<0x{:02X}>", b); }

int parse_byte_piece(std::string_view p) {
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int hi = hex(p[3]), lo = hex(p[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) { return byte_map().to_unicode[b]; }

int unicode_to_byte(uint32_t cp) { return cp < 512 ? byte_map().from_cp[cp] : -1; }

struct BpeTokenizer::Compiled {
  std::vector<pcre2_code*> regexes;  // one per kSplitRegex / regex-using kByteLevel step, in order
  AddedTokenMatcher added;
  ~Compiled() {
    for (pcre2_code* r : regexes) pcre2_code_free(r);
  }
};

BpeTokenizer::BpeTokenizer(BpeSpec spec) : spec_(std::move(spec)) {}
BpeTokenizer::~BpeTokenizer() = default;

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(BpeSpec spec) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer(std::move(spec)));
  TS_RETURN_IF_ERROR(t->compile());
  return t;
}

TokenId BpeTokenizer::lookup(std::string_view token) const {
  auto it = index_.find(std::string(token));
  return it == index_.end() ? -1 : it->second;
}

Status BpeTokenizer::compile() {
  if (spec_.tokens.empty()) return invalid_argument("BPE tokenizer has an empty vocabulary");
  index_.reserve(spec_.tokens.size() * 2);
  for (size_t i = 0; i < spec_.tokens.size(); ++i) {
    if (!spec_.tokens[i].empty()) index_.emplace(spec_.tokens[i], static_cast<TokenId>(i));
  }
  merge_.reserve(spec_.merges.size() * 2);
  for (size_t r = 0; r < spec_.merges.size(); ++r) {
    const auto& [a, b] = spec_.merges[r];
    TokenId ia = lookup(a), ib = lookup(b), im = lookup(a + b);
    // Merges whose parts or result are outside the vocabulary can never apply (HF rejects them; we skip).
    if (ia < 0 || ib < 0 || im < 0) continue;
    merge_.emplace(pair_key(ia, ib), std::pair<int32_t, TokenId>(static_cast<int32_t>(r), im));
  }
  for (int b = 0; b < 256; ++b) {
    byte_token_[b] = spec_.byte_level ? lookup(byte_to_unicode(static_cast<uint8_t>(b)))
                                      : lookup(byte_piece(static_cast<uint8_t>(b)));
  }
  compiled_ = std::make_unique<Compiled>();
  auto add_regex = [&](const std::string& pattern) -> Status {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
    if (re == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return invalid_argument(fmt::format("pre-tokenizer regex does not compile at offset {}: {}", off,
                                          reinterpret_cast<const char*>(msg)));
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is unavailable
    compiled_->regexes.push_back(re);
    return ok_status();
  };
  for (const BpeSpec::PreTokenizer& p : spec_.pre_tokenizers) {
    if (p.kind == BpeSpec::PreTokenizer::kSplitRegex) TS_RETURN_IF_ERROR(add_regex(p.pattern));
    if (p.kind == BpeSpec::PreTokenizer::kByteLevel && p.use_regex) TS_RETURN_IF_ERROR(add_regex(kGpt2Pattern));
  }
  for (const BpeSpec::AddedToken& a : spec_.added) {
    if (a.id < 0 || a.id >= static_cast<TokenId>(spec_.tokens.size()))
      return invalid_argument(fmt::format("added token '{}' has id {} outside the vocabulary", a.content, a.id));
  }
  compiled_->added = AddedTokenMatcher(spec_.added);
  for (auto [what, id] : {std::pair{"bos", spec_.bos}, {"eos", spec_.eos}, {"unk", spec_.unk}}) {
    if (id < -1 || id >= static_cast<TokenId>(spec_.tokens.size()))
      return invalid_argument(fmt::format("{} id {} is outside the vocabulary", what, id));
  }
  return ok_status();
}

// Applies merges to `syms` in place: lowest rank first, leftmost among equal ranks.
static void apply_merges(std::vector<TokenId>& syms,
                         const std::unordered_map<uint64_t, std::pair<int32_t, TokenId>>& merges) {
  if (syms.size() < 2) return;
  if (syms.size() <= 24) {
    // Short words (almost all of them): rescan for the lowest-rank pair, the leftmost among equals; the
    // same order the heap below produces, without its allocations.
    for (;;) {
      int32_t best_rank = INT32_MAX;
      size_t best = 0;
      TokenId merged = -1;
      for (size_t i = 0; i + 1 < syms.size(); ++i) {
        auto it = merges.find(pair_key(syms[i], syms[i + 1]));
        if (it != merges.end() && it->second.first < best_rank) {
          best_rank = it->second.first;
          best = i;
          merged = it->second.second;
        }
      }
      if (merged < 0) return;
      syms[best] = merged;
      syms.erase(syms.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
  }
  struct Node {
    TokenId id;
    int prev, next;
  };
  struct Cand {
    int32_t rank;
    int pos;
    TokenId left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const int n = static_cast<int>(syms.size());
  std::vector<Node> nodes(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    nodes[static_cast<size_t>(i)] = {syms[static_cast<size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
  auto push = [&](int pos) {
    int nx = nodes[static_cast<size_t>(pos)].next;
    if (nx < 0) return;
    TokenId l = nodes[static_cast<size_t>(pos)].id, r = nodes[static_cast<size_t>(nx)].id;
    auto it = merges.find(pair_key(l, r));
    if (it != merges.end()) heap.push({it->second.first, pos, l, r});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    Node& left = nodes[static_cast<size_t>(c.pos)];
    if (left.id != c.left || left.next < 0) continue;
    Node& right = nodes[static_cast<size_t>(left.next)];
    if (right.id != c.right) continue;
    left.id = merges.at(pair_key(c.left, c.right)).second;
    right.id = -2;  // dead
    left.next = right.next;
    if (left.next >= 0) nodes[static_cast<size_t>(left.next)].prev = c.pos;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  syms.clear();
  for (int i = 0; i >= 0; i = nodes[static_cast<size_t>(i)].next) syms.push_back(nodes[static_cast<size_t>(i)].id);
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  std::vector<TokenId> syms;
  if (spec_.byte_level) {
    if (spec_.ignore_merges) {
      std::string mapped;
      for (char c : word) mapped += byte_to_unicode(static_cast<uint8_t>(c));
      if (TokenId id = lookup(mapped); id >= 0) {
        out.push_back(id);
        return;
      }
    }
    syms.reserve(word.size());
    for (char c : word) {
      TokenId id = byte_token_[static_cast<uint8_t>(c)];
      if (id >= 0) {
        syms.push_back(id);
      } else if (spec_.unk >= 0) {
        syms.push_back(spec_.unk);
      }
    }
  } else {
    const bool newlines = spec_.whole_newline_runs && word.find_first_not_of('\n') == std::string_view::npos;
    if (spec_.ignore_merges || newlines) {
      if (TokenId id = lookup(word); id >= 0) {
        out.push_back(id);
        return;
      }
    }
    for (size_t i = 0; i < word.size();) {
      size_t n = std::min(utf8_seq_len(static_cast<unsigned char>(word[i])), word.size() - i);
      TokenId id = lookup(word.substr(i, n));
      if (id >= 0) {
        syms.push_back(id);
      } else {
        bool all_bytes = spec_.byte_fallback;
        for (size_t k = 0; k < n && all_bytes; ++k) all_bytes = byte_token_[static_cast<uint8_t>(word[i + k])] >= 0;
        if (all_bytes) {
          for (size_t k = 0; k < n; ++k) syms.push_back(byte_token_[static_cast<uint8_t>(word[i + k])]);
        } else if (spec_.unk >= 0 && !(spec_.fuse_unk && !syms.empty() && syms.back() == spec_.unk)) {
          syms.push_back(spec_.unk);
        }
      }
      i += n;
    }
  }
  apply_merges(syms, merge_);
  out.insert(out.end(), syms.begin(), syms.end());
}

void BpeTokenizer::encode_segment(std::string_view text, std::vector<TokenId>& out) const {
  std::string norm(text);
  for (const BpeSpec::Normalizer& n : spec_.normalizers) {
    switch (n.kind) {
      case BpeSpec::Normalizer::kNfc:
        norm = unicode_normalize(norm, NormalForm::kNfc);
        break;
      case BpeSpec::Normalizer::kNfkc:
        norm = unicode_normalize(norm, NormalForm::kNfkc);
        break;
      case BpeSpec::Normalizer::kNfd:
        norm = unicode_normalize(norm, NormalForm::kNfd);
        break;
      case BpeSpec::Normalizer::kNfkd:
        norm = unicode_normalize(norm, NormalForm::kNfkd);
        break;
      case BpeSpec::Normalizer::kLowercase:
        norm = unicode_lowercase(norm);
        break;
      case BpeSpec::Normalizer::kPrepend:
        if (!norm.empty()) norm = n.a + norm;
        break;
      case BpeSpec::Normalizer::kReplace: {
        if (n.a.empty()) break;
        std::string r;
        for (size_t i = 0; i < norm.size();) {
          if (norm.compare(i, n.a.size(), n.a) == 0) {
            r += n.b;
            i += n.a.size();
          } else {
            r += norm[i++];
          }
        }
        norm = std::move(r);
        break;
      }
    }
  }
  // Pre-tokenization: each step splits every current piece further (pieces are views into `store`).
  std::vector<std::string> pieces = {std::move(norm)};
  size_t regex_index = 0;
  for (const BpeSpec::PreTokenizer& p : spec_.pre_tokenizers) {
    std::vector<std::string> next;
    const bool regex_step =
        p.kind == BpeSpec::PreTokenizer::kSplitRegex || (p.kind == BpeSpec::PreTokenizer::kByteLevel && p.use_regex);
    pcre2_code* re = regex_step ? compiled_->regexes[regex_index++] : nullptr;
    pcre2_match_data* md = re ? pcre2_match_data_create_from_pattern(re, nullptr) : nullptr;
    for (size_t pi = 0; pi < pieces.size(); ++pi) {
      std::string s = std::move(pieces[pi]);
      if (p.kind == BpeSpec::PreTokenizer::kByteLevel && p.add_prefix_space && !s.empty() && s[0] != ' ')
        s.insert(s.begin(), ' ');
      if (p.kind == BpeSpec::PreTokenizer::kMetaspace) {
        std::string r;
        if (p.add_prefix_space && pi == 0 && s.compare(0, kMeta.size(), kMeta) != 0 && !s.empty()) r += kMeta;
        for (char c : s) r += c == ' ' ? std::string(kMeta) : std::string(1, c);
        if (!p.use_regex) {
          next.push_back(std::move(r));
          continue;
        }
        // Split before every U+2581, which stays with the word that follows.
        size_t start = 0;
        for (size_t i = kMeta.size(); i + kMeta.size() <= r.size(); ++i) {
          if (r.compare(i, kMeta.size(), kMeta) == 0 && i > start) {
            next.push_back(r.substr(start, i - start));
            start = i;
          }
        }
        if (start < r.size()) next.push_back(r.substr(start));
        continue;
      }
      if (re == nullptr) {
        next.push_back(std::move(s));
        continue;
      }
      size_t pos = 0, last = 0;
      while (pos <= s.size()) {
        int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, 0, md, nullptr);
        if (rc < 0) break;
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms > last) next.push_back(s.substr(last, ms - last));  // Isolated: gaps are pieces too
        if (me > ms) next.push_back(s.substr(ms, me - ms));
        last = me;
        pos = me > ms ? me : ms + utf8_seq_len(static_cast<unsigned char>(ms < s.size() ? s[ms] : 0));
      }
      if (last < s.size()) next.push_back(s.substr(last));
    }
    if (md) pcre2_match_data_free(md);
    pieces = std::move(next);
  }
  for (const std::string& w : pieces) encode_word(w, out);
}

std::vector<TokenId> BpeTokenizer::tokenize(std::string_view text, const EncodeOptions& options) const {
  std::vector<TokenId> out;
  if (options.add_special && spec_.add_bos && spec_.bos >= 0) out.push_back(spec_.bos);
  for (const AddedTokenMatcher::Piece& p : compiled_->added.split(text, options.parse_special)) {
    if (p.id >= 0) {
      out.push_back(p.id);
    } else {
      encode_segment(p.text, out);
    }
  }
  if (options.add_special && spec_.add_eos && spec_.eos >= 0) out.push_back(spec_.eos);
  return out;
}

bool BpeTokenizer::is_special(TokenId token) const {
  if (token == spec_.bos || token == spec_.eos) return token >= 0;
  const AddedToken* a = compiled_->added.find(token);
  return a != nullptr && a->special && !a->visible;
}

std::string BpeTokenizer::special_text(TokenId token) const {
  return is_special(token) ? spec_.tokens[static_cast<size_t>(token)] : std::string();
}

std::string BpeTokenizer::decode_piece(TokenId prev, TokenId token) const {
  if (token < 0 || token >= vocab_size()) return {};
  // Special tokens are not text (vLLM's skip_special_tokens default, and what SentencePiece does with
  // control tokens): a generated <|im_end|> or <|eot_id|> never reaches the client as characters.
  // decode(tokens, skip_special = false) and special_text() still spell them.
  if (is_special(token)) return {};
  const std::string& t = spec_.tokens[static_cast<size_t>(token)];
  if (const AddedToken* a = compiled_->added.find(token)) return a->content;
  std::string out;
  if (spec_.byte_level) {
    for (size_t i = 0; i < t.size();) {
      size_t before = i;
      uint32_t cp = utf8_next(t, i);
      int b = unicode_to_byte(cp);
      if (b >= 0) {
        out += static_cast<char>(b);
      } else {
        out.append(t, before, i - before);
      }
    }
    return out;
  }
  if (int b = parse_byte_piece(t); b >= 0 && byte_token_[b] == token) return std::string(1, static_cast<char>(b));
  for (size_t i = 0; i < t.size();) {
    if (t.compare(i, kMeta.size(), kMeta) == 0) {
      out += ' ';
      i += kMeta.size();
    } else {
      out += t[i++];
    }
  }
  if (spec_.strip_first_space && (prev < 0 || prev == spec_.bos) && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

Result<Vocab> BpeTokenizer::to_vocab() const {
  Vocab v;
  const bool gemma4 = spec_.pre_name == "gemma4";
  v.kind = spec_.byte_level ? VocabKind::kByteLevelBpe : gemma4 ? VocabKind::kGemma4Bpe : VocabKind::kSentencePiece;
  v.bos = spec_.bos;
  v.eos = spec_.eos;
  v.unk = spec_.unk;
  v.pad = spec_.pad;
  v.add_bos = spec_.add_bos;
  v.add_eos = spec_.add_eos;
  v.add_space_prefix = spec_.strip_first_space;
  v.pre = spec_.pre_name;
  if (spec_.byte_level && v.pre == "default") {
    // No Split regex llama.cpp has a name for: only GPT-2's own (a ByteLevel step with its regex) has one.
    bool gpt2 = !spec_.pre_tokenizers.empty();
    for (const BpeSpec::PreTokenizer& p : spec_.pre_tokenizers)
      gpt2 = gpt2 && p.kind == BpeSpec::PreTokenizer::kByteLevel && p.use_regex && !p.add_prefix_space;
    if (!gpt2)
      return unimplemented("this tokenizer's pre-tokenizer has no GGUF name (tokenizer.ggml.pre); known: " +
                           fmt::format("{}", fmt::join(gguf_pre_tokenizer_names(), ", ")));
    v.pre = "gpt-2";
  }
  v.tokens = spec_.tokens;
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (v.tokens[i].empty()) v.tokens[i] = fmt::format("[UNUSED{}]", i);
  v.types.assign(v.tokens.size(), kTokenNormal);
  for (const BpeSpec::AddedToken& a : spec_.added) {
    v.types[static_cast<size_t>(a.id)] = a.special ? kTokenControl : kTokenUserDefined;
    if (a.visible) v.types[static_cast<size_t>(a.id)] = kTokenUserDefined;  // as the file had it
  }
  if (spec_.unk >= 0) v.types[static_cast<size_t>(spec_.unk)] = kTokenUnknown;
  if (spec_.byte_level || gemma4) {
    for (const auto& [a, b] : spec_.merges) v.merges.push_back(a + " " + b);
    if (gemma4)
      for (int b = 0; b < 256; ++b)
        if (byte_token_[b] >= 0) v.types[static_cast<size_t>(byte_token_[b])] = kTokenByte;
  } else {
    // SentencePiece ranks pieces by score; a piece made by merge r scores -r so that earlier merges win.
    // (Exact when every piece has one merge that makes it, as in vocabularies converted from SentencePiece.)
    v.scores.assign(v.tokens.size(), -1e9f);
    for (int b = 0; b < 256; ++b)
      if (byte_token_[b] >= 0) v.types[static_cast<size_t>(byte_token_[b])] = kTokenByte;
    for (size_t r = 0; r < spec_.merges.size(); ++r) {
      TokenId m = lookup(spec_.merges[r].first + spec_.merges[r].second);
      if (m >= 0 && v.scores[static_cast<size_t>(m)] == -1e9f)
        v.scores[static_cast<size_t>(m)] = -static_cast<float>(r);
    }
  }
  TS_RETURN_IF_ERROR(v.validate());
  return v;
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::from_vocab(const Vocab& v) {
  TS_RETURN_IF_ERROR(v.validate());
  if (v.kind != VocabKind::kByteLevelBpe && v.kind != VocabKind::kGemma4Bpe)
    return invalid_argument("BpeTokenizer::from_vocab needs a gpt2 or gemma4 vocabulary");
  BpeSpec s;
  s.byte_level = true;
  s.tokens = v.tokens;
  for (const std::string& m : v.merges) {
    size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) return invalid_argument(fmt::format("GGUF merge '{}' has no space", m));
    s.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  if (v.kind == VocabKind::kGemma4Bpe) {
    s.byte_level = false;
    s.byte_fallback = true;
    s.whole_newline_runs = true;
    s.normalizers.push_back({BpeSpec::Normalizer::kReplace, " ", std::string(kMeta)});
    s.pre_tokenizers.push_back({BpeSpec::PreTokenizer::kSplitRegex, "[^\\n]+|[\\n]+", false, false});
    s.pre_name = "gemma4";
  } else {
    TS_RETURN_IF_ERROR(set_gguf_pre_tokenizer(v, s));
  }
  s.added = v.added_tokens();
  s.bos = v.bos;
  s.eos = v.eos;
  s.unk = v.unk;
  s.pad = v.pad;
  s.add_bos = v.add_bos;
  s.add_eos = v.add_eos;
  return create(std::move(s));
}

Status BpeTokenizer::set_gguf_pre_tokenizer(const Vocab& v, BpeSpec& s) {
  TS_ASSIGN_OR_RETURN(GgufPreTokenizer pre, gguf_pre_tokenizer(v.pre.empty() ? "default" : v.pre));
  if (pre.nfc) s.normalizers.push_back({BpeSpec::Normalizer::kNfc, "", ""});
  s.ignore_merges = pre.ignore_merges;
  for (const std::string& re : pre.regexes)
    s.pre_tokenizers.push_back({BpeSpec::PreTokenizer::kSplitRegex, re, false, false});
  s.pre_tokenizers.push_back({BpeSpec::PreTokenizer::kByteLevel, "", false, false});
  s.pre_name = v.pre;
  return ok_status();
}

}  // namespace tessera::model
