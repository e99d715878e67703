// The mpi transport with real processes: sweeps launched by mpirun (one rank per stage),
// against inproc; refusals outside mpirun or with too few ranks; `sweep --ranks N` exiting
// with the verdict's code as the shell sees it (0, 1, 2; 3 when a rank is killed during
// setup or mid-sweep by the test-only SPLITCHECK_TEST_KILL_RANK hook), leaving no process.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "harness/gates/sensitivity.h"
#include "harness/scenario/faults.h"
#include "harness/scenario/scenario.h"
#include "tests/cli_fixture.h"
#include "tests/small_default.h"

namespace splitcheck::cli_test {
namespace {

using json = nlohmann::json;

const fs::path kScenarios = fs::path(SPLITCHECK_SOURCE_DIR) / "scenarios";

class MpiSweepTest : public CliFixture {
 protected:
  MpiSweepTest() : CliFixture("splitcheck-mpi-") {}

  // `mpirun -np <np> splitcheck sweep <scenario> --transport mpi <args>`.
  std::string mpirun_command(int np, const std::string& args,
                             const std::string& launcher_args = "") const {
#ifdef SPLITCHECK_MPIEXEC
    return fmt_command(std::string(SPLITCHECK_MPIEXEC) + " --allow-run-as-root --oversubscribe " +
                       launcher_args + " -np " + std::to_string(np) + " " +
                       quote(SPLITCHECK_BINARY) + " sweep --transport mpi " + args);
#else
    (void)np, (void)args, (void)launcher_args;
    return "";
#endif
  }
  static std::string fmt_command(const std::string& s) { return s; }

  CliResult mpirun(int np, const std::string& args) const {
    const fs::path out = dir_ / "mpi-stdout.txt";
    const fs::path err = dir_ / "mpi-stderr.txt";
    const std::string cmd =
        mpirun_command(np, args) + " >" + quote(out.string()) + " 2>" + quote(err.string());
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, file_text(out), file_text(err)};
  }

  // The committed serving scenario `name` on its first `prompts` requests (at most 8) at
  // split points `cuts` (micro-batches, chunked prefill and rollbacks stay), without its
  // expect (written for all its requests and split points); written to the test's
  // directory. With `one_partition`, the cuts make one partition (PP = cuts + 1).
  fs::path trimmed_serving(const std::string& name, std::vector<int> cuts = {4, 13},
                           int prompts = 8, bool one_partition = false) const {
    json spec = json::parse(file_text(kScenarios / name));
    spec["workload"]["prompts"] = std::min(spec["workload"].value("prompts", 8), prompts);
    spec["workload"]["file"] = (kScenarios / spec["workload"]["file"].get<std::string>()).string();
    spec["partitions"]["splits"] = json::array();
    if (one_partition) {
      spec["partitions"]["pp"] = static_cast<int>(cuts.size()) + 1;
      spec["partitions"]["splits"].push_back(cuts);
    } else {
      for (int cut : cuts) spec["partitions"]["splits"].push_back(json::array({cut}));
    }
    spec.erase("expect");
    const fs::path out = path("trimmed-" + name);
    std::ofstream(out) << spec.dump(2);
    return out;
  }

  // The committed scenario `name` at the split points `cuts` only, without its expect
  // (written for all its split points), with at most `max_new_tokens` new tokens (0: its
  // own); written to the test's directory.
  fs::path at_split_points(const std::string& name, const std::vector<int>& cuts,
                           int max_new_tokens = 0) const {
    json spec = json::parse(file_text(kScenarios / name));
    if (max_new_tokens > 0)
      spec["workload"]["max_new_tokens"] =
          std::min(spec["workload"].value("max_new_tokens", max_new_tokens), max_new_tokens);
    if (spec.contains("workload") && spec["workload"].contains("file"))
      spec["workload"]["file"] =
          (kScenarios / spec["workload"]["file"].get<std::string>()).string();
    spec["partitions"]["splits"] = json::array();
    for (int cut : cuts) spec["partitions"]["splits"].push_back(json::array({cut}));
    spec.erase("expect");
    const fs::path out = path("at-splits-" + name);
    std::ofstream(out) << spec.dump(2);
    return out;
  }

