// Chat templates rendered by Tessera's Jinja engine equal @huggingface/jinja's renderings (the renderer
// transformers.js uses) byte for byte, on every template in llama.cpp's models/templates/ (Llama 3.x,
// Mistral, Qwen2.5/Qwen3, Gemma, Phi-3.5, SmolLM3 and ~60 more), over conversations with and without a
// system turn, multi-turn, add_generation_prompt true and false, and with tools (tool definitions, an
// assistant tool call, a tool result) for templates that read `tools`. strftime_now sees a fixed instant.
//
// Where the reference itself fails on a case (a template's raise_exception for a conversation it refuses,
// or syntax @huggingface/jinja does not support), Tessera must fail too. The templates come from
// llama.cpp's source (tests/model/jinja_ref/fetch_templates.sh puts it in the cache); the test skips,
// saying so, when neither it nor node is available.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "model/jinja/template.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera::model::jinja {
namespace {
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;  // key order is what tojson prints

const std::string kSource = TESSERA_SOURCE_DIR;
constexpr int64_t kFixedNow = 1721997000;  // 2024-07-26 12:30:00 UTC

// Where scripts/llamacpp.sh (and fetch_templates.sh) keep llama.cpp's source.
std::string templates_dir() { return testing::llamacpp_templates_dir(); }

Json msg(const char* role, const char* content) { return Json{{"role", role}, {"content", content}}; }

Json weather_tool() {
  return Json::parse(R"({"type": "function", "function": {"name": "get_weather",
    "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}})");
}

Json tool_call_turn() {
  return Json::parse(R"({"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]})");
}

// Conversations: name -> (messages, needs tools).
std::vector<std::tuple<std::string, Json, bool>> conversations() {
  std::vector<std::tuple<std::string, Json, bool>> c;
  c.emplace_back("user", Json::array({msg("user", "Hello, who are you?")}), false);
  c.emplace_back("system-user",
                 Json::array({msg("system", "You are a helpful assistant."), msg("user", "What is 2 + 2?")}), false);
  c.emplace_back(
      "multi-turn",
      Json::array({msg("user", "Hi!"), msg("assistant", "Hello! How can I help?"), msg("user", "Tell me a joke.")}),
      false);
  c.emplace_back(
      "system-multi-turn",
      Json::array({msg("system", "Answer briefly.\nUse plain words."), msg("user", "Name a colour."),
                   msg("assistant", " Blue (bleu, 青, 🔵). "), msg("user", "Another one, with \"quotes\" & <tags>?")}),
      false);
  c.emplace_back("ends-with-assistant",
                 Json::array({msg("user", "Count to three."), msg("assistant", "One, two, three.")}), false);
  c.emplace_back("tools-user", Json::array({msg("user", "What is the weather in Paris?")}), true);
  c.emplace_back("tools-system", Json::array({msg("system", "You can call tools."), msg("user", "Weather in Paris?")}),
                 true);
  Json call = Json::array({msg("user", "What is the weather in Paris?"), tool_call_turn(),
                           Json{{"role", "tool"},
                                {"tool_call_id", "call12345"},
                                {"name", "get_weather"},
                                {"content", "{\"temperature\": 21, \"sky\": \"clear\"}"}}});
  c.emplace_back("tools-call-result", call, true);
  Json after = call;
  after.push_back(msg("assistant", "It is 21 degrees and clear in Paris."));
  after.push_back(msg("user", "Thanks. And Lyon?"));
  c.emplace_back("tools-call-multi-turn", after, true);
  return c;
}

