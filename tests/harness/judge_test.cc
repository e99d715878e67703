// The one judge (harness/judge/judge.h) on records built by hand: the same inputs give
// the same verdict whoever asks, and each way a case can fail to be a pass is named.
#include "harness/judge/judge.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>

namespace splitcheck {
namespace {

Tensor f32(std::vector<float> values) {
  Tensor t = Tensor::zeros(DType::kF32, {static_cast<int64_t>(values.size())});
  std::memcpy(t.data<float>(), values.data(), values.size() * sizeof(float));
  return t;
}

// Two forwards of two layers: tensors, then logits, in execution order.
RunRecord record(float changed_at_layer1 = 1.0f) {
  RunRecord r;
  for (int f = 0; f < 2; ++f) {
    r.add(fmt::format("forward/{}/layers/0/pre_attn", f), f32({1, 2, 3}));
    r.add(fmt::format("forward/{}/layers/1/pre_attn", f), f32({changed_at_layer1, 2, 3}));
    r.add(fmt::format("forward/{}/logits", f), f32({0.5f, 0.25f}));
  }
  return r;
}

CaseResult judge(const RunRecord& pp1, const RunRecord& cand, JudgeInput in = {}) {
  in.pp1 = &pp1;
  in.candidate = &cand;
  if (in.dataset_checks.empty()) in.dataset_checks = {"tensors", "logits"};
  CaseResult c;
  c.key = "split-1";
  c.layout = "0-1|1-2";
  judge_case(in, c);
  return c;
}

TEST(JudgeTest, EqualRecordsPass) {
  const CaseResult c = judge(record(), record());
  EXPECT_EQ(c.verdict, Verdict::kPass) << c.message;
  EXPECT_EQ(c.datasets_compared, 6);
  EXPECT_EQ(c.message, "bit-identical (6 datasets)");
}

TEST(JudgeTest, TheFirstNumericDivergenceIsNamedInExecutionOrder) {
  const CaseResult c = judge(record(), record(7.0f));
  EXPECT_EQ(c.verdict, Verdict::kDiverged);
  EXPECT_EQ(c.failed_checks, std::vector<std::string>{"tensors"});
  ASSERT_TRUE(c.first_divergence.has_value());
  EXPECT_EQ(c.first_divergence_forward, 0);
  EXPECT_EQ(c.first_divergence_layer, 1);
  EXPECT_EQ(c.first_divergence_site, "pre_attn");
  EXPECT_EQ(c.datasets_differing, 2);
}

TEST(JudgeTest, AMissingDatasetBeforeTheFirstNumericDivergenceIsTheHeadline) {
  RunRecord cand;
  const RunRecord changed = record(7.0f);
  for (const RecordEntry& e : changed.entries())
    if (e.path != "forward/0/layers/0/pre_attn") cand.add(e.path, e.tensor);
  const CaseResult c = judge(record(), cand);
  EXPECT_EQ(c.verdict, Verdict::kDiverged);
  EXPECT_EQ(c.first_missing, "forward/0/layers/0/pre_attn");
  EXPECT_EQ(c.message.rfind("forward/0/layers/0/pre_attn: missing in the partitioned run", 0), 0u)
      << c.message;
}

TEST(JudgeTest, AStageFailureFailsAnIdenticalCaseWithItsMessage) {
  JudgeInput in;
  in.stage_failures = {{"memory", "memory: stage 1 holds 0 bytes"}};
  in.stages_judged = true;
  const CaseResult c = judge(record(), record(), in);
  EXPECT_EQ(c.verdict, Verdict::kDiverged);
  EXPECT_EQ(c.failed_checks, std::vector<std::string>{"memory"});
  EXPECT_EQ(c.message, "memory: stage 1 holds 0 bytes");
}

TEST(JudgeTest, NothingJudgedIsAnErrorWhereJudgementIsRequired) {
  JudgeInput in;
  in.dataset_checks = {};
  in.require_judgement = true;
  CaseResult c;
  c.key = "split-1";
  c.layout = "0-1|1-2";
  const RunRecord r = record();
  in.pp1 = &r;
  in.candidate = &r;
  judge_case(in, c);
  EXPECT_EQ(c.verdict, Verdict::kError);
  EXPECT_EQ(c.message,
            "split-1 (0-1|1-2): nothing judged: the dumps give no evidence for any check");
  in.require_judgement = false;  // the built-in engine: a pass that compared no data
  judge_case(in, c);
  EXPECT_EQ(c.verdict, Verdict::kPass);
  EXPECT_EQ(c.message, "no data compared");
}

TEST(JudgeTest, PartitionEvidenceContradictedMissingAndWaived) {
  PartitionEvidence contradicted{{"stage 0 ran layers 0-2, asked 0-1"}, ""};
  JudgeInput in;
  in.partition = &contradicted;
  CaseResult c = judge(record(), record(), in);
  EXPECT_EQ(c.verdict, Verdict::kDiverged);
  EXPECT_EQ(c.failed_checks.front(), "partition");
  EXPECT_EQ(c.evidence, "contradicted");

  PartitionEvidence missing{{}, "the dump carries no /stages"};
  in.partition = &missing;
  c = judge(record(), record(), in);
  EXPECT_EQ(c.verdict, Verdict::kUnproven);
  EXPECT_EQ(c.evidence, "missing");
  ASSERT_FALSE(c.not_judged.empty());
  EXPECT_EQ(c.not_judged.back().check, "partition");

  in.evidence_waived = "the engine cannot report its stages yet";
  c = judge(record(), record(), in);
  EXPECT_EQ(c.verdict, Verdict::kPass);
  EXPECT_EQ(c.evidence, "waived");
  EXPECT_NE(c.message.find("WAIVED"), std::string::npos) << c.message;

  // A divergence stands without the evidence: it is not made unproven.
  in.evidence_waived.clear();
  c = judge(record(), record(7.0f), in);
  EXPECT_EQ(c.verdict, Verdict::kDiverged);
}

}  // namespace
}  // namespace splitcheck
