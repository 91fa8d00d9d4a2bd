#include "grammar/compiled_grammar.h"

#include <chrono>

#include "grammar/stack.h"

namespace tessera::grammar {

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(std::shared_ptr<const Grammar> grammar,
                                                                std::shared_ptr<const TokenVocab> vocab, Spec spec) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<CompiledGrammar> out(new CompiledGrammar());
  out->grammar_ = std::move(grammar);
  out->vocab_ = std::move(vocab);
  out->spec_ = std::move(spec);
  const Grammar& g = *out->grammar_;
  const TokenVocab& v = *out->vocab_;
  const std::vector<TrieNode>& trie = v.trie();
  const std::vector<TokenId>& sorted = v.sorted();
  const size_t words = v.mask_words();
  const size_t vocab_size = static_cast<size_t>(v.size());

  StackMachine m(g);
  out->index_.assign(g.elems.size(), 0);
  for (uint32_t e = 0; e < g.elems.size(); ++e) {
    const Elem& el = g.elems[e];
    if (el.kind != ElemKind::kBytes && el.kind != ElemKind::kUtf8) continue;
    out->index_[e] = static_cast<uint32_t>(out->masks_.size());
    out->masks_.resize(out->masks_.size() + (el.kind == ElemKind::kUtf8 ? g.utf8[el.arg].next.size() : 1));
  }
  std::vector<StateId> state(v.max_token_bytes() + 2);
  std::vector<uint8_t> unsure(v.max_token_bytes() + 2);
  std::vector<uint32_t> accepted, uncertain;
  // Each rule's frame as far as the grammar fixes it (Grammar::frame_returns), below every top in the rule.
  std::vector<uint32_t> frame_parent(g.rules.size());
  for (size_t r = 0; r < g.rules.size(); ++r) {
    uint32_t parent = g.frame_end[r] == kFrameRoot ? kRootParent : kBottomParent;
    const std::vector<uint32_t>& rets = g.frame_returns[r];
    for (auto it = rets.rbegin(); it != rets.rend(); ++it) parent = m.node_id(*it, parent);
    frame_parent[r] = parent;
  }
  std::vector<uint32_t> positions;
  for (uint32_t e = 0; e < g.elems.size(); ++e) {
    const Elem& el = g.elems[e];
    if (!g.reachable[g.rule_of[e]]) continue;
    if (el.kind == ElemKind::kBytes) positions.push_back(e);
    if (el.kind == ElemKind::kUtf8)
      for (uint32_t sub = 0; sub < g.utf8[el.arg].next.size(); ++sub) positions.push_back(e | (sub << kSubShift));
  }
  for (uint32_t pos : positions) {
    const uint32_t rule = g.rule_of[elem_of(pos)];
    const ByteSet& follow = g.follow[g.frame_bottom[rule]];
    accepted.clear();
    uncertain.clear();
    state[0] = m.singleton(pos, frame_parent[rule]);
    unsure[0] = 0;
    for (uint32_t i = 1; i < trie.size();) {
      const TrieNode& n = trie[i];
      const StateId parent = state[n.depth - 1];
      const bool u = unsure[n.depth - 1] || ((m.flags(parent) & kBottom) && follow.has(n.byte));
      const StateId s = m.step(parent, n.byte);
      if (s != kDeadState) {
        for (uint32_t r = n.tok_begin; r < n.tok_end; ++r) accepted.push_back(static_cast<uint32_t>(sorted[r]));
        state[n.depth] = s;
        unsure[n.depth] = u;
        ++i;
        continue;
      }
      if (u) {
        for (uint32_t r = n.tok_begin, e = v.subtree_rank_end(i); r < e; ++r) uncertain.push_back(r);
      }
      i = n.end;
    }
    PositionMask& pm = out->masks_[out->index_[elem_of(pos)] + sub_of(pos)];
    const size_t list_bytes = accepted.size() * 4, except_bytes = (vocab_size - accepted.size()) * 4;
    const size_t bits_bytes = words * 8;
    if (accepted.empty()) {
      pm.kind = PositionMask::Kind::kNone;
    } else if (list_bytes <= bits_bytes && list_bytes <= except_bytes) {
      pm.kind = PositionMask::Kind::kList;
      pm.offset = static_cast<uint32_t>(out->ids_.size());
      pm.count = static_cast<uint32_t>(accepted.size());
      out->ids_.insert(out->ids_.end(), accepted.begin(), accepted.end());
    } else {
      std::vector<uint64_t> b(words, 0);
      for (uint32_t t : accepted) b[t / 64] |= uint64_t{1} << (t % 64);
      if (except_bytes < bits_bytes) {
        pm.kind = PositionMask::Kind::kExcept;
        pm.offset = static_cast<uint32_t>(out->ids_.size());
        for (size_t t = 0; t < vocab_size; ++t)
          if (((b[t / 64] >> (t % 64)) & 1u) == 0) out->ids_.push_back(static_cast<uint32_t>(t));
        pm.count = static_cast<uint32_t>(out->ids_.size() - pm.offset);
      } else {
        pm.kind = PositionMask::Kind::kBits;
        pm.offset = static_cast<uint32_t>(out->bits_.size());
        pm.count = static_cast<uint32_t>(words);
        out->bits_.insert(out->bits_.end(), b.begin(), b.end());
      }
    }
    pm.uncertain_offset = static_cast<uint32_t>(out->uncertain_.size());
    pm.uncertain_count = static_cast<uint32_t>(uncertain.size());
    out->uncertain_.insert(out->uncertain_.end(), uncertain.begin(), uncertain.end());
    out->stats_.positions++;
    out->stats_.accepted += accepted.size();
    out->stats_.uncertain += uncertain.size();
  }
  out->stats_.machine_bytes = m.bytes();
  out->stats_.bytes = out->ids_.size() * 4 + out->bits_.size() * 8 + out->uncertain_.size() * 4 +
                      out->masks_.size() * sizeof(PositionMask);
  out->stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace tessera::grammar