  json report(const std::string& dir) const {
    return json::parse(file_text(path(dir) / "report.json"));
  }

  void SetUp() override {
    CliFixture::SetUp();
#ifndef SPLITCHECK_MPIEXEC
    GTEST_SKIP() << "built without SPLITCHECK_MPI";
#endif
  }
};

std::string scenario(const std::string& name) { return quote((kScenarios / name).string()); }

// A report with what legitimately differs between two runs of one scenario removed: times,
// the command line, the host, and the transport (its name and so the scenario identity).
json without_volatile(json r) {
  r.erase("timing");
  r.erase("command");
  r.erase("provenance");
  r.erase("placement");
  r.erase("identity");  // its scenario digest covers the transport
  r["scenario"].erase("sha256");
  r["scenario"]["resolved"].erase("transport");
  for (json& c : r["cases"]) c.erase("seconds");
  return r;
}

// The default scenario at 8 of its 31 split points (the first and the last, block-aligned
// and not, at capture ids and between them), its two prompts with 16 new tokens of 56
// (prefill, drafts, verifies with accepted and rejected proposals all cross the process
// boundary by then): the MPI transport serves one partition at a time, so all 31 cost a
// minute and a half, and all 56 tokens a minute, for nothing these do not show.
TEST_F(MpiSweepTest, TwoRanksSweepTheDefaultScenarioAsInprocDoes) {
  const std::string file =
      quote(at_split_points("default.json", {1, 3, 4, 8, 13, 16, 24, 30}, 16).string());
  const CliResult inproc = cli("sweep " + file + " --report " + quote(path("inproc").string()));
  ASSERT_EQ(inproc.code, 0) << inproc.out << inproc.err;
  const CliResult mpi = mpirun(2, file + " --report " + quote(path("mpi").string()));
  ASSERT_EQ(mpi.code, 0) << mpi.out << mpi.err;
  const json r = report("mpi");
  EXPECT_EQ(r["counts"]["total"], 8);
  EXPECT_EQ(r["counts"]["pass"], 8) << "every split bit-identical to PP=1";
  EXPECT_EQ(r["scenario"]["resolved"]["transport"], "mpi");
  EXPECT_EQ(without_volatile(report("inproc")), without_volatile(r));
}

TEST_F(MpiSweepTest, TwoRanksServeAsInprocDoes) {
  // Serving steps (several requests' rows in one batch, two micro-batches in flight,
  // chunked prefill, speculative drafts and their rollbacks) cross the process boundary.
  const std::string file = quote(trimmed_serving("serving.json").string());
  const CliResult inproc = cli("sweep " + file + " --report " + quote(path("inproc").string()));
  ASSERT_EQ(inproc.code, 0) << inproc.out << inproc.err;
  const CliResult mpi = mpirun(2, file + " --report " + quote(path("mpi").string()));
  ASSERT_EQ(mpi.code, 0) << mpi.out << mpi.err;
  const json r = report("mpi");
  EXPECT_EQ(r["counts"]["total"], 2);
  EXPECT_EQ(r["counts"]["pass"], 2) << "both split points bit-identical to PP=1";
  EXPECT_EQ(r["scenario"]["resolved"]["transport"], "mpi");
  EXPECT_EQ(without_volatile(report("inproc")), without_volatile(r));
}

TEST_F(MpiSweepTest, ThreeRanksServeAsInprocDoes) {
  // PP=3: the middle rank takes a step's segment payloads through the channel and hands
  // its own on the same way (one announcement a segment in the job message).
  const std::string file =
      quote(trimmed_serving("serving.json", {9, 20}, 4, /*one_partition=*/true).string());
  const CliResult inproc = cli("sweep " + file + " --report " + quote(path("inproc").string()));
  ASSERT_EQ(inproc.code, 0) << inproc.out << inproc.err;
  const CliResult mpi = mpirun(3, file + " --report " + quote(path("mpi").string()));
  ASSERT_EQ(mpi.code, 0) << mpi.out << mpi.err;
  const json r = report("mpi");
  EXPECT_EQ(r["counts"]["total"], 1);
  EXPECT_EQ(r["counts"]["pass"], 1) << "bit-identical to PP=1";
  EXPECT_EQ(r["cases"][0]["key"], "split-9-20");
  EXPECT_EQ(without_volatile(report("inproc")), without_volatile(r));
}

TEST_F(MpiSweepTest, ServingOverNcclOutsideMpirunIsRefusedForTheLaunchNotForServing) {
  // Serving runs over nccl (scripts/nccl-check.sh sweeps it on two GPUs); outside mpirun
  // (and here without a GPU) the transport cannot run, and that is what is said.
  const CliResult r = cli("sweep " + scenario("serving.json") + " --transport nccl");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_EQ(r.err.find("/serving"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/transport"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("transport \"nccl\" cannot run here"), std::string::npos) << r.err;
}

TEST_F(MpiSweepTest, ThreeRanksSweepThePp3PairwiseScenario) {
  const CliResult mpi =
      mpirun(3, scenario("pp3-pairwise.json") + " --report " + quote(path("mpi").string()));
  ASSERT_EQ(mpi.code, 0) << mpi.out << mpi.err;
  const json r = report("mpi");
  EXPECT_GT(r["counts"]["total"].get<int>(), 0);
  EXPECT_EQ(r["counts"]["pass"], r["counts"]["total"]) << "every partition bit-identical";
  EXPECT_EQ(r["verdict"], "conformant");
}

// The committed fault scenarios, one test each (each is two sweeps, inproc and over mpi).
std::vector<std::string> fault_scenarios() {
  std::vector<std::string> names;
  for (const std::string& path : committed_fault_scenarios())
    names.push_back(fs::path(path).filename().string());
  return names;
}

class MpiFaultTest : public MpiSweepTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(MpiFaultTest, GivesTheInprocVerdicts) {
  const std::string name = GetParam();
  const json spec = json::parse(file_text(kScenarios / name));
  const int np = spec["partitions"].value("pp", 2);
  // A serving scenario is swept on its first 8 requests at split point 13 (each serving
  // fault shows there within 8 requests), over both transports alike. One serving fault
  // is enough here (the steps travel alike whatever the fault; each such test costs about
  // 25 s): the stale micro-batch state, the one about two steps in flight.
  if (spec.contains("serving") && name != "fault-batch-stale-microbatch-state.json")
    GTEST_SKIP() << "one serving fault runs over mpi (fault-batch-stale-microbatch-state)";
  // A PP=2 scenario of every split point is swept at the representative split points of
  // its fault's reach (faults.h: one split point per class the code under test tells apart,
  // reached by the fault and not; the committed-scenario test sweeps all 31 inproc): the
  // mpi transport serves one partition at a time, and the others show nothing these do not.
  Result<Scenario> s = load_scenario((kScenarios / name).string());
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  ASSERT_FALSE(s->faults.empty());
  const FaultInfo* fault = find_fault(s->faults.front());
  ASSERT_NE(fault, nullptr);
  const bool every_split = s->partitions.pp == 2 && s->partitions.mode == "all";
  std::string file = scenario(name);
  if (spec.contains("serving")) {
    file = quote(trimmed_serving(name, {13}).string());
  } else if (every_split) {
    const std::vector<int> cuts = representative_split_points(
        fault->reach, s->model.num_hidden_layers, s->model.attn_res_block_size, s->capture_ids);
    file = quote(at_split_points(name, cuts).string());
  }
  const CliResult inproc = cli("sweep " + file + " --report " + quote(path("in").string()));
  // The sweep still catches its fault (a divergence: exit 1) where the fault reaches, and
  // only there.
  EXPECT_EQ(inproc.code, 1) << inproc.out << inproc.err;
  if (every_split) {
    for (const json& c : report("in")["cases"]) {
      const int cut[] = {std::stoi(c["key"].get<std::string>().substr(6))};  // "split-N"
      EXPECT_EQ(c["verdict"] != "pass",
                fault_reaches(fault->reach, cut, s->model.attn_res_block_size, s->capture_ids))
          << c["key"] << ": " << c["verdict"];
    }
  }
  const CliResult mpi = mpirun(np, file + " --report " + quote(path("mpi").string()));
  EXPECT_EQ(mpi.code, inproc.code) << mpi.out << mpi.err;
  ASSERT_TRUE(fs::exists(path("mpi") / "report.json")) << mpi.out << mpi.err;
  const json ri = report("in"), rm = report("mpi");
  EXPECT_EQ(rm["verdict"], ri["verdict"]);
  EXPECT_EQ(rm["counts"], ri["counts"]);
  ASSERT_EQ(rm["cases"].size(), ri["cases"].size());
  for (size_t i = 0; i < ri["cases"].size(); ++i) {
    const json& ci = ri["cases"][i];
    const json& cm = rm["cases"][i];
    EXPECT_EQ(cm["key"], ci["key"]);
    EXPECT_EQ(cm["verdict"], ci["verdict"]) << ci["key"];
    EXPECT_EQ(cm["failed_checks"], ci["failed_checks"]) << ci["key"];
    EXPECT_EQ(cm["message"], ci["message"]) << ci["key"];
  }
  EXPECT_EQ(without_volatile(rm), without_volatile(ri));
}

INSTANTIATE_TEST_SUITE_P(Committed, MpiFaultTest, ::testing::ValuesIn(fault_scenarios()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param.substr(0, info.param.size() - 5);
                           for (char& c : n)
                             if (c == '-' || c == '.') c = '_';
                           return n;
                         });

TEST_F(MpiSweepTest, OutsideMpirunTheMpiTransportIsRefused) {
  expect_one_line_refusal(cli("sweep " + scenario("default.json") + " --transport mpi"),
                          {"/transport", "not launched by mpirun"});
}

TEST_F(MpiSweepTest, FewerRanksThanStagesIsRefused) {
  const CliResult r = mpirun(2, scenario("pp3-pairwise.json"));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("has 3 stages, but the mpi transport has 2 rank(s)"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("pass"), std::string::npos) << r.out;
}

TEST_F(MpiSweepTest, APartitionRejectedAtConfigurationNeedsNoRanks) {
  // PP=4 that owns layers 28-29 by no stage: its structural verdict comes before any stage
  // is built, so two ranks give the verdict inproc gives (as two GPUs do over nccl).
  const std::string file = scenario("fault-partition-remainder-dropped.json");
  const CliResult inproc = cli("sweep " + file + " --report " + quote(path("in").string()));
  ASSERT_EQ(inproc.code, 1) << inproc.out << inproc.err;
  const CliResult mpi = mpirun(2, file + " --report " + quote(path("mpi").string()));
  EXPECT_EQ(mpi.code, 1) << mpi.out << mpi.err;
  EXPECT_EQ(mpi.err.find("rank(s)"), std::string::npos) << mpi.err;
  ASSERT_TRUE(fs::exists(path("mpi") / "report.json")) << mpi.out << mpi.err;
  const json r = report("mpi");
  EXPECT_EQ(r["cases"][0]["verdict"], "config-rejected");
  EXPECT_EQ(r["cases"][0]["failed_checks"], json::array({"partition"}));
  EXPECT_EQ(r["expect"]["met"], true) << r["expect"].dump();
  EXPECT_EQ(without_volatile(r), without_volatile(report("in")));
}

// Whether `pid` still runs (a zombie has ended).
bool running(pid_t pid) {
  const std::string stat = file_text(fs::path("/proc") / std::to_string(pid) / "stat");
  const size_t close = stat.rfind(')');
  return close != std::string::npos && stat.size() > close + 2 && stat[close + 2] != 'Z';
}

// The processes (not zombies) whose environment holds `marker`: everything a run started,
// mpirun and its ranks included, inherits it.
std::vector<pid_t> processes_marked(const std::string& marker) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stoi(name));
    if (pid == ::getpid() || !running(pid)) continue;
    if (file_text(e.path() / "environ").find(marker) != std::string::npos) out.push_back(pid);
  }
  return out;
}

