#include "solver/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <set>

#include <fmt/core.h>

#include "base/check.h"

namespace tessera::solver {

const char* role_name(Role r) {
  switch (r) {
    case Role::kIdle:
      return "idle";
    case Role::kPrefill:
      return "prefill";
    case Role::kDecode:
      return "decode";
    case Role::kBoth:
      return "both";
  }
  return "?";
}

Result<Role> role_from_name(const std::string& name) {
  for (Role r : {Role::kIdle, Role::kPrefill, Role::kDecode, Role::kBoth})
    if (name == role_name(r)) return r;
  return invalid_argument(fmt::format("unknown role '{}'; known roles: idle, prefill, decode, both", name));
}

Result<RouterPolicy> router_policy_from_name(const std::string& name) {
  if (name == "least-loaded") return RouterPolicy::kLeastLoaded;
  if (name == "round-robin") return RouterPolicy::kRoundRobin;
  return invalid_argument(fmt::format("unknown router policy '{}'; known: least-loaded, round-robin", name));
}

namespace {

struct ReqState {
  int in = 0, out = 0;
  double arrival = 0, first = -1, finish = -1;
  int prefill_inst = -1, decode_inst = -1;
  bool served = true;
  bool busy = false;  // arrived while its decoding instance was decoding
};

struct Chunk {
  int req;
  int done;   // prompt tokens already prefilled
  int chunk;  // tokens in the step in flight
};

struct Inst {
  const SimInstance* spec = nullptr;
  std::deque<int> waiting;        // routed for prefill, not admitted
  std::vector<Chunk> prefilling;  // admitted, prompt in progress, FCFS
  size_t assigned = 0;            // leading entries of `prefilling` with a chunk in the step in flight
  std::deque<int> pending;        // decode role: prefilled elsewhere, awaiting admission
  std::vector<int> joining;       // join the decode batch at the next step
  int running = 0;
  int slots = 0;  // batch slots held: prefilling + running + joining (+ transferring in, decode role)
  double context_sum = 0;
  std::priority_queue<std::pair<long, int>, std::vector<std::pair<long, int>>, std::greater<>> finish;
  double kv_used = 0;
  bool busy = false;
  long step = 0;
  double link_free = 0;
};

struct Event {
  double t;
  long seq;
  int kind;  // 0: step end, 1: transfer done
  int inst;
  int req;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

class Sim {
 public:
  Sim(const SimConfig& c, const std::vector<Request>& reqs)
      : c_(c), overhead_sorted_(c.request_overhead_samples_s), busy_sorted_(c.request_overhead_busy_samples_s) {
    std::sort(overhead_sorted_.begin(), overhead_sorted_.end());
    std::sort(busy_sorted_.begin(), busy_sorted_.end());
    r_.resize(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      r_[i].in = reqs[i].input_tokens;
      r_[i].out = reqs[i].output_tokens;
      r_[i].arrival = reqs[i].arrival_s;
    }
    inst_.resize(c.instances.size());
    for (size_t i = 0; i < inst_.size(); ++i) {
      const SimInstance& s = c.instances[i];
      inst_[i].spec = &s;
      double t = step_seconds(s.latency, step_work(c.cost, prefill_shape(c.cost, 512, 1)), s.tp,
                              s.interconnect_bandwidth, c.cost);
      spt_.push_back(t / 512);
      queued_.push_back(0);
      cap_.push_back(s.kv_capacity_tokens);
      both_.push_back(s.role == Role::kBoth);
      if (s.role == Role::kDecode) max_decoder_cap_ = std::max(max_decoder_cap_, s.kv_capacity_tokens);
      class_of_.push_back(-1);
      if (s.role == Role::kPrefill || s.role == Role::kBoth) {
        prefill_capable_.push_back(static_cast<int>(i));
        int c = 0;
        while (c < static_cast<int>(classes_.size()) &&
               !(classes_[c].spt == spt_[i] && classes_[c].cap == s.kv_capacity_tokens && classes_[c].both == both_[i]))
          ++c;
        if (c == static_cast<int>(classes_.size()))
          classes_.push_back({spt_[i], s.kv_capacity_tokens, both_[i] != 0, {}});
        class_of_[i] = c;
        classes_[c].members.insert({0.0, static_cast<int>(i)});
      }
      dload_.push_back(0);
      if (s.role == Role::kDecode) {
        decoders_.push_back(static_cast<int>(i));
        int c = 0;
        while (c < static_cast<int>(decode_classes_.size()) &&
               !(decode_classes_[c].cap == s.kv_capacity_tokens && decode_classes_[c].max_batch == s.max_batch))
          ++c;
        if (c == static_cast<int>(decode_classes_.size()))
          decode_classes_.push_back({s.kv_capacity_tokens, static_cast<double>(s.max_batch), {}});
        class_of_[i] = c;
        decode_classes_[c].members.insert({0, static_cast<int>(i)});
      }
    }
  }

