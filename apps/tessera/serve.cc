// `tessera serve`: one node serving the OpenAI API from one model on one backend.
#include <CLI/CLI.hpp>

#include <filesystem>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <fmt/core.h>

#include "auth_flags.h"
#include "backend_auto.h"
#include "base/dtype.h"
#include "base/log.h"
#include "commands.h"
#include "ctrl/registry.h"
#include "ctrl/store.h"
#include "engine/activation_dump.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "link/discovery.h"
#include "model/loader.h"
#include "ops/registry.h"
#include "serve/chat_setup.h"
#include "serve/kv_budget.h"
#include "serve/node_server.h"
#include "serve/pd.h"
#include "serve_flags.h"
#include "serve_kv.h"

namespace tessera::cli {
namespace {

int run_serve(const ServeArgs& a) {
  // Signals are taken synchronously by this thread: block them before any other thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto token = cluster_token_from_flag(a.cluster_token_file);
  if (!token.ok()) return fail(token.status().message());
  if (Status s = check_tls_flags(a.tls_cert, a.tls_key); !s.ok()) return fail(s.message());
  auto store_auth = store_auth_from_flags(*token, a.tls_ca, a.etcd_user, a.etcd_password_file);
  if (!store_auth.ok()) return fail(store_auth.status().message());
  if (a.model.empty())
    return fail(
        "no model given: tessera serve MODEL (a GGUF file, a Hugging Face folder, or ORG/NAME from the local "
        "Hugging Face cache)");
  auto model = model::load_model(a.model, a.tokenizer);
  if (!model.ok()) return fail(model.status().message());
  // Say which files were loaded: relative paths and directories hide which checkpoint a node serves.
  log::info("loaded {} ({}), tokenizer {}",
            std::filesystem::absolute(model->checkpoint_path).lexically_normal().string(), model->format,
            std::filesystem::absolute(model->tokenizer_path).lexically_normal().string());
  if (a.embeddings && a.runner == "generate") return fail("--embeddings is --runner pooling, not generate");
  auto embedding = serve::resolve_embedding_serving(a.embeddings ? "pooling" : a.runner, a.pooling, a.matryoshka,
                                                    model->embedding, model->config);
  if (!embedding.ok()) return fail(embedding.status().message());
  if (embedding->enabled && (a.role != "both" || a.role_switchable))
    return fail("an embedding node computes each input whole: --role both only");
  ops::DeviceOptions dopts;
  dopts.threads = a.threads;
  const Result<DType> kv_type = cli::kv_cache_type(a);
  if (!kv_type.ok()) return fail(kv_type.status().message());
  auto chosen = open_backend(a.backend, model->config, model->weights, dopts, *kv_type);
  if (!chosen.ok()) return fail(chosen.status().message());
  if (embedding->enabled) {
    const bool encoder = !model->config.causal;
    if (std::string missing = engine::missing_embedding_ops(*chosen->device, encoder); !missing.empty()) {
      if (a.backend != "auto")
        return fail(
            fmt::format("the {} backend has no {} kernel for embeddings; use --backend cpu", chosen->name, missing));
      // auto: the fastest backend that runs the embedding operators (cpu and ref run all of them).
      const std::string passed = chosen->name;
      chosen = open_backend("cpu", model->config, model->weights, dopts);
      if (!chosen.ok()) return fail(chosen.status().message());
      chosen->reason = fmt::format("auto: cpu ({} has no {} kernel)", passed, missing);
    }
    log::info("embeddings: pooling {}, {}normalised{}", model::pooling_name(embedding->pooling),
              embedding->normalize ? "" : "not ", embedding->matryoshka ? ", matryoshka dimensions" : "");
  }
  auto& device = chosen->device;
  const std::string& backend = chosen->name;
  if (!chosen->reason.empty()) log::info("backend {}", chosen->reason);
  // KV budget, recurrent-state slots and the served context (serve/kv_budget.h).
  model::ModelConfig cfg = model->config;
  uint64_t weight_bytes = 0;
  for (const model::WeightTensor& t : model->weights.tensors()) weight_bytes += t.bytes;
  // KV tiers and the pool keep every layer's rows of whole blocks: with them, sliding-window layers keep every
  // position (a prefill/decode role's hand-off moves a request's rows and works with windows).
  const bool window_kv = !a.whole_sliding_kv && !serve_keeps_kv_blocks(a);
  const auto kv_budget =
      serve::plan_kv_budget(cfg,
                            {a.kv_memory_mib, a.kv_memory_fraction, a.max_model_len, a.max_num_seqs, a.block_size,
                             *kv_type, window_kv, a.max_batch_tokens, a.state_checkpoints,
                             // state checkpoints: the host tiers keep them beside their blocks, the pool in
                             // state slots of its own, a PD role sends or takes the state after the prompt
                             !a.no_prefix_cache && !a.role_switchable},
                            device->info().memory_bytes,
                            static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE), weight_bytes);
  if (!kv_budget.ok()) return fail(kv_budget.status().message());
  for (const std::string& line : kv_budget->info) log::info("{}", line);
  for (const std::string& line : kv_budget->warnings) log::warn("{}", line);
  cfg.max_seq_len = kv_budget->max_seq_len;

