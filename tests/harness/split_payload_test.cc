// The handoff payload split into a host header and a body (the nccl transport's device
// path, harness/engine/handoff.h): header + body are exactly the whole payload's bytes, a
// receiving stage reads the split form as it reads the whole one, and the arrival checks
// refuse a malformed header or a body of the wrong length, naming the stage and forward.
#include <gtest/gtest.h>

#include "harness/engine/handoff.h"
#include "harness/engine/run.h"
#include "harness/engine/stage.h"
#include "kernels/tensor_copy.h"
#include "tests/scenario_fixture.h"

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
  for (int i = 0; i < 8; ++i) p.bank.data<bf16>()[i] = to_bf16(static_cast<float>(100 + i));
  for (int i = 0; i < 16; ++i) p.aux.data<bf16>()[i] = to_bf16(static_cast<float>(-i));
  return p;
}

PayloadExpectation expectation() { return PayloadExpectation{3, 2, 4, 1, {0, 7}}; }

std::vector<std::byte> joined(const std::vector<std::byte>& header, const Tensor& body) {
  std::vector<std::byte> out = header;
  out.insert(out.end(), body.bytes(), body.bytes() + body.nbytes());
  return out;
}

TEST(HandoffSplit, HeaderAndBodyAreTheWholePayloadsBytes) {
  const HandoffPayload p = sample();
  const std::vector<std::byte> header = encode_payload_header(p);
  const Tensor body = payload_body(p, Device::kCpu);
  EXPECT_EQ(body.nbytes(), payload_body_bytes(2, 4, 1, 2));
  EXPECT_EQ(joined(header, body), encode_payload(p));
  Result<HandoffPayload> q = decode_payload(header, body, expectation());
  ASSERT_TRUE(q.is_ok()) << q.status().message();
  EXPECT_TRUE(q->hidden.bit_equal(p.hidden));
  EXPECT_TRUE(q->bank.bit_equal(p.bank));
  EXPECT_TRUE(q->aux.bit_equal(p.aux));
  EXPECT_EQ(q->aux_ids, p.aux_ids);
  // The tensors are copies: the body may be a buffer the channel reuses.
  EXPECT_NE(q->hidden.bytes(), body.bytes());
}

TEST(HandoffSplit, ABodyOfTheWrongLengthIsRefused) {
  const HandoffPayload p = sample();
  const std::vector<std::byte> header = encode_payload_header(p);
  const Tensor body = payload_body(p, Device::kCpu);
  for (int64_t n : {body.numel() - 1, body.numel() + 1}) {
    Tensor wrong = Tensor::zeros(DType::kBF16, {n});
    Result<HandoffPayload> q = decode_payload(header, wrong, expectation());
    ASSERT_FALSE(q.is_ok()) << n;
    EXPECT_NE(q.status().message().find("forward 3: body of"), std::string::npos)
        << q.status().message();
  }
}

TEST(HandoffSplit, AMalformedHeaderIsRefusedAsTheWholePayloadIs) {
  const HandoffPayload p = sample();
  const Tensor body = payload_body(p, Device::kCpu);
  std::vector<std::byte> bad = encode_payload_header(p);
  bad[0] = std::byte{'X'};
  EXPECT_NE(decode_payload(bad, body, expectation()).status().message().find("magic"),
            std::string::npos);
  PayloadExpectation e = expectation();
  e.tokens = 3;
  EXPECT_NE(decode_payload(encode_payload_header(p), body, e).status().message().find("tokens"),
            std::string::npos);
  e = expectation();
  e.aux_ids = {0};
  EXPECT_NE(decode_payload(encode_payload_header(p), body, e).status().message().find("aux"),
            std::string::npos);
  std::vector<std::byte> cut = encode_payload_header(p);
  cut.pop_back();
  EXPECT_NE(decode_payload(cut, body, expectation()).status().message().find("truncated"),
            std::string::npos);
  std::vector<std::byte> padded = encode_payload_header(p);
  padded.push_back(std::byte{0});
  EXPECT_NE(decode_payload(padded, body, expectation()).status().message().find("trailing"),
            std::string::npos);
}

