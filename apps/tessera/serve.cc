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

#include "api/kv_layout.h"
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
#include "kv/host/host_connector.h"
#include "kv/host/model_identity.h"
#include "kv/registry.h"
#include "link/discovery.h"
#include "model/chat_template.h"
#include "model/loader.h"
#include "ops/registry.h"
#include "serve/chat_format.h"
#include "serve/node_server.h"
#include "serve/pd.h"
#include "serve/tool_parsers/tool_parser.h"

namespace tessera::cli {
namespace {

struct ServeArgs {
  std::string model;
  std::string tokenizer;
  std::string backend = "auto";
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string role = "both";
  bool role_switchable = false;
  std::vector<std::string> served_names;  // vLLM's --served-model-name A [B ...]: the first is reported
  int max_num_seqs = 64;
  // llama-server's n_batch: a burst of prompts is prefilled in one step, so its streams then decode in step
  // instead of each later prompt stalling the earlier streams (docs/bench/serving-tpot.md).
  int max_batch_tokens = 2048;
  double admission_window_ms = 50;
  double admission_gap_ms = 5;
  std::string jump_forward = "on";
  int block_size = 16;
  double kv_memory_mib = 1024;
  double kv_memory_fraction = 0;  // vLLM's --gpu-memory-utilization in spirit: 0 means --kv-memory decides
  double kv_host_memory_mib = 0;  // the host connector's host-memory tier (0 with no disk tier: no connector)
  std::string kv_disk_dir;
  double kv_disk_size_mib = 0;
  int max_model_len = 0;  // 0: the model's context, or what the KV budget holds
  int max_queue = 1024;
  std::string chat_template;
  std::string reasoning_parser;                // empty: detected from the chat template
  std::string tool_call_parser;                // empty: detected from the chat template
  model::jinja::RenderLimits template_limits;  // --template-max-steps, --template-max-memory-mib
  double template_max_memory_mib = 256;
  int template_threads = 2;
  int io_threads = 2;
  std::vector<std::string> allowed_origins;
  bool no_prefix_cache = false;
  int shutdown_grace_ms = 10000;
  int threads = 0;
  std::string weight_dtype;
  std::string kv_dtype = "f16";  // half the bytes attention reads per token; f32 stays selectable
  std::string graph = "off";
  std::vector<std::string> prefill_nodes;
  int pd_min_tokens = 32;
  double pd_staging_mib = 64;
  std::string pd_overlap = "on";
  int pd_timeout_ms = 30000;
  std::vector<std::string> link_endpoints = {"shm", "tcp"};
  std::string link_host;  // empty: --host, or 127.0.0.1 when --host is a wildcard
  std::string ctrl;
  std::string advertise_url;
  int ctrl_ttl_ms = 3000;
  std::string cluster_token_file;
  std::vector<std::string> api_keys;
  std::string tls_cert, tls_key, tls_ca;
  std::string etcd_user, etcd_password_file;
};

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
  ops::DeviceOptions dopts;
  dopts.threads = a.threads;
  auto chosen = open_backend(a.backend, model->config, model->weights, dopts);
  if (!chosen.ok()) return fail(chosen.status().message());
  auto& device = chosen->device;
  const std::string& backend = chosen->name;
  if (!chosen->reason.empty()) log::info("backend {}", chosen->reason);
  double kv_memory_mib = a.kv_memory_mib;
  if (a.kv_memory_fraction > 0) {
    // The node may use this fraction of its device's memory (a host device: the machine's RAM); the weights
    // come out of it first, and the KV cache gets the rest.
    uint64_t device_bytes = device->info().memory_bytes;
    if (device_bytes == 0) device_bytes = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
    uint64_t weight_bytes = 0;
    for (const model::WeightTensor& t : model->weights.tensors()) weight_bytes += t.bytes;
    const double left = a.kv_memory_fraction * static_cast<double>(device_bytes) - static_cast<double>(weight_bytes);
    if (left < 1024.0 * 1024.0)
      return fail(
          fmt::format("--kv-memory-fraction {}: {:.0f} MiB of the device's {:.0f} MiB leaves no room for KV "
                      "after {:.0f} MiB of weights",
                      a.kv_memory_fraction, a.kv_memory_fraction * device_bytes / 1048576.0, device_bytes / 1048576.0,
                      weight_bytes / 1048576.0));
    kv_memory_mib = left / (1024.0 * 1024.0);
    log::info("--kv-memory-fraction {}: {:.0f} MiB of KV ({:.0f} MiB device, {:.0f} MiB weights)", a.kv_memory_fraction,
              kv_memory_mib, device_bytes / 1048576.0, weight_bytes / 1048576.0);
  }
  // The served context: --max-model-len, else the model's, shortened (with a warning) to what the KV budget
  // holds, as vLLM does, so that a 32k-context model starts with the default budget.
  model::ModelConfig cfg = model->config;

