// Serving many requests (SPEC 3.4): batch invariance of both engines, the scheduler, the
// serving sweep, and the three serving faults (SPEC 6) with their sensitivity table.
#include "harness/engine/serving.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>

#include "harness/engine/partitioned_engine.h"
#include "harness/engine/run.h"
#include "harness/engine/scheduler.h"
#include "harness/judge/expect.h"
#include "harness/sweep/serving_checks.h"
#include "harness/sweep/sweep.h"
#include "tests/scenario_fixture.h"

namespace splitcheck {
namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

std::unique_ptr<ReferenceEngine> reference_engine(const Scenario& s) {
  Result<WeightStore> w = scenario_weights(s);
  EXPECT_TRUE(w.is_ok());
  Result<std::unique_ptr<ReferenceEngine>> e = ReferenceEngine::create(
      s.model, std::move(*w), EngineOptions{s.capture_ids, DumpLevel::kLayer, "dspark", false});
  EXPECT_TRUE(e.is_ok());
  return std::move(*e);
}

// Two steps of five requests: prefills of different lengths, then a verify block, decode
// tokens and a second chunk. Forward index = 10 * step + request, the same in a batch and
// alone, so the records compare path by path.
std::vector<BatchRequest> two_steps(const PreparedWorkload& w, const std::vector<int32_t>& only) {
  std::vector<BatchRequest> steps(2);
  for (int32_t r = 0; r < 5; ++r) {
    if (!only.empty() && std::find(only.begin(), only.end(), r) == only.end()) continue;
    const std::vector<int32_t>& p = w.prompts[static_cast<size_t>(r)];
    const int64_t first = 5 + 3 * r;
    steps[0].segments.push_back(
        Segment{r, {p.begin(), p.begin() + first}, 0, ForwardKind::kPrefill, r});
    Segment next{r, {}, first, ForwardKind::kDecode, 10 + r};
    if (r == 1 || r == 3) {
      next.kind = ForwardKind::kVerify;
      next.ids.assign(p.begin() + first, p.begin() + first + 8);
    } else if (r == 4) {
      next.kind = ForwardKind::kPrefill;
      next.ids.assign(p.begin() + first, p.begin() + first + 6);
    } else {
      next.ids = {p[static_cast<size_t>(first)]};
    }
    steps[1].segments.push_back(next);
  }
  steps[1].step = 1;
  return steps;
}

RunRecord serve_steps(Engine& e, const std::vector<BatchRequest>& steps,
                      std::vector<BatchResult>* results) {
  RunRecord rec;
  for (const BatchRequest& b : steps) {
    EXPECT_TRUE(e.submit(b, true).is_ok());
    Result<BatchResult> r = e.collect(&rec);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    if (r.is_ok()) results->push_back(std::move(*r));
  }
  return rec;
}

// Every dataset the alone record has must be in the batched record with the same bytes;
// returns how many were compared.
int64_t expect_contained(const RunRecord& alone, const RunRecord& batched) {
  int64_t n = 0;
  for (const RecordEntry& e : alone.entries()) {
    if (e.path.rfind("stage_trace/", 0) == 0) continue;
    const Tensor* b = batched.find(e.path);
    EXPECT_NE(b, nullptr) << e.path;
    if (b == nullptr) continue;
    EXPECT_TRUE(same_bytes(e.tensor, *b)) << e.path << " differs in the batch";
    ++n;
  }
  return n;
}

TEST(BatchInvariance, RequestInABatchOfFiveEqualsItServedAlone) {
  const Scenario s = committed_scenario("serving");
  Result<PreparedWorkload> w = prepare_workload(s);
  ASSERT_TRUE(w.is_ok());
  std::unique_ptr<ReferenceEngine> batched = reference_engine(s);
  std::vector<BatchResult> batch_results;
  const RunRecord all = serve_steps(*batched, two_steps(*w, {}), &batch_results);
  ASSERT_EQ(batch_results.size(), 2u);
  for (int32_t r = 0; r < 5; ++r) {
    std::unique_ptr<ReferenceEngine> alone_engine = reference_engine(s);
    std::vector<BatchResult> alone_results;
    const RunRecord alone = serve_steps(*alone_engine, two_steps(*w, {r}), &alone_results);
    ASSERT_EQ(alone_results.size(), 2u);
    // Logits, taps, every per-layer tensor, bank, output, tokens, dispatch.
    EXPECT_GT(expect_contained(alone, all), 32 * 5 * 2) << "request " << r;
    for (size_t step = 0; step < 2; ++step) {
      const ForwardResult& a = alone_results[step].segments[0];
      const ForwardResult& b = batch_results[step].segments[static_cast<size_t>(r)];
      EXPECT_TRUE(same_bytes(a.logits, b.logits)) << "request " << r << " step " << step;
      EXPECT_TRUE(same_bytes(a.taps, b.taps)) << "request " << r << " step " << step;
    }
  }
}

// The scenario's PP=2 engine cut at 13, with its faults, layer dumps and DSpark.
Result<std::unique_ptr<PartitionedEngine>> dspark_engine_at_13(const Scenario& s,
                                                               WeightSource& source) {
  ASSIGN_OR_RETURN(Partition part, Partition::from_cuts({13}, s.model.num_hidden_layers));
  return PartitionedEngine::create(s.model, part,
                                   EngineOptions{s.capture_ids, DumpLevel::kLayer, "dspark", false},
                                   FaultSet{s.faults}, source);
}

TEST(BatchInvariance, PartitionedBatchEqualsReferenceAlone) {
  const Scenario s = committed_scenario("serving");
  Result<PreparedWorkload> w = prepare_workload(s);
  ASSERT_TRUE(w.is_ok());
  std::unique_ptr<WeightSource> source = scenario_weight_source(s);
  Result<std::unique_ptr<PartitionedEngine>> pe = dspark_engine_at_13(s, *source);
  ASSERT_TRUE(pe.is_ok()) << pe.status().message();
  std::vector<BatchResult> results;
  const RunRecord all = serve_steps(**pe, two_steps(*w, {}), &results);
  std::unique_ptr<ReferenceEngine> alone_engine = reference_engine(s);
  std::vector<BatchResult> alone_results;
  const RunRecord alone = serve_steps(*alone_engine, two_steps(*w, {2}), &alone_results);
  EXPECT_GT(expect_contained(alone, all), 32 * 2);
}

TEST(Scheduler, BudgetChunksDepthAndConcurrency) {
  ServingConfig cfg;
  cfg.enabled = true;
  cfg.token_budget = 40;
  cfg.chunk = 32;
  cfg.depth = 2;
  cfg.max_in_flight = 2;
  std::vector<RequestSlot> rs(3);
  for (int i = 0; i < 3; ++i) {
    rs[i].id = i;
    rs[i].arrival = i == 2 ? 1 : 0;
    rs[i].prompt_tokens = 24;
  }
  std::vector<ScheduledSegment> s0 = schedule_step(cfg, 7, 0, rs);
  ASSERT_EQ(s0.size(), 2u);
  EXPECT_EQ(s0[0].tokens, 24);
  EXPECT_EQ(s0[1].tokens, 16);  // the budget's rest: a chunked prefill
  // Step 1: both are in flight (depth 2) and request 2 is not admitted (2 in flight).
  EXPECT_TRUE(schedule_step(cfg, 7, 1, rs).empty());
  EXPECT_FALSE(rs[2].admitted);
  rs[0].phase = RequestPhase::kVerify;
  rs[1].prefilled = 16;
  std::vector<ScheduledSegment> s2 = schedule_step(cfg, 7, 2, rs);
  ASSERT_EQ(s2.size(), 2u);
  EXPECT_EQ(s2[0].kind, ForwardKind::kVerify);
  EXPECT_EQ(s2[0].tokens, 8);
  EXPECT_EQ(s2[1].tokens, 8);  // the prompt's last 8 tokens
  rs[0].phase = RequestPhase::kFinished;
  schedule_step(cfg, 7, 3, rs);
  EXPECT_TRUE(rs[2].admitted);  // a slot freed
}

// A smaller serving scenario for the sweeps below: `prompts` requests, one split.
Scenario small_serving(const std::string& base, int prompts, int in_flight,
                       std::vector<std::vector<int>> cuts) {
  Scenario s = committed_scenario(base);
  s.workload.prompts = prompts;
  s.serving.max_in_flight = in_flight;
  s.partitions.mode = "list";
  s.partitions.cuts = std::move(cuts);
  s.expect = nlohmann::json::object();
  return s;
}

TEST(ServingSweep, BitIdenticalAndEveryRequestEqualsItselfAlone) {
  const Scenario s = small_serving("serving", 6, 4, {{5}, {16}});
  Result<SweepResult> r = run_sweep(s, SweepOptions{});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->conformant()) << r->cases.front().message;
  EXPECT_TRUE(r->batch_invariance.checked);
  EXPECT_EQ(r->batch_invariance.requests, 6);
  EXPECT_EQ(r->batch_invariance.identical, 6);
  EXPECT_TRUE(r->expect_failures.empty());
}

