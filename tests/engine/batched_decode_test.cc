// Batched decode on the real stories260K weights and the cpu backend: a step at batch B gives every row the
// greedy tokens it gets alone at batch 1, and it runs each weight matrix once for all B rows (one MatMulOp
// per weight per step, not one per sequence), which is what lets the step's cost grow far slower than B.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "model/loader.h"
#include "ops/registry.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera::engine {
namespace {

// A Device that forwards to another and counts the MatMulOps its streams run, keyed by weight buffer.
class CountingDevice final : public ops::Device {
 public:
  explicit CountingDevice(std::unique_ptr<ops::Device> inner) : inner_(std::move(inner)) {}
  const ops::DeviceInfo& info() const override { return inner_->info(); }
  Result<std::unique_ptr<ops::Buffer>> alloc(size_t bytes) override { return inner_->alloc(bytes); }
  ops::Support supports(const ops::Op& op) const override { return inner_->supports(op); }
  std::unique_ptr<ops::Stream> create_stream() override {
    return std::make_unique<CountingStream>(inner_->create_stream(), matmuls_);
  }
  // Matmul calls per weight (buffer, offset) since the last reset.
  std::map<std::pair<const ops::Buffer*, size_t>, int>& matmuls() { return matmuls_; }

 private:
  class CountingStream final : public ops::Stream {
   public:
    CountingStream(std::unique_ptr<ops::Stream> inner, std::map<std::pair<const ops::Buffer*, size_t>, int>& counts)
        : inner_(std::move(inner)), counts_(counts) {}
    Status run(const ops::Op& op) override {
      if (const auto* mm = std::get_if<ops::MatMulOp>(&op)) counts_[{mm->w.buffer, mm->w.offset}]++;
      return inner_->run(op);
    }
    Status write(ops::Buffer& dst, size_t offset, const void* src, size_t bytes) override {
      return inner_->write(dst, offset, src, bytes);
    }
    Status read(ops::Buffer& src, size_t offset, void* dst, size_t bytes) override {
      return inner_->read(src, offset, dst, bytes);
    }
    Status synchronize() override { return inner_->synchronize(); }

   private:
    std::unique_ptr<ops::Stream> inner_;
    std::map<std::pair<const ops::Buffer*, size_t>, int>& counts_;
  };
  std::unique_ptr<ops::Device> inner_;
  std::map<std::pair<const ops::Buffer*, size_t>, int> matmuls_;
};

constexpr int kBatch = 8;
constexpr int kGen = 40;

class BatchedDecode : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!testing::have_stories260k()) GTEST_SKIP() << "stories260K not found at " << testing::stories260k_dir();
    auto m = model::load_model(testing::stories260k_dir());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::make_unique<model::LoadedModel>(std::move(m).value());
    ops::DeviceOptions o;
    o.threads = 2;
    auto d = ops::open_device("cpu", 0, o);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    device_ = std::make_unique<CountingDevice>(std::move(d).value());
    RunnerOptions ro;
    ro.max_batch_tokens = 64;
    ro.max_sequences = kBatch + 1;
    if (std::string(GetParam()) != "f32") ro.weight_dtype = parse_dtype(GetParam());
    auto r = ModelRunner::create(*device_, model_->config, model_->weights, ro);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    runner_ = std::move(r).value();
    // Prompts of different lengths and contents, so the rows of a batch sit at different depths.
    const char* texts[kBatch] = {"Once upon a time", "Lily had a red ball",
                                 "The sun was",      "Tom and his dog went to the park to play",
                                 "One day",          "There was a little bird who could not fly",
                                 "Mom said",         "The big cat"};
    for (const char* t : texts) prompts_.push_back(model_->tokenizer->encode(t, true));
  }

  // The greedy continuation of every prompt, `batch` sequences decoding together in each step.
  std::vector<std::vector<TokenId>> generate(int batch) {
    std::vector<std::vector<TokenId>> out(prompts_.size());
    for (size_t first = 0; first < prompts_.size(); first += static_cast<size_t>(batch)) {
      const size_t n = std::min(static_cast<size_t>(batch), prompts_.size() - first);
      std::vector<SequenceKv> seqs(n);
      std::vector<TokenId> next(n);
      std::vector<float> logits;
      const auto vocab = static_cast<size_t>(model_->config.vocab_size);
      for (size_t i = 0; i < n; ++i) {
        EXPECT_TRUE(runner_->prefill(seqs[i], prompts_[first + i], logits).ok());
        next[i] = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
      std::vector<SequenceKv*> ptrs;
      for (auto& s : seqs) ptrs.push_back(&s);
      for (int g = 0; g < kGen; ++g) {
        for (size_t i = 0; i < n; ++i) out[first + i].push_back(next[i]);
        device_->matmuls().clear();
        Status st = runner_->decode(ptrs, next, logits);
        EXPECT_TRUE(st.ok()) << st.to_string();
        if (!st.ok()) return out;
        // One product per weight matrix for the whole batch: 7 per layer and the classifier.
        EXPECT_EQ(device_->matmuls().size(), static_cast<size_t>(7 * model_->config.n_layers + 1));
        for (const auto& [w, calls] : device_->matmuls()) EXPECT_EQ(calls, 1) << "batch " << n;
        for (size_t i = 0; i < n; ++i) {
          auto row = logits.begin() + static_cast<std::ptrdiff_t>(i * vocab);
          next[i] = static_cast<TokenId>(std::max_element(row, row + static_cast<std::ptrdiff_t>(vocab)) - row);
        }
      }
      for (auto& s : seqs) runner_->release(s);
    }
    return out;
  }

  std::unique_ptr<model::LoadedModel> model_;
  std::unique_ptr<CountingDevice> device_;
  std::unique_ptr<ModelRunner> runner_;
  std::vector<std::vector<TokenId>> prompts_;
};