TEST(JinjaTemplates, EqualHuggingFaceJinjaOnLlamaCppTemplates) {
  const std::string dir = templates_dir();
  if (!fs::is_directory(dir)) {
    auto fetch =
        testing::run_process({"/usr/bin/env", "bash", kSource + "/tests/model/jinja_ref/fetch_templates.sh"}, 600);
    if (fetch.exit_code != 0 || !fs::is_directory(dir))
      GTEST_SKIP() << "llama.cpp's templates are not at " << dir << " and fetching them failed:\n" << fetch.err;
  }
  const std::string ref_dir = kSource + "/tests/model/jinja_ref";
  if (std::system("command -v node >/dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  if (!fs::exists(ref_dir + "/node_modules/@huggingface/jinja")) {
    auto ci = testing::run_process(
        {"/usr/bin/env", "bash", "-c", "cd '" + ref_dir + "' && npm ci --no-audit --no-fund --loglevel=error"}, 600);
    if (ci.exit_code != 0) GTEST_SKIP() << "@huggingface/jinja is not installed (scripts/install-deps):\n" << ci.err;
  }

  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".jinja") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 50u) << dir;

  Json cases = Json::array();
  for (const fs::path& f : files) {
    auto text = read_file(f.string());
    ASSERT_TRUE(text.ok()) << f;
    const bool takes_tools = text->find("tools") != std::string::npos;
    for (const auto& [name, messages, needs_tools] : conversations()) {
      if (needs_tools && !takes_tools) continue;
      for (bool gen : {true, false}) {
        Json ctx = {
            {"messages", messages}, {"add_generation_prompt", gen}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
        if (needs_tools) ctx["tools"] = Json::array({weather_tool()});
        cases.push_back({{"id", fmt::format("{} {} gen={}", f.filename().string(), name, gen)},
                         {"template", f.string()},
                         {"context", ctx}});
      }
    }
  }
  const std::string scratch = testing::scratch_dir();
  const std::string in = scratch + "/cases.json", out = scratch + "/reference.json";
  {
    std::FILE* fp = std::fopen(in.c_str(), "wb");
    ASSERT_NE(fp, nullptr);
    std::string s = cases.dump();
    std::fwrite(s.data(), 1, s.size(), fp);
    std::fclose(fp);
  }
  auto ref = testing::run_process(
      {"/usr/bin/env", "TZ=UTC", "node", ref_dir + "/render.mjs", in, out, std::to_string(kFixedNow * 1000)}, 300);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  auto ref_text = read_file(out);
  ASSERT_TRUE(ref_text.ok());
  Json reference = Json::parse(*ref_text);
  ASSERT_EQ(reference.size(), cases.size());

  RenderOptions options;
  options.now_unix_seconds = kFixedNow;
  options.utc = true;
  std::map<std::string, Result<Template>> compiled;
  int equal = 0, both_fail = 0, mismatches = 0;
  std::set<std::string> rendered_templates;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& c = cases[i];
    const Json& r = reference[i];
    const std::string path = c["template"].get<std::string>();
    auto it = compiled.find(path);
    if (it == compiled.end()) {
      auto text = read_file(path);
      it = compiled.emplace(path, Template::parse(*text)).first;
    }
    auto ctx = value_from_json(c["context"].dump());
    ASSERT_TRUE(ctx.ok());
    Result<std::string> ours =
        it->second.ok() ? it->second->render(ctx->obj(), options) : Result<std::string>(it->second.status());
    const std::string id = c["id"].get<std::string>();
    if (r["ok"].get<bool>()) {
      const std::string want = r["text"].get<std::string>();
      if (!ours.ok()) {
        ++mismatches;
        ADD_FAILURE() << id << ": the reference renders, Tessera fails: " << ours.status().message();
      } else if (*ours != want) {
        ++mismatches;
        ADD_FAILURE() << id << ":\n--- reference\n" << Json(want).dump() << "\n--- tessera\n" << Json(*ours).dump();
      } else {
        ++equal;
        rendered_templates.insert(fs::path(path).filename().string());
      }
    } else {
      if (ours.ok()) {
        ++mismatches;
        ADD_FAILURE() << id << ": the reference fails (" << r["error"].get<std::string>() << "), Tessera renders";
      } else {
        ++both_fail;
        if (std::getenv("TESSERA_JINJA_VERBOSE"))
          std::printf("both refuse %s\n  reference: %s\n  tessera:   %s\n", id.c_str(),
                      r["error"].get<std::string>().c_str(), ours.status().message().c_str());
      }
    }
  }
  // The families the issue names must each have rendered; a template the reference cannot render at all
  // would make its family's check vacuous.
  for (const char* must :
       {"meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "meta-llama-Llama-3.3-70B-Instruct.jinja", "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        "Mistral-Small-3.2-24B-Instruct-2506.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja",
        "Qwen-QwQ-32B.jinja", "google-gemma-2-2b-it.jinja", "microsoft-Phi-3.5-mini-instruct.jinja",
        "HuggingFaceTB-SmolLM3-3B.jinja", "google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja"}) {
    EXPECT_TRUE(rendered_templates.count(must)) << must << " rendered no case equal to the reference";
  }
  RecordProperty("templates", static_cast<int>(files.size()));
  RecordProperty("templates_rendered", static_cast<int>(rendered_templates.size()));
  RecordProperty("cases_equal", equal);
  RecordProperty("cases_both_fail", both_fail);
  std::printf(
      "%zu templates, %zu cases: %d equal, %d refused by both renderers, %d mismatched; %zu templates "
      "rendered\n",
      files.size(), cases.size(), equal, both_fail, mismatches, rendered_templates.size());
  EXPECT_GT(equal, 500);
}

}  // namespace
}  // namespace tessera::model::jinja
