// NodeServer: a node's HTTP face. OpenAI-compatible /v1/completions and /v1/chat/completions (streamed as
// server-sent events or whole), or /v1/embeddings on a pooling node (serve/embeddings_api.h), /v1/models,
// /health and /metrics, in front of one Engine.
//
// Handlers never block: they validate, tokenize and submit, and the engine's callbacks write the answer
// (from the engine thread) through the http::ResponseWriter. Requests that render a chat template (chat
// completions, /tokenize with messages) are handled on a template pool instead of the io thread, and a render
// stops when its client goes away. A client that disconnects cancels its
// request, which frees its KV blocks. stop() refuses new requests (503) and lets in-flight ones finish
// within the grace period. POST /admin/role changes a switchable node's role live (serve/role_admin.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/openai.h"
#include "base/status.h"
#include "engine/engine.h"
#include "http/http.h"
#include "serve/chat_format.h"
#include "serve/embeddings_api.h"
#include "serve/pd.h"
#include "serve/reasoning.h"

namespace tessera::serve {

struct NodeOptions {
  std::string model_name;  // the id clients send as "model", and the one answers carry
  // More names clients may use for the same model (vLLM's `--served-model-name A B`: the first is model_name);
  // /v1/models lists them all.
  std::vector<std::string> model_aliases;
  // model_name first, then the aliases.
  std::vector<std::string> served_names() const {
    std::vector<std::string> all{model_name};
    all.insert(all.end(), model_aliases.begin(), model_aliases.end());
    return all;
  }
  http::ServerOptions http;
  ChatFormatter chat;       // null: chat completions answer 400 (the model has no chat template)
  PdService* pd = nullptr;  // not owned; decode role: prompts may be prefilled on prefill nodes
  // Accepted API keys ("Authorization: Bearer KEY") on /v1/*; empty: no key needed. /health stays open.
  std::vector<std::string> api_keys;
  // The cluster credential. Internal fields (x-tessera-* headers, tessera_resume) are honoured only from a
  // caller presenting it, and a caller presenting it needs no API key (the router). Unconfigured: open.
  ClusterToken cluster_token;
  // Called after POST /admin/role changed the role (serve/role_admin.h): re-registers the node under it.
  std::function<Status(const std::string& role)> on_role_change;
  // What /health reports about the hardware (the router's dashboard shows it): the backend's registry name
  // and the device's own name.
  std::string backend;
  std::string device;
  api::SamplingParams default_sampling;  // for fields a request leaves out (the model's generation defaults)
  // How chat replies carry reasoning (serve/reasoning.h): --reasoning-parser, else detected from the template.
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  // How chat replies carry tool calls (serve/tool_parsers/tool_parser.h): a registered parser's name, or "none"
  // (--tool-call-parser, else detected from the template). Forced calls are read whatever it is.
  std::string tool_parser = "none";
  // Chat templates are rendered on a pool of their own (a model's template is untrusted input and may spend up
  // to its step budget), never on the HTTP io threads or the engine loop, so /health and streams stay live.
  int template_threads = 2;
  size_t template_queue = 256;  // renders waiting beyond this are refused with 503
  // The pooling runner (serve/embeddings_api.h): /v1/embeddings served, completions and chat refused.
  EmbeddingServing embeddings;
};

class NodeServer {
 public:
  NodeServer(engine::Engine& engine, NodeOptions options);
  ~NodeServer();

  Status start();
  uint16_t port() const;
  void stop(int grace_ms);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::serve
