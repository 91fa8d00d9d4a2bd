// NodeServer: the engine's outputs for a call written as OpenAI answers: streamed chunks (role, echo, text,
// reasoning and tool-call deltas, logprobs, token-id comments for the router) or one whole answer once every
// choice finished; cancellation and errors end the call for all its choices.
#include <algorithm>
#include <mutex>
#include <utility>

#include <nlohmann/json.hpp>

#include "api/http_status.h"
#include "api/resume.h"
#include "serve/internal/node_server_impl.h"
#include "serve/prompt_logprobs.h"

namespace tessera::serve {
namespace {

using json = nlohmann::json;

json token_logprob_entry(const std::string& token_text, float logprob, const model::Tokenizer& tok,
                         const engine::TokenLogprobs* top, model::TokenId prev) {
  json bytes = json::array();
  for (unsigned char c : token_text) bytes.push_back(static_cast<int>(c));
  json e = {{"token", token_text}, {"logprob", logprob}, {"bytes", bytes}};
  if (top) {
    json tops = json::array();
    for (const auto& [id, lp] : top->top) {
      std::string t = tok.decode_piece(prev, id);
      json b = json::array();
      for (unsigned char c : t) b.push_back(static_cast<int>(c));
      tops.push_back({{"token", t}, {"logprob", lp}, {"bytes", b}});
    }
    e["top_logprobs"] = tops;
  }
  return e;
}

}  // namespace

using json = nlohmann::json;
using api::ApiError;
using api::error_body;
using internal::Call;
using internal::Clock;
using internal::dump;
using internal::seconds;

json NodeServer::Impl::logprobs_json(Call& c, const std::vector<engine::TokenLogprobs>& lps,
                                     const std::vector<std::string>& texts) {
  const model::Tokenizer& tok = engine.tokenizer();
  if (c.req.chat) {
    json content = json::array();
    for (size_t i = 0; i < lps.size(); ++i) {
      content.push_back(token_logprob_entry(texts[i], lps[i].logprob, tok, &lps[i], lps[i].token));
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  for (size_t i = 0; i < lps.size(); ++i) {
    tokens.push_back(texts[i]);
    token_lps.push_back(lps[i].logprob);
    json t = json::object();
    for (const auto& [id, lp] : lps[i].top) t[tok.decode_piece(lps[i].token, id)] = lp;
    tops.push_back(t);
    offsets.push_back(c.text_offset);
    c.text_offset += texts[i].size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

namespace {
// The prompt as the client gave it (or the template rendered it), without tokens an earlier node generated.
std::vector<int32_t> own_prompt_ids(const internal::Call& c) {
  const size_t own = c.prompt_ids.size() - std::min<size_t>(c.prompt_ids.size(), static_cast<size_t>(c.resumed));
  return {c.prompt_ids.begin(), c.prompt_ids.begin() + static_cast<std::ptrdiff_t>(own)};
}
}  // namespace

json NodeServer::Impl::chunk(const Call& c, json choice) {
  return {{"id", c.id},
          {"object", c.req.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", c.created},
          {"model", c.model},
          {"choices", json::array({std::move(choice)})}};
}

void NodeServer::Impl::on_output(const std::shared_ptr<Call>& c, const engine::RequestOutput& out) {
  ChoiceSet& set = *c->set;
  std::lock_guard<std::mutex> started(set.mu);
  if (set.over()) return;  // another choice failed and answered for the whole call
  engine::RequestOutput resumed_out;
  if (c->resumed > 0) resumed_out = resumed_output(*c, out);
  engine::RequestOutput echo_out;
  if (c->echo_only) {  // the one token generated to compute the prompt is not part of the answer
    echo_out.finish = out.finish == engine::FinishReason::kStop ? engine::FinishReason::kLength : out.finish;
    echo_out.error = out.error;
    echo_out.prompt_tokens = out.prompt_tokens;
    echo_out.cached_tokens = out.cached_tokens;
    echo_out.prompt_logprobs = out.prompt_logprobs;
    echo_out.timing = out.timing;
  }
  const engine::RequestOutput& o = c->resumed > 0 ? resumed_out : c->echo_only ? echo_out : out;
  if (!o.prompt_logprobs.empty()) c->prompt_lps = o.prompt_logprobs;
  const auto now = Clock::now();
  const std::string_view endpoint = c->req.chat ? "chat" : "completions";
  if (!o.tokens.empty()) {
    if (c->first_token) {
      if (set.first_token()) {
        metrics.time_to_first_token(seconds(c->start, now));
        if (set.tag) set.tag->ttft_ms = seconds(set.tag->start, now) * 1000;
      }
      c->first_token = false;
    } else {
      metrics.inter_token(seconds(c->last, now), static_cast<int>(o.tokens.size()));
    }
    c->last = now;
  }
  const bool done = o.finish != engine::FinishReason::kNone;
  if (done) metrics.request_done(o);
  if (c->req.stream) {
    stream_output(*c, o);
  } else {
    c->text += o.text;
    c->logprobs.insert(c->logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    c->token_texts.insert(c->token_texts.end(), o.token_texts.begin(), o.token_texts.end());
    if (c->req.return_token_ids) c->token_ids_out.insert(c->token_ids_out.end(), o.tokens.begin(), o.tokens.end());
  }
  if (!done) return;
  if (o.finish == engine::FinishReason::kCancelled || o.finish == engine::FinishReason::kError) {
    // One choice cannot be answered: neither can the call. The others stop.
    set.set_over();
    if (set.cancel) set.cancel();
    metrics.request_latency(seconds(c->start, now));
  }
  if (o.finish == engine::FinishReason::kCancelled) {
    ended(endpoint, 499, set.tag.get());
    if (!c->req.stream)
      c->writer->send(503, error_body({503, "the request was cancelled: the server is shutting down",
                                       "service_unavailable", "", ""}));
    else
      c->writer->end();
    return;
  }
  if (o.finish == engine::FinishReason::kError) {
    ApiError e = api::error_for(o.error);
    ended(endpoint, e.status, set.tag.get());
    if (c->req.stream) {
      c->writer->write("data: " + error_body(e) + "\n\n");
      c->writer->write("data: [DONE]\n\n");
      c->writer->end();
    } else {
      c->writer->send(e.status, error_body(e));
    }
    return;
  }
  std::string reason(engine::finish_reason_name(o.finish));
  // Chat: the reply's reasoning (reasoning.h) apart from its content, which may hold tool calls.
  std::string content = c->text, reasoning;
  ParsedReply reply;
  if (c->req.stream) {
    std::vector<json> deltas;
    if (c->reasoning) {
      ReasoningDelta rest = c->reasoning->finish();
      if (!rest.reasoning.empty()) deltas.push_back({{"reasoning_content", rest.reasoning}});
      if (c->tools) {
        for (json& d : tool_deltas(c->tools->feed(rest.content))) deltas.push_back(std::move(d));
      } else if (!rest.content.empty()) {
        deltas.push_back({{"content", rest.content}});
      }
    }
    if (c->tools)
      for (json& d : tool_deltas(c->tools->finish())) deltas.push_back(std::move(d));
    for (json& d : deltas) write_delta(*c, std::move(d));
  } else {
    if (c->reasoning) {
      ReasoningDelta split = split_reasoning(c->reasoning->format(), c->prompt_text, c->text);
      content = std::move(split.content);
      reasoning = std::move(split.reasoning);
    }
    if (c->tools) reply = parse_whole(*c->tools, content);
  }
  // A reply with complete calls ends "tool_calls" (as vLLM's do, also when max_tokens ended it right after a
  // call); one whose last call max_tokens cut off stays "length".
  if (c->tools && c->tools->completed_calls() > 0 &&
      (o.finish == engine::FinishReason::kStop || c->tools->broken_calls() == 0))
    reason = "tool_calls";
  if (c->req.stream) {
    json final_choice =
        c->req.chat
            ? json{{"index", c->index}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", reason}}
            : json{{"index", c->index}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", reason}};
    // The choice's last chunk and, when it ends the call, the usage chunk and [DONE] go out in one write: a node
    // that dies after it leaves the router all of them or none, never a finish_reason without the usage the
    // client asked for (a stream cut there cannot be continued elsewhere: router/migration.h).
    std::string tail = "data: " + dump(chunk(*c, final_choice)) + "\n\n";
    if (!set.finish_choice(c->index, nullptr, o)) {
      c->writer->write(tail);
      return;
    }
    metrics.request_latency(seconds(c->start, now));
    ended(endpoint, 200, set.tag.get(), &set);
    if (c->req.include_usage) {
      json u = chunk(*c, json());
      u["choices"] = json::array();
      u["usage"] = set.usage();
      tail += "data: " + dump(u) + "\n\n";
    }
    c->writer->write(tail + "data: [DONE]\n\n");
    c->writer->end();
    return;
  }
  json lp = nullptr;
  if (c->req.generation.logprobs >= 0) {
    // echo: the prompt's tokens come first, the first one without a logprob (OpenAI's legacy completions).
    json echoed = !c->req.chat && c->req.echo
                      ? echo_logprobs(c->prompt_ids, c->prompt_lps, engine.tokenizer(), c->text_offset)
                      : json();
    lp = logprobs_json(*c, c->logprobs, c->token_texts);
    if (echoed.is_object()) {
      for (auto& [key, values] : lp.items())
        for (json& v : values) echoed[key].push_back(std::move(v));
      lp = std::move(echoed);
    }
  }
  json message = {{"role", "assistant"}, {"content", content}};
  if (c->reasoning) message["reasoning_content"] = reasoning.empty() ? json(nullptr) : json(reasoning);
  if (c->tools) message["content"] = reply.content;
  if (!reply.calls.empty()) {
    message["content"] = reply.content.empty() ? json(nullptr) : json(reply.content);
    message["tool_calls"] = tool_calls_json(reply.calls);
  }
  json choice = c->req.chat
                    ? json{{"index", c->index}, {"message", message}, {"logprobs", lp}, {"finish_reason", reason}}
                    : json{{"index", c->index}, {"text", c->text}, {"logprobs", lp}, {"finish_reason", reason}};
  if (c->req.return_token_ids) {
    if (!c->req.chat) choice["prompt_token_ids"] = own_prompt_ids(*c);
    choice["token_ids"] = c->token_ids_out;
  }
  if (!c->req.chat && c->req.generation.prompt_logprobs >= 0)
    choice["prompt_logprobs"] = vllm_prompt_logprobs(c->prompt_ids, c->prompt_lps, engine.tokenizer());
  if (!set.finish_choice(c->index, std::move(choice), o)) return;
  metrics.request_latency(seconds(c->start, now));
  ended(endpoint, 200, set.tag.get(), &set);
  json body = {{"id", c->id},
               {"object", c->req.chat ? "chat.completion" : "text_completion"},
               {"created", c->created},
               {"model", c->model},
               {"choices", set.choices()},
               {"usage", set.usage()}};
  if (c->req.chat && c->req.generation.prompt_logprobs >= 0)  // vLLM: the call's, beside the choices
    body["prompt_logprobs"] = vllm_prompt_logprobs(c->prompt_ids, c->prompt_lps, engine.tokenizer());
  if (c->req.chat && c->req.return_token_ids) body["prompt_token_ids"] = own_prompt_ids(*c);
  c->writer->send(200, dump(body));
}

void NodeServer::Impl::write_delta(Call& c, json delta) {
  c.writer->write(
      "data: " +
      dump(chunk(
          c, {{"index", c.index}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}})) +
      "\n\n");
}

engine::RequestOutput NodeServer::Impl::resumed_output(Call& c, const engine::RequestOutput& out) {
  engine::RequestOutput o = out;
  if (!c.pending.empty() && (!o.text.empty() || o.finish != engine::FinishReason::kNone)) {
    o.text = c.pending + o.text;
    c.pending.clear();
  }
  o.prompt_tokens -= c.resumed;
  o.completion_tokens += c.resumed;
  return o;
}

void NodeServer::Impl::stream_output(Call& c, const engine::RequestOutput& o) {
  if (c.req.chat && !c.role_sent) {
    c.role_sent = true;
    c.writer->write("data: " +
                    dump(chunk(c, {{"index", c.index},
                                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}})) +
                    "\n\n");
  }
  if (!c.echo_pending.empty()) {
    json lp = echo_logprobs(c.prompt_ids, c.prompt_lps, engine.tokenizer(), c.text_offset);
    c.writer->write("data: " +
                    dump(chunk(c, {{"index", c.index},
                                   {"text", std::exchange(c.echo_pending, std::string())},
                                   {"logprobs", std::move(lp)},
                                   {"finish_reason", nullptr}})) +
                    "\n\n");
  }
  const bool report_tokens = c.token_ids && !o.tokens.empty();
  std::string text = o.text, reasoning;
  if (c.reasoning) {
    ReasoningDelta d = c.reasoning->feed(o.text);
    text = std::move(d.content);
    reasoning = std::move(d.reasoning);
  }
  std::vector<json> tool_chunks;  // content and tool_calls deltas of the tool-call parser (tool_stream.h)
  if (c.tools) {
    tool_chunks = tool_deltas(c.tools->feed(text));
    text.clear();
  }
  const bool return_ids = c.req.return_token_ids && !o.tokens.empty();
  if (text.empty() && reasoning.empty() && o.logprobs.empty() && !report_tokens && !return_ids) {
    for (json& d : tool_chunks) write_delta(c, std::move(d));
    return;
  }
  json lp = c.req.generation.logprobs >= 0 && !o.logprobs.empty() ? logprobs_json(c, o.logprobs, o.token_texts)
                                                                  : json(nullptr);
  json delta = json::object();
  if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
  if (!text.empty() || reasoning.empty()) delta["content"] = text;
  json choice = c.req.chat ? json{{"index", c.index}, {"delta", delta}, {"logprobs", lp}, {"finish_reason", nullptr}}
                           : json{{"index", c.index}, {"text", o.text}, {"logprobs", lp}, {"finish_reason", nullptr}};
  json out_chunk = chunk(c, choice);
  if (return_ids) {  // vLLM: the reply's ids in every chunk, the prompt's in the first (the call's, for chat)
    json& ids_at = c.req.chat ? out_chunk : out_chunk["choices"][0];
    if (!std::exchange(c.prompt_ids_sent, true) && c.resumed == 0) ids_at["prompt_token_ids"] = own_prompt_ids(c);
    out_chunk["choices"][0]["token_ids"] = o.tokens;
  }
  // The token ids and their chunk go out in one write, so they reach the router together.
  c.writer->write((report_tokens ? api::token_comment(o.tokens) : std::string()) + "data: " + dump(out_chunk) + "\n\n");
  for (json& d : tool_chunks) write_delta(c, std::move(d));
}

}  // namespace tessera::serve
