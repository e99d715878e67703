// The checks of SPEC 5.4 fail on their own: identity is the same storage (a copy with
// equal values fails), memory is bytes measured from what each stage owns (an extra
// tensor fails with its measured bytes), a refusal is reached through the drafter's real
// loading path on a stage without the embedding (and depends on that placement), and tap
// 0's residency under tap.embed_resident_by_module follows what the last stage holds.
#include "harness/judge/stage_checks.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness/engine/run.h"
#include "harness/sweep/stage_probes.h"
#include "harness/sweep/sweep.h"
#include "reference/spec_methods.h"
#include "tests/scenario_fixture.h"

namespace splitcheck {
namespace {

Scenario default_scenario() {
  Scenario out = committed_scenario("default");
  out.workload.prompts = 1;
  out.workload.max_new_tokens = 4;
  return out;
}

Partition partition_at(const Scenario& s, std::vector<int> cuts) {
  Result<Partition> p = Partition::from_cuts(cuts, s.model.num_hidden_layers);
  EXPECT_TRUE(p.is_ok()) << p.status().message();
  return *p;
}

StageConfig stage_config(const Scenario& s, const Partition& p, int index) {
  return StageConfig{s.model,
                     p,
                     index,
                     s.capture_ids,
                     s.dump_level,
                     FaultSet{s.faults},
                     s.speculative.method,
                     s.speculative.context_only_producer};
}

std::unique_ptr<Stage> make_stage(const Scenario& s, const Partition& p, int index,
                                  WeightSource& source) {
  Result<std::unique_ptr<Stage>> st = Stage::create(stage_config(s, p, index), source);
  EXPECT_TRUE(st.is_ok()) << st.status().message();
  return st.is_ok() ? std::move(*st) : nullptr;
}

std::vector<StageHoldings> holdings_of(const Scenario& s, const Partition& p,
                                       WeightSource& source) {
  std::vector<StageHoldings> h;
  for (int i = 0; i < p.stages(); ++i) h.push_back(make_stage(s, p, i, source)->holdings());
  return h;
}

size_t embedding_bytes(const Scenario& s) {
  return static_cast<size_t>(s.model.vocab_size) * static_cast<size_t>(s.model.hidden_size) * 2;
}

// --- identity (SPEC 5.4: the same storage, compared as such) -----------------------------

TEST(DrafterIdentity, TheTargetsObjectPassesACopyWithEqualValuesFails) {
  const Scenario s = default_scenario();
  const Partition p = partition_at(s, {16});
  GeneratedWeights source(s.model);
  const std::unique_ptr<Stage> last = make_stage(s, p, 1, source);
  const WeightStore& host = last->weights();
  const DrafterHost on_last{host, 1, false};

  DrafterBinding real;
  ASSERT_TRUE(bind_drafter(s, on_last, real).is_ok());
  const DrafterPlacement bound = describe_drafter(s, real, on_last);
  EXPECT_TRUE(bound.same_object_as_target);
  EXPECT_FALSE(check_drafter_identity(s, bound).has_value());

  // Another tensor with the very same values, in storage of its own.
  const Tensor copy = host.get("embed_tokens.weight").clone();
  ASSERT_TRUE(copy.bit_equal(host.get("embed_tokens.weight")));
  DrafterBinding copied = share_with_target(host);
  copied.embed = &copy;
  const DrafterPlacement placed = describe_drafter(s, copied, on_last);
  EXPECT_FALSE(placed.same_object_as_target);
  const std::optional<CheckFailure> f = check_drafter_identity(s, placed);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->check, "embedding");
  EXPECT_NE(f->message.find("not the target's object"), std::string::npos) << f->message;
}

TEST(DrafterIdentity, TheLastStagesCopyIsNotStageZerosObject) {
  // Each stage owns what it loaded: the drafter's copy on the last stage has the target's
  // values and storage of its own, even though both came from one memoising source.
  const Scenario s = default_scenario();
  const Partition p = partition_at(s, {16});
  GeneratedWeights source(s.model);
  const std::unique_ptr<Stage> first = make_stage(s, p, 0, source);
  const std::unique_ptr<Stage> last = make_stage(s, p, 1, source);
  const Tensor& a = first->weights().get("embed_tokens.weight");
  const Tensor& b = last->weights().get("embed_tokens.weight");
  EXPECT_TRUE(a.bit_equal(b));
  EXPECT_FALSE(same_storage(a, b));
  DrafterBinding on_first = share_with_target(first->weights());
  EXPECT_FALSE(binds_target_embedding(on_first, last->weights()));
}

// --- the refusal of a missing placeholder (SPEC 3.1) ------------------------------------

TEST(DrafterRefusal, LoadingOnAStageWithoutTheEmbeddingGivesTheClearRefusal) {
  const Scenario s = default_scenario();
  const Partition p = partition_at(s, {8, 20});  // the middle stage holds no embedding
  GeneratedWeights source(s.model);
  const std::unique_ptr<Stage> middle = make_stage(s, p, 1, source);
  ASSERT_EQ(middle->holdings().embedding, "missing");
  const Status st = probe_drafter_load(s, *middle);
  EXPECT_EQ(st.code(), StatusCode::kConfigRejected) << st.message();
  EXPECT_NE(st.message().find("stage 1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("dspark"), std::string::npos) << st.message();
  EXPECT_FALSE(check_refusal(s, 1, st).has_value());
}

TEST(DrafterRefusal, AStageThatHoldsTheEmbeddingGetsNoRefusal) {
  const Scenario s = default_scenario();
  const Partition p = partition_at(s, {8, 20});
  GeneratedWeights source(s.model);
  const std::unique_ptr<Stage> last = make_stage(s, p, 2, source);
  ASSERT_EQ(last->holdings().embedding, "copy-for-drafter");
  EXPECT_TRUE(probe_drafter_load(s, *last).is_ok());
  // The same stage placed without the copy (a run with no drafter) is refused.
  Scenario none = s;
  none.speculative.method = "none";
  const std::unique_ptr<Stage> bare = make_stage(none, p, 2, source);
  const Status st = probe_drafter_load(s, *bare);
  EXPECT_EQ(st.code(), StatusCode::kConfigRejected) << st.message();
  EXPECT_NE(st.message().find("stage 2"), std::string::npos) << st.message();
}

TEST(DrafterRefusal, WithTheFaultTheRefusalIsUnreachableNotACrash) {
  Scenario s = default_scenario();
  s.faults = {"draft.vocab_from_embedding"};
  const Partition p = partition_at(s, {8, 20});
  GeneratedWeights source(s.model);
  const std::unique_ptr<Stage> middle = make_stage(s, p, 1, source);
  const Status st = probe_drafter_load(s, *middle);
  EXPECT_NE(st.code(), StatusCode::kConfigRejected) << st.message();
  const std::optional<CheckFailure> f = check_refusal(s, 1, st);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->check, "embedding");
  EXPECT_NE(f->message.find("unreachable refusal"), std::string::npos) << f->message;
  // The fault reads the embedding only where it is missing: where the stage holds it, the
  // drafter loads.
  const std::unique_ptr<Stage> last = make_stage(s, p, 2, source);
  EXPECT_TRUE(probe_drafter_load(s, *last).is_ok());
}

TEST(DrafterRefusal, ThePartitionsProbeFollowsTheFault) {
  Scenario s = default_scenario();
  const Partition p = partition_at(s, {16});
  GeneratedWeights source(s.model);
  std::string answer;
  EXPECT_FALSE(check_refusal_reachable(s, p, source, &answer).has_value()) << answer;
  EXPECT_NE(answer.find("stage 1"), std::string::npos) << answer;
  s.faults = {"draft.vocab_from_embedding"};
  const std::optional<CheckFailure> f = check_refusal_reachable(s, p, source, &answer);
  ASSERT_TRUE(f.has_value()) << answer;
  EXPECT_NE(f->message.find("unreachable refusal"), std::string::npos) << f->message;
}

TEST(DrafterRefusal, TheSweepReportsTheUnreachableRefusal) {
  Scenario s = default_scenario();
  s.faults = {"draft.vocab_from_embedding"};
  SweepOptions o;
  o.filter = "split-13";
  o.threads = 1;
  Result<SweepResult> r = run_sweep(s, o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->cases.size(), 1u);
  const CaseResult& c = r->cases[0];
  EXPECT_EQ(c.verdict, Verdict::kDiverged) << c.message;
  EXPECT_NE(std::find(c.failed_checks.begin(), c.failed_checks.end(), "embedding"),
            c.failed_checks.end());
  EXPECT_NE(c.message.find("unreachable refusal"), std::string::npos) << c.message;
}

// --- memory (SPEC 5.4: bytes measured from what each stage owns) --------------------------

TEST(StageMemory, TheFixedProtocolHoldsExactlyWhatThePlacementAllows) {
  for (const std::string method : {"dspark", "eagle3", "none"}) {
    Scenario s = default_scenario();
    s.speculative.method = method;
    if (method == "eagle3") s.capture_ids = method_default_capture_ids("eagle3", 32);
    GeneratedWeights source(s.model);
    for (const std::vector<int>& cuts : std::vector<std::vector<int>>{{16}, {7, 25}, {8, 16, 24}}) {
      const Partition p = partition_at(s, cuts);
      const std::vector<StageHoldings> h = holdings_of(s, p, source);
      for (const CheckFailure& f : check_memory(s, p, h))
        ADD_FAILURE() << method << " " << f.message;
      for (const CheckFailure& f : check_embedding_placement(s, p, h))
        ADD_FAILURE() << method << " " << f.message;
      for (const StageHoldings& one : h)
        EXPECT_EQ(one.parameter_bytes, placed_parameter_bytes(stage_config(s, p, one.index)));
    }
  }
}

TEST(StageMemory, AProducersEmbeddingCopyIsMeasuredAsExtraBytes) {
  Scenario s = default_scenario();
  s.speculative.context_only_producer = true;
  const Partition p = partition_at(s, {16});
  GeneratedWeights source(s.model);
  EXPECT_TRUE(check_memory(s, p, holdings_of(s, p, source)).empty());

  s.faults = {"pd.producer_embedding"};
  const std::vector<StageHoldings> h = holdings_of(s, p, source);
  const size_t allowed = placed_parameter_bytes(stage_config(s, p, 1));
  EXPECT_EQ(h[1].parameter_bytes - allowed, embedding_bytes(s));  // 512 x 256 x 2 = 262144
  const std::vector<CheckFailure> f = check_memory(s, p, h);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].check, "memory");
  EXPECT_NE(
      f[0].message.find(fmt::format("stage 1 holds {} parameter bytes", h[1].parameter_bytes)),
      std::string::npos)
      << f[0].message;
  EXPECT_NE(f[0].message.find(fmt::format("{} extra bytes measured", embedding_bytes(s))),
            std::string::npos)
      << f[0].message;
}

