#include "serve_flags.h"

#include "commands.h"

#include <initializer_list>
#include <map>
#include <optional>

#include <fmt/core.h>

namespace tessera::cli {

void add_serve_flags(CLI::App* cmd, ServeArgs* a) {
  // vLLM's `vllm serve MODEL`: a path (GGUF file, HF folder, llama2.c checkpoint or a folder of one), or a Hugging
  // Face repository id ORG/NAME[@REV] in the local Hugging Face cache (model/hf_cache.h).
  auto* positional =
      cmd->add_option("model", a->model,
                      "The model: a GGUF file, a Hugging Face folder, a llama2.c checkpoint (with "
                      "--tokenizer), a folder holding one, or ORG/NAME[@REV] from the local Hugging Face "
                      "cache");
  cmd->add_option("--model", a->model, "The model, as the positional argument")->excludes(positional);
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file (needed when --model is a file)");
  cmd->add_option("--backend", a->backend,
                  "Operator backend (auto: the fastest here that runs the model's weight types)")
      ->capture_default_str();
  cmd->add_option("--host", a->host, "Listen address")->capture_default_str();
  cmd->add_option("--port", a->port, "Listen port (0: any free port, printed on stdout)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--role", a->role,
                  "both: whole requests; prefill: computes prompts for decode nodes; decode: serves clients, "
                  "prefilling long prompts on --prefill-nodes")
      ->check(CLI::IsMember({"both", "prefill", "decode"}))
      ->capture_default_str();
  cmd->add_flag("--role-switchable", a->role_switchable,
                "Prepare every role (link staging memory, the prefill route) so that POST /admin/role can change "
                "the role while the node runs (the planner's re-role); a decode node then needs no --prefill-nodes");
  cmd->add_option("--prefill-nodes", a->prefill_nodes, "decode role: prefill node URLs")->delimiter(',');
  cmd->add_option("--pd-min-tokens", a->pd_min_tokens,
                  "decode role: prompts with fewer uncached tokens are prefilled locally")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--pd-staging-mib", a->pd_staging_mib, "decode role: link memory for KV in flight (MiB)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--pd-overlap", a->pd_overlap,
                  "prefill role: on streams each layer's KV while later layers compute; off sends it all after "
                  "the prompt is done")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--pd-timeout-ms", a->pd_timeout_ms,
                  "decode role: a remote prefill (compute and KV transfer) not done by then is redone locally")
      ->check(CLI::Range(100, 24 * 3600 * 1000))
      ->capture_default_str();
  cmd->add_option("--link-endpoints", a->link_endpoints, "Transfer endpoints to offer (shm, tcp, ucx)")->delimiter(',');
  cmd->add_option("--link-host", a->link_host,
                  "Address the tcp link endpoint listens on and peers connect to (default: --host, or 127.0.0.1 "
                  "when --host is a wildcard)");
  cmd->add_option("--ctrl", a->ctrl,
                  "Register this node in a control plane (http://host:port: embedded, e.g. a router's "
                  "--ctrl-embedded or `tessera ctrl`; etcd=http://host:port)");
  cmd->add_option("--advertise-url", a->advertise_url,
                  "--ctrl: the URL routers should use for this node (default http://HOST:PORT)");
  cmd->add_option("--ctrl-ttl-ms", a->ctrl_ttl_ms,
                  "--ctrl: lease TTL; a node that dies disappears from the control plane within it")
      ->check(CLI::Range(100, 600000))
      ->capture_default_str();
  cmd->add_option("--cluster-token-file", a->cluster_token_file,
                  "The cluster credential (mode 0600): required on /internal/pd/* and link connections, and what "
                  "lets the router's internal fields through; none: those are open (docs/security.md)");
  cmd->add_option("--api-key", a->api_keys,
                  "Accepted API key on /v1/* (Authorization: Bearer KEY; repeatable); none: no key needed");
  cmd->add_option("--tls-cert", a->tls_cert, "Serve HTTPS with this PEM certificate chain (with --tls-key)");
  cmd->add_option("--tls-key", a->tls_key, "PEM private key of --tls-cert");
  cmd->add_option("--etcd-user", a->etcd_user, "--ctrl etcd=...: authenticate as this etcd user");
  cmd->add_option("--etcd-password-file", a->etcd_password_file, "--etcd-user's password (first line of the file)");
  cmd->add_option("--tls-ca", a->tls_ca, "CA file trusted for an https:// --ctrl (default: the system's)");
  cmd->add_option("--served-model-name", a->served_names,
                  "Model ids clients may use (several: the node answers to each; the first is reported; default: the "
                  "checkpoint's name, or ORG/NAME for a Hugging Face reference)");
  cmd->add_option("--max-num-seqs", a->max_num_seqs, "Sequences batched together")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--max-batch-tokens", a->max_batch_tokens, "Token budget per engine step (prefill chunk size)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--admission-window-ms", a->admission_window_ms,
                  "An idle engine gathers arriving requests for at most this long before its first step, so that a "
                  "burst is prefilled together (0: no wait)")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  cmd->add_option("--admission-gap-ms", a->admission_gap_ms,
                  "... and stops gathering once no request arrived for this long, or --max-num-seqs have arrived "
                  "(a lone request on an idle server waits this long)")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  cmd->add_option(
         "--grammar-jump-forward", a->jump_forward,
         "Structured output: emit the tokens a grammar forces without a model step (docs/structured-outputs.md)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--block-size", a->block_size, "Tokens per KV block")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--max-model-len", a->max_model_len,
                  "Longest sequence served, prompt and output (default: the model's context, or what --kv-memory "
                  "holds, with a warning)")
      ->check(CLI::Range(1, 1 << 22));
  auto* kv_memory = cmd->add_option("--kv-memory", a->kv_memory_mib, "KV cache memory budget in MiB")
                        ->check(CLI::PositiveNumber)
                        ->capture_default_str();
  cmd->add_option("--kv-memory-fraction", a->kv_memory_fraction,
                  "Fraction of the device's memory (a host device: RAM) the node may use; the weights come out of it "
                  "and the KV cache gets the rest (instead of --kv-memory)")
      ->check(CLI::Range(0.01, 0.99))
      ->excludes(kv_memory);
  cmd->add_option("--kv-host-memory", a->kv_host_memory_mib,
                  "Host memory in MiB for KV blocks evicted from the device cache, found again by later requests "
                  "with the same prefix, and for the hybrid models' state checkpoints the device gives back "
                  "(docs/kv.md); 0: none")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--kv-disk-dir", a->kv_disk_dir,
                  "Directory for KV blocks evicted from host memory (kept across restarts, per model); needs "
                  "--kv-disk-size");
  cmd->add_option("--kv-disk-size", a->kv_disk_size_mib, "Disk space in MiB for --kv-disk-dir")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-pool-memory", a->kv_pool_memory_mib,
                  "Host memory in MiB this node gives to the cluster KV pool: blocks it evicts are published there "
                  "(link memory, indexed in --ctrl), and prefixes any node of the pool holds are loaded instead of "
                  "computed (a hybrid model's recurrent states too, in half of it; docs/kv.md); 0: none")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-queue", a->max_queue, "Waiting requests before new ones get 429")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--chat-template", a->chat_template,
                  "Chat template: a Jinja file (or tokenizer_config.json), inline Jinja, or a named format: plain, "
                  "llama-2, llama-3, chatml (default: the model's own template)");
  cmd->add_option("--reasoning-parser", a->reasoning_parser,
                  "How chat replies carry reasoning (reasoning_content): qwen3, deepseek_r1, gpt_oss or none "
                  "(default: detected from the chat template)");
  cmd->add_option("--tool-call-parser", a->tool_call_parser,
                  "How chat replies write tool calls, by vLLM's names: hermes, qwen3_coder, llama3_json, pythonic, "
                  "mistral, openai, or none (default: detected from the chat template)");
  // A model's chat template is untrusted input (docs/security.md): what one render may spend, and its threads.
  cmd->add_option("--template-max-steps", a->template_limits.max_steps,
                  "Evaluation steps one chat-template render may take (a 400 past it)")
      ->check(CLI::Range(uint64_t{1000}, uint64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--template-max-memory-mib", a->template_max_memory_mib,
                  "MiB of strings and lists one chat-template render may build (a 400 past it)")
      ->check(CLI::Range(1.0, 65536.0))
      ->capture_default_str();
  cmd->add_option("--template-threads", a->template_threads,
                  "Threads rendering chat templates (never the HTTP or engine threads)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--allowed-origins", a->allowed_origins,
                  "Origins whose browsers may call the API (CORS): a JSON list as vLLM takes it, or comma-separated; "
                  "* for any (default: none)");
  cmd->add_option("--io-threads", a->io_threads, "HTTP I/O threads")->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_flag("--no-prefix-cache", a->no_prefix_cache, "Disable the prefix cache");
  cmd->add_option("--state-checkpoints", a->state_checkpoints,
                  "Hybrid models (Qwen3.5): recurrent states kept at prompts' last block boundaries and at chat "
                  "system prompts' ends, through which prefix reuse works; taken from --kv-memory (default: as many "
                  "as a quarter of what the running sequences' state leaves holds; 0: prefix reuse off); "
                  "--kv-host-memory keeps more of them")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--disable-hybrid-kv-cache-manager", a->whole_sliding_kv,
                "vLLM's flag: sliding-window layers keep every position, not only their window (KV tiers and the KV "
                "pool turn this on themselves)");
  cmd->add_option("--threads", a->threads, "Host threads for the cpu backend (0: every processor)")
      ->check(CLI::Range(0, 1024));
  // vLLM's names for the same two choices.
  cmd->add_option("--dtype", a->weight_dtype,
                  "vLLM's --dtype: auto (as stored), half/float16, bfloat16, float/float32 (f32 matrices converted)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, std::string>{{"auto", ""},
                                                                             {"half", "f16"},
                                                                             {"float16", "f16"},
                                                                             {"bfloat16", "bf16"},
                                                                             {"float", "f32"},
                                                                             {"float32", "f32"}}));
  cmd->add_option("--kv-cache-dtype", a->kv_dtype, "vLLM's --kv-cache-dtype: auto (f16), float16, float32")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, std::string>{{"auto", "f16"}, {"float16", "f16"}, {"float32", "f32"}}));
  cmd->add_option("--weight-dtype", a->weight_dtype, "Convert f32 weight matrices at load (default: as stored)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  cmd->add_option("--graph", a->graph,
                  "Decode through recorded graphs, one per batch-size bucket (backends with supports_graphs)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_flag("--deterministic,--enable-deterministic-inference", a->deterministic,
                "Replies independent of the prefix cache too (they already are of the batch and the threads): "
                "prompts attend through the decode kernels, so a cache hit on earlier blocks, a reply's blocks "
                "included, gives the bits of the whole prompt computed anew; slower prompts (SGLang's "
                "--enable-deterministic-inference)");
  cmd->add_option("--kv-dtype", a->kv_dtype, "KV cache element type of K and V: f32, f16, bf16, q8_0, q4_0")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}))
      ->capture_default_str();
  // llama.cpp's names (-ctk / -ctv are rewritten to these in main.cc: CLI11 takes one-letter short names only).
  cmd->add_option("--cache-type-k", a->cache_type_k,
                  "llama.cpp's -ctk: K's cache type, f32, f16, bf16, q8_0 (34 bytes per 32 values) or q4_0 (18); "
                  "q8_0 and q4_0 need head_dim a multiple of 32 and the cpu or ref backend (default: --kv-dtype)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  cmd->add_option("--cache-type-v", a->cache_type_v,
                  "llama.cpp's -ctv: V's cache type, as --cache-type-k; this version keeps K and V in one type")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  cmd->add_option("--shutdown-grace-ms", a->shutdown_grace_ms, "How long SIGTERM waits for in-flight requests")
      ->capture_default_str();
  cmd->add_option("--runner", a->runner,
                  "generate: completions and chat; pooling: /v1/embeddings; auto: pooling when the model's files "
                  "declare an embedding model (GGUF pooling_type, sentence-transformers modules.json) or it is an "
                  "encoder (bert)")
      ->check(CLI::IsMember({"auto", "generate", "pooling"}))
      ->capture_default_str();
  cmd->add_flag("--embeddings", a->embeddings, "Serve /v1/embeddings (llama-server's name for --runner pooling)");
  cmd->add_option("--pooling", a->pooling,
                  "Embedding pooling, overriding the model's: mean, cls or last (llama-server's --pooling)")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  cmd->add_flag("--matryoshka", a->matryoshka,
                "Let embedding requests ask for fewer `dimensions` (truncated, then renormalised): for a model trained "
                "for it whose files cannot say so (GGUF); HF folders say it in config.json");
  group_options(
      cmd, "Model",
      {"model", "--model", "--tokenizer", "--served-model-name", "--dtype", "--weight-dtype", "--max-model-len"});
  group_options(cmd, "Backend and engine",
                {"--backend", "--threads", "--graph", "--deterministic", "--max-num-seqs", "--max-batch-tokens",
                 "--admission-window-ms", "--admission-gap-ms", "--max-queue"});
  group_options(
      cmd, "KV cache",
      {"--block-size", "--kv-memory", "--kv-memory-fraction", "--kv-dtype", "--cache-type-k", "--cache-type-v",
       "--kv-cache-dtype", "--no-prefix-cache", "--state-checkpoints", "--disable-hybrid-kv-cache-manager",
       "--kv-host-memory", "--kv-disk-dir", "--kv-disk-size", "--kv-pool-memory"});
  group_options(cmd, "Chat, tools and structured output",
                {"--chat-template", "--reasoning-parser", "--tool-call-parser", "--template-max-steps",
                 "--template-max-memory-mib", "--template-threads", "--grammar-jump-forward"});
  group_options(cmd, "Embeddings", {"--runner", "--embeddings", "--pooling", "--matryoshka"});
  group_options(cmd, "Prefill/decode disaggregation",
                {"--role", "--role-switchable", "--prefill-nodes", "--pd-min-tokens", "--pd-staging-mib",
                 "--pd-overlap", "--pd-timeout-ms", "--link-endpoints", "--link-host"});
  group_options(cmd, "HTTP server", {"--host", "--port", "--io-threads", "--allowed-origins", "--shutdown-grace-ms"});
  group_options(cmd, "Cluster and security",
                {"--ctrl", "--advertise-url", "--ctrl-ttl-ms", "--cluster-token-file", "--api-key", "--tls-cert",
                 "--tls-key", "--tls-ca", "--etcd-user", "--etcd-password-file"});
}

Result<DType> kv_cache_type(const ServeArgs& a) {
  const std::string& k = a.cache_type_k.empty() ? a.kv_dtype : a.cache_type_k;
  const std::string& v = a.cache_type_v.empty() ? a.kv_dtype : a.cache_type_v;
  if (k != v) {
    return invalid_argument(fmt::format(
        "K cache type {} and V cache type {} differ: this version keeps K and V in one type (llama.cpp allows "
        "unlike ones); give --cache-type-k and --cache-type-v (or --kv-dtype) the same type",
        k, v));
  }
  std::optional<DType> t = parse_dtype(k);
  if (!t) return invalid_argument(fmt::format("unknown KV cache type '{}'", k));
  return *t;
}

}  // namespace tessera::cli
