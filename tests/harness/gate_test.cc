// The gate fails closed (DESIGN.md "Reliability"): "pass" needs evidence. An unmet
// `expect` exits 1 and every report form says why (merge agrees); a sweep that compares
// nothing, a golden verify with no golden, a backend or transport this build cannot
// provide and a malformed `expect` exit 2; a skipped case is not conformant; `checks`
// selects what is evaluated; every dump level sweeps clean; an exception in a stage
// thread or a sweep worker becomes an error verdict, never std::terminate.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "harness/reports/merge.h"
#include "harness/reports/report.h"
#include "harness/scenario/capabilities.h"
#include "harness/scenario/checks.h"
#include "harness/sweep/sweep.h"
#include "tests/cli_fixture.h"
#include "tests/scenario_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::expect_one_line_refusal;
using cli_test::file_text;
using cli_test::quote;
using cli_test::write_text;
using json = nlohmann::json;

const fs::path kScenarios = fs::path(SPLITCHECK_SOURCE_DIR) / "scenarios";

// A two-layer k3-tiny scenario (one split point: "every-layer", each layer its own stage)
// with one short prompt.
json small_json() {
  return {{"model", {{"preset", "k3-tiny"}, {"overrides", {{"num_hidden_layers", 2}}}}},
          {"workload", {{"prompts", 1}, {"max_new_tokens", 2}, {"max_prompt_tokens", 8}}},
          {"partitions", {{"pp", 2}}}};
}

class GateTest : public cli_test::CliFixture {
 protected:
  GateTest() : CliFixture("splitcheck-gate-test-") {}
  std::string scenario_file(const std::string& name, const json& j) const {
    write_text(path(name), j.dump(2));
    return quote(path(name).string());
  }
};

