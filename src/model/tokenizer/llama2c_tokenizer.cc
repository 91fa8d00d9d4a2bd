#include "model/tokenizer/llama2c_tokenizer.h"

#include <cstring>

#include <fmt/core.h>

#include "base/mapped_file.h"
#include "model/tokenizer/vocab.h"

namespace tessera::model {
namespace {

// Parses "<0xNN>" (upper- or lower-case hex, as sscanf's %02hhX accepts). Returns -1 otherwise.
int parse_byte_piece(std::string_view p) {
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int hi = hex(p[3]);
  int lo = hex(p[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

// run.c builds its strings with sprintf("%s"), so a piece is only meaningful up to its first NUL byte.
std::string_view c_string_view(const std::string& s) {
  size_t n = s.find('\0');
  return n == std::string::npos ? std::string_view(s) : std::string_view(s).substr(0, n);
}

}  // namespace

Llama2cTokenizer::Llama2cTokenizer(std::vector<std::string> pieces, std::vector<float> scores)
    : pieces_(std::move(pieces)), scores_(std::move(scores)) {
  index_.reserve(pieces_.size() * 2);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    index_.emplace(std::string(c_string_view(pieces_[i])), static_cast<TokenId>(i));
    max_token_length_ = std::max<uint32_t>(max_token_length_, static_cast<uint32_t>(pieces_[i].size()));
  }
  TokenId b0 = lookup("<0x00>");
  if (b0 >= 0 && static_cast<size_t>(b0) + 256 <= pieces_.size()) {
    bool contiguous = true;
    for (int b = 0; b < 256 && contiguous; ++b) contiguous = parse_byte_piece(pieces_[b0 + b]) == b;
    if (contiguous) byte_base_ = b0;
  }
}

Result<std::unique_ptr<Llama2cTokenizer>> Llama2cTokenizer::from_pieces(std::vector<std::string> pieces,
                                                                        std::vector<float> scores) {
  if (pieces.size() != scores.size()) return invalid_argument("tokenizer: pieces and scores differ in count");
  if (pieces.size() < 3) return invalid_argument("tokenizer: a llama2.c vocabulary needs at least <unk>, BOS and EOS");
  return std::unique_ptr<Llama2cTokenizer>(new Llama2cTokenizer(std::move(pieces), std::move(scores)));
}

Result<std::unique_ptr<Llama2cTokenizer>> Llama2cTokenizer::load(const std::string& path) {
  TS_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  return parse(file->bytes(), path);
}

Result<std::unique_ptr<Llama2cTokenizer>> Llama2cTokenizer::parse(std::span<const uint8_t> bytes,
                                                                  const std::string& name) {
  auto bad = [&](size_t offset, const std::string& what) {
    return invalid_argument(fmt::format("{} is not a llama2.c tokenizer: {} at byte {}", name, what, offset));
  };
  if (bytes.size() < 4) return bad(0, "file too short for the header");
  int32_t max_len;
  std::memcpy(&max_len, bytes.data(), 4);
  if (max_len <= 0 || max_len > 4096) return bad(0, fmt::format("implausible max_token_length {}", max_len));
  std::vector<std::string> pieces;
  std::vector<float> scores;
  size_t off = 4;
  while (off < bytes.size()) {
    if (bytes.size() - off < 8) return bad(off, "truncated token record");
    float score;
    int32_t len;
    std::memcpy(&score, bytes.data() + off, 4);
    std::memcpy(&len, bytes.data() + off + 4, 4);
    if (len < 0 || len > max_len) {
      return bad(off + 4, fmt::format("token {} has length {} (max_token_length is {})", pieces.size(), len, max_len));
    }
    off += 8;
    if (bytes.size() - off < static_cast<size_t>(len)) return bad(off, "truncated token bytes");
    pieces.emplace_back(reinterpret_cast<const char*>(bytes.data() + off), static_cast<size_t>(len));
    scores.push_back(score);
    off += static_cast<size_t>(len);
    if (pieces.size() > (1u << 24)) return bad(off, "more than 16M tokens");
  }
  if (pieces.size() < 3) return bad(off, fmt::format("only {} tokens", pieces.size()));
  return std::unique_ptr<Llama2cTokenizer>(new Llama2cTokenizer(std::move(pieces), std::move(scores)));
}

TokenId Llama2cTokenizer::lookup(std::string_view piece) const {
  auto it = index_.find(std::string(piece));
  return it == index_.end() ? -1 : it->second;
}

std::vector<TokenId> Llama2cTokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<TokenId> tokens;
  tokens.reserve(text.size() + 2);
  if (add_bos) tokens.push_back(bos_id());
  // run.c reads the prompt as a C string: it ends at the first NUL byte.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) text = text.substr(0, nul);
  if (!text.empty()) {
    TokenId space = lookup(" ");
    if (space >= 0) tokens.push_back(space);
  }
  // One token per UTF-8 code point (at most 4 bytes; continuation bytes beyond that start a new unit as
  // run.c does), or its bytes as byte-fallback tokens.
  std::string unit;
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) unit.clear();
    unit.push_back(static_cast<char>(c));
    bool next_is_continuation = i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80;
    if (next_is_continuation && unit.size() < 4) continue;
    TokenId id = lookup(unit);
    if (id >= 0) {
      tokens.push_back(id);
    } else {
      for (unsigned char b : unit) tokens.push_back(byte_base_ >= 0 ? byte_base_ + b : static_cast<TokenId>(b) + 3);
    }
    unit.clear();
  }
  // Greedy merges: the best-scoring pair each round; strict '>' keeps the leftmost on ties.
  std::string joined;
  for (;;) {
    float best_score = -1e10f;
    TokenId best_id = -1;
    size_t best_idx = 0;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      joined.assign(c_string_view(pieces_[static_cast<size_t>(tokens[i])]));
      joined.append(c_string_view(pieces_[static_cast<size_t>(tokens[i + 1])]));
      auto it = index_.find(joined);
      if (it != index_.end() && scores_[static_cast<size_t>(it->second)] > best_score) {
        best_score = scores_[static_cast<size_t>(it->second)];
        best_id = it->second;
        best_idx = i;
      }
    }
    if (best_id < 0) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_idx) + 1);
  }
  return tokens;
}

