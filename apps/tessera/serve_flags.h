// The flags of `tessera serve` (vLLM's names where vLLM has one), grouped by topic in --help. serve.cc runs a node
// from them; `--config FILE.yaml` takes the same keys (config_file.h).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "model/chat_template_renderer.h"

namespace tessera::cli {

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
  double kv_pool_memory_mib = 0;  // this node's share of the cluster KV pool (needs --ctrl); 0: no pool
  int max_model_len = 0;          // 0: the model's context, or what the KV budget holds
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
  int state_checkpoints = -1;     // hybrid models; -1: serve/kv_budget.h's default
  bool whole_sliding_kv = false;  // --disable-hybrid-kv-cache-manager: sliding layers keep every position
  int shutdown_grace_ms = 10000;
  int threads = 0;
  std::string weight_dtype;
  std::string kv_dtype = "f16";            // half the bytes attention reads per token; f32 stays selectable
  std::string cache_type_k, cache_type_v;  // llama.cpp's -ctk / -ctv; empty: kv_dtype
  std::string graph = "off";
  bool deterministic = false;  // RunnerOptions::deterministic
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
  // Embeddings (serve/embeddings_api.h): the runner, the pooling type and Matryoshka dimensions.
  std::string runner = "auto";
  bool embeddings = false;
  std::string pooling;
  bool matryoshka = false;
};

// Adds every serve flag to `cmd`, writing into `a` (which must outlive the parse).
void add_serve_flags(CLI::App* cmd, ServeArgs* a);

// The KV cache type the flags ask for (--cache-type-k / --cache-type-v, else --kv-dtype / --kv-cache-dtype);
// InvalidArgument when K and V are given different types, which this version does not keep.
Result<DType> kv_cache_type(const ServeArgs& a);

}  // namespace tessera::cli
