// Scenario files: parsing, defaults, every class of validation error (with its exact JSON
// pointer), path resolution, the resolved JSON's stability, and the fault/check registries.
#include "harness/scenario/scenario.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "harness/scenario/checks.h"
#include "harness/scenario/faults.h"
#include "harness/scenario/suggest.h"

namespace splitcheck {
namespace {

using json = nlohmann::json;

const std::string kSourceDir = SPLITCHECK_SOURCE_DIR;

// Parses `j` as if it came from "scenarios/x.json" in directory "/base".
Result<Scenario> parse(const json& j) { return parse_scenario(j, "scenarios/x.json", "/base"); }

// The error message of parsing `j`, or "" when it parses.
std::string error_of(const json& j) {
  Result<Scenario> s = parse(j);
  if (s.is_ok()) return "";
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidInput);
  return s.status().message();
}

// `j` must be refused with a message naming `pointer` and containing `what`.
void expect_error(const json& j, const std::string& pointer, const std::string& what) {
  const std::string msg = error_of(j);
  SCOPED_TRACE(j.dump());
  EXPECT_EQ(msg.rfind("scenarios/x.json: " + pointer + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

// A temporary directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("splitcheck_scenario_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path p = path_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

TEST(ScenarioTest, DefaultScenarioParses) {
  const std::string path = kSourceDir + "/scenarios/default.json";
  Result<Scenario> r = load_scenario(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const Scenario& s = *r;
  EXPECT_EQ(s.name, "default");
  EXPECT_EQ(s.source_path, path);
  EXPECT_EQ(s.model.preset, "k3-tiny");
  EXPECT_EQ(s.model.num_hidden_layers, 32);
  EXPECT_EQ(s.model.attn_res_block_size, 8);
  EXPECT_EQ(s.model.hidden_size, 256);
  EXPECT_EQ(s.partitions.pp, 2);
  EXPECT_EQ(s.partitions.mode, "all");
  EXPECT_TRUE(s.partitions.cuts.empty());
  EXPECT_EQ(s.capture_ids, (std::vector<int>{0, 7, 16, 25, 32}));
  EXPECT_EQ(s.workload.prompts, 2);
  EXPECT_EQ(s.workload.max_new_tokens, 56);
  EXPECT_EQ(s.workload.file, (std::filesystem::path(kSourceDir) /
                              "scenarios/workloads/gsm8k_style_seed2026_n32.json")
                                 .lexically_normal()
                                 .string());
  EXPECT_EQ(s.dump_level, DumpLevel::kLayer);
  EXPECT_EQ(s.speculative.method, "dspark");
  EXPECT_EQ(s.speculative.gamma, 7);
  EXPECT_TRUE(s.faults.empty());
  EXPECT_EQ(s.checks.size(), check_registry().size());
  EXPECT_EQ(s.backend, "cpu");
  EXPECT_EQ(s.transport, "inproc");
  EXPECT_EQ(s.expect, (json{{"verdict", "conformant"},
                            {"identical_splits", 31},
                            {"acceptance_rate_at_least", 0.3},
                            {"every_accepted_length", true}}));
}

TEST(ScenarioTest, EmptyObjectTakesDefaults) {
  Result<Scenario> r = parse(json::object());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->name, "x");  // the file's stem
  EXPECT_EQ(r->model.preset, "k3-tiny");
  EXPECT_TRUE(r->checkpoint.empty());
  EXPECT_TRUE(r->workload.file.empty());
  EXPECT_EQ(r->workload.seed, 2026u);
  EXPECT_EQ(r->prefill_chunk, 0);
  EXPECT_EQ(r->speculative.gamma, 7);
  EXPECT_EQ(r->expect, json::object());
}

TEST(ScenarioTest, ModelOverridesAndSeed) {
  Result<Scenario> r = parse(json::parse(R"({"model": {"preset": "k3-small", "seed": 1234,
      "overrides": {"num_hidden_layers": 16, "rms_norm_eps": 1e-5,
                    "native_attn_res_hidden_sizes": [256, 1024]}}})"));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->model.preset, "k3-small");
  EXPECT_EQ(r->model.seed, 1234u);
  EXPECT_EQ(r->model.num_hidden_layers, 16);
  EXPECT_EQ(r->model.hidden_size, 1024);
  EXPECT_EQ(r->model.rms_norm_eps, 1e-5f);
  EXPECT_EQ(r->model.native_attn_res_hidden_sizes, (std::vector<int>{256, 1024}));
}

TEST(ScenarioTest, CaptureIdDefaultsFollowTheMethod) {
  Result<Scenario> eagle = parse(json{{"speculative", {{"method", "eagle3"}}}});
  ASSERT_TRUE(eagle.is_ok()) << eagle.status().message();
  EXPECT_EQ(eagle->capture_ids, (std::vector<int>{2, 16, 29}));
  Result<Scenario> dspark = parse(json{{"speculative", {{"method", "dspark"}}}});
  ASSERT_TRUE(dspark.is_ok()) << dspark.status().message();
  EXPECT_EQ(dspark->capture_ids, (std::vector<int>{0, 7, 16, 25, 32}));
  Result<Scenario> tiny = parse(json{{"model", {{"overrides", {{"num_hidden_layers", 2}}}}}});
  ASSERT_TRUE(tiny.is_ok()) << tiny.status().message();
  EXPECT_EQ(tiny->capture_ids, (std::vector<int>{0, 1, 2}));
}

TEST(ScenarioTest, MinusOneAliasesZeroAndIdsAreSortedUnique) {
  Result<Scenario> r = parse(json{{"capture_ids", {32, -1, 7, 0, 16, 7}}});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->capture_ids, (std::vector<int>{0, 7, 16, 32}));
}

TEST(ScenarioTest, ExplicitSplits) {
  Result<Scenario> r = parse(json{{"partitions", {{"pp", 3}, {"splits", {{8, 20}, {1, 31}}}}}});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->partitions.mode, "list");
  EXPECT_EQ(r->partitions.cuts, (std::vector<std::vector<int>>{{8, 20}, {1, 31}}));
  for (const char* mode : {"all", "pairwise", "every-layer", "balanced", "exhaustive"}) {
    Result<Scenario> m = parse(json{{"partitions", {{"pp", 3}, {"splits", mode}}}});
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    EXPECT_EQ(m->partitions.mode, mode);
  }
}

TEST(ScenarioTest, RelativePathsResolveAgainstTheScenarioDirectory) {
  Result<Scenario> r = parse(
      json{{"checkpoint", "ckpt/w.h5"}, {"workload", {{"file", "workloads/../workloads/a.json"}}}});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->checkpoint, "/base/ckpt/w.h5");
  EXPECT_EQ(r->workload.file, "/base/workloads/a.json");
  Result<Scenario> abs = parse(json{{"checkpoint", "/elsewhere/w.h5"}});
  ASSERT_TRUE(abs.is_ok());
  EXPECT_EQ(abs->checkpoint, "/elsewhere/w.h5");

