#include "model/tokenizer/llama2c_tokenizer.h"

#include <gtest/gtest.h>

#include "base/mapped_file.h"
#include "support/paths.h"

namespace tessera::model {
namespace {

class Tok512 : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    auto t = Llama2cTokenizer::load(testing::stories260k_dir() + "/tok512.bin");
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tok_ = std::move(t).value();
  }
  std::unique_ptr<Llama2cTokenizer> tok_;
};

TEST_F(Tok512, LoadsTheFileAsDescribedInSourceMd) {
  EXPECT_EQ(tok_->vocab_size(), 512);
  EXPECT_EQ(tok_->piece(0), "<unk>");
  EXPECT_EQ(tok_->piece(1), "\n<s>\n");
  EXPECT_EQ(tok_->piece(2), "\n</s>\n");
  EXPECT_EQ(tok_->piece(3), "<0x00>");
  EXPECT_EQ(tok_->piece(258), "<0xFF>");
  EXPECT_EQ(tok_->piece(259), " t");
}

TEST_F(Tok512, SerializesToTheSameBytes) {
  auto original = read_file(testing::stories260k_dir() + "/tok512.bin");
  ASSERT_TRUE(original.ok());
  std::vector<uint8_t> bytes = tok_->serialize();
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), *original);
}

TEST_F(Tok512, EmptyPromptIsJustBos) {
  EXPECT_EQ(tok_->encode("", true), (std::vector<TokenId>{1}));
  EXPECT_TRUE(tok_->encode("", false).empty());
}

TEST_F(Tok512, WholeWordsMergeIntoTheirPieces) {
  // Each word (with its leading space) is one vocabulary entry, so best-score merging must reach it.
  std::vector<TokenId> ids = tok_->encode("Once upon a time", true);
  std::vector<TokenId> want = {1, tok_->lookup(" Once"), tok_->lookup(" upon"), tok_->lookup(" a"),
                               tok_->lookup(" time")};
  EXPECT_EQ(ids, want);
  EXPECT_EQ(want, (std::vector<TokenId>{1, 403, 407, 261, 378}));
}

TEST_F(Tok512, DummyPrefixSpaceIsAddedAndStrippedAfterBos) {
  std::vector<TokenId> ids = tok_->encode("Lily", true);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(tok_->piece(ids[1]), " Lily");
  EXPECT_EQ(tok_->decode_piece(1, ids[1]), "Lily");
  EXPECT_EQ(tok_->decode_piece(5, ids[1]), " Lily");
  EXPECT_EQ(tok_->decode(ids), "Lily");
}

TEST_F(Tok512, ByteTokensDecodeToRawBytes) {
  EXPECT_EQ(tok_->decode_piece(100, 13), "\n");  // <0x0A>
  EXPECT_EQ(tok_->decode_piece(100, 3 + 0xE6), std::string(1, '\xE6'));
}

TEST_F(Tok512, UnknownCharactersFallBackToBytes) {
  // U+65E5 (3 bytes) is not in this 512-token vocabulary: it becomes its three UTF-8 bytes.
  std::vector<TokenId> ids = tok_->encode("\xE6\x97\xA5", false);
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(tok_->piece(ids[0]), " ");
  EXPECT_EQ(ids[1], 3 + 0xE6);
  EXPECT_EQ(ids[2], 3 + 0x97);
  EXPECT_EQ(ids[3], 3 + 0xA5);
}

TEST_F(Tok512, RoundTripsVariedText) {
  const char* texts[] = {
      "Once upon a time, there was a little girl named Lily.",
      "She said, \"I'm sorry, mom.\"\nHer mom said, \"Don't worry.\"",
      "  leading and   repeated   spaces  ",
      "tabs\tand\r\ncarriage returns",
      "digits 0123456789 and punctuation !?;:-_()[]{}<>@#$%^&*",
      "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x99\x82 e\xCC\x81",
      "<0x41> looks like a byte token but is text",
      "x",
  };
  for (const char* t : texts) {
    std::vector<TokenId> ids = tok_->encode(t, true);
    EXPECT_EQ(tok_->decode(ids), t) << t;
    EXPECT_LE(ids.size(), std::string(t).size() + 2) << "at most BOS, the prefix space and one token per byte: " << t;
  }
}

TEST_F(Tok512, EncodingIsShorterThanBytesForProse) {
  std::string text = "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do.";
  std::vector<TokenId> ids = tok_->encode(text, true);
  EXPECT_LT(ids.size(), text.size() * 6 / 10);  // 88 bytes -> 43 tokens
}

TEST(Llama2cTokenizer, RejectsMalformedFiles) {
  auto parse = [](std::vector<uint8_t> bytes) { return Llama2cTokenizer::parse(bytes, "bad.bin").status(); };
  EXPECT_FALSE(parse({}).ok());
  EXPECT_FALSE(parse({7, 0, 0}).ok());
  // max_token_length 7, then a record claiming 100 bytes.
  std::vector<uint8_t> too_long = {7, 0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 'a'};
  Status s = parse(too_long);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bad.bin"), std::string::npos);
  // A record cut off in the middle of its bytes.
  std::vector<uint8_t> cut = {7, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 'a'};
  EXPECT_NE(parse(cut).message().find("truncated"), std::string::npos);
  // A negative max_token_length.
  EXPECT_FALSE(parse({0xff, 0xff, 0xff, 0xff}).ok());
}

TEST(Llama2cTokenizer, FromPiecesMergesByScore) {
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n", " ", "a", "b", "ab", " ab", "ba"};
  std::vector<float> scores = {0, 0, 0, 0, 0, 0, -1, -2, -0.5f};
  auto tok = Llama2cTokenizer::from_pieces(pieces, scores);
  ASSERT_TRUE(tok.ok());
  // Units: " ", a, b, a, b. The best pair is "ba" (-0.5 beats "ab" at -1), giving " ", a, ba, b; then no
  // adjacent pair (" a", "aba", "bab") is in the vocabulary.
  std::vector<TokenId> ids = (*tok)->encode("abab", false);
  EXPECT_EQ(ids, (std::vector<TokenId>{3, 4, 8, 5}));
}

}  // namespace
}  // namespace tessera::model
