// Loading a committed scenario in tests: scenarios/<name>.json, a test failure if it does
// not load.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "harness/verdict/scenario.h"

namespace splitcheck {

inline Scenario committed_scenario(const std::string& name) {
  Result<Scenario> s =
      load_scenario(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/" + name + ".json");
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? std::move(*s) : Scenario{};
}

}  // namespace splitcheck
