// bisect on every committed fault scenario: the cause SPEC 6 expects, a smaller repro,
// and the repro, loaded and swept again, failing the same way.
#include "harness/sweep/bisect.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "harness/scenario/faults.h"
#include "tests/cli_fixture.h"
#include "tests/scenario_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;

// The cause each fault of SPEC 6 must be bisected to. A committed fault scenario whose
// fault is missing here fails its test: every fault gets its expected cause.
const std::map<std::string, std::string>& expected_causes() {
  static const std::map<std::string, std::string> m = {
      {"handoff.no_zero_delta", kCauseDispatch},
      {"tap.boundary_uses_prefix", kCauseTapSource},
      {"tap.boundary_rejected", kCauseConfigRejected},
      {"weights.no_boundary_copy", kCauseConfigRejected},
      {"pd.producer_embedding", kCauseEmbedding},
      {"draft.own_embedding", kCauseEmbedding},
      {"draft.vocab_from_embedding", kCauseEmbedding},
      {"tap.embed_resident_by_module", kCauseTapSource},
      // Layer b-1 of the first stage computed with layer b's weights, in the first forward.
      {"weights.stage_layer_offset", kCauseLayerWeights},
      {"weights.rebound_after_load", kCauseLayerWeights},
      {"dispatch.stage_context_fallback", kCauseDispatch},
      // Layers owned by no stage: a verdict at configuration, nothing computed.
      {"partition.remainder_dropped", kCauseStructural},
      // Serving: the layer computed identically in earlier forwards; what differs is the
      // state (positions, caches, per-request bookkeeping) carried from them.
      {"spec.rollback_last_stage_only", kCauseCarriedState},
      {"batch.stale_microbatch_state", kCauseCarriedState},
      {"prefill.chunk_token_dropped", kCauseCarriedState},
  };
  return m;
}

std::vector<std::string> fault_scenarios() {
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(fs::path(SPLITCHECK_SOURCE_DIR) / "scenarios")) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("fault-") && name.ends_with(".json")) paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

class BisectFaultTest : public ::testing::TestWithParam<std::string> {};

// The committed fault scenario made as small as still shows its fault, so that bisect spends
// its sweeps on narrowing and shrinking: a PP=2 sweep of every split point at the
// representative split points of the fault's reach (faults.h: one per class of split point,
// reached and not), one prompt of at most 4 new tokens (every fault that does not serve
// shows in the first forwards of one request); a serving one at split point 13 on its first
// 8 requests (each serving fault shows there within 8). The layers stay, for bisect to
// shrink; the expect keeps the verdict and the check SPEC 6 names.
Result<Scenario> smaller(const Scenario& s) {
  const FaultInfo* fault = find_fault(s.faults.front());
  if (fault == nullptr) return invalid_input("unknown fault " + s.faults.front());
  nlohmann::json j = resolved_scenario_json(s);
  if (s.serving.enabled) {
    j["partitions"] = {{"pp", 2}, {"splits", {{13}}}};
    j["workload"]["prompts"] = std::min(s.workload.prompts, 8);
  } else {
    if (s.partitions.pp == 2 && s.partitions.mode == "all") {
      nlohmann::json splits = nlohmann::json::array();
      for (int cut : representative_split_points(fault->reach, s.model.num_hidden_layers,
                                                 s.model.attn_res_block_size, s.capture_ids))
        splits.push_back({cut});
      j["partitions"] = {{"pp", 2}, {"splits", splits}};
    }
    j["workload"]["prompts"] = 1;
    j["workload"]["max_new_tokens"] = std::min(s.workload.max_new_tokens, 4);
  }
  j["expect"] = {{"verdict", "divergent"}, {"caught_by", s.expect.at("caught_by")}};
  return parse_scenario(j, s.name, SPLITCHECK_SOURCE_DIR);
}