  TempDir dir;
  std::filesystem::create_directories(dir.path() / "sub");
  const std::string path =
      dir.write("sub/s.json", R"({"workload": {"file": "w.json"}, "checkpoint": "../c.h5"})");
  Result<Scenario> loaded = load_scenario(path);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ(loaded->workload.file, (dir.path() / "sub/w.json").string());
  EXPECT_EQ(loaded->checkpoint, (dir.path() / "c.h5").string());
}

TEST(ScenarioTest, ResolvedJsonIsStableAndReparses) {
  Result<Scenario> r = load_scenario(kSourceDir + "/scenarios/default.json");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const json a = resolved_scenario_json(*r);
  const json b = resolved_scenario_json(*r);
  EXPECT_EQ(a.dump(), b.dump());
  EXPECT_FALSE(a.contains("source_path"));
  EXPECT_EQ(a["model"]["overrides"]["num_hidden_layers"], 32);
  EXPECT_TRUE(a["model"]["overrides"].contains("rms_norm_eps"));
  EXPECT_TRUE(a["model"].contains("seed"));
  EXPECT_EQ(a["engine"]["dump_level"], "layer");

  Result<Scenario> again = parse_scenario(a, "resolved.json", "/unused");
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  EXPECT_EQ(resolved_scenario_json(*again).dump(), a.dump());
  EXPECT_EQ(again->model.rms_norm_eps, r->model.rms_norm_eps);

  // Through text, with explicit splits and faults too.
  Result<Scenario> rich = parse(json::parse(R"({"partitions": {"pp": 2, "splits": [[12], [20]]},
      "faults": ["handoff.no_zero_delta"], "checks": ["tensors", "dispatch"],
      "model": {"overrides": {"rms_norm_eps": 1e-5}}, "capture_ids": [-1, 5]})"));
  ASSERT_TRUE(rich.is_ok()) << rich.status().message();
  const std::string text = resolved_scenario_json(*rich).dump(2);
  Result<Scenario> rich_again = parse(json::parse(text));
  ASSERT_TRUE(rich_again.is_ok()) << rich_again.status().message();
  EXPECT_EQ(resolved_scenario_json(*rich_again).dump(2), text);
}

