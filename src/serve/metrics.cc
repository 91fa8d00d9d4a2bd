#include "serve/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

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
  p::Family<p::Gauge>& tier_hit_rate =
      family_gauge("tessera_prefix_cache_tier_hit_rate", "Prompt tokens a cache tier supplied / looked-up tokens");
  p::Counter& kv_loaded;
  p::Counter& kv_shortfalls;
  p::Gauge& kv_loading;
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
        kv_loaded(counter("tessera_kv_loaded_tokens_total", "Prompt positions KV connectors filled")),
        kv_shortfalls(counter("tessera_kv_load_shortfalls_total",
                              "KV loads that brought fewer positions than promised (the rest computed here)")),
        kv_loading(gauge("tessera_kv_loading_requests", "Requests waiting for a KV connector's load")) {}

  p::Family<p::Counter>& family_counter(const std::string& name, const std::string& help) {
    return p::BuildCounter().Name(name).Help(help).Register(*registry);
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

  p::Counter& counter(const std::string& name, const std::string& help) {
    return p::BuildCounter().Name(name).Help(help).Register(*registry).Add(base);
  }
  p::Gauge& gauge(const std::string& name, const std::string& help) {
    return p::BuildGauge().Name(name).Help(help).Register(*registry).Add(base);
  }
  p::Histogram& histogram(const std::string& name, const std::string& help, std::vector<double> buckets) {
    return p::BuildHistogram().Name(name).Help(help).Register(*registry).Add(
        base, p::Histogram::BucketBoundaries(std::move(buckets)));
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
void Metrics::time_to_first_token(double s) { impl_->ttft.Observe(s); }
void Metrics::inter_token(double s, int tokens) {
  for (int i = 0; i < tokens; ++i) impl_->itl.Observe(s / tokens);
}
void Metrics::request_latency(double s) { impl_->e2e.Observe(s); }

std::string Metrics::render(const engine::EngineStats& s, const std::vector<engine::KvConnectorStats>& connectors) {
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
  }
  impl_->waiting.Set(s.waiting);
  impl_->running.Set(s.running);
  impl_->kv_used.Set(s.kv_blocks_used);
  impl_->kv_total.Set(s.kv_blocks_total);
  impl_->kv_cached.Set(s.kv_blocks_cached);
  impl_->kv_usage.Set(s.kv_blocks_total ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total : 0.0);
  impl_->kv_loading.Set(s.kv_loading);
  impl_->prefix_hit_rate.Set(queried > 0 ? static_cast<double>(s.prefix.hit_tokens + tier_hit_tokens) / queried : 0.0);
  return p::TextSerializer().Serialize(impl_->registry->Collect());
}

}  // namespace tessera::serve