TEST(StageMemory, AStageHoldingOneMoreTensorFailsWithItsMeasuredBytes) {
  const Scenario s = default_scenario();
  const Partition p = partition_at(s, {16});
  GeneratedWeights source(s.model);
  const std::unique_ptr<Stage> first = make_stage(s, p, 0, source);
  // The first stage's store, plus one tensor the placement does not give it.
  WeightStore more = first->weights();
  Result<Tensor> extra = source.load("lm_head.weight");
  ASSERT_TRUE(extra.is_ok());
  more.put("lm_head.weight", *extra);
  const StageConfig config = stage_config(s, p, 0);
  std::vector<StageHoldings> h = {measure_holdings(config, more)};
  const size_t lm_head_bytes = extra->nbytes();
  EXPECT_EQ(h[0].parameter_bytes, first->holdings().parameter_bytes + lm_head_bytes);
  const std::vector<CheckFailure> f = check_memory(s, p, h);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].message.find(fmt::format("{} extra bytes measured", lm_head_bytes)),
            std::string::npos)
      << f[0].message;
  // A name over storage the stage already holds occupies nothing more.
  WeightStore alias = first->weights();
  alias.put("alias", first->weights().get("embed_tokens.weight"));
  EXPECT_TRUE(check_memory(s, p, {measure_holdings(config, alias)}).empty());
}

