// `splitcheck compare` and placement: /stages (layer range, embedding, drafter embedding,
// measured parameter bytes) and /stage_trace are judged when both dumps record /stages,
// and every report form says "placement not judged" (naming the file that lacks it) when
// only one does.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "harness/dump/compare.h"
#include "harness/dump/dump.h"
#include "tests/cli_fixture.h"
#include "tests/small_default.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::file_text;
using cli_test::quote;

// What one stage of a written dump holds.
struct StageAttrs {
  int64_t begin, end;
  std::string embedding;
  int64_t bytes;
};

class ComparePlacementTest : public cli_test::CliFixture {
 protected:
  ComparePlacementTest() : CliFixture("splitcheck-compare-placement-test-") {}

  // A small dump: one forward's logits, then (when `stages` is not empty) /stage_trace/0
  // and /stages/<s>, as a partitioned run writes them.
  std::string dump(const std::string& name, const std::vector<StageAttrs>& stages,
                   std::vector<int32_t> trace = {0, 0, 1, 1}) {
    const std::string p = path(name).string();
    DumpHeader h;
    h.created = "2024-05-01T12:00:00Z";
    h.level = "summary";
    Result<DumpWriter> w = DumpWriter::create(p, h);
    EXPECT_TRUE(w.is_ok()) << w.status().message();
    Tensor logits = Tensor::zeros(DType::kF32, {2, 4});
    for (int i = 0; i < 8; ++i) logits.data<float>()[i] = static_cast<float>(i);
    EXPECT_TRUE(w->write("/forward/0/logits", logits).is_ok());
    Tensor t = Tensor::zeros(DType::kI32, {static_cast<int64_t>(trace.size())});
    for (size_t i = 0; i < trace.size(); ++i) t.data<int32_t>()[i] = trace[i];
    EXPECT_TRUE(w->write("/stage_trace/0", t).is_ok());
    for (size_t s = 0; s < stages.size(); ++s) {
      const std::string g = "/stages/" + std::to_string(s);
      EXPECT_TRUE(w->set_attr(g, "layer_begin", stages[s].begin).is_ok());
      EXPECT_TRUE(w->set_attr(g, "layer_end", stages[s].end).is_ok());
      EXPECT_TRUE(w->set_attr(g, "embedding", stages[s].embedding).is_ok());
      EXPECT_TRUE(w->set_attr(g, "parameter_bytes", stages[s].bytes).is_ok());
    }
    EXPECT_TRUE(w->finish().is_ok());
    return p;
  }

  // `compare a b --report DIR`: the CLI's result and its four report files.
  struct Reports {
    CliResult cli;
    nlohmann::json json;
    std::string html, junit, markdown;
  };
  Reports compare_cli(const std::string& a, const std::string& b, const std::string& dir) {
    Reports r;
    r.cli = cli("compare " + quote(a) + " " + quote(b) + " --report " + quote(path(dir).string()));
    r.json = nlohmann::json::parse(file_text(path(dir) / "report.json"), nullptr, false);
    r.html = file_text(path(dir) / "report.html");
    r.junit = file_text(path(dir) / "junit.xml");
    r.markdown = file_text(path(dir) / "summary.md");
    return r;
  }
};

const std::vector<StageAttrs> kTwoStages = {{0, 1, "real", 1000}, {1, 2, "missing", 2000}};

TEST_F(ComparePlacementTest, StagesAreJudgedWhenBothDumpsRecordThem) {
  const std::string a = dump("a.h5", kTwoStages);
  // Equal placement: equal.
  const Reports same = compare_cli(a, dump("same.h5", kTwoStages), "same");
  EXPECT_EQ(same.cli.code, 0) << same.cli.out << same.cli.err;
  EXPECT_NE(same.cli.out.find("placement judged: 2 stages in A, 2 in B"), std::string::npos)
      << same.cli.out;
  EXPECT_EQ(same.json["placement_judgement"]["judgement"], "judged");

  // Measured bytes, embedding, layer range: each a divergence naming the stage.
  struct Case {
    std::string name;
    std::vector<StageAttrs> stages;
    std::string attribute;
  };
  const std::vector<Case> cases = {
      {"bytes", {{0, 1, "real", 1000}, {1, 2, "missing", 2512}}, "parameter_bytes"},
      {"embedding", {{0, 1, "real", 1000}, {1, 2, "copy-for-drafter", 2000}}, "embedding"},
      {"range", {{0, 1, "real", 1000}, {1, 3, "missing", 2000}}, "layer_end"},
  };
  for (const Case& c : cases) {
    const Reports r = compare_cli(a, dump(c.name + ".h5", c.stages), c.name);
    EXPECT_EQ(r.cli.code, 1) << c.name << ": " << r.cli.out << r.cli.err;
    EXPECT_NE(r.cli.out.find("attribute " + c.attribute + " of /stages/1"), std::string::npos)
        << c.name << ": " << r.cli.out;
    EXPECT_EQ(r.json["verdict"], "divergent") << c.name;
    EXPECT_EQ(r.json["placement_judgement"]["judgement"], "judged") << c.name;
  }
  // A stage that ran an event another stage ran in A: /stage_trace differs.
  const Reports trace = compare_cli(a, dump("trace.h5", kTwoStages, {0, 1, 1, 1}), "trace");
  EXPECT_EQ(trace.cli.code, 1) << trace.cli.out << trace.cli.err;
  EXPECT_NE(trace.cli.out.find("stage_trace"), std::string::npos) << trace.cli.out;
}