TEST(ScenarioTest, DumpLevelNames) {
  EXPECT_STREQ(dump_level_name(DumpLevel::kSummary), "summary");
  EXPECT_STREQ(dump_level_name(DumpLevel::kLayer), "layer");
  EXPECT_STREQ(dump_level_name(DumpLevel::kFull), "full");
  Result<Scenario> r = parse(json{{"engine", {{"dump_level", "full"}}}});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->dump_level, DumpLevel::kFull);
}

TEST(ScenarioErrorTest, UnknownKeysAtEveryLevel) {
  expect_error(json{{"nmae", "x"}}, "/nmae", "unknown key");
  expect_error(json{{"model", {{"presets", "k3-tiny"}}}}, "/model/presets", "unknown key");
  expect_error(json{{"model", {{"overrides", {{"hidden_sise", 256}}}}}},
               "/model/overrides/hidden_sise", "unknown key");
  expect_error(json{{"model", {{"overrides", {{"preset", "k3-tiny"}}}}}}, "/model/overrides/preset",
               "unknown key");
  expect_error(json{{"workload", {{"promts", 2}}}}, "/workload/promts", "unknown key");
  expect_error(json{{"engine", {{"chunk", 2}}}}, "/engine/chunk", "unknown key");
  expect_error(json{{"speculative", {{"gama", 2}}}}, "/speculative/gama", "unknown key");
  expect_error(json{{"partitions", {{"split", "all"}}}}, "/partitions/split", "unknown key");
  expect_error(json{{"a/b~c", 1}}, "/a~1b~0c", "unknown key");
}

// A misspelt key is answered with the nearest known one, at every level; a name near none
// gets no guess.
TEST(ScenarioErrorTest, UnknownKeysNameTheNearestKnownOne) {
  expect_error(json{{"partitons", {{"pp", 2}}}}, "/partitons",
               "unknown key; did you mean \"partitions\"?");
  expect_error(json{{"model", {{"overrides", {{"hidden_sise", 256}}}}}},
               "/model/overrides/hidden_sise", "unknown key; did you mean \"hidden_size\"?");
  expect_error(json{{"speculative", {{"gama", 2}}}}, "/speculative/gama",
               "unknown key; did you mean \"gamma\"?");
  const std::string far = error_of(json{{"zzzzzzzz", 1}});
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  EXPECT_EQ(nearest_name("PARTITONS", {"partitions", "faults"}), "partitions");
}