// --- the one rule set over stage facts, as a dump records them ----------------------------

StageFacts facts(int index, const std::string& embedding, int64_t held, int64_t placed) {
  StageFacts f;
  f.index = index;
  f.embedding = embedding;
  f.placed_embedding = index == 0 ? "real" : "missing";
  f.parameter_bytes = held;
  f.placed_parameter_bytes = placed;
  return f;
}

bool not_judged(const StageJudgement& j, const std::string& check) {
  return std::any_of(j.not_judged.begin(), j.not_judged.end(),
                     [&](const NotJudged& n) { return n.check == check; });
}

TEST(StageFactsRules, FactsThatAgreeWithThePlacementPassBothChecks) {
  const StageEvidence run{{facts(0, "real", 100, 100), facts(1, "missing", 50, 50)}, false};
  const StageEvidence pp1{{facts(0, "real", 150, 150)}, false};
  const StageJudgement j = judge_stage_checks({"memory", "embedding"}, run, pp1);
  EXPECT_TRUE(j.failures.empty()) << j.failures.front().message;
  EXPECT_TRUE(j.judged);
  EXPECT_TRUE(j.not_judged.empty());
}

TEST(StageFactsRules, WithoutPlacedBytesMemoryIsNotJudgedYetFewerBytesThanPp1StillFail) {
  StageEvidence run{{facts(0, "real", 100, 0), facts(1, "missing", 40, 0)}, false};
  for (StageFacts& f : run.stages) f.placed_parameter_bytes.reset();
  const StageEvidence pp1{{facts(0, "real", 150, 150)}, false};
  const StageJudgement j = judge_stage_checks({"memory"}, run, pp1);
  EXPECT_TRUE(not_judged(j, "memory"));
  EXPECT_FALSE(j.judged);
  ASSERT_EQ(j.failures.size(), 1u);
  EXPECT_NE(j.failures[0].message.find("10 fewer than PP=1's 150"), std::string::npos)
      << j.failures[0].message;
  // No /stages at all: neither check is judged, and nothing fails.
  const StageJudgement none = judge_stage_checks({"memory", "embedding"}, StageEvidence{}, pp1);
  EXPECT_TRUE(not_judged(none, "memory") && not_judged(none, "embedding"));
  EXPECT_TRUE(none.failures.empty());
}

