// The model-format commands as a user runs them: convert stories260K to GGUF (tokenizer embedded) and to a
// Hugging Face folder and back, and generate llama2.c's reference output byte for byte from each; synth in
// every format; inspect; and bad files through the CLI (one-line errors, no crash).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "base/mapped_file.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using testing::run_process;
using testing::tessera_bin;

testing::ProcessResult tessera(std::vector<std::string> args) {
  args.insert(args.begin(), tessera_bin());
  return run_process(args, 120.0);
}

void expect_clean_error(const std::vector<std::string>& args, const std::string& needle) {
  auto r = tessera(args);
  EXPECT_FALSE(r.timed_out) << "hung";
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128) << "killed by a signal: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "not one line: " << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

void write(const std::string& path, const std::string& bytes) {
  ASSERT_TRUE(write_file_atomic(path, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}).ok());
}

TEST(ModelFormatsCli, Stories260KAsGgufReproducesTheReferenceByteForByte) {
  TS_REQUIRE_STORIES260K();
  std::string dir = testing::scratch_dir();
  auto want = read_file(testing::stories260k_dir() + "/greedy-256.txt");
  ASSERT_TRUE(want.ok());
  auto c = tessera({"convert", testing::stories260k_dir(), dir + "/s.gguf"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("tokenizer embedded"), std::string::npos) << c.err;
  // The GGUF file alone: weights and tokenizer.
  auto g = tessera({"generate", "--model", dir + "/s.gguf", "--temperature", "0", "--max-tokens", "256", "--quiet"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out, *want);

  // GGUF -> HF folder -> GGUF with the SentencePiece .model as its tokenizer: still the same story.
  ASSERT_EQ(tessera({"convert", dir + "/s.gguf", dir + "/hf"}).exit_code, 0);
  auto h = tessera({"generate", "--model", dir + "/hf", "--tokenizer", testing::stories260k_dir() + "/tok512.bin",
                    "--temperature", "0", "--max-tokens", "256", "--quiet"});
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_EQ(h.out, *want);
  auto b = tessera(
      {"convert", dir + "/hf", dir + "/back.gguf", "--tokenizer", testing::stories260k_dir() + "/tok512.model"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto gb =
      tessera({"generate", "--model", dir + "/back.gguf", "--temperature", "0", "--max-tokens", "256", "--quiet"});
  ASSERT_EQ(gb.exit_code, 0) << gb.err;
  EXPECT_EQ(gb.out, *want);

  auto i = tessera({"inspect", dir + "/s.gguf"});
  ASSERT_EQ(i.exit_code, 0) << i.err;
  for (const char* s : {"format:        gguf", "architecture:  llama", "parameters:    260032",
                        "tokenizer:     sentencepiece-bpe (512 tokens", "interleaved", "f32       47 tensors"})
    EXPECT_NE(i.out.find(s), std::string::npos) << s << " in\n" << i.out;
}

TEST(ModelFormatsCli, QuantisedGgufStillTellsTheStory) {
  TS_REQUIRE_STORIES260K();
  std::string dir = testing::scratch_dir();
  auto c = tessera({"convert", testing::stories260k_dir(), dir + "/q8.gguf", "--dtype", "q8_0"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("stored as f16"), std::string::npos) << "ffn_down rows of 172 cannot be q8_0: " << c.err;
  auto g = tessera({"generate", "--model", dir + "/q8.gguf", "--temperature", "0", "--max-tokens", "20", "--quiet"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out.rfind("Once upon a time", 0), 0u) << g.out;
}

TEST(ModelFormatsCli, SynthInEveryFormatGeneratesTheSameText) {
  std::string dir = testing::scratch_dir();
  std::vector<std::string> outs;
  for (const auto& [format, out] : std::vector<std::pair<std::string, std::string>>{
           {"llama2c", dir + "/m.bin"}, {"gguf", dir + "/m.gguf"}, {"safetensors", dir + "/hf"}}) {
    auto s = tessera({"synth", "--shape", "tiny", "--seed", "3", "--format", format, "--out", out, "--tokenizer-out",
                      dir + "/tok.bin"});
    ASSERT_EQ(s.exit_code, 0) << s.err;
    std::vector<std::string> gen = {"generate", "--model",      out,  "--prompt", "Hello", "--temperature",
                                    "0",        "--max-tokens", "24", "--quiet"};
    if (format != "gguf") {
      gen.push_back("--tokenizer");
      gen.push_back(dir + "/tok.bin");
    }
    auto g = tessera(gen);
    ASSERT_EQ(g.exit_code, 0) << format << ": " << g.err;
    outs.push_back(g.out);
    auto i = tessera({"inspect", out, "--tokenizer", dir + "/tok.bin"});
    ASSERT_EQ(i.exit_code, 0) << i.err;
    EXPECT_NE(i.out.find("format:        " + format), std::string::npos) << i.out;
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
  auto q =
      tessera({"synth", "--shape", "qwen2.5-0.5b", "--layers", "1", "--format", "llama2c", "--out", dir + "/q.bin"});
  EXPECT_NE(q.exit_code, 0);
  EXPECT_NE(q.err.find("llama2.c checkpoints hold llama models"), std::string::npos) << q.err;
}

TEST(ModelFormatsCli, ChatTemplateFromTokenizerConfigOrFlag) {
  std::string dir = testing::scratch_dir();
  ASSERT_EQ(tessera({"synth", "--shape", "tiny", "--format", "safetensors", "--out", dir + "/hf"}).exit_code, 0);
  expect_clean_error({"inspect", dir + "/hf", "--chat", "Hi"}, "no chat template; choose one with --chat-template");
  write(dir + "/hf/tokenizer_config.json",
        R"({"chat_template": "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n'}}{% endfor %}"})");
  auto r = tessera({"inspect", dir + "/hf", "--chat", "Hi"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The model's own Jinja template runs as written (this one prints role headers only).
  EXPECT_NE(r.out.find("chat template: the model's chat template"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chat prompt:   <|im_start|>user\\n\n"), std::string::npos) << r.out;
  r = tessera({"inspect", dir + "/hf", "--chat", "Hi", "--chat-template", "chatml"});
  EXPECT_NE(r.out.find("chatml (named fallback)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chat prompt:   <|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n"), std::string::npos)
      << r.out;
  write(dir + "/t.jinja", "{% for m in messages %}[{{ m.role | upper }}] {{ m.content }}{% endfor %}");
  r = tessera({"inspect", dir + "/hf", "--chat", "Hi", "--chat-template", dir + "/t.jinja"});
  EXPECT_NE(r.out.find("chat prompt:   [USER] Hi\n"), std::string::npos) << r.out;
  // chat_template.jinja beside tokenizer_config.json is the one transformers reads.
  write(dir + "/hf/chat_template.jinja", "jinja file: {{ messages[0].content }}");
  r = tessera({"inspect", dir + "/hf", "--chat", "Hi"});
  EXPECT_NE(r.out.find("chat prompt:   jinja file: Hi\n"), std::string::npos) << r.out;
  expect_clean_error({"inspect", dir + "/hf", "--chat-template", "alpaca"}, "'alpaca' is not a file");
  write(dir + "/bad.jinja", "ok\n{% for x in %}");
  expect_clean_error({"inspect", dir + "/hf", "--chat", "Hi", "--chat-template", dir + "/bad.jinja"}, "line 2");
}

TEST(ModelFormatsCli, BadFilesAreOneLineErrors) {
  TS_REQUIRE_STORIES260K();
  std::string dir = testing::scratch_dir();
  ASSERT_EQ(tessera({"convert", testing::stories260k_dir(), dir + "/s.gguf"}).exit_code, 0);
  std::string good = *read_file(dir + "/s.gguf");

  std::string v4 = good;
  v4[4] = 4;
  write(dir + "/v4.gguf", v4);
  expect_clean_error({"generate", "--model", dir + "/v4.gguf"}, "GGUF version 4 is not supported");
  write(dir + "/cut.gguf", good.substr(0, good.size() / 2));
  expect_clean_error({"inspect", dir + "/cut.gguf"}, "truncated");
  std::string many = good;
  uint64_t n = uint64_t{1} << 40;
  std::memcpy(many.data() + 8, &n, 8);
  write(dir + "/many.gguf", many);
  expect_clean_error({"inspect", dir + "/many.gguf"}, "tensor count");

  ASSERT_EQ(tessera({"convert", dir + "/s.gguf", dir + "/hf"}).exit_code, 0);
  std::string st = *read_file(dir + "/hf/model.safetensors");
  uint64_t too_long = st.size();
  std::memcpy(st.data(), &too_long, 8);
  write(dir + "/hf/model.safetensors", st);
  expect_clean_error({"inspect", dir + "/hf"}, "beyond the end of the file");

  write(dir + "/hf/config.json", R"({"architectures": ["GPT2LMHeadModel"], "n_embd": 768})");
  expect_clean_error({"inspect", dir + "/hf"}, "architecture 'GPT2LMHeadModel' is not supported");
  expect_clean_error({"convert", dir + "/s.gguf", dir + "/out.bin", "--dtype", "q4_0"},
                     "llama2.c checkpoints hold f32");

  // A named pipe given as a file flag is refused at once: reading it would wait for a writer (the etcd password file
  // did, deaf to SIGTERM, and so did the three below).
  const std::string fifo = dir + "/password.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_clean_error({"serve", "--model", dir + "/s.gguf", "--port", "0", "--ctrl", "etcd://127.0.0.1:1", "--etcd-user",
                      "u", "--etcd-password-file", fifo},
                     "not a regular file");
  // So did a --config file and the TLS files (the libraries that read them open the path themselves; those two are
  // read after the model loaded, whose log lines come first).
  expect_clean_error({"serve", "--config", fifo}, "not a regular file");
  for (const std::vector<std::string>& tls :
       {std::vector<std::string>{"--tls-cert", fifo, "--tls-key", fifo},
        std::vector<std::string>{"--ctrl", "https://127.0.0.1:1", "--tls-ca", fifo}}) {
    std::vector<std::string> args = {"serve", "--model", dir + "/s.gguf", "--port", "0"};
    args.insert(args.end(), tls.begin(), tls.end());
    auto r = tessera(args);
    EXPECT_FALSE(r.timed_out) << "hung: " << tls[0];
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("not a regular file: " + fifo), std::string::npos) << r.err;
  }
}

// Every family's synth shape writes and generates through the CLI, as GGUF and as a HF folder.
// Qwen3.5's small shapes alternate linear and full layers: 2 layers hold one of each, 3 two linear layers and a full
// one; 35B-A3B's has 4 value heads on 2 key heads, so the folder's head order differs from the GGUF's.
TEST(ModelFormatsCli, SynthFamilyShapesGenerateTheSameTextFromGgufAndHf) {
  std::string dir = testing::scratch_dir();
  std::vector<std::pair<std::string, std::string>> cases;
  for (const char* shape : {"llama3.2-1b", "mistral-7b", "smollm2-135m", "qwen2.5-0.5b", "qwen3-0.6b", "gemma2-2b",
                            "gemma3-1b", "phi3-mini", "phi3-mini-128k", "qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-20b",
                            "qwen3.5-0.8b", "qwen3.5-35b-a3b"})
    cases.emplace_back(shape, "2");
  cases.emplace_back("qwen3.5-0.8b", "3");
  cases.emplace_back("qwen3.5-35b-a3b", "3");
  for (const auto& [shape, layers] : cases) {
    const std::string base = dir + "/" + shape + "-" + layers;
    auto g = tessera({"synth", "--shape", shape, "--small", "--layers", layers, "--format", "gguf", "--out",
                      base + ".gguf", "--tokenizer-out", base + ".tok"});
    ASSERT_EQ(g.exit_code, 0) << g.err;
    auto h = tessera(
        {"synth", "--shape", shape, "--small", "--layers", layers, "--format", "safetensors", "--out", base + "-hf"});
    ASSERT_EQ(h.exit_code, 0) << h.err;
    // One tokenizer for both (the GGUF's embedded vocabulary tokenizes as llama.cpp does, not as llama2.c).
    auto a = tessera({"generate", "--model", base + ".gguf", "--tokenizer", base + ".tok", "--prompt", "Once upon",
                      "--max-tokens", "20", "--temperature", "0", "--quiet"});
    auto b = tessera({"generate", "--model", base + "-hf", "--tokenizer", base + ".tok", "--prompt", "Once upon",
                      "--max-tokens", "20", "--temperature", "0", "--quiet"});
    ASSERT_EQ(a.exit_code, 0) << shape << ": " << a.err;
    ASSERT_EQ(b.exit_code, 0) << shape << ": " << b.err;
    EXPECT_EQ(a.out, b.out) << shape << " at " << layers << " layers";
    EXPECT_GT(a.out.size(), std::string("Once upon").size()) << shape;
  }
  // Gemma 4, at layer counts with sliding, full and (E2B) KV-sharing layers: the GGUF file, the folder synth writes,
  // and the GGUF -> HF -> GGUF round trip of `tessera convert` give the same text. The synthetic gemma4 vocabulary
  // lives in the GGUF file only (no tokenizer.json), so every run tokenizes with it.
  for (const auto& [shape, layers] : {std::pair{"gemma4-e2b", "10"}, std::pair{"gemma4-26b-a4b", "6"}}) {
    const std::string base = dir + "/" + shape;
    for (const char* format : {"gguf", "safetensors"}) {
      auto s = tessera({"synth", "--shape", shape, "--small", "--layers", layers, "--decisive", "--format", format,
                        "--out", base + (std::string(format) == "gguf" ? ".gguf" : "-hf")});
      ASSERT_EQ(s.exit_code, 0) << shape << ": " << s.err;
    }
    auto c1 = tessera({"convert", base + ".gguf", base + "-conv-hf"});
    ASSERT_EQ(c1.exit_code, 0) << shape << ": " << c1.err;
    auto c2 = tessera({"convert", base + "-conv-hf", base + "-rt.gguf"});
    ASSERT_EQ(c2.exit_code, 0) << shape << ": " << c2.err;
    std::vector<std::string> outs;
    for (const std::string& model : {base + ".gguf", base + "-hf", base + "-conv-hf", base + "-rt.gguf"}) {
      auto g = tessera({"generate", "--model", model, "--tokenizer", base + ".gguf", "--prompt", "Once upon",
                        "--max-tokens", "20", "--temperature", "0", "--quiet"});
      ASSERT_EQ(g.exit_code, 0) << model << ": " << g.err;
      outs.push_back(g.out);
    }
    EXPECT_GT(outs[0].size(), std::string("Once upon").size()) << shape;
    EXPECT_EQ(outs[1], outs[0]) << shape << ": HF folder from synth";
    EXPECT_EQ(outs[2], outs[0]) << shape << ": HF folder from convert";
    EXPECT_EQ(outs[3], outs[0]) << shape << ": GGUF -> HF -> GGUF";
    EXPECT_EQ(*read_file(base + "-hf/config.json"), *read_file(base + "-conv-hf/config.json")) << shape;
  }
}

// Qwen3.5 through `tessera convert`: GGUF -> HF folder -> GGUF gives the same greedy text at each step, and a folder
// whose config disagrees with its tensors is one line of error.
TEST(ModelFormatsCli, Qwen35ConvertsGgufToHfAndBack) {
  std::string dir = testing::scratch_dir();
  for (const char* shape : {"qwen3.5-0.8b", "qwen3.5-35b-a3b"}) {
    const std::string base = dir + "/" + shape;
    auto s = tessera({"synth", "--shape", shape, "--small", "--layers", "3", "--format", "gguf", "--out",
                      base + ".gguf", "--tokenizer-out", base + ".tok"});
    ASSERT_EQ(s.exit_code, 0) << s.err;
    auto to_hf = tessera({"convert", base + ".gguf", base + "-hf"});
    ASSERT_EQ(to_hf.exit_code, 0) << to_hf.err;
    auto back = tessera({"convert", base + "-hf", base + "-back.gguf"});
    ASSERT_EQ(back.exit_code, 0) << back.err;
    std::vector<std::string> outs;
    for (const std::string& model : {base + ".gguf", base + "-hf", base + "-back.gguf"}) {
      auto g = tessera({"generate", "--model", model, "--tokenizer", base + ".tok", "--prompt", "Once upon",
                        "--max-tokens", "20", "--temperature", "0", "--quiet"});
      ASSERT_EQ(g.exit_code, 0) << model << ": " << g.err;
      outs.push_back(g.out);
    }
    EXPECT_EQ(outs[0], outs[1]) << shape;
    EXPECT_EQ(outs[0], outs[2]) << shape;
    auto i = tessera({"inspect", base + "-back.gguf", "--tokenizer", base + ".tok"});
    ASSERT_EQ(i.exit_code, 0) << i.err;
    EXPECT_NE(
        i.out.find(std::string("architecture:  ") + (std::string(shape) == "qwen3.5-0.8b" ? "qwen35" : "qwen35moe")),
        std::string::npos)
        << i.out;
  }
  // layer_types that put a full layer where the folder holds a linear one.
  auto cfg = read_file(dir + "/qwen3.5-0.8b-hf/config.json");
  ASSERT_TRUE(cfg.ok());
  std::string text = *cfg;
  const size_t at = text.find("\"linear_attention\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, std::string("\"linear_attention\"").size(), "\"full_attention\"");
  write(dir + "/qwen3.5-0.8b-hf/config.json", text);
  expect_clean_error({"generate", "--model", dir + "/qwen3.5-0.8b-hf", "--tokenizer", dir + "/qwen3.5-0.8b.tok",
                      "--prompt", "Once", "--max-tokens", "2"},
                     "linear_attn.in_proj_qkv.weight is not part of this Qwen3.5 text model");
}

// A model whose context the KV budget cannot hold starts anyway, serving what fits (with a warning), unless
// --max-model-len asks for more than the model has.
TEST(ModelFormatsCli, ServeFitsTheContextToTheKvBudget) {
  std::string dir = testing::scratch_dir();
  auto s = tessera({"synth", "--shape", "qwen3-0.6b", "--small", "--layers", "2", "--max-seq-len", "32768", "--format",
                    "gguf", "--out", dir + "/q.gguf"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  // 2 layers x K and V x 2 kv heads x 32 x 2 bytes (the default f16 cache) = 512 B per token: 1 MiB holds 2048
  // of the 32768.
  auto r = run_process({tessera_bin(), "serve", "--model", dir + "/q.gguf", "--port", "0", "--kv-memory", "1"}, 6.0);
  EXPECT_TRUE(r.timed_out) << "serve exited: " << r.err;  // still serving when the test stopped it
  EXPECT_NE(r.out.find("listening on"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("serving a context of 2048"), std::string::npos) << r.err;
  // serve reports what it loaded before failing, so the error is its last line rather than its only one.
  auto refused = [&](std::vector<std::string> args, const std::string& needle) {
    auto e = tessera(std::move(args));
    EXPECT_FALSE(e.timed_out);
    EXPECT_NE(e.exit_code, 0);
    EXPECT_LT(e.exit_code, 128) << e.err;
    EXPECT_NE(e.err.find("tessera: error: "), std::string::npos) << e.err;
    EXPECT_NE(e.err.find(needle), std::string::npos) << e.err;
  };
  refused({"serve", "--model", dir + "/q.gguf", "--port", "0", "--max-model-len", "40000"},
          "exceeds the model's context of 32768");
  refused({"serve", "--model", dir + "/q.gguf", "--port", "0", "--kv-memory", "1", "--max-model-len", "4096"},
          "less than the served context of 4096");
}

}  // namespace
}  // namespace tessera
