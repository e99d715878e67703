// Malformed inputs to `compare`, `verify-dump`, `golden verify`, `checkpoint` and
// `bisect`, through the real binary: a file that is not HDF5, a truncated dump, a dump of
// another format_version, a dump whose bytes do not match its digests, hostile
// attribute and shape sizes, and malformed scenario JSON each exit 2 with one
// `splitcheck: error:` line naming the file (and the dataset or attribute). Also: what
// `compare --trust-digests` says in every report form.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "reference/weights.h"
#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::expect_one_line_refusal;
using cli_test::quote;
using cli_test::write_text;
const auto& read_text = cli_test::file_text;

class BadInputTest : public cli_test::CliFixture {
 protected:
  BadInputTest() : CliFixture("splitcheck-bad-input-test-") {}

  // A real dump of a two-layer k3-tiny scenario.
  fs::path good_dump() const {
    const nlohmann::json j = {
        {"model", {{"preset", "k3-tiny"}, {"overrides", {{"num_hidden_layers", 2}}}}},
        {"workload", {{"prompts", 1}, {"max_new_tokens", 2}, {"max_prompt_tokens", 8}}},
        {"partitions", {{"pp", 2}}},
    };
    write_text(path("s.json"), j.dump(2));
    const CliResult run =
        cli("run " + quote(path("s.json").string()) + " --out " + quote(path("good.h5").string()));
    EXPECT_EQ(run.code, 0) << run.err;
    return path("good.h5");
  }
};

TEST_F(BadInputTest, CompareRefusesAFileThatIsNotHdf5) {
  const fs::path good = good_dump();
  write_text(path("text.h5"), "plain text pretending to be a dump\n");
  expect_one_line_refusal(
      cli("compare " + quote(good.string()) + " " + quote(path("text.h5").string())),
      {path("text.h5").string()});
  expect_one_line_refusal(
      cli("compare " + quote(path("text.h5").string()) + " " + quote(good.string())),
      {path("text.h5").string()});
  expect_one_line_refusal(
      cli("compare " + quote(good.string()) + " " + quote(path("absent.h5").string())),
      {path("absent.h5").string()});
}

TEST_F(BadInputTest, CompareRefusesATruncatedDump) {
  const fs::path good = good_dump();
  const std::string bytes = read_text(good);
  ASSERT_GT(bytes.size(), 4096u);
  for (const size_t keep : {bytes.size() / 2, bytes.size() - 100, size_t{512}}) {
    write_text(path("truncated.h5"), bytes.substr(0, keep));
    expect_one_line_refusal(
        cli("compare " + quote(good.string()) + " " + quote(path("truncated.h5").string())),
        {path("truncated.h5").string()});
  }
}

// Rewrites the root attribute `format_version` of `file` as `version`: with h5py when
// /usr/bin/python3 has it, else through the HDF5 C library.
void set_format_version(const fs::path& file, int64_t version, bool use_h5py) {
  if (use_h5py) {
    const std::string cmd =
        "/usr/bin/python3 -c 'import sys, h5py, numpy as np\n"
        "with h5py.File(sys.argv[1], \"r+\") as f:\n"
        "    f.attrs[\"format_version\"] = np.int64(sys.argv[2])' " +
        quote(file.string()) + " " + std::to_string(version);
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return;
  }
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
  ASSERT_GE(a, 0);
  EXPECT_GE(H5Awrite(a, H5T_NATIVE_INT64, &version), 0);
  H5Aclose(a);
  H5Fclose(f);
}

TEST_F(BadInputTest, CompareRefusesADumpOfAnotherFormatVersion) {
  const bool h5py = std::system("/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1") == 0;
  const fs::path good = good_dump();
  fs::copy_file(good, path("v99.h5"));
  set_format_version(path("v99.h5"), 99, h5py);
  if (::testing::Test::HasFatalFailure()) return;
  const CliResult r = cli("compare " + quote(good.string()) + " " + quote(path("v99.h5").string()));
  expect_one_line_refusal(r, {path("v99.h5").string(), "format_version", "99"});
  if (!h5py)
    std::cout << "[ note ] h5py missing for /usr/bin/python3: edited with the HDF5 C API\n";
}

bool have_h5py() {
  static const bool ok =
      std::system("/usr/bin/python3 -c 'import h5py, numpy, xxhash' >/dev/null 2>&1") == 0;
  return ok;
}