TEST(ScenarioErrorTest, WrongTypes) {
  expect_error(json::array(), "/", "expected object, got array");
  expect_error(json{{"name", 3}}, "/name", "expected string, got integer");
  expect_error(json{{"model", "k3-tiny"}}, "/model", "expected object, got string");
  expect_error(json{{"model", {{"overrides", {{"hidden_size", "256"}}}}}},
               "/model/overrides/hidden_size", "expected integer, got string");
  expect_error(json{{"model", {{"overrides", {{"hidden_size", 256.5}}}}}},
               "/model/overrides/hidden_size", "expected integer, got number");
  expect_error(json{{"model", {{"overrides", {{"rms_norm_eps", "small"}}}}}},
               "/model/overrides/rms_norm_eps", "expected number, got string");
  expect_error(json{{"model", {{"overrides", {{"native_attn_res_hidden_sizes", {256, "x"}}}}}}},
               "/model/overrides/native_attn_res_hidden_sizes/1", "expected integer");
  expect_error(json{{"model", {{"seed", "1"}}}}, "/model/seed", "expected integer, got string");
  expect_error(json{{"workload", {{"prompts", true}}}}, "/workload/prompts",
               "expected integer, got boolean");
  expect_error(json{{"workload", {{"file", nullptr}}}}, "/workload/file",
               "expected string, got null");
  expect_error(json{{"speculative", {{"context_only_producer", 1}}}},
               "/speculative/context_only_producer", "expected boolean, got integer");
  expect_error(json{{"capture_ids", 7}}, "/capture_ids", "expected array, got integer");
  expect_error(json{{"capture_ids", {0, "7"}}}, "/capture_ids/1", "expected integer, got string");
  expect_error(json{{"partitions", {{"splits", 12}}}}, "/partitions/splits",
               "expected string or array, got integer");
  expect_error(json{{"partitions", {{"splits", {12}}}}}, "/partitions/splits/0",
               "expected array, got integer");
  expect_error(json{{"faults", "handoff.no_zero_delta"}}, "/faults", "expected array");
  expect_error(json{{"checks", {1}}}, "/checks/0", "expected string, got integer");
  expect_error(json{{"expect", {1, 2}}}, "/expect", "expected object, got array");
  expect_error(json{{"checkpoint", 1}}, "/checkpoint", "expected string");
}

TEST(ScenarioErrorTest, UnknownPresetListsKnownOnes) {
  expect_error(json{{"model", {{"preset", "k3-huge"}}}}, "/model/preset",
               "unknown preset \"k3-huge\" (known: k3-tiny, k3-small, k3-shape)");
}

TEST(ScenarioErrorTest, ModelSizes) {
  auto with = [](const char* key, json value) {
    return json{{"model", {{"overrides", {{key, value}}}}}};
  };
  expect_error(with("num_hidden_layers", 0), "/model/overrides/num_hidden_layers", ">= 1");
  expect_error(with("attn_res_block_size", 0), "/model/overrides/attn_res_block_size", ">= 1");
  expect_error(with("hidden_size", -256), "/model/overrides/hidden_size", ">= 1");
  expect_error(with("num_attention_heads", 0), "/model/overrides/num_attention_heads", ">= 1");
  expect_error(with("head_dim", 0), "/model/overrides/head_dim", ">= 1");
  expect_error(with("vocab_size", 255), "/model/overrides/vocab_size", ">= 256");
  expect_error(with("n_shared_experts", -1), "/model/overrides/n_shared_experts", ">= 0");
  expect_error(with("kv_lora_rank", 0), "/model/overrides/kv_lora_rank", ">= 1");
  expect_error(with("hidden_size", 1ll << 40), "/model/overrides/hidden_size", "<=");
  expect_error(with("rms_norm_eps", 0.0), "/model/overrides/rms_norm_eps", "positive");
  expect_error(with("rms_norm_eps", -1e-6), "/model/overrides/rms_norm_eps", "positive");
  expect_error(with("native_attn_res_hidden_sizes", {0}),
               "/model/overrides/native_attn_res_hidden_sizes/0", ">= 1");
  expect_error(with("num_experts_per_tok", 9), "/model/overrides/num_experts_per_tok",
               "must be <= n_routed_experts (8)");
  expect_error(with("n_routed_experts", 1), "/model/overrides/n_routed_experts",
               "must be <= n_routed_experts (1)");
  expect_error(json{{"model", {{"seed", -1}}}}, "/model/seed", ">= 0");
  expect_error(json{{"model", {{"seed", 1}, {"overrides", {{"seed", 2}}}}}},
               "/model/overrides/seed", "conflicts");
  Result<Scenario> seed_override = parse(with("seed", 77));
  ASSERT_TRUE(seed_override.is_ok()) << seed_override.status().message();
  EXPECT_EQ(seed_override->model.seed, 77u);
}

TEST(ScenarioErrorTest, WorkloadAndEngineRanges) {
  expect_error(json{{"workload", {{"prompts", 0}}}}, "/workload/prompts", ">= 1");
  expect_error(json{{"workload", {{"max_new_tokens", 0}}}}, "/workload/max_new_tokens", ">= 1");
  expect_error(json{{"workload", {{"max_prompt_tokens", -1}}}}, "/workload/max_prompt_tokens",
               ">= 0");
  expect_error(json{{"workload", {{"seed", -5}}}}, "/workload/seed", ">= 0");
  expect_error(json{{"engine", {{"prefill_chunk", -1}}}}, "/engine/prefill_chunk", ">= 0");
  expect_error(json{{"engine", {{"dump_level", "everything"}}}}, "/engine/dump_level",
               "expected one of: summary, layer, full");
}

