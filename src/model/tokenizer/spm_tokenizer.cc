#include "model/tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <queue>

#include <fmt/core.h>

namespace tessera::model {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

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

size_t utf8_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;  // a stray continuation or invalid lead byte stands alone (and falls back to its byte token)
}

}  // namespace

SpmTokenizer::SpmTokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  if (vocab_.scores.empty()) vocab_.scores.assign(vocab_.tokens.size(), 0.0f);
  if (vocab_.types.empty()) vocab_.types.assign(vocab_.tokens.size(), kTokenNormal);
  index_.reserve(vocab_.tokens.size() * 2);
  for (int b = 0; b < 256; ++b) byte_ids_[b] = -1;
  for (size_t i = 0; i < vocab_.tokens.size(); ++i) {
    const std::string& t = vocab_.tokens[i];
    if (vocab_.types[i] == kTokenByte) {
      if (int b = parse_byte_piece(t); b >= 0 && byte_ids_[b] < 0) byte_ids_[b] = static_cast<TokenId>(i);
    }
    // Every entry can be the result of a merge, control and byte tokens included (llama.cpp looks merges up
    // in the whole vocabulary); a later duplicate wins, as there.
    index_[t] = static_cast<TokenId>(i);
  }
  added_ = AddedTokenMatcher(vocab_.added_tokens());
}

Result<std::unique_ptr<SpmTokenizer>> SpmTokenizer::create(Vocab vocab) {
  TS_RETURN_IF_ERROR(vocab.validate());
  if (vocab.kind != VocabKind::kSentencePiece) return invalid_argument("SpmTokenizer needs a SentencePiece vocabulary");
  return std::unique_ptr<SpmTokenizer>(new SpmTokenizer(std::move(vocab)));
}

TokenId SpmTokenizer::lookup(std::string_view piece) const {
  auto it = index_.find(std::string(piece));
  return it == index_.end() ? -1 : it->second;
}

bool SpmTokenizer::is_special(TokenId token) const {
  if (token < 0 || token >= vocab_size()) return false;
  int32_t t = vocab_.types[static_cast<size_t>(token)];
  return t == kTokenControl || token == vocab_.bos || token == vocab_.eos;
}

std::string SpmTokenizer::special_text(TokenId token) const {
  return is_special(token) ? vocab_.tokens[static_cast<size_t>(token)] : std::string();
}

std::vector<TokenId> SpmTokenizer::tokenize(std::string_view text, const EncodeOptions& options) const {
  std::vector<TokenId> out;
  if (options.add_special && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  bool after_special = true;  // the text's start counts as following an added token
  for (const AddedTokenMatcher::Piece& p : added_.split(text, options.parse_special)) {
    if (p.id >= 0) {
      out.push_back(p.id);
      after_special = true;
      continue;
    }
    std::string norm;
    norm.reserve(p.text.size() * 2 + 3);
    if (vocab_.add_space_prefix && after_special) norm += kSpace;
    for (char c : p.text) {
      if (c == ' ') {
        norm += kSpace;
      } else {
        norm += c;
      }
    }
    encode_piece(norm, out);
    after_special = false;
  }
  if (options.add_special && vocab_.add_eos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  return out;
}

void SpmTokenizer::encode_piece(const std::string& norm, std::vector<TokenId>& out) const {
  // Symbols are byte ranges of `norm`, one UTF-8 character each to begin with.
  struct Sym {
    size_t start, len;
  };
  std::vector<Sym> syms;
  for (size_t i = 0; i < norm.size();) {
    size_t n = std::min(utf8_len(static_cast<unsigned char>(norm[i])), norm.size() - i);
    syms.push_back({i, n});
    i += n;
  }
  // Best-scoring pair first, the leftmost among equal scores (the order of a full rescan each round, as
  // llama2.c does, in O(n log n)). Entries go stale when a neighbour merges; they are checked when popped.
  const int n = static_cast<int>(syms.size());
  std::vector<int> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    float score;
    int left, right;
    size_t len;
    bool operator<(const Cand& o) const { return score != o.score ? score < o.score : left > o.left; }
  };
  std::priority_queue<Cand> heap;
  auto consider = [&](int l) {
    if (l < 0) return;
    int r = next[static_cast<size_t>(l)];
    if (r < 0) return;
    const Sym &a = syms[static_cast<size_t>(l)], &b = syms[static_cast<size_t>(r)];
    TokenId id = lookup(std::string_view(norm).substr(a.start, a.len + b.len));
    if (id >= 0) heap.push({vocab_.scores[static_cast<size_t>(id)], l, r, a.len + b.len});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    Sym& a = syms[static_cast<size_t>(c.left)];
    if (a.len == 0 || next[static_cast<size_t>(c.left)] != c.right) continue;
    Sym& b = syms[static_cast<size_t>(c.right)];
    if (b.len == 0 || a.len + b.len != c.len) continue;
    a.len += b.len;
    b.len = 0;
    int nr = next[static_cast<size_t>(c.right)];
    next[static_cast<size_t>(c.left)] = nr;
    if (nr >= 0) prev[static_cast<size_t>(nr)] = c.left;
    consider(prev[static_cast<size_t>(c.left)]);
    consider(c.left);
  }
  for (int i = 0; i >= 0 && i < n; i = next[static_cast<size_t>(i)]) {
    const Sym& s = syms[static_cast<size_t>(i)];
    std::string_view piece = std::string_view(norm).substr(s.start, s.len);
    if (TokenId id = lookup(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    // A character with no entry of its own: its bytes, or <unk> where the vocabulary has no byte tokens.
    for (char ch : piece) {
      TokenId b = byte_ids_[static_cast<unsigned char>(ch)];
      if (b >= 0) {
        out.push_back(b);
      } else if (vocab_.unk >= 0) {
        out.push_back(vocab_.unk);
      }
    }
  }
}

std::string SpmTokenizer::decode_piece(TokenId prev, TokenId token) const {
  if (token < 0 || token >= vocab_size()) return {};
  auto t = static_cast<size_t>(token);
  int32_t type = vocab_.types[t];
  if (type == kTokenControl || type == kTokenUnused) return {};
  const std::string& p = vocab_.tokens[t];
  if (type == kTokenByte) {
    int b = parse_byte_piece(p);
    return b >= 0 ? std::string(1, static_cast<char>(b)) : std::string();
  }
  std::string out;
  out.reserve(p.size());
  for (size_t i = 0; i < p.size();) {
    if (std::string_view(p).substr(i, 3) == kSpace) {
      out += ' ';
      i += 3;
    } else {
      out += p[i++];
    }
  }
  bool first = prev < 0 || prev == vocab_.bos;
  if (first && vocab_.add_space_prefix && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

}  // namespace tessera::model