TEST_P(BatchedDecode, GivesTheGreedyTokensOfBatchOne) {
  const auto alone = generate(1);
  for (int batch : {2, 3, 8}) {
    const auto together = generate(batch);
    for (size_t i = 0; i < prompts_.size(); ++i)
      EXPECT_EQ(together[i], alone[i]) << "prompt " << i << ", batch " << batch;
  }
  // The continuations are real text, not a degenerate repetition that would match trivially.
  std::string text;
  for (TokenId t : alone[0]) text += model_->tokenizer->decode_piece(0, t);
  EXPECT_GT(text.size(), 40u) << text;
  EXPECT_NE(alone[0], alone[1]);
}

INSTANTIATE_TEST_SUITE_P(Weights, BatchedDecode, ::testing::Values("f32", "q8_0"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace tessera::engine

namespace tessera {
namespace {

// `tessera bench step` as a user runs it: one row per batch size, each with a positive step time; a bad
// batch list is a one-line error.
TEST(BenchStep, PrintsStepTimeByBatchAndRejectsBadLists) {
  if (!testing::have_stories260k()) GTEST_SKIP() << "stories260K not found at " << testing::stories260k_dir();
  auto r = testing::run_process({testing::tessera_bin(), "bench", "step", "--model", testing::stories260k_dir(),
                                 "--batch", "1,4,9", "--context", "16", "--steps", "2", "--repeat", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int rows = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    int batch = 0;
    double ms = 0;
    if (std::sscanf(line.c_str(), "%d %lf", &batch, &ms) == 2) {
      EXPECT_EQ(batch, rows == 0 ? 1 : rows == 1 ? 4 : 9) << line;
      EXPECT_GT(ms, 0.0) << line;
      ++rows;
    }
  }
  EXPECT_EQ(rows, 3) << r.out;
  for (const char* bad : {"0", "1,,2", "4x", ""}) {
    auto b = testing::run_process({testing::tessera_bin(), "bench", "step", "--model", testing::stories260k_dir(),
                                   "--batch", bad, "--steps", "1", "--repeat", "1"});
    EXPECT_NE(b.exit_code, 0) << bad;
    EXPECT_NE(b.err.find("--batch"), std::string::npos) << bad << ": " << b.err;
  }
}

}  // namespace
}  // namespace tessera