// Runs `body` (Python, indented by 4) with `f` the dump `file` opened read-write by h5py.
void h5py_edit(const fs::path& file, const std::string& body, const char* mode = "r+") {
  const fs::path script = fs::path(file.string() + ".edit.py");
  write_text(script, std::string("import sys, h5py, numpy as np\n"
                                 "with h5py.File(sys.argv[1], '") +
                         mode + "', libver=('v108', 'latest')) as f:\n" + body);
  const std::string cmd = "/usr/bin/python3 " + quote(script.string()) + " " + quote(file.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << body;
}

// The first layer dataset's first element, changed in place; its digest left stale.
constexpr const char* kMutateLayer =
    "    d = f['/forward/0/layers/0/pre_attn']\n"
    "    v = d[...]\n"
    "    v.flat[0] ^= 1\n"
    "    d[...] = v\n";

TEST_F(BadInputTest, CompareRefusesDataThatDoesNotMatchItsDigest) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 lacks h5py or xxhash";
  const fs::path good = good_dump();
  const fs::path mutated = path("mutated.h5"), forged = path("forged.h5");
  fs::copy_file(good, mutated);
  fs::copy_file(good, forged);
  h5py_edit(mutated, kMutateLayer);
  h5py_edit(forged,
            "    f['/forward/0/logits'].attrs['digest'] = np.bytes_(b'xxh3:00000000deadbeef')\n");
  for (const std::string flags : {"", "--full "}) {
    expect_one_line_refusal(
        cli("compare " + flags + quote(good.string()) + " " + quote(mutated.string())),
        {mutated.string(), "/forward/0/layers/0/pre_attn", "digest"});
    expect_one_line_refusal(
        cli("compare " + flags + quote(mutated.string()) + " " + quote(good.string())),
        {mutated.string(), "/forward/0/layers/0/pre_attn", "digest"});
    expect_one_line_refusal(
        cli("compare " + flags + quote(good.string()) + " " + quote(forged.string())),
        {forged.string(), "/forward/0/logits", "digest"});
  }
}

TEST_F(BadInputTest, TrustedDigestsAreSaidToBeUnverifiedInEveryReportForm) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 lacks h5py or xxhash";
  const fs::path good = good_dump();
  const fs::path mutated = path("mutated.h5");
  fs::copy_file(good, mutated);
  h5py_edit(mutated, kMutateLayer);
  const fs::path report = path("trusted");
  const CliResult r = cli("compare --trust-digests " + quote(good.string()) + " " +
                          quote(mutated.string()) + " --report " + quote(report.string()));
  // What the user opted into: the mutation is not read, so the verdict is "equal"...
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // ...and every form says it rests on digests nobody verified.
  EXPECT_NE(r.out.find("unverified digests"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TRUSTED, not verified"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(read_text(report / "report.json"));
  EXPECT_EQ(j["digests"], "trusted");
  EXPECT_GT(j["unverified_datasets"].get<int64_t>(), 0);
  EXPECT_NE(j["summary"].get<std::string>().find("unverified"), std::string::npos);
  EXPECT_NE(read_text(report / "report.html").find("<b>UNVERIFIED</b>"), std::string::npos);
  const std::string junit = read_text(report / "junit.xml");
  EXPECT_NE(junit.find("<property name=\"digests\" value=\"trusted\"/>"), std::string::npos);
  EXPECT_NE(junit.find("UNVERIFIED"), std::string::npos);
  EXPECT_NE(read_text(report / "summary.md").find("**UNVERIFIED**"), std::string::npos);

  // The default on the same pair refuses the file; on a sound pair every form says
  // "verified".
  expect_one_line_refusal(cli("compare " + quote(good.string()) + " " + quote(mutated.string())),
                          {mutated.string()});
  const fs::path verified = path("verified");
  const CliResult ok = cli("compare " + quote(good.string()) + " " + quote(good.string()) +
                           " --report " + quote(verified.string()));
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.out.find("unverified"), std::string::npos) << ok.out;
  EXPECT_EQ(nlohmann::json::parse(read_text(verified / "report.json"))["digests"], "verified");
  for (const char* form : {"report.html", "junit.xml", "summary.md"})
    EXPECT_EQ(read_text(verified / form).find("UNVERIFIED"), std::string::npos) << form;
  // --full (read everything, the default) contradicts --trust-digests.
  EXPECT_EQ(
      cli("compare --full --trust-digests " + quote(good.string()) + " " + quote(good.string()))
          .code,
      2);
}

