// NodeServer: a generation request (/v1/completions, /v1/chat/completions) from its body to the engine's
// submit (or the PD service's): validate, render and tokenize the prompts, compile a grammar, make one Call per
// choice, start the answer once the engine took the request. Its outputs: node_server_output.cc.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "api/headers.h"
#include "api/http_status.h"
#include "api/resume.h"
#include "serve/access_writer.h"
#include "serve/forced_tools.h"
#include "serve/internal/node_server_impl.h"
#include "serve/resume_text.h"
#include "serve/structured.h"

namespace tessera::serve {
namespace {

// The parsed request's generation options as the engine takes them (prompt and length are set later).
engine::GenerationRequest engine_request(const api::GenerationOptions& g) {
  engine::GenerationRequest out;
  out.sampling = g.sampling;
  out.stop = g.stop;
  out.stop_token_ids.assign(g.stop_token_ids.begin(), g.stop_token_ids.end());
  out.ignore_eos = g.ignore_eos;
  out.skip_special_tokens = g.skip_special_tokens;
  out.logprobs = g.logprobs;
  out.prompt_logprobs = g.prompt_logprobs;
  return out;
}

}  // namespace

using json = nlohmann::json;
using api::ApiError;
using api::ApiRequest;
using api::error_body;
using internal::Call;
using internal::Clock;
using internal::dump;
using internal::InFlight;
using internal::unix_now;

void NodeServer::Impl::handle_generate(const http::Request& hreq, std::shared_ptr<http::ResponseWriter> w, bool chat) {
  const std::string_view endpoint = chat ? "chat" : "completions";
  std::shared_ptr<RequestTag> tag = tag_of(hreq, chat ? "chatcmpl" : "cmpl");
  tag->model = options.model_name;
  if (options.embeddings.enabled) {
    return reply_error(w, endpoint, tag.get(),
                       {400,
                        fmt::format("this node serves embeddings (--runner pooling): '{}' has no text generation "
                                    "here; use /v1/embeddings",
                                    options.model_name),
                        "invalid_request_error", "", "model_not_supported"});
  }
  if (draining) {
    // The header tells a router this node is draining, not failing: it stops sending new requests here and
    // leaves the streams in flight alone (drain is not failure).
    ended(endpoint, 503, tag.get());
    return w->send(503, error_body({503, "the server is shutting down", "service_unavailable", "", ""}),
                   "application/json", {{std::string(api::kDrainingHeader), "1"}});
  }
  if (options.pd != nullptr && options.pd->options().switchable && options.pd->role() == "prefill") {
    // Re-roled to prefill since the router chose this node: a 429 is retried on another node before any byte
    // went out, and does not count against this node's health (role_admin.h).
    return reply_error(w, endpoint, tag.get(),
                       {429, "this node is a prefill node now: client requests go to decode nodes", "rate_limit_error",
                        "", "role_changed"});
  }
  auto parsed = api::parse_request(hreq.body, chat, options.default_sampling);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(w, endpoint, tag.get(), *e);
  ApiRequest& r = std::get<ApiRequest>(parsed);
  const std::vector<std::string> names = options.served_names();
  if (std::find(names.begin(), names.end(), r.model) == names.end()) {
    return reply_error(
        w, endpoint, tag.get(),
        {404, fmt::format("The model '{}' does not exist; this server serves '{}'", r.model, options.model_name),
         "invalid_request_error", "model", "model_not_found"});
  }
  const model::Tokenizer& tok = engine.tokenizer();
  const model::ModelConfig& cfg = engine.config();
  // The prompts: chat's rendered messages, or each prompt of a completions request (echo gives its text back).
  struct Prompt {
    std::vector<model::TokenId> ids;
    std::string echo;
    int state_hint = 0;            // engine::GenerationRequest::state_hint
    bool keep_reply_state = true;  // engine::GenerationRequest::keep_reply_state
    bool reply_as_text = true;     // engine::GenerationRequest::reply_as_text
  };
  std::vector<Prompt> prompts;
  std::string prompt_text;
  // Structured output (docs/structured-outputs.md), or a forced tool call: one grammar, compiled here (a bad
  // schema or grammar is a 400 naming where), shared by every prompt and choice.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  if (!r.generation.structured.none()) {
    auto compiled = compile_structured(engine.grammars(), r.generation.structured);
    if (!compiled.ok()) {
      return reply_error(
          w, endpoint, tag.get(),
          {400, std::string(compiled.status().message()), "invalid_request_error", r.generation.structured.field, ""});
    }
    grammar = std::move(*compiled);
  }
  const bool forced_tools = forces_tool_call(r);
  bool forced_family_syntax = false;  // the grammar writes the calls in the family's syntax (forced_tools.h)
  if (forced_tools) {
    if (!r.generation.structured.none()) {
      return reply_error(w, endpoint, tag.get(),
                         {400,
                          fmt::format("tool_choice '{}' and '{}' both constrain the reply; send one", r.tool_choice,
                                      r.generation.structured.field),
                          "invalid_request_error", "tool_choice", ""});
    }
    auto forced = forced_tool_output(r, options.tool_parser);
    auto compiled = forced.ok() ? compile_structured(engine.grammars(), forced->output) : forced.status();
    forced_family_syntax = forced.ok() && forced->family_syntax;
    if (!compiled.ok()) {
      return reply_error(w, endpoint, tag.get(),
                         {400, fmt::format("the tools' parameter schemas: {}", compiled.status().message()),
                          "invalid_request_error", "tools", ""});
    }
    grammar = std::move(*compiled);
  }
  if (chat) {
    if (!options.chat) {
      return reply_error(
          w, endpoint, tag.get(),
          {400, "this model has no chat template; start the server with --chat-template, or use /v1/completions",
           "invalid_request_error", "messages", ""});
    }
    auto formatted = options.chat(r, [&w] { return w->client_gone(); });
    // Every way a render fails is the request's (its conversation, or the model's template past its budget,
    // which retrying elsewhere would not change): a 400, never a 429 or 5xx a router would retry.
    if (!formatted.ok())
      return reply_error(w, endpoint, tag.get(),
                         {400, formatted.status().message(), "invalid_request_error", "messages", ""});
    prompt_text = formatted->text;
    prompts.push_back({tok.encode(prompt_text, formatted->add_bos), ""});
    if (engine.state_checkpoints()) {
      // A hybrid model keeps its recurrent state where other users' conversations part from this one (the system
      // prompt's end), so that the next one with it reuses that much: the tokens the two renderings share.
      const size_t chars = shared_start(options.chat, r, prompt_text, [&w] { return w->client_gone(); });
      if (chars > 0) {
        const std::vector<model::TokenId> start = tok.encode(prompt_text.substr(0, chars), formatted->add_bos);
        const std::vector<model::TokenId>& ids = prompts.back().ids;
        prompts.back().state_hint =
            static_cast<int>(std::mismatch(ids.begin(), ids.end(), start.begin(), start.end()).first - ids.begin());
      }
      // The state inside the reply serves the next turn only if that turn sends the reply back as it was generated.
      prompts.back().keep_reply_state =
          options.reasoning == ReasoningFormat::kNone &&
          renders_reply_back(options.chat, r, prompt_text, [&w] { return w->client_gone(); });
    }
  } else {
    for (const api::CompletionPrompt& p : r.prompts) {
      if (p.is_tokens) {
        prompts.push_back({p.tokens, r.echo ? tok.decode(p.tokens) : ""});
        prompts.back().reply_as_text = false;  // a client sending tokens sends the reply's tokens back
      } else {
        prompts.push_back({tok.encode(p.text, true), r.echo ? p.text : ""});
      }
    }
  }
  int max_tokens = 0;
  for (const Prompt& p : prompts) {
    const int prompt_len = static_cast<int>(p.ids.size());
    if (prompt_len >= cfg.max_seq_len) {
      return reply_error(w, endpoint, tag.get(),
                         {400,
                          fmt::format("This model's maximum context length is {} tokens. However, your prompt is {} "
                                      "tokens, which leaves no room for the completion.",
                                      cfg.max_seq_len, prompt_len),
                          "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded"});
    }
    max_tokens = r.max_tokens >= 0 ? r.max_tokens : (chat ? cfg.max_seq_len - prompt_len : 16);
    if (prompt_len + max_tokens > cfg.max_seq_len) {
      return reply_error(
          w, endpoint, tag.get(),
          {400,
           fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens ({} in "
                       "the prompt, {} for the completion). Please reduce the prompt or max_tokens.",
                       cfg.max_seq_len, prompt_len + max_tokens, prompt_len, max_tokens),
           "invalid_request_error", "max_tokens", "context_length_exceeded"});
    }
  }
  const bool echo_only = !chat && r.echo && max_tokens == 0;  // the prompt scored, nothing generated
  if (r.generation.sampling.min_tokens > max_tokens) {
    return reply_error(
        w, endpoint, tag.get(),
        {400,
         fmt::format("'min_tokens' ({}) must not exceed max_tokens ({})", r.generation.sampling.min_tokens, max_tokens),
         "invalid_request_error", "min_tokens", ""});
  }
  for (const auto& [id, bias] : r.generation.sampling.logit_bias) {
    if (id >= cfg.vocab_size)
      return reply_error(
          w, endpoint, tag.get(),
          {400, fmt::format("'logit_bias' names token {}, outside the vocabulary [0, {})", id, cfg.vocab_size),
           "invalid_request_error", "logit_bias", ""});
  }
  // Internal fields come only from cluster members (the router); a client cannot forge a resumed stream.
  const bool internal = http::internal_caller(hreq, options.cluster_token);
  if (!internal && api::has_resume_field(hreq.body)) {
    return reply_error(w, endpoint, tag.get(),
                       {403, "'tessera_resume' is an internal field: only cluster members may send it",
                        "permission_error", "tessera_resume", "internal_field"});
  }
  auto resume = api::parse_resume(hreq.body, cfg.vocab_size);
  if (!resume.ok()) {
    return reply_error(w, endpoint, tag.get(),
                       {400, resume.status().message(), "invalid_request_error", "tessera_resume", ""});
  }
  const int n = r.n;
  const bool single = prompts.size() == 1 && n == 1;
  if (*resume && !single) {
    return reply_error(
        w, endpoint, tag.get(),
        {400, "'tessera_resume' continues one choice of one prompt", "invalid_request_error", "tessera_resume", ""});
  }