// `splitcheck sweep --ranks N` as the shell runs it: its exit status as the shell sees it,
// with `env` (NAME=value ...) before it, and every process it started checked gone after.
class RanksTest : public MpiSweepTest {
 protected:
  CliResult ranks(int n, const std::string& args, const std::string& env = "") {
    const std::string marker =
        "SPLITCHECK_TEST_RUN=" + std::to_string(::getpid()) + "-" + std::to_string(++runs_);
    const fs::path out = path("ranks-stdout.txt"), err = path("ranks-stderr.txt");
    const std::string cmd = "env " + marker + " " + env + " timeout -s KILL 300 " +
                            quote(SPLITCHECK_BINARY) + " sweep --ranks " + std::to_string(n) + " " +
                            args + " >" + quote(out.string()) + " 2>" + quote(err.string()) +
                            "; echo $? >" + quote(path("status.txt").string());
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    const int status = std::atoi(file_text(path("status.txt")).c_str());
    // Nothing it started outlives it: not mpirun, not a rank.
    std::vector<pid_t> left = processes_marked(marker);
    for (int i = 0; i < 20 && !left.empty(); ++i) {  // a moment for the kernel to reap
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      left = processes_marked(marker);
    }
    EXPECT_TRUE(left.empty()) << left.size() << " process(es) left behind, first pid "
                              << (left.empty() ? 0 : left[0]);
    for (pid_t pid : left) ::kill(pid, SIGKILL);
    return {status, file_text(out), file_text(err)};
  }
  // The one case whose verdict is error, and how many passed and were skipped.
  struct Outcome {
    std::string error_key, error_message;
    int passed = 0, skipped = 0;
  };
  static Outcome outcome(const json& r) {
    Outcome o;
    for (const json& c : r["cases"]) {
      o.passed += c["verdict"] == "pass";
      o.skipped += c["verdict"] == "skipped";
      if (c["verdict"] == "error") {
        o.error_key = c["key"];
        o.error_message = c["message"];
      }
    }
    return o;
  }
  int runs_ = 0;
};

