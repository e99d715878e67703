// The job envelope that crosses a process boundary: bit-exact round trip, and every
// malformed envelope refused rather than read.
#include "harness/engine/stage_job.h"

#include <gtest/gtest.h>

namespace splitcheck {
namespace {

Tensor filled(DType dtype, Shape shape, int seed) {
  Tensor t = Tensor::zeros(dtype, std::move(shape));
  std::byte* p = t.data<std::byte>();
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return t;
}

StageJob sample() {
  StageJob j;
  j.kind = JobKind::kForward;
  j.request = ForwardRequest{{5, 9, 2}, ForwardKind::kVerify, 17, 4};
  j.wants_record = true;
  j.record.add("forward/4/layers/3/pre_attn", filled(DType::kBF16, {3, 8}, 1));
  j.record.add("forward/4/layers/3/prefix", filled(DType::kF32, {3, 2}, 2));
  j.record.set_attr("forward/4", "kind", std::string("verify"));
  j.record.set_attr("forward/4", "first_position", int64_t{17});
  j.record.set_attr("spec", "rate", 0.25);
  j.caches.add("forward/4/cache/3", filled(DType::kBF16, {6}, 3));
  j.trace.events = {{4, 3, Site::kAttn, 12, 1, -1}, {4, -1, Site::kTap, 20, 1, 7}};
  j.last.head.output = filled(DType::kBF16, {3, 8}, 4);
  j.last.head.logits = filled(DType::kF32, {3, 16}, 5);
  j.last.head.next_tokens = filled(DType::kI32, {3}, 6);
  j.last.state.prefix = filled(DType::kBF16, {3, 8}, 7);
  j.last.state.has_delta = true;
  j.last.state.delta = filled(DType::kBF16, {3, 8}, 8);
  j.last.state.bank = filled(DType::kBF16, {3, 2, 8}, 9);
  j.last.taps = {{0, filled(DType::kBF16, {3, 8}, 10)}, {7, filled(DType::kBF16, {3, 8}, 11)}};
  return j;
}

void expect_same_record(const RunRecord& a, const RunRecord& b) {
  ASSERT_EQ(a.entries().size(), b.entries().size());
  for (size_t i = 0; i < a.entries().size(); ++i) {
    EXPECT_EQ(a.entries()[i].path, b.entries()[i].path);
    EXPECT_EQ(a.entries()[i].tensor.dtype(), b.entries()[i].tensor.dtype());
    EXPECT_TRUE(a.entries()[i].tensor.bit_equal(b.entries()[i].tensor)) << a.entries()[i].path;
  }
  EXPECT_EQ(a.attrs(), b.attrs());
}

TEST(JobEnvelope, RoundTripIsBitExact) {
  const StageJob j = sample();
  Result<StageJob> back = decode_job_envelope(encode_job_envelope(j));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->kind, j.kind);
  EXPECT_EQ(back->request.ids, j.request.ids);
  EXPECT_EQ(back->request.kind, j.request.kind);
  EXPECT_EQ(back->request.first_position, 17);
  EXPECT_EQ(back->request.index, 4);
  EXPECT_TRUE(back->wants_record);
  expect_same_record(back->record, j.record);
  expect_same_record(back->caches, j.caches);
  ASSERT_EQ(back->trace.events.size(), 2u);
  EXPECT_EQ(back->trace.events[1].site, Site::kTap);
  EXPECT_EQ(back->trace.events[1].aux, 7);
  EXPECT_EQ(back->trace.events[0].kernel, 12);
  EXPECT_TRUE(back->last.head.logits.bit_equal(j.last.head.logits));
  EXPECT_TRUE(back->last.head.next_tokens.bit_equal(j.last.head.next_tokens));
  EXPECT_TRUE(back->last.state.bank.bit_equal(j.last.state.bank));
  EXPECT_TRUE(back->last.state.has_delta);
  ASSERT_EQ(back->last.taps.size(), 2u);
  EXPECT_EQ(back->last.taps[1].first, 7);
  EXPECT_TRUE(back->last.taps[1].second.bit_equal(j.last.taps[1].second));
}

TEST(JobEnvelope, CarriesAStageFailure) {
  StageJob j;
  j.status = config_rejected("stage 1 ends at layer 7, which is a capture id");
  Result<StageJob> back = decode_job_envelope(encode_job_envelope(j));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->status.code(), StatusCode::kConfigRejected);
  EXPECT_EQ(back->status.message(), j.status.message());
}