TEST(StageFactsRules, FactsThatContradictEachOtherFail) {
  // Bytes said to be placed, but a copy the placement does not give.
  const StageEvidence copy{{facts(0, "real", 100, 100), facts(1, "copy-for-drafter", 80, 80)},
                           true};
  const StageJudgement m = judge_stage_checks({"memory"}, copy, StageEvidence{});
  ASSERT_EQ(m.failures.size(), 1u);
  EXPECT_NE(m.failures[0].message.find("copy its placement does not give it"), std::string::npos);
  // More storages than tensors.
  StageEvidence storages{{facts(0, "real", 100, 100)}, false};
  storages.stages[0].held_tensors = 2;
  storages.stages[0].held_storages = 3;
  EXPECT_EQ(judge_stage_checks({"memory"}, storages, StageEvidence{}).failures.size(), 1u);
  // A clear refusal claimed against an answer that is none.
  StageEvidence refusal{{facts(0, "real", 1, 1), facts(1, "missing", 1, 1)}, true};
  StageFacts& last = refusal.stages[1];
  last.drafter_method = "dspark";
  last.refusal_status = "internal-error";
  last.refusal_probe = "vocab check read a missing module";
  last.refusal_clear = true;
  const StageJudgement e = judge_stage_checks({"embedding"}, refusal, StageEvidence{});
  ASSERT_EQ(e.failures.size(), 1u);
  EXPECT_NE(e.failures[0].message.find("its refusal_clear says 1, its answer does not"),
            std::string::npos);
  // The same answer, when it is the clear refusal, passes.
  last.refusal_status = "config-rejected";
  last.refusal_probe = "stage 1 holds no embedding for the dspark drafter";
  EXPECT_TRUE(judge_stage_checks({"embedding"}, refusal, StageEvidence{}).failures.empty());
}