TEST_F(RanksTest, APassingSweepExitsZeroAndSaysWhereEachStageRan) {
  const CliResult r = ranks(2, quote(small_default(dir_).string()) +
                                   " --filter split-13 --report " + quote(path("report").string()));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json rep = report("report");
  EXPECT_EQ(rep["exit_code"], 0);
  EXPECT_EQ(rep["counts"]["pass"], 1);
  const json& p = rep["placement"];
  EXPECT_EQ(p["transport"], "mpi");
  ASSERT_EQ(p["stages"].size(), 2u) << p.dump();
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(p["stages"][s]["stage"], s);
    EXPECT_EQ(p["stages"][s]["rank"], s);
    EXPECT_EQ(p["stages"][s]["device"], "cpu");
    EXPECT_FALSE(p["stages"][s]["host"].get<std::string>().empty());
  }
  EXPECT_NE(p["stages"][0]["pid"], p["stages"][1]["pid"]) << "one process per stage";
  EXPECT_NE(p["stages"][0]["pid"].get<int64_t>(), ::getpid());
  const std::string line =
      fmt::format("stages: mpi: stage 0 on rank 0 (pid {}, host {}, cpu), stage 1 on rank 1",
                  p["stages"][0]["pid"].get<int64_t>(), p["stages"][0]["host"].get<std::string>());
  EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
  EXPECT_NE(file_text(path("report") / "summary.md").find("Stages ran on mpi: stage 0 on rank 0"),
            std::string::npos);
  EXPECT_NE(file_text(path("report") / "report.html").find("stage 1 on rank 1"), std::string::npos);
}

