// The analyses build_grammar() runs on a lowered grammar: nullable and productive rules, left recursion, FIRST and
// FOLLOW sets over bytes, each rule's static frame (what the grammar alone says lies below it on every stack), and
// a shortest text per rule. Internal to build_grammar() (grammar/internal/analysis.h).
#include <functional>

#include <fmt/core.h>

#include "grammar/internal/analysis.h"

namespace tessera::grammar {
namespace {

class Analyzer {
 public:
  Analyzer(Grammar& g, const std::vector<std::string>& where) : g_(g), where_(where) {}

  Status run() { return analyse(); }

 private:
  template <typename F>
  void for_alt(uint32_t rule, F f) const {
    const Rule& r = g_.rules[rule];
    for (uint32_t a = r.first_alt; a < r.first_alt + r.num_alts; ++a) f(g_.alts[a]);
  }

  Status analyse() {
    const size_t n = g_.rules.size();
    // Nullable and productive rules: fixpoints over the alternatives.
    g_.nullable.assign(n, 0);
    std::vector<uint8_t> productive(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (uint32_t r = 0; r < n; ++r) {
        for_alt(r, [&](uint32_t p) {
          bool null = true, prod = true;
          for (; g_.elems[p].kind != ElemKind::kEnd; ++p) {
            const Elem& e = g_.elems[p];
            if (e.kind == ElemKind::kBytes || e.kind == ElemKind::kUtf8) {
              null = false;
            } else {
              null = null && g_.nullable[e.arg];
              prod = prod && productive[e.arg];
            }
          }
          if (null && !g_.nullable[r]) g_.nullable[r] = 1, changed = true;
          if (prod && !productive[r]) productive[r] = 1, changed = true;
        });
      }
    }
    // A reachable rule that cannot finish means a user's grammar that would run until max_tokens.
    std::vector<uint8_t> reached(n, 0);
    std::vector<uint32_t> todo{g_.root};
    reached[g_.root] = 1;
    while (!todo.empty()) {
      uint32_t r = todo.back();
      todo.pop_back();
      if (!productive[r]) {
        return invalid_argument(fmt::format("rule '{}' can never finish (every alternative recurses forever){}",
                                            g_.rules[r].name, where_[r]));
      }
      for_alt(r, [&](uint32_t p) {
        for (; g_.elems[p].kind != ElemKind::kEnd; ++p) {
          const Elem& e = g_.elems[p];
          if (e.kind == ElemKind::kRule && !reached[e.arg]) reached[e.arg] = 1, todo.push_back(e.arg);
        }
      });
    }
    TS_RETURN_IF_ERROR(check_left_recursion(reached));
    g_.reachable = reached;
    // FIRST sets, then FOLLOW sets, over bytes.
    std::vector<ByteSet> first(n);
    for (bool changed = true; changed;) {
      changed = false;
      for (uint32_t r = 0; r < n; ++r) {
        ByteSet s = first[r];
        for_alt(r, [&](uint32_t p) { s.add(seq_first(first, p, nullptr)); });
        if (!(s == first[r])) first[r] = s, changed = true;
      }
    }
    g_.follow.assign(n, ByteSet{});
    g_.follow_end.assign(n, 0);
    g_.follow_end[g_.root] = 1;
    for (bool changed = true; changed;) {
      changed = false;
      for (uint32_t r = 0; r < n; ++r) {
        for_alt(r, [&](uint32_t p) {
          for (; g_.elems[p].kind != ElemKind::kEnd; ++p) {
            const Elem& e = g_.elems[p];
            if (e.kind != ElemKind::kRule) continue;
            bool rest_nullable = false;
            ByteSet f = g_.follow[e.arg];
            f.add(seq_first(first, p + 1, &rest_nullable));
            uint8_t end = g_.follow_end[e.arg];
            if (rest_nullable) {
              f.add(g_.follow[r]);
              end |= g_.follow_end[r];
            }
            if (!(f == g_.follow[e.arg]) || end != g_.follow_end[e.arg]) {
              g_.follow[e.arg] = f;
              g_.follow_end[e.arg] = end;
              changed = true;
            }
          }
        });
      }
    }
    compute_frames();
    compute_shortest();
    return ok_status();
  }