  Result<SimResult> run() {
    size_t next = 0;
    while (next < r_.size() || !events_.empty()) {
      if (steps_ > c_.max_steps)
        return resource_exhausted(fmt::format(
            "simulation stopped after {} steps (limit {}): the workload is too large to simulate; use fewer "
            "requests or shorter lengths",
            steps_, c_.max_steps));
      if (!events_.empty() && (next >= r_.size() || events_.top().t <= r_[next].arrival)) {
        Event e = events_.top();
        events_.pop();
        now_ = e.t;
        if (e.kind == 0) {
          step_end(e.inst);
        } else {
          transfer_done(e.inst, e.req);
        }
      } else {
        // Requests arriving together are routed before any instance starts a step, so they can share it.
        now_ = r_[next].arrival;
        std::vector<int> touched;
        while (next < r_.size() && r_[next].arrival == now_) {
          int i = arrive(static_cast<int>(next++));
          if (i >= 0 && (touched.empty() || touched.back() != i)) touched.push_back(i);
        }
        std::sort(touched.begin(), touched.end());
        touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
        for (int i : touched) kick(i);
      }
    }
    SimResult out;
    out.steps = steps_;
    out.requests.resize(r_.size());
    for (size_t i = 0; i < r_.size(); ++i) {
      const ReqState& q = r_[i];
      RequestOutcome& o = out.requests[i];
      o.served = q.served && q.finish >= 0;
      o.prefill_instance = q.prefill_inst;
      o.decode_instance = q.decode_inst;
      if (!o.served) continue;
      const double overhead = request_overhead(i, q.busy);
      const double start = q.out > 1 ? c_.stream_start_overhead_s : 0;
      o.ttft_s = q.first - q.arrival + overhead;
      o.e2e_s = q.finish - q.arrival + overhead + start;
      o.tpot_s = q.out > 1 ? (q.finish - q.first + start) / (q.out - 1) : 0;
      out.end_s = std::max(out.end_s, q.finish);
    }
    return out;
  }

 private:
  double cap(int i) const { return cap_[i]; }
  // KV positions request q holds: its prompt (on a prefill instance) or its whole length, plus its sliding layers'
  // window and its recurrent state (hybrid models) counted in positions (ModelCost::held_positions).
  double held_prompt(const ReqState& q) const { return c_.cost.held_positions(q.in); }
  double held_whole(const ReqState& q) const { return c_.cost.held_positions(q.in + q.out); }

  // Request i's serving-path overhead: the constant, or the sample at quantile frac(0.5 + i / phi) of the
  // sorted samples (an evenly spread, deterministic walk over the measured distribution).
  // A busy request (see ReqState) draws from the busy samples when there are any.
  double request_overhead(size_t i, bool busy) const {
    const std::vector<double>& v = busy && !busy_sorted_.empty() ? busy_sorted_ : overhead_sorted_;
    if (v.empty()) return c_.request_overhead_s;
    const double u = std::fmod(0.5 + static_cast<double>(i) * 0.6180339887498949, 1.0);
    const auto k = static_cast<size_t>(u * static_cast<double>(v.size()));
    return v[std::min(k, v.size() - 1)];
  }

  void push(double t, int kind, int inst, int req) { events_.push({t, seq_++, kind, inst, req}); }

