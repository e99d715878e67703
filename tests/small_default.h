// scenarios/default.json made small, for the tests that drive the real binary over it to
// check what a run or a sweep says (exit codes, placement, ranks): their claims do not
// depend on the workload's length, and its full two prompts of 56 tokens cost each of them
// a minute of PP=1 under ctest.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli_fixture.h"

namespace splitcheck::cli_test {

// The default scenario on one prompt of `max_new_tokens` new tokens (prefill, drafts and a
// verify), without its expect (written for its full workload), written as
// `dir`/small-default.json; returns that path.
inline fs::path small_default(const fs::path& dir, int max_new_tokens = 4) {
  const fs::path scenarios = fs::path(SPLITCHECK_SOURCE_DIR) / "scenarios";
  nlohmann::json spec = nlohmann::json::parse(file_text(scenarios / "default.json"));
  spec["workload"]["file"] = (scenarios / spec["workload"]["file"].get<std::string>()).string();
  spec["workload"]["prompts"] = 1;
  spec["workload"]["max_new_tokens"] = max_new_tokens;
  spec.erase("expect");
  const fs::path out = dir / "small-default.json";
  write_text(out, spec.dump(2));
  return out;
}

}  // namespace splitcheck::cli_test