TEST_F(RanksTest, ADivergingSweepExitsOne) {
  const CliResult r = ranks(2, scenario("fault-handoff-no-zero-delta.json") +
                                   " --filter split-13 --report " + quote(path("report").string()));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_EQ(report("report")["counts"]["diverged"], 1);
}

TEST_F(RanksTest, InvalidInputExitsTwo) {
  std::ofstream(path("bad.json")) << "{ not json";
  const CliResult r = ranks(2, quote(path("bad.json").string()));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
}

TEST_F(RanksTest, ARankKilledMidSweepExitsThreeNamingTheRank) {
  // Rank 1 dies as it is asked to build its stage of the third split point.
  const CliResult r = ranks(2,
                            quote(small_default(dir_).string()) +
                                " --filter split-1 --transport-timeout 20 --report " +
                                quote(path("report").string()),
                            "SPLITCHECK_TEST_KILL_RANK=1:build-3");
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  ASSERT_TRUE(fs::exists(path("report") / "report.json")) << r.err;
  const json rep = report("report");
  EXPECT_EQ(rep["exit_code"], 3);
  const Outcome o = outcome(rep);
  EXPECT_EQ(o.passed, 2) << "the split points before the kill passed";
  EXPECT_EQ(o.passed + o.skipped + 1, rep["counts"]["total"].get<int>());
  EXPECT_GT(o.skipped, 0) << "the sweep stopped";
  EXPECT_NE(o.error_message.find("rank 1 (stage 1"), std::string::npos) << o.error_message;
  EXPECT_NE(o.error_message.find(o.error_key), std::string::npos) << o.error_message;
  EXPECT_NE(r.err.find("aborting the MPI job"), std::string::npos) << r.err;
}

