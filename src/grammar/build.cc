// build_grammar(): lowering the syntax tree to the flat byte-level grammar, then the checks and the analyses the
// recognizer and the token-mask precomputation rely on (nullable rules, FOLLOW sets over bytes).
#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>

#include <fmt/core.h>

#include "grammar/grammar.h"
#include "grammar/utf8_ranges.h"

namespace tessera::grammar {
namespace {

using Seq = std::vector<Elem>;
using Alts = std::vector<Seq>;

class Builder {
 public:
  Builder(const Ast& ast, const BuildLimits& limits) : ast_(ast), limits_(limits) {}

  Result<Grammar> run() {
    if (ast_.rules.empty()) return invalid_argument("the grammar has no rules");
    for (const AstRule& r : ast_.rules) {
      if (ids_.count(r.name) != 0) continue;
      ids_[r.name] = new_rule(r.name);
    }
    auto root = ids_.find(ast_.root);
    if (root == ids_.end()) return invalid_argument(fmt::format("the grammar has no '{}' rule", ast_.root));
    for (const AstRule& r : ast_.rules) {
      origin_ = r.origin;
      Alts alts = lower_alts(r.body, r.name);
      if (!status_.ok()) return status_;
      bodies_[ids_[r.name]] = std::move(alts);
      origins_[ids_[r.name]] = r.origin;
    }
    clone_shared(root->second);
    if (!status_.ok()) return status_;
    flatten(root->second);
    TS_RETURN_IF_ERROR(analyse());
    return std::move(g_);
  }

 private:
  std::string where(uint32_t origin) const {
    return origin != 0 && origin < ast_.origins.size() ? " (" + ast_.origins[origin] + ")" : std::string();
  }
  void fail(std::string message) {
    if (status_.ok()) status_ = invalid_argument(std::move(message));
  }

  uint32_t new_rule(std::string name) {
    names_.push_back(std::move(name));
    bodies_.emplace_back();
    origins_.push_back(origin_);
    return static_cast<uint32_t>(names_.size() - 1);
  }
  uint32_t aux_rule(const std::string& base, Alts alts) {
    const uint32_t id = new_rule(fmt::format("{}-{}", base, ++aux_count_));
    bodies_[id] = std::move(alts);
    return id;
  }
  uint32_t set_id(const ByteSet& s) {
    auto key = std::make_tuple(s.w[0], s.w[1], s.w[2], s.w[3]);
    auto it = set_ids_.find(key);
    if (it != set_ids_.end()) return it->second;
    g_.sets.push_back(s);
    const auto id = static_cast<uint32_t>(g_.sets.size() - 1);
    set_ids_[key] = id;
    return id;
  }
  Elem bytes(const ByteSet& s) { return {ElemKind::kBytes, set_id(s)}; }
  Elem rule_ref(uint32_t id) { return {ElemKind::kRule, id}; }

  void count(size_t n) {
    elems_ += n;
    if (elems_ > limits_.max_elems)
      fail(fmt::format("the grammar is too large (more than {} elements)", limits_.max_elems));
  }

  Alts lower_alts(const Expr& e, const std::string& name) {
    Alts out;
    if (e.kind == Expr::Kind::kAlt) {
      for (const Expr& item : e.items) {
        Seq s;
        lower_seq(item, name, s);
        out.push_back(std::move(s));
      }
      if (out.empty()) fail(fmt::format("rule '{}' has an empty list of alternatives{}", name, where(e.origin)));
    } else {
      Seq s;
      lower_seq(e, name, s);
      out.push_back(std::move(s));
    }
    return out;
  }

  void lower_seq(const Expr& e, const std::string& name, Seq& out) {
    if (!status_.ok()) return;
    switch (e.kind) {
      case Expr::Kind::kSeq:
        for (const Expr& item : e.items) lower_seq(item, name, out);
        return;
      case Expr::Kind::kLiteral:
        count(e.text.size());
        for (char c : e.text) out.push_back(bytes(ByteSet::single(static_cast<uint8_t>(c))));
        return;
      case Expr::Kind::kClass:
        count(1);
        out.push_back(class_elem(e, name));
        return;
      case Expr::Kind::kRef: {
        auto it = ids_.find(e.text);
        if (it == ids_.end())
          return fail(fmt::format("undefined rule '{}'{}", e.text, where(e.origin ? e.origin : origin_)));
        count(1);
        out.push_back(rule_ref(it->second));
        return;
      }
      case Expr::Kind::kAlt:
        count(1);
        out.push_back(rule_ref(aux_rule(name, lower_alts(e, name))));
        return;
      case Expr::Kind::kRepeat:
        return lower_repeat(e, name, out);
    }
  }

