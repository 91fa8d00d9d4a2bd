// Not a test: the grammar engine's mask benchmark (docs/benchmarks.md, "Structured outputs"). For each vocabulary
// and grammar: the compile time (precomputation over the vocabulary trie), then random walks (random tokens among
// the allowed ones, 8 seeds, up to 200 steps) timing Matcher::fill_mask per step, against the ceiling a naive
// engine pays: checking every token of the vocabulary by feeding its bytes to the recognizer (timed every 10th step).
//   tessera_grammar_bench [STEPS]   (vocabularies: models/stories260K, and llama.cpp's qwen2 / llama-spm test
//                                    vocabularies where tests/support/paths finds them)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/core.h>

#include "grammar/compiler.h"
#include "grammar/matcher.h"
#include "grammar/stack.h"
#include "model/tokenizer/load_tokenizer.h"
#include "support/paths.h"

namespace tessera::grammar {
namespace {

using Clock = std::chrono::steady_clock;

double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

const char* kExtraction = R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 24}, "id": {"type": "string", "format": "uuid"},
  "age": {"type": "integer", "minimum": 0, "maximum": 130}, "score": {"type": "number"},
  "status": {"enum": ["active", "inactive", "pending review"]}, "verified": {"type": "boolean"},
  "email": {"type": "string", "format": "email"},
  "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 5},
  "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                                               "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
              "required": ["city"], "additionalProperties": false}},
  "required": ["name", "id", "age", "status", "tags"], "additionalProperties": false})";

std::string read_text(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void bench(const std::string& vocab_name, const std::shared_ptr<const TokenVocab>& v, const std::string& spec_name,
           const Spec& spec, int steps) {
  auto g = build_spec(spec);
  if (!g.ok()) {
    fmt::print("| {} | {} | error: {} |\n", vocab_name, spec_name, g.status().to_string());
    return;
  }
  const auto t0 = Clock::now();
  auto compiled = CompiledGrammar::compile(*g, v);
  const double compile_ms = us(Clock::now() - t0) / 1000.0;
  std::vector<double> mask_us, scan_us;
  std::vector<uint64_t> mask(v->mask_words());
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Matcher m(compiled);
    StackMachine ref(**g);
    StateId at = ref.start();
    std::mt19937_64 rng(seed);
    for (int step = 0; step < steps; ++step) {
      const auto a = Clock::now();
      m.fill_mask(mask);
      mask_us.push_back(us(Clock::now() - a));
      if (step % 10 == 0) {
        // The vocabulary scan a naive engine does.
        const auto b = Clock::now();
        size_t allowed = 0;
        for (TokenId t = 0; t < v->size(); ++t) {
          const std::string_view bytes = v->bytes(t);
          StateId s = at;
          for (size_t i = 0; i < bytes.size() && s != kDeadState; ++i) s = ref.step(s, static_cast<uint8_t>(bytes[i]));
          allowed += !bytes.empty() && s != kDeadState;
        }
        scan_us.push_back(us(Clock::now() - b));
        if (allowed == 0 && !m.can_end()) std::abort();
      }
      std::vector<TokenId> ok;
      for (TokenId t = 0; t < v->size(); ++t)
        if (((mask[static_cast<size_t>(t) / 64] >> (t % 64)) & 1u) != 0 && !v->is_eog(t)) ok.push_back(t);
      if (ok.empty() || m.must_end()) break;
      const TokenId t = ok[rng() % ok.size()];
      m.accept_token(t);
      for (char c : v->bytes(t)) at = ref.step(at, static_cast<uint8_t>(c));
    }
  }
  double mean = 0;
  for (double x : mask_us) mean += x;
  mean /= static_cast<double>(std::max<size_t>(1, mask_us.size()));
  double scan = 0;
  for (double x : scan_us) scan += x;
  scan /= static_cast<double>(std::max<size_t>(1, scan_us.size()));
  fmt::print("| {} ({}) | {} | {:.1f} | {} | {:.1f} | {:.1f} | {:.1f} | {:.0f} | {:.0f} | {:.0f}x |\n", vocab_name,
             v->size(), spec_name, compile_ms, mask_us.size(), mean, pct(mask_us, 0.5), pct(mask_us, 0.99),
             *std::max_element(mask_us.begin(), mask_us.end()), scan, scan / std::max(mean, 1e-3));
}

int run(int steps) {
  std::string cpu;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  fmt::print("CPU: {} (one thread)\n\n", cpu);
  fmt::print(
      "| vocabulary | grammar | compile ms | steps | mask mean us | p50 | p99 | max | vocabulary scan us | speedup "
      "|\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::pair<std::string, std::string>> vocabs = {
      {"stories260K", testing::stories260k_dir() + "/tok512.bin"}};
  const std::string dir = testing::llamacpp_vocab_dir();
  if (!dir.empty()) {
    vocabs.push_back({"llama-spm", dir + "/ggml-vocab-llama-spm.gguf"});
    vocabs.push_back({"qwen2", dir + "/ggml-vocab-qwen2.gguf"});
  }
  std::vector<std::pair<std::string, Spec>> specs = {
      {"json_schema (extraction)", {SpecKind::kJsonSchema, kExtraction, ""}},
      {"json_object", {SpecKind::kJsonObject, "", ""}},
      {"regex (log line)", {SpecKind::kRegex, R"(\d{4}-\d{2}-\d{2} (INFO|WARN|ERROR) [a-z_.]{1,20}: [^\n]{0,80})", ""}},
  };
  if (!dir.empty()) {
    const std::string json = read_text(dir + "/../grammars/json.gbnf");
    if (!json.empty()) specs.push_back({"GBNF (llama.cpp json.gbnf)", {SpecKind::kGbnf, json, ""}});
  }
  for (const auto& [name, path] : vocabs) {
    auto tok = model::load_tokenizer(path);
    if (!tok.ok()) {
      fmt::print(stderr, "{}: {}\n", path, tok.status().to_string());
      return 1;
    }
    auto v = TokenVocab::from_tokenizer(**tok, {(*tok)->eos_id()});
    for (const auto& [sname, spec] : specs) bench(name, v, sname, spec, steps);
  }
  return 0;
}

}  // namespace
}  // namespace tessera::grammar

int main(int argc, char** argv) { return tessera::grammar::run(argc > 1 ? std::atoi(argv[1]) : 200); }
