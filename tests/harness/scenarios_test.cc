// Every committed scenario is a regression test: the sweep must conclude what its
// `expect` block says (the must-pass list of the project). The sweep runs with its
// default stage-0 prefix reuse, then again in verify mode (everything computed, and
// every reused prefix checked equal to what the first stage computes): the two reports
// must say the same of every split point, so reuse catches every fault that computing
// everything catches.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harness/verdict/sweep.h"
#include "reports/report.h"

namespace splitcheck {
namespace {

std::vector<std::string> committed_scenarios() {
  std::vector<std::string> names;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios")) {
    if (e.path().extension() == ".json" && !e.path().string().ends_with(".schema.json"))
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

  SweepOptions verify;
  verify.reuse = ReuseMode::kVerify;
  Result<SweepResult> v = run_sweep(*s, verify);
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  EXPECT_EQ(v->reuse.calls.verified, r->reuse.calls.hits);
  EXPECT_EQ(v->reuse.calls.misses, r->reuse.calls.misses);
  SweepOptions off;
  off.reuse = ReuseMode::kOff;
  Result<SweepResult> o = run_sweep(*s, off);
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
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

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
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace splitcheck
