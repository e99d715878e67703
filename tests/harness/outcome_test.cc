// The outcome tables (harness/judge/outcome.h) and the checks registry's kinds
// (harness/scenario/checks.h): every verdict and every check written once, and the places
// that decide from them agree with them.
#include "harness/judge/outcome.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "harness/judge/judge.h"
#include "harness/scenario/checks.h"
#include "harness/sweep/sweep.h"

namespace splitcheck {
namespace {

TEST(OutcomeTable, EveryVerdictHasOneRowWithAUniqueName) {
  std::set<std::string> names, keys;
  for (int v = 0; v <= static_cast<int>(Verdict::kInterrupted); ++v) {
    const CaseOutcome& o = outcome_of(static_cast<Verdict>(v));
    EXPECT_EQ(o.verdict, static_cast<Verdict>(v));
    EXPECT_TRUE(names.insert(std::string(o.name)).second) << o.name;
    EXPECT_TRUE(keys.insert(std::string(o.count_key)).second) << o.count_key;
    ASSERT_NE(find_outcome(o.name), nullptr);
    EXPECT_EQ(find_outcome(o.name)->verdict, o.verdict);
  }
  EXPECT_EQ(case_outcomes().size(), names.size());
  EXPECT_EQ(find_outcome("passed"), nullptr);
}

TEST(OutcomeTable, OnlyPassAndWaivedLeaveTheGateOpen) {
  for (const CaseOutcome& o : case_outcomes()) {
    const bool open = o.verdict == Verdict::kPass || o.verdict == Verdict::kWaived;
    EXPECT_EQ(o.fails_gate, !open) << o.name;
    EXPECT_EQ(o.exit_status == 0, open) << o.name;
    EXPECT_EQ(o.junit == JunitElement::kNone, o.verdict == Verdict::kPass) << o.name;
  }
  EXPECT_EQ(outcome_of(Verdict::kError).exit_status, 3);
  EXPECT_EQ(outcome_of(Verdict::kError).junit, JunitElement::kError);
}

TEST(OutcomeTable, WorseExitStatusRanksErrorsAboveFailures) {
  EXPECT_EQ(worse_exit_status(0, 1), 1);
  EXPECT_EQ(worse_exit_status(1, 0), 1);
  EXPECT_EQ(worse_exit_status(1, 3), 3);
  EXPECT_EQ(worse_exit_status(3, 1), 3);
  EXPECT_EQ(worse_exit_status(3, 4), 4);
  EXPECT_EQ(worse_exit_status(4, 130), 130);
}

// The sweep's exit code and verdict word come from the tables, case by case.
TEST(OutcomeTable, SweepExitCodeIsTheWorstCaseStatus) {
  for (const CaseOutcome& worst : case_outcomes()) {
    if (worst.verdict == Verdict::kInterrupted) continue;  // only with interrupted_by set
    SweepResult r;
    r.cases.resize(2);
    r.cases[0].verdict = Verdict::kPass;
    r.cases[0].datasets_compared = 1;
    r.cases[1].verdict = worst.verdict;
    r.cases[1].datasets_compared = 1;
    EXPECT_EQ(r.exit_code(), worst.exit_status) << worst.name;
    EXPECT_EQ(r.conformant(), !worst.fails_gate) << worst.name;
    EXPECT_EQ(r.verdict_word(), worst.fails_gate ? "divergent" : "conformant") << worst.name;
  }
  SweepResult none;
  EXPECT_EQ(none.exit_code(), 1);  // a sweep of no case is never a pass
  SweepResult stopped;
  stopped.cases.resize(1);
  stopped.cases[0].verdict = Verdict::kInterrupted;
  stopped.interrupted_by = 15;
  EXPECT_EQ(stopped.exit_code(), 143);
  EXPECT_EQ(stopped.verdict_word(), "interrupted");
}

TEST(CheckKinds, EveryDatasetPathMapsToADatasetCheck) {
  for (const char* path :
       {"forward/0/layers/3/pre_attn", "forward/1/taps/2", "forward/0/logits",
        "forward/0/input_ids", "forward/0/dispatch", "spec/proposals", "generation/0/tokens"}) {
    const std::string check = dataset_check(path);
    EXPECT_TRUE(check_is(check, CheckKind::kDataset)) << path << " -> " << check;
  }
  EXPECT_EQ(dataset_check("stages/0/holdings"), "");
}

TEST(CheckKinds, EveryCheckHasAKindAndTheKindsPartitionTheRegistry) {
  size_t n = 0;
  for (CheckKind k : {CheckKind::kDataset, CheckKind::kStage, CheckKind::kSweep})
    n += checks_of_kind(k).size();
  EXPECT_EQ(n, check_registry().size());
  EXPECT_EQ(checks_of_kind(CheckKind::kStage), (std::vector<std::string>{"embedding", "memory"}));
  EXPECT_EQ(checks_of_kind({"config", "tensors", "memory", "nonsense"}, CheckKind::kDataset),
            (std::vector<std::string>{"tensors"}));
  EXPECT_FALSE(check_is("nonsense", CheckKind::kDataset));
}

}  // namespace
}  // namespace splitcheck
