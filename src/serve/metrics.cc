#include "serve/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <cmath>
#include <mutex>

namespace tessera::serve {

namespace p = prometheus;

struct Metrics::Impl {
  std::shared_ptr<p::Registry> registry = std::make_shared<p::Registry>();
  p::Labels base;
  p::Family<p::Counter>& requests = p::BuildCounter()
                                        .Name("tessera_requests_total")
                                        .Help("Finished HTTP API requests by endpoint and status")
                                        .Register(*registry);
  p::Counter& prompt_tokens;
  p::Counter& generation_tokens;
  p::Counter& preemptions;
  p::Counter& prefix_queries;
  p::Counter& prefix_query_tokens;
  p::Counter& prefix_hit_tokens;
  p::Counter& prefix_evictions;
  p::Histogram& ttft;
  p::Histogram& itl;
  p::Histogram& e2e;
  p::Gauge& waiting;
  p::Gauge& running;
  p::Gauge& kv_used;
  p::Gauge& kv_total;
  p::Gauge& kv_cached;
  p::Gauge& kv_usage;
  p::Gauge& prefix_hit_rate;
  p::Gauge& prefix_enabled;
  p::Gauge& window_total;
  p::Gauge& window_used;
  p::Gauge& state_total;
  p::Gauge& state_used;
  p::Gauge& checkpoints_total;
  p::Gauge& checkpoints_used;
  // KV connectors, labelled by connector and tier.
  p::Family<p::Counter>& tier_hits =
      family_counter("tessera_kv_tier_hit_tokens_total", "Prompt tokens a KV connector's tier supplied");
  p::Family<p::Counter>& tier_load_bytes =
      family_counter("tessera_kv_tier_load_bytes_total", "Bytes moved from a KV tier towards the device cache");
  p::Family<p::Counter>& tier_save_bytes =
      family_counter("tessera_kv_tier_save_bytes_total", "Bytes moved into a KV tier");
  p::Family<p::Counter>& tier_load_seconds =
      family_counter("tessera_kv_tier_load_seconds_total", "Time spent loading from a KV tier");
  p::Family<p::Counter>& tier_save_seconds =
      family_counter("tessera_kv_tier_save_seconds_total", "Time spent saving into a KV tier");
  p::Family<p::Counter>& tier_evicted =
      family_counter("tessera_kv_tier_evicted_blocks_total", "Blocks dropped from a KV tier (moved down, or out)");
  p::Family<p::Counter>& tier_failed = family_counter(
      "tessera_kv_tier_failed_blocks_total", "Blocks found corrupt or unreadable on load (recomputed, never used)");
  p::Family<p::Gauge>& tier_blocks = family_gauge("tessera_kv_tier_blocks", "Blocks a KV tier holds");
  p::Family<p::Gauge>& tier_bytes = family_gauge("tessera_kv_tier_bytes", "Bytes a KV tier holds");
  p::Family<p::Gauge>& tier_capacity = family_gauge("tessera_kv_tier_capacity_bytes", "A KV tier's capacity");
  p::Family<p::Gauge>& tier_peer_blocks =
      family_gauge("tessera_kv_tier_peer_blocks", "Blocks other nodes hold in a shared KV tier that this node sees");
  p::Family<p::Gauge>& tier_hit_rate =
      family_gauge("tessera_prefix_cache_tier_hit_rate", "Prompt tokens a cache tier supplied / looked-up tokens");
  p::Counter& kv_loaded;
  p::Counter& kv_shortfalls;
  p::Gauge& kv_loading;
  p::Counter& grammar_tokens;
  p::Counter& grammar_seconds;
  p::Counter& jump_forward_tokens;

  // vLLM's names (vllm/v1/metrics/loggers.py, v0.11), label model_name.
  p::Labels vbase;
  p::Gauge& v_running;
  p::Gauge& v_waiting;
  p::Gauge& v_kv_usage;
  p::Counter& v_prefix_queries;
  p::Counter& v_prefix_hits;
  p::Counter& v_preemptions;
  p::Counter& v_prompt_tokens;
  p::Counter& v_generation_tokens;
  p::Family<p::Counter>& v_success = family_counter("vllm:request_success", "Finished requests by finished_reason");
  p::Histogram& v_ttft;
  p::Histogram& v_itl;
  p::Histogram& v_tpot;
  p::Histogram& v_e2e;
  p::Histogram& v_queue;
  p::Histogram& v_prefill;
  p::Histogram& v_decode;
  p::Histogram& v_inference;
  p::Histogram& v_prompt_len;
  p::Histogram& v_generation_len;

