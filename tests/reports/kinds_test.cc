// compare --report and bisect --report write the same report model as sweep (kind
// "compare" / "bisect"): it validates against harness/reports/report.schema.json and the four
// forms agree on the counts.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "harness/dump/dump.h"
#include "tests/cli_fixture.h"
#include "tests/reports/report_fixture.h"

namespace splitcheck::testing {
namespace {

namespace fs = std::filesystem;

using cli_test::quote;

class KindsTest : public cli_test::CliFixture {
 protected:
  KindsTest() : CliFixture("splitcheck-kinds-test-") {}

  // Runs the CLI; returns its exit code (stdout and stderr land in dir_).
  int cli(const std::string& args) const { return CliFixture::cli(args).code; }
  std::string scenario(const std::string& name) const {
    return quote(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/" + name + ".json");
  }
};

int64_t attr(const std::string& text, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(name + "=\"(\\d+)\""))) return -1;
  return std::stoll(m[1]);
}

// The counts of report.json as each of the other three forms states them.
void check_counts(const fs::path& dir, const nlohmann::json& j) {
  const nlohmann::json& c = j["counts"];
  const int64_t total = c["total"], pass = c["pass"], diverged = c["diverged"];
  int64_t listed_diverged = 0;
  for (const auto& k : j["cases"]) listed_diverged += k["verdict"] == "diverged";
  EXPECT_EQ(listed_diverged, diverged);

  const std::string junit = read_text(dir / "junit.xml");
  EXPECT_EQ(attr(junit, "tests"), total);
  EXPECT_EQ(attr(junit, "failures"), diverged);
  EXPECT_EQ(static_cast<int64_t>(count_of(junit, "<failure type=\"diverged\"")), diverged);

  const std::string md = read_text(dir / "summary.md");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      md, m,
      std::regex(
          R"(\|(?:---:\|){9}\n\| (\d+) \| (\d+) \|(?: \d+ \|){6} (\d+) \|)")));
  EXPECT_EQ(std::stoll(m[1]), pass);
  EXPECT_EQ(std::stoll(m[2]), diverged);
  EXPECT_EQ(std::stoll(m[3]), total);

  const std::string html = read_text(dir / "report.html");
  for (const auto& [k, v] : {std::pair{"pass", pass}, {"diverged", diverged}, {"total", total}}) {
    std::smatch hm;
    ASSERT_TRUE(
        std::regex_search(html, hm, std::regex(std::string("data-count=\"") + k + "\">(\\d+)<")))
        << k;
    EXPECT_EQ(std::stoll(hm[1]), v) << k;
  }
  EXPECT_EQ(static_cast<int64_t>(count_of(html, "<tr class=\"case case-diverged\"")), diverged);
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

