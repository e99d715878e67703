// The runner end to end through the real CLI: splitcheck's own `run` command as the
// external engine (scenarios/external-self.json), swept over every split point, with a
// fault (the divergence and its cause, bisect), sharded and merged; and fake engines that
// crash, hang, write nothing, write garbage or leave datasets out, each an error (or a
// divergence) naming its split point, with no process left behind.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::file_text;
using cli_test::quote;
using cli_test::write_text;
using nlohmann::json;

class ExternalSweepTest : public cli_test::CliFixture {
 protected:
  ExternalSweepTest() : CliFixture("splitcheck-external-") {}

  // scenarios/external-self.json with this build's binary as the engine.
  json self_scenario() const {
    json j = json::parse(
        file_text(fs::path(SPLITCHECK_SOURCE_DIR) / "scenarios" / "external-self.json"));
    j["engine"]["command"][0] = SPLITCHECK_BINARY;
    return j;
  }

  fs::path write_scenario(const std::string& name, const json& j) const {
    const fs::path p = path(name);
    write_text(p, j.dump(2));
    return p;
  }

  json report(const std::string& dir) const {
    return json::parse(file_text(path(dir) / "report.json"));
  }
};

std::vector<std::string> keys_with(const json& report, const std::string& verdict) {
  std::vector<std::string> keys;
  for (const json& c : report["cases"])
    if (c["verdict"] == verdict) keys.push_back(c["key"]);
  return keys;
}

bool mentions_not_judged(const std::string& text, const std::string& check) {
  return text.find(check + ": not judged") != std::string::npos;
}