TEST_F(ComparePlacementTest, EveryReportFormSaysPlacementNotJudgedWhenOneDumpLacksIt) {
  const std::string staged = dump("staged.h5", kTwoStages);
  // PP=1 records a trace of stage 0 only, and no /stages.
  const std::string pp1 = dump("pp1.h5", {}, {0, 0, 0, 0});
  const std::string none = dump("none.h5", {}, {0, 0, 0, 0});
  for (const auto& [a, b, lacking, other] :
       {std::tuple{pp1, staged, std::string("A"), std::string("B")},
        std::tuple{staged, pp1, std::string("B"), std::string("A")}}) {
    SCOPED_TRACE(lacking + " lacks /stages");
    const Reports r = compare_cli(a, b, "not-judged-" + lacking);
    const std::string line =
        "placement not judged: " + lacking + " records no /stages (" + other + " records 2 stages)";
    // The data are equal: exit 0, and the stage trace (which differs) was not compared.
    EXPECT_EQ(r.cli.code, 0) << r.cli.out << r.cli.err;
    EXPECT_NE(r.cli.out.find(line), std::string::npos) << r.cli.out;
    ASSERT_TRUE(r.json.is_object());
    EXPECT_EQ(r.json["placement_judgement"]["judgement"], "not-judged");
    EXPECT_NE(r.json["placement_judgement"]["line"].get<std::string>().find(line), std::string::npos);
    EXPECT_NE(r.html.find("NOT JUDGED"), std::string::npos);
    EXPECT_NE(r.html.find(line), std::string::npos);
    EXPECT_NE(r.junit.find("<property name=\"placement\" value=\"not-judged\"/>"),
              std::string::npos)
        << r.junit;
    EXPECT_NE(r.junit.find("NOT JUDGED: " + line), std::string::npos) << r.junit;
    EXPECT_NE(r.markdown.find("NOT JUDGED"), std::string::npos) << r.markdown;
    EXPECT_NE(r.markdown.find(line), std::string::npos) << r.markdown;
  }
  // Neither records it: said too, never "judged".
  const Reports n = compare_cli(pp1, none, "neither");
  EXPECT_EQ(n.cli.code, 0) << n.cli.out << n.cli.err;
  EXPECT_NE(n.cli.out.find("placement not recorded by either dump"), std::string::npos)
      << n.cli.out;
  EXPECT_EQ(n.json["placement_judgement"]["judgement"], "not-recorded");
}

// Real runs: two runs at one split record the same placement (judged, equal), with the
// drafter's embedding on its stage; PP=1 (one stage over every layer) against a split says
// placement was not judged: the partitions differ.
TEST_F(ComparePlacementTest, RealRunsAtOneSplitAreJudgedAndPp1IsNot) {
  // The default scenario on one prompt of 4 tokens: placement is what the stages hold, the
  // same for any workload.
  const std::string scenario = cli_test::small_default(dir_).string();
  const std::string s1 = path("s1.h5").string(), s2 = path("s2.h5").string();
  const std::string pp1 = path("pp1.h5").string(), s13 = path("s13.h5").string();
  for (const auto& [out, split] :
       {std::pair{s1, std::string(" --split 1")}, std::pair{s2, std::string(" --split 1")},
        std::pair{pp1, std::string()}, std::pair{s13, std::string(" --split 13")}}) {
    const CliResult r = cli("run " + quote(scenario) + split + " --out " + quote(out));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
  }
  Result<DumpReader> reader = DumpReader::open(s1);
  ASSERT_TRUE(reader.is_ok()) << reader.status().message();
  Result<std::map<std::string, AttributeValue>> last = reader->attributes("/stages/1");
  ASSERT_TRUE(last.is_ok()) << last.status().message();
  EXPECT_EQ(last->count("drafter_embedding"), 1u) << "the default scenario has a drafter";

  const CliResult same = cli("compare " + quote(s1) + " " + quote(s2));
  EXPECT_EQ(same.code, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("placement judged: 2 stages in A, 2 in B"), std::string::npos)
      << same.out;
  const CliResult mixed = cli("compare " + quote(pp1) + " " + quote(s1));
  EXPECT_EQ(mixed.code, 0) << mixed.out << mixed.err;
  EXPECT_NE(mixed.out.find("placement not judged: the dumps are of different partitions (A "
                           "0-32, B 0-1|1-32)"),
            std::string::npos)
      << mixed.out;
  // Two partitions hold different stages by design: the data is compared, placement is not.
  const CliResult other = cli("compare " + quote(s1) + " " + quote(s13));
  EXPECT_EQ(other.code, 0) << other.out << other.err;
  EXPECT_NE(other.out.find("placement not judged: the dumps are of different partitions (A "
                           "0-1|1-32, B 0-13|13-32)"),
            std::string::npos)
      << other.out;
}

}  // namespace
}  // namespace splitcheck