TEST_F(KindsTest, CompareReport) {
  const fs::path a = dir_ / "a.h5", b = dir_ / "b.h5", c = dir_ / "c.h5";
  ASSERT_EQ(cli("run " + scenario("pp4-pairwise") + " --out " + quote(a.string())), 0);
  ASSERT_EQ(cli("run " + scenario("pp4-pairwise") + " --split 5 --out " + quote(b.string())), 0);

  // Equal: conformant, no cases, every dataset passes.
  const fs::path equal_dir = dir_ / "equal";
  ASSERT_EQ(cli("compare " + quote(a.string()) + " " + quote(b.string()) + " --report " +
                quote(equal_dir.string())),
            0)
      << read_text(dir_ / "stderr.txt");
  const nlohmann::json eq = nlohmann::json::parse(read_text(equal_dir / "report.json"));
  EXPECT_EQ(eq["kind"], "compare");
  EXPECT_EQ(eq["verdict"], "conformant");
  EXPECT_EQ(eq["exit_code"], 0);
  EXPECT_TRUE(eq["cases"].empty());
  EXPECT_GT(eq["counts"]["total"].get<int64_t>(), 0);
  EXPECT_EQ(eq["counts"]["pass"], eq["counts"]["total"]);
  check_counts(equal_dir, eq);
  validate(equal_dir);

  // One bit flipped in a layer's dataset of a copy of b: one diverged case.
  fs::copy_file(b, c);
  std::string flipped;
  uint64_t offset = 0;
  {
    Result<DumpReader> r = DumpReader::open(c.string());
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    for (const DatasetInfo& d : r->datasets()) {
      if (d.path.find("/layers/") == std::string::npos || d.nbytes == 0) continue;
      const std::optional<uint64_t> at = r->contiguous_offset(d.path);
      if (!at) continue;
      flipped = d.path;
      offset = *at;
      break;
    }
  }
  ASSERT_FALSE(flipped.empty()) << "no contiguous layer dataset";
  {
    std::fstream f(c, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char byte = 0;
    f.get(byte);
    byte = static_cast<char>(byte ^ 0x01);
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(byte);
    ASSERT_TRUE(f.good());
  }
  // The stored digest still names the original bytes: a corrupt file, refused.
  ASSERT_EQ(cli("compare " + quote(a.string()) + " " + quote(c.string())), 2);
  EXPECT_NE(read_text(dir_ / "stderr.txt").find(flipped), std::string::npos);
  // Rewritten honestly (as an engine that computed these bits would), it is a divergence.
  const std::string fix_digest =
      "/usr/bin/python3 -c 'import sys, h5py, xxhash\n"
      "with h5py.File(sys.argv[1], \"r+\") as f:\n"
      "    d = f[sys.argv[2]]\n"
      "    h = xxhash.xxh3_64_intdigest(d[...].tobytes())\n"
      "    d.attrs[\"digest\"] = (\"xxh3:%016x\" % h).encode()' " +
      quote(c.string()) + " " + quote(flipped);
  ASSERT_EQ(std::system(fix_digest.c_str()), 0) << fix_digest;
  const fs::path diff_dir = dir_ / "diff";
  ASSERT_EQ(cli("compare " + quote(a.string()) + " " + quote(c.string()) + " --report " +
                quote(diff_dir.string())),
            1)
      << read_text(dir_ / "stderr.txt");
  const nlohmann::json d = nlohmann::json::parse(read_text(diff_dir / "report.json"));
  EXPECT_EQ(d["kind"], "compare");
  EXPECT_EQ(d["verdict"], "divergent");
  EXPECT_EQ(d["exit_code"], 1);
  ASSERT_EQ(d["cases"].size(), 1u);
  EXPECT_EQ(d["cases"][0]["key"], flipped);
  EXPECT_EQ(d["cases"][0]["verdict"], "diverged");
  EXPECT_EQ(d["cases"][0]["first_divergence"]["mismatches"], 1);
  EXPECT_GE(d["cases"][0]["first_divergence"]["layer"].get<int>(), 0);
  EXPECT_EQ(d["counts"]["total"], eq["counts"]["total"]);
  EXPECT_EQ(d["counts"]["pass"].get<int64_t>(), eq["counts"]["total"].get<int64_t>() - 1);
  check_counts(diff_dir, d);
  const std::string md = read_text(diff_dir / "summary.md");
  EXPECT_NE(md.find("DIVERGENT"), std::string::npos);
  EXPECT_EQ(read_text(diff_dir / "report.html").find("split-map"), std::string::npos);
  validate(diff_dir);
}

TEST_F(KindsTest, BisectReport) {
  const fs::path report = dir_ / "bisect", repro = dir_ / "repro.json";
  ASSERT_EQ(cli("bisect " + scenario("fault-handoff-no-zero-delta") + " --out " +
                quote(repro.string()) + " --report " + quote(report.string())),
            1)
      << read_text(dir_ / "stderr.txt");
  ASSERT_TRUE(fs::exists(repro));
  const nlohmann::json j = nlohmann::json::parse(read_text(report / "report.json"));
  EXPECT_EQ(j["kind"], "bisect");
  EXPECT_EQ(j["verdict"], "divergent");
  EXPECT_EQ(j["exit_code"], 1);
  EXPECT_EQ(j["bisect"]["cause"], "dispatch mismatch");
  EXPECT_EQ(j["bisect"]["repro"]["path"], repro.string());
  EXPECT_EQ(j["bisect"]["repro"]["replay"], "splitcheck sweep " + repro.string());
  ASSERT_EQ(j["cases"].size(), 1u);
  EXPECT_EQ(j["cases"][0]["cause"], "dispatch mismatch");
  EXPECT_EQ(j["cases"][0]["key"], j["bisect"]["first_failing_split"]);
  EXPECT_GE(j["bisect"]["first_divergence"]["layer"].get<int>(), 0);
  EXPECT_GT(j["bisect"]["before"]["layers"].get<int>(), 0);
  EXPECT_LE(j["bisect"]["after"]["prompts"], j["bisect"]["before"]["prompts"]);
  check_counts(report, j);
  EXPECT_NE(read_text(report / "report.html").find("data-cause=\"dispatch mismatch\""),
            std::string::npos);
  EXPECT_NE(read_text(report / "summary.md").find("dispatch mismatch"), std::string::npos);
  EXPECT_NE(read_text(report / "junit.xml").find("cause: dispatch mismatch"), std::string::npos);
  validate(report);
}

}  // namespace
}  // namespace splitcheck::testing