  // One Call per choice (ChoiceSet): choice p * n + i is the i-th of prompt p.
  auto set = std::make_shared<ChoiceSet>(static_cast<int>(prompts.size()), n);
  set->tag = tag;
  const std::string id = fmt::format("{}-{:016x}", chat ? "chatcmpl" : "cmpl", next_id++);
  // Without a client's (or router's) id, the request is known by its response's id in the logs too.
  if (hreq.header(std::string(api::kRequestIdHeader)).empty()) tag->request_id = id;
  const int64_t created = unix_now();
  const auto start = Clock::now();
  std::vector<std::vector<std::shared_ptr<Call>>> choices(prompts.size());
  std::vector<engine::GenerationRequest> gens;
  ApiRequest shared = r;
  // The reply's tool-call parser (tool_stream.h), one per choice; some read markers that are special tokens.
  auto tool_parser = make_reply_parser(r, options.tool_parser, forced_family_syntax);
  if (!tool_parser.ok())
    return reply_error(w, endpoint, tag.get(),
                       {400, tool_parser.status().message(), "invalid_request_error", "tools", ""});
  const bool reads_tools = *tool_parser != nullptr;
  bool spells_tools = false;
  if (reads_tools && !forced_tools) {
    auto plugin = tool_parsers().find(options.tool_parser);
    spells_tools = plugin.ok() && plugin->factory.reads_special_tokens;
  }
  // Every choice keeps the request's options, not its prompts or messages (a list of 64 long prompts with n 16
  // would otherwise be copied a thousand times).
  shared.prompts.clear();
  shared.prompt.clear();
  shared.prompt_tokens.clear();
  shared.messages.clear();
  shared.messages_json.clear();
  shared.tools_json.clear();
  for (size_t p = 0; p < prompts.size(); ++p) {
    engine::GenerationRequest gen = engine_request(r.generation);
    gen.prompt = prompts[p].ids;
    gen.state_hint = prompts[p].state_hint;
    gen.keep_reply_state = prompts[p].keep_reply_state;
    gen.reply_as_text = prompts[p].reply_as_text;
    gen.max_tokens = echo_only ? 1 : max_tokens;  // echo_only: the token that ends the prompt's pass is dropped
    gen.n = n;
    gen.grammar = grammar;
    // echo with logprobs: the prompt's tokens carry theirs too (OpenAI's legacy completions).
    if (r.echo && r.generation.logprobs >= 0)
      gen.prompt_logprobs = std::max(gen.prompt_logprobs, r.generation.logprobs);
    if (chat && (options.reasoning == ReasoningFormat::kGptOss || spells_tools))
      gen.skip_special_tokens = false;  // their markers are special tokens
    for (int i = 0; i < n; ++i) {
      auto call = std::make_shared<Call>();
      call->set = set;
      call->index = static_cast<int>(p) * n + i;
      call->req = shared;
      call->in_flight = std::make_unique<InFlight>(calls);
      call->writer = w;
      call->model = options.model_name;
      call->created = created;
      call->start = call->last = start;
      call->id = id;
      // Token ids let the router continue a broken stream elsewhere (resume.h): one choice of plain text only
      // (a reasoning or tool-call parser reshapes the text the router counts).
      call->token_ids = single && r.stream && internal && hreq.header(std::string(api::kTokenIdsHeader)) == "1" &&
                        !(chat && options.reasoning != ReasoningFormat::kNone) && !reads_tools;
      if (reads_tools) call->tools = std::move(make_reply_parser(r, options.tool_parser, forced_family_syntax)).value();
      call->prompt_ids = prompts[p].ids;
      call->echo_only = echo_only;
      if (chat && options.reasoning != ReasoningFormat::kNone) {
        call->reasoning = std::make_unique<ReasoningParser>(options.reasoning, prompt_text);
        call->prompt_text = prompt_text;
      }
      choices[p].push_back(std::move(call));
    }
    gens.push_back(std::move(gen));
  }
  if (*resume) apply_resume(*choices[0][0], gens[0], **resume);
  const bool preamble = !*resume || !(*resume)->preamble_sent;