// Without requests served alone, a scenario that expects batch invariance fails its
// expect block: not checked is never a pass.
TEST(ServingSweep, BatchInvarianceNotCheckedFailsAnExpectThatAsksForIt) {
  Scenario s = small_serving("serving", 3, 3, {{5}});
  s.expect = nlohmann::json{{"batch_invariant", true}};
  SweepOptions o;
  o.requests_alone = false;
  Result<SweepResult> r = run_sweep(s, o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->conformant());
  EXPECT_FALSE(r->batch_invariance.checked);
  ASSERT_EQ(r->expect_failures.size(), 1u);
  EXPECT_NE(r->expect_failures[0].find("nothing checked it"), std::string::npos)
      << r->expect_failures[0];
}

TEST(ServingChecks, ARequestThatDiffersFromItselfAloneFails) {
  Scenario s = small_serving("serving", 3, 3, {{5}});
  Result<ReferenceRun> run = run_reference(s);
  ASSERT_TRUE(run.is_ok()) << run.status().message();
  std::unique_ptr<WeightSource> source = scenario_weight_source(s);
  Result<BatchInvariance> ok = check_requests_alone(s, *source, *run);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ(ok->identical, 3);
  // One bit of one per-layer tensor of request 1's first forward.
  RunRecord mutated = run->record;
  const Tensor* sched = mutated.find("serving/schedule");
  ASSERT_NE(sched, nullptr);
  int32_t forward = -1;
  for (int64_t i = 0; i < sched->dim(0) && forward < 0; ++i)
    if (sched->data<int32_t>()[i * 6 + 1] == 1) forward = sched->data<int32_t>()[i * 6 + 5];
  bool flipped = false;
  for (RecordEntry& e : mutated.entries()) {
    if (e.path == forward_path(forward) + "layers/9/attn_out") {
      e.tensor = e.tensor.clone();
      e.tensor.data<bf16>()[3].bits ^= 1;
      flipped = true;
    }
  }
  ASSERT_TRUE(flipped);
  ReferenceRun bad = std::move(*run);
  bad.record = mutated;
  Result<BatchInvariance> caught = check_requests_alone(s, *source, bad);
  ASSERT_TRUE(caught.is_ok());
  EXPECT_EQ(caught->identical, 2);
  // Request 1 alone differs from the mutated record, at the flipped tensor.
  ASSERT_EQ(caught->differences.size(), 1u);
  EXPECT_NE(caught->differences[0].find("request 1"), std::string::npos) << caught->differences[0];
  EXPECT_NE(caught->differences[0].find("layers/9/attn_out"), std::string::npos)
      << caught->differences[0];
  SweepResult result;
  result.batch_invariance = *caught;
  EXPECT_FALSE(evaluate_expect(nlohmann::json::object(), result).empty());
}

