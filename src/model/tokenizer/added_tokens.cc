#include "model/tokenizer/added_tokens.h"

#include <algorithm>
#include <cctype>

namespace tessera::model {
namespace {

bool is_word_byte(char c) {
  auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || std::isalnum(u) || c == '_';
}

bool is_space_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) {
  for (const AddedToken& t : tokens)
    if (!t.content.empty()) tokens_.push_back(t);
  for (uint32_t i = 0; i < tokens_.size(); ++i) first_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(i);
  for (auto& bucket : first_) {
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](uint32_t a, uint32_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
  }
}

const AddedToken* AddedTokenMatcher::find(TokenId id) const {
  for (const AddedToken& t : tokens_)
    if (t.id == id) return &t;
  return nullptr;
}

std::vector<AddedTokenMatcher::Piece> AddedTokenMatcher::split(std::string_view text, bool parse_special) const {
  std::vector<Piece> out;
  size_t seg_start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (uint32_t k : first_[static_cast<uint8_t>(text[i])]) {
      const AddedToken& a = tokens_[k];
      if (a.special && !parse_special) continue;
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      if (a.single_word) {
        bool left_ok = i == 0 || !is_word_byte(text[i - 1]);
        size_t e = i + a.content.size();
        bool right_ok = e >= text.size() || !is_word_byte(text[e]);
        if (!left_ok || !right_ok) continue;
      }
      hit = &a;
      break;
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t seg_end = i, after = i + hit->content.size();
    if (hit->lstrip)
      while (seg_end > seg_start && is_space_byte(text[seg_end - 1])) --seg_end;
    if (hit->rstrip)
      while (after < text.size() && is_space_byte(text[after])) ++after;
    if (seg_end > seg_start) out.push_back({text.substr(seg_start, seg_end - seg_start), -1});
    out.push_back({{}, hit->id});
    seg_start = i = after;
  }
  if (seg_start < text.size()) out.push_back({text.substr(seg_start), -1});
  return out;
}

}  // namespace tessera::model