  // Starts the answer: a stream's 200 goes out only once the engine took the request, so a full queue is a
  // 429 the router can retry elsewhere, not a 200 followed by an error event.
  const std::string request_id = tag->request_id;
  auto start_answer = [this, choices, request_id, echo = preamble, prompts] {
    const Call& first = *choices[0][0];
    if (first.req.stream) {
      http::Headers h;
      h.emplace("X-Request-Id", request_id);
      first.writer->start_stream(200, "text/event-stream", h);
    }
    for (size_t p = 0; p < choices.size(); ++p) {
      const std::string& echo_text = echo ? prompts[p].echo : std::string();
      for (const std::shared_ptr<Call>& call : choices[p]) {
        if (!call->req.stream) {
          call->text = echo_text;
        } else if (!echo_text.empty() && call->req.generation.logprobs >= 0) {
          call->echo_pending = echo_text;  // its logprobs come with the first output
        } else if (!echo_text.empty()) {
          call->writer->write(
              "data: " +
              dump(chunk(
                  *call,
                  {{"index", call->index}, {"text", echo_text}, {"logprobs", nullptr}, {"finish_reason", nullptr}})) +
              "\n\n");
        }
      }
    }
  };
  std::vector<engine::OutputCallback> on_outs;
  for (size_t p = 0; p < choices.size(); ++p) {
    on_outs.push_back([this, mine = choices[p]](const engine::RequestOutput& o) {
      if (o.index >= 0 && static_cast<size_t>(o.index) < mine.size()) on_output(mine[static_cast<size_t>(o.index)], o);
    });
  }
  if (choices[0][0]->resumed > 0 && gens[0].max_tokens <= 0) {  // every token was generated already
    start_answer();
    engine::RequestOutput o;
    o.finish = engine::FinishReason::kLength;
    o.prompt_tokens = static_cast<int>(gens[0].prompt.size());
    return on_outs[0](o);
  }
  engine::Engine* eng = &engine;
  if (options.pd != nullptr && options.pd->role() == "decode") {
    // Its queue is checked before the 200 (the PD service submits each prompt as the answer starts).
    if (Status admit = engine.admission(); !admit.ok())
      return reply_error(w, endpoint, tag.get(), api::error_for(admit));
    start_answer();
    // The PD service attaches what the pd-link connector needs and submits: whether each prompt is prefilled on
    // a prefill node is decided at its admission in the engine (serve/pd.h).
    struct Handle {
      std::mutex mu;
      std::optional<engine::RequestId> id;
      bool gone = false;
    };
    std::vector<std::shared_ptr<Handle>> handles;
    for (size_t p = 0; p < prompts.size(); ++p) handles.push_back(std::make_shared<Handle>());
    auto cancelled = std::make_shared<std::atomic<bool>>(false);
    auto cancel_all = [eng, handles, cancelled] {
      *cancelled = true;
      for (const auto& handle : handles) {
        std::lock_guard<std::mutex> lock(handle->mu);
        handle->gone = true;
        if (handle->id) eng->cancel(*handle->id);
      }
    };
    set->cancel = cancel_all;
    w->on_disconnect(cancel_all);
    for (size_t p = 0; p < prompts.size(); ++p) {
      options.pd->generate(
          std::move(gens[p]), on_outs[p],
          [this, eng, handle = handles[p], call = choices[p][0], endpoint](Result<engine::RequestId> rid) {
            if (!rid.ok() && rid.status().code() == StatusCode::kCancelled) {
              std::lock_guard<std::mutex> lock(call->set->mu);
              if (call->set->over()) return;
              call->set->set_over();
              ended(endpoint, 499, call->set->tag.get());  // the client left while its prompt was being prefilled
              return call->writer->end();
            }
            if (!rid.ok()) return fail_submit(call, endpoint, rid.status());
            std::lock_guard<std::mutex> lock(handle->mu);
            handle->id = *rid;
            if (handle->gone) eng->cancel(*rid);
          },
          cancelled, internal ? hreq.header(std::string(api::kPrefillNodeHeader)) : std::string(),
          RequestTrace{tag->request_id, tag->trace});
    }
    return;
  }
  std::unique_lock<std::mutex> starting(set->mu);
  std::vector<engine::RequestId> ids;
  for (size_t p = 0; p < prompts.size(); ++p) {
    auto rid = engine.submit(std::move(gens[p]), on_outs[p]);
    if (!rid.ok()) {
      set->set_over();  // outputs of the prompts already submitted are dropped
      for (engine::RequestId done : ids) engine.cancel(done);
      return reply_error(w, endpoint, tag.get(), api::error_for(rid.status()));
    }
    ids.push_back(*rid);
  }
  set->cancel = [eng, ids] {
    for (engine::RequestId rid : ids) eng->cancel(rid);
  };
  start_answer();
  starting.unlock();
  w->on_disconnect([eng, ids] {
    for (engine::RequestId rid : ids) eng->cancel(rid);
  });
}