TEST(ScenarioErrorTest, CaptureIdsRange) {
  expect_error(json{{"capture_ids", {0, 33}}}, "/capture_ids/1", "<= 32");
  expect_error(json{{"capture_ids", {-2}}}, "/capture_ids/0", ">= -1");
}

TEST(ScenarioErrorTest, Partitions) {
  expect_error(json{{"partitions", {{"pp", 0}}}}, "/partitions/pp", ">= 1");
  expect_error(json{{"partitions", {{"pp", 33}}}}, "/partitions/pp",
               "must be <= num_hidden_layers (32)");
  expect_error(json{{"model", {{"overrides", {{"num_hidden_layers", 1}}}}}}, "/partitions/pp",
               "must be <= num_hidden_layers (1)");
  expect_error(json{{"partitions", {{"splits", "sometimes"}}}}, "/partitions/splits",
               "unknown value \"sometimes\"");
  expect_error(json{{"partitions", {{"splits", json::array()}}}}, "/partitions/splits",
               "at least one");
  expect_error(json{{"partitions", {{"pp", 2}, {"splits", {{12}, {12, 20}}}}}},
               "/partitions/splits/1", "expected 1 cut point(s) for pp 2, got 2");
  expect_error(json{{"partitions", {{"pp", 2}, {"splits", {{0}}}}}}, "/partitions/splits/0/0",
               ">= 1");
  expect_error(json{{"partitions", {{"pp", 2}, {"splits", {{32}}}}}}, "/partitions/splits/0/0",
               "<= 31");
  expect_error(json{{"partitions", {{"pp", 3}, {"splits", {{8, 20}, {20, 8}}}}}},
               "/partitions/splits/1/1", "strictly increasing");
  expect_error(json{{"partitions", {{"pp", 3}, {"splits", {{8, 8}}}}}}, "/partitions/splits/0/1",
               "strictly increasing");
  expect_error(json{{"partitions", {{"pp", 2}, {"splits", {{8}, {8}}}}}}, "/partitions/splits/1",
               "duplicate");
}

TEST(ScenarioErrorTest, FaultsChecksAndEnums) {
  expect_error(json{{"faults", {"handoff.no_zero_delta", "handoff.zero_delta"}}}, "/faults/1",
               "unknown fault id \"handoff.zero_delta\" (known: handoff.no_zero_delta, ");
  expect_error(json{{"faults", {"pd.producer_embedding", "pd.producer_embedding"}}}, "/faults/1",
               "duplicate");
  expect_error(json{{"checks", {"tensors", "bits"}}}, "/checks/1", "unknown check \"bits\"");
  expect_error(json{{"checks", json::array()}}, "/checks", "at least one");
  expect_error(json{{"speculative", {{"method", "medusa"}}}}, "/speculative/method",
               "expected one of: none, dspark, eagle3");
  expect_error(json{{"speculative", {{"gamma", 0}}}}, "/speculative/gamma", ">= 1");
  expect_error(json{{"speculative", {{"gamma", 17}}}}, "/speculative/gamma", "<= 16");
  expect_error(json{{"backend", "rocm"}}, "/backend", "expected one of: cpu, cuda");
  expect_error(json{{"transport", "tcp"}}, "/transport", "expected one of: inproc, mpi, nccl");
  expect_error(json{{"name", ""}}, "/name", "empty");
}

