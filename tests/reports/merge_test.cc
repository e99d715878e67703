// Sharded and merged equals unsharded: pp4-pairwise swept as shards 0/2 and 1/2, merged
// (in process and through `splitcheck merge`), equals the unsharded report once the
// volatile fields (timing, cases[].seconds, command) are removed. Bad inputs to merge
// (wrong format_version, truncated file, mismatched scenario sha256, missing or
// duplicated shards) exit 2 with the file named.
#include "harness/reports/merge.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>

#include "tests/cli_fixture.h"
#include "tests/reports/report_fixture.h"

namespace splitcheck::testing {
namespace {

namespace fs = std::filesystem;

using cli_test::CliResult;
using cli_test::quote;

nlohmann::json stable(nlohmann::json j) {
  j.erase("timing");
  j.erase("command");
  j.erase("placement");  // each process's own
  j.erase("placement_by_shard");
  for (auto& c : j["cases"]) c.erase("seconds");
  return j;
}

nlohmann::json load(const fs::path& p) { return nlohmann::json::parse(read_text(p)); }

class MergeTest : public cli_test::CliFixture {
 protected:
  MergeTest() : CliFixture("splitcheck-merge-test-") {}

  static const fs::path& shard(int i) {
    return sweep_reports("pairwise-shard" + std::to_string(i), "pp4-pairwise", "", i, 2);
  }
  static fs::path shard_json(int i) { return shard(i) / "report.json"; }

  // A copy of shard 1's report.json, edited by `edit`, written as `name`.
  fs::path edited_shard1(const std::string& name,
                         const std::function<void(nlohmann::json&)>& edit) const {
    nlohmann::json j = load(shard_json(1));
    edit(j);
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << j.dump(2);
    return p;
  }

  void expect_refused(const CliResult& r, const std::vector<std::string>& needles) const {
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_EQ(r.err.rfind("splitcheck: error: ", 0), 0u) << r.err;
    for (const std::string& n : needles)
      EXPECT_NE(r.err.find(n), std::string::npos) << n << "\n" << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "merged" / "report.json"));
  }
};

TEST_F(MergeTest, ShardedAndMergedEqualsUnsharded) {
  const nlohmann::json whole = load(pairwise_reports() / "report.json");
  const nlohmann::json s0 = load(shard_json(0)), s1 = load(shard_json(1));
  ASSERT_GT(s0["cases"].size(), 0u);
  ASSERT_GT(s1["cases"].size(), 0u);
  EXPECT_EQ(s0["cases"].size() + s1["cases"].size(), whole["cases"].size());

  // Either order of the inputs gives the same report.
  for (const auto& order :
       {std::vector<nlohmann::json>{s0, s1}, std::vector<nlohmann::json>{s1, s0}}) {
    Result<nlohmann::json> merged =
        merge_reports(order, {"a/report.json", "b/report.json"}, (dir_ / "merged").string());
    ASSERT_TRUE(merged.is_ok()) << merged.status().message();
    EXPECT_EQ(stable(*merged), stable(whole)) << "merged:\n"
                                              << stable(*merged).dump(1) << "\nunsharded:\n"
                                              << stable(whole).dump(1);
    EXPECT_EQ((*merged)["timing"]["shards"], 2);
    EXPECT_EQ((*merged)["command"].get<std::string>().find("--shard"), std::string::npos);
  }

  // Through the CLI: same report, and the exit code is the merged verdict's.
  const CliResult r =
      cli("merge " + quote(shard_json(0).string()) + " " + quote(shard_json(1).string()) +
          " --report " + quote((dir_ / "merged").string()));
  EXPECT_EQ(r.code, whole["exit_code"].get<int>()) << r.out << r.err;
  const nlohmann::json written = load(dir_ / "merged" / "report.json");
  EXPECT_EQ(stable(written), stable(whole));
  for (const char* f : {"report.html", "junit.xml", "summary.md"})
    EXPECT_TRUE(fs::exists(dir_ / "merged" / f)) << f;
  // JUnit carries no volatile field but the per-case time: the test case lists agree.
  EXPECT_EQ(count_of(read_text(dir_ / "merged" / "junit.xml"), "<testcase"),
            count_of(read_text(pairwise_reports() / "junit.xml"), "<testcase"));
}