std::string Llama2cTokenizer::decode_piece(TokenId prev, TokenId token) const {
  if (token < 0 || static_cast<size_t>(token) >= pieces_.size()) return {};
  if (is_special(token)) return {};  // BOS/EOS are not text (the interface's rule; special_text() spells them)
  std::string_view p = pieces_[static_cast<size_t>(token)];
  if (prev == bos_id() && !p.empty() && p[0] == ' ') p.remove_prefix(1);
  if (int b = parse_byte_piece(p); b >= 0) return std::string(1, static_cast<char>(b));
  return std::string(p);
}

std::vector<uint8_t> Llama2cTokenizer::serialize() const {
  std::vector<uint8_t> out;
  auto put = [&out](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  int32_t max_len = static_cast<int32_t>(std::max<uint32_t>(max_token_length_, 1));
  put(&max_len, 4);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    auto len = static_cast<int32_t>(pieces_[i].size());
    put(&scores_[i], 4);
    put(&len, 4);
    put(pieces_[i].data(), pieces_[i].size());
  }
  return out;
}

}  // namespace tessera::model

namespace tessera::model {

Result<Vocab> Llama2cTokenizer::to_vocab() const {
  // llama2.c's export wrote SentencePiece pieces with U+2581 turned into spaces and BOS/EOS wrapped in
  // newlines; undo both so the vocabulary reads as the SentencePiece model it came from.
  Vocab v;
  v.kind = VocabKind::kSentencePiece;
  v.bos = bos_id();
  v.eos = eos_id();
  v.unk = 0;
  v.add_bos = true;
  v.add_space_prefix = true;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    std::string p(c_string_view(pieces_[i]));
    int32_t type = kTokenNormal;
    if (i == 0) {
      type = kTokenUnknown;
    } else if (static_cast<TokenId>(i) == bos_id() || static_cast<TokenId>(i) == eos_id()) {
      type = kTokenControl;
      if (p == "\n<s>\n") p = "<s>";
      if (p == "\n</s>\n") p = "</s>";
    } else if (parse_byte_piece(p) >= 0) {
      type = kTokenByte;
    } else if (p.size() > 4 && p.starts_with("<|") && p.ends_with("|>") && p.find(' ') == std::string::npos) {
      // Chat markers (<|end|>, <|user|>): llama2.c files cannot mark them, every SentencePiece model using
      // them has them as control tokens.
      type = kTokenControl;
    } else {
      std::string q;
      for (char c : p) q += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
      p = std::move(q);
    }
    v.tokens.push_back(std::move(p));
    v.scores.push_back(scores_[i]);
    v.types.push_back(type);
  }
  return v;
}

}  // namespace tessera::model