TEST(JobEnvelope, EveryTruncationIsRefused) {
  const std::vector<std::byte> bytes = encode_job_envelope(sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
    Result<StageJob> r = decode_job_envelope(cut);
    ASSERT_FALSE(r.is_ok()) << "a prefix of " << n << " of " << bytes.size() << " bytes";
    EXPECT_NE(r.status().message().find("malformed"), std::string::npos);
  }
}

TEST(JobEnvelope, MalformedFieldsAreRefused) {
  const std::vector<std::byte> good = encode_job_envelope(sample());
  auto refused = [](std::vector<std::byte> b, const std::string& what) {
    Result<StageJob> r = decode_job_envelope(b);
    EXPECT_FALSE(r.is_ok()) << what;
    if (!r.is_ok()) {
      EXPECT_NE(r.status().message().find(what), std::string::npos) << what;
    }
  };
  std::vector<std::byte> b = good;
  b[0] = std::byte{'X'};
  refused(b, "magic");
  b = good;
  b.push_back(std::byte{0});
  refused(b, "trailing bytes");
  b = good;
  b[8] = std::byte{9};  // the job kind (after magic and version)
  refused(b, "job kind");
  // An absurd token count must not allocate: refused as a malformed request.
  b = good;
  for (size_t i = 0; i < 8; ++i) b[28 + i] = std::byte{0xff};  // the ids count
  refused(b, "request");
}

// A serving step as it leaves stage 0 for the next stage: two segments (a prefill chunk and
// a verify block), a rollback and a release, one payload a segment, per-segment records,
// caches, traces and the last stage's outputs.
StageJob batch_sample() {
  StageJob j;
  j.kind = JobKind::kBatch;
  j.wants_record = true;
  j.batch.step = 11;
  j.batch.segments = {Segment{3, {7, 8, 9}, 0, ForwardKind::kPrefill, 21},
                      Segment{5, {1, 2}, 40, ForwardKind::kVerify, 22}};
  j.batch.updates = {StateUpdate{5, StateUpdate::Kind::kRollback},
                     StateUpdate{2, StateUpdate::Kind::kRelease}};
  j.payloads = {std::vector<std::byte>(37, std::byte{0x5a}), std::vector<std::byte>(5)};
  j.segment_records.resize(2);
  j.segment_records[1].add("forward/22/layers/0/pre_attn", filled(DType::kBF16, {2, 8}, 12));
  j.segment_caches.resize(2);
  j.segment_caches[0].add("forward/21/cache/0", filled(DType::kBF16, {4}, 13));
  j.segment_traces.resize(2);
  j.segment_traces[0].events = {{21, 0, Site::kAttn, 3, 0, -1}};
  j.lasts.resize(2);
  j.lasts[1].head.logits = filled(DType::kF32, {2, 16}, 14);
  j.lasts[1].taps = {{2, filled(DType::kBF16, {2, 8}, 15)}};
  return j;
}

TEST(JobEnvelope, AServingStepRoundTripsBitExact) {
  const StageJob j = batch_sample();
  Result<StageJob> back = decode_job_envelope(encode_job_envelope(j));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->kind, JobKind::kBatch);
  EXPECT_EQ(back->batch.step, 11);
  ASSERT_EQ(back->batch.segments.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const Segment &a = back->batch.segments[i], &b = j.batch.segments[i];
    EXPECT_EQ(a.request, b.request);
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_EQ(a.first_position, b.first_position);
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.index, b.index);
  }
  ASSERT_EQ(back->batch.updates.size(), 2u);
  EXPECT_EQ(back->batch.updates[0].request, 5);
  EXPECT_EQ(back->batch.updates[0].kind, StateUpdate::Kind::kRollback);
  EXPECT_EQ(back->batch.updates[1].kind, StateUpdate::Kind::kRelease);
  // The payloads travel beside the envelope (job_payloads), as a forward's does.
  EXPECT_TRUE(back->payloads.empty());
  ASSERT_EQ(back->segment_records.size(), 2u);
  expect_same_record(back->segment_records[1], j.segment_records[1]);
  ASSERT_EQ(back->segment_caches.size(), 2u);
  expect_same_record(back->segment_caches[0], j.segment_caches[0]);
  ASSERT_EQ(back->segment_traces.size(), 2u);
  ASSERT_EQ(back->segment_traces[0].events.size(), 1u);
  EXPECT_EQ(back->segment_traces[0].events[0].kernel, 3);
  ASSERT_EQ(back->lasts.size(), 2u);
  EXPECT_TRUE(back->lasts[1].head.logits.bit_equal(j.lasts[1].head.logits));
  ASSERT_EQ(back->lasts[1].taps.size(), 1u);
  EXPECT_TRUE(back->lasts[1].taps[0].second.bit_equal(j.lasts[1].taps[0].second));
}

