#include "grammar/matcher.h"

#include <algorithm>

namespace tessera::grammar {
namespace {

inline void set_bit(std::span<uint64_t> mask, uint32_t t) { mask[t / 64] |= uint64_t{1} << (t % 64); }
inline bool get_bit(std::span<const uint64_t> mask, uint32_t t) { return ((mask[t / 64] >> (t % 64)) & 1u) != 0; }

}  // namespace

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar, size_t compact_bytes)
    : grammar_(std::move(grammar)),
      compact_bytes_(compact_bytes),
      machine_(std::make_unique<StackMachine>(grammar_->grammar())) {
  state_ = machine_->start();
  walk_.resize(grammar_->vocab().max_token_bytes() + 2);
}

void Matcher::fill_mask(std::span<uint64_t> mask) {
  std::fill(mask.begin(), mask.end(), 0);
  if (ended_) return;
  const CompiledGrammar& cg = *grammar_;
  const TokenVocab& v = cg.vocab();
  // A copy: checking uncertain tokens adds states, which may move the machine's storage.
  const std::span<const uint32_t> live = machine_->tops(state_);
  tops_.assign(live.begin(), live.end());
  const std::vector<uint32_t>& tops = tops_;
  // Exception lists first: the first one is written directly, later ones through the scratch bitset.
  bool filled = false;
  for (uint32_t top : tops) {
    const PositionMask& pm = cg.mask_at(machine_->node(top).pos);
    if (pm.kind != PositionMask::Kind::kExcept) continue;
    std::span<uint64_t> dst = mask;
    if (filled) {
      scratch_.resize(mask.size());
      dst = scratch_;
    }
    std::fill(dst.begin(), dst.end(), ~uint64_t{0});
    for (uint32_t k = 0; k < pm.count; ++k) {
      const uint32_t t = cg.ids()[pm.offset + k];
      dst[t / 64] &= ~(uint64_t{1} << (t % 64));
    }
    if (filled) {
      for (size_t w = 0; w < mask.size(); ++w) mask[w] |= scratch_[w];
    }
    filled = true;
  }
  for (uint32_t top : tops) {
    const PositionMask& pm = cg.mask_at(machine_->node(top).pos);
    if (pm.kind == PositionMask::Kind::kList) {
      for (uint32_t k = 0; k < pm.count; ++k) set_bit(mask, cg.ids()[pm.offset + k]);
    } else if (pm.kind == PositionMask::Kind::kBits) {
      const uint64_t* b = cg.bits() + pm.offset;
      for (size_t w = 0; w < mask.size(); ++w) mask[w] |= b[w];
    }
  }
  const std::vector<uint64_t>& text = v.text_tokens();
  for (size_t w = 0; w < mask.size(); ++w) mask[w] &= text[w];
  for (uint32_t top : tops) {
    const PositionMask& pm = cg.mask_at(machine_->node(top).pos);
    if (pm.uncertain_count != 0) check_uncertain(top, pm, mask);
  }
  if (can_end()) {
    for (TokenId t : v.eog()) set_bit(mask, static_cast<uint32_t>(t));
  }
}

void Matcher::check_uncertain(uint32_t top, const PositionMask& pm, std::span<uint64_t> mask) {
  const CompiledGrammar& cg = *grammar_;
  const TokenVocab& v = cg.vocab();
  const std::vector<TokenId>& sorted = v.sorted();
  const StackNode n = machine_->node(top);
  walk_[0] = machine_->singleton(n.pos, n.parent);
  if (pm.uncertain_count > std::max<uint32_t>(2048, static_cast<uint32_t>(v.size() / 64))) {
    // Too many to check one by one (a position whose rule's frame is unknown): one pruned walk of the trie from
    // the real stack decides every token at once.
    const std::vector<TrieNode>& trie = v.trie();
    for (uint32_t i = 1; i < trie.size();) {
      const TrieNode& t = trie[i];
      const StateId s = machine_->step(walk_[t.depth - 1], t.byte);
      if (s == kDeadState) {
        i = t.end;
        continue;
      }
      walk_[t.depth] = s;
      for (uint32_t r = t.tok_begin; r < t.tok_end; ++r) set_bit(mask, static_cast<uint32_t>(sorted[r]));
      ++i;
    }
    return;
  }
  std::string_view prev;
  size_t valid = 0;  // walk_[1..valid] hold the states after prev's first bytes
  for (uint32_t k = 0; k < pm.uncertain_count; ++k) {
    const TokenId t = sorted[cg.uncertain()[pm.uncertain_offset + k]];
    if (get_bit(mask, static_cast<uint32_t>(t))) continue;
    const std::string_view b = v.bytes(t);
    size_t lcp = 0;
    const size_t limit = std::min({prev.size(), b.size(), valid});
    while (lcp < limit && prev[lcp] == b[lcp]) ++lcp;
    size_t d = lcp;
    StateId s = walk_[d];
    for (; d < b.size() && s != kDeadState; ++d) {
      s = machine_->step(s, static_cast<uint8_t>(b[d]));
      walk_[d + 1] = s;
    }
    valid = d;
    prev = b;
    if (d == b.size() && s != kDeadState) set_bit(mask, static_cast<uint32_t>(t));
  }
}

