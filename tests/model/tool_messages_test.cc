// Tool calls through each family's real chat template (llama.cpp's models/templates), both ways:
//  - going in: a conversation as an OpenAI client sends it (an assistant turn with content null and tool_calls
//    whose arguments are JSON strings, one or two calls; `tool` results with their tool_call_id) is parsed by the
//    API and rendered by Tessera's renderer, byte for byte equal to @huggingface/jinja rendering the same
//    conversation the way vLLM passes it to templates (arguments as objects, content "");
//  - coming out: the text a template writes for an assistant's calls is what the family's model is trained to
//    generate; after the generation prompt it is read back, by the reasoning parser and the tool-call parser the
//    node detects from that template, as the same calls (names, arguments, and a Mistral [CALL_ID] as the id).
// Templates from llama.cpp's source (as jinja_templates_test); skips, saying why, without them or node.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "api/openai.h"
#include "base/mapped_file.h"
#include "model/chat_template_renderer.h"
#include "serve/reasoning.h"
#include "serve/tool_parsers/tool_parser.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

const std::string kSource = TESSERA_SOURCE_DIR;

std::string templates_dir() { return testing::llamacpp_templates_dir(); }

struct Family {
  const char* file;
  const char* parser;  // what the node detects from the template
  bool parallel;       // the template renders two calls in one turn
};
const Family kFamilies[] = {
    {"Qwen-Qwen3-0.6B.jinja", "hermes", true},
    {"Qwen-Qwen2.5-7B-Instruct.jinja", "hermes", true},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes", true},
    {"Qwen3-Coder.jinja", "qwen3_coder", true},
    {"Qwen3.5-4B.jinja", "qwen3_coder", true},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3_json", false},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3_json", false},
    {"meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3_json", false},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral", true},
    {"Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral", true},
    {"unsloth-mistral-Devstral-Small-2507.jinja", "mistral", true},
    {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", "mistral", true},
    {"openai-gpt-oss-120b.jinja", "openai", false},
};

// Parameters with descriptions: Hermes 3's template prints them unconditionally.
const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"},
  "days": {"type": "integer", "description": "How many days"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "add", "description": "Add", "parameters": {"type": "object",
  "properties": {"a": {"type": "integer", "description": "x"}, "b": {"type": "integer", "description": "y"}}}}}])";

// The calls of an assistant turn: (id, name, arguments).
struct Call {
  std::string id, name;
  Json args;
};
std::vector<Call> calls(bool two) {
  std::vector<Call> c = {{"a1B2c3D4e", "get_weather", {{"city", "Paris"}, {"days", 3}}}};
  if (two) c.push_back({"Z9y8X7w6v", "add", {{"a", 1}, {"b", 2}}});
  return c;
}

// The conversation as an OpenAI client sends it (`openai_form`) or as vLLM hands it to a template.
Json conversation(const std::vector<Call>& cs, bool with_results, bool openai_form) {
  Json tool_calls = Json::array();
  for (const Call& c : cs)
    tool_calls.push_back({{"id", c.id},
                          {"type", "function"},
                          {"function", {{"name", c.name}, {"arguments", openai_form ? Json(c.args.dump()) : c.args}}}});
  Json m =
      Json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}},
                   {{"role", "assistant"}, {"content", openai_form ? Json() : Json("")}, {"tool_calls", tool_calls}}});
  if (with_results)
    for (const Call& c : cs)
      m.push_back({{"role", "tool"}, {"tool_call_id", c.id}, {"content", c.name == "add" ? "3" : "{\"temp\": 21}"}});
  return m;
}