TEST_F(GateTest, UnmetExpectExitsOneAndEveryReportFormSaysWhy) {
  json j = small_json();
  j["expect"] = {{"verdict", "conformant"}, {"identical_splits", 5}};  // there is one
  const std::string report = path("report").string();
  const CliResult r = cli("sweep " + scenario_file("s.json", j) + " --report " + quote(report));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("1 pass, 0 diverged"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("expect: NOT MET: expected 5 identical split points, got 1"),
            std::string::npos)
      << r.out;
  const json rep = json::parse(file_text(path("report") / "report.json"));
  EXPECT_EQ(rep["exit_code"], 1);
  EXPECT_EQ(rep["expect"]["met"], false);
  const std::string junit = file_text(path("report") / "junit.xml");
  EXPECT_NE(junit.find("name=\"expect\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("<failure type=\"expect-not-met\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("expected 5 identical split points, got 1"), std::string::npos) << junit;
  EXPECT_NE(junit.find("failures=\"1\""), std::string::npos) << junit;
  const std::string md = file_text(path("report") / "summary.md");
  EXPECT_NE(md.find("EXPECT IS NOT MET"), std::string::npos) << md;
  EXPECT_NE(md.find("expected 5 identical split points, got 1"), std::string::npos) << md;
  EXPECT_NE(md.find("exit code 1"), std::string::npos) << md;
  const std::string html = file_text(path("report") / "report.html");
  EXPECT_NE(html.find("data-exit-code=\"1\""), std::string::npos);
  EXPECT_NE(html.find("FAILED"), std::string::npos);
  EXPECT_NE(html.find("expected 5 identical split points, got 1"), std::string::npos);

  // merge recomputes the exit code from the joined cases and `expect`: the same.
  const CliResult m = cli("merge " + quote(report + "/report.json") + " --report " +
                          quote(path("merged").string()));
  EXPECT_EQ(m.code, 1) << m.out << m.err;
  const json merged = json::parse(file_text(path("merged") / "report.json"));
  EXPECT_EQ(merged["exit_code"], 1);
  EXPECT_EQ(merged["expect"]["met"], false);

  // Met, the same sweep passes.
  j["expect"]["identical_splits"] = 1;
  EXPECT_EQ(cli("sweep " + scenario_file("met.json", j)).code, 0);
}

TEST_F(GateTest, MalformedExpectExitsTwoNamingThePointer) {
  json unknown = small_json();
  unknown["expect"] = {{"verdict", "divergent"}, {"caught-by", "dispatch"}};
  expect_one_line_refusal(cli("sweep " + scenario_file("unknown.json", unknown)),
                          {"/expect/caught-by", "unknown key"});
  json typed = small_json();
  typed["expect"] = {{"identical_splits", "1"}};
  expect_one_line_refusal(cli("sweep " + scenario_file("typed.json", typed)),
                          {"/expect/identical_splits", "expected integer, got string"});
  json check = small_json();
  check["checks"] = {"tensors", "logits"};
  check["expect"] = {{"caught_by", "dispatch"}};
  expect_one_line_refusal(cli("sweep " + scenario_file("check.json", check)),
                          {"/expect/caught_by", "not among /checks"});
  // A fault whose catching check does not run can never be caught.
  json fault = small_json();
  fault["faults"] = {"handoff.no_zero_delta"};
  fault["checks"] = {"tensors", "logits"};
  expect_one_line_refusal(cli("sweep " + scenario_file("fault.json", fault)),
                          {"/faults/0", "dispatch", "not among /checks"});
}

TEST_F(GateTest, NothingComparedExitsTwo) {
  const std::string s = scenario_file("s.json", small_json());
  const CliResult filtered = cli("sweep " + s + " --filter split-9");
  expect_one_line_refusal(filtered, {"--filter \"split-9\" matches none", "nothing to compare"});
  EXPECT_EQ(filtered.out.find("0 of 0"), std::string::npos);
  expect_one_line_refusal(cli("sweep " + s + " --shard 1/2"),
                          {"shard 1/2 holds none", "nothing to compare"});
  // Two layers in two stages: the one partition is keyed "every-layer".
  EXPECT_EQ(cli("sweep " + s + " --filter every-layer --shard 0/2").code, 0);
}

// `expect` speaks of the whole sweep: a --filter run neither meets nor misses it, and says so
// on the console and in every report form, instead of skipping it silently.
TEST_F(GateTest, AFilteredRunSaysItsExpectWasNotEvaluated) {
  json j = small_json();
  j["model"]["overrides"]["num_hidden_layers"] = 3;
  j["expect"] = {{"verdict", "conformant"}, {"identical_splits", 2}};
  const std::string s = scenario_file("s.json", j);
  const CliResult r = cli("sweep " + s + " --filter split-1 --report " + quote(path("rep").string()));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("expect: not evaluated: the run is partial (--filter \"split-1\": 1 split "
                       "points of the scenario's)"),
            std::string::npos)
      << r.out;
  const json rep = json::parse(file_text(path("rep") / "report.json"));
  EXPECT_NE(rep["expect"].value("not_evaluated", "").find("partial"), std::string::npos)
      << rep["expect"].dump();
  for (const char* form : {"summary.md", "report.html"})
    EXPECT_NE(file_text(path("rep") / form).find("not evaluated"), std::string::npos) << form;
  // The whole sweep evaluates it, and says nothing of the kind.
  const CliResult whole = cli("sweep " + s);
  EXPECT_EQ(whole.code, 0) << whole.out << whole.err;
  EXPECT_EQ(whole.out.find("not evaluated"), std::string::npos) << whole.out;
  // bisect takes --jobs as sweep does.
  EXPECT_EQ(cli("bisect " + s + " --jobs 2 --out " + quote(path("repro.json").string())).code, 0);
}

TEST_F(GateTest, GoldenVerifyOfAnEmptyManifestExitsTwo) {
  fs::create_directories(path("golden"));
  write_text(path("golden") / "MANIFEST.json", R"({"goldens": []})");
  expect_one_line_refusal(cli("golden --dir " + quote(path("golden").string()) + " verify"),
                          {"MANIFEST.json", "lists no golden"});
}

TEST_F(GateTest, BackendOrTransportThisBuildCannotProvideExitsTwo) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"backend", "cuda"}, {"transport", "mpi"}, {"transport", "nccl"}}) {
    SCOPED_TRACE(value);
    // Only what this build and machine cannot provide is refused (a GPU machine runs cuda).
    if (find_capability(key, value)->unavailable().empty()) continue;
    json j = small_json();
    j[key] = value;
    const std::string s = scenario_file(value + ".json", j);
    const CliResult run = cli("run " + s + " --out " + quote(path(value + ".h5").string()));
    expect_one_line_refusal(run, {"/" + key, "\"" + value + "\" cannot run here", "provides"});
    EXPECT_FALSE(fs::exists(path(value + ".h5")));
    expect_one_line_refusal(cli("sweep " + s), {"/" + key, value});
    // The file format knows the name: only running it is refused.
    EXPECT_TRUE(parse_scenario(j, "x.json", ".").is_ok());
  }
}

Scenario load(const std::string& name) {
  Result<Scenario> s = load_scenario((kScenarios / (name + ".json")).string());
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return *s;
}