bool Matcher::accept_token(TokenId t) {
  if (ended_) return false;
  const TokenVocab& v = grammar_->vocab();
  if (t < 0 || t >= v.size()) return false;
  if (v.is_eog(t)) {
    if (!can_end()) return false;
    ended_ = true;
    return true;
  }
  const std::string_view b = v.bytes(t);
  if (b.empty()) return false;
  return accept_bytes(b);
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (ended_) return false;
  StateId s = state_;
  for (char c : bytes) {
    s = machine_->step(s, static_cast<uint8_t>(c));
    if (s == kDeadState) return false;
  }
  state_ = s;
  maybe_compact();
  return true;
}

std::string Matcher::forced_bytes(size_t limit) {
  std::string out;
  if (ended_) return out;
  StateId s = state_;
  while (out.size() < limit && (machine_->flags(s) & kAccept) == 0) {
    const ByteSet next = machine_->next_bytes(s);
    if (next.count() != 1) break;
    const auto b = static_cast<uint8_t>(next.first());
    out += static_cast<char>(b);
    s = machine_->step(s, b);
  }
  return out;
}

std::optional<std::string> Matcher::shortest_completion() {
  if (ended_ || can_end()) return std::string();
  const Grammar& g = grammar_->grammar();
  std::optional<std::string> best;
  for (uint32_t top : machine_->tops(state_)) {
    // The rest of the top's alternative, then the rest of each alternative below it.
    std::string s = g.shortest_rest(machine_->node(top).pos);
    for (uint32_t n = machine_->node(top).parent; n != kRootParent && n != kBottomParent; n = machine_->node(n).parent)
      s += g.shortest_rest(machine_->node(n).pos);
    if (!best || s.size() < best->size()) best = std::move(s);
  }
  return best;
}

std::vector<TokenId> Matcher::forced_tokens(size_t limit) {
  std::vector<TokenId> out;
  const std::string forced = forced_bytes();
  const TokenVocab& v = grammar_->vocab();
  const std::vector<TrieNode>& trie = v.trie();
  size_t pos = 0;
  while (out.size() < limit && pos < forced.size()) {
    // The deepest trie node along forced[pos..] that ends a token.
    uint32_t node = 0, best = 0;
    size_t depth = 0, best_depth = 0;
    while (pos + depth < forced.size()) {
      const auto b = static_cast<uint8_t>(forced[pos + depth]);
      uint32_t child = node + 1, found = 0;
      while (child < trie[node].end) {
        if (trie[child].byte == b) {
          found = child;
          break;
        }
        child = trie[child].end;
      }
      if (found == 0) break;
      node = found;
      ++depth;
      if (trie[node].tok_end > trie[node].tok_begin) best = node, best_depth = depth;
    }
    // Stop before the token that reaches the end of the stretch (or when no token fits).
    if (best_depth == 0 || pos + best_depth >= forced.size()) break;
    out.push_back(v.sorted()[trie[best].tok_begin]);
    pos += best_depth;
  }
  return out;
}

void Matcher::maybe_compact() {
  if (machine_->bytes() < compact_bytes_) return;
  auto fresh = std::make_unique<StackMachine>(grammar_->grammar());
  state_ = fresh->import(*machine_, state_);
  machine_ = std::move(fresh);
}

}  // namespace tessera::grammar