// On a backend that does not promise batch invariance (cuda, kernels/batch.h) a request
// that differs from itself alone is measured: it fails only a scenario whose expect says
// batch_invariant. A PP=1 run that does not reproduce itself fails on every backend.
TEST(ServingChecks, WithoutBatchInvarianceARequestAloneIsMeasuredNotJudged) {
  SweepResult r;
  BatchInvariance& bi = r.batch_invariance;
  bi.checked = true;
  bi.required = false;
  bi.requests = 3;
  bi.identical = 2;
  bi.not_invariant = {"request 1: forward/7/logits differs from forward/1/logits served alone"};
  EXPECT_TRUE(evaluate_expect(nlohmann::json::object(), r).empty());
  const std::vector<std::string> fails = evaluate_expect({{"batch_invariant", true}}, r);
  ASSERT_EQ(fails.size(), 1u);
  EXPECT_NE(fails[0].find("1 of 3 differ"), std::string::npos) << fails[0];
  EXPECT_NE(fails[0].find("request 1"), std::string::npos) << fails[0];
  bi.differences = {"the batched run with concatenated rows: forward/3/logits differs"};
  EXPECT_FALSE(evaluate_expect(nlohmann::json::object(), r).empty());
  // On the CPU the check requires it.
  const Scenario s = small_serving("serving", 2, 2, {{5}});
  Result<ReferenceRun> run = run_reference(s);
  ASSERT_TRUE(run.is_ok()) << run.status().message();
  std::unique_ptr<WeightSource> source = scenario_weight_source(s);
  Result<BatchInvariance> cpu = check_requests_alone(s, *source, *run);
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().message();
  EXPECT_TRUE(cpu->required);
  EXPECT_TRUE(cpu->not_invariant.empty());
}

