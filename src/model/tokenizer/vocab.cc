#include "model/tokenizer/vocab.h"

#include <algorithm>

#include <fmt/core.h>

#include "model/tokenizer/bpe_tokenizer.h"
#include "model/tokenizer/spm_tokenizer.h"
#include "model/tokenizer/wordpiece_tokenizer.h"

namespace tessera::model {

Status Vocab::validate() const {
  size_t n = tokens.size();
  if (n < 1 || n > (1u << 24)) return invalid_argument(fmt::format("vocabulary of {} tokens is out of range", n));
  if (!scores.empty() && scores.size() != n)
    return invalid_argument(fmt::format("vocabulary has {} tokens but {} scores", n, scores.size()));
  if (!types.empty() && types.size() != n)
    return invalid_argument(fmt::format("vocabulary has {} tokens but {} token types", n, types.size()));
  if (!strip.empty() && strip.size() != n)
    return invalid_argument(fmt::format("vocabulary has {} tokens but {} strip flags", n, strip.size()));
  for (TokenId id : visible_control)
    if (id < 0 || id >= static_cast<TokenId>(n) || types.empty() || types[static_cast<size_t>(id)] != kTokenControl)
      return invalid_argument(fmt::format("visible control token {} is not a control token of the vocabulary", id));
  for (auto [what, id] : {std::pair{"bos", bos}, {"eos", eos}, {"unk", unk}, {"pad", pad}, {"mask", mask}}) {
    if (id < -1 || id >= static_cast<TokenId>(n))
      return invalid_argument(fmt::format("{} token id {} is outside the vocabulary of {}", what, id, n));
  }
  return ok_status();
}

std::vector<AddedToken> Vocab::added_tokens() const {
  std::vector<AddedToken> out;
  for (size_t i = 0; i < types.size(); ++i) {
    int32_t t = types[i];
    if (t != kTokenControl && t != kTokenUserDefined && t != kTokenUnknown) continue;
    uint8_t f = strip.empty() ? 0 : strip[i];
    const bool visible =
        std::find(visible_control.begin(), visible_control.end(), static_cast<TokenId>(i)) != visible_control.end();
    out.push_back({static_cast<TokenId>(i), tokens[i], t != kTokenUserDefined, (f & kStripLeft) != 0,
                   (f & kStripRight) != 0, false, visible});
  }
  return out;
}

Result<std::unique_ptr<Tokenizer>> make_tokenizer(const Vocab& vocab) {
  if (vocab.kind == VocabKind::kSentencePiece) {
    TS_ASSIGN_OR_RETURN(auto t, SpmTokenizer::create(vocab));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  if (vocab.kind == VocabKind::kWordPiece) {
    TS_ASSIGN_OR_RETURN(auto t, WordPieceTokenizer::from_vocab(vocab));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  TS_ASSIGN_OR_RETURN(auto t, BpeTokenizer::from_vocab(vocab));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace tessera::model