  engine::RunnerOptions ro;
  ro.max_batch_tokens = a.max_batch_tokens;
  // A step samples one row per sequence. At least the old default's 256 rows: imported KV (PD) can take the
  // running set past --max-num-seqs, and the scheduler then spreads those sequences over steps.
  ro.max_logit_rows = std::min(a.max_batch_tokens, std::max(a.max_num_seqs, 256));
  ro.graph = a.graph == "on";
  ro.kv.block_tokens = a.block_size;
  ro.kv.prefix_cache = !a.no_prefix_cache;
  if (!a.weight_dtype.empty()) ro.weight_dtype = parse_dtype(a.weight_dtype);
  ro.kv.dtype = *parse_dtype(a.kv_dtype);
  // Parity debugging (docs/models.md): every step's activations to files, steps eager.
  if (const char* dump = std::getenv("TESSERA_DUMP_ACTIVATIONS"); dump != nullptr && *dump != '\0') {
    ro.activation_tap = engine::activation_file_dump(dump);
    log::warn("TESSERA_DUMP_ACTIVATIONS: writing every step's activations to {}", dump);
  }
  const auto bytes_per_block =
      static_cast<double>(api::KvLayout{cfg.n_layers, cfg.kv_dim(), ro.kv.dtype, a.block_size}.bytes());
  const auto budget_blocks = static_cast<int64_t>(kv_memory_mib * 1024 * 1024 / bytes_per_block);
  if (a.max_model_len > cfg.max_seq_len)
    return fail(
        fmt::format("--max-model-len {} exceeds the model's context of {} tokens", a.max_model_len, cfg.max_seq_len));
  if (a.max_model_len > 0) {
    cfg.max_seq_len = a.max_model_len;
  } else if (budget_blocks * a.block_size < cfg.max_seq_len && budget_blocks > 0) {
    const auto fits = static_cast<int>(budget_blocks * a.block_size);
    log::warn(
        "--kv-memory {} MiB holds {} tokens, less than the model's context of {}; serving a context of {} (set "
        "--max-model-len or --kv-memory to choose)",
        a.kv_memory_mib, fits, cfg.max_seq_len, fits);
    cfg.max_seq_len = fits;
  }
  const int blocks_per_seq = (cfg.max_seq_len + a.block_size - 1) / a.block_size;
  // No more than every running sequence at full context could use; at least one full context.
  ro.kv.num_blocks =
      static_cast<int>(std::min<int64_t>(budget_blocks, static_cast<int64_t>(blocks_per_seq) * a.max_num_seqs));
  if (ro.kv.num_blocks < blocks_per_seq) {
    return fail(
        fmt::format("--kv-memory {} MiB holds {} tokens, less than the served context of {} tokens ({:.1f} MiB needed)",
                    a.kv_memory_mib, budget_blocks * a.block_size, cfg.max_seq_len,
                    blocks_per_seq * bytes_per_block / (1024 * 1024)));
  }
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
  // KV beyond device memory: blocks the cache evicts go to host memory, then to disk (kv/host/host_connector.h).
  // Added before the PD service's pd-link connector, so that a remote prefill starts after what the tiers hold.
  if (a.kv_disk_size_mib > 0 && a.kv_disk_dir.empty()) return fail("--kv-disk-size needs --kv-disk-dir");
  if (a.kv_host_memory_mib > 0 || !a.kv_disk_dir.empty()) {
    kv::HostOptions ho;
    ho.host_bytes = static_cast<size_t>(a.kv_host_memory_mib * 1024 * 1024);
    ho.disk_dir = a.kv_disk_dir;
    ho.disk_bytes = static_cast<size_t>(a.kv_disk_size_mib * 1024 * 1024);
    kv::ConnectorSpec spec;
    // What the disk tier's files are keyed by: the model (configuration and weights) and how it is run here.
    if (!a.kv_disk_dir.empty())
      spec.model_identity = kv::model_identity(
          cfg, model->weights,
          fmt::format("backend={} weight_dtype={}", backend, a.weight_dtype.empty() ? "stored" : a.weight_dtype));
    spec.options = ho;
    auto host = kv::make_connector(kv::kHostConnector, spec);
    if (!host.ok()) return fail(host.status().message());
    if (Status s = engine.add_connector(*host); !s.ok()) return fail(s.message());
    log::info("KV tiers: {:g} MiB host memory{}", a.kv_host_memory_mib,
              a.kv_disk_dir.empty() ? std::string()
                                    : fmt::format(", {:g} MiB on disk in {}", a.kv_disk_size_mib, a.kv_disk_dir));
  }

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
  // The template: --chat-template (a file, inline Jinja, a fallback name or "plain"), else the model's own
  // Jinja template (GGUF, chat_template.jinja or tokenizer_config.json). A model template that does not parse
  // falls back to its family when one is recognisable, with a warning; a model with no template serves
  // /v1/completions only and says so on /v1/chat/completions.
  const model::ModelChatInfo chat_info = model::model_chat_info(*model);
  std::string template_source;  // what the reasoning parser is detected from
  model::jinja::RenderLimits limits = a.template_limits;
  limits.max_memory_bytes = static_cast<uint64_t>(a.template_max_memory_mib * 1024 * 1024);
  no.template_threads = a.template_threads;
  if (!a.chat_template.empty()) {
    auto format = serve::make_chat_format(a.chat_template, chat_info, limits);
    if (!format.ok()) return fail(format.status().message());
    no.chat = std::move(format->formatter);
    template_source = format->source;
    log::info("chat template: {}", format->description);
  } else if (!model->chat_template.empty()) {
    auto format = serve::make_chat_format("", chat_info, limits);
    if (!format.ok()) {
      auto family = model::detect_chat_template(model->chat_template);
      log::warn("{}; {}", format.status().message(),
                family ? fmt::format("using the '{}' fallback", model::chat_template_name(*family))
                       : std::string("chat completions are off (use --chat-template)"));
      if (family) format = serve::make_chat_format(model::chat_template_name(*family), chat_info, limits);
    }
    if (format.ok()) {
      no.chat = std::move(format->formatter);
      template_source = format->source;
      log::info("chat template: {}", format->description);
    }
  }
  auto reasoning = serve::choose_reasoning_format(a.reasoning_parser, template_source);
  if (!reasoning.ok()) return fail(reasoning.status().message());
  no.reasoning = *reasoning;
  if (no.reasoning != serve::ReasoningFormat::kNone)
    log::info("reasoning parser: {}{}", serve::reasoning_format_name(no.reasoning),
              a.reasoning_parser.empty() ? " (detected from the chat template)" : "");
  auto tool_parser = serve::choose_tool_parser(a.tool_call_parser, template_source);
  if (!tool_parser.ok()) return fail(tool_parser.status().message());
  no.tool_parser = *tool_parser;
  if (no.tool_parser != "none")
    log::info("tool-call parser: {}{}", no.tool_parser,
              a.tool_call_parser.empty() ? " (detected from the chat template)" : "");
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
    po.link_host = !a.link_host.empty()                      ? a.link_host
                   : (a.host == "0.0.0.0" || a.host == "::") ? std::string("127.0.0.1")
                                                             : a.host;
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
  // vLLM's `vllm serve MODEL`: a path (GGUF file, HF folder, llama2.c checkpoint or a folder of one), or a Hugging
  // Face repository id ORG/NAME[@REV] in the local Hugging Face cache (model/hf_cache.h).
  auto* positional =
      cmd->add_option("model", args->model,
                      "The model: a GGUF file, a Hugging Face folder, a llama2.c checkpoint (with "
                      "--tokenizer), a folder holding one, or ORG/NAME[@REV] from the local Hugging Face "
                      "cache");
  cmd->add_option("--model", args->model, "The model, as the positional argument")->excludes(positional);
  cmd->add_option("--tokenizer", args->tokenizer, "Tokenizer file (needed when --model is a file)");
  cmd->add_option("--backend", args->backend,
                  "Operator backend (auto: the fastest here that runs the model's weight types)")
      ->capture_default_str();
  cmd->add_option("--host", args->host, "Listen address")->capture_default_str();
  cmd->add_option("--port", args->port, "Listen port (0: any free port, printed on stdout)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--role", args->role,
                  "both: whole requests; prefill: computes prompts for decode nodes; decode: serves clients, "
                  "prefilling long prompts on --prefill-nodes")
      ->check(CLI::IsMember({"both", "prefill", "decode"}))
      ->capture_default_str();
  cmd->add_flag("--role-switchable", args->role_switchable,
                "Prepare every role (link staging memory, the prefill route) so that POST /admin/role can change "
                "the role while the node runs (the planner's re-role); a decode node then needs no --prefill-nodes");
  cmd->add_option("--prefill-nodes", args->prefill_nodes, "decode role: prefill node URLs")->delimiter(',');
  cmd->add_option("--pd-min-tokens", args->pd_min_tokens,
                  "decode role: prompts with fewer uncached tokens are prefilled locally")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--pd-staging-mib", args->pd_staging_mib, "decode role: link memory for KV in flight (MiB)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--pd-overlap", args->pd_overlap,
                  "prefill role: on streams each layer's KV while later layers compute; off sends it all after "
                  "the prompt is done")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--pd-timeout-ms", args->pd_timeout_ms,
                  "decode role: a remote prefill (compute and KV transfer) not done by then is redone locally")
      ->check(CLI::Range(100, 24 * 3600 * 1000))
      ->capture_default_str();
  cmd->add_option("--link-endpoints", args->link_endpoints, "Transfer endpoints to offer (shm, tcp, ucx)")
      ->delimiter(',');
  cmd->add_option("--link-host", args->link_host,
                  "Address the tcp link endpoint listens on and peers connect to (default: --host, or 127.0.0.1 "
                  "when --host is a wildcard)");
  cmd->add_option("--ctrl", args->ctrl,
                  "Register this node in a control plane (http://host:port: embedded, e.g. a router's "
                  "--ctrl-embedded or `tessera ctrl`; etcd=http://host:port)");
  cmd->add_option("--advertise-url", args->advertise_url,
                  "--ctrl: the URL routers should use for this node (default http://HOST:PORT)");
  cmd->add_option("--ctrl-ttl-ms", args->ctrl_ttl_ms,
                  "--ctrl: lease TTL; a node that dies disappears from the control plane within it")
      ->check(CLI::Range(100, 600000))
      ->capture_default_str();
  cmd->add_option("--cluster-token-file", args->cluster_token_file,
                  "The cluster credential (mode 0600): required on /internal/pd/* and link connections, and what "
                  "lets the router's internal fields through; none: those are open (docs/security.md)");
  cmd->add_option("--api-key", args->api_keys,
                  "Accepted API key on /v1/* (Authorization: Bearer KEY; repeatable); none: no key needed");
  cmd->add_option("--tls-cert", args->tls_cert, "Serve HTTPS with this PEM certificate chain (with --tls-key)");
  cmd->add_option("--tls-key", args->tls_key, "PEM private key of --tls-cert");
  cmd->add_option("--etcd-user", args->etcd_user, "--ctrl etcd=...: authenticate as this etcd user");
  cmd->add_option("--etcd-password-file", args->etcd_password_file, "--etcd-user's password (first line of the file)");
  cmd->add_option("--tls-ca", args->tls_ca, "CA file trusted for an https:// --ctrl (default: the system's)");
  cmd->add_option("--served-model-name", args->served_names,
                  "Model ids clients may use (several: the node answers to each; the first is reported; default: the "
                  "checkpoint's name, or ORG/NAME for a Hugging Face reference)");
  cmd->add_option("--max-num-seqs", args->max_num_seqs, "Sequences batched together")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--max-batch-tokens", args->max_batch_tokens, "Token budget per engine step (prefill chunk size)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--admission-window-ms", args->admission_window_ms,
                  "An idle engine gathers arriving requests for at most this long before its first step, so that a "
                  "burst is prefilled together (0: no wait)")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  cmd->add_option("--admission-gap-ms", args->admission_gap_ms,
                  "... and stops gathering once no request arrived for this long, or --max-num-seqs have arrived "
                  "(a lone request on an idle server waits this long)")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  cmd->add_option(
         "--grammar-jump-forward", args->jump_forward,
         "Structured output: emit the tokens a grammar forces without a model step (docs/structured-outputs.md)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--block-size", args->block_size, "Tokens per KV block")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--max-model-len", args->max_model_len,
                  "Longest sequence served, prompt and output (default: the model's context, or what --kv-memory "
                  "holds, with a warning)")
      ->check(CLI::Range(1, 1 << 22));
  auto* kv_memory = cmd->add_option("--kv-memory", args->kv_memory_mib, "KV cache memory budget in MiB")
                        ->check(CLI::PositiveNumber)
                        ->capture_default_str();
  cmd->add_option("--kv-memory-fraction", args->kv_memory_fraction,
                  "Fraction of the device's memory (a host device: RAM) the node may use; the weights come out of it "
                  "and the KV cache gets the rest (instead of --kv-memory)")
      ->check(CLI::Range(0.01, 0.99))
      ->excludes(kv_memory);
  cmd->add_option("--kv-host-memory", args->kv_host_memory_mib,
                  "Host memory in MiB for KV blocks evicted from the device cache, found again by later requests "
                  "with the same prefix (docs/kv.md); 0: none")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--kv-disk-dir", args->kv_disk_dir,
                  "Directory for KV blocks evicted from host memory (kept across restarts, per model); needs "
                  "--kv-disk-size");
  cmd->add_option("--kv-disk-size", args->kv_disk_size_mib, "Disk space in MiB for --kv-disk-dir")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-queue", args->max_queue, "Waiting requests before new ones get 429")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--chat-template", args->chat_template,
                  "Chat template: a Jinja file (or tokenizer_config.json), inline Jinja, or a named format: plain, "
                  "llama-2, llama-3, chatml (default: the model's own template)");
  cmd->add_option("--reasoning-parser", args->reasoning_parser,
                  "How chat replies carry reasoning (reasoning_content): qwen3, deepseek_r1, gpt_oss or none "
                  "(default: detected from the chat template)");
  cmd->add_option("--tool-call-parser", args->tool_call_parser,
                  "How chat replies write tool calls, by vLLM's names: hermes, qwen3_coder, llama3_json, pythonic, "
                  "mistral, openai, or none (default: detected from the chat template)");
  // A model's chat template is untrusted input (docs/security.md): what one render may spend, and its threads.
  cmd->add_option("--template-max-steps", args->template_limits.max_steps,
                  "Evaluation steps one chat-template render may take (a 400 past it)")
      ->check(CLI::Range(uint64_t{1000}, uint64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--template-max-memory-mib", args->template_max_memory_mib,
                  "MiB of strings and lists one chat-template render may build (a 400 past it)")
      ->check(CLI::Range(1.0, 65536.0))
      ->capture_default_str();
  cmd->add_option("--template-threads", args->template_threads,
                  "Threads rendering chat templates (never the HTTP or engine threads)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--allowed-origins", args->allowed_origins,
                  "Origins whose browsers may call the API (CORS): a JSON list as vLLM takes it, or comma-separated; "
                  "* for any (default: none)");
  cmd->add_option("--io-threads", args->io_threads, "HTTP I/O threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_flag("--no-prefix-cache", args->no_prefix_cache, "Disable the prefix cache");
  cmd->add_option("--threads", args->threads, "Host threads for the cpu backend (0: every processor)")
      ->check(CLI::Range(0, 1024));
  // vLLM's names for the same two choices.
  cmd->add_option("--dtype", args->weight_dtype,
                  "vLLM's --dtype: auto (as stored), half/float16, bfloat16, float/float32 (f32 matrices converted)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, std::string>{{"auto", ""},
                                                                             {"half", "f16"},
                                                                             {"float16", "f16"},
                                                                             {"bfloat16", "bf16"},
                                                                             {"float", "f32"},
                                                                             {"float32", "f32"}}));
  cmd->add_option("--kv-cache-dtype", args->kv_dtype, "vLLM's --kv-cache-dtype: auto (f16), float16, float32")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, std::string>{{"auto", "f16"}, {"float16", "f16"}, {"float32", "f32"}}));
  cmd->add_option("--weight-dtype", args->weight_dtype, "Convert f32 weight matrices at load (default: as stored)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  cmd->add_option("--graph", args->graph,
                  "Decode through recorded graphs, one per batch-size bucket (backends with supports_graphs)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--kv-dtype", args->kv_dtype, "KV cache element type")
      ->check(CLI::IsMember({"f32", "f16"}))
      ->capture_default_str();
  cmd->add_option("--shutdown-grace-ms", args->shutdown_grace_ms, "How long SIGTERM waits for in-flight requests")
      ->capture_default_str();
  return [args] { return run_serve(*args); };
}

}  // namespace tessera::cli