  // One element standing for `e`: itself when it lowers to one element, else a rule holding it.
  Elem single(const Expr& e, const std::string& name) {
    Seq s;
    if (e.kind != Expr::Kind::kAlt) lower_seq(e, name, s);
    if (s.size() == 1) return s[0];
    if (e.kind == Expr::Kind::kAlt) return rule_ref(aux_rule(name, lower_alts(e, name)));
    return rule_ref(aux_rule(name, Alts{std::move(s)}));
  }

  void lower_repeat(const Expr& e, const std::string& name, Seq& out) {
    const uint32_t min = e.min, max = e.max;
    if (max != kUnbounded && max < min)
      return fail(fmt::format("repetition {{{},{}}} has its maximum below its minimum{}", min, max, where(e.origin)));
    if (min > limits_.max_repetition || (max != kUnbounded && max > limits_.max_repetition)) {
      return fail(fmt::format("repetition count {} is above the limit of {}{}", max == kUnbounded ? min : max,
                              limits_.max_repetition, where(e.origin)));
    }
    if (max == 0) return;
    const Elem x = single(e.items[0], name);
    if (!status_.ok()) return;
    count(min + (max == kUnbounded ? 3 : 3 * static_cast<size_t>(max - min)));
    if (!status_.ok()) return;
    for (uint32_t i = 0; i < min; ++i) out.push_back(x);
    if (max == kUnbounded) {
      // S ::= x S | (empty): right recursion, which the recognizer runs in constant stack depth (tail calls).
      const uint32_t s = new_rule(fmt::format("{}-{}", name, ++aux_count_));
      bodies_[s] = Alts{{x, rule_ref(s)}, {}};
      out.push_back(rule_ref(s));
      return;
    }
    if (max == min) return;
    // x{0,k}: R1 ::= x | (empty); Rj ::= x R(j-1) | (empty).
    uint32_t prev = aux_rule(name, Alts{{x}, {}});
    for (uint32_t j = 2; j <= max - min; ++j) prev = aux_rule(name, Alts{{x, rule_ref(prev)}, {}});
    out.push_back(rule_ref(prev));
  }

  Elem class_elem(const Expr& e, const std::string& name) {
    std::vector<CodeRange> ranges = normalize_ranges(e.ranges, e.negated);
    if (ranges.empty()) {
      fail(fmt::format("an empty character class in rule '{}'{}", name, where(e.origin)));
      return {};
    }
    if (ranges.back().hi < 0x80) {
      ByteSet s;
      for (const CodeRange& r : ranges) s.add_range(static_cast<uint8_t>(r.lo), static_cast<uint8_t>(r.hi));
      return bytes(s);
    }
    std::vector<uint32_t> key;
    for (const CodeRange& r : ranges) {
      key.push_back(r.lo);
      key.push_back(r.hi);
    }
    auto it = utf8_ids_.find(key);
    if (it != utf8_ids_.end()) return {ElemKind::kUtf8, it->second};
    g_.utf8.push_back(utf8_dfa(ranges));
    const auto id = static_cast<uint32_t>(g_.utf8.size() - 1);
    utf8_ids_[key] = id;
    return {ElemKind::kUtf8, id};
  }

