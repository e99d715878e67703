// The real `splitcheck` binary, driven as a user drives it: a run twice gives equal dumps;
// every bad input exits 2 with one line naming the file and the place and leaves no
// output file behind; `golden verify` passes on the committed goldens and catches a
// single flipped bit in a freshly made golden.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "harness/build_info.h"
#include "harness/dump/compare.h"
#include "reference/config.h"
#include "reference/weights.h"
#include "tests/cli_fixture.h"
#include "tests/small_default.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::expect_one_line_refusal;
using cli_test::quote;
using cli_test::write_text;
const auto& read_text = cli_test::file_text;

class CliTest : public cli_test::CliFixture {
 protected:
  CliTest() : CliFixture("splitcheck-cli-test-") {}

  // A two-layer k3-tiny scenario with one short prompt, optionally reading `checkpoint`.
  fs::path small_scenario(const std::string& name, const std::string& checkpoint = "") const {
    nlohmann::json j = {
        {"model", {{"preset", "k3-tiny"}, {"overrides", {{"num_hidden_layers", 2}}}}},
        {"workload", {{"prompts", 1}, {"max_new_tokens", 2}, {"max_prompt_tokens", 8}}},
        {"partitions", {{"pp", 2}}},
    };
    if (!checkpoint.empty()) j["checkpoint"] = checkpoint;
    write_text(path(name), j.dump(2));
    return path(name);
  }
};

TEST_F(CliTest, RunTwiceGivesDumpsThatCompareEqual) {
  // The default scenario on one prompt of 16 tokens (CI's gate sweep runs its full PP=1
  // twice with --self-check): prefill, drafts and verifies, every dataset of the dump.
  const std::string scenario = cli_test::small_default(dir_, 16).string();
  const CliResult a = cli("run " + quote(scenario) + " --out " + quote(path("a.h5").string()));
  ASSERT_EQ(a.code, 0) << a.err;
  const CliResult b = cli("run " + quote(scenario) + " --out " + quote(path("b.h5").string()));
  ASSERT_EQ(b.code, 0) << b.err;
  // The printed summary (tokens, scores) is equal too, once the dump names are aligned.
  std::string b_out = b.out;
  const std::string b_name = path("b.h5").string();
  b_out.replace(b_out.find(b_name), b_name.size(), path("a.h5").string());
  EXPECT_EQ(a.out, b_out);

  const CliResult cmp =
      cli("compare " + quote(path("a.h5").string()) + " " + quote(path("b.h5").string()));
  EXPECT_EQ(cmp.code, 0) << cmp.out << cmp.err;
  const CliResult full =
      cli("compare --full " + quote(path("a.h5").string()) + " " + quote(path("b.h5").string()));
  EXPECT_EQ(full.code, 0) << full.out << full.err;

  Result<CompareResult> r = compare_dumps(path("a.h5").string(), path("b.h5").string());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->equal()) << verdict(*r);
  EXPECT_GT(r->datasets_compared, 100);
}

struct BadScenario {
  const char* name;
  const char* json;
  std::vector<std::string> needles;  // besides the file's path
};

TEST_F(CliTest, BadScenarioFilesExitTwoWithOneLineNamingFileAndPlace) {
  const BadScenario cases[] = {
      {"malformed_json",
       "{\n  \"model\": {\"preset\": \"k3-tiny\"},,\n}\n",
       {":2:", "malformed JSON"}},
      {"unknown_key",
       R"({"model": {"preset": "k3-tiny", "overrides": {"hidden_sise": 64}}})",
       {"/model/overrides/hidden_sise", "unknown key"}},
      {"wrong_type",
       R"({"workload": {"prompts": "two"}})",
       {"/workload/prompts", "expected integer"}},
      {"unknown_preset", R"({"model": {"preset": "k3-huge"}})", {"/model/preset", "k3-huge"}},
  };
  for (const BadScenario& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path scenario = path(std::string(c.name) + ".json");
    write_text(scenario, c.json);
    const fs::path out = path(std::string(c.name) + ".h5");
    const CliResult r = cli("run " + quote(scenario.string()) + " --out " + quote(out.string()));
    std::vector<std::string> needles = c.needles;
    needles.push_back(scenario.string());
    for (const std::string& n : needles)
      EXPECT_NE(r.err.find(n), std::string::npos) << n << " in: " << r.err;
    expect_one_line_refusal(r, {});
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(out.string() + ".partial"));
  }
  const CliResult missing = cli("run " + quote(path("absent.json").string()) + " --out " +
                                quote(path("absent.h5").string()));
  expect_one_line_refusal(missing, {path("absent.json").string()});
  EXPECT_FALSE(fs::exists(path("absent.h5")));
}

