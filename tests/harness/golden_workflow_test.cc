// The golden workflow: `golden update` needs a reason and records it with the
// environment fingerprint (compiler, flags, CPU ISA, device); `golden verify` on a
// golden of another fingerprint says which fields differ and, when the data differ too,
// judges nothing (exit 2, NOT JUDGED) instead of reporting a divergence; with the same
// fingerprint a difference is a divergence (exit 1).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "harness/gates/environment.h"
#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::file_text;
using cli_test::quote;
using cli_test::write_text;
using json = nlohmann::json;

bool have_h5py() {
  return std::system("/usr/bin/python3 -c 'import h5py, numpy, xxhash' >/dev/null 2>&1") == 0;
}

class GoldenWorkflowTest : public cli_test::CliFixture {
 protected:
  GoldenWorkflowTest() : CliFixture("splitcheck-golden-workflow-test-") {}
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
  json manifest() const { return json::parse(file_text(path("golden") / "MANIFEST.json")); }
  void set_manifest(const json& m) const {
    write_text(path("golden") / "MANIFEST.json", m.dump(2));
  }
  // Flips the lowest bit of one logit and rewrites its digest: a sound file whose data
  // differ from what the code computes.
  void flip_one_logit() const {
    write_text(path("flip.py"),
               "import h5py, numpy as np, sys, xxhash\n"
               "with h5py.File(sys.argv[1], 'r+') as f:\n"
               "    d = f['/forward/0/logits']\n"
               "    v = np.array(d[0, 3], dtype=np.float32)\n"
               "    d[0, 3] = (v.view(np.uint32) ^ np.uint32(1)).view(np.float32)\n"
               "    h = xxhash.xxh3_64_intdigest(d[...].astype('<f4').tobytes())\n"
               "    d.attrs.modify('digest', ('xxh3:%016x' % h).encode())\n");
    ASSERT_EQ(std::system(("/usr/bin/python3 " + quote(path("flip.py").string()) + " " +
                           quote((path("golden") / "g.h5").string()))
                              .c_str()),
              0);
  }
};

TEST_F(GoldenWorkflowTest, UpdateRequiresAReasonAndRecordsItWithTheFingerprint) {
  const std::string scenario = quote(path("g.json").string());
  EXPECT_EQ(cli(golden("update " + scenario)).code, 2) << "no --reason";
  const CliResult empty = cli(golden("update --reason '' " + scenario));
  EXPECT_EQ(empty.code, 2) << empty.out << empty.err;
  EXPECT_NE(empty.err.find("reason"), std::string::npos) << empty.err;
  EXPECT_FALSE(fs::exists(path("golden") / "g.h5"));

  const CliResult made = cli(golden("update --reason 'first golden of g' " + scenario));
  ASSERT_EQ(made.code, 0) << made.out << made.err;
  const json m = manifest();
  ASSERT_EQ(m["goldens"].size(), 1u);
  const json& g = m["goldens"][0];
  EXPECT_EQ(g["reason"], "first golden of g");
  EXPECT_EQ(g["env"], environment_fingerprint());
  for (const char* field : {"compiler", "flags", "isa", "device"})
    EXPECT_TRUE(g["env"].contains(field)) << field;
  const CliResult ok = cli(golden("verify"));
  EXPECT_EQ(ok.code, 0) << ok.out << ok.err;
  EXPECT_EQ(ok.out.find("environment"), std::string::npos) << ok.out;
}

TEST_F(GoldenWorkflowTest, AnotherFingerprintIsNamedFieldByFieldNeverCalledADivergence) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 lacks h5py or xxhash";
  ASSERT_EQ(
      cli(golden("update --reason 'fingerprint test' " + quote(path("g.json").string()))).code, 0);
  const json original = manifest();
  json other = original;
  other["goldens"][0]["env"]["compiler"] = "GNU 99.1.0";
  other["goldens"][0]["env"]["isa"] = "x86-64 sse2 avx2 fma";
  set_manifest(other);
  const std::string here_compiler = environment_fingerprint()["compiler"];

  // Same data, other environment: a pass that names what differs.
  const CliResult same_data = cli(golden("verify"));
  EXPECT_EQ(same_data.code, 0) << same_data.out << same_data.err;
  EXPECT_NE(same_data.out.find("environment differs: compiler: golden 'GNU 99.1.0', this build '" +
                               here_compiler + "'"),
            std::string::npos)
      << same_data.out;
  EXPECT_NE(same_data.out.find("environment differs: isa: golden 'x86-64 sse2 avx2 fma'"),
            std::string::npos)
      << same_data.out;

  // Other data, other environment: not judged (exit 2), never FAIL.
  flip_one_logit();
  if (HasFatalFailure()) return;
  const CliResult other_env = cli(golden("verify"));
  EXPECT_EQ(other_env.code, 2) << other_env.out << other_env.err;
  EXPECT_NE(other_env.out.find("NOT JUDGED"), std::string::npos) << other_env.out;
  EXPECT_NE(other_env.out.find("compiler: golden 'GNU 99.1.0'"), std::string::npos)
      << other_env.out;
  EXPECT_EQ(other_env.out.find("FAIL"), std::string::npos) << other_env.out;
  EXPECT_NE(other_env.out.find("0 failed, 1 not judged"), std::string::npos) << other_env.out;

  // The same data in this environment's golden is a divergence (exit 1).
  set_manifest(original);
  const CliResult same_env = cli(golden("verify"));
  EXPECT_EQ(same_env.code, 1) << same_env.out << same_env.err;
  EXPECT_NE(same_env.out.find("FAIL"), std::string::npos) << same_env.out;
  EXPECT_NE(same_env.out.find("forward 0 logits token 0 channel 3"), std::string::npos)
      << same_env.out;
}

TEST(EnvironmentFingerprint, FieldsTheGoldenPredatesAreSaidNotCompared) {
  const json here = environment_fingerprint();
  json old = here;
  old.erase("isa");
  FingerprintDiff d = diff_fingerprints(old, here);
  EXPECT_TRUE(d.same());
  EXPECT_EQ(d.unrecorded, std::vector<std::string>{"isa"});
  // A field only the golden records (a GPU golden's) differs.
  json gpu = here;
  gpu["sm_count"] = 132;
  d = diff_fingerprints(gpu, here);
  ASSERT_EQ(d.differences.size(), 1u);
  EXPECT_NE(d.differences[0].find("sm_count"), std::string::npos);
}

}  // namespace
}  // namespace splitcheck