  // Subset construction over the byte-range sequences of the class: a state is the set of (sequence, byte index)
  // still possible. UTF-8 is prefix-free, so a byte either completes a character or continues one, never both.
  static Utf8Dfa utf8_dfa(const std::vector<CodeRange>& ranges) {
    std::vector<ByteRangeSeq> seqs;
    for (const CodeRange& r : ranges) utf8_sequences(r.lo, r.hi, seqs);
    using Set = std::vector<std::pair<uint32_t, uint32_t>>;
    std::map<Set, uint8_t> ids;
    std::vector<Set> todo;
    Set start;
    for (uint32_t k = 0; k < seqs.size(); ++k) start.push_back({k, 0});
    ids[start] = 0;
    todo.push_back(start);
    Utf8Dfa dfa;
    dfa.ranges = ranges;
    for (size_t st = 0; st < todo.size(); ++st) {
      std::array<uint8_t, 256> row;
      row.fill(kUtf8Dead);
      for (int b = 0; b < 256; ++b) {
        Set next;
        bool done = false;
        for (const auto& [k, i] : todo[st]) {
          const auto& [lo, hi] = seqs[k][i];
          if (b < lo || b > hi) continue;
          if (i + 1 == seqs[k].size()) {
            done = true;
          } else {
            next.push_back({k, i + 1});
          }
        }
        if (done) {
          row[static_cast<size_t>(b)] = kUtf8Done;
        } else if (!next.empty()) {
          auto [pos, fresh] = ids.try_emplace(next, static_cast<uint8_t>(todo.size()));
          if (fresh) todo.push_back(next);
          row[static_cast<size_t>(b)] = pos->second;
        }
      }
      dfa.next.push_back(row);
    }
    return dfa;
  }

  // Rules used in several places get a copy per place when they are small and not part of a cycle (a rule may
  // call itself): every copy then has one caller, so its frame (Grammar::frame_returns) is known and the token
  // masks at its positions are decided ahead of time instead of per step. Bounded by a budget of elements and of
  // copies per rule.
  void clone_shared(uint32_t root) {
    const size_t n0 = bodies_.size();
    auto size_of = [&](uint32_t r) {
      size_t n = 0;
      for (const Seq& s : bodies_[r]) n += s.size() + 1;
      return n;
    };
    // Rules in a cycle through other rules are never copied.
    std::vector<uint8_t> cyclic(n0, 0);
    {
      std::vector<std::vector<uint32_t>> out(n0);
      for (uint32_t r = 0; r < n0; ++r)
        for (const Seq& s : bodies_[r])
          for (const Elem& e : s)
            if (e.kind == ElemKind::kRule && e.arg != r) out[r].push_back(e.arg);
      // Tarjan's strongly connected components, iteratively.
      std::vector<int> index(n0, -1), low(n0, 0);
      std::vector<uint8_t> on(n0, 0);
      std::vector<uint32_t> stack;
      int next = 0;
      for (uint32_t s0 = 0; s0 < n0; ++s0) {
        if (index[s0] >= 0) continue;
        std::vector<std::pair<uint32_t, size_t>> call{{s0, 0}};
        index[s0] = low[s0] = next++;
        stack.push_back(s0);
        on[s0] = 1;
        while (!call.empty()) {
          auto& [v, i] = call.back();
          if (i < out[v].size()) {
            const uint32_t w = out[v][i++];
            if (index[w] < 0) {
              index[w] = low[w] = next++;
              stack.push_back(w);
              on[w] = 1;
              call.push_back({w, 0});
            } else if (on[w]) {
              low[v] = std::min(low[v], index[w]);
            }
            continue;
          }
          if (low[v] == index[v]) {
            std::vector<uint32_t> comp;
            uint32_t w;
            do {
              w = stack.back();
              stack.pop_back();
              on[w] = 0;
              comp.push_back(w);
            } while (w != v);
            if (comp.size() > 1)
              for (uint32_t c : comp) cyclic[c] = 1;
          }
          const uint32_t done = v;
          call.pop_back();
          if (!call.empty()) low[call.back().first] = std::min(low[call.back().first], low[done]);
        }
      }
    }
    // The size of a rule with the copies it would bring along.
    std::vector<size_t> expanded(n0, 0);
    std::vector<uint8_t> state(n0, 0);
    std::function<size_t(uint32_t)> expand_size = [&](uint32_t r) -> size_t {
      if (state[r] == 2) return expanded[r];
      if (state[r] == 1) return 1 << 20;
      state[r] = 1;
      size_t n = size_of(r);
      for (const Seq& s : bodies_[r])
        for (const Elem& e : s)
          if (e.kind == ElemKind::kRule && e.arg != r && !cyclic[e.arg])
            n += std::min<size_t>(expand_size(e.arg), 1 << 20);
      state[r] = 2;
      return expanded[r] = std::min<size_t>(n, 1 << 20);
    };
    for (uint32_t r = 0; r < n0; ++r) expand_size(r);  // before any copy changes the bodies
    constexpr size_t kMaxCopySize = 256, kMaxCopiesPerRule = 128;
    size_t budget = std::max<size_t>(elems_ * 2, 200000);
    std::vector<uint32_t> origin(n0);  // the rule each rule was copied from
    for (uint32_t r = 0; r < n0; ++r) origin[r] = r;
    std::vector<size_t> copies(n0, 0);
    for (int pass = 0; pass < 16; ++pass) {
      // Callers counted over the rules reachable from the root.
      std::vector<uint32_t> callers(bodies_.size(), 0);
      std::vector<uint8_t> live(bodies_.size(), 0);
      std::vector<uint32_t> todo{root};
      live[root] = 1;
      while (!todo.empty()) {
        const uint32_t r = todo.back();
        todo.pop_back();
        for (const Seq& s : bodies_[r])
          for (const Elem& e : s) {
            if (e.kind != ElemKind::kRule || e.arg == r) continue;
            ++callers[e.arg];
            if (!live[e.arg]) live[e.arg] = 1, todo.push_back(e.arg);
          }
      }
      bool changed = false;
      const size_t count = bodies_.size();
      for (uint32_t r = 0; r < count; ++r) {
        if (!live[r]) continue;
        for (size_t a = 0; a < bodies_[r].size(); ++a) {
          for (size_t k = 0; k < bodies_[r][a].size(); ++k) {
            const Elem e = bodies_[r][a][k];
            if (e.kind != ElemKind::kRule || e.arg == r || e.arg == root || callers[e.arg] < 2) continue;
            const uint32_t o = origin[e.arg];
            if (cyclic[o] || expanded[o] > kMaxCopySize || copies[o] >= kMaxCopiesPerRule) continue;
            const size_t sz = expanded[o];
            if (sz > budget) continue;
            budget -= sz;
            --callers[e.arg];
            const uint32_t copy = deep_copy(e.arg, origin, copies, cyclic);
            bodies_[r][a][k].arg = copy;
            changed = true;
          }
        }
      }
      if (!changed) break;
    }
  }