  engine::RunnerOptions ro;
  ro.max_batch_tokens = a.max_batch_tokens;
  // A step samples one row per sequence. At least the old default's 256 rows: imported KV (PD) can take the
  // running set past --max-num-seqs, and the scheduler then spreads those sequences over steps.
  ro.max_logit_rows = std::min(a.max_batch_tokens, std::max(a.max_num_seqs, 256));
  ro.graph = a.graph == "on";
  ro.deterministic = a.deterministic;
  if (a.deterministic)
    log::info(
        "deterministic: prompts attend through the decode kernels, so a reply has the same bits whatever the "
        "prefix cache held (prefill is slower)");
  ro.kv.block_tokens = a.block_size;
  ro.kv.prefix_cache = !a.no_prefix_cache;
  if (!a.weight_dtype.empty()) ro.weight_dtype = parse_dtype(a.weight_dtype);
  ro.kv.dtype = *kv_type;
  // Parity debugging (docs/models.md): every step's activations to files, steps eager.
  if (const char* dump = std::getenv("TESSERA_DUMP_ACTIVATIONS"); dump != nullptr && *dump != '\0') {
    ro.activation_tap = engine::activation_file_dump(dump);
    log::warn("TESSERA_DUMP_ACTIVATIONS: writing every step's activations to {}", dump);
  }
  ro.kv.state_slots = kv_budget->state_slots;
  ro.kv.state_checkpoints = kv_budget->state_checkpoints;
  ro.kv.num_blocks = kv_budget->num_blocks;
  ro.kv.window_kv = kv_budget->window_blocks > 0;
  ro.kv.window_blocks = kv_budget->window_blocks;
  auto runner = engine::ModelRunner::create(*device, cfg, model->weights, ro);
  if (!runner.ok()) return fail(runner.status().message());

  engine::EngineOptions eo;
  eo.scheduler.max_batch_tokens = a.max_batch_tokens;
  eo.scheduler.max_running = a.max_num_seqs;
  eo.scheduler.max_step_sequences = ro.max_logit_rows;
  eo.admission_window = std::chrono::microseconds(static_cast<int64_t>(a.admission_window_ms * 1000));
  eo.admission_gap = std::chrono::microseconds(static_cast<int64_t>(a.admission_gap_ms * 1000));
  eo.scheduler.max_waiting = a.max_queue;
  eo.end_of_generation = model->generation.end_of_generation;
  eo.jump_forward = a.jump_forward == "on";
  engine::Engine engine(**runner, *model->tokenizer, eo);
  // Where the link endpoints (pd-link's, the KV pool's) listen.
  const std::string link_host = !a.link_host.empty()                      ? a.link_host
                                : (a.host == "0.0.0.0" || a.host == "::") ? std::string("127.0.0.1")
                                                                          : a.host;
  if (Status s = attach_kv_tiers(engine, a, cfg, model->weights, backend, link_host, *token, *store_auth); !s.ok())
    return fail(s.message());