// A request goes on from the token it emitted. Where the row count may change a
// prediction (cuda: a replay of a + 1 rows against its verify of gamma + 1), a replay that
// predicts another bonus token must not become the next verify's anchor, or the tokens the
// model consumes part from the tokens emitted. Shown on the CPU with an engine whose
// replays predict other tokens: one that does not roll back its first stage.
TEST(ServingLoop, WithoutBatchInvarianceEveryVerifyStartsFromTheLastEmittedToken) {
  const Scenario s = small_serving("fault-spec-rollback-last-stage-only", 4, 4, {{13}});
  Result<PreparedWorkload> w = prepare_workload(s);
  ASSERT_TRUE(w.is_ok());
  std::unique_ptr<WeightSource> source = scenario_weight_source(s);
  Result<std::unique_ptr<PartitionedEngine>> pe = dspark_engine_at_13(s, *source);
  ASSERT_TRUE(pe.is_ok()) << pe.status().message();
  ServingOptions options;
  options.batch_invariant = false;
  RunRecord rec;
  ServingResult served;
  Result<GenerationSummary> g =
      run_serving_generation(s, **pe, DrafterHost{(*pe)->last_stage_weights(), 1, false}, *source,
                             *w, &rec, &options, &served);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_GT(served.spec.replay_bonus_mismatches, 0) << "no replay predicted another token";
  int checked = 0;
  for (int32_t r = 0; r < 4; ++r) {
    const Tensor* emitted = rec.find("spec/" + std::to_string(r) + "/emitted");
    ASSERT_NE(emitted, nullptr);
    const std::vector<int32_t>& accepted = served.spec.sequences[static_cast<size_t>(r)].accepted;
    size_t k = 0;
    int64_t at = 0;  // the emitted token the next verify starts from
    for (const ScheduleRow& row : served.schedule) {
      if (row.request != r || row.kind != ForwardKind::kVerify) continue;
      ASSERT_LT(k, accepted.size());
      ASSERT_LT(at, emitted->numel());
      const Tensor* ids = rec.find(forward_path(row.forward) + "input_ids");
      ASSERT_NE(ids, nullptr);
      EXPECT_EQ(ids->data<int32_t>()[0], emitted->data<int32_t>()[at])
          << "request " << r << ", verify " << k << " (forward " << row.forward << ")";
      at += accepted[k++] + 1;
      ++checked;
    }
  }
  EXPECT_GT(checked, 8);
}

