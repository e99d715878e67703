// A sweep whose selected checks compared no data (`"checks": ["config"]`) says "no data
// compared" in every report form, never "bit-identical (0 datasets)", and exits 1 unless
// its `expect` asks for exactly the verdict "no-data".
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::file_text;
using cli_test::quote;
using cli_test::write_text;

class NoDataSweepTest : public cli_test::CliFixture {
 protected:
  NoDataSweepTest() : CliFixture("splitcheck-no-data-sweep-test-") {}

  // A two-layer k3-tiny scenario, one short prompt, PP=2 (one split point), with these
  // checks and (when not null) this expect block.
  fs::path scenario(const std::string& name, const nlohmann::json& checks,
                    const nlohmann::json& expect = nullptr) const {
    nlohmann::json j = {
        {"name", name},
        {"model", {{"preset", "k3-tiny"}, {"overrides", {{"num_hidden_layers", 2}}}}},
        {"workload", {{"prompts", 1}, {"max_new_tokens", 2}, {"max_prompt_tokens", 8}}},
        {"partitions", {{"pp", 2}}},
        {"checks", checks},
    };
    if (!expect.is_null()) j["expect"] = expect;
    write_text(path(name + ".json"), j.dump(2));
    return path(name + ".json");
  }

  CliResult sweep(const fs::path& s, const std::string& report) const {
    return cli("sweep " + quote(s.string()) + " --threads 1 --report " +
               quote(path(report).string()));
  }
};

TEST_F(NoDataSweepTest, ConfigOnlySweepSaysNoDataComparedInEveryFormAndFails) {
  const CliResult r = sweep(scenario("config-only", {"config"}), "report");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("no data compared"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("bit-identical"), std::string::npos) << r.out;
  const fs::path dir = path("report");
  const std::string json_text = file_text(dir / "report.json");
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, false);
  ASSERT_TRUE(j.is_object()) << json_text;
  EXPECT_EQ(j["verdict"], "no-data");
  EXPECT_EQ(j["exit_code"], 1);
  EXPECT_EQ(j["expect"]["met"], false);
  ASSERT_EQ(j["cases"].size(), 1u);
  EXPECT_EQ(j["cases"][0]["message"], "no data compared");
  const std::string html = file_text(dir / "report.html");
  const std::string junit = file_text(dir / "junit.xml");
  const std::string md = file_text(dir / "summary.md");
  EXPECT_NE(html.find("NO DATA COMPARED"), std::string::npos);
  EXPECT_NE(junit.find("<failure type=\"no-data\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("<property name=\"verdict\" value=\"no-data\"/>"), std::string::npos);
  EXPECT_NE(md.find("NO DATA COMPARED"), std::string::npos) << md;
  for (const std::string& text : {json_text, html, junit, md}) {
    EXPECT_EQ(text.find("bit-identical (0 datasets)"), std::string::npos);
    EXPECT_EQ(text.find("CONFORMANT"), std::string::npos);
    EXPECT_NE(text.find("no data compared"), std::string::npos);
  }
}

TEST_F(NoDataSweepTest, OnlyAnExpectOfVerdictNoDataMakesItExitZero) {
  const CliResult asked = sweep(scenario("asked", {"config"}, {{"verdict", "no-data"}}), "asked");
  EXPECT_EQ(asked.code, 0) << asked.out << asked.err;
  EXPECT_NE(asked.out.find("no data compared"), std::string::npos) << asked.out;
  const nlohmann::json j =
      nlohmann::json::parse(file_text(path("asked") / "report.json"), nullptr, false);
  EXPECT_EQ(j["verdict"], "no-data");
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_EQ(file_text(path("asked") / "junit.xml").find("<failure"), std::string::npos);

  // Expecting a conformant sweep, or nothing in particular, is not enough.
  for (const nlohmann::json& expect :
       {nlohmann::json{{"verdict", "conformant"}}, nlohmann::json{{"identical_splits", 1}}}) {
    const CliResult r = sweep(scenario("other", {"config"}, expect), "other");
    EXPECT_EQ(r.code, 1) << expect.dump() << r.out << r.err;
  }
  // And a sweep that compared data does not meet an expect of no-data.
  const CliResult data =
      sweep(scenario("data", {"config", "tokens"}, {{"verdict", "no-data"}}), "data");
  EXPECT_EQ(data.code, 1) << data.out << data.err;
  EXPECT_NE(data.out.find("expected verdict no-data, got conformant"), std::string::npos)
      << data.out;
}

}  // namespace
}  // namespace splitcheck