  // A PD node's series (serve/pd.h PdStats), created on the first render that has them.
  struct Pd {
    p::Family<p::Counter>& requests;
    p::Counter& router_choice;
    p::Counter& kv_bytes;
    p::Family<p::Counter>& kv_bytes_from;
    p::Counter& checksum_mismatches;
    p::Counter& cancelled;
    p::Counter& breaker_opened;
    p::Counter& breaker_skipped;
    p::Counter& transfer_seconds;
    p::Counter& deferred_reservations;
    p::Counter& prefill_compute_seconds;
    p::Counter& kv_exposed_seconds;
    p::Counter& kv_active_seconds;
    p::Counter& kv_verify_seconds;
    p::Family<p::Gauge>& role;
    std::string role_now;
  };
  std::unique_ptr<Pd> pd;
  std::mutex mu;  // serialises render()'s counter catch-up

  explicit Impl(const std::string& model)
      : base{{"model", model}},
        prompt_tokens(counter("tessera_prompt_tokens_total", "Prompt tokens computed (prefix-cache hits excluded)")),
        generation_tokens(counter("tessera_generation_tokens_total", "Tokens generated")),
        preemptions(counter("tessera_preemptions_total", "Sequences preempted for lack of KV blocks")),
        prefix_queries(counter("tessera_prefix_cache_queries_total", "Prefix cache lookups")),
        prefix_query_tokens(
            counter("tessera_prefix_cache_query_tokens_total", "Prompt tokens looked up in the prefix cache")),
        prefix_hit_tokens(counter("tessera_prefix_cache_hit_tokens_total", "Prompt tokens found in the prefix cache")),
        prefix_evictions(counter("tessera_prefix_cache_evictions_total", "Cached KV blocks evicted for reuse")),
        ttft(histogram("tessera_time_to_first_token_seconds", "Time from request arrival to the first token",
                       {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30})),
        itl(histogram("tessera_inter_token_latency_seconds", "Time between successive output tokens",
                      {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1})),
        e2e(histogram("tessera_e2e_request_latency_seconds", "Time from request arrival to its last token",
                      {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120})),
        waiting(gauge("tessera_requests_waiting", "Requests queued for admission")),
        running(gauge("tessera_requests_running", "Requests in the running batch")),
        kv_used(gauge("tessera_kv_blocks_used", "KV blocks held by requests")),
        kv_total(gauge("tessera_kv_blocks_total", "KV blocks in the cache")),
        kv_cached(gauge("tessera_kv_blocks_cached", "KV blocks registered in the prefix cache")),
        kv_usage(gauge("tessera_kv_cache_usage_ratio", "Fraction of KV blocks held by requests")),
        prefix_hit_rate(gauge("tessera_prefix_cache_hit_rate",
                              "Prompt tokens found in the prefix cache, every tier (device, host, disk) / looked-up "
                              "tokens")),
        prefix_enabled(gauge("tessera_prefix_cache_enabled",
                             "1 when prefix reuse is on; 0 when turned off (--no-prefix-cache, or for a hybrid model "
                             "--state-checkpoints 0 or a KV connector)")),
        window_total(gauge("tessera_kv_window_blocks_total",
                           "KV blocks of the sliding-window layers' own pool, when they keep only their windows (0 "
                           "otherwise)")),
        window_used(gauge("tessera_kv_window_blocks_used", "Sliding-window layers' KV blocks held by sequences")),
        state_total(gauge("tessera_recurrent_state_slots_total",
                          "Recurrent-state slots of a hybrid model (one per running sequence; 0 otherwise)")),
        state_used(gauge("tessera_recurrent_state_slots_used", "Recurrent-state slots held by sequences")),
        checkpoints_total(gauge("tessera_state_checkpoints_total",
                                "Recurrent-state checkpoints a hybrid model's prefix reuse may keep (0 otherwise)")),
        checkpoints_used(
            gauge("tessera_state_checkpoints_used", "Recurrent-state checkpoints holding a prompt's state")),
        kv_loaded(counter("tessera_kv_loaded_tokens_total", "Prompt positions KV connectors filled")),
        kv_shortfalls(counter("tessera_kv_load_shortfalls_total",
                              "KV loads that brought fewer positions than promised (the rest computed here)")),
        kv_loading(gauge("tessera_kv_loading_requests", "Requests waiting for a KV connector's load")),
        grammar_tokens(counter("tessera_grammar_tokens", "Tokens sampled under a structured-output grammar", {})),
        grammar_seconds(counter("tessera_grammar_seconds",
                                "Engine time computing those tokens' masks and advancing the grammars", {})),
        jump_forward_tokens(counter("tessera_grammar_jump_forward_tokens",
                                    "Tokens a grammar forced, appended without a model step", {})),
        vbase{{"model_name", model}},
        v_running(gauge("vllm:num_requests_running", "Requests in the running batch", vbase)),
        v_waiting(gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled", vbase)),
        v_kv_usage(gauge("vllm:kv_cache_usage_perc", "KV cache usage: 1 means every block is held", vbase)),
        v_prefix_queries(counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache", vbase)),
        v_prefix_hits(counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache", vbase)),
        v_preemptions(counter("vllm:num_preemptions", "Preemptions for lack of KV blocks", vbase)),
        v_prompt_tokens(counter("vllm:prompt_tokens", "Prompt tokens computed", vbase)),
        v_generation_tokens(counter("vllm:generation_tokens", "Tokens generated", vbase)),
        v_ttft(histogram("vllm:time_to_first_token_seconds", "Time to the first token", kLatencyBuckets, vbase)),
        v_itl(histogram("vllm:inter_token_latency_seconds", "Time between successive output tokens", kTokenBuckets,
                        vbase)),
        v_tpot(histogram("vllm:request_time_per_output_token_seconds",
                         "A request's decode time per output token after the first", kTokenBuckets, vbase)),
        v_e2e(histogram("vllm:e2e_request_latency_seconds", "Time from arrival to the last token", kRequestBuckets,
                        vbase)),
        v_queue(histogram("vllm:request_queue_time_seconds", "Time waiting to be scheduled", kRequestBuckets, vbase)),
        v_prefill(histogram("vllm:request_prefill_time_seconds", "Time from scheduling to the first token",
                            kRequestBuckets, vbase)),
        v_decode(histogram("vllm:request_decode_time_seconds", "Time from the first token to the last", kRequestBuckets,
                           vbase)),
        v_inference(histogram("vllm:request_inference_time_seconds", "Time from scheduling to the last token",
                              kRequestBuckets, vbase)),
        v_prompt_len(
            histogram("vllm:request_prompt_tokens", "Prompt length of finished requests", kLengthBuckets, vbase)),
        v_generation_len(histogram("vllm:request_generation_tokens", "Generated length of finished requests",
                                   kLengthBuckets, vbase)) {}

  static inline const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
                                                             0.5,   0.75,  1,    2.5,  5,    10,   20,   40,  80};
  static inline const std::vector<double> kTokenBuckets = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04,
                                                           0.05,  0.075,  0.1,   0.2,  0.4,   0.8,  1,    2.5};
  static inline const std::vector<double> kRequestBuckets = {0.01, 0.05, 0.1, 0.25, 0.5, 1,   2.5, 5,
                                                             10,   20,   40,  60,   120, 240, 480};
  static inline const std::vector<double> kLengthBuckets = {1,    2,    5,    10,    20,    50,    100,    200,   500,
                                                            1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000};

  Pd& pd_series() {
    if (!pd) {
      pd.reset(new Pd{
          family_counter("tessera_pd_requests", "Requests by where their prompt was prefilled"),
          counter("tessera_pd_router_choice", "Remote prefills done on the prefill node the router named", {}),
          counter("tessera_pd_kv_bytes", "KV bytes received from prefill nodes", {}),
          family_counter("tessera_pd_kv_bytes_from", "KV bytes received, by the prefill node that sent them"),
          counter("tessera_pd_checksum_mismatches", "KV transfers rejected by their checksum", {}),
          counter("tessera_pd_cancelled", "Requests whose client left before their prompt was prefilled", {}),
          counter("tessera_pd_breaker_opened", "Times a prefill node's breaker opened (timeouts or errors)", {}),
          counter("tessera_pd_breaker_skipped", "Prefill calls not sent because the node's breaker was open", {}),
          counter("tessera_pd_transfer_seconds", "Time from asking a prefill node to holding its KV", {}),
          counter("tessera_pd_deferred_reservations", "Remote prefills whose KV blocks could not be reserved up front",
                  {}),
          counter("tessera_pd_prefill_compute_seconds", "Prefill node time computing remote prompts", {}),
          counter("tessera_pd_kv_exposed_seconds", "KV transfer time not hidden behind prefill compute", {}),
          counter("tessera_pd_kv_active_seconds", "First KV write issued to last completed, per request", {}),
          counter("tessera_pd_kv_verify_seconds", "Checksumming and copying received KV out of staging", {}),
          family_gauge("tessera_node_role", "The node's current role (changes with POST /admin/role)"),
          {}});
    }
    return *pd;
  }

  p::Family<p::Counter>& family_counter(const std::string& name, const std::string& help) {
    const std::string full = name.ends_with("_total") ? name : name + "_total";
    return p::BuildCounter().Name(full).Help(help).Register(*registry);
  }
  p::Family<p::Gauge>& family_gauge(const std::string& name, const std::string& help) {
    return p::BuildGauge().Name(name).Help(help).Register(*registry);
  }
  p::Labels tier_labels(const std::string& connector, const std::string& tier) const {
    p::Labels l = base;
    l["connector"] = connector;
    l["tier"] = tier;
    return l;
  }

  // prometheus-cpp appends no suffix: counters are named with `_total` here (`name` without it).
  p::Counter& counter(const std::string& name, const std::string& help) { return counter(name, help, base); }
  p::Counter& counter(const std::string& name, const std::string& help, const p::Labels& labels) {
    const std::string full = name.ends_with("_total") ? name : name + "_total";
    return p::BuildCounter().Name(full).Help(help).Register(*registry).Add(labels);
  }
  p::Gauge& gauge(const std::string& name, const std::string& help, const p::Labels& labels) {
    return p::BuildGauge().Name(name).Help(help).Register(*registry).Add(labels);
  }
  p::Gauge& gauge(const std::string& name, const std::string& help) { return gauge(name, help, base); }
  p::Histogram& histogram(const std::string& name, const std::string& help, std::vector<double> buckets,
                          const p::Labels& labels) {
    return p::BuildHistogram().Name(name).Help(help).Register(*registry).Add(
        labels, p::Histogram::BucketBoundaries(std::move(buckets)));
  }
  p::Histogram& histogram(const std::string& name, const std::string& help, std::vector<double> buckets) {
    return histogram(name, help, std::move(buckets), base);
  }
  // Engine counters are cumulative; Prometheus counters only go up by increments.
  static void catch_up(p::Counter& c, double total) {
    if (total > c.Value()) c.Increment(total - c.Value());
  }
};

Metrics::Metrics(std::string model_name) : impl_(std::make_unique<Impl>(model_name)) {}
Metrics::~Metrics() = default;

void Metrics::request_finished(std::string_view endpoint, int status) {
  p::Labels l = impl_->base;
  l["endpoint"] = std::string(endpoint);
  l["status"] = std::to_string(status);
  impl_->requests.Add(l).Increment();
}
void Metrics::time_to_first_token(double s) {
  impl_->ttft.Observe(s);
  impl_->v_ttft.Observe(s);
}
void Metrics::inter_token(double s, int tokens) {
  for (int i = 0; i < tokens; ++i) {
    impl_->itl.Observe(s / tokens);
    impl_->v_itl.Observe(s / tokens);
  }
}
void Metrics::request_latency(double s) {
  impl_->e2e.Observe(s);
  impl_->v_e2e.Observe(s);
}

void Metrics::request_done(const engine::RequestOutput& o) {
  Impl& m = *impl_;
  // vLLM's finished_reason values: stop, length, abort (a cancellation or an error).
  const std::string_view reason = o.finish == engine::FinishReason::kStop     ? "stop"
                                  : o.finish == engine::FinishReason::kLength ? "length"
                                                                              : "abort";
  p::Labels l = m.vbase;
  l["finished_reason"] = std::string(reason);
  m.v_success.Add(l).Increment();
  if (reason == "abort") return;
  m.v_prompt_len.Observe(o.prompt_tokens);
  m.v_generation_len.Observe(o.completion_tokens);
  m.v_queue.Observe(o.timing.queued);
  m.v_prefill.Observe(o.timing.prefill);
  m.v_decode.Observe(o.timing.decode);
  m.v_inference.Observe(o.timing.prefill + o.timing.decode);
  if (o.completion_tokens > 1) m.v_tpot.Observe(o.timing.decode / (o.completion_tokens - 1));
}

std::string Metrics::render(const engine::EngineStats& s, const std::vector<engine::KvConnectorStats>& connectors,
                            const PdStats* pd, std::string_view role) {
  uint64_t tier_hit_tokens = 0;  // cache tiers beyond the device
  const double queried = static_cast<double>(s.prefix.query_tokens);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    Impl::catch_up(impl_->kv_loaded, static_cast<double>(s.kv_loaded_tokens));
    Impl::catch_up(impl_->kv_shortfalls, static_cast<double>(s.kv_load_shortfalls));
    for (const engine::KvConnectorStats& c : connectors) {
      for (const engine::KvTierStats& t : c.tiers) {
        const p::Labels l = impl_->tier_labels(c.connector, t.tier);
        Impl::catch_up(impl_->tier_hits.Add(l), static_cast<double>(t.hit_tokens));
        Impl::catch_up(impl_->tier_load_bytes.Add(l), static_cast<double>(t.load_bytes));
        Impl::catch_up(impl_->tier_save_bytes.Add(l), static_cast<double>(t.save_bytes));
        Impl::catch_up(impl_->tier_load_seconds.Add(l), t.load_seconds);
        Impl::catch_up(impl_->tier_save_seconds.Add(l), t.save_seconds);
        Impl::catch_up(impl_->tier_evicted.Add(l), static_cast<double>(t.evicted_blocks));
        Impl::catch_up(impl_->tier_failed.Add(l), static_cast<double>(t.failed_blocks));
        impl_->tier_blocks.Add(l).Set(static_cast<double>(t.blocks));
        impl_->tier_bytes.Add(l).Set(static_cast<double>(t.bytes));
        impl_->tier_capacity.Add(l).Set(static_cast<double>(t.capacity_bytes));
        if (t.shared) impl_->tier_peer_blocks.Add(l).Set(static_cast<double>(t.peer_blocks));
        if (!t.prefix_cache) continue;
        tier_hit_tokens += t.hit_tokens;
        impl_->tier_hit_rate.Add(impl_->tier_labels(c.connector, t.tier))
            .Set(queried > 0 ? static_cast<double>(t.hit_tokens) / queried : 0.0);
      }
    }
    impl_->tier_hit_rate.Add(impl_->tier_labels("engine", "device"))
        .Set(queried > 0 ? static_cast<double>(s.prefix.hit_tokens) / queried : 0.0);
    Impl::catch_up(impl_->prompt_tokens, static_cast<double>(s.prompt_tokens));
    Impl::catch_up(impl_->generation_tokens, static_cast<double>(s.generated_tokens));
    Impl::catch_up(impl_->preemptions, static_cast<double>(s.preemptions));
    Impl::catch_up(impl_->prefix_queries, static_cast<double>(s.prefix.queries));
    Impl::catch_up(impl_->prefix_query_tokens, static_cast<double>(s.prefix.query_tokens));
    Impl::catch_up(impl_->prefix_hit_tokens, static_cast<double>(s.prefix.hit_tokens));
    Impl::catch_up(impl_->prefix_evictions, static_cast<double>(s.prefix.evictions));
    Impl::catch_up(impl_->grammar_tokens, static_cast<double>(s.grammar_tokens));
    Impl::catch_up(impl_->grammar_seconds, s.grammar_seconds);
    Impl::catch_up(impl_->jump_forward_tokens, static_cast<double>(s.jump_forward_tokens));
    Impl::catch_up(impl_->v_prompt_tokens, static_cast<double>(s.prompt_tokens));
    Impl::catch_up(impl_->v_generation_tokens, static_cast<double>(s.generated_tokens));
    Impl::catch_up(impl_->v_preemptions, static_cast<double>(s.preemptions));
    Impl::catch_up(impl_->v_prefix_queries, static_cast<double>(s.prefix.query_tokens));
    Impl::catch_up(impl_->v_prefix_hits, static_cast<double>(s.prefix.hit_tokens + tier_hit_tokens));
    if (pd != nullptr) {
      Impl::Pd& m = impl_->pd_series();
      Impl::catch_up(m.requests.Add({{"path", "remote"}}), static_cast<double>(pd->remote));
      Impl::catch_up(m.requests.Add({{"path", "local"}}), static_cast<double>(pd->local));
      Impl::catch_up(m.requests.Add({{"path", "fallback"}}), static_cast<double>(pd->fallbacks));
      Impl::catch_up(m.router_choice, static_cast<double>(pd->router_choice));
      Impl::catch_up(m.kv_bytes, static_cast<double>(pd->kv_bytes));
      for (const auto& [url, bytes] : pd->kv_bytes_from)
        Impl::catch_up(m.kv_bytes_from.Add({{"prefill", url}}), static_cast<double>(bytes));
      Impl::catch_up(m.checksum_mismatches, static_cast<double>(pd->checksum_mismatches));
      Impl::catch_up(m.cancelled, static_cast<double>(pd->cancelled));
      Impl::catch_up(m.breaker_opened, static_cast<double>(pd->breaker_opened));
      Impl::catch_up(m.breaker_skipped, static_cast<double>(pd->breaker_skipped));
      Impl::catch_up(m.transfer_seconds, pd->transfer_seconds);
      Impl::catch_up(m.deferred_reservations, static_cast<double>(pd->deferred_reservations));
      Impl::catch_up(m.prefill_compute_seconds, pd->prefill_compute_seconds);
      Impl::catch_up(m.kv_exposed_seconds, pd->kv_exposed_seconds);
      Impl::catch_up(m.kv_active_seconds, pd->kv_active_seconds);
      Impl::catch_up(m.kv_verify_seconds, pd->kv_verify_seconds);
      if (m.role_now != role) {  // one series: the current role
        if (!m.role_now.empty()) m.role.Remove(&m.role.Add({{"role", m.role_now}}));
        m.role_now = std::string(role);
        m.role.Add({{"role", m.role_now}}).Set(1);
      }
    }
  }
  impl_->waiting.Set(s.waiting);
  impl_->running.Set(s.running);
  impl_->kv_used.Set(s.kv_blocks_used);
  impl_->kv_total.Set(s.kv_blocks_total);
  impl_->kv_cached.Set(s.kv_blocks_cached);
  impl_->prefix_enabled.Set(s.prefix_cache_enabled ? 1 : 0);
  impl_->window_total.Set(s.window_blocks_total);
  impl_->window_used.Set(s.window_blocks_used);
  impl_->state_total.Set(s.state_slots_total);
  impl_->state_used.Set(s.state_slots_used);
  impl_->checkpoints_total.Set(s.state_checkpoints_total);
  impl_->checkpoints_used.Set(s.state_checkpoints_used);
  impl_->kv_usage.Set(s.kv_blocks_total ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total : 0.0);
  impl_->kv_loading.Set(s.kv_loading);
  impl_->v_running.Set(s.running);
  impl_->v_waiting.Set(s.waiting);
  impl_->v_kv_usage.Set(s.kv_blocks_total ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total : 0.0);
  impl_->prefix_hit_rate.Set(queried > 0 ? static_cast<double>(s.prefix.hit_tokens + tier_hit_tokens) / queried : 0.0);
  return p::TextSerializer().Serialize(impl_->registry->Collect());
}

}  // namespace tessera::serve