void NodeServer::Impl::apply_resume(Call& c, engine::GenerationRequest& gen, const api::Resume& res) {
  c.pending = pending_text(engine.tokenizer(), gen.prompt.back(), res);
  c.resumed = static_cast<int>(res.tokens.size());
  gen.prompt.insert(gen.prompt.end(), res.tokens.begin(), res.tokens.end());
  gen.grammar_replay = c.resumed;  // a grammar reads the output already sent before it masks anything
  gen.max_tokens -= c.resumed;
  c.role_sent = res.preamble_sent;
  if (!res.id.empty()) c.id = res.id;
  if (res.created != 0) c.created = res.created;
}

void NodeServer::Impl::fail_submit(const std::shared_ptr<Call>& call, std::string_view endpoint, const Status& status) {
  std::lock_guard<std::mutex> lock(call->set->mu);
  if (call->set->over()) return;
  call->set->set_over();
  if (call->set->cancel) call->set->cancel();
  const std::shared_ptr<http::ResponseWriter>& w = call->writer;
  ApiError e = api::error_for(status);
  ended(endpoint, e.status, call->set->tag.get());
  if (call->req.stream) {
    w->write("data: " + error_body(e) + "\n\n");
    w->write("data: [DONE]\n\n");
    w->end();
  } else {
    w->send(e.status, error_body(e));
  }
}

}  // namespace tessera::serve