TEST_F(RanksTest, ARankKilledBeforeItsHelloExitsThreeNamingTheRank) {
  // Setup: rank 1 joined MPI and dies before it tells rank 0 where it runs.
  const CliResult r = ranks(2,
                            quote(small_default(dir_).string()) +
                                " --filter split-13 --transport-timeout 5 --report " +
                                quote(path("report").string()),
                            "SPLITCHECK_TEST_KILL_RANK=1:hello");
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  ASSERT_TRUE(fs::exists(path("report") / "report.json")) << r.err;
  const Outcome o = outcome(report("report"));
  EXPECT_NE(o.error_message.find("rank 1 died or hangs during setup"), std::string::npos)
      << o.error_message;
}

TEST_F(RanksTest, ARankKilledBeforeMpiInitExitsThreeNamingTheRank) {
  // Setup: rank 1 dies before MPI_Init, which would wait for it forever on rank 0.
  const CliResult r = ranks(2,
                            quote(small_default(dir_).string()) +
                                " --filter split-13 --transport-timeout 5 --report " +
                                quote(path("report").string()),
                            "SPLITCHECK_TEST_KILL_RANK=1:init");
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  ASSERT_TRUE(fs::exists(path("report") / "report.json")) << r.err;
  const Outcome o = outcome(report("report"));
  EXPECT_NE(o.error_message.find("the MPI job did not start"), std::string::npos)
      << o.error_message;
  EXPECT_NE(o.error_message.find("rank 1 (pid"), std::string::npos) << o.error_message;
  EXPECT_NE(o.error_message.find("ended before it joined"), std::string::npos) << o.error_message;
}

TEST_F(MpiSweepTest, PlainMpirunExitsWithTheVerdictWhenNoRankDies) {
  // Without --enable-recovery mpirun returns rank 0's exit code.
  const CliResult diverged =
      mpirun(2, scenario("fault-handoff-no-zero-delta.json") + " --filter split-13");
  EXPECT_EQ(diverged.code, 1) << diverged.out << diverged.err;
}

TEST_F(MpiSweepTest, MpirunWithRecoveryIsRefusedForItsExitStatus) {
  // mpirun --enable-recovery returns 0 whatever the ranks return: nothing runs under it.
  const fs::path err = path("stderr.txt");
  const std::string cmd =
      mpirun_command(2,
                     quote(small_default(dir_).string()) + " --filter split-13 --report " +
                         quote(path("report").string()),
                     "--enable-recovery") +
      " >/dev/null 2>" + quote(err.string());
  const int status = std::system(cmd.c_str());  // the refusal's text is what is checked
  (void)status;
  EXPECT_NE(file_text(err).find("mpirun --enable-recovery exits 0 whatever the verdict"),
            std::string::npos)
      << file_text(err);
  EXPECT_NE(file_text(err).find("--ranks N"), std::string::npos) << file_text(err);
  EXPECT_FALSE(fs::exists(path("report") / "report.json"));
}

}  // namespace
}  // namespace splitcheck::cli_test