  // A shortest text per rule: lengths by fixpoint, then the texts along the shortest alternatives.
  void compute_shortest() {
    const size_t n = g_.rules.size();
    constexpr size_t kInf = SIZE_MAX / 4;
    std::vector<size_t> len(n, kInf);
    auto alt_len = [&](uint32_t p) {
      size_t total = 0;
      for (; g_.elems[p].kind != ElemKind::kEnd; ++p) {
        const Elem& e = g_.elems[p];
        total += e.kind == ElemKind::kRule ? len[e.arg] : e.kind == ElemKind::kBytes ? 1 : utf8_min_len(e.arg, 0);
        if (total >= kInf) return kInf;
      }
      return total;
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (uint32_t r = 0; r < n; ++r) {
        for_alt(r, [&](uint32_t p) {
          const size_t l = alt_len(p);
          if (l < len[r]) len[r] = l, changed = true;
        });
      }
    }
    g_.shortest.assign(n, std::string());
    std::vector<uint8_t> state(n, 0);
    std::function<void(uint32_t)> build = [&](uint32_t r) {
      if (state[r] != 0 || len[r] >= kInf) return;
      state[r] = 1;
      std::string out;
      for_alt(r, [&](uint32_t p) {
        if (!out.empty() || state[r] == 2 || alt_len(p) != len[r]) return;
        for (; g_.elems[p].kind != ElemKind::kEnd; ++p) {
          const Elem& e = g_.elems[p];
          if (e.kind == ElemKind::kRule) {
            build(e.arg);
            out += g_.shortest[e.arg];
          } else if (e.kind == ElemKind::kBytes) {
            out += static_cast<char>(g_.sets[e.arg].first());
          } else {
            out += g_.utf8_shortest(e.arg, 0);
          }
        }
        state[r] = 2;
      });
      g_.shortest[r] = std::move(out);
      state[r] = 2;
    };
    for (uint32_t r = 0; r < n; ++r) build(r);
  }

  size_t utf8_min_len(uint32_t cls, uint32_t sub) const { return g_.utf8_shortest(cls, sub).size(); }

  struct Site {
    uint32_t caller, pos;
    bool tail;
  };
  static constexpr size_t kMaxFrameDepth = 64;
  static constexpr uint32_t kRootMark = 0xFFFFFFFF, kUnknownMark = 0xFFFFFFFE;

  void compute_frames() {
    const size_t n = g_.rules.size();
    sites_.assign(n, {});
    for (uint32_t r = 0; r < n; ++r) {
      if (!g_.reachable[r]) continue;  // a rule nobody uses (e.g. one every caller took a copy of) calls nothing
      for_alt(r, [&](uint32_t p) {
        for (; g_.elems[p].kind != ElemKind::kEnd; ++p) {
          if (g_.elems[p].kind == ElemKind::kRule)
            sites_[g_.elems[p].arg].push_back({r, p, g_.elems[p + 1].kind == ElemKind::kEnd});
        }
      });
    }
    g_.frame_returns.assign(n, {});
    g_.frame_end.assign(n, kUnknownMark);
    g_.frame_bottom.assign(n, 0);
    frame_state_.assign(n, 0);
    for (uint32_t r = 0; r < n; ++r) frame(r);
  }