TEST(HandoffSplit, CopyingRunsRefusesARunOutsideEitherTensor) {
  Tensor a = Tensor::zeros(DType::kBF16, {8});  // 16 bytes
  const Tensor b = Tensor::zeros(DType::kBF16, {4});
  EXPECT_NO_THROW(copy_tensor_runs(a, 0, 8, b, 0, 4, 4, 2));
  EXPECT_THROW(copy_tensor_runs(a, 0, 8, b, 0, 4, 4, 3), std::out_of_range);   // src: 12 > 8
  EXPECT_THROW(copy_tensor_runs(a, 10, 8, b, 0, 2, 2, 2), std::out_of_range);  // dst: 20 > 16
  EXPECT_THROW(copy_tensor_runs(a, 0, 2, b, 0, 4, 4, 2), std::out_of_range);   // pitch < width
}

// Stages 0 and 1 of k3-tiny cut at `cut`, on the scenario's backend.
struct Pair {
  std::unique_ptr<Stage> first, second;
};

Pair stages(const Scenario& s, WeightSource& source, int cut) {
  Pair out;
  Result<Partition> part = Partition::from_cuts({cut}, s.model.num_hidden_layers);
  EXPECT_TRUE(part.is_ok());
  for (int i = 0; i < 2; ++i) {
    StageConfig c{s.model,
                  *part,
                  i,
                  s.capture_ids,
                  s.dump_level,
                  FaultSet{s.faults},
                  s.speculative.method,
                  s.speculative.context_only_producer};
    Result<std::unique_ptr<Stage>> st = Stage::create(c, source);
    EXPECT_TRUE(st.is_ok()) << st.status().message();
    (i == 0 ? out.first : out.second) = std::move(*st);
  }
  return out;
}

ForwardRequest prompt() {
  ForwardRequest r;
  r.ids = {1, 5, 9, 2, 7};
  r.index = 0;
  return r;
}

// The whole payload of stage 0, split by hand at its header's end: what the device path
// hands the receiver, here with a host body.
std::pair<std::vector<std::byte>, Tensor> split(const std::vector<std::byte>& whole,
                                                size_t body_bytes) {
  const size_t head = whole.size() - body_bytes;
  std::vector<std::byte> header(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(head));
  Tensor body = Tensor::zeros(DType::kBF16, {static_cast<int64_t>(body_bytes / 2)});
  std::memcpy(body.data<std::byte>(), whole.data() + head, body_bytes);
  return {header, body};
}

TEST(StageSplitPayload, TheReceiverReadsTheSplitFormAsTheWholeOneAndChecksIt) {
  const Scenario s = committed_scenario("default");
  std::unique_ptr<WeightSource> source = scenario_weight_source(s);
  const int cut = 5;
  Pair p = stages(s, *source, cut);
  ASSERT_TRUE(p.first && p.second);
  Result<StageOutput> sent = p.first->run(prompt(), nullptr, nullptr, nullptr);
  ASSERT_TRUE(sent.is_ok()) << sent.status().message();
  EXPECT_TRUE(sent->body.empty()) << "a stage on the host sends the whole payload";
  const int64_t rows = (cut + s.model.attn_res_block_size - 1) / s.model.attn_res_block_size;
  size_t relayed = 0;
  for (int k : s.capture_ids) relayed += k <= cut ? 1 : 0;
  const size_t body_bytes = payload_body_bytes(5, s.model.hidden_size, rows, relayed);
  auto [header, body] = split(sent->payload, body_bytes);

  Result<StageOutput> whole = p.second->run(prompt(), &sent->payload, nullptr, nullptr);
  ASSERT_TRUE(whole.is_ok()) << whole.status().message();
  p.second->reset_sequence();
  Result<StageOutput> parts = p.second->run(prompt(), &header, nullptr, nullptr, &body);
  ASSERT_TRUE(parts.is_ok()) << parts.status().message();
  EXPECT_TRUE(parts->head.logits.bit_equal(whole->head.logits));
  ASSERT_EQ(parts->taps.size(), whole->taps.size());
  for (size_t i = 0; i < parts->taps.size(); ++i)
    EXPECT_TRUE(parts->taps[i].second.bit_equal(whole->taps[i].second)) << parts->taps[i].first;

  // A body one element short, and a header that claims another forward: refused, naming
  // the stage and the forward (the transport adds the rank and the split point).
  Tensor short_body = Tensor::zeros(DType::kBF16, {body.numel() - 1});
  p.second->reset_sequence();
  Result<StageOutput> r = p.second->run(prompt(), &header, nullptr, nullptr, &short_body);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("stage 1 receiving forward 0"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("body of"), std::string::npos) << r.status().message();
  ForwardRequest other = prompt();
  other.index = 1;
  p.second->reset_sequence();
  r = p.second->run(other, &header, nullptr, nullptr, &body);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("forward is 0, the receiver expects 1"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace splitcheck
