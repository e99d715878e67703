#include "harness/engine/handoff.h"

#include <gtest/gtest.h>

namespace splitcheck {
namespace {

HandoffPayload sample() {
  HandoffPayload p;
  p.forward = 3;
  p.hidden = Tensor::zeros(DType::kBF16, {2, 4});
  p.bank = Tensor::zeros(DType::kBF16, {2, 1, 4});
  p.aux_ids = {0, 7};
  p.aux = Tensor::zeros(DType::kBF16, {2, 8});
  for (int i = 0; i < 8; ++i) p.hidden.data<bf16>()[i] = to_bf16(static_cast<float>(i));
  for (int i = 0; i < 16; ++i) p.aux.data<bf16>()[i] = to_bf16(static_cast<float>(-i));
  return p;
}

PayloadExpectation expectation() { return PayloadExpectation{3, 2, 4, 1, {0, 7}}; }

TEST(Handoff, RoundTripIsBitExact) {
  const HandoffPayload p = sample();
  Result<HandoffPayload> q = decode_payload(encode_payload(p), expectation());
  ASSERT_TRUE(q.is_ok()) << q.status().message();
  EXPECT_TRUE(q->hidden.bit_equal(p.hidden));
  EXPECT_TRUE(q->bank.bit_equal(p.bank));
  EXPECT_TRUE(q->aux.bit_equal(p.aux));
  EXPECT_EQ(q->aux_ids, p.aux_ids);
}

TEST(Handoff, RefusesPayloadsThatDisagreeWithTheReceiver) {
  const auto bytes = encode_payload(sample());
  PayloadExpectation e = expectation();
  e.tokens = 3;
  EXPECT_NE(decode_payload(bytes, e).status().message().find("tokens"), std::string::npos);
  e = expectation();
  e.bank_rows = 2;
  EXPECT_NE(decode_payload(bytes, e).status().message().find("bank rows"), std::string::npos);
  e = expectation();
  e.aux_ids = {0};
  EXPECT_NE(decode_payload(bytes, e).status().message().find("aux"), std::string::npos);
  e = expectation();
  e.forward = 4;
  EXPECT_FALSE(decode_payload(bytes, e).is_ok());
}

TEST(Handoff, RefusesTruncatedAndPaddedPayloads) {
  auto bytes = encode_payload(sample());
  auto cut = bytes;
  cut.resize(bytes.size() - 1);
  EXPECT_NE(decode_payload(cut, expectation()).status().message().find("truncated"),
            std::string::npos);
  auto padded = bytes;
  padded.push_back(std::byte{0});
  EXPECT_NE(decode_payload(padded, expectation()).status().message().find("trailing"),
            std::string::npos);
  auto bad = bytes;
  bad[0] = std::byte{'X'};
  EXPECT_FALSE(decode_payload(bad, expectation()).is_ok());
}

}  // namespace
}  // namespace splitcheck
