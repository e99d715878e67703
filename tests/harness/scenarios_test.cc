// Every committed scenario is a regression test: the sweep must conclude what its
// `expect` block says (the must-pass list of the project). A second test sweeps it with
// layer reuse on, then in verify mode (everything computed, and every reused layer call
// checked equal to what the stage computes) and with reuse off: the three reports must
// say the same of every split point, so reuse catches every fault that computing
// everything catches. A serving scenario runs the three modes on fewer requests and split
// points (modes_scenario below), with the same features: micro-batches, chunked
// prefill, speculation with rollbacks, each asserted present.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "harness/engine/generation.h"
#include "harness/engine/run.h"
#include "harness/verdict/sweep.h"
#include "reference/engine.h"
#include "reports/report.h"
#include "tests/scenario_fixture.h"

namespace splitcheck {
namespace {

std::vector<std::string> committed_scenarios() {
  std::vector<std::string> names;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios")) {
    // external-*.json name an engine outside the project: tests/runner/ sweeps them.
    if (e.path().extension() == ".json" && !e.path().string().ends_with(".schema.json") &&
        !e.path().filename().string().starts_with("external-"))
      names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class CommittedScenario : public ::testing::TestWithParam<std::string> {};

TEST_P(CommittedScenario, SweepConcludesWhatExpectSays) {
  const std::string path =
      std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/" + GetParam() + ".json";
  Result<Scenario> s = load_scenario(path);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  ASSERT_FALSE(s->expect.empty()) << path << " has no expect block";
  Result<SweepResult> r = run_sweep(*s, SweepOptions{});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  for (const std::string& f : r->expect_failures) ADD_FAILURE() << GetParam() << ": " << f;
  for (const CaseResult& c : r->cases) {
    EXPECT_NE(c.verdict, Verdict::kError) << c.key << ": " << c.message;
    // Every failing case names a registered check.
    if (c.verdict == Verdict::kDiverged) {
      EXPECT_FALSE(c.failed_checks.empty()) << c.key;
    }
  }
  EXPECT_EQ(r->reuse.mode, ReuseMode::kOn) << r->reuse.unused_because;
  // Every stage of a partition that ran reused PP=1's layers where its inputs were PP=1's.
  if (r->count(Verdict::kConfigRejected) < static_cast<int>(r->cases.size())) {
    EXPECT_GT(r->reuse.calls.hits, 0);
  }
  if (s->faults.empty()) {
    EXPECT_TRUE(r->conformant()) << "false alarm without faults in " << GetParam();
  } else {
    EXPECT_FALSE(r->conformant()) << "fault not caught in " << GetParam();
  }
}

// The scenario the three reuse modes sweep: the committed one, except that a serving
// scenario serves its first 8 requests (of 16) at 3 split points (stage 1 starting in the
// first block, at a block boundary, and mid-model), which keeps micro-batches, chunked
// prefill and rollbacks (asserted below; ServingFaults shows each serving fault within 8)
// at less cost.
Scenario modes_scenario(const Scenario& committed) {
  Scenario s = committed;
  if (!s.serving.enabled) return s;
  s.workload.prompts = std::min(s.workload.prompts, 8);
  if (s.partitions.mode != "list" || s.partitions.cuts.size() > 3) {
    s.partitions.mode = "list";
    s.partitions.cuts = {{1}, {s.model.attn_res_block_size}, {s.model.num_hidden_layers / 2 + 1}};
  }
  s.expect = nlohmann::json::object();
  return s;
}

// Verify and off compute every layer of every stage, so they run on at most kModesCases
// split points, chosen from the reuse-on sweep of every split point: the first and the
// last case of every distinct outcome (verdict and failed checks), so every way the
// scenario passes or fails is compared in all three modes, then spread ones up to the
// limit. Empty when the sweep has no more cases than that (it is compared whole).
constexpr size_t kModesCases = 6;

std::vector<std::vector<int>> modes_cuts(const SweepResult& on) {
  if (on.cases.size() <= kModesCases) return {};
  std::vector<size_t> picked;
  auto pick = [&](size_t i) {
    if (picked.size() < kModesCases && std::find(picked.begin(), picked.end(), i) == picked.end())
      picked.push_back(i);
  };
  std::map<std::string, std::pair<size_t, size_t>> outcomes;  // first and last case
  for (size_t i = 0; i < on.cases.size(); ++i) {
    std::string outcome = std::string(verdict_name(on.cases[i].verdict));
    for (const std::string& c : on.cases[i].failed_checks) outcome += "," + c;
    auto [it, fresh] = outcomes.try_emplace(outcome, i, i);
    it->second.second = i;
  }
  for (const auto& [outcome, ends] : outcomes) pick(ends.first);
  for (const auto& [outcome, ends] : outcomes) pick(ends.second);
  const size_t n = on.cases.size();
  for (size_t k = 0; picked.size() < kModesCases && k < kModesCases; ++k)
    pick(k * (n - 1) / (kModesCases - 1));
  for (size_t i = 0; picked.size() < kModesCases && i < n; ++i) pick(i);
  std::sort(picked.begin(), picked.end());
  std::vector<std::vector<int>> cuts;
  for (size_t i : picked) cuts.push_back(on.cases[i].cuts);
  return cuts;
}

TEST_P(CommittedScenario, ReuseOnVerifyAndOffSayTheSame) {
  const std::string path =
      std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/" + GetParam() + ".json";
  Result<Scenario> committed = load_scenario(path);
  ASSERT_TRUE(committed.is_ok()) << committed.status().message();
  const Scenario s = modes_scenario(*committed);
  if (s.serving.enabled) {
    // The smaller schedule keeps what serving is about: two micro-batches in flight, a
    // prompt prefilled in more than one chunk, and a rejected draft (a rollback).
    EXPECT_GE(s.serving.depth, 2);
    Result<ReferenceRun> pp1 = run_reference(s);
    ASSERT_TRUE(pp1.is_ok()) << pp1.status().message();
    const Tensor* sched = pp1->record.find("serving/schedule");
    ASSERT_NE(sched, nullptr);
    std::map<int32_t, int> prefill_segments;
    for (int64_t i = 0; i < sched->dim(0); ++i) {
      const int32_t* row = sched->data<int32_t>() + i * 6;  // step, request, kind, ...
      if (row[2] == static_cast<int32_t>(ForwardKind::kPrefill)) ++prefill_segments[row[1]];
    }
    EXPECT_TRUE(std::any_of(prefill_segments.begin(), prefill_segments.end(), [](const auto& p) {
      return p.second >= 2;
    })) << "no chunked prefill";
    const AcceptanceFigures a = acceptance_figures(pp1->summary);
    const auto& h = a.accepted_histogram;
    ASSERT_FALSE(h.empty());
    EXPECT_GT(std::accumulate(h.begin(), h.end() - 1, int64_t{0}), 0) << "no rejected draft";
  }
  // Batch invariance does not depend on reuse (PP=1 only): SweepConcludesWhatExpectSays
  // checks it.
  SweepOptions on;
  on.requests_alone = false;
  Result<SweepResult> whole = run_sweep(s, on);
  ASSERT_TRUE(whole.is_ok()) << whole.status().message();
  Scenario few = s;
  Result<SweepResult> r = whole;
  if (std::vector<std::vector<int>> cuts = modes_cuts(*whole); !cuts.empty()) {
    few.partitions.mode = "list";
    few.partitions.cuts = cuts;
    r = run_sweep(few, on);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    ASSERT_EQ(r->cases.size(), cuts.size());
  }
  if (!s.faults.empty() && r->count(Verdict::kConfigRejected) == 0) {
    EXPECT_FALSE(r->conformant()) << "fault not caught in " << GetParam();
  }

  SweepOptions verify = on;
  verify.reuse = ReuseMode::kVerify;
  Result<SweepResult> v = run_sweep(few, verify);
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  EXPECT_EQ(v->reuse.calls.verified, r->reuse.calls.hits);
  EXPECT_EQ(v->reuse.calls.misses, r->reuse.calls.misses);
  SweepOptions off = on;
  off.reuse = ReuseMode::kOff;
  Result<SweepResult> o = run_sweep(few, off);
  ASSERT_TRUE(o.is_ok()) << o.status().message();
  EXPECT_EQ(o->reuse.calls.hits + o->reuse.calls.verified + o->reuse.calls.misses, 0);
  // Everything but what reuse itself and the clock change.
  auto deterministic = [](nlohmann::json j) {
    j.erase("timing");
    j.erase("reuse");
    for (auto& c : j["cases"]) {
      c.erase("seconds");
      c.erase("reuse");
    }
    return j;
  };
  const nlohmann::json with_reuse = deterministic(sweep_report(*r, ReportContext{}));
  const nlohmann::json computed = deterministic(sweep_report(*v, ReportContext{}));
  ASSERT_EQ(with_reuse["cases"].size(), computed["cases"].size());
  for (size_t i = 0; i < computed["cases"].size(); ++i)
    EXPECT_EQ(with_reuse["cases"][i], computed["cases"][i]) << GetParam() << " case " << i;
  EXPECT_EQ(with_reuse, computed);
  EXPECT_EQ(deterministic(sweep_report(*o, ReportContext{})), computed);
}

INSTANTIATE_TEST_SUITE_P(Scenarios, CommittedScenario, ::testing::ValuesIn(committed_scenarios()),
                         ParamTestName());

// scenarios/gpu/: scenarios that only run on a GPU (k3-shape: 79.5 GiB of weights). Each
// must parse as written (its backend cuda) and carry an expect block; its sweep is run by
// scripts/gpu-check.sh (inproc) or scripts/nccl-check.sh (nccl, under mpirun), minutes
// long, so here it is skipped, saying why: where no GPU is, the capability that is missing.
std::vector<std::string> gpu_scenarios() {
  std::vector<std::string> names;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/gpu")) {
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class CommittedGpuScenario : public ::testing::TestWithParam<std::string> {};

TEST_P(CommittedGpuScenario, ParsesAndIsSweptByTheGpuScripts) {
  const std::string dir = std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/gpu";
  const std::string path = dir + "/" + GetParam() + ".json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const nlohmann::json j = nlohmann::json::parse(in);
  Result<Scenario> s = parse_scenario(j, path, dir);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s->backend, "cuda") << path << ": scenarios/gpu/ holds GPU scenarios";
  EXPECT_FALSE(s->expect.empty()) << path << " has no expect block";
  EXPECT_EQ(s->dump_level, DumpLevel::kSummary) << path << ": large models dump summaries";
  ASSERT_FALSE(s->workload.file.empty());
  EXPECT_TRUE(std::filesystem::exists(s->workload.file)) << s->workload.file;
  const Status here = check_capabilities(*s, path);
  if (!here.is_ok()) GTEST_SKIP() << "not swept on this machine: " << here.message();
  GTEST_SKIP() << GetParam() << " is swept by scripts/"
               << (s->transport == "nccl" ? "nccl-check.sh (K3_SHAPE=1)" : "gpu-check.sh")
               << " (minutes on an H200), not by the unit tests";
}

INSTANTIATE_TEST_SUITE_P(Gpu, CommittedGpuScenario, ::testing::ValuesIn(gpu_scenarios()),
                         ParamTestName());

}  // namespace
}  // namespace splitcheck
