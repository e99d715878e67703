// The mpi transport with real processes: sweeps launched by mpirun (one rank per stage),
// against inproc; refusals outside mpirun or with too few ranks; a rank killed mid-sweep.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/cli_fixture.h"

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
  r["scenario"].erase("sha256");
  r["scenario"]["resolved"].erase("transport");
  for (json& c : r["cases"]) c.erase("seconds");
  return r;
}

TEST_F(MpiSweepTest, TwoRanksSweepEverySplitOfTheDefaultScenarioAsInprocDoes) {
  const CliResult inproc =
      cli("sweep " + scenario("default.json") + " --report " + quote(path("inproc").string()));
  ASSERT_EQ(inproc.code, 0) << inproc.out << inproc.err;
  const CliResult mpi =
      mpirun(2, scenario("default.json") + " --report " + quote(path("mpi").string()));
  ASSERT_EQ(mpi.code, 0) << mpi.out << mpi.err;
  const json r = report("mpi");
  EXPECT_EQ(r["counts"]["total"], 31);
  EXPECT_EQ(r["counts"]["pass"], 31) << "every split bit-identical to PP=1";
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

// The committed fault scenarios, one test each (each is two sweeps of 31 split points).
std::vector<std::string> fault_scenarios() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kScenarios)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("fault-", 0) == 0 && entry.path().extension() == ".json") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
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
  const std::string file =
      spec.contains("serving") ? quote(trimmed_serving(name, {13}).string()) : scenario(name);
  const CliResult inproc = cli("sweep " + file + " --report " + quote(path("in").string()));
  // The trimmed serving sweep still catches its fault (a divergence: exit 1).
  if (spec.contains("serving")) {
    EXPECT_EQ(inproc.code, 1) << inproc.out << inproc.err;
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

// The processes whose parent is `pid`, with their MPI rank (from their environment).
std::map<int, pid_t> ranks_of(pid_t parent) {
  std::map<int, pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = file_text(e.path() / "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 2, "%c %d", &state, &ppid) != 2 || ppid != parent)
      continue;
    const std::string env = file_text(e.path() / "environ");
    const std::string key = std::string("OMPI_COMM_WORLD_RANK=");
    const size_t at = env.find(key);
    if (at != std::string::npos)
      out[std::atoi(env.c_str() + at + key.size())] = static_cast<pid_t>(std::stoi(name));
  }
  return out;
}

// Whether `pid` still runs (a zombie has ended).
bool running(pid_t pid) {
  const std::string stat = file_text(fs::path("/proc") / std::to_string(pid) / "stat");
  const size_t close = stat.rfind(')');
  return close != std::string::npos && stat.size() > close + 2 && stat[close + 2] != 'Z';
}

TEST_F(MpiSweepTest, ARankKilledMidSweepIsAnErrorVerdictAndNothingIsLeftBehind) {
  // --enable-recovery keeps rank 0 alive when another rank dies, so it can report.
  const fs::path err = path("stderr.txt"), pid_file = path("mpirun.pid");
  const std::string cmd =
      mpirun_command(3,
                     scenario("pp3-pairwise.json") + " --progress " +
                         "--transport-timeout 10 --report " + quote(path("report").string()),
                     "--enable-recovery") +
      " >" + quote(path("stdout.txt").string()) + " 2>" + quote(err.string()) + " & echo $! >" +
      quote(pid_file.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  pid_t mpirun_pid = 0;
  while (mpirun_pid == 0 && std::chrono::steady_clock::now() < deadline) {
    mpirun_pid = std::atoi(file_text(pid_file).c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(mpirun_pid, 0);
  // Mid-sweep: once rank 0 says three split points are done.
  while (file_text(err).find("[3/") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::map<int, pid_t> ranks = ranks_of(mpirun_pid);
  ASSERT_EQ(ranks.size(), 3u) << file_text(err);
  ASSERT_EQ(::kill(ranks.at(1), SIGKILL), 0);
  while (running(mpirun_pid) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_FALSE(running(mpirun_pid)) << "mpirun still runs: " << file_text(err);
  for (const auto& [rank, pid] : ranks) EXPECT_FALSE(running(pid)) << "rank " << rank << " left";

  ASSERT_TRUE(fs::exists(path("report") / "report.json")) << file_text(err);
  const json r = report("report");
  EXPECT_EQ(r["verdict"], "divergent");
  EXPECT_EQ(r["exit_code"], 3);
  EXPECT_EQ(r["counts"]["error"], 1);
  int passed = 0, skipped = 0;
  std::string error_key, error_message;
  for (const json& c : r["cases"]) {
    passed += c["verdict"] == "pass";
    skipped += c["verdict"] == "skipped";
    if (c["verdict"] == "error") {
      error_key = c["key"];
      error_message = c["message"];
    }
  }
  EXPECT_GE(passed, 3) << "the split points before the kill passed";
  EXPECT_EQ(passed + skipped + 1, r["counts"]["total"].get<int>());
  EXPECT_GT(skipped, 0) << "the sweep stopped";
  EXPECT_NE(error_message.find("rank 1 (stage 1"), std::string::npos) << error_message;
  EXPECT_NE(error_message.find(error_key), std::string::npos) << error_message;
  EXPECT_NE(file_text(err).find("aborting the MPI job"), std::string::npos) << file_text(err);
}

}  // namespace
}  // namespace splitcheck::cli_test
