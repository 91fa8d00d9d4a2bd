#include "grammar/stack.h"

#include <algorithm>
#include <unordered_map>

namespace tessera::grammar {
namespace {

inline uint64_t pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

}  // namespace

StackMachine::StackMachine(const Grammar& g) : g_(g), node_ids_(1024), visited_big_(64) {
  slots_.assign(1024, 0);
  // State 0: the dead state (no tops, no flags).
  flags_ = 0;
  tops_.clear();
  finish_closure();
}

uint32_t StackMachine::intern_node(uint32_t pos, uint32_t parent) {
  const uint64_t key = pair_key(pos, parent);
  if (const uint32_t* id = node_ids_.find(key)) return *id;
  const auto id = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back({pos, parent});
  node_ids_.insert(key, id);
  return id;
}

bool StackMachine::visit(uint32_t pos, uint32_t parent) {
  const uint64_t key = pair_key(pos, parent);
  if (!visited_spilled_) {
    if (std::find(visited_.begin(), visited_.end(), key) != visited_.end()) return false;
    visited_.push_back(key);
    if (visited_.size() > 48) {
      visited_spilled_ = true;
      visited_big_.clear();
      for (uint64_t k : visited_) visited_big_.insert(k, 0);
    }
    return true;
  }
  if (visited_big_.find(key) != nullptr) return false;
  visited_big_.insert(key, 0);
  return true;
}

void StackMachine::expand(uint32_t pos, uint32_t parent) {
  work_.clear();
  work_.push_back(pair_key(pos, parent));
  while (!work_.empty()) {
    const uint64_t item = work_.back();
    work_.pop_back();
    uint32_t p = static_cast<uint32_t>(item >> 32);
    uint32_t par = static_cast<uint32_t>(item);
    if (!visit(p, par)) continue;
    const Elem e = g_.elems[p];
    switch (e.kind) {
      case ElemKind::kBytes:
      case ElemKind::kUtf8:
        tops_.push_back(intern_node(p, par));
        break;
      case ElemKind::kRule: {
        // Tail call: nothing left of this alternative after the reference, so it returns where we would.
        const uint32_t ret = g_.elems[p + 1].kind == ElemKind::kEnd ? par : intern_node(p + 1, par);
        const Rule& r = g_.rules[e.arg];
        for (uint32_t a = r.first_alt + r.num_alts; a-- > r.first_alt;) work_.push_back(pair_key(g_.alts[a], ret));
        break;
      }
      case ElemKind::kEnd:
        if (par == kRootParent) {
          flags_ |= kAccept;
        } else if (par == kBottomParent) {
          flags_ |= kBottom;
        } else {
          const StackNode n = nodes_[par];
          work_.push_back(pair_key(n.pos, n.parent));
        }
        break;
    }
  }
}

StateId StackMachine::finish_closure() {
  std::sort(tops_.begin(), tops_.end());
  tops_.erase(std::unique(tops_.begin(), tops_.end()), tops_.end());
  uint64_t h = mix64(flags_ + 0x9e3779b97f4a7c15ull);
  for (uint32_t t : tops_) h = mix64(h ^ t);
  size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  for (; slots_[i] != 0; i = (i + 1) & mask) {
    const StateRec& r = states_[slots_[i] - 1];
    if (r.hash == h && r.flags == flags_ && r.count == tops_.size() &&
        std::equal(tops_.begin(), tops_.end(), pool_.begin() + r.begin))
      break;
  }
  StateId id;
  if (slots_[i] != 0) {
    id = slots_[i] - 1;
  } else {
    id = static_cast<StateId>(states_.size());
    states_.push_back({static_cast<uint32_t>(pool_.size()), static_cast<uint32_t>(tops_.size()), flags_, h});
    row_of_.push_back(0);
    pool_.insert(pool_.end(), tops_.begin(), tops_.end());
    slots_[i] = id + 1;
    if (states_.size() * 2 > slots_.size()) {
      slots_.assign(slots_.size() * 2, 0);
      mask = slots_.size() - 1;
      for (size_t s = 0; s < states_.size(); ++s) {
        size_t j = states_[s].hash & mask;
        while (slots_[j] != 0) j = (j + 1) & mask;
        slots_[j] = static_cast<uint32_t>(s + 1);
      }
    }
  }
  tops_.clear();
  flags_ = 0;
  visited_.clear();
  visited_spilled_ = false;
  return id;
}

StateId StackMachine::start() {
  if (have_start_) return start_;
  const Rule& r = g_.rules[g_.root];
  for (uint32_t a = r.first_alt; a < r.first_alt + r.num_alts; ++a) expand(g_.alts[a], kRootParent);
  start_ = finish_closure();
  have_start_ = true;
  return start_;
}

StateId StackMachine::singleton(uint32_t pos, uint32_t parent) {
  tops_.push_back(intern_node(pos, parent));
  return finish_closure();
}

StateId StackMachine::step(StateId s, uint8_t b) {
  if (states_[s].count == 0) return kDeadState;
  uint32_t row = row_of_[s];
  if (row != 0) {
    const uint32_t cached = rows_[(static_cast<size_t>(row) - 1) * 256 + b];
    if (cached != 0) return cached - 1;
  }
  const StateRec rec = states_[s];
  for (uint32_t k = 0; k < rec.count; ++k) {
    const StackNode n = nodes_[pool_[rec.begin + k]];
    const uint32_t idx = elem_of(n.pos);
    const Elem e = g_.elems[idx];
    if (e.kind == ElemKind::kBytes) {
      if (g_.sets[e.arg].has(b)) expand(idx + 1, n.parent);
      continue;
    }
    const uint8_t code = g_.utf8[e.arg].next[sub_of(n.pos)][b];
    if (code == kUtf8Done) {
      expand(idx + 1, n.parent);
    } else if (code != kUtf8Dead) {
      tops_.push_back(intern_node(idx | (static_cast<uint32_t>(code) << kSubShift), n.parent));
    }
  }
  const StateId next = finish_closure();
  // Dense rows: a cached step is one load (the token-mask precomputation takes hundreds of thousands of them).
  if (row == 0) {
    rows_.resize(rows_.size() + 256, 0);
    row = static_cast<uint32_t>(rows_.size() / 256);
    row_of_[s] = row;
  }
  rows_[(static_cast<size_t>(row) - 1) * 256 + b] = next + 1;
  return next;
}

ByteSet StackMachine::next_bytes(StateId s) const {
  ByteSet out;
  for (uint32_t t : tops(s)) {
    const uint32_t idx = elem_of(nodes_[t].pos);
    const Elem& e = g_.elems[idx];
    if (e.kind == ElemKind::kBytes) {
      out.add(g_.sets[e.arg]);
      continue;
    }
    const auto& row = g_.utf8[e.arg].next[sub_of(nodes_[t].pos)];
    for (int b = 0; b < 256; ++b)
      if (row[static_cast<size_t>(b)] != kUtf8Dead) out.add(static_cast<uint8_t>(b));
  }
  return out;
}

size_t StackMachine::bytes() const {
  return nodes_.size() * sizeof(StackNode) + node_ids_.bytes() + states_.size() * sizeof(StateRec) +
         pool_.size() * sizeof(uint32_t) + slots_.size() * sizeof(uint32_t) + row_of_.size() * sizeof(uint32_t) +
         rows_.size() * sizeof(uint32_t);
}

StateId StackMachine::import(const StackMachine& from, StateId s) {
  std::unordered_map<uint32_t, uint32_t> copied;
  // Copies a node and its parents (iteratively: stacks can be deep).
  auto copy = [&](uint32_t id) {
    std::vector<uint32_t> chain;
    uint32_t cur = id;
    while (cur != kRootParent && cur != kBottomParent && copied.count(cur) == 0) {
      chain.push_back(cur);
      cur = from.nodes_[cur].parent;
    }
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const StackNode& n = from.nodes_[*it];
      const uint32_t parent = n.parent == kRootParent || n.parent == kBottomParent ? n.parent : copied.at(n.parent);
      copied[*it] = intern_node(n.pos, parent);
    }
    return copied.at(id);
  };
  for (uint32_t t : from.tops(s)) tops_.push_back(copy(t));
  flags_ = from.flags(s);
  return finish_closure();
}

}  // namespace tessera::grammar

namespace tessera::grammar {

bool accepts(const Grammar& g, std::string_view text) {
  StackMachine m(g);
  StateId s = m.start();
  for (char c : text) {
    s = m.step(s, static_cast<uint8_t>(c));
    if (s == kDeadState) return false;
  }
  return (m.flags(s) & kAccept) != 0;
}

}  // namespace tessera::grammar
