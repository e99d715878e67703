// Shared fixtures of the report tests: small sweeps run once per test binary, their
// reports written into temporary directories, and count extraction from each form.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "harness/dump/dump.h"
#include "harness/reports/report.h"
#include "harness/sweep/sweep.h"

namespace splitcheck::testing {

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Validates <dir>/report.json against harness/reports/report.schema.json with python3-jsonschema.
inline void validate(const std::filesystem::path& dir) {
  if (std::system("/usr/bin/python3 -c 'import jsonschema' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 jsonschema is not installed";
  const std::string schema =
      std::string(SPLITCHECK_SOURCE_DIR) + "/harness/reports/report.schema.json";
  const std::string cmd =
      "/usr/bin/python3 -c 'import json,sys,jsonschema; s=json.load(open(sys.argv[1])); "
      "jsonschema.Draft202012Validator.check_schema(s); "
      "jsonschema.Draft202012Validator(s).validate(json.load(open(sys.argv[2])))' '" +
      schema + "' '" + (dir / "report.json").string() + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

inline size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size()))
    ++n;
  return n;
}

// Runs the scenario (optionally filtered or sharded) and writes its reports into a
// fresh directory named `tag`; cached per tag.
inline const std::filesystem::path& sweep_reports(const std::string& tag,
                                                  const std::string& scenario,
                                                  const std::string& filter = "",
                                                  int shard_index = 0, int shard_count = 1) {
  static std::map<std::string, std::filesystem::path> cache;
  auto it = cache.find(tag);
  if (it != cache.end()) return it->second;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("splitcheck_report_test_" + std::to_string(::getpid()) + "_" + tag);
  std::filesystem::remove_all(dir);
  Result<Scenario> s =
      load_scenario(std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/" + scenario + ".json");
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  SweepOptions opts;
  opts.filter = filter;
  opts.shard_index = shard_index;
  opts.shard_count = shard_count;
  Result<SweepResult> r = run_sweep(*s, opts);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  Status st = write_reports(
      dir.string(), sweep_report(*r, ReportContext{"splitcheck sweep scenarios/" + scenario +
                                                   ".json --report " + dir.string()}));
  EXPECT_TRUE(st.is_ok()) << st.message();
  return cache.emplace(tag, dir).first->second;
}

// The fault scenario, filtered to a few split points (split-3, split-30, split-31).
inline const std::filesystem::path& fault_reports() {
  return sweep_reports("fault", "fault-handoff-no-zero-delta", "split-3");
}

inline const std::filesystem::path& pairwise_reports() {
  return sweep_reports("pairwise", "pp4-pairwise");
}

// Two dumps of 6 layers x 2 sites written by different producers (splitcheck on cpu, and
// an external engine's writer), the candidate diverging from layer 2 on and more with
// each layer (layer 2: 1 element, layer 3: 1/16 of them, layer 4: 1/4, layer 5: all), and
// their compare reports written into a fresh directory named `tag`; cached per tag.
inline const std::filesystem::path& compare_reports(const std::string& tag) {
  static std::map<std::string, std::filesystem::path> cache;
  auto it = cache.find(tag);
  if (it != cache.end()) return it->second;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("splitcheck_compare_report_test_" + std::to_string(::getpid()) + "_" + tag);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, bool candidate) {
    DumpHeader h;
    h.created = "2024-05-01T12:00:00Z";
    h.level = "layer";
    h.partition = candidate ? "0-3|3-6" : "0-6";
    h.backend = candidate ? "torch-cpu" : "cpu";
    h.producer_json = candidate ? R"({"name":"transformers-deepseek-v3","version":"4.46.0",)"
                                  R"("git_revision":"unknown"})"
                                : R"({"name":"splitcheck","version":"0.1.0",)"
                                  R"("git_revision":"990f7de"})";
    h.env_json = candidate ? R"({"compiler":"torch 2.5.1","flags":"","device":"cpu"})"
                           : R"({"compiler":"GNU 12.2.0","flags":"-O3","device":"cpu"})";
    const std::string path = (dir / name).string();
    Result<DumpWriter> w = DumpWriter::create(path, h);
    EXPECT_TRUE(w.is_ok()) << w.status().message();
    for (int l = 0; l < 6; ++l) {
      for (const char* site : {"pre_attn", "mlp_out"}) {
        Tensor t = Tensor::zeros(DType::kBF16, {8, 64});
        for (int64_t i = 0; i < t.numel(); ++i)
          t.data<bf16>()[i] = to_bf16(static_cast<float>((i + l) % 13) * 0.25f);
        const int64_t wrong = !candidate || l < 2 ? 0
                              : l == 2            ? 1
                              : l == 3            ? t.numel() / 16
                              : l == 4            ? t.numel() / 4
                                                  : t.numel();
        for (int64_t i = 0; i < wrong; ++i) t.data<bf16>()[i].bits ^= 1;
        EXPECT_TRUE(w->write("/forward/0/layers/" + std::to_string(l) + "/" + site, t).is_ok());
      }
    }
    EXPECT_TRUE(w->finish().is_ok());
    return path;
  };
  const std::string a = write("golden.h5", false), b = write("engine.h5", true);
  Result<CompareResult> r = compare_dumps(a, b, {});
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  const Status st =
      write_reports((dir / "report").string(),
                    compare_report(*r, a, b, ReportContext{"splitcheck compare " + a + " " + b}));
  EXPECT_TRUE(st.is_ok()) << st.message();
  return cache.emplace(tag, dir / "report").first->second;
}

}  // namespace splitcheck::testing