  serve::NodeOptions no;
  no.model_name = a.served_names.empty() ? model->name : a.served_names.front();
  if (a.served_names.size() > 1) no.model_aliases.assign(a.served_names.begin() + 1, a.served_names.end());
  no.device = device->info().name;
  no.http.host = a.host;
  no.http.port = static_cast<uint16_t>(a.port);
  no.http.io_threads = a.io_threads;
  auto origins = parse_allowed_origins(a.allowed_origins);
  if (!origins.ok()) return fail(origins.status().message());
  no.http.allowed_origins = *origins;
  no.http.tls_cert_file = a.tls_cert;
  no.http.tls_key_file = a.tls_key;
  no.api_keys = a.api_keys;
  no.cluster_token = *token;
  no.backend = backend;
  no.embeddings = *embedding;
  // The model's recommended sampling (generation_config.json, GGUF general.sampling.*) replaces the OpenAI
  // defaults for fields a request leaves out.
  const model::GenerationDefaults& gd = model->generation;
  if (gd.temperature) no.default_sampling.temperature = *gd.temperature;
  if (gd.top_p) no.default_sampling.top_p = *gd.top_p;
  if (gd.top_k) no.default_sampling.top_k = *gd.top_k;
  if (gd.min_p) no.default_sampling.min_p = *gd.min_p;
  if (!gd.source.empty())
    log::info("default sampling from {}: temperature {}, top_p {}, top_k {}, min_p {}", gd.source,
              no.default_sampling.temperature, no.default_sampling.top_p, no.default_sampling.top_k,
              no.default_sampling.min_p);
  // Chat: the template, reasoning and tool-call parsers (serve/chat_setup.h).
  serve::ChatSetupFlags chat_flags{a.chat_template, a.reasoning_parser, a.tool_call_parser, a.template_limits};
  chat_flags.limits.max_memory_bytes = static_cast<uint64_t>(a.template_max_memory_mib * 1024 * 1024);
  auto chat = serve::choose_chat_setup(chat_flags, model::model_chat_info(*model));
  if (!chat.ok()) return fail(chat.status().message());
  for (const std::string& line : chat->info) log::info("{}", line);
  for (const std::string& line : chat->warnings) log::warn("{}", line);
  no.chat = std::move(chat->formatter);
  no.reasoning = chat->reasoning;
  no.tool_parser = chat->tool_parser;
  no.template_threads = a.template_threads;
  std::unique_ptr<serve::PdService> pd;
  if (a.role != "both" || a.role_switchable) {
    serve::PdOptions po;
    po.role = a.role;
    po.switchable = a.role_switchable;
    po.model_name = no.model_name;
    po.prefill_urls = a.prefill_nodes;
    po.min_remote_tokens = a.pd_min_tokens;
    po.staging_bytes = static_cast<size_t>(a.pd_staging_mib * 1024 * 1024);
    po.overlap = a.pd_overlap == "on";
    po.transfer_timeout_ms = a.pd_timeout_ms;
    po.link_endpoints = a.link_endpoints;
    po.link_host = link_host;
    po.prefill_from_router = !a.ctrl.empty();
    po.cluster_token = *token;
    auto created = serve::PdService::create(engine, po);
    if (!created.ok()) return fail(created.status().message());
    pd = std::move(created).value();
    no.pd = pd.get();
  }
  // POST /admin/role re-registers the node under its new role (serve/role_admin.h): same key, new value, so a
  // router sees the node updated rather than gone and back.
  std::unique_ptr<ctrl::Registration> registration;
  ctrl::NodeInfo info;
  std::mutex registration_mu;
  no.on_role_change = [&](const std::string& role) -> Status {
    std::lock_guard<std::mutex> lock(registration_mu);
    if (!registration) return ok_status();
    info.role = role;
    return registration->update(info.to_json());
  };
  serve::NodeServer node(engine, no);
  engine.start();
  if (Status s = node.start(); !s.ok()) return fail(s.message());
  // Control plane: this node's entry, kept alive by a lease while the process lives (routers discover it
  // there); revoked first on shutdown so that no router sends it new requests while it drains.
  std::unique_ptr<ctrl::Store> ctrl_store;
  if (!a.ctrl.empty()) {
    auto store = ctrl::make_store_from_flag(a.ctrl, *store_auth);
    if (!store.ok()) return fail(store.status().message());
    ctrl_store = std::move(store).value();
    std::lock_guard<std::mutex> lock(registration_mu);
    info.address = a.advertise_url.empty()
                       ? fmt::format("{}://{}:{}", a.tls_cert.empty() ? "http" : "https", a.host, node.port())
                       : a.advertise_url;
    info.id = fmt::format("{}-{}", a.role, info.address.substr(info.address.find("//") + 2));
    info.role = pd ? pd->role() : a.role;  // the key keeps the starting role; the value follows changes
    info.backend = backend;
    info.capacity = ro.kv.num_blocks;
    info.host_id = link::local_host_id();
    info.models = no.served_names();
    auto reg = ctrl::Registration::create(*ctrl_store, ctrl::kNodesPrefix + info.id, info.to_json(),
                                          std::chrono::milliseconds(a.ctrl_ttl_ms));
    if (!reg.ok())
      return fail(fmt::format("cannot register with the control plane {}: {}", a.ctrl, reg.status().message()));
    registration = std::move(reg).value();
  }
  warn_if_open(*token, "serve", "/internal/pd/* and the link port");
  std::printf("tessera serve: %s node, model %s (%s backend, %d KV blocks of %d tokens) listening on %s://%s:%u\n",
              a.role.c_str(), no.model_name.c_str(), backend.c_str(), ro.kv.num_blocks, a.block_size,
              a.tls_cert.empty() ? "http" : "https", a.host.c_str(), node.port());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  log::info("{} received, draining (up to {} ms)", sig == SIGTERM ? "SIGTERM" : "SIGINT", a.shutdown_grace_ms);
  {
    std::lock_guard<std::mutex> lock(registration_mu);
    registration.reset();
  }
  node.stop(a.shutdown_grace_ms);
  engine.stop();
  log::info("stopped");
  return 0;
}

}  // namespace

Action add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over the OpenAI-compatible HTTP API");
  add_serve_flags(cmd, args.get());
  return [args] { return run_serve(*args); };
}

}  // namespace tessera::cli