TEST_F(BadInputTest, VerifyDumpPassesASoundDumpAndNamesWhatIsBroken) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 lacks h5py or xxhash";
  const fs::path good = good_dump();
  const CliResult ok = cli("verify-dump " + quote(good.string()));
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("sound"), std::string::npos) << ok.out;
  const struct {
    const char* name;
    std::string edit;
    std::vector<std::string> needles;
  } cases[] = {
      {"stale-digest", kMutateLayer, {"/forward/0/layers/0/pre_attn", "digest"}},
      {"forged-digest",
       "    f['/forward/0/logits'].attrs['digest'] = np.bytes_(b'xxh3:00000000deadbeef')\n",
       {"/forward/0/logits", "digest"}},
      {"no-digest",
       "    del f['/forward/0/logits'].attrs['digest']\n",
       {"/forward/0/logits", "no digest"}},
      {"duplicate-order",
       "    f['/forward/0/logits'].attrs['order'] = np.int64(0)\n",
       {"order 0", "/forward/0/input_ids"}},
      {"order-gap",
       "    f['/forward/0/logits'].attrs['order'] = np.int64(100000)\n",
       {"/forward/0/logits", "order 100000"}},
      {"format", "    f.attrs['format'] = np.bytes_(b'other.dump')\n", {"format"}},
      {"format-version", "    f.attrs['format_version'] = np.int64(3)\n", {"format_version"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path broken = path(std::string(c.name) + ".h5");
    fs::copy_file(good, broken);
    h5py_edit(broken, c.edit);
    const CliResult r = cli("verify-dump " + quote(broken.string()));
    std::vector<std::string> needles = c.needles;
    needles.push_back(broken.string());
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    for (const std::string& n : needles)
      EXPECT_NE(r.err.find(n), std::string::npos) << n << " in: " << r.err;
  }
}

TEST_F(BadInputTest, HugeAttributesAndShapesAreRefusedBeforeAllocation) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 lacks h5py or xxhash";
  const fs::path good = good_dump();
  const struct {
    const char* name;
    std::string edit;
    std::string place;
  } cases[] = {
      // A 20 MiB root string where the reader reads one (past its 16 MiB bound).
      {"huge-scenario", "    f.attrs['scenario'] = np.bytes_(b'x' * (20 << 20))\n", "scenario"},
      // A 20 MiB integer array among the attributes compare reads.
      {"huge-array", "    f.attrs['junk'] = np.zeros(20 << 17, dtype='<i8')\n", "junk"},
      {"huge-group-attr",
       "    f['/forward/0'].attrs['kind'] = np.array([b'y' * 1024] * (20 << 10))\n", "kind"},
      // A dataset whose shape describes 4 TiB (chunked, nothing stored): refused on open.
      {"huge-shape",
       "    d = f.create_dataset('/forward/0/huge', shape=(1 << 20, 1 << 20), dtype='<f4', "
       "chunks=(1, 1024))\n"
       "    d.attrs['order'] = np.int64(1000)\n",
       "/forward/0/huge"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path hostile = path(std::string(c.name) + ".h5");
    fs::copy_file(good, hostile);
    h5py_edit(hostile, c.edit);
    expect_one_line_refusal(cli("compare " + quote(good.string()) + " " + quote(hostile.string())),
                            {hostile.string(), c.place});
    expect_one_line_refusal(cli("verify-dump " + quote(hostile.string())),
                            {hostile.string(), c.place});
  }
}

TEST_F(BadInputTest, GoldenVerifyRefusesAGoldenThatDoesNotMatchItsDigests) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 lacks h5py or xxhash";
  const fs::path golden = path("golden");
  fs::create_directories(golden);
  for (const char* f : {"MANIFEST.json", "default.h5"})
    fs::copy_file(fs::path(SPLITCHECK_SOURCE_DIR) / "golden" / f, golden / f);
  h5py_edit(golden / "default.h5", kMutateLayer);
  expect_one_line_refusal(cli("golden --dir " + quote(golden.string()) + " verify"),
                          {(golden / "default.h5").string(), "/forward/0/layers/0/pre_attn"});
}