TEST(StageFactsRules, APartitionedRunRecordsEveryFactItsStagesAreJudgedFrom) {
  const Scenario s = default_scenario();
  Result<ReferenceRun> run = run_partitioned(s, {16});
  ASSERT_TRUE(run.is_ok()) << run.status().message();
  const StageEvidence ev = stage_evidence_of(run->record);
  ASSERT_EQ(ev.stages.size(), 2u);
  EXPECT_TRUE(ev.drafter_ran);
  for (const StageFacts& f : ev.stages) {
    EXPECT_EQ(f.parameter_bytes, f.placed_parameter_bytes) << f.index;
    EXPECT_GT(f.held_storages.value_or(0), 0) << f.index;
    EXPECT_LE(f.held_storages.value_or(0), f.held_tensors.value_or(0)) << f.index;
    EXPECT_EQ(f.embedding, f.placed_embedding) << f.index;
  }
  const StageFacts& last = ev.stages[1];
  EXPECT_EQ(last.drafter_embedding, "target");
  EXPECT_EQ(last.drafter_same_object_as_target, true);
  EXPECT_FALSE(last.embedding_storage.empty());
  EXPECT_EQ(last.drafter_embedding_storage, last.embedding_storage);
  EXPECT_EQ(last.refusal_status, "config-rejected") << last.refusal_probe;
  EXPECT_EQ(last.refusal_clear, true);
  const StageJudgement j = judge_stage_checks({"memory", "embedding"}, ev, StageEvidence{});
  EXPECT_TRUE(j.judged);
  EXPECT_TRUE(j.failures.empty()) << j.failures.front().message;
}

// --- tap 0's residency under tap.embed_resident_by_module ---------------------------------

TEST(Tap0Residency, UnderTheFaultTheLastStagesCopyMakesTap0LookResident) {
  Scenario s = default_scenario();
  const Partition p = partition_at(s, {16});
  GeneratedWeights source(s.model);
  Scenario none = s;
  none.speculative.method = "none";  // a last stage without the copy
  EXPECT_FALSE(make_stage(s, p, 1, source)->tap0_resident());
  EXPECT_FALSE(make_stage(none, p, 1, source)->tap0_resident());
  EXPECT_TRUE(make_stage(s, p, 0, source)->tap0_resident());

  s.faults = {"tap.embed_resident_by_module"};
  none.faults = s.faults;
  const std::unique_ptr<Stage> with_copy = make_stage(s, p, 1, source);
  ASSERT_TRUE(with_copy->weights().has("embed_tokens.weight"));
  EXPECT_TRUE(with_copy->tap0_resident());
  const std::unique_ptr<Stage> without = make_stage(none, p, 1, source);
  ASSERT_FALSE(without->weights().has("embed_tokens.weight"));
  EXPECT_FALSE(without->tap0_resident());
  // A producer's last stage holds the copy only under pd.producer_embedding: with both
  // faults the copy it holds makes tap 0 look resident, as the bug decided it.
  Scenario producer = s;
  producer.speculative.context_only_producer = true;
  EXPECT_FALSE(make_stage(producer, p, 1, source)->tap0_resident());
  producer.faults.push_back("pd.producer_embedding");
  EXPECT_TRUE(make_stage(producer, p, 1, source)->tap0_resident());
}

}  // namespace
}  // namespace splitcheck