// The PP=1 schedule of a serving scenario as rows (step, request, kind, first, tokens,
// forward).
std::vector<std::array<int32_t, 6>> schedule_of(const RunRecord& rec) {
  std::vector<std::array<int32_t, 6>> rows;
  const Tensor* t = rec.find("serving/schedule");
  if (t == nullptr) return rows;
  for (int64_t i = 0; i < t->dim(0); ++i) {
    std::array<int32_t, 6> row;
    std::copy_n(t->data<int32_t>() + i * 6, 6, row.begin());
    rows.push_back(row);
  }
  return rows;
}

// The sweeps below judge split points only: no request served alone at PP=1.
SweepOptions split_points_only() {
  SweepOptions o;
  o.requests_alone = false;
  return o;
}

// PP=1 of a serving scenario without its faults, with the weights it ran over, shared by
// the sweeps of every fault at that workload (no fault reaches PP=1: each partition is
// judged against the fixed protocol's PP=1, as the fault sensitivity table does). Keyed by
// the resolved scenario less its name, description, expect and faults.
class SharedPp1 {
 public:
  // PP=1 of `s` without its faults, run the first time it is asked for.
  const ReferenceRun& run_for(const Scenario& s) {
    Entry& e = runs_[key_of(s)];
    if (e.weights == nullptr) {
      Scenario fixed = s;
      fixed.faults.clear();
      e.weights = scenario_weight_source(fixed);
      Result<ReferenceRun> r = run_reference(fixed, *e.weights);
      EXPECT_TRUE(r.is_ok()) << r.status().message();
      if (r.is_ok()) e.run = std::move(r).value();
    }
    return e.run;
  }
  // A sweep of `s` judging split points only, against the shared PP=1.
  SweepOptions options_for(const Scenario& s) {
    const ReferenceRun& run = run_for(s);
    SweepOptions o = split_points_only();
    o.reference = &run;
    o.weights = runs_.at(key_of(s)).weights.get();
    return o;
  }

 private:
  static std::string key_of(const Scenario& s) {
    Scenario fixed = s;
    fixed.faults.clear();
    nlohmann::json key = resolved_scenario_json(fixed);
    for (const char* k : {"name", "description", "expect"}) key.erase(k);
    return key.dump();
  }
  struct Entry {
    std::unique_ptr<WeightSource> weights;
    ReferenceRun run;
  };
  std::map<std::string, Entry> runs_;
};

struct FaultCase {
  const char* id;
  const char* scenario;
};
constexpr FaultCase kServingFaults[] = {
    {"spec.rollback_last_stage_only", "fault-spec-rollback-last-stage-only"},
    {"batch.stale_microbatch_state", "fault-batch-stale-microbatch-state"},
    {"prefill.chunk_token_dropped", "fault-prefill-chunk-token-dropped"},
};