  // The decode instance for a request prefilled on a prefill instance, or -1 if none can ever hold it.
  int pick_decoder(int req) {
    double need = held_whole(r_[req]);
    if (c_.router == RouterPolicy::kRoundRobin) {
      size_t n = decoders_.size();
      for (size_t k = 0; k < n; ++k) {
        size_t idx = (rr_decode_ + k) % n;
        int d = decoders_[idx];
        if (cap_[d] < need) continue;
        rr_decode_ = idx + 1;
        return d;
      }
      return -1;
    }
    // Lowest slot occupancy ((held + queued) / batch limit), lowest index on ties; within a class of equal
    // capacity and batch limit the least loaded member is the candidate.
    int best = -1;
    double best_score = 0;
    for (const DecodeClass& dc : decode_classes_) {
      if (dc.cap < need || dc.members.empty()) continue;
      auto [load, d] = *dc.members.begin();
      double score = load / dc.max_batch;
      if (best < 0 || score < best_score || (score == best_score && d < best)) best = d, best_score = score;
    }
    return best;
  }

  void add_decode_load(int d, int delta) {
    DecodeClass& dc = decode_classes_[class_of_[d]];
    dc.members.erase({dload_[d], d});
    dload_[d] += delta;
    dc.members.insert({dload_[d], d});
  }

  // Routes a new request; returns the instance it queued on (-1: unserved). The caller kicks it.
  int arrive(int req) {
    const ReqState& q = r_[req];
    int best = -1;
    if (c_.router == RouterPolicy::kRoundRobin) {
      size_t n = prefill_capable_.size();
      for (size_t k = 0; k < n; ++k) {
        size_t idx = (rr_prefill_ + k) % n;
        int i = prefill_capable_[idx];
        if (!fits(i, q)) continue;
        rr_prefill_ = idx + 1;
        best = i;
        break;
      }
    } else {
      // Least time to drain the queued prompt tokens plus this one. Instances of one class share the rate,
      // so within a class the least queued (lowest index on ties) is the candidate; classes are compared.
      double best_score = 0;
      for (const RouteClass& rc : classes_) {
        if (rc.members.empty() || !fits(rc.members.begin()->second, q)) continue;
        auto [queued, i] = *rc.members.begin();
        double score = (queued + q.in) * spt_[i];
        if (best < 0 || score < best_score || (score == best_score && i < best)) best = i, best_score = score;
      }
    }
    if (best < 0) {
      r_[req].served = false;
      return -1;
    }
    r_[req].prefill_inst = best;
    // Busy: the instance that will decode it is decoding now (colocated: this one; disaggregated: every
    // decode instance has sequences, so whichever the router picks has).
    if (both_[best]) {
      r_[req].busy = inst_[best].running > 0;
    } else {
      r_[req].busy = !decoders_.empty();
      for (int d : decoders_) r_[req].busy = r_[req].busy && inst_[d].running > 0;
    }
    inst_[best].waiting.push_back(req);
    add_queued(best, q.in);
    return best;
  }

  bool fits(int i, const ReqState& q) const {
    return both_[i] ? cap_[i] >= held_whole(q) : cap_[i] >= held_prompt(q) && max_decoder_cap_ >= held_whole(q);
  }

  void add_queued(int i, double delta) {
    if (delta == 0) return;
    RouteClass& rc = classes_[class_of_[i]];
    rc.members.erase({queued_[i], i});
    queued_[i] += delta;
    rc.members.insert({queued_[i], i});
  }

  void kick(int i) {
    Inst& x = inst_[i];
    Role role = x.spec->role;
    if (role == Role::kDecode) {
      while (!x.pending.empty()) {
        int req = x.pending.front();
        double need = held_whole(r_[req]);
        if (x.slots >= x.spec->max_batch || x.kv_used + need > cap(i)) break;
        x.pending.pop_front();
        x.slots++;
        x.kv_used += need;
        Inst& p = inst_[r_[req].prefill_inst];
        double bw = std::min(p.spec->network_bandwidth, x.spec->network_bandwidth);
        double start = std::max({now_, p.link_free, x.link_free});
        double end = start + c_.cost.transfer_bytes(r_[req].in) / bw;
        p.link_free = x.link_free = end;
        push(end, 1, i, req);
      }
    } else {
      while (!x.waiting.empty()) {
        int req = x.waiting.front();
        double need = role == Role::kBoth ? held_whole(r_[req]) : held_prompt(r_[req]);
        if (x.slots >= x.spec->max_batch || x.kv_used + need > cap(i)) break;
        x.waiting.pop_front();
        x.slots++;
        x.kv_used += need;
        x.prefilling.push_back({req, 0, 0});
      }
    }
    if (!x.busy) start_step(i);
  }

