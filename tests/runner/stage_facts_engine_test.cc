// The stage checks through the runner, from the facts a dump records in /stages/<s>/
// (docs/dump-format.md, "Stage facts"): engines that wrap `splitcheck run` (8-layer K3-mini,
// split point 4) and then edit what their stages say. A lie that contradicts another fact
// of the same dump never passes; a dump without the facts leaves memory "not judged" in
// every report form, never passed. And the runner protocol's configuration refusal (exit
// status 4, the reason at {out}.refusal): a refusal without its record is an error, PP=1
// refusing judges nothing, a refusal's reason reaches the reports escaped.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::file_text;
using cli_test::quote;
using cli_test::write_text;
using nlohmann::json;

// What opens every edit: the dump `splitcheck run` wrote (argv[1]) copied to argv[2] and
// opened for editing as `f`; argv[3] is the case's cuts ("" at PP=1).
constexpr const char* kEditHead = R"(import sys, os, shutil, h5py
src, dst, cuts = sys.argv[1:4]
shutil.copyfile(src, dst + ".tmp")
with h5py.File(dst + ".tmp", "r+") as f:
    stages = [f[f"stages/{s}"] for s in range(len(f["stages"]))]
)";
constexpr const char* kEditTail = R"(
os.rename(dst + ".tmp", dst)
)";

class StageFactsEngineTest : public cli_test::CliFixture {
 protected:
  StageFactsEngineTest() : CliFixture("splitcheck-stage-facts-") {}

