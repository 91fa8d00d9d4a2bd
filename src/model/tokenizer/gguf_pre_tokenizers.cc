#include "model/tokenizer/gguf_pre_tokenizers.h"

#include <algorithm>

#include <fmt/format.h>

namespace tessera::model {
namespace {

// GPT-2's pattern (tokenizer.json ByteLevel use_regex, OpenAI's encoder).
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3 (tiktoken cl100k): case-insensitive contractions, digits in runs of up to three.
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama 3 but single digits.
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5: combining marks stay with their letters.
constexpr const char* kQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-4o / Llama 4 (tiktoken o200k): words split at case changes, contractions attached.
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Mistral's tekken.
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Seed-Coder.
constexpr const char* kSeedCoder =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";
// The GPT-2 pattern without its final `\s+`, as llama.cpp's older types spell it (the unmatched whitespace
// is a piece of its own either way).
constexpr const char* kGpt2Short = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

// DeepSeek's hand-written letter, punctuation and CJK classes (their tokenizer.json Split patterns).
constexpr const char* kDeepseekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
    R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
    R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
    R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})"
    R"(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
    R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
constexpr const char* kDeepseekPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr const char* kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

struct Entry {
  std::vector<std::string> names;
  GgufPreTokenizer def;
};

const std::vector<Entry>& table() {
  static const std::vector<Entry> t = {
      // What llama.cpp runs for a `gpt2` vocabulary whose pre-tokenizer is "default" or absent.
      {{"default"},
       {"default", {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Short, R"(\p{N}+)", "[0-9][0-9][0-9]"}, false, false, false}},
      {{"gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "gigachat", "a.x-4.0", "mellum",
        "modern-bert", "mpt", "olmo", "jais", "exaone4", "trillion", "granite-docling"},
       {"gpt-2", {kGpt2}, false, false, false}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       {"llama3", {kLlama3}, true, true, false}},
      {{"dbrx", "smaug-bpe"}, {"dbrx", {kLlama3}, false, false, false}},
      {{"qwen2", "deepseek-r1-qwen"}, {"qwen2", {kQwen2}, false, false, true}},
      {{"megrez", "stablelm2", "hunyuan", "solar-open", "grok-2"}, {"stablelm2", {kQwen2}, false, false, false}},
      {{"qwen35"}, {"qwen35", {kQwen35}, false, false, false}},  // no normaliser: marks stay decomposed
      {{"deepseek-llm"},
       {"deepseek-llm",
        {R"([\r\n])", kDeepseekLetters, kDeepseekPunct, R"(\s+$)", kDeepseekCjk, R"(\p{N}+)"},
        false,
        false,
        false}},
      {{"deepseek-coder"},
       {"deepseek-coder",
        {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"},
        false,
        false,
        false}},
      {{"deepseek-v3"},
       {"deepseek-v3",
        {R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
         R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
        false,
        false,
        false}},
      {{"falcon"}, {"falcon", {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2Short, "[0-9][0-9][0-9]"}, false, false, false}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
       {"starcoder", {R"(\p{N})", kGpt2Short}, false, false, false}},
      {{"gpt-4o", "llama4", "minimax-m2", "kanana2"}, {"gpt-4o", {kGpt4o}, false, false, false}},
      {{"tekken"}, {"tekken", {kTekken}, true, true, false}},
      {{"seed-coder"}, {"seed-coder", {kSeedCoder}, false, false, false}},
      {{"poro-chat", "bloom", "gpt3-finnish"},
       {"bloom", {R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)"}, false, false, false}},
      {{"viking"},
       {"viking",
        {R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)", R"(\p{N})"},
        false,
        false,
        false}},
  };
  return t;
}

}  // namespace

Result<GgufPreTokenizer> gguf_pre_tokenizer(std::string_view name) {
  for (const Entry& e : table())
    if (std::find(e.names.begin(), e.names.end(), name) != e.names.end()) return e.def;
  return unimplemented(fmt::format("GGUF pre-tokenizer type '{}' (tokenizer.ggml.pre) is not supported; known: {}",
                                   name, fmt::join(gguf_pre_tokenizer_names(), ", ")));
}

std::vector<std::string> gguf_pre_tokenizer_names() {
  std::vector<std::string> out;
  for (const Entry& e : table()) out.insert(out.end(), e.names.begin(), e.names.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tessera::model
