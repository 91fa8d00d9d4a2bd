// build_grammar(): lowering the syntax tree to the flat byte-level grammar (UTF-8 class DFAs, repetition, copies of
// small shared rules), then the checks and analyses of analysis.cc.
#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>

#include <fmt/core.h>

#include "grammar/grammar.h"
#include "grammar/internal/analysis.h"
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
    std::vector<std::string> rule_where(g_.rules.size());
    for (size_t r = 0; r < rule_where.size(); ++r) rule_where[r] = where(origins_[r]);
    TS_RETURN_IF_ERROR(analyse_grammar(g_, rule_where));
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