TEST(ServingFaults, FirstDivergenceAtTheRightRequestForwardAndLayer) {
  const int cut = 13;
  SharedPp1 pp1;
  for (const FaultCase& f : kServingFaults) {
    SCOPED_TRACE(f.id);
    const Scenario s = small_serving(f.scenario, 8, 8, {{cut}});
    Result<SweepResult> r = run_sweep(s, pp1.options_for(s));
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    ASSERT_EQ(r->cases.size(), 1u);
    const CaseResult& c = r->cases[0];
    ASSERT_EQ(c.verdict, Verdict::kDiverged) << c.message;
    EXPECT_NE(std::find(c.failed_checks.begin(), c.failed_checks.end(), "tensors"),
              c.failed_checks.end());
    const auto rows = schedule_of(pp1.run_for(s).record);
    ASSERT_FALSE(rows.empty());
    auto row_of = [&](int32_t forward) {
      for (const auto& row : rows)
        if (row[5] == forward) return row;
      return std::array<int32_t, 6>{-1, -1, -1, -1, -1, -1};
    };
    const auto at = row_of(c.first_divergence_forward);
    EXPECT_EQ(c.first_divergence_request, at[1]) << c.message;
    if (std::string(f.id) == "spec.rollback_last_stage_only") {
      // The first replay (a partly rejected verify's next forward), at the first stage's
      // first layer.
      std::array<int32_t, 6> first_replay{};
      for (const auto& row : rows)
        if (row[2] == static_cast<int32_t>(ForwardKind::kReplay)) {
          first_replay = row;
          break;
        }
      EXPECT_EQ(c.first_divergence_forward, first_replay[5]) << c.message;
      EXPECT_EQ(c.first_divergence_request, first_replay[1]);
      EXPECT_EQ(c.first_divergence_layer, 0) << c.message;
    } else if (std::string(f.id) == "prefill.chunk_token_dropped") {
      // The first continued prefill chunk, at the second stage's first MLA layer.
      std::array<int32_t, 6> first_chunk{};
      for (const auto& row : rows)
        if (row[2] == static_cast<int32_t>(ForwardKind::kPrefill) && row[3] > 0) {
          first_chunk = row;
          break;
        }
      EXPECT_EQ(c.first_divergence_forward, first_chunk[5]) << c.message;
      EXPECT_EQ(c.first_divergence_layer, 15) << c.message;
    } else {
      // The second stage reads the state of the micro-batch pp steps earlier: nothing
      // before the first step whose membership changed; at the second stage's layers.
      std::vector<std::vector<int32_t>> members;
      for (const auto& row : rows) {
        if (members.empty() || row[0] != rows[&row - rows.data() - 1][0]) members.emplace_back();
        members.back().push_back(row[1]);
      }
      size_t changed = members.size();
      for (size_t k = 2; k < members.size() && changed == members.size(); ++k)
        for (size_t i = 0; i < std::min(members[k].size(), members[k - 2].size()); ++i)
          if (members[k][i] != members[k - 2][i]) changed = k;
      ASSERT_LT(changed, members.size());
      int32_t first_step_changed = -1;
      size_t seen = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (i == 0 || rows[i][0] != rows[i - 1][0]) ++seen;
        if (seen == changed + 1) {
          first_step_changed = rows[i][0];
          break;
        }
      }
      EXPECT_GE(at[0], first_step_changed) << c.message;
      EXPECT_GE(c.first_divergence_layer, cut) << c.message;
    }
  }
}

// SPEC 6: fault x (single request, concurrency 8) x caught, at split 13. A single request
// that never drafts (greedy decoding) never rolls back, so the missing rollback shows only
// once a draft is rejected (speculative, departure rate 0.1), even on one request.
TEST(ServingFaults, SensitivityTable) {
  std::string table =
      "| fault | single request, greedy | single request, speculative | concurrency 8, "
      "speculative |\n|---|---|---|---|\n";
  SharedPp1 pp1;
  for (const FaultCase& f : kServingFaults) {
    auto caught = [&](int prompts, int in_flight, bool speculative) {
      Scenario s = small_serving(f.scenario, prompts, in_flight, {{13}});
      if (!speculative) s.speculative.method = "none";
      Result<SweepResult> r = run_sweep(s, pp1.options_for(s));
      EXPECT_TRUE(r.is_ok()) << r.status().message();
      return r.is_ok() && !r->conformant();
    };
    const bool greedy = caught(1, 1, false);
    const bool single = caught(1, 1, true);
    const bool concurrent = caught(8, 8, true);
    auto word = [](bool c) { return c ? "caught" : "invisible"; };
    table +=
        fmt::format("| {} | {} | {} | {} |\n", f.id, word(greedy), word(single), word(concurrent));
    EXPECT_FALSE(greedy) << f.id;
    EXPECT_TRUE(concurrent) << f.id;
    EXPECT_EQ(single, std::string(f.id) == "spec.rollback_last_stage_only") << f.id;
  }
  std::printf("%s", table.c_str());
}

}  // namespace
}  // namespace splitcheck