TEST_P(BisectFaultTest, NamesTheCauseAndWritesAReproThatFailsTheSameWay) {
  Result<Scenario> committed = load_scenario(GetParam());
  ASSERT_TRUE(committed.is_ok()) << committed.status().message();
  ASSERT_EQ(committed->faults.size(), 1u);
  ASSERT_TRUE(committed->expect.contains("caught_by")) << GetParam();
  Result<Scenario> s = smaller(*committed);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  // Still divergent, caught by the fault's check, where the fault reaches and only there.
  {
    Result<SweepResult> r = run_sweep(*s, SweepOptions{});
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    for (const std::string& f : r->expect_failures) ADD_FAILURE() << f;
    const FaultInfo* fault = find_fault(s->faults.front());
    if (!s->serving.enabled) {
      for (const CaseResult& c : r->cases)
        EXPECT_EQ(c.verdict != Verdict::kPass,
                  fault_reaches(fault->reach, c.cuts, s->model.attn_res_block_size, s->capture_ids))
            << c.key << ": " << c.message;
    }
  }
  auto want = expected_causes().find(s->faults.front());
  ASSERT_NE(want, expected_causes().end())
      << "no expected bisect cause for " << s->faults.front() << ": add it to expected_causes()";

  Result<BisectResult> r = bisect(*s, BisectOptions{});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_FALSE(r->conformant);
  EXPECT_EQ(r->finding.cause, want->second) << r->finding.key << ": " << r->finding.message;
  const ScenarioSize& b = r->before;
  const ScenarioSize& a = r->after;
  EXPECT_EQ(a.partitions, 1);
  if (want->second == kCauseStructural) {
    // Nothing was computed: the finding names the layers no stage (or two) owns, and no
    // forward, layer or token.
    EXPECT_NE(r->finding.message.find("owned by"), std::string::npos) << r->finding.message;
    EXPECT_EQ(r->finding.forward, -1);
    EXPECT_TRUE(r->finding.dataset.empty());
    EXPECT_EQ(a.layers, b.layers);
  } else {
    EXPECT_TRUE(a.layers < b.layers || a.max_new_tokens < b.max_new_tokens ||
                a.prompts < b.prompts || a.max_in_flight < b.max_in_flight ||
                (a.max_prompt_tokens != 0 &&
                 (b.max_prompt_tokens == 0 || a.max_prompt_tokens < b.max_prompt_tokens)))
        << "nothing shrank: layers " << a.layers << "/" << b.layers << ", tokens "
        << a.max_new_tokens << "/" << b.max_new_tokens << ", prompts " << a.prompts << "/"
        << b.prompts;
  }
  if (s->serving.enabled) {
    // The first diverging request and its scheduler step.
    EXPECT_GE(r->finding.request, 0) << r->finding.message;
    EXPECT_GE(r->finding.step, 0) << r->finding.message;
    EXPECT_GE(r->finding.layer, 0) << r->finding.message;
  }

  // The repro as a user gets it: written, loaded from disk and swept with the sweep's
  // default options, it fails at the same split with the same cause, and its own expect
  // block (divergent, caught by the fault's check) holds.
  const fs::path dir = fs::temp_directory_path() / ("bisect_test_" + s->name);
  fs::create_directories(dir);
  const std::string path = (dir / "repro.json").string();
  ASSERT_TRUE(write_json_atomically(path, r->repro).is_ok());
  Result<Scenario> repro = load_scenario(path);
  ASSERT_TRUE(repro.is_ok()) << repro.status().message();
  Result<SweepResult> again = run_sweep(*repro, SweepOptions{});
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  EXPECT_EQ(again->exit_code(), 1);
  EXPECT_TRUE(again->expect_failures.empty())
      << (again->expect_failures.empty() ? "" : again->expect_failures.front());
  std::optional<BisectFinding> f = first_failure(*again);
  ASSERT_TRUE(f.has_value()) << "the repro passes";
  EXPECT_EQ(f->cause, want->second) << f->message;
  EXPECT_EQ(f->key, r->finding.key);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(FaultScenarios, BisectFaultTest, ::testing::ValuesIn(fault_scenarios()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return param_test_name(fs::path(info.param).stem().string());
                         });

// Every fault of SPEC 6 has a committed scenario, so the test above covers the catalogue.
TEST(BisectTest, EveryFaultOfTheCatalogueHasAScenarioAndAnExpectedCause) {
  std::set<std::string> covered;
  for (const std::string& p : fault_scenarios()) {
    Result<Scenario> s = load_scenario(p);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    covered.insert(s->faults.begin(), s->faults.end());
  }
  for (const FaultInfo& f : fault_registry()) {
    EXPECT_TRUE(covered.count(std::string(f.id))) << f.id << " has no scenarios/fault-*.json";
    EXPECT_TRUE(expected_causes().count(std::string(f.id))) << f.id << " has no expected cause";
  }
}

TEST(BisectTest, ConformantScenarioHasNothingToBisect) {
  Result<Scenario> s =
      load_scenario(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/default.json");
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  // One split is enough to show the conformant path.
  nlohmann::json j = resolved_scenario_json(*s);
  j["partitions"] = {{"pp", 2}, {"splits", {{16}}}};
  j["workload"]["prompts"] = 1;
  j["workload"]["max_new_tokens"] = 2;
  Result<Scenario> small = parse_scenario(j, "default-small", SPLITCHECK_SOURCE_DIR);
  ASSERT_TRUE(small.is_ok()) << small.status().message();
  Result<BisectResult> r = bisect(*small, BisectOptions{});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->conformant);
  EXPECT_GE(r->sweeps, 1);
}

// A serving fault shows only with several requests in flight: bisect names the request
// that diverged first and shrinks the request count (1 is too few, so it must try more)
// while the cause stays the same, and the repro still fails that way.
TEST(BisectTest, ServingFaultNamesTheRequestAndKeepsOnlyTheRequestsItNeeds) {
  Result<Scenario> s = load_scenario(std::string(SPLITCHECK_SOURCE_DIR) +
                                     "/scenarios/fault-batch-stale-microbatch-state.json");
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  // Already small in every other size, so the test spends its sweeps on the requests.
  nlohmann::json j = resolved_scenario_json(*s);
  j["partitions"] = {{"pp", 2}, {"splits", {{4}}}};
  j["model"]["overrides"]["num_hidden_layers"] = 8;
  j["capture_ids"] = {2, 4, 8};
  j["workload"]["max_new_tokens"] = 2;
  j["workload"]["max_prompt_tokens"] = 4;
  Result<Scenario> small = parse_scenario(j, "stale-small", SPLITCHECK_SOURCE_DIR);
  ASSERT_TRUE(small.is_ok()) << small.status().message();
  ASSERT_GT(small->workload.prompts, 2);

  Result<BisectResult> r = bisect(*small, BisectOptions{});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_FALSE(r->conformant);
  EXPECT_GE(r->finding.request, 0) << r->finding.message;
  EXPECT_GT(r->after.prompts, 1);
  EXPECT_LT(r->after.prompts, r->before.prompts);
  EXPECT_GT(r->after.max_in_flight, 0);

  Result<Scenario> repro = parse_scenario(r->repro, "stale-repro", SPLITCHECK_SOURCE_DIR);
  ASSERT_TRUE(repro.is_ok()) << repro.status().message();
  EXPECT_EQ(repro->workload.prompts, r->after.prompts);
  Result<SweepResult> again = run_sweep(*repro, SweepOptions{});
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  std::optional<BisectFinding> f = first_failure(*again);
  ASSERT_TRUE(f.has_value()) << "the repro passes";
  EXPECT_EQ(f->cause, r->finding.cause);
  EXPECT_GE(f->request, 0);
}

// A scenario whose stages run over MPI is refused for a named reason (bisect sweeps its
// reduced scenarios with in-process stages only), as invalid input (exit 2), before
// anything is swept. Through the real binary, outside mpirun, the scenario's loader
// refuses it first, also with exit 2 and one line naming the file and the transport; no
// repro is written either way.
class BisectCliTest : public cli_test::CliFixture {
 protected:
  BisectCliTest() : CliFixture("splitcheck-bisect-cli-test-") {}
};

TEST_F(BisectCliTest, AScenarioOnTheMpiTransportIsRefusedNamingTheReason) {
  nlohmann::json j = resolved_scenario_json(committed_scenario("fault-weights-stage-layer-offset"));
  j["transport"] = "mpi";
  Result<Scenario> s = parse_scenario(j, "mpi", SPLITCHECK_SOURCE_DIR);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  Result<BisectResult> r = bisect(*s, BisectOptions{});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(
      r.status().message().rfind(std::string("bisect refused (") + kRefusedTransport + ")", 0), 0u)
      << r.status().message();
  EXPECT_NE(r.status().message().find("\"transport\": \"inproc\""), std::string::npos)
      << r.status().message();

  const fs::path scenario = path("mpi.json");
  cli_test::write_text(scenario, j.dump(2));
  const fs::path repro = path("repro.json");
  cli_test::expect_one_line_refusal(cli("bisect " + cli_test::quote(scenario.string()) + " --out " +
                                        cli_test::quote(repro.string())),
                                    {scenario.string(), "mpi"});
  EXPECT_FALSE(fs::exists(repro));
}

// The structural fault end to end, as a user runs it: bisect names the layers no stage
// owns and exits 1; the repro it writes, swept, is rejected the same way (exit 1).
TEST_F(BisectCliTest, AStructuralFaultIsNamedAndItsReproFailsWhenSwept) {
  const fs::path repro = path("repro.json");
  const cli_test::CliResult r = cli(
      "bisect " +
      cli_test::quote(SPLITCHECK_SOURCE_DIR "/scenarios/fault-partition-remainder-dropped.json") +
      " --out " + cli_test::quote(repro.string()));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find(std::string("cause: ") + kCauseStructural), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layers 28-29 are owned by no stage"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(repro));
  const cli_test::CliResult again = cli("sweep " + cli_test::quote(repro.string()));
  EXPECT_EQ(again.code, 1) << again.out << again.err;
  EXPECT_NE(again.out.find("owned by no stage"), std::string::npos) << again.out;
}

}  // namespace
}  // namespace splitcheck