  void start_step(int i) {
    Inst& x = inst_[i];
    for (int req : x.joining) {
      // Disaggregated: the client gets its first token from the decode instance once the KV is in
      // (docs/pd-protocol.md, decode-first), i.e. at the first step boundary after the transfer.
      if (x.spec->role == Role::kDecode) r_[req].first = now_;
      x.running++;
      x.context_sum += r_[req].in + 1;
      x.finish.push({x.step + (r_[req].out - 1) - 1, req});
    }
    x.joining.clear();
    StepShape s = decode_shape(x.running, 0);
    s.decode_context_sum = x.context_sum;
    double budget = c_.token_budget - x.running;
    x.assigned = 0;
    for (Chunk& ch : x.prefilling) {  // FCFS: once the budget is spent, nothing behind gets a chunk
      int left = r_[ch.req].in - ch.done;
      ch.chunk = static_cast<int>(std::min<double>(left, std::max(0.0, budget)));
      if (ch.chunk <= 0) break;
      x.assigned++;
      budget -= ch.chunk;
      add_prefill_chunk(s, c_.cost, ch.done, ch.chunk);
      if (ch.chunk == left) s.sampled += 1;
    }
    if (s.decode_seqs + s.prefill_tokens <= 0) return;
    const SimInstance& sp = *x.spec;
    double dt = step_seconds(sp.latency, step_work(c_.cost, s), sp.tp, sp.interconnect_bandwidth, c_.cost);
    if (!sp.decode_points.empty() && s.decode_seqs > 0) {
      // The measured decode step replaces the model's; the model's price of the prefill part stays.
      StepShape d = decode_shape(s.decode_seqs, 0);
      d.decode_context_sum = s.decode_context_sum;
      const double model = step_seconds(sp.latency, step_work(c_.cost, d), sp.tp, sp.interconnect_bandwidth, c_.cost);
      const double measured =
          *interpolate_decode(sp.decode_points, s.decode_seqs, s.decode_context_sum / s.decode_seqs);
      dt = std::max(measured, dt - model + measured);
    }
    if (!sp.prefill_points.empty() && s.prefill_tokens > 0) {
      // The measured prompt of the step's tokens, plus what the model says the actual chunks cost beyond it.
      StepShape part;
      part.prefill_tokens = s.prefill_tokens;
      part.prefill_positions = s.prefill_positions;
      part.prefill_past = s.prefill_past;
      part.prefill_window_positions = s.prefill_window_positions;
      part.prefill_window_past = s.prefill_window_past;
      part.prefill_seqs = s.prefill_seqs;
      part.sampled = s.sampled - s.decode_seqs;
      const auto price = [&](const StepShape& shape) {
        return step_seconds(sp.latency, step_work(c_.cost, shape), sp.tp, sp.interconnect_bandwidth, c_.cost);
      };
      const double fresh = price(prefill_shape(c_.cost, s.prefill_tokens, 1));
      const double model = price(part);
      const double measured = std::max(0.0, *interpolate_prefill(sp.prefill_points, s.prefill_tokens) + model - fresh);
      dt = std::max(measured, dt - model + measured);
    }
    dt += c_.token_overhead_s * s.decode_seqs;
    if (busy_instances_ > 0) dt *= 1 + c_.colocated_slowdown;  // another instance is mid-step
    x.busy = true;
    ++busy_instances_;
    ++steps_;
    push(now_ + dt, 0, i, -1);
  }

  void finish_request(int req) { r_[req].finish = now_; }

