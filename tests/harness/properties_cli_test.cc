// `splitcheck properties`: JSON on stdout (and in --json FILE), exit 0 when measured; a
// scenario it cannot measure is invalid input (exit 2, one error line naming the place).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

class PropertiesCliTest : public cli_test::CliFixture {
 protected:
  PropertiesCliTest() : CliFixture("splitcheck-properties-cli-test-") {}

  // The default scenario with its prompts cut to the last `tokens` tokens.
  std::string scenario_with_prompt_tokens(int tokens) {
    const std::string dir = std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/";
    nlohmann::json j = nlohmann::json::parse(cli_test::file_text(dir + "default.json"));
    j["workload"]["file"] = dir + j["workload"]["file"].get<std::string>();
    j["workload"]["max_prompt_tokens"] = tokens;
    const std::string p = path("s.json").string();
    cli_test::write_text(p, j.dump(2));
    return p;
  }
};

TEST_F(PropertiesCliTest, PrintsTheThreePropertiesAsJsonAndWritesTheFile) {
  const std::string s = scenario_with_prompt_tokens(10);
  const cli_test::CliResult r =
      cli("properties " + cli_test::quote(s) + " --json " + cli_test::quote(path("p.json")));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out, nlohmann::json::parse(cli_test::file_text(path("p.json"))));
  EXPECT_EQ(out["backend"], "cpu");
  EXPECT_EQ(out["prompt_tokens"], 10);
  ASSERT_EQ(out["properties"].size(), 3u);
  EXPECT_EQ(out["properties"][0]["name"], "decode_vs_prefill");
  EXPECT_EQ(out["properties"][0]["rows"], 5);
  EXPECT_EQ(out["properties"][2]["name"], "chunked_vs_whole");
  EXPECT_EQ(out["properties"][2]["rows"], 10);
}

TEST_F(PropertiesCliTest, AScenarioItCannotMeasureIsInvalidInput) {
  cli_test::expect_one_line_refusal(
      cli("properties " + cli_test::quote(scenario_with_prompt_tokens(1))),
      {"s.json", "/workload", "2 tokens"});
  cli_test::expect_one_line_refusal(cli("properties " + cli_test::quote(path("missing.json"))),
                                    {"missing.json"});
}

}  // namespace
}  // namespace splitcheck
