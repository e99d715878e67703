// One set of evidence, one verdict: every committed fault scenario swept two ways, by the
// built-in sweep and through the runner with `splitcheck run` itself as the external engine
// (scenarios/external-self.json's command), must give the same verdict and the same failed
// checks at every split point. Each scenario runs small: K3-mini at 8 layers (block 4), split
// points 2, 4 and 6 (10 layers balanced over 4 stages for the remainder fault), one prompt of
// a few tokens (8 requests for the serving faults). Each case prints a PARITY line:
// scripts/verdict-parity.sh gathers them into docs/bench/verdict-parity.txt.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "harness/gates/sensitivity.h"
#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::file_text;
using cli_test::quote;
using cli_test::write_text;
using nlohmann::json;

const fs::path kScenarios = fs::path(SPLITCHECK_SOURCE_DIR) / "scenarios";

// The committed fault scenarios by file name (the fault sensitivity table's list).
std::vector<std::string> fault_scenarios() {
  std::vector<std::string> names;
  for (const std::string& path : committed_fault_scenarios())
    names.push_back(fs::path(path).filename().string());
  return names;
}

// The committed scenario `name` made small enough to sweep in a few seconds and still show
// its fault; without its expect (written for 32 layers).
json small_scenario(const std::string& name) {
  json j = json::parse(file_text(kScenarios / name));
  j.erase("expect");
  json& w = j["workload"];
  if (w.contains("file")) w["file"] = (kScenarios / w["file"].get<std::string>()).string();
  const bool serving = j.contains("serving");
  // Serving: 8 requests of up to 24 prompt tokens, so that some prompt's prefill is chunked
  // (prefill.chunk_token_dropped shows only then).
  w["prompts"] = std::min(w.value("prompts", 1), serving ? 8 : 1);
  w["max_new_tokens"] = std::min(w.value("max_new_tokens", 4), serving ? 8 : 4);
  w["max_prompt_tokens"] = std::min(w.value("max_prompt_tokens", 16), serving ? 24 : 16);
  json& overrides = j["model"]["overrides"];
  if (j["partitions"].value("splits", json()) == "balanced") {
    overrides["num_hidden_layers"] = 10;  // floor(10/4) = 2 layers a stage: 8-9 dropped
    overrides["attn_res_block_size"] = 2;
  } else {
    overrides["num_hidden_layers"] = 8;
    overrides["attn_res_block_size"] = 4;
    j["partitions"] = {{"pp", 2}, {"splits", json::parse("[[2], [4], [6]]")}};
  }
  return j;
}

// `spec` with `splitcheck run` as its external engine.
json as_external(json spec) {
  const json& o = spec["model"]["overrides"];
  spec["engine"] = {
      {"command", {SPLITCHECK_BINARY, "run", "{scenario}", "--split", "{cuts}", "--out", "{out}"}},
      {"timeout_s", 120},
      {"num_hidden_layers", o["num_hidden_layers"]},
      {"attn_res_block_size", o["attn_res_block_size"]}};
  return spec;
}

std::string verdict_text(const json& c) {
  std::string checks;
  for (const json& f : c["failed_checks"])
    checks += (checks.empty() ? "" : ",") + f.get<std::string>();
  return c["verdict"].get<std::string>() + (checks.empty() ? "" : " [" + checks + "]");
}

class VerdictParityTest : public cli_test::CliFixture,
                          public ::testing::WithParamInterface<std::string> {
 protected:
  VerdictParityTest() : CliFixture("splitcheck-parity-") {}

  json sweep(const std::string& name, const json& spec, int expect_code_at_least) const {
    const fs::path file = path(name + ".json");
    write_text(file, spec.dump(2));
    const CliResult r =
        cli("sweep " + quote(file.string()) + " --jobs 2 --report " + quote(path(name).string()));
    EXPECT_GE(r.code, expect_code_at_least) << r.out << r.err;
    EXPECT_TRUE(fs::exists(path(name) / "report.json")) << r.out << r.err;
    return json::parse(file_text(path(name) / "report.json"));
  }
};

TEST_P(VerdictParityTest, TheRunnerGivesTheBuiltInVerdicts) {
  const std::string name = GetParam();
  const json spec = small_scenario(name);
  const json in = sweep("builtin", spec, 1);  // a fault that shows: never exit 0
  const json ex = sweep("runner", as_external(spec), 1);
  EXPECT_EQ(ex["counts"], in["counts"]);
  EXPECT_EQ(ex["exit_code"], in["exit_code"]);
  ASSERT_EQ(ex["cases"].size(), in["cases"].size());
  int shown = 0;
  for (size_t i = 0; i < in["cases"].size(); ++i) {
    const json& ci = in["cases"][i];
    const json& ce = ex["cases"][i];
    const std::string scenario = name.substr(0, name.size() - 5);
    std::printf("PARITY %-40s %-8s builtin %-44s runner %s\n", scenario.c_str(),
                ci["key"].get<std::string>().c_str(), verdict_text(ci).c_str(),
                verdict_text(ce).c_str());
    shown += ci["verdict"] != "pass";
    EXPECT_EQ(ce["key"], ci["key"]);
    EXPECT_EQ(ce["verdict"], ci["verdict"])
        << ci["key"] << "\nbuilt-in: " << ci["message"] << "\nrunner:   " << ce["message"];
    EXPECT_EQ(ce["failed_checks"], ci["failed_checks"])
        << ci["key"] << "\nbuilt-in: " << ci["message"] << "\nrunner:   " << ce["message"];
    // The same evidence judged by the same judge: the rest of the case's finding too.
    for (const char* field : {"message", "first_divergence", "diverged_requests", "taps",
                              "datasets_compared", "datasets_differing", "dispatch_mismatches"})
      EXPECT_EQ(ce.value(field, json()), ci.value(field, json())) << ci["key"] << " " << field;
  }
  EXPECT_GT(shown, 0) << name << ": the small scenario no longer shows its fault";
}

INSTANTIATE_TEST_SUITE_P(Committed, VerdictParityTest, ::testing::ValuesIn(fault_scenarios()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param.substr(0, info.param.size() - 5);
                           for (char& c : n)
                             if (c == '-' || c == '.') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace splitcheck
