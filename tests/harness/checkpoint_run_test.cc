// A scenario that names a checkpoint written by `splitcheck checkpoint` runs exactly as
// the scenario with generated weights: the drafter's tensors travel in the checkpoint.
// The dumps' data are equal bit for bit; their identities are not (the model identity
// hashes the checkpoint file, the scenario identity its name), and compare says so.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

int run(const std::string& args) {
  const std::string cmd = std::string(SPLITCHECK_BINARY) + " " + args + " > /dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(CheckpointRun, DumpEqualsTheGeneratedWeightsRun) {
  const fs::path dir =
      fs::temp_directory_path() / ("splitcheck-ckrun-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string source = std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/default.json";
  ASSERT_EQ(run("checkpoint " + source + " --out " + (dir / "ck.h5").string()), 0);

  nlohmann::json j = nlohmann::json::parse(std::ifstream(source));
  j["name"] = "from-checkpoint";
  j["checkpoint"] = (dir / "ck.h5").string();
  j["workload"]["file"] = std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/workloads/" +
                          fs::path(j["workload"]["file"].get<std::string>()).filename().string();
  j["workload"]["max_new_tokens"] = 4;
  std::ofstream(dir / "ck.json") << j.dump(2);
  j.erase("checkpoint");
  std::ofstream(dir / "gen.json") << j.dump(2);

  ASSERT_EQ(run("run " + (dir / "gen.json").string() + " --out " + (dir / "gen.h5").string()), 0);
  ASSERT_EQ(run("run " + (dir / "ck.json").string() + " --out " + (dir / "ck.h5.dump").string()),
            0);
  // Every dataset equal; the only differences are the two identity attributes.
  const auto only_identities_differ = [&](const std::string& b) {
    const fs::path report = dir / (b + ".report");
    EXPECT_EQ(run("compare " + (dir / "gen.h5").string() + " " + (dir / b).string() + " --report " +
                  report.string()),
              1);
    const nlohmann::json r = nlohmann::json::parse(std::ifstream(report / "report.json"));
    std::vector<std::string> keys;
    for (const auto& c : r["cases"]) {
      EXPECT_EQ(c["failed_checks"], nlohmann::json::array({"attributes"})) << c["message"];
      keys.push_back(c["key"]);
    }
    EXPECT_EQ(keys, (std::vector<std::string>{"/@model_sha256", "/@scenario_sha256"}));
  };
  only_identities_differ("ck.h5.dump");
  // And a partitioned run from the checkpoint equals both.
  ASSERT_EQ(run("run " + (dir / "ck.json").string() + " --split 13 --out " +
                (dir / "ck-split.h5").string()),
            0);
  only_identities_differ("ck-split.h5");
  EXPECT_EQ(run("compare " + (dir / "ck.h5.dump").string() + " " + (dir / "ck-split.h5").string()),
            0);
  fs::remove_all(dir);
}

}  // namespace