TEST(GateVerdictTest, ASkippedCaseIsNotConformantAnywhere) {
  SweepResult r;
  r.scenario = json::object();
  EXPECT_FALSE(r.conformant()) << "no case at all";
  r.cases.resize(2);
  r.cases[0].verdict = Verdict::kPass;
  r.cases[1].verdict = Verdict::kSkipped;
  for (CaseResult& c : r.cases) c.datasets_compared = 1;  // passes with evidence (not no-data)
  EXPECT_FALSE(r.conformant());
  EXPECT_EQ(r.exit_code(), 1);
  const json rep = sweep_report(r, ReportContext{});
  EXPECT_EQ(rep["verdict"], "divergent");
  EXPECT_EQ(rep["exit_code"], 1);
  r.cases[1].verdict = Verdict::kPass;
  EXPECT_TRUE(r.conformant());
  EXPECT_EQ(r.exit_code(), 0);

  // merge: a shard report whose case never ran.
  Scenario s = load("default");
  s.partitions.mode = "list";
  s.partitions.cuts = {{16}};
  s.expect = json::object();
  Result<SweepResult> swept = run_sweep(s, SweepOptions{});
  ASSERT_TRUE(swept.is_ok()) << swept.status().message();
  json shard = sweep_report(*swept, ReportContext{"splitcheck sweep"});
  ASSERT_EQ(shard["exit_code"], 0);
  shard["cases"][0]["verdict"] = "skipped";
  Result<json> merged = merge_reports({shard}, {"shard.json"}, "out");
  ASSERT_TRUE(merged.is_ok()) << merged.status().message();
  EXPECT_EQ((*merged)["verdict"], "divergent");
  EXPECT_EQ((*merged)["exit_code"], 1);
}

TEST(GateVerdictTest, OnlyTheSelectedChecksRunAndTheReportListsThem) {
  // pd.producer_embedding is caught by the memory check alone.
  Scenario s = load("fault-pd-producer-embedding");
  s.partitions.mode = "list";
  s.partitions.cuts = {{16}};
  s.expect = json::object();
  Result<SweepResult> all = run_sweep(s, SweepOptions{});
  ASSERT_TRUE(all.is_ok()) << all.status().message();
  ASSERT_EQ(all->cases.size(), 1u);
  EXPECT_EQ(all->cases[0].verdict, Verdict::kDiverged);
  EXPECT_EQ(all->cases[0].failed_checks, std::vector<std::string>{"memory"});
  EXPECT_EQ(all->checks.size(), check_registry().size());

  // Without it (built in code: the loader refuses such a file), nothing fails.
  s.checks = {"acceptance", "tensors", "embedding", "logits", "taps", "tokens", "dispatch"};
  Result<SweepResult> some = run_sweep(s, SweepOptions{});
  ASSERT_TRUE(some.is_ok()) << some.status().message();
  EXPECT_EQ(some->cases[0].verdict, Verdict::kPass) << some->cases[0].message;
  EXPECT_TRUE(some->cases[0].failed_checks.empty());
  const std::vector<std::string> registry_order = {"tensors",  "taps",      "logits",    "tokens",
                                                   "dispatch", "embedding", "acceptance"};
  EXPECT_EQ(some->checks, registry_order);
  EXPECT_EQ(sweep_report(*some, ReportContext{})["checks"], json(registry_order));
  // Fewer datasets compared: the memory check compares none, but the tensors check does.
  s.checks = {"logits"};
  Result<SweepResult> logits = run_sweep(s, SweepOptions{});
  ASSERT_TRUE(logits.is_ok());
  EXPECT_GT(all->cases[0].datasets_compared, logits->cases[0].datasets_compared);
  EXPECT_GT(logits->cases[0].datasets_compared, 0);
}

// One split point of `s` that its committed `expect` does not list as identical, from the
// middle of the enumeration.
std::vector<int> one_telling_split(const Scenario& s) {
  Result<std::vector<Partition>> all =
      enumerate_partitions(s.partitions, s.model.num_hidden_layers, FaultSet{s.faults});
  EXPECT_TRUE(all.is_ok());
  const std::vector<std::string> identical =
      s.expect.value("identical", std::vector<std::string>{});
  for (size_t k = 0; k < all->size(); ++k) {
    const Partition& p = (*all)[(all->size() / 2 + k) % all->size()];
    if (std::find(identical.begin(), identical.end(), p.key()) == identical.end()) return p.cuts();
  }
  return (*all)[0].cuts();
}

