// GPU goldens on a machine without a GPU: a golden whose entry names the cuda backend and
// whose fingerprint names a GPU is not run and not judged (exit 2, NOT JUDGED), with
// every fingerprint field that differs named; never a divergence. Making one here is
// refused (exit 2) naming the backend. On a machine with a usable GPU these tests skip:
// there the GPU golden is verified for real (scripts/gpu-check.sh).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "harness/engine/run.h"
#include "harness/verdict/environment.h"
#include "harness/verdict/golden.h"
#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::file_text;
using cli_test::quote;
using cli_test::write_text;
using json = nlohmann::json;

bool gpu_here() { return environment_fingerprint("cuda").value("device", "") == "cuda"; }

class GpuGoldenTest : public cli_test::CliFixture {
 protected:
  GpuGoldenTest() : CliFixture("splitcheck-gpu-golden-test-") {}
  void SetUp() override {
    CliFixture::SetUp();
    const json s = {{"model", {{"preset", "k3-tiny"}, {"overrides", {{"num_hidden_layers", 2}}}}},
                    {"workload", {{"prompts", 1}, {"max_new_tokens", 2}, {"max_prompt_tokens", 8}}},
                    {"partitions", {{"pp", 2}}}};
    write_text(path("g.json"), s.dump(2));
  }
  std::string golden(const std::string& rest) const {
    return "golden --dir " + quote(path("golden").string()) + " " + rest;
  }
};

TEST(GpuGoldenFingerprint, WithoutAGpuTheCudaFingerprintSaysWhyAndNamesNoGpu) {
  if (gpu_here()) GTEST_SKIP() << "a CUDA device is usable here";
  const json env = environment_fingerprint("cuda");
  EXPECT_EQ(env.value("device", "").rfind("cuda unavailable: ", 0), 0u) << env.dump();
  EXPECT_FALSE(env.contains("gpu")) << env.dump();
  EXPECT_EQ(environment_fingerprint("cpu"), environment_fingerprint());
}

TEST_F(GpuGoldenTest, AGoldenOfAGpuIsNotJudgedHereAndNeverADivergence) {
  if (gpu_here()) GTEST_SKIP() << "a CUDA device is usable here";
  // A real golden file (made here on the CPU), listed as the GPU golden of the same
  // scenario: its entry as the GPU machine writes it.
  ASSERT_EQ(
      cli(golden("update --reason 'file for the GPU entry' " + quote(path("g.json").string())))
          .code,
      0);
  json m = json::parse(file_text(path("golden") / "MANIFEST.json"));
  Result<Scenario> s = load_scenario(path("g.json").string());
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  s->backend = "cuda";
  Result<std::string> sha = scenario_identity_sha256(*s);
  ASSERT_TRUE(sha.is_ok());
  json& g = m["goldens"][0];
  g["backend"] = "cuda";
  g["scenario_sha256"] = *sha;
  g["env"]["device"] = "cuda";
  g["env"]["gpu"] = "NVIDIA H200";
  g["env"]["compute_capability"] = "9.0";
  g["env"]["sm_count"] = 132;
  g["env"]["driver_version"] = 13000;
  g["env"]["cuda_runtime_version"] = 13000;
  g["env"]["cublaslt_version"] = 130000;
  write_text(path("golden") / "MANIFEST.json", m.dump(2));

  Result<std::vector<GoldenCheck>> checks =
      verify_goldens(SPLITCHECK_SOURCE_DIR, path("golden").string());
  ASSERT_TRUE(checks.is_ok()) << checks.status().message();
  ASSERT_EQ(checks->size(), 1u);
  const GoldenCheck& c = (*checks)[0];
  EXPECT_FALSE(c.passed);
  EXPECT_TRUE(c.not_judged) << c.message;
  EXPECT_NE(c.message.find("NVIDIA H200"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("cuda unavailable"), std::string::npos) << c.message;
  std::string diffs;
  for (const std::string& d : c.environment_differences) diffs += d + "\n";
  for (const char* field :
       {"device: golden 'cuda'", "gpu: golden 'NVIDIA H200'", "sm_count: golden '132'",
        "driver_version", "cuda_runtime_version", "cublaslt_version", "compute_capability"})
    EXPECT_NE(diffs.find(field), std::string::npos) << field << " in:\n" << diffs;

  // The command line: exit 2, NOT JUDGED, no FAIL.
  const CliResult r = cli(golden("verify"));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.out.find("NOT JUDGED"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 passed, 0 failed, 1 not judged"), std::string::npos) << r.out;
}

// The committed GPU golden (golden/cuda/, made on an H200 by scripts/gpu-check.sh): not
// judged without a GPU, never failed; with one, it must reproduce bit for bit (on another
// GPU or library version, the fingerprint's differences make it not judged, exit 2).
TEST_F(GpuGoldenTest, TheCommittedGpuGoldenIsJudgedOnlyOnItsGpu) {
  const std::string dir = std::string(SPLITCHECK_SOURCE_DIR) + "/golden/cuda";
  const CliResult r = cli("golden --dir " + quote(dir) + " verify");
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out << r.err;
  if (!gpu_here()) {
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_NE(r.out.find("0 passed, 0 failed, 1 not judged"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("gpu: golden 'NVIDIA H200'"), std::string::npos) << r.out;
  } else {
    EXPECT_TRUE(r.code == 0 || r.code == 2) << r.out << r.err;
  }
}

TEST_F(GpuGoldenTest, MakingAGpuGoldenWithoutAGpuIsRefused) {
  if (gpu_here()) GTEST_SKIP() << "a CUDA device is usable here";
  const CliResult r =
      cli(golden("update --backend cuda --reason 'no gpu here' " + quote(path("g.json").string())));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("cuda"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("golden") / "g.h5"));
}

}  // namespace
}  // namespace splitcheck