// What a transport across processes sends beside the envelope, and how the receiver puts
// it back: one path for a forward's payload and a serving step's.
TEST(JobPayloads, AForwardsOneAndAServingStepsOneASegmentInOrder) {
  StageJob f = sample();
  f.payload = std::vector<std::byte>(9, std::byte{0x11});
  f.body = filled(DType::kBF16, {6}, 16);
  const std::vector<PayloadRef> one = job_payloads(f);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].bytes, &f.payload);
  EXPECT_EQ(one[0].body, &f.body);
  // A reset carries its (empty) payload the same way.
  StageJob reset;
  reset.kind = JobKind::kReset;
  ASSERT_EQ(job_payloads(reset).size(), 1u);
  EXPECT_TRUE(job_payloads(reset)[0].bytes->empty());

  StageJob b = batch_sample();
  b.bodies = {Tensor(), filled(DType::kBF16, {4}, 17)};
  const std::vector<PayloadRef> refs = job_payloads(b);
  ASSERT_EQ(refs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(refs[i].bytes, &b.payloads[i]);
    EXPECT_EQ(refs[i].body, &b.bodies[i]);
  }
  // Payloads without bodies (a host stage's) have empty bodies.
  b.bodies.clear();
  for (const PayloadRef& r : job_payloads(b)) EXPECT_TRUE(r.body->empty());

  // Taken back by the decoded envelope: a step's into payloads and bodies, bit for bit.
  Result<StageJob> back = decode_job_envelope(encode_job_envelope(b));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  const Tensor body = filled(DType::kBF16, {4}, 18);
  ASSERT_TRUE(take_job_payloads(*back, b.payloads, {Tensor(), body}).is_ok());
  EXPECT_EQ(back->payloads, b.payloads);
  ASSERT_EQ(back->bodies.size(), 2u);
  EXPECT_TRUE(back->bodies[0].empty());
  EXPECT_TRUE(back->bodies[1].bit_equal(body));
  // A forward's into payload and body.
  Result<StageJob> fb = decode_job_envelope(encode_job_envelope(f));
  ASSERT_TRUE(fb.is_ok());
  ASSERT_TRUE(take_job_payloads(*fb, {f.payload}, {f.body}).is_ok());
  EXPECT_EQ(fb->payload, f.payload);
  EXPECT_TRUE(fb->body.bit_equal(f.body));
}

TEST(JobPayloads, AMiscountIsRefused) {
  StageJob f = sample();
  Status st = take_job_payloads(f, {{}, {}}, {Tensor(), Tensor()});
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("takes one payload; 2 arrived"), std::string::npos) << st.message();
  EXPECT_FALSE(take_job_payloads(f, {}, {}).is_ok());
  StageJob b = batch_sample();
  st = take_job_payloads(b, {{}, {}}, {Tensor()});
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("2 payloads arrived with 1 bodies"), std::string::npos)
      << st.message();
}

TEST(JobEnvelope, EveryTruncationOfAServingStepIsRefused) {
  const std::vector<std::byte> bytes = encode_job_envelope(batch_sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
    Result<StageJob> r = decode_job_envelope(cut);
    ASSERT_FALSE(r.is_ok()) << "a prefix of " << n << " of " << bytes.size() << " bytes";
    EXPECT_NE(r.status().message().find("malformed"), std::string::npos);
  }
}

}  // namespace
}  // namespace splitcheck
