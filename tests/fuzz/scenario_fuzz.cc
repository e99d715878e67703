// libFuzzer target: the scenario reader (parse_scenario) over arbitrary JSON bytes.
// A scenario it accepts must resolve to JSON that it accepts again and resolves to the
// same JSON (scenario.h); anything it refuses must be refused with invalid input.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "harness/scenario/scenario.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  const std::string base = SPLITCHECK_SOURCE_DIR "/scenarios";
  splitcheck::Result<splitcheck::Scenario> s = splitcheck::parse_scenario(j, "fuzz.json", base);
  splitcheck::fuzz::expect_invalid_input(s.status(), "parse_scenario");
  if (!s.is_ok()) return 0;
  const nlohmann::json resolved = splitcheck::resolved_scenario_json(*s);
  splitcheck::Result<splitcheck::Scenario> again =
      splitcheck::parse_scenario(resolved, "fuzz.json", base);
  if (!again.is_ok()) {
    std::fprintf(stderr, "resolved scenario refused: %s\n", again.status().message().c_str());
    std::abort();
  }
  if (splitcheck::resolved_scenario_json(*again) != resolved) {
    std::fprintf(stderr, "resolved scenario does not resolve to itself\n");
    std::abort();
  }
  return 0;
}
