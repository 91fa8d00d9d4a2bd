// What the KV connector tests share: a greedy request through an engine (its text and cached tokens), the
// reference text of the same prompt computed by a fresh runner with no cache and no connector, and a temporary
// directory.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "engine/generator.h"
#include "model/loader.h"

namespace tessera::kv {

// A directory of its own under the system's temporary directory, removed with everything in it at the end.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("tessera-kv-test-" + std::to_string(getpid()) + "-" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

struct Answer {
  std::string text;
  int cached_tokens = 0;
};

inline Answer ask_greedy(engine::Engine& e, const model::LoadedModel& m, const std::string& prompt, int max_tokens) {
  engine::GenerationRequest r;
  r.prompt = m.tokenizer->encode(prompt, true);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  auto done = std::make_shared<std::promise<Answer>>();
  auto acc = std::make_shared<Answer>();
  auto id = e.submit(std::move(r), [done, acc](const engine::RequestOutput& o) {
    acc->text += o.text;
    acc->cached_tokens = o.cached_tokens;
    if (o.finish != engine::FinishReason::kNone) done->set_value(*acc);
  });
  EXPECT_TRUE(id.ok());
  return done->get_future().get();
}

inline std::string greedy_reference(ops::Device& device, const model::LoadedModel& m, const std::string& prompt,
                                    int max_tokens) {
  auto runner = engine::ModelRunner::create(device, m.config, m.weights, {}).value();
  engine::GenerateOptions go;
  go.max_tokens = max_tokens;
  go.echo_prompt = false;
  go.sampling.temperature = 0;
  std::string out;
  EXPECT_TRUE(generate(*runner, *m.tokenizer, prompt, go, [&](std::string_view s) { out += s; }).ok());
  return out;
}

}  // namespace tessera::kv