  void step_end(int i) {
    Inst& x = inst_[i];
    x.context_sum += x.running;
    while (!x.finish.empty() && x.finish.top().first <= x.step) {
      int req = x.finish.top().second;
      x.finish.pop();
      x.running--;
      x.slots--;
      x.context_sum -= r_[req].in + r_[req].out;
      x.kv_used -= held_whole(r_[req]);
      finish_request(req);
      if (x.spec->role == Role::kDecode) add_decode_load(i, -1);
    }
    size_t keep = 0;
    handoff_.clear();
    for (size_t k = 0; k < x.assigned; ++k) {
      Chunk& ch = x.prefilling[k];
      add_queued(i, -ch.chunk);
      ch.done += ch.chunk;
      ch.chunk = 0;
      if (ch.done < r_[ch.req].in) {
        x.prefilling[keep++] = ch;
        continue;
      }
      int req = ch.req;
      if (x.spec->role == Role::kBoth || r_[req].out == 1) r_[req].first = now_;
      if (x.spec->role == Role::kBoth) {
        if (r_[req].out == 1) {
          x.slots--;
          x.kv_used -= held_whole(r_[req]);
          finish_request(req);
        } else {
          r_[req].decode_inst = i;
          x.joining.push_back(req);
        }
      } else {
        x.slots--;  // the prefill slot is free; the KV stays until its transfer ends
        if (r_[req].out == 1) {
          x.kv_used -= held_prompt(r_[req]);
          finish_request(req);
        } else {
          handoff_.push_back(req);
        }
      }
    }
    x.prefilling.erase(x.prefilling.begin() + keep, x.prefilling.begin() + x.assigned);
    x.assigned = 0;
    x.step++;
    x.busy = false;
    --busy_instances_;
    for (int req : handoff_) {
      int d = pick_decoder(req);
      TS_CHECK(d >= 0);  // arrive() only routes requests some decoder can hold
      r_[req].decode_inst = d;
      inst_[d].pending.push_back(req);
      add_decode_load(d, +1);
      kick(d);
    }
    kick(i);
  }

  void transfer_done(int d, int req) {
    int p = r_[req].prefill_inst;
    inst_[p].kv_used -= held_prompt(r_[req]);
    inst_[d].joining.push_back(req);
    kick(p);
    kick(d);
  }