TEST_F(CliTest, CheckpointLackingATensorIsRefusedNamingTensorAndFile) {
  // A complete checkpoint written by the CLI runs; the same model lacking one tensor does not.
  const CliResult made = cli("checkpoint " + quote(small_scenario("gen.json").string()) +
                             " --out " + quote(path("full.h5").string()));
  ASSERT_EQ(made.code, 0) << made.err;
  const CliResult ok = cli("run " + quote(small_scenario("full.json", "full.h5").string()) +
                           " --out " + quote(path("ok.h5").string()));
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(path("ok.h5")));

  ModelConfig c = *model_preset("k3-tiny");
  c.num_hidden_layers = 2;
  Result<WeightStore> all = generate_weights(c);
  ASSERT_TRUE(all.is_ok());
  const std::string missing = "layers.1.mlp.experts.2.gate_proj.weight";
  WeightStore lacking;
  for (const auto& [name, t] : all->tensors())
    if (name != missing) lacking.put(name, t);
  ASSERT_TRUE(write_checkpoint(path("lacking.h5").string(), c, lacking).is_ok());
  const CliResult r = cli("run " + quote(small_scenario("lacking.json", "lacking.h5").string()) +
                          " --out " + quote(path("never.h5").string()));
  expect_one_line_refusal(r, {path("lacking.h5").string(), missing});
  EXPECT_FALSE(fs::exists(path("never.h5")));
  EXPECT_FALSE(fs::exists(path("never.h5.partial")));
}

TEST_F(CliTest, CheckpointWithATensorOfTheWrongShapeIsRefusedNamingTensorFileAndShapes) {
  ModelConfig c = *model_preset("k3-tiny");
  c.num_hidden_layers = 2;
  Result<WeightStore> all = generate_weights(c);
  ASSERT_TRUE(all.is_ok());
  const std::string name = "layers.1.mlp.experts.2.gate_proj.weight";
  WeightStore wrong;
  for (const auto& [n, t] : all->tensors()) {
    if (n != name) {
      wrong.put(n, t);
      continue;
    }
    // The same element count, transposed: only the shape is wrong.
    ASSERT_EQ(t.shape().size(), 2u);
    wrong.put(n, Tensor::zeros(t.dtype(), {t.dim(1), t.dim(0)}));
  }
  ASSERT_TRUE(write_checkpoint(path("wrong.h5").string(), c, wrong).is_ok());
  for (const char* cmd : {"run ", "sweep "}) {
    const CliResult r =
        cli(cmd + quote(small_scenario("wrong.json", "wrong.h5").string()) +
            (std::string(cmd) == "run " ? " --out " + quote(path("never.h5").string())
                                        : std::string()));
    expect_one_line_refusal(r, {path("wrong.h5").string(), name, "shape"});
  }
  EXPECT_FALSE(fs::exists(path("never.h5")));
}

TEST_F(CliTest, CheckpointThatIsNotHdf5IsRefusedNamingTheFile) {
  write_text(path("weights.h5"), "not an HDF5 file, just text\n");
  const CliResult r = cli("run " + quote(small_scenario("text.json", "weights.h5").string()) +
                          " --out " + quote(path("never.h5").string()));
  expect_one_line_refusal(r, {path("weights.h5").string()});
  EXPECT_FALSE(fs::exists(path("never.h5")));
}