// End to end through the CLI, with a filter and three shards of a diverging sweep: the
// merged report equals the unsharded one, `command` reproduces the unsharded run, and
// merge exits 1 like that sweep.
TEST_F(MergeTest, CliShardsWithFilterMergeToTheUnshardedReport) {
  const std::string scenario =
      quote(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/fault-handoff-no-zero-delta.json");
  const std::string whole_dir = (dir_ / "whole").string();
  const CliResult whole =
      cli("sweep " + scenario + " --filter split-1 --threads 2 --report " + quote(whole_dir));
  ASSERT_EQ(whole.code, 1) << whole.out << whole.err;
  std::string inputs;
  for (int i = 0; i < 3; ++i) {
    const std::string d = (dir_ / ("shard" + std::to_string(i))).string();
    const CliResult r = cli("sweep " + scenario + " --shard " + std::to_string(i) +
                            "/3 --filter split-1 --threads 2 --report " + quote(d));
    ASSERT_EQ(r.code, 1) << r.out << r.err;
    inputs += quote(d + "/report.json") + " ";
  }
  const std::string merged_dir = (dir_ / "merged").string();
  const CliResult r = cli("merge " + inputs + "--report " + quote(merged_dir));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const nlohmann::json w = load(fs::path(whole_dir) / "report.json");
  const nlohmann::json m = load(fs::path(merged_dir) / "report.json");
  EXPECT_EQ(stable(m), stable(w));
  EXPECT_EQ(m["counts"]["total"], w["counts"]["total"]);
  EXPECT_EQ(m["timing"]["shards"], 3);
  if (std::system("/usr/bin/python3 -c 'import jsonschema' >/dev/null 2>&1") == 0) {
    const std::string validate =
        "/usr/bin/python3 -c 'import json,sys,jsonschema; "
        "jsonschema.Draft202012Validator(json.load(open(sys.argv[1])))"
        ".validate(json.load(open(sys.argv[2])))' " +
        quote(std::string(SPLITCHECK_SOURCE_DIR) + "/harness/reports/report.schema.json") + " " +
        quote(merged_dir + "/report.json");
    EXPECT_EQ(std::system(validate.c_str()), 0) << validate;
  }
  std::string expected_command = w["command"].get<std::string>();
  expected_command.replace(expected_command.find(whole_dir), whole_dir.size(), merged_dir);
  EXPECT_EQ(m["command"], expected_command);

  // Two of the three shards: the third's split points are missing.
  const CliResult partial = cli("merge " + quote((dir_ / "shard0" / "report.json").string()) + " " +
                                quote((dir_ / "shard2" / "report.json").string()) + " --report " +
                                quote((dir_ / "partial").string()));
  EXPECT_EQ(partial.code, 2) << partial.out << partial.err;
  EXPECT_NE(partial.err.find("missing"), std::string::npos) << partial.err;
}

// A speculative serving sweep, sharded and merged: the request x split-point matrix holds
// every shard's rows in the unsharded order, the batch-invariance check comes through,
// and `expect` (batch_invariant, acceptance_rate_at_least: both read more than the cases)
// is met as in the unsharded sweep.
TEST_F(MergeTest, ServingShardsMergeToTheUnshardedReport) {
  Result<Scenario> full =
      load_scenario(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/serving.json");
  ASSERT_TRUE(full.is_ok()) << full.status().message();
  nlohmann::json j = resolved_scenario_json(*full);
  j["workload"]["prompts"] = 4;
  j["workload"]["max_new_tokens"] = 6;
  j["partitions"] = {{"pp", 2}, {"splits", {{8}, {13}, {24}}}};
  j["expect"] = {
      {"verdict", "conformant"}, {"batch_invariant", true}, {"acceptance_rate_at_least", 0.0}};
  Result<Scenario> s = parse_scenario(j, "serving-small", SPLITCHECK_SOURCE_DIR);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  auto report = [&](int index, int count) {
    SweepOptions o;
    o.threads = 2;
    o.shard_index = index;
    o.shard_count = count;
    Result<SweepResult> r = run_sweep(*s, o);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return sweep_report(*r, ReportContext{"splitcheck sweep serving-small.json"});
  };
  const nlohmann::json whole = report(0, 1);
  ASSERT_EQ(whole["exit_code"], 0) << whole["expect"].dump();
  ASSERT_EQ(whole["serving"]["matrix"].size(), 3u);
  const nlohmann::json s0 = report(0, 2), s1 = report(1, 2);
  Result<nlohmann::json> merged = merge_reports({s1, s0}, {"b/report.json", "a/report.json"}, "");
  ASSERT_TRUE(merged.is_ok()) << merged.status().message();
  EXPECT_EQ((*merged)["exit_code"], 0) << (*merged)["expect"].dump();
  EXPECT_EQ((*merged)["expect"], whole["expect"]);
  EXPECT_EQ((*merged)["serving"], whole["serving"]);
  EXPECT_EQ((*merged)["acceptance"], whole["acceptance"]);

  // A shard whose invariance check found a difference fails the merged sweep.
  nlohmann::json bad = s1;
  bad["serving"]["batch_invariance"]["identical"] = 3;
  bad["serving"]["batch_invariance"]["differences"] = {"request 2: differs alone"};
  Result<nlohmann::json> failing = merge_reports({s0, bad}, {"a/report.json", "b/report.json"}, "");
  ASSERT_TRUE(failing.is_ok()) << failing.status().message();
  EXPECT_EQ((*failing)["exit_code"], 1);
  EXPECT_EQ((*failing)["serving"]["batch_invariance"]["identical"], 3);

  // A shard on a backend that does not promise batch invariance (cuda): a request that
  // differs alone is measured, carried into the merged report, and fails the merged sweep
  // only because this scenario's expect says batch_invariant.
  EXPECT_EQ(whole["serving"]["batch_invariance"]["required"], true);
  nlohmann::json measured = s1;
  measured["serving"]["batch_invariance"]["required"] = false;
  measured["serving"]["batch_invariance"]["identical"] = 3;
  measured["serving"]["batch_invariance"]["not_invariant"] = {"request 2: differs alone"};
  Result<nlohmann::json> expected =
      merge_reports({s0, measured}, {"a/report.json", "b/report.json"}, "");
  ASSERT_TRUE(expected.is_ok()) << expected.status().message();
  EXPECT_EQ((*expected)["exit_code"], 1);
  const nlohmann::json& bi = (*expected)["serving"]["batch_invariance"];
  EXPECT_EQ(bi["required"], false);
  EXPECT_EQ(bi["not_invariant"], nlohmann::json::array({"request 2: differs alone"}));
  EXPECT_TRUE(bi["differences"].empty());
  EXPECT_NE((*expected)["expect"].dump().find("1 of"), std::string::npos)
      << (*expected)["expect"].dump();

  // A shard without its matrix rows is refused, naming it.
  nlohmann::json rowless = s1;
  rowless["serving"]["matrix"] = nlohmann::json::array();
  Result<nlohmann::json> refused =
      merge_reports({s0, rowless}, {"a/report.json", "b/report.json"}, "");
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("b/report.json"), std::string::npos)
      << refused.status().message();
}

TEST_F(MergeTest, WrongFormatVersionExits2NamingTheFile) {
  const fs::path bad =
      edited_shard1("v99.json", [](nlohmann::json& j) { j["format_version"] = 99; });
  expect_refused(cli("merge " + quote(shard_json(0).string()) + " " + quote(bad.string()) +
                     " --report " + quote((dir_ / "merged").string())),
                 {bad.string(), "format_version"});
}

TEST_F(MergeTest, TruncatedFileExits2NamingFileAndPosition) {
  const std::string text = read_text(shard_json(1));
  const fs::path bad = dir_ / "truncated.json";
  std::ofstream(bad, std::ios::binary) << text.substr(0, text.size() / 2);
  const CliResult r = cli("merge " + quote(shard_json(0).string()) + " " + quote(bad.string()) +
                          " --report " + quote((dir_ / "merged").string()));
  expect_refused(r, {bad.string(), "at byte"});
}

// What ends a sweep beside its cases travels through merge to the verdict the unsharded
// sweep gives: a shard stopped by SIGINT makes the merged sweep interrupted (exit 130), and
// shards whose PP=1 gave no reference make it an error (exit 3) with expect not evaluated,
// never a divergence.
TEST_F(MergeTest, AnInterruptedShardOrAFailedPp1GivesTheUnshardedVerdict) {
  const nlohmann::json s0 = load(shard_json(0));
  nlohmann::json s1 = load(shard_json(1));
  nlohmann::json stopped = s1;
  stopped["verdict"] = "interrupted";
  stopped["exit_code"] = 130;
  for (nlohmann::json& c : stopped["cases"]) c["verdict"] = "interrupted";
  Result<nlohmann::json> merged = merge_reports({s0, stopped}, {"a", "b"}, "");
  ASSERT_TRUE(merged.is_ok()) << merged.status().message();
  EXPECT_EQ((*merged)["verdict"], "interrupted");
  EXPECT_EQ((*merged)["exit_code"], 130);

  std::vector<nlohmann::json> failed = {s0, s1};
  for (nlohmann::json& r : failed) {
    r["verdict"] = "error";
    r["exit_code"] = 3;
    r["reference_failure"] = "engine exited with status 2";
    for (nlohmann::json& c : r["cases"]) c["verdict"] = "error";
  }
  merged = merge_reports(failed, {"a", "b"}, "");
  ASSERT_TRUE(merged.is_ok()) << merged.status().message();
  EXPECT_EQ((*merged)["verdict"], "error");
  EXPECT_EQ((*merged)["exit_code"], 3);
  EXPECT_EQ((*merged)["reference_failure"], "engine exited with status 2");
  EXPECT_EQ((*merged)["expect"]["failures"],
            nlohmann::json::array({"not evaluated: PP=1 gave no reference, nothing judged "
                                   "(engine exited with status 2)"}));
}

TEST_F(MergeTest, MismatchedScenarioHashExits2NamingBothFiles) {
  const fs::path bad = edited_shard1(
      "other.json", [](nlohmann::json& j) { j["scenario"]["sha256"] = std::string(64, '0'); });
  expect_refused(cli("merge " + quote(shard_json(0).string()) + " " + quote(bad.string()) +
                     " --report " + quote((dir_ / "merged").string())),
                 {shard_json(0).string(), bad.string(), "sha256"});
}

TEST_F(MergeTest, MissingShardExits2) {
  expect_refused(cli("merge " + quote(shard_json(0).string()) + " --report " +
                     quote((dir_ / "merged").string())),
                 {"missing"});
}

TEST_F(MergeTest, DuplicatedShardExits2) {
  expect_refused(
      cli("merge " + quote(shard_json(0).string()) + " " + quote(shard_json(1).string()) + " " +
          quote(shard_json(0).string()) + " --report " + quote((dir_ / "merged").string())),
      {"appears twice"});
}

TEST_F(MergeTest, NotAReportExits2) {
  const fs::path bad =
      edited_shard1("other-format.json", [](nlohmann::json& j) { j["format"] = "something.else"; });
  expect_refused(
      cli("merge " + quote(bad.string()) + " --report " + quote((dir_ / "merged").string())),
      {bad.string(), "splitcheck.report"});
}

}  // namespace
}  // namespace splitcheck::testing