  // A copy of rule r with, per reference, a copy of each small acyclic rule it calls, and so on down (a tree of
  // copies, so that every copy has exactly one caller). Self-references point at the copy.
  uint32_t deep_copy(uint32_t r, std::vector<uint32_t>& origin, std::vector<size_t>& copies,
                     const std::vector<uint8_t>& cyclic) {
    Alts body = bodies_[r];
    const uint32_t copy = new_rule(fmt::format("{}-{}", names_[r], ++aux_count_));
    origins_[copy] = origins_[r];
    origin.push_back(origin[r]);
    ++copies[origin[r]];
    for (Seq& s : body) {
      for (Elem& x : s) {
        if (x.kind != ElemKind::kRule) continue;
        if (x.arg == r) {
          x.arg = copy;
        } else if (!cyclic[origin[x.arg]]) {
          x.arg = deep_copy(x.arg, origin, copies, cyclic);
        }
      }
    }
    bodies_[copy] = std::move(body);
    return copy;
  }

  void flatten(uint32_t root) {
    g_.root = root;
    g_.rules.resize(names_.size());
    for (size_t r = 0; r < names_.size(); ++r) {
      Rule& rule = g_.rules[r];
      rule.name = names_[r];
      rule.first_alt = static_cast<uint32_t>(g_.alts.size());
      rule.num_alts = static_cast<uint32_t>(bodies_[r].size());
      for (const Seq& s : bodies_[r]) {
        g_.alts.push_back(static_cast<uint32_t>(g_.elems.size()));
        for (const Elem& e : s) {
          g_.elems.push_back(e);
          g_.rule_of.push_back(static_cast<uint32_t>(r));
        }
        g_.elems.push_back({ElemKind::kEnd, 0});
        g_.rule_of.push_back(static_cast<uint32_t>(r));
      }
    }
  }

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
                                            g_.rules[r].name, where(origins_[r])));
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
                                              cycle, g_.rules[s].name, where(origins_[s])));
        }
        if (color[s] == 0) {
          color[s] = 1;
          stack.push_back({s, 0});
        }
      }
    }
    return ok_status();
  }

  const Ast& ast_;
  BuildLimits limits_;
  Grammar g_;
  Status status_;
  uint32_t origin_ = 0;
  size_t elems_ = 0;
  int aux_count_ = 0;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<Alts> bodies_;
  std::vector<uint32_t> origins_;
  std::map<std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>, uint32_t> set_ids_;
  std::map<std::vector<uint32_t>, uint32_t> utf8_ids_;
  std::vector<std::vector<Site>> sites_;
  std::vector<uint8_t> frame_state_;  // 0 not done, 1 in progress, 2 done
};