TEST_F(CliTest, CompareRefusesNonHdf5AndTruncatedDumpsNamingTheFile) {
  const CliResult run = cli("run " + quote(small_scenario("s.json").string()) + " --out " +
                            quote(path("good.h5").string()));
  ASSERT_EQ(run.code, 0) << run.err;
  const CliResult same =
      cli("compare " + quote(path("good.h5").string()) + " " + quote(path("good.h5").string()));
  EXPECT_EQ(same.code, 0) << same.err;

  write_text(path("text.h5"), "plain text pretending to be a dump\n");
  const CliResult text =
      cli("compare " + quote(path("good.h5").string()) + " " + quote(path("text.h5").string()));
  expect_one_line_refusal(text, {path("text.h5").string()});

  const std::string bytes = read_text(path("good.h5"));
  ASSERT_GT(bytes.size(), 4096u);
  write_text(path("truncated.h5"), bytes.substr(0, bytes.size() / 2));
  const CliResult cut = cli("compare " + quote(path("good.h5").string()) + " " +
                            quote(path("truncated.h5").string()));
  expect_one_line_refusal(cut, {path("truncated.h5").string()});
}

bool committed_goldens_exist() { return fs::exists(SPLITCHECK_SOURCE_DIR "/golden/MANIFEST.json"); }

TEST_F(CliTest, SweepStatesWhatTheEngineUnderTestComputedInEveryReportForm) {
  const std::string scenario = quote(small_scenario("small.json").string());
  const fs::path dir = path("report");
  const CliResult r = cli("sweep " + scenario + " --threads 1 --report " + quote(dir.string()));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // Two layers, one prompt, a prefill and a decode: 4 layer calls and 2 head calls, made by
  // the split point's stages themselves, as many as PP=1's.
  const std::string line = "layer calls 4 of 4, head calls 2 of 2, drafter calls 0 of 0";
  EXPECT_NE(r.out.find("computed: " + line), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nothing taken from PP=1"), std::string::npos) << r.out;
  const nlohmann::json report = nlohmann::json::parse(read_text(dir / "report.json"));
  ASSERT_EQ(report["cases"].size(), 1u);
  EXPECT_EQ(report["cases"][0]["computed"], report["computed"]["pp1"]);
  EXPECT_EQ(report["computed"]["pp1"]["layer_calls"], 4);
  EXPECT_FALSE(report.contains("reuse"));
  for (const char* form : {"report.html", "junit.xml", "summary.md"})
    EXPECT_NE(read_text(dir / form).find(line), std::string::npos) << form;
}

TEST_F(CliTest, RunIntoAMissingFolderIsInvalidInputNamingIt) {
  const std::string out = path("no-such-folder").string() + "/pp1.h5";
  const CliResult r =
      cli("run " + quote(small_scenario("small.json").string()) + " --out " + quote(out));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  expect_one_line_refusal(r, {out, "no-such-folder", "does not exist"});
  EXPECT_FALSE(fs::exists(out + ".partial"));
}

TEST_F(CliTest, SweepHasNoModeThatTakesLayerCallsFromPp1) {
  const std::string scenario = quote(small_scenario("small.json").string());
  for (const char* option : {"--reuse on", "--reuse off", "--reuse-memory 16"}) {
    const CliResult r = cli("sweep " + scenario + " " + option);
    EXPECT_EQ(r.code, 2) << option << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(std::string(option).substr(0, 7)), std::string::npos) << r.err;
  }
}

TEST_F(CliTest, SweepNamesItsTransportAndWhereTheStagesRan) {
  const CliResult r = cli("sweep " + quote(small_scenario("small.json").string()) + " --threads 1");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  // "stages: inproc: stages 0-1 on rank 0 (pid N, host H, cpu)"
  const size_t at = r.out.find("\nstages: inproc: stages 0-1 on rank 0 (pid ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::string(", host ") + host + ", cpu)\n", at), std::string::npos) << r.out;
}

TEST_F(CliTest, GoldenVerifyPassesOnCommittedGoldens) {
  if (!committed_goldens_exist()) GTEST_SKIP() << "no golden/MANIFEST.json in the source tree";
  const CliResult r = cli("golden verify");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(" 0 failed"), std::string::npos) << r.out;
}

