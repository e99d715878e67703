// The one cause rule book (harness/judge/cause.h) on records built by hand: what differs
// first names the cause the same way for sweep, compare and bisect; the head's causes
// beyond the layers; a site not recorded told apart from a layer not computed; the tied
// head stage rule; and docs/bisect.md listing every cause.
#include "harness/judge/cause.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/judge/judge.h"
#include "harness/judge/stage_checks.h"

namespace splitcheck {
namespace {

Tensor f32(std::vector<float> values) {
  Tensor t = Tensor::zeros(DType::kF32, {static_cast<int64_t>(values.size())});
  std::memcpy(t.data<float>(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor i32(std::vector<int32_t> values) {
  Tensor t = Tensor::zeros(DType::kI32, {static_cast<int64_t>(values.size())});
  std::memcpy(t.data<int32_t>(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

// What each dataset of a record holds; the candidate changes one of them, or drops some.
struct Edit {
  std::string changed = {};               // this dataset's values differ
  std::vector<std::string> dropped = {};  // these are not recorded
  bool final_norm = true;                 // the run records the final norm's output
};

// One forward of two layers of a standard pre-norm transformer, in execution order: the
// layers' four sites, the hidden state entering the head, the final norm's output, the
// logits and the next tokens.
RunRecord record(const Edit& e = {}) {
  RunRecord r;
  auto add = [&](const std::string& path, Tensor t) {
    if (std::find(e.dropped.begin(), e.dropped.end(), path) != e.dropped.end()) return;
    if (path == e.changed) {
      if (t.dtype() == DType::kI32)
        t.data<int32_t>()[0] += 1;
      else
        t.data<float>()[0] += 1;
    }
    r.add(path, std::move(t));
  };
  for (int l = 0; l < 2; ++l)
    for (const char* site : {"pre_attn", "attn_out", "pre_mlp", "mlp_out"})
      add(fmt::format("forward/0/layers/{}/{}", l, site), f32({1, 2, 3}));
  add("forward/0/output", f32({1, 2, 3}));
  if (e.final_norm) add("forward/0/final_norm", f32({1, 2, 3}));
  add("forward/0/logits", f32({0.5f, 0.25f}));
  add("forward/0/next_tokens", i32({0}));
  return r;
}

CaseResult judged(const Edit& edit, const Edit& pp1 = {}) {
  const RunRecord a = record(pp1), b = record(edit);
  JudgeInput in;
  in.pp1 = &a;
  in.candidate = &b;
  in.dataset_checks = {"tensors", "logits", "tokens"};
  CaseResult c;
  c.key = "split-1";
  c.layout = "0-1|1-2";
  c.cuts = {1};
  judge_case(in, c);
  return c;
}

TEST(CauseTest, EveryLayerEqualAndTheFinalNormDiffersNamesTheHeadsNorm) {
  const CaseResult c = judged({.changed = "forward/0/final_norm"});
  EXPECT_EQ(classify_cause(c), kCauseHeadNorm) << c.message;
  EXPECT_EQ(classify_cause(judged({.changed = "forward/0/output"})), kCauseHeadNorm);
}

TEST(CauseTest, LogitsAfterAnEqualFinalNormNameTheLmHead) {
  const CaseResult c = judged({.changed = "forward/0/logits"});
  EXPECT_TRUE(c.final_norm_recorded);
  EXPECT_EQ(classify_cause(c), kCauseHeadLmHead) << c.message;
}

TEST(CauseTest, LogitsWithoutAFinalNormRecordNameBothHeadSuspects) {
  const CaseResult c =
      judged({.changed = "forward/0/logits", .final_norm = false}, {.final_norm = false});
  EXPECT_EQ(classify_cause(c), kCauseHeadEither) << c.message;
}

TEST(CauseTest, TokensFromEqualLogitsNameSampling) {
  EXPECT_EQ(classify_cause(judged({.changed = "forward/0/next_tokens"})), kCauseSampling);
}

TEST(CauseTest, ALayerWithSomeSitesRecordedIsASiteNotRecorded) {
  const CaseResult c = judged({.dropped = {"forward/0/layers/1/attn_out"}});
  EXPECT_TRUE(c.first_missing_layer_partly_recorded);
  EXPECT_EQ(classify_cause(c), kCauseSiteNotRecorded);
  EXPECT_EQ(c.message.rfind("forward/0/layers/1/attn_out: missing in the partitioned run (site "
                            "not recorded)",
                            0),
            0u)
      << c.message;
}

TEST(CauseTest, ALayerWithNoSiteRecordedIsALayerNotComputed) {
  Edit e;
  for (const char* site : {"pre_attn", "attn_out", "pre_mlp", "mlp_out"})
    e.dropped.push_back(fmt::format("forward/0/layers/1/{}", site));
  const CaseResult c = judged(e);
  EXPECT_FALSE(c.first_missing_layer_partly_recorded);
  EXPECT_EQ(classify_cause(c), kCauseLayerNotComputed);
  EXPECT_NE(c.message.find("(layer not computed)"), std::string::npos) << c.message;
}

TEST(CauseTest, ALayerDifferenceKeepsTheLayerCauses) {
  EXPECT_EQ(classify_cause(judged({.changed = "forward/0/layers/1/pre_attn"})), kCauseHandoff);
  EXPECT_EQ(classify_cause(judged({.changed = "forward/0/layers/0/mlp_out"})), kCauseLayerWeights);
}

TEST(CauseTest, APassShowsNoCause) { EXPECT_EQ(classify_cause(judged({})), ""); }

TEST(CauseTest, CompareNamesTheSameCausesFromTwoFiles) {
  CompareResult r;
  r.compared_paths = {"/forward/0/layers/0/pre_attn", "/forward/0/final_norm", "/forward/0/logits"};
  TensorDiff d;
  d.path = "/forward/0/logits";
  d.order = 3;
  d.mismatches = 1;
  r.diffs = {d};
  EXPECT_EQ(compare_cause(r), kCauseHeadLmHead);
  r.compared_paths.erase(r.compared_paths.begin() + 1);
  EXPECT_EQ(compare_cause(r), kCauseHeadEither);
  r.only_in_a = {"/forward/0/layers/0/attn_out"};
  r.only_in_a_first_order = 1;
  EXPECT_EQ(compare_cause(r), kCauseSiteNotRecorded);
  r.only_in_a = {"/forward/0/layers/1/pre_attn"};
  EXPECT_EQ(compare_cause(r), kCauseLayerNotComputed);
}

StageFacts head_stage(int index, bool tied) {
  StageFacts f;
  f.index = index;
  f.embedding = index == 0 ? "real" : "missing";
  f.embedding_storage = index == 0 ? "storage:0" : "";
  f.head_storage = tied ? "storage:0" : "storage:7";
  f.head_tied = tied;
  return f;
}

TEST(CauseTest, AStageWhoseHeadIsNotTiedWherePp1sIsFailsEmbeddingWithItsOwnCause) {
  StageEvidence pp1{{head_stage(0, true)}};
  StageFacts first;
  first.embedding = "real";
  StageEvidence run{{first, head_stage(1, false)}};
  const StageJudgement j = judge_stage_checks({"embedding"}, run, pp1);
  ASSERT_EQ(j.failures.size(), 1u);
  EXPECT_EQ(j.failures[0].check, "embedding");
  EXPECT_EQ(j.failures[0].cause, kCauseHeadNotTied);
  EXPECT_EQ(j.failures[0].message.rfind("head not tied to the embedding: stage 1's head", 0), 0u)
      << j.failures[0].message;
  // The case names it as its cause, before any dataset.
  const RunRecord a = record(), b = record({.changed = "forward/0/logits"});
  JudgeInput in;
  in.pp1 = &a;
  in.candidate = &b;
  in.dataset_checks = {"tensors", "logits"};
  in.stage_failures = j.failures;
  in.stages_judged = true;
  CaseResult c;
  judge_case(in, c);
  EXPECT_EQ(classify_cause(c), kCauseHeadNotTied) << c.message;
  // A tied stage passes; a PP=1 that ties nothing asks nothing.
  run.stages[1] = head_stage(1, true);
  EXPECT_TRUE(judge_stage_checks({"embedding"}, run, pp1).failures.empty());
  run.stages[1] = head_stage(1, false);
  pp1.stages[0].head_tied = false;
  EXPECT_TRUE(judge_stage_checks({"embedding"}, run, pp1).failures.empty());
}

TEST(CauseTest, AStageRunWithNoHeadRecordedWherePp1TiesItFails) {
  const StageEvidence pp1{{head_stage(0, true)}};
  StageFacts first;
  first.embedding = "real";
  const StageEvidence run{{first}};
  const StageJudgement j = judge_stage_checks({"embedding"}, run, pp1);
  ASSERT_EQ(j.failures.size(), 1u);
  EXPECT_NE(j.failures[0].message.find("no stage records its head"), std::string::npos);
}

// docs/bisect.md's cause table lists every cause the rule book can name.
TEST(CauseTest, TheBisectGuideListsEveryCause) {
  std::ifstream in(std::filesystem::path(SPLITCHECK_SOURCE_DIR) / "docs" / "bisect.md");
  std::stringstream text;
  text << in.rdbuf();
  for (const char* cause : known_causes())
    EXPECT_NE(text.str().find(fmt::format("| `{}` |", cause)), std::string::npos) << cause;
}

}  // namespace
}  // namespace splitcheck