void print_set(const ByteSet& s, std::string& out) {
  auto put = [&](int b) {
    if (b >= 0x21 && b < 0x7F && b != '\\' && b != ']' && b != '-' && b != '^' && b != '"')
      out += static_cast<char>(b);
    else
      out += fmt::format("\\x{:02X}", b);
  };
  if (s.count() == 1 && s.first() >= 0x21 && s.first() < 0x7F && s.first() != '"' && s.first() != '\\') {
    out += fmt::format("\"{}\"", static_cast<char>(s.first()));
    return;
  }
  out += '[';
  for (int b = 0; b < 256;) {
    if (!s.has(static_cast<uint8_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.has(static_cast<uint8_t>(e + 1))) ++e;
    put(b);
    if (e > b) {
      out += '-';
      put(e);
    }
    b = e + 1;
  }
  out += ']';
}

}  // namespace

Result<Grammar> build_grammar(const Ast& ast, const BuildLimits& limits) { return Builder(ast, limits).run(); }

ByteSet Grammar::first_bytes(const Elem& e) const {
  if (e.kind == ElemKind::kBytes) return sets[e.arg];
  ByteSet out;
  if (e.kind == ElemKind::kUtf8) {
    for (int b = 0; b < 256; ++b)
      if (utf8[e.arg].next[0][static_cast<size_t>(b)] != kUtf8Dead) out.add(static_cast<uint8_t>(b));
  }
  return out;
}

std::string Grammar::utf8_shortest(uint32_t cls, uint32_t sub) const {
  // Breadth first over the class's DFA states.
  const Utf8Dfa& d = utf8[cls];
  std::vector<std::pair<uint32_t, std::string>> todo{{sub, ""}};
  std::vector<uint8_t> seen(d.next.size(), 0);
  seen[sub] = 1;
  for (size_t i = 0; i < todo.size(); ++i) {
    for (int b = 0; b < 256; ++b) {
      const uint8_t code = d.next[todo[i].first][static_cast<size_t>(b)];
      if (code == kUtf8Dead) continue;
      std::string s = todo[i].second + static_cast<char>(b);
      if (code == kUtf8Done) return s;
      if (!seen[code]) seen[code] = 1, todo.push_back({code, std::move(s)});
    }
  }
  return "";
}

std::string Grammar::shortest_rest(uint32_t pos) const {
  std::string out;
  uint32_t p = elem_of(pos);
  if (elems[p].kind == ElemKind::kUtf8) {
    out += utf8_shortest(elems[p].arg, sub_of(pos));
    ++p;
  }
  for (; elems[p].kind != ElemKind::kEnd; ++p) {
    const Elem& e = elems[p];
    if (e.kind == ElemKind::kRule)
      out += shortest[e.arg];
    else if (e.kind == ElemKind::kBytes)
      out += static_cast<char>(sets[e.arg].first());
    else
      out += utf8_shortest(e.arg, 0);
  }
  return out;
}

std::string Grammar::to_string() const {
  std::string out;
  for (const Rule& r : rules) {
    out += r.name + " ::=";
    for (uint32_t a = r.first_alt; a < r.first_alt + r.num_alts; ++a) {
      if (a != r.first_alt) out += " |";
      for (uint32_t p = alts[a]; elems[p].kind != ElemKind::kEnd; ++p) {
        out += ' ';
        if (elems[p].kind == ElemKind::kRule) {
          out += rules[elems[p].arg].name;
        } else if (elems[p].kind == ElemKind::kUtf8) {
          out += '[';
          for (const CodeRange& r : utf8[elems[p].arg].ranges)
            out += r.lo == r.hi ? fmt::format("\\u{{{:X}}}", r.lo) : fmt::format("\\u{{{:X}}}-\\u{{{:X}}}", r.lo, r.hi);
          out += ']';
        } else {
          print_set(sets[elems[p].arg], out);
        }
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace tessera::grammar
