// ChatTemplateRenderer's request fields on real templates (llama.cpp's models/templates, the models' own Jinja):
// continue_final_message ends the prompt inside the last assistant message, where the model goes on with the
// client's text, cut exactly where transformers cuts it (the formats below are the families' published ones);
// add_generation_prompt false ends after the last turn; both true is refused; a template's budget applies.
#include "model/chat_template_renderer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "base/mapped_file.h"
#include "support/paths.h"

namespace tessera::model {
namespace {

std::string templates_dir() { return testing::llamacpp_templates_dir(); }

Result<ChatTemplateRenderer> real_template(const std::string& name, const std::string& bos = "") {
  auto text = read_file(templates_dir() + "/" + name);
  if (!text.ok()) return text.status();
  ModelChatInfo info;
  info.chat_template = *text;
  info.bos_token = bos;
  return ChatTemplateRenderer::choose("", info);
}

const char* kChat = R"([{"role": "user", "content": "What is the capital of France?"},
                        {"role": "assistant", "content": "The capital of France is"}])";

#define TS_REQUIRE_TEMPLATES()                                                                                 \
  if (!std::filesystem::exists(templates_dir()))                                                               \
  GTEST_SKIP() << "llama.cpp's templates are not at " << templates_dir() << " (scripts/llamacpp.sh puts them " \
               << "there)"

TEST(ChatTemplateRenderer, ContinueFinalMessageEndsInsideTheAssistantsText) {
  TS_REQUIRE_TEMPLATES();
  ChatRenderOptions cont;
  cont.add_generation_prompt = false;
  cont.continue_final_message = true;
  struct Case {
    const char* file;
    const char* bos;
    const char* ending;  // the published format of the assistant turn's opening, then the client's text
  };
  for (const Case& c : {
           Case{"Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_start|>assistant\nThe capital of France is"},
           Case{"meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>",
                "<|start_header_id|>assistant<|end_header_id|>\n\nThe capital of France is"},
           Case{"google-gemma-2-2b-it.jinja", "<bos>", "<start_of_turn>model\nThe capital of France is"},
           Case{"microsoft-Phi-3.5-mini-instruct.jinja", "", "<|assistant|>\nThe capital of France is"},
       }) {
    SCOPED_TRACE(c.file);
    auto t = real_template(c.file, c.bos);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    auto whole = t->render(kChat, "", {.add_generation_prompt = false});
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    auto r = t->render(kChat, "", cont);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const std::string ending = c.ending;
    ASSERT_GE(r->text.size(), ending.size());
    EXPECT_EQ(r->text.substr(r->text.size() - ending.size()), ending) << r->text;
    // The same conversation as a closed turn, with only the end-of-turn markers after the text cut off.
    EXPECT_EQ(whole->text.compare(0, r->text.size(), r->text), 0) << whole->text;
    EXPECT_GT(whole->text.size(), r->text.size());
    EXPECT_EQ(r->add_bos, whole->add_bos);
  }
}

TEST(ChatTemplateRenderer, GenerationPromptFieldsAreCheckedAndReachTheTemplate) {
  TS_REQUIRE_TEMPLATES();
  auto t = real_template("Qwen-Qwen2.5-7B-Instruct.jinja");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const char* user = R"([{"role": "user", "content": "Hi"}])";
  auto open = t->render(user, "");
  auto closed = t->render(user, "", {.add_generation_prompt = false});
  ASSERT_TRUE(open.ok() && closed.ok());
  EXPECT_EQ(open->text, closed->text + "<|im_start|>assistant\n");
  // Both at once is vLLM's 400; a last message without text has nothing to continue.
  auto both = t->render(kChat, "", {.add_generation_prompt = true, .continue_final_message = true});
  EXPECT_EQ(both.status().code(), StatusCode::kInvalidArgument);
  auto empty = t->render(R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": ""}])", "",
                         {.add_generation_prompt = false, .continue_final_message = true});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("no text to continue"), std::string::npos);
  // The fallback families take the same fields.
  auto chatml = ChatTemplateRenderer::choose("chatml", {});
  ASSERT_TRUE(chatml.ok());
  auto fam = chatml->render(kChat, "", {.add_generation_prompt = false, .continue_final_message = true});
  ASSERT_TRUE(fam.ok()) << fam.status().to_string();
  EXPECT_EQ(fam->text.substr(fam->text.size() - 24), "The capital of France is");
}

TEST(ChatTemplateRenderer, AHostileTemplateStopsAtTheBudgetItIsGiven) {
  ModelChatInfo info;
  info.chat_template = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
  auto t = ChatTemplateRenderer::choose("", info);
  ASSERT_TRUE(t.ok());
  ChatRenderOptions o;
  o.limits.max_steps = 50000;
  auto r = t->render(R"([{"role": "user", "content": "Hi"}])", "", o);
  ASSERT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().to_string();
  EXPECT_NE(r.status().message().find("more than 50000 steps"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("the model's chat template"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tessera::model