TEST(ScenarioErrorTest, FilesNameThemselves) {
  TempDir dir;
  const std::string missing = (dir.path() / "nope.json").string();
  Result<Scenario> r = load_scenario(missing);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(r.status().message(), missing + ": cannot open");

  Result<Scenario> d = load_scenario(dir.path().string());
  ASSERT_FALSE(d.is_ok());
  EXPECT_EQ(d.status().message(), dir.path().string() + ": cannot open");

  const std::string bad = dir.write("bad.json", "{\n  \"name\": \"x\",\n  \"model\": oops\n}\n");
  Result<Scenario> b = load_scenario(bad);
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(b.status().message().rfind(bad + ":3:12: malformed JSON: ", 0), 0u)
      << b.status().message();

  const std::string truncated = dir.write("trunc.json", "{\"name\": \"x\",\n");
  Result<Scenario> t = load_scenario(truncated);
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find(truncated + ":2:"), std::string::npos)
      << t.status().message();

  const std::string wrong = dir.write("wrong.json", R"({"workload": {"prompts": "2"}})");
  Result<Scenario> w = load_scenario(wrong);
  ASSERT_FALSE(w.is_ok());
  EXPECT_EQ(w.status().message(), wrong + ": /workload/prompts: expected integer, got string");
}

TEST(FaultRegistryTest, FifteenFaultsEachCaughtByARegisteredCheck) {
  ASSERT_EQ(fault_registry().size(), 15u);
  std::set<std::string_view> ids;
  for (const FaultInfo& f : fault_registry()) {
    EXPECT_TRUE(ids.insert(f.id).second) << "duplicate " << f.id;
    EXPECT_FALSE(f.restores.empty()) << f.id;
    EXPECT_FALSE(f.expected.empty()) << f.id;
    EXPECT_TRUE(find_check(f.caught_by) != nullptr || f.caught_by == "config")
        << f.id << " caught by " << f.caught_by;
    EXPECT_EQ(find_fault(f.id), &f);
  }
  EXPECT_EQ(find_fault("handoff.no_zero_delta")->caught_by, "dispatch");
  EXPECT_EQ(find_fault("tap.boundary_uses_prefix")->caught_by, "taps");
  EXPECT_EQ(find_fault("tap.boundary_rejected")->caught_by, "config");
  EXPECT_EQ(find_fault("weights.no_boundary_copy")->caught_by, "config");
  EXPECT_EQ(find_fault("draft.own_embedding")->caught_by, "embedding");
  EXPECT_EQ(find_fault("tap.embed_resident_by_module")->caught_by, "taps");
  EXPECT_EQ(find_fault("draft.vocab_from_embedding")->caught_by, "embedding");
  EXPECT_EQ(find_fault("pd.producer_embedding")->caught_by, "memory");
  EXPECT_EQ(find_fault("weights.stage_layer_offset")->caught_by, "tensors");
  EXPECT_EQ(find_fault("dispatch.stage_context_fallback")->caught_by, "dispatch");
  EXPECT_EQ(find_fault("weights.rebound_after_load")->caught_by, "tensors");
  EXPECT_EQ(find_fault("partition.remainder_dropped")->caught_by, "partition");
  EXPECT_EQ(find_fault("spec.rollback_last_stage_only")->caught_by, "tensors");
  EXPECT_EQ(find_fault("batch.stale_microbatch_state")->caught_by, "tensors");
  EXPECT_EQ(find_fault("prefill.chunk_token_dropped")->caught_by, "tensors");
  EXPECT_EQ(find_fault("no.such_fault"), nullptr);
}

TEST(FaultRegistryTest, FaultSetFromScenario) {
  Result<Scenario> r = parse(json{{"faults", {"handoff.no_zero_delta", "pd.producer_embedding"}}});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const FaultSet faults{r->faults};
  EXPECT_TRUE(faults.has("handoff.no_zero_delta"));
  EXPECT_TRUE(faults.has("pd.producer_embedding"));
  EXPECT_FALSE(faults.has("tap.boundary_rejected"));
  EXPECT_FALSE(faults.empty());
  EXPECT_TRUE(FaultSet{}.empty());
  EXPECT_FALSE(FaultSet{}.has("handoff.no_zero_delta"));
}

TEST(CheckRegistryTest, TenChecksInReportOrder) {
  std::vector<std::string_view> names;
  for (const CheckInfo& c : check_registry()) {
    names.push_back(c.name);
    EXPECT_FALSE(c.what.empty()) << c.name;
    EXPECT_EQ(find_check(c.name), &c);
  }
  EXPECT_EQ(names, (std::vector<std::string_view>{"partition", "tensors", "taps", "logits",
                                                  "tokens", "dispatch", "embedding", "memory",
                                                  "acceptance", "config"}));
  EXPECT_EQ(find_check("bits"), nullptr);
}

}  // namespace
}  // namespace splitcheck