class ToolMessages : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = templates_dir();
    if (!fs::is_directory(dir_)) {
      auto fetch =
          testing::run_process({"/usr/bin/env", "bash", kSource + "/tests/model/jinja_ref/fetch_templates.sh"}, 600);
      if (fetch.exit_code != 0 || !fs::is_directory(dir_))
        GTEST_SKIP() << "llama.cpp's templates are not at " << dir_ << " and fetching them failed:\n" << fetch.err;
    }
    ref_dir_ = kSource + "/tests/model/jinja_ref";
    if (std::system("command -v node >/dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
    if (!fs::exists(ref_dir_ + "/node_modules/@huggingface/jinja")) {
      auto ci = testing::run_process(
          {"/usr/bin/env", "bash", "-c", "cd '" + ref_dir_ + "' && npm ci --no-audit --no-fund --loglevel=error"}, 600);
      if (ci.exit_code != 0) GTEST_SKIP() << "@huggingface/jinja is not installed (scripts/install-deps):\n" << ci.err;
    }
  }

  // @huggingface/jinja's renderings of `cases` ({id, template, context}); id -> text, or absent when it failed.
  std::map<std::string, std::string> reference(const Json& cases) {
    const std::string scratch = testing::scratch_dir();
    const std::string in = scratch + "/tool-cases.json", out = scratch + "/tool-reference.json";
    {
      std::ofstream f(in, std::ios::binary);
      f << cases.dump();
    }
    auto ref = testing::run_process(
        // The reference's clock is now, as the server's renderer's is (Llama 3.x and gpt-oss write today's date).
        {"/usr/bin/env", "TZ=UTC", "node", ref_dir_ + "/render.mjs", in, out,
         std::to_string(static_cast<int64_t>(std::time(nullptr)) * 1000)},
        300);
    EXPECT_EQ(ref.exit_code, 0) << ref.err;
    std::map<std::string, std::string> texts;
    auto text = read_file(out);
    if (!text.ok()) return texts;
    for (const Json& r : Json::parse(*text))
      if (r["ok"].get<bool>()) texts[r["id"].get<std::string>()] = r["text"].get<std::string>();
    return texts;
  }

  // Tessera's rendering, BOS written back as the reference writes it.
  Result<std::string> ours(const std::string& file, const std::string& messages_json, bool gen) {
    model::ModelChatInfo info;
    info.bos_token = "<s>";
    info.eos_token = "</s>";
    auto r = model::ChatTemplateRenderer::choose(dir_ + "/" + file, info);
    if (!r.ok()) return r.status();
    model::ChatRenderOptions o;
    o.add_generation_prompt = gen;
    auto rendered = r->render(messages_json, Json::parse(kTools).dump(), o);
    if (!rendered.ok()) return rendered.status();
    return (rendered->add_bos ? "<s>" : "") + rendered->text;
  }

  std::string dir_, ref_dir_;
};

TEST_F(ToolMessages, OpenAiShapedCallsAndResultsRenderAsTheReferenceRendersVllmsForm) {
  Json cases = Json::array();
  for (const Family& f : kFamilies) {
    for (bool two : {false, true}) {
      if (two && !f.parallel) continue;
      Json ctx = {{"messages", conversation(calls(two), true, false)},
                  {"tools", Json::parse(kTools)},
                  {"add_generation_prompt", true},
                  {"bos_token", "<s>"},
                  {"eos_token", "</s>"}};
      cases.push_back(
          {{"id", std::string(f.file) + (two ? " 2" : " 1")}, {"template", dir_ + "/" + f.file}, {"context", ctx}});
    }
  }
  const auto ref = reference(cases);
  int compared = 0;
  for (const Family& f : kFamilies) {
    for (bool two : {false, true}) {
      if (two && !f.parallel) continue;
      const std::string id = std::string(f.file) + (two ? " 2" : " 1");
      SCOPED_TRACE(id);
      // Through the API's request parser, as a client sends it.
      Json body = {{"model", "m"}, {"messages", conversation(calls(two), true, true)}, {"tools", Json::parse(kTools)}};
      auto parsed = api::parse_request(body.dump(), true);
      ASSERT_TRUE(std::holds_alternative<api::ApiRequest>(parsed)) << std::get<api::ApiError>(parsed).message;
      auto text = ours(f.file, std::get<api::ApiRequest>(parsed).messages_json, true);
      auto it = ref.find(id);
      ASSERT_NE(it, ref.end()) << "the reference failed to render";
      ASSERT_TRUE(text.ok()) << text.status().to_string();
      EXPECT_EQ(*text, it->second);
      EXPECT_NE(text->find("Paris"), std::string::npos);
      compared++;
    }
  }
  EXPECT_EQ(compared, 22);  // 13 templates, 9 of them with two calls too
}