TEST_F(CliTest, GoldenVerifyCatchesOneFlippedBitInAFreshGolden) {
  if (std::system("/usr/bin/python3 -c 'import h5py, numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "h5py is not available to /usr/bin/python3";
  // A golden of the default scenario made now, in a directory of the test (the committed
  // one may lag behind the code; GoldenVerifyPassesOnCommittedGoldens covers that). The
  // manifest stores the scenario path relative to the source tree, so verify finds it.
  const fs::path golden_dir = path("golden");
  const CliResult made = cli("golden --dir " + quote(golden_dir.string()) +
                             " update --reason 'cli_test fresh golden' scenarios/default.json");
  ASSERT_EQ(made.code, 0) << made.out << made.err;
  const nlohmann::json manifest = nlohmann::json::parse(read_text(golden_dir / "MANIFEST.json"));
  ASSERT_EQ(manifest["goldens"].size(), 1u);
  EXPECT_EQ(manifest["goldens"][0]["scenario"], "scenarios/default.json");
  const std::string file = manifest["goldens"][0]["file"].get<std::string>();

  const CliResult before = cli("golden --dir " + quote(golden_dir.string()) + " verify");
  ASSERT_EQ(before.code, 0) << before.out << before.err;

  // Flip the lowest mantissa bit of one logit. With the digest left stale the golden is a
  // corrupt file (exit 2, naming it and the dataset); with the digest rewritten to match,
  // it is a golden that differs from what the code computes (exit 1, naming the bit).
  const std::string flip =
      "import h5py, numpy as np, sys, xxhash\n"
      "with h5py.File(sys.argv[1], 'r+') as f:\n"
      "    d = f['/forward/0/logits']\n"
      "    v = np.array(d[0, 3], dtype=np.float32)\n"
      "    d[0, 3] = (v.view(np.uint32) ^ np.uint32(1)).view(np.float32)\n"
      "    if len(sys.argv) > 2:\n"
      "        h = xxhash.xxh3_64_intdigest(d[...].astype('<f4').tobytes())\n"
      "        d.attrs.modify('digest', ('xxh3:%016x' % h).encode())\n";
  write_text(path("flip.py"), flip);
  ASSERT_EQ(std::system(("/usr/bin/python3 " + quote(path("flip.py").string()) + " " +
                         quote((golden_dir / file).string()))
                            .c_str()),
            0);

  const CliResult corrupt = cli("golden --dir " + quote(golden_dir.string()) + " verify");
  EXPECT_EQ(corrupt.code, 2) << corrupt.out << corrupt.err;
  EXPECT_NE(corrupt.err.find((golden_dir / file).string()), std::string::npos) << corrupt.err;
  EXPECT_NE(corrupt.err.find("/forward/0/logits"), std::string::npos) << corrupt.err;
  // Flip it back, then flip it again with an honest digest.
  for (const char* extra : {"", " honest"})
    ASSERT_EQ(std::system(("/usr/bin/python3 " + quote(path("flip.py").string()) + " " +
                           quote((golden_dir / file).string()) + extra)
                              .c_str()),
              0);
  const CliResult after = cli("golden --dir " + quote(golden_dir.string()) + " verify");
  EXPECT_EQ(after.code, 1) << after.out << after.err;
  EXPECT_NE(after.out.find("FAIL"), std::string::npos) << after.out;
  EXPECT_NE(after.out.find("logits"), std::string::npos) << after.out;
  EXPECT_NE(after.out.find("forward 0"), std::string::npos) << after.out;
  EXPECT_NE(after.out.find("token 0 channel 3"), std::string::npos) << after.out;
}

TEST_F(CliTest, VersionNamesTheBuildTheDumpFormatAndTheCapabilities) {
  const CliResult r = cli("--version");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out.rfind("splitcheck " SPLITCHECK_VERSION " (git " SPLITCHECK_GIT_REVISION ")\n", 0),
            0u)
      << r.out;
  EXPECT_NE(r.out.find("dump format: writes version 2 (xxh3 digests); reads versions 1 to 2"),
            std::string::npos)
      << r.out;
  const std::string yes_no = "(yes|no)";
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex("capabilities: cuda " + yes_no + ", mpi " + yes_no + ", nccl " + yes_no)))
      << r.out;
#if SPLITCHECK_HAVE_MPI
  EXPECT_NE(r.out.find("mpi yes"), std::string::npos) << r.out;
#else
  EXPECT_NE(r.out.find("mpi no"), std::string::npos) << r.out;
#endif
#ifdef SPLITCHECK_HAVE_CUDA
  EXPECT_NE(r.out.find("cuda yes"), std::string::npos) << r.out;
#else
  EXPECT_NE(r.out.find("cuda no"), std::string::npos) << r.out;
#endif
  EXPECT_EQ(r.out.back(), '\n');
}

}  // namespace
}  // namespace splitcheck
