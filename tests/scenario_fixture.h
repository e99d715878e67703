// Loading a committed scenario in tests: scenarios/<name>.json, a test failure if it does
// not load.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "harness/scenario/scenario.h"

namespace splitcheck {

inline Scenario committed_scenario(const std::string& name) {
  Result<Scenario> s =
      load_scenario(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/" + name + ".json");
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? std::move(*s) : Scenario{};
}

// A GoogleTest parameter name made from any text (a scenario name, a fault id): every
// character that is not a letter or a digit becomes '_'.
inline std::string param_test_name(std::string n) {
  for (char& ch : n)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

// The name generator of a suite instantiated over strings: param_test_name of each.
struct ParamTestName {
  std::string operator()(const ::testing::TestParamInfo<std::string>& info) const {
    return param_test_name(info.param);
  }
};

}  // namespace splitcheck
