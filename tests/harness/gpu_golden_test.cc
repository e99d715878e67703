// GPU goldens on a machine without a GPU: a golden whose entry names the cuda backend and
// whose fingerprint names a GPU is not run and not judged (exit 2, NOT JUDGED), with
// every fingerprint field that differs named; never a divergence. Making one here is
// refused (exit 2) naming the backend. On a machine with a usable GPU these tests skip:
// there the GPU golden is verified for real (scripts/gpu-check.sh).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "harness/engine/run.h"
#include "harness/gates/environment.h"
#include "harness/gates/golden.h"
#include "kernels/gpu_driver.h"
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

// The driver's own version comes from the kernel module's /proc text (the proprietary and
// the open module word it differently), never from the compiler line below it.
TEST(GpuGoldenFingerprint, TheDriverVersionIsParsedFromTheKernelModulesText) {
  EXPECT_EQ(parse_nvidia_driver_version(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Sep 25 "
                "13:10:51 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"),
            "580.159.04");
  EXPECT_EQ(parse_nvidia_driver_version(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release "
                "Build  (dvs-builder@U16-I3-B03-4-3)  Thu Jan 23 2025\nGCC version:  gcc 13.3.0\n"),
            "570.86.15");
  EXPECT_EQ(parse_nvidia_driver_version("NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.54"),
            "550.54");
  EXPECT_EQ(parse_nvidia_driver_version("GCC version:  gcc version 12.2.0\n"), "");
  EXPECT_EQ(parse_nvidia_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module\n"), "");
  EXPECT_EQ(parse_nvidia_driver_version(""), "");
}

// A GPU fingerprint as this build records it on the H200.
json h200_fingerprint() {
  return {{"compiler", "GNU 13.3.0"},
          {"flags", "-O3 -fno-fast-math -ffp-contract=off"},
          {"isa", "x86-64 sse2"},
          {"device", "cuda"},
          {"gpu", "NVIDIA H200"},
          {"compute_capability", "9.0"},
          {"sm_count", 132},
          {"driver_version", "580.159.04"},
          {"cuda_driver_api_version", 13000},
          {"cuda_runtime_version", 13000},
          {"cublaslt_version", 130100}};
}

// golden/cuda/MANIFEST.json was recorded when "driver_version" held the CUDA driver API
// version (a number): read as "cuda_driver_api_version", it matches the same machine,
// and the driver string it lacks is named as not recorded, so the golden stays judged.
TEST(GpuGoldenFingerprint, AGoldenRecordedBeforeTheDriverStringIsStillJudged) {
  json old = h200_fingerprint();
  old.erase("cuda_driver_api_version");
  old["driver_version"] = 13000;
  const FingerprintDiff d = diff_fingerprints(old, h200_fingerprint());
  EXPECT_TRUE(d.same()) << ::testing::PrintToString(d.differences);
  EXPECT_EQ(d.unrecorded, std::vector<std::string>{"driver_version"});
  // The committed GPU golden is one such.
  const json committed =
      json::parse(file_text(fs::path(SPLITCHECK_SOURCE_DIR) / "golden/cuda/MANIFEST.json"));
  const json& env = committed["goldens"][0]["env"];
  if (env["driver_version"].is_number()) {
    EXPECT_EQ(upgrade_fingerprint(env).value("cuda_driver_api_version", 0),
              env["driver_version"].get<int>());
    EXPECT_FALSE(upgrade_fingerprint(env).contains("driver_version"));
  }
}

// Another driver, or another CUDA API version, is named field by field; an old golden's
// API version is compared as the API version, never against the driver's string.
TEST(GpuGoldenFingerprint, EachDriverFieldIsNamedWhenItDiffers) {
  json other = h200_fingerprint();
  other["driver_version"] = "575.57.08";
  other["cuda_driver_api_version"] = 12090;
  const FingerprintDiff d = diff_fingerprints(other, h200_fingerprint());
  EXPECT_EQ(d.differences, (std::vector<std::string>{
                               "cuda_driver_api_version: golden '12090', this build '13000'",
                               "driver_version: golden '575.57.08', this build '580.159.04'"}));
  EXPECT_TRUE(d.unrecorded.empty());

  json old = h200_fingerprint();
  old.erase("cuda_driver_api_version");
  old["driver_version"] = 12090;
  const FingerprintDiff o = diff_fingerprints(old, h200_fingerprint());
  EXPECT_EQ(
      o.differences,
      (std::vector<std::string>{"cuda_driver_api_version: golden '12090', this build '13000'"}));
  EXPECT_EQ(o.unrecorded, std::vector<std::string>{"driver_version"});
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
  g["env"]["driver_version"] = "580.159.04";
  g["env"]["cuda_driver_api_version"] = 13000;
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
        "driver_version: golden '580.159.04'", "cuda_driver_api_version: golden '13000'",
        "cuda_runtime_version", "cublaslt_version", "compute_capability"})
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