TEST_F(ExternalSweepTest, TheCliAsAnEngineIsBitIdenticalAtEverySplitPoint) {
  const fs::path s = write_scenario("self.json", self_scenario());
  const CliResult r =
      cli("sweep " + quote(s.string()) + " --jobs 2 --report " + quote(path("rep").string()));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // The console opens with the engine's own provenance, the command template, the expanded
  // PP=1 command, the settings and the version.
  EXPECT_EQ(r.out.rfind("engine:          splitcheck ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\ncommand:         " + std::string(SPLITCHECK_BINARY) +
                       " run '{scenario}' --split '{cuts}' --out '{out}'\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\ncommand (PP=1):"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nevidence:        required"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::string(SPLITCHECK_BINARY) + " run "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--split '' --out"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 requested, 2 in effect"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("7 pass, 0 diverged"), std::string::npos) << r.out;
  const json rep = report("rep");
  EXPECT_EQ(rep["counts"]["pass"], 7);
  EXPECT_EQ(rep["exit_code"], 0);
  EXPECT_TRUE(rep["expect"]["met"].get<bool>());
  // `splitcheck run` records its stages' facts (memory, embedding) at PP=1 and at every
  // split point, and refuses a configuration through the protocol (config).
  for (const char* judged : {"tensors", "taps", "logits", "tokens", "dispatch", "partition",
                             "embedding", "memory", "config"})
    EXPECT_NE(std::find(rep["checks"].begin(), rep["checks"].end(), judged), rep["checks"].end())
        << judged << " in " << rep["checks"].dump();
  // No /spec without a drafter: acceptance is not judged, nor listed as evaluated.
  for (const char* check : {"acceptance"}) {
    EXPECT_EQ(std::find(rep["checks"].begin(), rep["checks"].end(), check), rep["checks"].end())
        << check;
    for (const char* file : {"summary.md", "report.html", "junit.xml"})
      EXPECT_TRUE(mentions_not_judged(file_text(path("rep") / file), check))
          << check << " in " << file;
    EXPECT_TRUE(mentions_not_judged(r.out, check)) << check << " in " << r.out;
  }
  EXPECT_EQ(rep["engine"]["pp1_command"][0], SPLITCHECK_BINARY);
  EXPECT_GT(rep["cases"][0]["datasets_compared"].get<int>(), 10);
  // Every dump and the engine's own stderr are kept in the work directory.
  EXPECT_TRUE(fs::exists(path("rep") / "runs" / "split-3.h5"));
  EXPECT_TRUE(fs::exists(path("rep") / "runs" / "split-3.stderr"));
}

TEST_F(ExternalSweepTest, AFaultDivergesOffTheBlockBoundaryWithTheDispatchNamedAndBisects) {
  json j = self_scenario();
  j["faults"] = {"handoff.no_zero_delta"};
  j["expect"] = {{"identical", {"split-4"}}, {"caught_by", "dispatch"}};
  const fs::path s = write_scenario("fault.json", j);
  const CliResult r =
      cli("sweep " + quote(s.string()) + " --report " + quote(path("rep").string()));
  ASSERT_EQ(r.code, 1) << r.out << r.err;
  const json rep = report("rep");
  EXPECT_TRUE(rep["expect"]["met"].get<bool>()) << rep["expect"].dump();
  EXPECT_EQ(keys_with(rep, "pass"), std::vector<std::string>{"split-4"});
  EXPECT_EQ(keys_with(rep, "diverged").size(), 6u);
  for (const json& c : rep["cases"]) {
    if (c["verdict"] != "diverged") continue;
    EXPECT_NE(
        c["message"].get<std::string>().find("attn_res.native at PP=1, attn_res.fallback here"),
        std::string::npos)
        << c.dump();
  }
  const CliResult b =
      cli("bisect " + quote(s.string()) + " --out " + quote(path("repro.json").string()));
  ASSERT_EQ(b.code, 1) << b.out << b.err;
  EXPECT_NE(b.out.find("first failing split split-1"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("cause: dispatch mismatch"), std::string::npos) << b.out;
  const json repro = json::parse(file_text(path("repro.json")));
  EXPECT_EQ(repro["partitions"]["splits"], json::parse("[[1]]"));
  EXPECT_EQ(repro["engine"]["command"][0], SPLITCHECK_BINARY);
}

TEST_F(ExternalSweepTest, ShardsMergeIntoTheUnshardedVerdict) {
  const fs::path s = write_scenario("self.json", self_scenario());
  for (const char* shard : {"0/2", "1/2"}) {
    const std::string dir = std::string("shard") + shard[0];
    const CliResult r = cli("sweep " + quote(s.string()) + " --shard " + shard + " --report " +
                            quote(path(dir).string()));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
  }
  const CliResult m = cli("merge " + quote((path("shard0") / "report.json").string()) + " " +
                          quote((path("shard1") / "report.json").string()) + " --report " +
                          quote(path("merged").string()));
  ASSERT_EQ(m.code, 0) << m.out << m.err;
  const json rep = report("merged");
  EXPECT_EQ(rep["counts"]["pass"], 7);
  EXPECT_TRUE(rep["expect"]["met"].get<bool>());
  EXPECT_TRUE(mentions_not_judged(file_text(path("merged") / "summary.md"), "acceptance"));
}

bool process_gone(pid_t pid) {
  for (int i = 0; i < 300; ++i) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    if (!stat || !std::getline(stat, text)) return true;
    const size_t close = text.rfind(')');
    if (close != std::string::npos && text.size() > close + 2 && text[close + 2] == 'Z' && i > 50)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST_F(ExternalSweepTest, EnginesThatCrashHangWriteNothingOrGarbageAreErrorsNamingTheSplit) {
  // One fake engine, misbehaving differently at each cut; elsewhere the real CLI.
  const fs::path engine = path("engine.sh");
  write_text(engine,
             "#!/bin/sh\n"
             "scenario=\"$1\" cuts=\"$2\" out=\"$3\"\n"
             "case \"$cuts\" in\n"
             "  2) echo 'engine: CUDA error <&> at stage 1' >&2; exit 1 ;;\n"
             "  3) echo $$ > " +
                 path("hang.pid").string() +
                 "; (exec sleep 1000) &\n"
                 "     echo $! >> " +
                 path("hang.pid").string() +
                 "; trap '' TERM;"
                 " while :; do sleep 1; done ;;\n"
                 "  4) exit 0 ;;\n"
                 "  5) echo 'not an hdf5 file' > \"$out\"; exit 0 ;;\n"
                 "  6) sed 's/\"dump_level\": \"layer\"/\"dump_level\": \"summary\"/' "
                 "\"$scenario\" > \"$out.json\"; scenario=\"$out.json\" ;;\n"
                 "esac\n"
                 "exec " +
                 quote(SPLITCHECK_BINARY) +
                 " run \"$scenario\" --split \"$cuts\" --out \"$out\"\n");
  fs::permissions(engine, fs::perms::owner_all);
  json j = self_scenario();
  j["engine"]["command"] = {engine.string(), "{scenario}", "{cuts}", "{out}"};
  j["engine"]["timeout_s"] = 3;
  j.erase("expect");
  const fs::path s = write_scenario("fake.json", j);
  const CliResult r =
      cli("sweep " + quote(s.string()) + " --jobs 2 --report " + quote(path("rep").string()));
  ASSERT_EQ(r.code, 3) << r.out << r.err;
  const json rep = report("rep");
  std::map<std::string, json> by_key;
  for (const json& c : rep["cases"]) by_key[c["key"]] = c;
  auto message = [&](const std::string& key) { return by_key[key]["message"].get<std::string>(); };
  EXPECT_EQ(by_key["split-2"]["verdict"], "error");
  EXPECT_NE(message("split-2").find("split-2 (0-2|2-8): engine exited with status 1"),
            std::string::npos)
      << message("split-2");
  EXPECT_EQ(by_key["split-2"]["stderr_tail"], "engine: CUDA error <&> at stage 1\n");
  EXPECT_NE(message("split-3").find("split-3 (0-3|3-8): engine timed out after 3 s"),
            std::string::npos)
      << message("split-3");
  EXPECT_NE(message("split-4").find("split-4 (0-4|4-8): engine exited with status 0 but wrote "
                                    "no dump"),
            std::string::npos)
      << message("split-4");
  EXPECT_EQ(by_key["split-5"]["verdict"], "error");
  EXPECT_NE(message("split-5").find("split-5 (0-5|5-8): corrupt dump"), std::string::npos)
      << message("split-5");
  // A dataset PP=1 has and the partition lacks is a divergence, not a pass.
  EXPECT_EQ(by_key["split-6"]["verdict"], "diverged") << by_key["split-6"].dump();
  EXPECT_EQ(keys_with(rep, "pass"), (std::vector<std::string>{"split-1", "split-7"}));
  // The stderr reaches every report form escaped.
  EXPECT_NE(file_text(path("rep") / "report.html").find("CUDA error &lt;&amp;&gt; at stage 1"),
            std::string::npos);
  EXPECT_NE(file_text(path("rep") / "junit.xml").find("CUDA error &lt;&amp;&gt; at stage 1"),
            std::string::npos);
  EXPECT_NE(file_text(path("rep") / "summary.md").find("CUDA error &lt;&amp;&gt; at stage 1"),
            std::string::npos);
  EXPECT_NE(r.out.find("| engine: CUDA error <&> at stage 1"), std::string::npos) << r.out;
  EXPECT_EQ(file_text(path("rep") / "runs" / "split-2.stderr"),
            "engine: CUDA error <&> at stage 1\n");
  // The hung engine and the child it started are gone.
  std::ifstream pids(path("hang.pid"));
  pid_t leader = 0, child = 0;
  ASSERT_TRUE(pids >> leader >> child);
  EXPECT_TRUE(process_gone(leader));
  EXPECT_TRUE(process_gone(child));
}

// An engine that crashes at PP=1 gave no reference: the sweep's verdict is "error" in every
// form, and its expect block is reported as not evaluated for that reason, never as a
// divergence.
TEST_F(ExternalSweepTest, AFailingPp1RunJudgesNothing) {
  json j = self_scenario();
  j["engine"]["command"] = {"/bin/sh", "-c", "echo 'no weights' >&2; exit 2"};
  j["expect"] = {{"verdict", "conformant"}};
  const fs::path s = write_scenario("bad.json", j);
  const CliResult r = cli("sweep " + quote(s.string()) + " --report " + quote(path("rep")));
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  const json rep = report("rep");
  EXPECT_EQ(rep["verdict"], "error");
  EXPECT_EQ(rep["exit_code"], 3);
  EXPECT_EQ(rep["reference_failure"], "engine exited with status 2");
  EXPECT_EQ(rep["expect"]["failures"],
            json::array({"not evaluated: PP=1 gave no reference, nothing judged (engine exited "
                         "with status 2)"}));
  EXPECT_EQ(r.out.find("divergent"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("result: error: PP=1 gave no reference, no split point judged: engine "
                       "exited with status 2"),
            std::string::npos)
      << r.out;
  EXPECT_NE(file_text(path("rep") / "summary.md").find("ERROR: PP=1 GAVE NO REFERENCE"),
            std::string::npos);
  EXPECT_NE(file_text(path("rep") / "report.html").find("ERROR: PP=1 gave no reference"),
            std::string::npos);
  EXPECT_NE(file_text(path("rep") / "junit.xml").find("name=\"pp1\""), std::string::npos);
  for (const char* file : {"summary.md", "report.html", "junit.xml"})
    EXPECT_EQ(file_text(path("rep") / file).find("DIVERGENT"), std::string::npos) << file;
  // bisect names no cause and writes no repro for a run that judged nothing.
  const fs::path repro = path("bad-repro.json");
  const CliResult b = cli("bisect " + quote(s.string()) + " --out " + quote(repro.string()));
  EXPECT_EQ(b.code, 3) << b.out << b.err;
  EXPECT_NE(b.out.find(": error: PP=1 gave no reference (engine exited with status "
                       "2), no split point judged: no cause named, no repro written"),
            std::string::npos)
      << b.out;
  EXPECT_FALSE(fs::exists(repro));
  const size_t pp1 = r.out.find("\nPP=1:");
  ASSERT_NE(pp1, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("engine exited with status 2", pp1), r.out.find_first_not_of(' ', pp1 + 6))
      << r.out;
  EXPECT_NE(r.out.find("| no weights"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 pass, 0 diverged, 0 config-rejected, 7 error"), std::string::npos)
      << r.out;
}

// A float32 engine (tests/runner/float32_engine.py) whose stage after a cut at layer 3
// computes one element of layer 3's attn_out one float32 ULP off PP=1. Recorded in its own
// dtype, the sweep names that element at its site; narrowed to bf16 (both values round to
// the same bf16), the sweep passes, and every report form says those datasets were compared
// after rounding, the headline included: never a plain clean pass.
class Float32EngineTest : public ExternalSweepTest {
 protected:
  CliResult sweep(const std::string& name, bool narrow) {
    json engine = {
        {"command",
         {"/usr/bin/python3",
          (fs::path(SPLITCHECK_SOURCE_DIR) / "tests" / "runner" / "float32_engine.py").string(),
          "--cuts", "{cuts}", "--out", "{out}"}},
        {"timeout_s", 60},
        {"num_hidden_layers", 6}};
    if (narrow) engine["command"].push_back("--narrow");
    const json j = {{"engine", engine},
                    {"partitions", {{"pp", 2}, {"splits", {{3}}}}},
                    {"checks", {"tensors"}}};
    const fs::path s = write_scenario(name + ".json", j);
    return cli("sweep " + quote(s.string()) + " --jobs 2 --report " + quote(path(name).string()));
  }
  void SetUp() override {
    ExternalSweepTest::SetUp();  // the test's own temporary directory
    if (std::system("/usr/bin/python3 -c 'import h5py, numpy, xxhash' 2>/dev/null") != 0)
      GTEST_SKIP() << "Debian's python3-h5py, numpy or xxhash is not installed";
  }
};

TEST_F(Float32EngineTest, OneUlpAtALayerSiteIsCaughtThereInTheEnginesOwnDtype) {
  const CliResult r = sweep("native", false);
  ASSERT_EQ(r.code, 1) << r.out << r.err;
  const json rep = report("native");
  ASSERT_EQ(keys_with(rep, "diverged"), std::vector<std::string>{"split-3"});
  const json& c = rep["cases"][0];
  EXPECT_NE(c["message"].get<std::string>().find(
                "forward 0 layer 3 attn_out token 1 channel 0: 0x3d97cf8a != 0x3d97cf8b"),
            std::string::npos)
      << c.dump();
  EXPECT_EQ(c["first_divergence"]["dtype"], "float32");
  EXPECT_FALSE(rep.contains("rounded")) << rep.dump();
  for (const char* file : {"summary.md", "report.html", "junit.xml"})
    EXPECT_EQ(file_text(path("native") / file).find("ROUNDING"), std::string::npos) << file;
}

TEST_F(Float32EngineTest, NarrowedRecordsPassOnlyAfterRoundingInEveryReportForm) {
  const CliResult r = sweep("narrow", true);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json rep = report("narrow");
  EXPECT_EQ(rep["counts"]["pass"], 1);
  // 6 layers x 5 sites, each narrowed from float32.
  ASSERT_TRUE(rep.contains("rounded")) << rep.dump();
  EXPECT_EQ(rep["rounded"]["datasets"], 30);
  EXPECT_EQ(rep["rounded"]["cases"], 1);
  EXPECT_EQ(rep["rounded"]["examples"][0],
            "/forward/0/layers/0/pre_attn: float32 stored as bfloat16");
  for (const json& c : rep["cases"]) {
    EXPECT_EQ(c["rounded"]["datasets"], 30) << c.dump();
    EXPECT_NE(c["message"].get<std::string>().find("30 datasets compared AFTER ROUNDING"),
              std::string::npos)
        << c.dump();
  }
  const std::string line = "COMPARED AFTER ROUNDING: 30 datasets in 1 split point were";
  EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("30 datasets compared AFTER ROUNDING"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("summary: 1 pass, 0 diverged"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(1 compared after rounding, not on the engine's own bits)"),
            std::string::npos)
      << r.out;
  for (const char* file : {"summary.md", "report.html", "junit.xml"}) {
    const std::string text = file_text(path("narrow") / file);
    EXPECT_NE(text.find(line), std::string::npos) << file << ":\n" << text;
    EXPECT_NE(text.find("compared after rounding: 30 datasets"), std::string::npos) << file;
  }
  EXPECT_NE(file_text(path("narrow") / "summary.md").find("CONFORMANT AFTER ROUNDING"),
            std::string::npos);
  EXPECT_NE(file_text(path("narrow") / "report.html").find("CONFORMANT AFTER ROUNDING"),
            std::string::npos);
}

// examples/torch_pp, a PyTorch pipeline-parallel engine nobody in this project's C++ wrote,
// swept through the runner exactly as committed: fixed, every split point bit-identical;
// with the receiver's zero delta dropped, identical only at the block-aligned cuts with a
// dispatch change at the second stage's first layer; with the prefix tap, the tap check
// failing exactly at the cuts equal to a capture id. Each scenario's expect block says so.
class TorchPipelineTest : public ExternalSweepTest,
                          public ::testing::WithParamInterface<const char*> {};

TEST_P(TorchPipelineTest, SweepConcludesWhatItsExpectSays) {
  if (std::system("/usr/bin/python3 -c 'import torch, h5py, numpy, xxhash' 2>/dev/null") != 0)
    GTEST_SKIP() << "Debian's python3-torch, h5py, numpy or xxhash is not installed "
                    "(scripts/setup.sh installs them)";
  const std::string name = GetParam();
  const fs::path scenario = fs::path(SPLITCHECK_SOURCE_DIR) / "scenarios" / (name + ".json");
  const json declared = json::parse(file_text(scenario))["expect"];
  const CliResult r = cli("sweep " + quote(scenario.string()) + " --jobs 2 --report " +
                          quote(path("rep").string()));
  const json rep = report("rep");
  EXPECT_TRUE(rep["expect"]["met"].get<bool>()) << rep["expect"].dump() << r.out;
  EXPECT_EQ(r.code, declared["verdict"] == "conformant" ? 0 : 1) << r.out << r.err;
  EXPECT_EQ(rep["counts"]["error"], 0) << r.out;
  EXPECT_EQ(rep["counts"]["total"], 15);
  if (name.ends_with("no-zero-delta")) {
    for (const json& c : rep["cases"]) {
      if (c["verdict"] != "diverged") continue;
      EXPECT_NE(c["message"].get<std::string>().find("native at PP=1, attn_res.fallback here"),
                std::string::npos)
          << c["key"] << ": " << c["message"];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Committed, TorchPipelineTest,
                         ::testing::Values("external-torch-pp", "external-torch-pp-no-zero-delta",
                                           "external-torch-pp-prefix-tap"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace splitcheck