TEST_F(BadInputTest, ACheckpointThatCannotBeWrittenLeavesNoPartialFile) {
  const nlohmann::json j = {
      {"model", {{"preset", "k3-tiny"}, {"overrides", {{"num_hidden_layers", 2}}}}}};
  write_text(path("s.json"), j.dump(2));
  // The destination is a directory that is not empty: the rename fails after the write.
  const fs::path taken = path("taken.h5");
  fs::create_directories(taken / "inside");
  expect_one_line_refusal(
      cli("checkpoint " + quote(path("s.json").string()) + " --out " + quote(taken.string())),
      {taken.string()});
  EXPECT_FALSE(fs::exists(taken.string() + ".partial"));
  // The destination directory does not exist.
  const fs::path nowhere = path("gone") / "ckpt.h5";
  expect_one_line_refusal(
      cli("checkpoint " + quote(path("s.json").string()) + " --out " + quote(nowhere.string())),
      {nowhere.string()});
  EXPECT_FALSE(fs::exists(nowhere.string() + ".partial"));
  // A tensor name HDF5 refuses (under a group that does not exist), after other tensors.
  WeightStore store;
  store.put("a_first", Tensor::zeros(DType::kBF16, {4}));
  store.put("missing/group/tensor", Tensor::zeros(DType::kBF16, {4}));
  const fs::path refused = path("refused.h5");
  Status st = write_checkpoint(refused.string(), ModelConfig{}, store);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(refused.string()), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("missing/group/tensor"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(refused));
  EXPECT_FALSE(fs::exists(refused.string() + ".partial"));
}

TEST_F(BadInputTest, BisectRefusesMalformedScenarioJson) {
  const struct {
    const char* name;
    const char* json;
  } cases[] = {
      {"syntax", "{\n  \"model\": {\"preset\": \"k3-tiny\"},,\n}\n"},
      {"truncated", "{\n  \"model\": {\"preset\": \"k3-ti"},
      {"empty", ""},
      {"not-object", "[1, 2, 3]\n"},
      {"unknown-field", R"({"model": {"preset": "k3-tiny", "overrides": {"hidden_sise": 64}}})"},
      {"bad-type", R"({"model": {"preset": 7}})"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path scenario = path(std::string(c.name) + ".json");
    write_text(scenario, c.json);
    const fs::path repro = path(std::string(c.name) + "-repro.json");
    expect_one_line_refusal(
        cli("bisect " + quote(scenario.string()) + " --out " + quote(repro.string())),
        {scenario.string()});
    EXPECT_FALSE(fs::exists(repro));
  }
  expect_one_line_refusal(cli("bisect " + quote(path("absent.json").string())),
                          {path("absent.json").string()});
}

// The superblock (file header) overwritten past its signature: HDF5 cannot find the root
// group; the file is named, exit 2, for each command that reads a dump.
TEST_F(BadInputTest, ACorruptSuperblockIsRefusedNamingTheFile) {
  const fs::path good = good_dump();
  std::string bytes = read_text(good);
  ASSERT_GT(bytes.size(), 96u);
  ASSERT_EQ(bytes.substr(1, 3), "HDF");
  const struct {
    const char* name;
    size_t begin, end;
  } cases[] = {
      {"versions", 8, 16},     // superblock, free-space and root-group versions
      {"addresses", 24, 56},   // base, extension, end-of-file and root addresses
      {"root-entry", 56, 96},  // the root group's symbol table entry
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string broken = bytes;
    for (size_t i = c.begin; i < c.end; ++i) broken[i] = static_cast<char>(0xA5);
    const fs::path hostile = path(std::string("superblock-") + c.name + ".h5");
    write_text(hostile, broken);
    expect_one_line_refusal(cli("compare " + quote(good.string()) + " " + quote(hostile.string())),
                            {hostile.string()});
    expect_one_line_refusal(cli("verify-dump " + quote(hostile.string())), {hostile.string()});
  }
}

// bf16 is stored as uint16 with dtype="bfloat16" (DESIGN.md); without the attribute the
// bytes are plain integers, and reading them as anything is a guess: refused.
TEST_F(BadInputTest, Bf16DataWithoutItsDtypeAttributeIsRefusedNamingTheDataset) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 lacks h5py or xxhash";
  const fs::path good = good_dump();
  const fs::path hostile = path("no-dtype.h5");
  fs::copy_file(good, hostile);
  h5py_edit(hostile,
            "    d = f['/forward/0/layers/0/pre_attn']\n"
            "    assert d.dtype == np.uint16\n"
            "    del d.attrs['dtype']\n");
  for (const std::string& cmd : {"compare " + quote(good.string()) + " " + quote(hostile.string()),
                                 "verify-dump " + quote(hostile.string())})
    expect_one_line_refusal(cli(cmd), {hostile.string(), "/forward/0/layers/0/pre_attn", "dtype"});
}