class EveryDumpLevel : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryDumpLevel, SweepsCleanWithoutFaultsAndCatchesEachFault) {
  const Scenario committed = load(GetParam());
  for (DumpLevel level : {DumpLevel::kSummary, DumpLevel::kLayer, DumpLevel::kFull}) {
    SCOPED_TRACE(dump_level_name(level));
    Scenario s = committed;
    s.dump_level = level;
    // One telling split point; a scenario of one partition (a balanced plan, whose
    // planner a fault may break) keeps its own.
    if (enumerate_partitions(committed.partitions, committed.model.num_hidden_layers)->size() > 1) {
      s.partitions.mode = "list";
      s.partitions.cuts = {one_telling_split(committed)};
    }
    s.expect = json::object();
    // A serving scenario serves its first 8 requests (of 16): still micro-batched, chunked
    // and speculative, and each serving fault shows within them (ServingFaults, at 8).
    if (s.serving.enabled) s.workload.prompts = std::min(s.workload.prompts, 8);
    // Requests served alone at PP=1 (batch invariance) at the full level only, where the
    // record is the largest.
    SweepOptions options;
    options.requests_alone = level == DumpLevel::kFull;
    Result<SweepResult> r = run_sweep(s, options);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    ASSERT_EQ(r->cases.size(), 1u);
    const CaseResult& c = r->cases[0];
    if (committed.faults.empty()) {
      EXPECT_EQ(c.verdict, Verdict::kPass) << c.key << ": " << c.message;
    } else {
      // A summary dump has no per-layer tensors: what the tensors check catches at the
      // layer level shows first in the logits there.
      std::string caught_by = committed.expect.value("caught_by", "");
      if (level == DumpLevel::kSummary && caught_by == "tensors") caught_by = "logits";
      EXPECT_TRUE(c.verdict == Verdict::kDiverged || c.verdict == Verdict::kConfigRejected)
          << c.key << ": " << c.message;
      EXPECT_NE(std::find(c.failed_checks.begin(), c.failed_checks.end(), caught_by),
                c.failed_checks.end())
          << c.key << " not caught by " << caught_by << ": " << c.message;
    }
  }
}

std::vector<std::string> committed_scenarios() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kScenarios))
    // external-*.json name an engine outside the project: tests/runner/ sweeps them.
    if (e.path().extension() == ".json" && !e.path().string().ends_with(".schema.json") &&
        !e.path().filename().string().starts_with("external-"))
      names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, EveryDumpLevel, ::testing::ValuesIn(committed_scenarios()),
                         ParamTestName());

// The scenario's real weights, except that the `nth` load of `name` is hostile: it throws
// (`kThrow`) or returns a tensor of rank 0 (`kRankZero`), which a kernel's shape read
// (Tensor::dim, std::vector::at) throws on when the stage runs it.
class HostileWeights : public WeightSource {
 public:
  enum Mode { kThrow, kRankZero };
  HostileWeights(const ModelConfig& config, std::string name, int nth, Mode mode)
      : real_(config), name_(std::move(name)), nth_(nth), mode_(mode) {}
  Result<Tensor> load(const std::string& name) override {
    if (name == name_) {
      std::lock_guard<std::mutex> lock(mu_);
      if (++loads_ == nth_) {
        if (mode_ == kThrow) throw std::runtime_error("hostile weight source: " + name);
        return Tensor::zeros(DType::kBF16, {});
      }
    }
    return real_.load(name);
  }

 private:
  GeneratedWeights real_;
  std::string name_;
  int nth_;
  Mode mode_;
  std::mutex mu_;
  int loads_ = 0;
};

Scenario small_scenario() {
  Result<Scenario> s = parse_scenario(small_json(), "small.json", ".");
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return *s;
}

TEST(GateRobustnessTest, AnExceptionInASweepWorkerIsAnErrorVerdict) {
  const Scenario s = small_scenario();
  // Load 1 is PP=1's; load 2 is the second stage's, on a sweep worker thread.
  HostileWeights weights(s.model, "layers.1.input_layernorm.weight", 2, HostileWeights::kThrow);
  SweepOptions o;
  o.weights = &weights;
  Result<SweepResult> r = run_sweep(s, o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->cases.size(), 1u);
  EXPECT_EQ(r->cases[0].verdict, Verdict::kError);
  EXPECT_NE(r->cases[0].message.find("every-layer (0-1|1-2)"), std::string::npos)
      << r->cases[0].message;
  EXPECT_NE(r->cases[0].message.find("exception: hostile weight source"), std::string::npos)
      << r->cases[0].message;
  EXPECT_EQ(r->exit_code(), 3);
}

TEST(GateRobustnessTest, AnExceptionInAStageThreadIsAnErrorVerdict) {
  const Scenario s = small_scenario();
  // The last stage's lm_head has rank 0: its thread throws on the first forward.
  HostileWeights weights(s.model, "lm_head.weight", 2, HostileWeights::kRankZero);
  SweepOptions o;
  o.weights = &weights;
  Result<SweepResult> r = run_sweep(s, o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->cases.size(), 1u);
  const CaseResult& c = r->cases[0];
  EXPECT_EQ(c.verdict, Verdict::kError);
  EXPECT_NE(c.message.find("every-layer (0-1|1-2)"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("stage 1 (layers 1-2): exception"), std::string::npos) << c.message;
  EXPECT_EQ(r->exit_code(), 3);
  EXPECT_FALSE(r->expect_failures.empty());
}

}  // namespace
}  // namespace splitcheck
