// Stage-0 prefix reuse (harness/engine/prefix_reuse.h): a partitioned run whose first stage
// takes its prefix from PP=1's log records exactly what the same run records when it
// computes everything, also after its operations leave PP=1's and it rebuilds its
// caches; verify mode refuses a log that is not this model's; the follower leaves at
// the first operation that differs.
#include "harness/engine/prefix_reuse.h"

#include <gtest/gtest.h>

#include "harness/engine/partitioned_engine.h"
#include "harness/engine/run.h"
#include "reference/state_log.h"

namespace splitcheck {
namespace {

Scenario default_scenario() {
  Result<Scenario> s =
      load_scenario(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/default.json");
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  Scenario out = *s;
  out.workload.max_new_tokens = 6;
  return out;
}

EngineOptions engine_options(const Scenario& s) {
  return EngineOptions{s.capture_ids, s.dump_level, s.speculative.method,
                       s.speculative.context_only_producer};
}

// PP=1 over the weights of `weights_of` (the scenario itself unless another is given),
// logged.
std::unique_ptr<StateLog> pp1_log(const Scenario& s, const Scenario& weights_of,
                                  size_t max_state_bytes = 0) {
  auto log = std::make_unique<StateLog>(s.model.num_hidden_layers - 2, max_state_bytes);
  std::unique_ptr<WeightSource> source = scenario_weight_source(weights_of);
  Result<ReferenceRun> ref = run_reference(s, *source, log.get());
  EXPECT_TRUE(ref.is_ok()) << ref.status().message();
  return log;
}

struct SplitRun {
  Status status;
  RunRecord record;
  ReuseStats stats;
};

SplitRun run_split(const Scenario& s, int cut, PrefixReuse reuse) {
  SplitRun out;
  Result<PreparedWorkload> w = prepare_workload(s);
  Result<Partition> p = Partition::from_cuts({cut}, s.model.num_hidden_layers);
  std::unique_ptr<WeightSource> source = scenario_weight_source(s);
  Result<std::unique_ptr<PartitionedEngine>> e =
      PartitionedEngine::create(s.model, *p, engine_options(s), FaultSet{s.faults}, *source, reuse);
  if (!e.is_ok()) {
    out.status = e.status();
    return out;
  }
  Result<GenerationSummary> g =
      run_generation(s, **e, (*e)->last_stage_weights(), 1, false, *source, *w, &out.record);
  out.status = g.is_ok() ? Status::ok() : g.status();
  out.stats = (*e)->reuse_stats();
  return out;
}

void expect_same_records(const RunRecord& a, const RunRecord& b) {
  ASSERT_EQ(a.entries().size(), b.entries().size());
  for (size_t i = 0; i < a.entries().size(); ++i) {
    ASSERT_EQ(a.entries()[i].path, b.entries()[i].path) << "entry " << i;
    EXPECT_TRUE(a.entries()[i].tensor.bit_equal(b.entries()[i].tensor)) << a.entries()[i].path;
  }
  EXPECT_EQ(a.attrs(), b.attrs());
}

TEST(PrefixReuse, ReusedPrefixRecordsExactlyWhatComputingItRecords) {
  const Scenario s = default_scenario();
  const std::unique_ptr<StateLog> log = pp1_log(s, s);
  for (int cut : {1, 13, 16, 31}) {
    const SplitRun off = run_split(s, cut, {});
    const SplitRun on = run_split(s, cut, {log.get(), ReuseMode::kOn});
    ASSERT_TRUE(off.status.is_ok()) << off.status.message();
    ASSERT_TRUE(on.status.is_ok()) << on.status.message();
    expect_same_records(off.record, on.record);
    EXPECT_EQ(on.stats.reused_forwards, static_cast<int64_t>(log->forward_count())) << cut;
    EXPECT_EQ(on.stats.computed_forwards, 0) << cut;
    EXPECT_TRUE(on.stats.left_because.empty()) << on.stats.left_because;
    EXPECT_EQ(off.stats.reused_forwards, 0);
    EXPECT_EQ(off.stats.unused_because, "reuse is off");
  }
}

TEST(PrefixReuse, AfterLeavingPp1sOperationsTheRebuiltCachesGiveTheSameRecord) {
  // The drafter's own (never loaded) embedding proposes other tokens, so the verify
  // forwards differ from PP=1's: the first stage leaves the log mid-run.
  Scenario s = default_scenario();
  s.faults = {"draft.own_embedding"};
  const std::unique_ptr<StateLog> log = pp1_log(s, s);
  const SplitRun off = run_split(s, 13, {});
  const SplitRun on = run_split(s, 13, {log.get(), ReuseMode::kOn});
  ASSERT_TRUE(off.status.is_ok()) << off.status.message();
  ASSERT_TRUE(on.status.is_ok()) << on.status.message();
  EXPECT_FALSE(on.stats.left_because.empty());
  EXPECT_GT(on.stats.left_at_forward, 0);
  EXPECT_GT(on.stats.reused_forwards, 0);
  EXPECT_GT(on.stats.computed_forwards, 0);
  expect_same_records(off.record, on.record);
}

TEST(PrefixReuse, ALogEndedByItsMemoryBoundIsFollowedAsFarAsItGoes) {
  const Scenario s = default_scenario();
  // One byte: the first forward's states are kept, then the log ends.
  const std::unique_ptr<StateLog> log = pp1_log(s, s, 1);
  EXPECT_TRUE(log->ended_early());
  EXPECT_EQ(log->forward_count(), 1u);
  const SplitRun off = run_split(s, 13, {});
  const SplitRun on = run_split(s, 13, {log.get(), ReuseMode::kOn});
  ASSERT_TRUE(on.status.is_ok()) << on.status.message();
  EXPECT_EQ(on.stats.reused_forwards, 1);
  EXPECT_GT(on.stats.computed_forwards, 0);
  EXPECT_NE(on.stats.left_because.find("memory bound"), std::string::npos) << on.stats.left_because;
  expect_same_records(off.record, on.record);
}

TEST(PrefixReuse, VerifyRefusesALogOfOtherWeights) {
  const Scenario s = default_scenario();
  Scenario other = s;
  other.model.seed += 1;
  const std::unique_ptr<StateLog> foreign = pp1_log(s, other);
  const SplitRun verify = run_split(s, 13, {foreign.get(), ReuseMode::kVerify});
  ASSERT_FALSE(verify.status.is_ok());
  EXPECT_EQ(verify.status.code(), StatusCode::kInternal);
  EXPECT_NE(verify.status.message().find("prefix reuse would change forward 0"), std::string::npos)
      << verify.status.message();
  // What verify guards against: taking that log changes the run.
  const SplitRun off = run_split(s, 13, {});
  const SplitRun on = run_split(s, 13, {foreign.get(), ReuseMode::kOn});
  ASSERT_TRUE(on.status.is_ok());
  bool differs = false;
  for (size_t i = 0; i < off.record.entries().size() && !differs; ++i)
    differs = !off.record.entries()[i].tensor.bit_equal(on.record.entries()[i].tensor);
  EXPECT_TRUE(differs);
}

TEST(PrefixReuse, AStageDoesNotFollowALogOfOtherCaptureIds) {
  const Scenario s = default_scenario();
  Scenario other = s;
  other.capture_ids = {0, 4};
  const std::unique_ptr<StateLog> log = pp1_log(other, other);
  const SplitRun on = run_split(s, 13, {log.get(), ReuseMode::kOn});
  ASSERT_TRUE(on.status.is_ok());
  EXPECT_EQ(on.stats.reused_forwards, 0);
  EXPECT_NE(on.stats.unused_because.find("capture ids"), std::string::npos);
}

TEST(PrefixFollower, LeavesAtTheFirstOperationThatDiffers) {
  StateLog log(0);
  ForwardRequest a{{1, 2, 3}, ForwardKind::kPrefill, 0, 0};
  ForwardRequest b{{4}, ForwardKind::kDecode, 3, 1};
  log.add_control(EngineOp::kReset);
  log.begin_forward(a);
  log.add_control(EngineOp::kSave);
  log.begin_forward(b);

  PrefixFollower f({&log, ReuseMode::kOn});
  EXPECT_EQ(f.follow(EngineOp::kReset, nullptr).logged, nullptr);
  const PrefixFollower::Step first = f.follow(EngineOp::kForward, &a);
  ASSERT_NE(first.logged, nullptr);
  EXPECT_EQ(first.logged->request.ids, a.ids);
  EXPECT_FALSE(first.left_now);
  EXPECT_FALSE(f.follow(EngineOp::kSave, nullptr).left_now);
  ForwardRequest other = b;
  other.ids = {5};
  const PrefixFollower::Step left = f.follow(EngineOp::kForward, &other);
  EXPECT_TRUE(left.left_now);
  EXPECT_EQ(left.logged, nullptr);
  EXPECT_EQ(f.matched().size(), 3u);
  // Once left, never back, even for an operation that matches the log.
  const PrefixFollower::Step after = f.follow(EngineOp::kForward, &b);
  EXPECT_FALSE(after.left_now);
  EXPECT_EQ(after.logged, nullptr);
  EXPECT_EQ(f.stats().reused_forwards, 1);
  EXPECT_EQ(f.stats().computed_forwards, 2);
  EXPECT_EQ(f.stats().left_at_forward, 1);
  EXPECT_NE(f.stats().left_because.find("forward 1"), std::string::npos);
}

TEST(PrefixFollower, ARestoreWherePp1SavedOrAnExtraForwardLeavesTheLog) {
  StateLog log(0);
  log.add_control(EngineOp::kReset);
  log.add_control(EngineOp::kSave);
  PrefixFollower f({&log, ReuseMode::kOn});
  f.follow(EngineOp::kReset, nullptr);
  EXPECT_TRUE(f.follow(EngineOp::kRestore, nullptr).left_now);
  EXPECT_NE(f.stats().left_because.find("restore here, save at PP=1"), std::string::npos);

  PrefixFollower g({&log, ReuseMode::kOn});
  g.follow(EngineOp::kReset, nullptr);
  g.follow(EngineOp::kSave, nullptr);
  ForwardRequest extra{{1}, ForwardKind::kDecode, 0, 0};
  EXPECT_TRUE(g.follow(EngineOp::kForward, &extra).left_now);
  EXPECT_NE(g.stats().left_because.find("after the last of PP=1's 2 operations"),
            std::string::npos);
}

TEST(PrefixReuse, ModeNamesRoundTrip) {
  for (ReuseMode m : {ReuseMode::kOff, ReuseMode::kOn, ReuseMode::kVerify})
    EXPECT_EQ(parse_reuse_mode(reuse_mode_name(m)), m);
  EXPECT_FALSE(parse_reuse_mode("maybe").has_value());
}

}  // namespace
}  // namespace splitcheck