// Extents whose element count overflows 64 bits: (2^40, 2^40) wraps to 0 in uint64, so
// a reader that multiplies first sees an empty dataset; (0, 2^62, 2^62) is empty but its
// inner products overflow any stride computed from them. Both are refused on open, before
// anything is allocated, naming the dataset and its shape.
TEST_F(BadInputTest, ShapesWhoseElementCountOverflowsAreRefused) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 lacks h5py or xxhash";
  const fs::path good = good_dump();
  const struct {
    const char* name;
    const char* shape;
    const char* chunks;
  } cases[] = {
      {"wraps-to-zero", "(1 << 40, 1 << 40)", "(1, 1024)"},
      {"zero-times-overflow", "(0, 1 << 62, 1 << 62), maxshape=(None, 1 << 62, 1 << 62)",
       "(1, 1, 1024)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path hostile = path(std::string(c.name) + ".h5");
    fs::copy_file(good, hostile);
    // A well-formed entry otherwise: the next order, the digest of zero bytes.
    h5py_edit(
        hostile,
        "    n = []\n"
        "    f.visititems(lambda k, v: n.append(k) if isinstance(v, h5py.Dataset) else None)\n"
        "    d = f.create_dataset('/forward/0/overflow', shape=" +
            std::string(c.shape) + ", dtype='<f4', chunks=" + c.chunks +
            ")\n"
            "    d.attrs['order'] = np.int64(len(n))\n"
            "    d.attrs['digest'] = np.bytes_(b'xxh3:2d06800538d394c2')\n");
    for (const std::string& cmd :
         {"compare " + quote(good.string()) + " " + quote(hostile.string()),
          "verify-dump " + quote(hostile.string())})
      expect_one_line_refusal(cli(cmd), {hostile.string(), "/forward/0/overflow", "shape"});
  }
}

// Scenario files: 10,000 levels of nesting (arrays and objects, where an object is
// expected and under an unknown key), and a 100 MB file, refused before it is read.
TEST_F(BadInputTest, DeeplyNestedAndHugeScenariosExitTwoNamingFileAndPlace) {
  const int depth = 10000;
  const std::string arrays = std::string(depth, '[') + std::string(depth, ']');
  std::string objects;
  for (int i = 0; i < depth; ++i) objects += "{\"a\":";
  objects += "1" + std::string(depth, '}');
  const struct {
    const char* name;
    std::string json;
    const char* place;
  } cases[] = {
      {"model-arrays", "{\"model\": " + arrays + "}", "/model"},
      {"unknown-objects", "{\"deep\": " + objects + "}", "/deep"},
      {"expect-objects", "{\"expect\": " + objects + "}", "/expect"},
      {"workload-arrays", "{\"workload\": {\"prompts\": " + arrays + "}}", "/workload/prompts"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path scenario = path(std::string(c.name) + ".json");
    write_text(scenario, c.json);
    // Refused before the JSON library parses it (its recursion is what a deeper file
    // would exhaust: found by AddressSanitizer), naming the line and column.
    for (const char* cmd : {"run ", "sweep "})
      expect_one_line_refusal(cli(cmd + quote(scenario.string())),
                              {scenario.string() + ":1:", "nested deeper than 64 levels"});
  }
  // 100 MB, a valid JSON object: refused by its size before a byte is parsed.
  const fs::path huge = path("huge.json");
  {
    std::ofstream out(huge, std::ios::binary);
    out << "{\"model\": {\"preset\": \"k3-tiny\"}, \"name\": \"";
    const std::string block(1 << 20, 'x');
    for (int i = 0; i < 100; ++i) out << block;
    out << "\"}\n";
  }
  ASSERT_GT(fs::file_size(huge), 100u << 20);
  for (const char* cmd : {"run ", "sweep ", "bisect "})
    expect_one_line_refusal(cli(cmd + quote(huge.string())), {huge.string(), "MiB"});
}

}  // namespace
}  // namespace splitcheck
