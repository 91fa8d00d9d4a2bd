// The measurements behind `tessera profile` (engine_profile.h).
#include "bench/engine_profile.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "api/kv_layout.h"
#include "engine/model_runner.h"

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

Status check_engine_profile_options(const EngineProfileOptions& o) {
  if (o.statistic != "min" && o.statistic != "median")
    return invalid_argument(fmt::format("unknown --statistic '{}'; known: min, median", o.statistic));
  if (o.repeats < 1 || o.max_tokens < 8 || o.max_batch < 1)
    return invalid_argument("--repeats, --max-tokens, --max-batch too small");
  return ok_status();
}

Status measure_engine_profile(ops::Device& device, const model::LoadedModel& model, const EngineProfileOptions& a,
                              solver::DeviceProfile& p) {
  TS_RETURN_IF_ERROR(check_engine_profile_options(a));
  auto pick = [&](const std::vector<double>& v) {
    return a.statistic == "min" ? *std::min_element(v.begin(), v.end()) : median(v);
  };
  auto pause = [&](double seconds) {
    if (a.pause) return a.pause(seconds);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  };
  const model::ModelConfig& c = model.config;
  const int max_tokens = std::min(a.max_tokens, c.max_seq_len - 1);
  engine::RunnerOptions ro;
  ro.max_batch_tokens = std::max(max_tokens, a.max_batch);
  ro.max_sequences = a.max_batch;
  // The KV the points use: max_batch sequences of at most max_tokens + repeats + 1 positions, not max_batch of the
  // model's whole context (llama3.2-1b records 131072 positions: 137 GB of f32 KV at the default batch of 16).
  ro.kv.num_blocks = a.max_batch * ((max_tokens + a.repeats + 1 + ro.kv.block_tokens - 1) / ro.kv.block_tokens);
  // The hand-off it times carries every layer's rows of every position, as a prefill/decode node's cache keeps them.
  ro.kv.window_kv = false;
  ro.kv.dtype = a.kv_dtype;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<engine::ModelRunner> runner,
                      engine::ModelRunner::create(device, c, model.weights, ro));
  engine::ModelRunner& r = *runner;
  p.source = "measured";
  p.model = model.name;
  p.kv_bytes_per_token = static_cast<double>(r.kv_cache().bytes_per_block()) / r.kv_cache().block_tokens();
  p.prefill.clear();
  p.decode.clear();

  std::vector<float> logits;
  auto tokens = [&](int n) { return std::vector<model::TokenId>(static_cast<size_t>(n), 1); };
  // A prefill node streams each layer's K and V out as soon as the layer is computed (docs/pd-protocol.md):
  // with prefill_export the timed prefill does the same (each layer exported into the canonical wire layout,
  // api/kv_layout.h, in link memory: one copy).
  // What a hand-off carries, as the engine's KV connectors lay it out (engine/internal/kv_parts.h): the K and V of the
  // layers that keep their own in order, each at its own width (gemma4's sliding layers are narrower), then a hybrid
  // model's recurrent state; every position of every layer (a decode node that keeps only its windows takes less).
  std::vector<int> carried;  // model layer of each carried layer
  std::vector<int> carried_index(static_cast<size_t>(c.n_layers), -1);
  std::vector<int> widths;
  int wire_dim = 0;
  bool whole_blocks = true;
  for (int l = 0; l < c.n_layers; ++l) {
    if (!c.keeps_kv(l)) continue;
    carried_index[static_cast<size_t>(l)] = static_cast<int>(carried.size());
    carried.push_back(l);
    widths.push_back(c.layer_kv_dim(l));
    wire_dim = std::max(wire_dim, c.layer_kv_dim(l));
    whole_blocks = whole_blocks && c.layer_kv_dim(l) % dtype_info(a.kv_dtype).block_elems == 0;
  }
  const size_t state_bytes = r.kv_cache().has_state() ? r.kv_cache().state_bytes_per_slot() : 0;
  // Rows cross in the decode cache's type (api::kv_wire_dtype; pd-link's wire_dtype()): this node's.
  const DType wire_dtype = api::kv_wire_dtype(a.kv_dtype) && whole_blocks ? a.kv_dtype : DType::kF32;
  auto wire_layout = [&](int positions) {
    return api::KvLayout{
        static_cast<int>(carried.size()), wire_dim, wire_dtype, positions, state_bytes, {}, -1, widths};
  };
  std::vector<uint8_t> staging;
  auto run_prefill = [&](engine::SequenceKv& seq, std::span<const model::TokenId> ids) -> Status {
    if (!a.prefill_export) return r.prefill(seq, ids, logits);
    const int first = seq.length, n = static_cast<int>(ids.size());
    TS_RETURN_IF_ERROR(r.kv_cache().reserve(seq, first + n));
    const api::KvLayout wire = wire_layout(n);
    staging.resize(wire.bytes());
    engine::Segment seg{&seq, ids, true};
    TS_RETURN_IF_ERROR(r.step(std::span(&seg, 1), logits, [&](int layer) -> Status {
      const int i = carried_index[static_cast<size_t>(layer)];
      if (i < 0) return ok_status();  // a linear layer (its state goes after the prompt), or one that shares K/V
      return r.export_kv(seq, layer, first, n, wire.dtype, staging.data() + wire.k_offset(i, 0),
                         staging.data() + wire.v_offset(i, 0));
    }));
    return state_bytes > 0 ? r.export_state(seq, staging.data() + wire.state_offset()) : ok_status();
  };
  std::vector<int> prompt_lengths;
  for (int t = 8; t <= max_tokens; t *= 2) prompt_lengths.push_back(t);
  if (prompt_lengths.back() != max_tokens) prompt_lengths.push_back(max_tokens);  // the longest prompt too
  for (int t : prompt_lengths) {
    std::vector<double> times;
    for (int k = 0; k < a.repeats; ++k) {
      engine::SequenceKv seq;
      auto ids = tokens(t);
      auto t0 = Clock::now();
      TS_RETURN_IF_ERROR(run_prefill(seq, ids));
      times.push_back(seconds_since(t0));
      r.release(seq);
      pause(times.back());
    }
    p.prefill.push_back({t, 1, pick(times)});
  }
  // Decode contexts: 8, 32, 128, ... and the longest one whose timed steps still fit the model's context, so
  // that steps of long prompts are read off a measured point rather than a line extended past the last one.
  std::vector<int> contexts;
  for (int ctx = 8; ctx <= max_tokens; ctx *= 4) contexts.push_back(ctx);
  if (const int top = std::min(max_tokens, c.max_seq_len - a.repeats - 1); top > contexts.back()) {
    contexts.push_back(top);
  }
  // Batches 1, 2, 3, 4, 8, 16, ...: every batch below 4, where the cpu backend changes kernels (a step of 3
  // costs what one of 2 does, one of 4 twice that), so no interpolation spans the jump.
  for (int b = 1; b <= a.max_batch; b = b < 4 ? b + 1 : b * 2) {
    for (int ctx : contexts) {
      std::vector<engine::SequenceKv> seqs(static_cast<size_t>(b));
      std::vector<engine::SequenceKv*> ptrs;
      for (auto& s : seqs) {
        auto ids = tokens(ctx - 1);
        TS_RETURN_IF_ERROR(r.prefill(s, ids, logits));
        ptrs.push_back(&s);
      }
      // Decode steps back to back, after one untimed step, as a node runs them while it has sequences to
      // decode (pausing between steps measured a step after idling, 10-25% slower here than a stream's).
      std::vector<double> times;
      auto step_ids = tokens(b);
      if (ptrs[0]->length < c.max_seq_len) TS_RETURN_IF_ERROR(r.decode(ptrs, step_ids, logits));
      double busy = 0;
      for (int k = 0; k < a.repeats && ptrs[0]->length < c.max_seq_len; ++k) {
        auto t0 = Clock::now();
        TS_RETURN_IF_ERROR(r.decode(ptrs, step_ids, logits));
        times.push_back(seconds_since(t0));
        busy += times.back();
      }
      pause(busy);
      for (auto& s : seqs) r.release(s);
      p.decode.push_back({b, ctx, pick(times)});
    }
  }
  if (a.network_gb_s > 0) {
    p.network_bandwidth = a.network_gb_s * 1e9;
  } else {
    // The same-host hand-off of a prompt's KV (docs/pd-protocol.md): export every layer to the wire layout (in
    // the cache's type), copy it once (the shm link), import it into paged blocks. Its rate stands for the link.
    engine::SequenceKv seq;
    auto ids = tokens(max_tokens);
    TS_RETURN_IF_ERROR(r.prefill(seq, ids, logits));
    const api::KvLayout layout = wire_layout(max_tokens);
    std::vector<uint8_t> sent(layout.bytes()), wire(layout.bytes());
    std::vector<double> times;
    for (int rep = 0; rep < std::max(3, a.repeats); ++rep) {
      auto t0 = Clock::now();
      for (size_t i = 0; i < carried.size(); ++i) {
        const int l = carried[i], li = static_cast<int>(i);
        uint8_t* k = sent.data() + layout.k_offset(li, 0);
        uint8_t* v = sent.data() + layout.v_offset(li, 0);
        TS_RETURN_IF_ERROR(r.export_kv(seq, l, 0, max_tokens, layout.dtype, k, v));
        // The link's one copy (shm), layer by layer as the prefill node sends it.
        std::copy(k, k + 2 * layout.half_bytes(li), wire.begin() + static_cast<std::ptrdiff_t>(layout.k_offset(li, 0)));
        TS_RETURN_IF_ERROR(r.import_kv(seq, l, 0, max_tokens, layout.dtype, wire.data() + layout.k_offset(li, 0),
                                       wire.data() + layout.v_offset(li, 0)));
      }
      if (state_bytes > 0) {  // the state section after the prompt's last layer
        uint8_t* out = sent.data() + layout.state_offset();
        TS_RETURN_IF_ERROR(r.export_state(seq, out));
        std::copy(out, out + state_bytes, wire.begin() + static_cast<std::ptrdiff_t>(layout.state_offset()));
        TS_RETURN_IF_ERROR(r.import_state(seq, wire.data() + layout.state_offset()));
      }
      times.push_back(seconds_since(t0));
      pause(times.back());
    }
    r.release(seq);
    p.network_bandwidth = static_cast<double>(layout.bytes()) / pick(times);
  }
  double weight_bytes = 0, params = 0;
  for (const auto& t : model.weights.tensors()) weight_bytes += t.bytes, params += static_cast<double>(t.numel());
  solver::ModelCost cost = solver::ModelCost::from_config(
      c, weight_bytes / params, p.kv_bytes_per_token / (2.0 * static_cast<double>(c.cached_kv_width())));
  TS_ASSIGN_OR_RETURN(auto fit, solver::fit_latency_model(cost, p.prefill, p.decode));
  p.latency = fit.first;
  p.fit = fit.second;
  return ok_status();
}

}  // namespace tessera::bench
