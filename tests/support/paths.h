// Where tests find things: the tessera binary, the source tree, the bundled models, a scratch directory per test.
#pragma once

#include <string>

namespace tessera::testing {

std::string tessera_bin();
std::string source_dir();       // the repository checkout the tests were built from
std::string models_dir();       // models/ in the source tree (TESSERA_MODELS_DIR at configure time)
std::string stories260k_dir();  // models_dir()/stories260K
bool have_stories260k();
// llama.cpp's models/ folder (its ggml-vocab-*.gguf tokenizer test vectors): $TESSERA_LLAMACPP_SRC/models,
// next to the binaries scripts/llamacpp.sh built ($TESSERA_LLAMACPP_BIN/../../src/models), or in its cache
// (${TESSERA_CACHE:-~/.cache/tessera}/llama.cpp/{3.21.1/,}src/models). "" when none holds the files.
std::string llamacpp_vocab_dir();
// Where llamacpp_vocab_dir() looked, for skip messages.
std::string llamacpp_vocab_candidates();
// llama.cpp's real chat templates (models/templates/*.jinja): $TESSERA_LLAMACPP_SRC/models/templates, else
// ${TESSERA_CACHE:-~/.cache/tessera}/llama.cpp/3.21.1/src/models/templates (where scripts/llamacpp.sh and
// tests/model/jinja_ref/fetch_templates.sh put the source). Whether it exists is the caller's to check.
std::string llamacpp_templates_dir();
// A fresh empty directory under the system temp dir, named after the running test; removed at exit.
std::string scratch_dir();

}  // namespace tessera::testing

// Skips the current test, saying why, when the stories260K model is not where TESSERA_MODELS_DIR points.
#define TS_REQUIRE_STORIES260K()                                                           \
  do {                                                                                     \
    if (!::tessera::testing::have_stories260k())                                           \
      GTEST_SKIP() << "stories260K not found at " << ::tessera::testing::stories260k_dir() \
                   << " (configure with -DTESSERA_MODELS_DIR=...)";                        \
  } while (0)