  const SimConfig& c_;
  std::vector<double> overhead_sorted_, busy_sorted_;
  std::vector<ReqState> r_;
  std::vector<Inst> inst_;
  std::vector<int> prefill_capable_, decoders_;
  std::vector<int> handoff_;  // scratch for step_end
  int busy_instances_ = 0;    // instances mid-step
  // Per instance, contiguous for the router's scan: prefill seconds per token, queued prompt tokens (waiting
  // or in progress), KV capacity, colocated or not.
  std::vector<double> spt_, queued_, cap_;
  std::vector<char> both_;
  double max_decoder_cap_ = 0;
  // Prefill-capable instances grouped by (rate, capacity, role), each ordered by (queued tokens, index).
  struct RouteClass {
    double spt, cap;
    bool both;
    std::set<std::pair<double, int>> members;
  };
  std::vector<RouteClass> classes_;
  // Decode instances grouped by (capacity, batch limit), each ordered by (slots held + queued, index).
  struct DecodeClass {
    double cap, max_batch;
    std::set<std::pair<int, int>> members;
  };
  std::vector<DecodeClass> decode_classes_;
  std::vector<int> dload_;
  std::vector<int> class_of_;  // index into classes_ (prefill-capable) or decode_classes_ (decode)
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  double now_ = 0;
  long seq_ = 0;
  long steps_ = 0;
  size_t rr_prefill_ = 0, rr_decode_ = 0;
};

// Nearest-rank percentile of sorted values.
double percentile(const std::vector<double>& sorted, double pct) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(pct / 100.0 * sorted.size()));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

LatencySummary summary(std::vector<double>& v, double pct) {
  std::sort(v.begin(), v.end());
  return {percentile(v, 50), percentile(v, 90), percentile(v, 99), percentile(v, pct)};
}

}  // namespace

Result<SimResult> simulate(const SimConfig& config, const std::vector<Request>& requests) {
  bool prefill = false, decode = false, both = false;
  for (size_t i = 0; i < config.instances.size(); ++i) {
    const SimInstance& s = config.instances[i];
    if (s.role == Role::kIdle) return invalid_argument(fmt::format("instance {} is idle; leave it out", i));
    if (s.tp < 1 || s.max_batch < 1 || !(s.kv_capacity_tokens > 0) || !(s.latency.flops_per_s > 0) ||
        !(s.latency.bytes_per_s > 0) || !(s.latency.overhead_s >= 0))
      return invalid_argument(
          fmt::format("instance {} ({}): needs tp, max_batch, KV capacity and rates > 0", i, s.pool));
    if (!s.prefill_points.empty() && !interpolate_prefill(s.prefill_points, 1).ok())
      return invalid_argument(fmt::format("instance {} ({}): prefill points need single-prompt points", i, s.pool));
    if (s.role == Role::kPrefill) prefill = true;
    if (s.role == Role::kDecode) {
      decode = true;
      if (!(s.network_bandwidth > 0)) return invalid_argument(fmt::format("instance {}: network bandwidth is 0", i));
    }
    if (s.role == Role::kPrefill && !(s.network_bandwidth > 0))
      return invalid_argument(fmt::format("instance {}: network bandwidth is 0", i));
    if (s.role == Role::kBoth) both = true;
  }
  if (!prefill && !both) return invalid_argument("no instance can prefill (need a prefill or both instance)");
  if (prefill != decode) return invalid_argument("prefill instances need decode instances and vice versa");
  if (config.token_budget < 1) return invalid_argument("token budget must be positive");
  if (!(config.request_overhead_s >= 0) || !(config.token_overhead_s >= 0) || !(config.stream_start_overhead_s >= 0))
    return invalid_argument("request, token and stream-start overheads must be >= 0");
  if (!(config.colocated_slowdown >= 0)) return invalid_argument("the colocated slowdown must be >= 0");
  for (double v : config.request_overhead_samples_s)
    if (!(v >= 0)) return invalid_argument("request overhead samples must be >= 0");
  for (double v : config.request_overhead_busy_samples_s)
    if (!(v >= 0)) return invalid_argument("request overhead samples must be >= 0");
  for (size_t i = 1; i < requests.size(); ++i)
    if (requests[i].arrival_s < requests[i - 1].arrival_s)
      return invalid_argument("requests must be sorted by arrival");
  for (const Request& r : requests)
    if (r.input_tokens < 1 || r.output_tokens < 1) return invalid_argument("request lengths must be >= 1");
  Sim sim(config, requests);
  return sim.run();
}

double offered_rate(const std::vector<Request>& requests) {
  if (requests.size() < 2) return static_cast<double>(requests.size());
  double span = requests.back().arrival_s - requests.front().arrival_s;
  return span > 0 ? (requests.size() - 1) / span : static_cast<double>(requests.size());
}

SloReport summarize(const SimResult& r, const Slo& slo, double rate) {
  SloReport rep;
  rep.offered_rate = rate;
  std::vector<double> ttft, tpot, e2e;
  int met = 0;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (const RequestOutcome& o : r.requests) {
    if (!o.served) {
      rep.unserved++;
      ttft.push_back(kInf);
      tpot.push_back(kInf);
      e2e.push_back(kInf);
      continue;
    }
    ttft.push_back(o.ttft_s);
    tpot.push_back(o.tpot_s);
    e2e.push_back(o.e2e_s);
    if (o.ttft_s <= slo.ttft_s && o.tpot_s <= slo.tpot_s) met++;
  }
  size_t n = r.requests.size();
  rep.attainment = n ? static_cast<double>(met) / n : 0;
  rep.goodput = rep.attainment * rate;
  rep.ttft = summary(ttft, slo.percentile);
  rep.tpot = summary(tpot, slo.percentile);
  rep.e2e = summary(e2e, slo.percentile);
  rep.meets_slo = n > 0 && rep.attainment >= slo.attainment - 1e-12 && rep.ttft.at_slo_percentile <= slo.ttft_s &&
                  rep.tpot.at_slo_percentile <= slo.tpot_s;
  return rep;
}

}  // namespace tessera::solver