TEST_F(ToolMessages, TheCallsATemplateWritesAreReadBackByItsFamilysParser) {
  for (const Family& f : kFamilies) {
    for (bool two : {false, true}) {
      if (two && !f.parallel) continue;
      SCOPED_TRACE(std::string(f.file) + (two ? " (two calls)" : ""));
      const std::string source = read_file(dir_ + "/" + f.file).value();
      auto parser_name = serve::choose_tool_parser("", source);
      ASSERT_TRUE(parser_name.ok());
      EXPECT_EQ(*parser_name, f.parser);
      // The generation prompt, and the same conversation ending with the assistant's calls.
      Json user = Json::array({conversation(calls(two), false, false)[0]});
      auto prompt = ours(f.file, user.dump(), true);
      auto full = ours(f.file, conversation(calls(two), false, false).dump(), false);
      ASSERT_TRUE(prompt.ok() && full.ok()) << prompt.status().to_string() << full.status().to_string();
      ASSERT_TRUE(full->starts_with(*prompt)) << *prompt << "\n---\n" << *full;
      std::string reply = full->substr(prompt->size());
      // The end-of-turn token ends generation: it is never in the text a parser reads.
      for (bool cut = true; cut;) {
        cut = false;
        for (std::string_view end : {"</s>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|call|>", "<|end|>", "\n"}) {
          if (reply.ends_with(end)) {
            reply.resize(reply.size() - end.size());
            cut = true;
          }
        }
      }
      const serve::ReasoningFormat rf = serve::detect_reasoning_format(source);
      const std::string content = serve::split_reasoning(rf, *prompt, reply).content;
      auto plugin = serve::tool_parsers().find(*parser_name);
      ASSERT_TRUE(plugin.ok());
      auto context = serve::ToolParserContext::from_tools_json(kTools);
      ASSERT_TRUE(context.ok());
      auto parser = plugin->factory.create(*context);
      const serve::ParsedReply r = serve::parse_whole(*parser, content);
      EXPECT_EQ(r.content, "") << reply;
      const std::vector<Call> want = calls(two);
      ASSERT_EQ(r.calls.size(), want.size()) << reply;
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(r.calls[i].name, want[i].name);
        EXPECT_EQ(Json::parse(r.calls[i].arguments), want[i].args) << r.calls[i].arguments;
        if (source.find("[CALL_ID]") != std::string::npos) {
          EXPECT_EQ(r.calls[i].id, want[i].id);
        }
      }
    }
  }
}

TEST_F(ToolMessages, FormatsDetectedAcrossLlamaCppsTemplates) {
  // Beyond the families above: templates that write the same formats, and ones whose calls are syntaxes of their
  // own (GLM's and Laguna's <arg_key>, MiniMax's XML) get no parser rather than a wrong one.
  const std::pair<const char*, const char*> cases[] = {
      {"ibm-granite-granite-4.0.jinja", "hermes"},
      {"Reka-Edge.jinja", "hermes"},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "qwen3_coder"},
      {"StepFun3.5-Flash.jinja", "qwen3_coder"},
      {"GLM-4.6.jinja", "none"},
      {"poolside-Laguna-XS.2.jinja", "none"},
      {"MiniMax-M3.jinja", "none"},
      {"google-gemma-2-2b-it.jinja", "none"},
      {"microsoft-Phi-3.5-mini-instruct.jinja", "none"},
  };
  for (const auto& [file, parser] : cases) {
    auto source = read_file(dir_ + "/" + file);
    ASSERT_TRUE(source.ok()) << file;
    EXPECT_EQ(serve::choose_tool_parser("", *source).value(), parser) << file;
  }
}

}  // namespace
}  // namespace tessera
