// `tessera inspect PATH`: what a model file is: format, architecture, shapes, types, parameters, tokenizer.
// `tessera inspect --devices`: every device of every backend compiled in, as the backend describes it
// (vulkaninfo-style for vulkan: type, API version, memory heaps, subgroups, limits).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include "commands.h"

#include "model/chat_template.h"
#include "model/chat_template_renderer.h"
#include "model/loader.h"
#include "ops/registry.h"

namespace tessera::cli {
namespace {

struct InspectArgs {
  std::string path;
  std::string tokenizer;
  bool tensors = false;
  std::string chat_template;
  std::string chat;
  bool devices = false;
};

int run_inspect_devices() {
  ops::register_builtin_backends();
  for (const std::string& name : ops::BackendRegistry::global().names()) {
    auto backend = ops::BackendRegistry::global().create(name);
    if (!backend.ok()) {
      fmt::print("{}: no devices here ({})\n\n", name, backend.status().message());
      continue;
    }
    auto devices = (*backend)->describe_devices();
    if (!devices.ok()) {
      fmt::print("{}: {}\n\n", name, devices.status().message());
      continue;
    }
    for (const ops::DeviceDescription& d : *devices) {
      fmt::print("{}\n", d.title);
      size_t width = 0;
      for (const auto& [k, v] : d.properties) width = std::max(width, k.size());
      for (const auto& [k, v] : d.properties) fmt::print("  {:<{}} = {}\n", k, width, v);
      fmt::print("\n");
    }
  }
  return 0;
}

// The rendered prompt on one line: newlines as \n.
std::string escape_newlines(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

int run_inspect(const InspectArgs& a) {
  if (a.devices) return run_inspect_devices();
  if (a.path.empty()) return fail("inspect needs a model PATH, or --devices to list the devices");
  auto m = model::load_model(a.path, a.tokenizer, /*require_tokenizer=*/false);
  if (!m.ok()) return fail(m.status().message());
  const model::ModelConfig& c = m->config;
  int64_t params = 0;
  std::map<std::string, std::pair<int, size_t>> by_dtype;
  for (const model::WeightTensor& t : m->weights.tensors()) {
    params += t.numel();
    auto& e = by_dtype[std::string(dtype_name(t.dtype))];
    e.first += 1;
    e.second += t.bytes;
  }
  fmt::print("path:          {}\n", m->checkpoint_path);
  fmt::print("format:        {}\n", m->format);
  fmt::print("architecture:  {}\n", c.arch);
  fmt::print("dim:           {}\nhidden_dim:    {}\nlayers:        {}\nheads:         {} (kv {}, head_dim {})\n", c.dim,
             c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim);
  if (c.has_moe_layers()) {
    int moe_layers = 0;
    for (int l = 0; l < c.n_layers; ++l) moe_layers += c.layer_kind(l).ffn == model::FfnKind::kMoe ? 1 : 0;
    fmt::print("experts:       {} of {} per token ({} wide, {} routing{}), in {} of {} layers; {:.2f}M params active\n",
               c.moe.n_experts_used, c.moe.n_experts, c.moe.expert_hidden_dim, model::expert_gating_name(c.moe.gating),
               c.moe.normalize_weights ? ", renormalised" : "", moe_layers, c.n_layers,
               c.active_parameter_count() / 1e6);
  }
  fmt::print("vocab:         {}\ncontext:       {}\n", c.vocab_size, c.max_seq_len);
  fmt::print("rope:          theta {}, {}\n", c.rope_theta,
             c.rope_layout == model::RopeLayout::kInterleaved ? "interleaved" : "rotate-half");
  fmt::print("rms_norm_eps:  {}\ntied:          {}\n", c.norm_eps, c.tied_embeddings ? "yes" : "no");
  fmt::print("biases:        {}\n", m->weights.find("blk.0.attn_q.bias") ? "q/k/v" : "none");
  fmt::print("parameters:    {} ({:.2f}M stored in {} tensors)\n", params, params / 1e6, m->weights.tensors().size());
  for (const auto& [name, e] : by_dtype) fmt::print("  {:6} {:5} tensors, {} bytes\n", name, e.first, e.second);
  if (m->tokenizer) {
    fmt::print("tokenizer:     {} ({} tokens, bos {}, eos {}) from {}\n", m->tokenizer->kind(),
               m->tokenizer->vocab_size(), m->tokenizer->bos_id(), m->tokenizer->eos_id(), m->tokenizer_path);
  } else {
    fmt::print("tokenizer:     none\n");
  }
  if (!a.chat_template.empty() || !a.chat.empty()) {
    // What a server would do with this model: pick the template, render one user turn.
    auto r = model::ChatTemplateRenderer::choose(a.chat_template, model::model_chat_info(*m));
    if (!r.ok()) return fail(r.status().message());
    fmt::print("chat template: {}\n", r->description());
    if (!a.chat.empty()) {
      nlohmann::json msgs = nlohmann::json::array({{{"role", "user"}, {"content", a.chat}}});
      auto text = r->render(msgs.dump(), "");
      if (!text.ok()) return fail(text.status().message());
      fmt::print("chat prompt:   {}{}\n", text->add_bos && m->tokenizer ? "(BOS) " : "", escape_newlines(text->text));
    }
  } else if (!m->chat_template.empty()) {
    auto r = model::ChatTemplateRenderer::choose("", model::model_chat_info(*m));
    fmt::print("chat template: {}\n", r.ok() ? r->description() : r.status().message());
  }
  if (a.tensors) {
    for (const model::WeightTensor& t : m->weights.tensors())
      fmt::print("  {:32} {:5} [{}]\n", t.name, dtype_name(t.dtype), fmt::join(t.shape, ", "));
  }
  return 0;
}

}  // namespace

Action add_inspect_command(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand("inspect", "Describe a model: format, architecture, shapes, types, tokenizer");
  cmd->add_option("path", args->path, "GGUF file, HF folder, llama2.c checkpoint or a directory holding one");
  cmd->add_flag("--devices", args->devices,
                "List every device of every backend compiled in (vulkan: type, API version, memory heaps, subgroups)");
  cmd->add_option("--tokenizer", args->tokenizer, "Tokenizer file to report on");
  cmd->add_flag("--tensors", args->tensors, "List every tensor");
  cmd->add_option("--chat-template", args->chat_template,
                  fmt::format("Chat template: a Jinja file, inline Jinja or a fallback name ({}); default: the model's",
                              fmt::join(model::chat_template_names(), ", ")));
  cmd->add_option("--chat", args->chat, "Render this user message with the chat template");
  return [args] { return run_inspect(*args); };
}

}  // namespace tessera::cli