namespace splitcheck {
namespace {

// A rollback of a request that took no snapshot (what a stage does when it indexes its
// state through another request's slot, batch.stale_microbatch_state) leaves that
// request's caches whole, one per layer of the range: the stage computes from the wrong
// state and diverges, never indexing past its caches (found as a heap corruption by the
// fault sensitivity sweep at seed 1234).
TEST(RequestStateTableTest, ARollbackWithoutASnapshotKeepsEveryLayerCache) {
  const ModelConfig c = committed_scenario("serving").model;
  RequestStateTable table(c, 4, 13);
  table.at(3).positions = 5;
  table.apply(StateUpdate{3, StateUpdate::Kind::kRollback});
  EXPECT_EQ(table.at(3).caches.size(), 9u);
  EXPECT_EQ(table.at(3).positions, 5);
  // With a snapshot, a rollback returns to it.
  table.snapshot(3);
  table.at(3).positions = 12;
  table.apply(StateUpdate{3, StateUpdate::Kind::kRollback});
  EXPECT_EQ(table.at(3).caches.size(), 9u);
  EXPECT_EQ(table.at(3).positions, 5);
}

// A rollback returns every KDA state, bit for bit, and every MLA latent count to the
// snapshot, however the layers' states changed after it (written in place through the
// layer caches, as the KDA kernels write them), and again on a second rollback; a KDA
// state not allocated at the snapshot returns to zeros or to unallocated (its next call
// then starts from zeros).
TEST(RequestStateTableTest, ARollbackReturnsEveryStateToTheSnapshot) {
  const ModelConfig c = committed_scenario("serving").model;
  const int begin = 2, end = 9;  // KDA layers 2, 4, 5, 6, 8; MLA layers 3, 7
  const int64_t n = int64_t{c.num_attention_heads} * c.head_dim * c.head_dim;
  auto fill = [&](Tensor& t, float base) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = base + static_cast<float>(i % 97);
  };
  for (int mode = 0; mode < 3; ++mode) {
    // Which KDA states are allocated at the snapshot: all, all but layer 8's, none.
    auto allocated = [&](int l) { return mode == 0 || (mode == 1 && l != 8); };
    SCOPED_TRACE(fmt::format("mode {}", mode));
    RequestStateTable table(c, begin, end);
    RequestState& st = table.at(1);
    std::vector<Tensor> before(st.caches.size());
    for (int l = begin; l < end; ++l) {
      LayerCache& lc = st.caches[static_cast<size_t>(l - begin)];
      if (c.is_mla_layer(l)) {
        reserve_latents(lc.mla_latent, 64, c.kv_lora_rank, Device::kCpu);
        lc.mla_latent.positions = l;
      } else if (allocated(l)) {
        lc.kda_state = zero_kda_state(c, Device::kCpu);
        fill(lc.kda_state, static_cast<float>(l));
        before[static_cast<size_t>(l - begin)] = lc.kda_state.clone();
      }
    }
    st.positions = 6;
    table.snapshot(1);
    for (int round = 0; round < 2; ++round) {
      for (int l = begin; l < end; ++l) {
        LayerCache& lc = st.caches[static_cast<size_t>(l - begin)];
        if (c.is_mla_layer(l)) {
          lc.mla_latent.positions = 50 + round;
        } else {
          if (lc.kda_state.shape().empty()) lc.kda_state = zero_kda_state(c, Device::kCpu);
          fill(lc.kda_state, 1000.0f * static_cast<float>(round + 1));
        }
      }
      st.positions = 40;
      table.apply(StateUpdate{1, StateUpdate::Kind::kRollback});
      EXPECT_EQ(st.positions, 6);
      for (int l = begin; l < end; ++l) {
        const LayerCache& lc = st.caches[static_cast<size_t>(l - begin)];
        SCOPED_TRACE(fmt::format("round {}, layer {}", round, l));
        if (c.is_mla_layer(l)) {
          EXPECT_EQ(lc.mla_latent.positions, l);
        } else if (allocated(l)) {
          ASSERT_EQ(lc.kda_state.numel(), n);
          EXPECT_TRUE(lc.kda_state.bit_equal(before[static_cast<size_t>(l - begin)]));
        } else {
          // Unallocated at the snapshot: the layer's next call starts from zeros.
          EXPECT_TRUE(lc.kda_state.shape().empty() ||
                      lc.kda_state.bit_equal(zero_kda_state(c, Device::kCpu)));
        }
      }
    }
  }
}

Result<Scenario> serving_with(const nlohmann::json& serving) {
  nlohmann::json j = {{"workload", {{"prompts", 2}}},
                      {"speculative", {{"method", "dspark"}, {"gamma", 7}}},
                      {"serving", serving}};
  return parse_scenario(j, "x.json", ".");
}

TEST(ServingScenario, RefusesWhatCouldNeverBeServed) {
  ASSERT_TRUE(serving_with({{"token_budget", 8}}).is_ok());
  Result<Scenario> small = serving_with({{"token_budget", 7}});
  ASSERT_FALSE(small.is_ok());
  EXPECT_NE(small.status().message().find("/serving/token_budget"), std::string::npos)
      << small.status().message();
  Result<Scenario> arrivals = serving_with({{"arrival_steps", {0}}});
  ASSERT_FALSE(arrivals.is_ok());
  EXPECT_NE(arrivals.status().message().find("/serving/arrival_steps"), std::string::npos);
  EXPECT_FALSE(serving_with({{"arrival_steps", {3, 1}}}).is_ok());
  EXPECT_FALSE(serving_with({{"arrival_steps", {0, 1}}, {"arrival_every", 2}}).is_ok());
  EXPECT_FALSE(serving_with({{"depth", 5}}).is_ok());
  EXPECT_FALSE(serving_with({{"max_in_flight", 0}}).is_ok());
  EXPECT_FALSE(serving_with({{"chunk_size", 4}}).is_ok());
  // Serving runs on either backend over every transport: no combination is refused for
  // serving (naming /serving); one is refused only where this build or machine cannot
  // provide its backend or transport (naming /backend or /transport; outside mpirun, mpi
  // and nccl are refused for their launch).
  for (const std::string backend : {"cpu", "cuda"}) {
    for (const std::string transport : {"inproc", "mpi", "nccl"}) {
      Result<Scenario> served = serving_with({{"arrival_every", 1}});
      ASSERT_TRUE(served.is_ok());
      served->backend = backend;
      served->transport = transport;
      const Status st = check_capabilities(*served, "s.json");
      if (st.is_ok()) continue;
      EXPECT_EQ(st.code(), StatusCode::kInvalidInput);
      EXPECT_EQ(st.message().find("/serving"), std::string::npos) << st.message();
      const bool names_what_is_missing = st.message().find("/backend") != std::string::npos ||
                                         st.message().find("/transport") != std::string::npos;
      EXPECT_TRUE(names_what_is_missing) << backend << "/" << transport << ": " << st.message();
      // The cpu backend over inproc always runs.
      EXPECT_FALSE(backend == "cpu" && transport == "inproc") << st.message();
    }
  }
  // Only a serving scenario names the block in its resolved form (the identity of every
  // other scenario, and the default golden, stay as they were).
  Result<Scenario> plain = parse_scenario(nlohmann::json::object(), "y.json", ".");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_FALSE(resolved_scenario_json(*plain).contains("serving"));
  Result<Scenario> served = serving_with({{"arrival_every", 2}});
  ASSERT_TRUE(served.is_ok());
  const nlohmann::json resolved = resolved_scenario_json(*served);
  ASSERT_TRUE(resolved.contains("serving"));
  Result<Scenario> again = parse_scenario(resolved, "z.json", ".");
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  EXPECT_EQ(resolved_scenario_json(*again), resolved);
}

}  // namespace
}  // namespace splitcheck
