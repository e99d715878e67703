// docs/external-engines.md opens with the shortest complete engine a user can copy (a
// PyTorch decoder with a tied head, one process per stage, recorded by
// splitcheck_dump.record_stage). Its `tour.py` and `tour.json` are taken from the page as
// written and swept through the real CLI: every split point identical; with the bug the page
// plants (`--bug`: the head untied off the first stage), every split point diverged with the
// cause the page shows, from the stage check, and bisect naming the same cause.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::file_text;
using cli_test::quote;
using cli_test::write_text;
using nlohmann::json;

// The first ```<lang> block after `heading` in `text`.
std::string block_after(const std::string& text, const std::string& heading,
                        const std::string& lang) {
  const size_t at = text.find(heading);
  if (at == std::string::npos) return "";
  const std::string open = "```" + lang + "\n";
  const size_t begin = text.find(open, at);
  if (begin == std::string::npos) return "";
  const size_t end = text.find("\n```", begin + open.size());
  return end == std::string::npos ? ""
                                  : text.substr(begin + open.size(), end + 1 - begin - open.size());
}

class TourTest : public cli_test::CliFixture {
 protected:
  TourTest() : CliFixture("splitcheck-tour-") {}
};

TEST_F(TourTest, TheFirstEngineOfTheGuideRunsAsWrittenAndItsBugIsFound) {
  const std::string repo_python = (fs::path(SPLITCHECK_SOURCE_DIR) / "python").string();
  if (std::system(("PYTHONPATH=" + quote(repo_python) +
                   " /usr/bin/python3 -c 'import torch, h5py, numpy, xxhash; "
                   "from splitcheck_dump import record_stage' 2>/dev/null")
                      .c_str()) != 0)
    GTEST_SKIP() << "needs Debian's python3-torch, h5py, numpy, xxhash (scripts/setup.sh) and "
                    "splitcheck_dump.record_stage";
  const std::string page =
      file_text(fs::path(SPLITCHECK_SOURCE_DIR) / "docs" / "external-engines.md");
  const std::string heading = "## A first engine";
  const std::string engine = block_after(page, heading, "python");
  const std::string scenario_text = block_after(page, heading, "json");
  ASSERT_FALSE(engine.empty()) << "no python block after \"" << heading << "\"";
  ASSERT_FALSE(scenario_text.empty()) << "no json block after \"" << heading << "\"";
  write_text(path("tour.py"), engine);
  // The page's scenario, as written; the test only says where python3 and the package are
  // (the page installs the package; the test uses the checkout's).
  json scenario = json::parse(scenario_text);
  scenario["engine"]["env"] = {{"PATH", "/usr/bin:/bin"}, {"PYTHONPATH", repo_python}};
  write_text(path("tour.json"), scenario.dump(2));
  CliResult r = cli("sweep " + quote(path("tour.json").string()) + " --jobs 2 --report " +
                    quote(path("fixed").string()));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  const json fixed = json::parse(file_text(path("fixed") / "report.json"));
  EXPECT_EQ(fixed["counts"]["pass"], 3) << r.out;

  scenario["engine"]["command"].push_back("--bug");
  write_text(path("tour.json"), scenario.dump(2));
  r = cli("sweep " + quote(path("tour.json").string()) + " --jobs 2 --report " +
          quote(path("bug").string()));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json bug = json::parse(file_text(path("bug") / "report.json"));
  EXPECT_EQ(bug["counts"]["diverged"], 3) << r.out;
  for (const json& c : bug["cases"]) {
    EXPECT_EQ(c.value("cause", ""), "head not tied to the embedding") << c.dump();
    EXPECT_EQ(c["message"].get<std::string>().rfind("head not tied to the embedding: stage 1's "
                                                    "head",
                                                    0),
              0u)
        << c["message"];
  }
  // The line the page shows, as the console prints it for split-1.
  const std::regex shown(
      R"(  split-1 +diverged +head not tied to the embedding: stage 1's head \(storage:[0-9]+\) is not the embedding's storage \(the stage holds no embedding\); PP=1's head is; .*\(cause: head not tied to the embedding\))");
  EXPECT_TRUE(std::regex_search(r.out, shown)) << r.out;
  EXPECT_NE(page.find("split-1          diverged         head not tied to the embedding: stage "
                      "1's head"),
            std::string::npos);
}

}  // namespace
}  // namespace splitcheck
