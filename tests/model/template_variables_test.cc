// Request variables reaching real chat templates (vLLM's chat_template_kwargs, OpenAI's reasoning_effort),
// rendered by ChatTemplateRenderer exactly as @huggingface/jinja renders the same context: Qwen3's
// enable_thinking (false writes an empty think block into the prompt), gpt-oss's reasoning_effort (the system
// message's "Reasoning:" line), and DeepSeek-R1's template that opens <think> itself. The rendered prompt then
// decides where the reasoning parser starts (serve/reasoning.h). A variable a template never reads is refused.
// Templates from llama.cpp's source (as in jinja_templates_test); skips, saying why, without them or node.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "model/chat_template_renderer.h"
#include "serve/reasoning.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera::model {
namespace {
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

const std::string kSource = TESSERA_SOURCE_DIR;

std::string templates_dir() { return testing::llamacpp_templates_dir(); }

struct Case {
  std::string file;
  Json variables;
};

class TemplateVariables : public ::testing::Test {
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

  static Json messages() {
    return Json::array({Json{{"role", "system"}, {"content", "Be brief."}},
                        Json{{"role", "user"}, {"content", "What is the capital of France?"}}});
  }

  // The reference's rendering of `file` with the variables added to the context.
  std::string reference(const std::string& file, const Json& variables) {
    Json ctx = {{"messages", messages()}, {"add_generation_prompt", true}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
    for (const auto& [k, v] : variables.items()) ctx[k] = v;
    Json cases = Json::array({{{"id", "x"}, {"template", dir_ + "/" + file}, {"context", ctx}}});
    const std::string scratch = testing::scratch_dir();
    const std::string in = scratch + "/vars-cases.json", out = scratch + "/vars-reference.json";
    {
      std::ofstream f(in, std::ios::binary);
      f << cases.dump();
    }
    auto ref = testing::run_process(
        // The reference's clock is now, as the server's renderer's is (gpt-oss writes today's date).
        {"/usr/bin/env", "TZ=UTC", "node", ref_dir_ + "/render.mjs", in, out,
         std::to_string(static_cast<int64_t>(std::time(nullptr)) * 1000)},
        120);
    EXPECT_EQ(ref.exit_code, 0) << ref.err;
    auto text = read_file(out);
    if (!text.ok()) return "";
    Json r = Json::parse(*text)[0];
    EXPECT_TRUE(r["ok"].get<bool>()) << r.dump();
    return r.value("text", "");
  }

  // Tessera's rendering through the server's renderer (BOS written first is left to the tokenizer).
  Result<std::string> ours(const std::string& file, const Json& variables) {
    ModelChatInfo info;
    info.bos_token = "<s>";
    info.eos_token = "</s>";
    auto r = ChatTemplateRenderer::choose(dir_ + "/" + file, info);
    if (!r.ok()) return r.status();
    ChatRenderOptions o;
    if (!variables.empty()) o.variables_json = variables.dump();
    auto rendered = r->render(messages().dump(), "", o);
    if (!rendered.ok()) return rendered.status();
    return (rendered->add_bos ? "<s>" : "") + rendered->text;
  }

  std::string dir_, ref_dir_;
};

TEST_F(TemplateVariables, EqualTheReferenceAndDoWhatTheModelsDocument) {
  // Qwen3: enable_thinking false closes an empty think block in the prompt, and the reply is then all content;
  // without it the model opens its own <think>.
  const std::string qwen3 = "Qwen-Qwen3-0.6B.jinja";
  const Json no_think = {{"enable_thinking", false}};
  auto off = ours(qwen3, no_think);
  ASSERT_TRUE(off.ok()) << off.status().to_string();
  EXPECT_EQ(*off, reference(qwen3, no_think));
  EXPECT_TRUE(off->ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n")) << *off;
  auto on = ours(qwen3, Json::object());
  ASSERT_TRUE(on.ok());
  EXPECT_EQ(*on, reference(qwen3, Json::object()));
  EXPECT_TRUE(on->ends_with("<|im_start|>assistant\n")) << *on;
  EXPECT_EQ(serve::split_reasoning(serve::ReasoningFormat::kQwen3, *off, "Paris.").content, "Paris.");
  EXPECT_EQ(serve::split_reasoning(serve::ReasoningFormat::kQwen3, *on, "<think>France</think>Paris.").reasoning,
            "France");

  // gpt-oss: reasoning_effort is the system message's "Reasoning:" line.
  const std::string oss = "openai-gpt-oss-120b.jinja";
  for (const char* effort : {"low", "high"}) {
    const Json v = {{"reasoning_effort", effort}};
    auto r = ours(oss, v);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(*r, reference(oss, v)) << effort;
    EXPECT_NE(r->find(std::string("Reasoning: ") + effort), std::string::npos) << *r;
  }
  EXPECT_EQ(serve::detect_reasoning_format(read_file(dir_ + "/" + oss).value()), serve::ReasoningFormat::kGptOss);

  // DeepSeek-R1 (llama.cpp's fixed copy): its generation prompt opens <think>, so the reply starts in reasoning.
  const std::string r1 = "llama-cpp-deepseek-r1.jinja";
  auto ds = ours(r1, Json::object());
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(*ds, reference(r1, Json::object()));
  const std::string r1_source = read_file(dir_ + "/" + r1).value();
  const serve::ReasoningFormat r1_format = serve::detect_reasoning_format(r1_source);
  EXPECT_EQ(r1_format, serve::ReasoningFormat::kDeepSeekR1);
  serve::ReasoningDelta d = serve::split_reasoning(r1_format, *ds, "Paris is the capital.</think>Paris.");
  EXPECT_EQ(d.reasoning, "Paris is the capital.");
  EXPECT_EQ(d.content, "Paris.");
}

TEST_F(TemplateVariables, AVariableTheTemplateNeverReadsIsRefused) {
  auto r = ours("Qwen-Qwen2.5-7B-Instruct.jinja", Json{{"enable_thinking", false}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("enable_thinking"), std::string::npos) << r.status().message();
  auto effort = ours("Qwen-Qwen3-0.6B.jinja", Json{{"reasoning_effort", "low"}});
  EXPECT_FALSE(effort.ok()) << "Qwen3's template has no reasoning_effort";
  ModelChatInfo info;
  auto family = ChatTemplateRenderer::choose("chatml", info);
  ASSERT_TRUE(family.ok());
  EXPECT_FALSE(family->render(messages().dump(), "", {.variables_json = R"({"enable_thinking":false})"}).ok());
}

}  // namespace
}  // namespace tessera::model
