#include "model/tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <fmt/core.h>

#include "model/tokenizer/vocab.h"

namespace tessera::model {

struct SentencePieceTokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

Result<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::load(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  auto st = impl->sp.Load(path);
  if (!st.ok()) return invalid_argument(fmt::format("{} is not a SentencePiece model: {}", path, st.ToString()));
  return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(std::move(impl)));
}

int SentencePieceTokenizer::vocab_size() const { return impl_->sp.GetPieceSize(); }
TokenId SentencePieceTokenizer::bos_id() const { return impl_->sp.bos_id(); }
TokenId SentencePieceTokenizer::eos_id() const { return impl_->sp.eos_id(); }

std::vector<TokenId> SentencePieceTokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int> ids;
  if (!impl_->sp.Encode(text, &ids).ok()) ids.clear();
  std::vector<TokenId> out;
  out.reserve(ids.size() + 1);
  if (add_bos && bos_id() >= 0) out.push_back(bos_id());
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

std::string SentencePieceTokenizer::decode_piece(TokenId prev, TokenId token) const {
  if (token < 0 || token >= vocab_size()) return {};
  const auto& sp = impl_->sp;
  if (sp.IsControl(token) || sp.IsUnused(token)) return {};
  const std::string& p = sp.IdToPiece(token);
  if (sp.IsByte(token) && p.size() == 6)
    return std::string(1, static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16)));
  std::string out;
  for (size_t i = 0; i < p.size();) {
    if (p.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += p[i++];
    }
  }
  if ((prev < 0 || prev == bos_id()) && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

Result<Vocab> SentencePieceTokenizer::to_vocab() const {
  const auto& sp = impl_->sp;
  Vocab v;
  v.kind = VocabKind::kSentencePiece;
  v.bos = sp.bos_id();
  v.eos = sp.eos_id();
  v.unk = sp.unk_id();
  v.pad = sp.pad_id();
  for (int i = 0; i < sp.GetPieceSize(); ++i) {
    v.tokens.push_back(sp.IdToPiece(i));
    v.scores.push_back(sp.GetScore(i));
    int32_t type = kTokenNormal;
    if (sp.IsUnknown(i))
      type = kTokenUnknown;
    else if (sp.IsControl(i))
      type = kTokenControl;
    else if (sp.IsUnused(i))
      type = kTokenUnused;
    else if (sp.IsByte(i))
      type = kTokenByte;
    v.types.push_back(type);
  }
  TS_RETURN_IF_ERROR(v.validate());
  return v;
}

}  // namespace tessera::model