  // Fills the frame of rule r (memoised; a rule met again while its frame is being worked out counts as unknown).
  void frame(uint32_t r) {
    if (frame_state_[r] != 0) return;
    frame_state_[r] = 1;
    bool known = true, have = false;
    std::vector<uint32_t> returns;
    uint32_t end = 0, bottom = 0;
    auto offer = [&](std::vector<uint32_t> rets, uint32_t e, uint32_t b) {
      if (!have) {
        returns = std::move(rets), end = e, bottom = b, have = true;
      } else if (rets != returns || e != end || b != bottom) {
        known = false;
      }
    };
    if (r == g_.root) offer({}, kRootMark, 0);
    for (const Site& s : sites_[r]) {
      if (!known) break;
      if (s.tail && s.caller == r) continue;  // a tail call of itself keeps the frame
      frame(s.caller);
      if (frame_state_[s.caller] != 2) {
        known = false;
        break;
      }
      std::vector<uint32_t> rets;
      if (!s.tail) rets.push_back(s.pos + 1);
      const auto& up = g_.frame_returns[s.caller];
      rets.insert(rets.end(), up.begin(), up.end());
      uint32_t e = g_.frame_end[s.caller], b = g_.frame_bottom[s.caller];
      if (rets.size() > kMaxFrameDepth) {
        rets.resize(kMaxFrameDepth);
        e = kUnknownMark;  // truncated: unknown below the last kept return
        b = g_.rule_of[rets.back()];
      }
      offer(std::move(rets), e, b);
    }
    if (!have) known = false;
    if (known) {
      g_.frame_returns[r] = std::move(returns);
      g_.frame_end[r] = end;
      g_.frame_bottom[r] = bottom;
    } else {
      g_.frame_returns[r].clear();
      g_.frame_end[r] = kUnknownMark;
      g_.frame_bottom[r] = r;
    }
    frame_state_[r] = 2;
  }

  // The bytes that can start the sequence at elems[p..]; `nullable`: the whole rest can be empty.
  ByteSet seq_first(const std::vector<ByteSet>& first, uint32_t p, bool* nullable) const {
    ByteSet s;
    for (; g_.elems[p].kind != ElemKind::kEnd; ++p) {
      const Elem& e = g_.elems[p];
      if (e.kind == ElemKind::kBytes || e.kind == ElemKind::kUtf8) {
        s.add(g_.first_bytes(e));
        if (nullable) *nullable = false;
        return s;
      }
      s.add(first[e.arg]);
      if (!g_.nullable[e.arg]) {
        if (nullable) *nullable = false;
        return s;
      }
    }
    if (nullable) *nullable = true;
    return s;
  }

  // The recognizer expands a rule's leftmost references before it reads a byte: a rule that reaches itself that
  // way would expand forever.
  Status check_left_recursion(const std::vector<uint8_t>& reached) const {
    const size_t n = g_.rules.size();
    std::vector<std::vector<uint32_t>> edges(n);
    for (uint32_t r = 0; r < n; ++r) {
      for_alt(r, [&](uint32_t p) {
        for (; g_.elems[p].kind == ElemKind::kRule; ++p) {
          edges[r].push_back(g_.elems[p].arg);
          if (!g_.nullable[g_.elems[p].arg]) break;
        }
      });
    }
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> stack;
    for (uint32_t start = 0; start < n; ++start) {
      if (!reached[start] || color[start] != 0) continue;
      stack.push_back({start, 0});
      color[start] = 1;
      while (!stack.empty()) {
        auto& [r, i] = stack.back();
        if (i == edges[r].size()) {
          color[r] = 2;
          stack.pop_back();
          continue;
        }
        const uint32_t s = edges[r][i++];
        if (color[s] == 1) {
          std::string cycle;
          bool on = false;
          for (const auto& [q, unused] : stack) {
            if (q == s) on = true;
            if (on) cycle += g_.rules[q].name + " -> ";
          }
          return invalid_argument(fmt::format("left recursion: {}{} can reach itself without reading a character{}",
                                              cycle, g_.rules[s].name, where_[s]));
        }
        if (color[s] == 0) {
          color[s] = 1;
          stack.push_back({s, 0});
        }
      }
    }
    return ok_status();
  }

  Grammar& g_;
  const std::vector<std::string>& where_;
  std::vector<std::vector<Site>> sites_;
  std::vector<uint8_t> frame_state_;  // 0 not done, 1 in progress, 2 done
};

}  // namespace

Status analyse_grammar(Grammar& g, const std::vector<std::string>& rule_where) { return Analyzer(g, rule_where).run(); }

}  // namespace tessera::grammar