  void SetUp() override {
    CliFixture::SetUp();
    if (std::system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") != 0)
      GTEST_SKIP() << "Debian's python3-h5py is not installed (scripts/setup.sh)";
  }

  // scenarios/external-self.json at split point 4 with the speculative block and faults
  // given, its engine `splitcheck run` followed by `edit` (Python over `stages`, indented
  // four spaces, in every dump including PP=1's).
  json scenario_with(const json& speculative, const json& faults, const std::string& edit) {
    json j = json::parse(
        file_text(fs::path(SPLITCHECK_SOURCE_DIR) / "scenarios" / "external-self.json"));
    j.erase("expect");
    j["speculative"] = speculative;
    j["faults"] = faults;
    j["workload"]["max_new_tokens"] = 4;
    j["partitions"] = {{"pp", 2}, {"splits", json::parse("[[4]]")}};
    write_text(path("edit.py"), std::string(kEditHead) + edit + kEditTail);
    const fs::path engine = path("engine.sh");
    write_text(engine, "#!/bin/sh\nscenario=\"$1\" cuts=\"$2\" out=\"$3\"\n" +
                           quote(SPLITCHECK_BINARY) +
                           " run \"$scenario\" --split \"$cuts\" --out \"$out.full\" >/dev/null || "
                           "exit $?\nexec /usr/bin/python3 " +
                           quote(path("edit.py").string()) + " \"$out.full\" \"$out\" \"$cuts\"\n");
    fs::permissions(engine, fs::perms::owner_all);
    j["engine"]["command"] = {engine.string(), "{scenario}", "{cuts}", "{out}"};
    return j;
  }

  CliResult sweep(const json& scenario) const {
    const fs::path s = path("scenario.json");
    write_text(s, scenario.dump(2));
    return cli("sweep " + quote(s.string()) + " --report " + quote(path("rep").string()));
  }

  json the_case() const {
    const json rep = json::parse(file_text(path("rep") / "report.json"));
    EXPECT_EQ(rep["cases"].size(), 1u);
    return rep["cases"][0];
  }
};

bool has(const json& list, const std::string& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

const json kDspark = {{"method", "dspark"}, {"gamma", 7}};

TEST_F(StageFactsEngineTest, HiddenExtraBytesThatContradictThePlacedEmbeddingFailMemory) {
  // A context-only producer that keeps the last stage's embedding copy, and says its
  // placement allows exactly the bytes it holds: its placed_embedding still says "missing".
  json producer = kDspark;
  producer["context_only_producer"] = true;
  const CliResult r = sweep(scenario_with(producer, {"pd.producer_embedding"},
                                          "    if cuts:\n        stages[1].attrs.modify("
                                          "'placed_parameter_bytes', "
                                          "stages[1].attrs['parameter_bytes'])\n"));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json c = the_case();
  EXPECT_EQ(c["verdict"], "diverged") << c.dump();
  EXPECT_TRUE(has(c["failed_checks"], "memory")) << c.dump();
  EXPECT_NE(c["message"].get<std::string>().find("holds an embedding copy its placement does not "
                                                 "give it"),
            std::string::npos)
      << c["message"];
}

TEST_F(StageFactsEngineTest, AClearRefusalClaimedAgainstItsAnswerFailsEmbedding) {
  const CliResult r =
      sweep(scenario_with(kDspark, {"draft.vocab_from_embedding"},
                          "    if cuts:\n        stages[1].attrs.modify('refusal_clear', 1)\n"));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json c = the_case();
  EXPECT_EQ(c["verdict"], "diverged") << c.dump();
  EXPECT_TRUE(has(c["failed_checks"], "embedding")) << c.dump();
  EXPECT_NE(c["message"].get<std::string>().find("its refusal_clear says 1, its answer does not"),
            std::string::npos)
      << c["message"];
}

TEST_F(StageFactsEngineTest, ADrafterOnAnotherStorageThanItClaimsFailsEmbedding) {
  // A drafter said to be bound to the target's object, over a storage label that is not the
  // stage's embedding's.
  const CliResult r = sweep(
      scenario_with(kDspark, json::array(),
                    "    if cuts:\n        stages[1].attrs['embedding_storage'] = 'storage:0'\n"
                    "        stages[1].attrs['drafter_embedding_storage'] = 'storage:7'\n"));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json c = the_case();
  EXPECT_EQ(c["verdict"], "diverged") << c.dump();
  EXPECT_EQ(c["failed_checks"], json::array({"embedding"})) << c.dump();
  EXPECT_NE(c["message"].get<std::string>().find("claims the target's object, but its storage "
                                                 "storage:7"),
            std::string::npos)
      << c["message"];
}

TEST_F(StageFactsEngineTest, WithoutTheNewerFactsMemoryIsNotJudgedInEveryReportForm) {
  // A writer of the older layout: none of the newer facts on any stage of any dump.
  const CliResult r = sweep(scenario_with(
      kDspark, json::array(),
      "    for g in stages:\n"
      "        for a in ['placed_parameter_bytes', 'placed_embedding', 'held_tensors',\n"
      "                  'drafter_method', 'refusal_probe', 'refusal_status', 'refusal_clear']:\n"
      "            if a in g.attrs:\n"
      "                del g.attrs[a]\n"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json rep = json::parse(file_text(path("rep") / "report.json"));
  EXPECT_FALSE(has(rep["checks"], "memory")) << rep["checks"];
  EXPECT_TRUE(has(rep["checks"], "embedding")) << rep["checks"];
  EXPECT_TRUE(has(rep["checks"], "config")) << rep["checks"];
  EXPECT_NE(rep.dump().find("placed_parameter_bytes"), std::string::npos);
  EXPECT_NE(r.out.find("memory: not judged"), std::string::npos) << r.out;
  for (const char* file : {"summary.md", "report.html", "junit.xml"})
    EXPECT_NE(file_text(path("rep") / file).find("memory: not judged"), std::string::npos) << file;
}

TEST_F(StageFactsEngineTest, TheFactsAsWrittenAreJudgedAndPass) {
  const CliResult r = sweep(scenario_with(kDspark, json::array(), "    pass\n"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json rep = json::parse(file_text(path("rep") / "report.json"));
  for (const char* check : {"memory", "embedding", "config", "acceptance"})
    EXPECT_TRUE(has(rep["checks"], check)) << check << " in " << rep["checks"];
}

// Engines given as shell scripts ($SPLITCHECK is the real CLI), swept at split point 4.
class ConfigRefusalTest : public cli_test::CliFixture {
 protected:
  ConfigRefusalTest() : CliFixture("splitcheck-refusal-") {}

  json sweep(const std::string& script) {
    json j = json::parse(
        file_text(fs::path(SPLITCHECK_SOURCE_DIR) / "scenarios" / "external-self.json"));
    j.erase("expect");
    j["partitions"] = {{"pp", 2}, {"splits", json::parse("[[4]]")}};
    const fs::path engine = path("engine.sh");
    write_text(engine, "#!/bin/sh\nscenario=\"$1\" cuts=\"$2\" out=\"$3\"\nSPLITCHECK=" +
                           quote(SPLITCHECK_BINARY) + "\n" + script);
    fs::permissions(engine, fs::perms::owner_all);
    j["engine"]["command"] = {engine.string(), "{scenario}", "{cuts}", "{out}"};
    write_text(path("scenario.json"), j.dump(2));
    last_ = cli("sweep " + quote(path("scenario.json").string()) + " --report " +
                quote(path("rep").string()));
    const json rep = json::parse(file_text(path("rep") / "report.json"));
    EXPECT_EQ(rep["cases"].size(), 1u);
    return rep["cases"][0];
  }

  CliResult last_;
};

constexpr const char* kRunAsAsked =
    "exec \"$SPLITCHECK\" run \"$scenario\" --split \"$cuts\" --out \"$out\"\n";

TEST_F(ConfigRefusalTest, ARefusalIsConfigRejectedWithItsReasonEscaped) {
  const json c = sweep(std::string("if [ -n \"$cuts\" ]; then printf 'tap 4 \\033[31mat a stage "
                                   "end\\n' >\"$out.refusal\"; exit 4; fi\n") +
                       kRunAsAsked);
  EXPECT_EQ(last_.code, 1) << last_.out << last_.err;
  EXPECT_EQ(c["verdict"], "config-rejected") << c.dump();
  EXPECT_EQ(c["failed_checks"], json::array({"config"})) << c.dump();
  EXPECT_EQ(c["message"], "tap 4 \\x1b[31mat a stage end") << c.dump();
  EXPECT_EQ(last_.out.find('\x1b'), std::string::npos) << "the console escapes the reason";
}

TEST_F(ConfigRefusalTest, ExitStatusFourWithoutARefusalRecordIsAnError) {
  const json c = sweep(std::string("[ -n \"$cuts\" ] && exit 4\n") + kRunAsAsked);
  EXPECT_EQ(last_.code, 3) << last_.out << last_.err;
  EXPECT_EQ(c["verdict"], "error") << c.dump();
  EXPECT_NE(c["message"].get<std::string>().find("but wrote no refusal record"), std::string::npos)
      << c.dump();
}

TEST_F(ConfigRefusalTest, APp1ThatRefusesJudgesNothing) {
  const json c =
      sweep(std::string("if [ -z \"$cuts\" ]; then echo 'no PP=1 here' >\"$out.refusal\"; "
                        "exit 4; fi\n") +
            kRunAsAsked);
  EXPECT_EQ(last_.code, 3) << last_.out << last_.err;
  EXPECT_EQ(c["verdict"], "error") << c.dump();
  EXPECT_NE(
      c["message"].get<std::string>().find("the PP=1 run refused its configuration: no PP=1 here"),
      std::string::npos)
      << c.dump();
}

}  // namespace
}  // namespace splitcheck
