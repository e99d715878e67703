// scenarios/scenario.schema.json against the loader (harness/scenario/scenario.cc): every
// committed scenario validates; a scenario mutated at every level (unknown keys, wrong
// types, values past a bound, unknown names) is refused by both or accepted by both; the
// schema's names and bounds are the registries' and scenario_bounds'; and each size bound
// is refused by the loader with its JSON pointer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness/scenario/capabilities.h"
#include "harness/scenario/checks.h"
#include "harness/scenario/faults.h"
#include "harness/scenario/partition.h"
#include "harness/scenario/scenario.h"
#include "reference/config.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kSource = SPLITCHECK_SOURCE_DIR;
const fs::path kSchema = kSource / "scenarios" / "scenario.schema.json";

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

bool have_jsonschema() {
  return std::system("/usr/bin/python3 -c 'import jsonschema' >/dev/null 2>&1") == 0;
}

// Validates each document against the schema with python3-jsonschema (Draft 2020-12);
// true where the schema accepts it.
std::vector<bool> schema_accepts(const std::vector<json>& docs) {
  const fs::path dir =
      fs::temp_directory_path() / ("splitcheck_schema_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path in = dir / "docs.json", out = dir / "verdicts.txt";
  std::ofstream(in) << json(docs).dump();
  const std::string cmd =
      "/usr/bin/python3 -c 'import json,sys,jsonschema; s=json.load(open(sys.argv[1])); "
      "jsonschema.Draft202012Validator.check_schema(s); v=jsonschema.Draft202012Validator(s); "
      "print(\"\\n\".join(\"ok\" if v.is_valid(d) else \"bad\" for d in "
      "json.load(open(sys.argv[2]))))'"
      " '" +
      kSchema.string() + "' '" + in.string() + "' > '" + out.string() + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream verdicts(out);
  std::vector<bool> ok;
  for (std::string line; std::getline(verdicts, line);) ok.push_back(line == "ok");
  fs::remove_all(dir);
  return ok;
}

std::vector<fs::path> committed_scenarios() {
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(kSource / "scenarios"))
    if (e.path().extension() == ".json" && !e.path().string().ends_with(".schema.json"))
      paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  return paths;
}

TEST(ScenarioSchemaTest, EveryCommittedScenarioValidatesAndLoads) {
  if (!have_jsonschema()) GTEST_SKIP() << "python3 jsonschema is not installed";
  std::vector<json> docs;
  for (const fs::path& p : committed_scenarios()) {
    docs.push_back(read_json(p));
    Result<Scenario> s = load_scenario(p.string());
    EXPECT_TRUE(s.is_ok()) << s.status().message();
  }
  ASSERT_GE(docs.size(), 10u);
  const std::vector<bool> ok = schema_accepts(docs);
  ASSERT_EQ(ok.size(), docs.size());
  for (size_t i = 0; i < ok.size(); ++i) EXPECT_TRUE(ok[i]) << committed_scenarios()[i];
}

TEST(ScenarioSchemaTest, EveryGpuScenarioValidatesAndParses) {
  // scenarios/gpu/ (GPU only): load_scenario refuses them where no GPU is, so they are
  // parsed without the capability check; the schema must accept them all the same.
  if (!have_jsonschema()) GTEST_SKIP() << "python3 jsonschema is not installed";
  std::vector<json> docs;
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(kSource / "scenarios" / "gpu"))
    if (e.path().extension() == ".json") paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  ASSERT_GE(paths.size(), 2u);
  for (const fs::path& p : paths) {
    docs.push_back(read_json(p));
    Result<Scenario> s = parse_scenario(docs.back(), p.string(), p.parent_path().string());
    EXPECT_TRUE(s.is_ok()) << s.status().message();
  }
  const std::vector<bool> ok = schema_accepts(docs);
  ASSERT_EQ(ok.size(), docs.size());
  for (size_t i = 0; i < ok.size(); ++i) EXPECT_TRUE(ok[i]) << paths[i];
}

// One mutation of the default scenario: `ptr` set to `value` (or removed when null and
// `remove`), and whether both must accept it.
struct Mutation {
  std::string ptr;
  json value;
  bool accepted;
};

TEST(ScenarioSchemaTest, SchemaAndLoaderRefuseAndAcceptTheSameMutations) {
  if (!have_jsonschema()) GTEST_SKIP() << "python3 jsonschema is not installed";
  const json base = read_json(kSource / "scenarios" / "default.json");
  const std::vector<Mutation> mutations = {
      // Accepted: the base and values at the bounds.
      {"/name", "x", true},
      {"/model/overrides/num_hidden_layers", scenario_bounds::kLayers, true},
      {"/model/overrides/hidden_size", scenario_bounds::kHiddenSize, true},
      {"/model/overrides/vocab_size", scenario_bounds::kVocabSize, true},
      {"/model/overrides/num_attention_heads", scenario_bounds::kHeads, true},
      {"/workload/prompts", scenario_bounds::kPrompts, true},
      {"/workload/max_new_tokens", scenario_bounds::kNewTokens, true},
      {"/workload/max_prompt_tokens", scenario_bounds::kPromptTokens, true},
      {"/speculative/gamma", scenario_bounds::kGamma, true},
      {"/engine/dump_level", "full", true},
      {"/backend", "cuda", true},  // the format knows it; a build that lacks it refuses to run
      {"/checks", {"tensors", "dispatch"}, true},
      {"/expect/identical_splits", kMaxPartitions, true},
      {"/expect/caught_by", "tensors", true},
      {"/expect/identical", {"split-1", "split-2"}, true},
      {"/partitions/splits", {{3}, {9}}, true},
      // Unknown keys at every level.
      {"/nmae", "x", false},
      {"/model/presets", "k3-tiny", false},
      {"/model/overrides/hidden_sise", 64, false},
      {"/workload/promts", 2, false},
      {"/engine/chunk", 2, false},
      {"/speculative/gama", 2, false},
      {"/partitions/split", "all", false},
      {"/expect/caught-by", "dispatch", false},
      {"/expect/identical-splits", 31, false},
      // Wrong types.
      {"/name", 3, false},
      {"/model", "k3-tiny", false},
      {"/model/overrides/hidden_size", "256", false},
      {"/model/seed", "1", false},
      {"/workload/prompts", true, false},
      {"/workload/file", nullptr, false},
      {"/engine/dump_level", 3, false},
      {"/capture_ids", 7, false},
      {"/capture_ids", {0, "7"}, false},
      {"/speculative/context_only_producer", 1, false},
      {"/partitions/splits", 12, false},
      {"/partitions/splits", {12}, false},
      {"/faults", "handoff.no_zero_delta", false},
      {"/checks", {1}, false},
      {"/backend", 1, false},
      {"/expect", {1, 2}, false},
      {"/expect/identical_splits", "31", false},
      {"/expect/verdict", true, false},
      {"/expect/identical", "split-1", false},
      {"/expect/caught_by", 3, false},
      // Out of range.
      {"/model/overrides/num_hidden_layers", 0, false},
      {"/model/overrides/num_hidden_layers", scenario_bounds::kLayers + 1, false},
      {"/model/overrides/hidden_size", scenario_bounds::kHiddenSize + 1, false},
      {"/model/overrides/vocab_size", 255, false},
      {"/model/overrides/vocab_size", scenario_bounds::kVocabSize + 1, false},
      {"/model/overrides/num_attention_heads", scenario_bounds::kHeads + 1, false},
      {"/model/overrides/head_dim", scenario_bounds::kHeadDim + 1, false},
      {"/model/overrides/n_shared_experts", scenario_bounds::kSharedExperts + 1, false},
      {"/model/overrides/rms_norm_eps", 0, false},
      {"/workload/prompts", 0, false},
      {"/workload/prompts", scenario_bounds::kPrompts + 1, false},
      {"/workload/max_new_tokens", scenario_bounds::kNewTokens + 1, false},
      {"/workload/max_prompt_tokens", scenario_bounds::kPromptTokens + 1, false},
      {"/workload/seed", -1, false},
      {"/engine/prefill_chunk", scenario_bounds::kPrefillChunk + 1, false},
      {"/speculative/gamma", 0, false},
      {"/speculative/gamma", scenario_bounds::kGamma + 1, false},
      {"/partitions/pp", 0, false},
      {"/capture_ids", {-2}, false},
      {"/checks", json::array(), false},
      {"/expect/identical_splits", -1, false},
      {"/expect/identical_splits", kMaxPartitions + 1, false},
      {"/partitions/splits", json::array(), false},
      {"/partitions/splits", {{0}}, false},
      {"/partitions/splits", {{3}, {3}}, false},
      // Unknown names.
      {"/model/preset", "k3-huge", false},
      {"/engine/dump_level", "everything", false},
      {"/speculative/method", "medusa", false},
      {"/partitions/splits", "sometimes", false},
      {"/faults", {"handoff.zero_delta"}, false},
      {"/faults", {"pd.producer_embedding", "pd.producer_embedding"}, false},
      {"/checks", {"tensors", "bits"}, false},
      {"/backend", "rocm", false},
      {"/transport", "tcp", false},
      {"/expect/verdict", "maybe", false},
      {"/expect/caught_by", "bits", false},
  };
  std::vector<json> docs;
  for (const Mutation& m : mutations) {
    json j = base;
    j[json::json_pointer(m.ptr)] = m.value;
    docs.push_back(j);
  }
  const std::vector<bool> schema_ok = schema_accepts(docs);
  ASSERT_EQ(schema_ok.size(), docs.size());
  for (size_t i = 0; i < mutations.size(); ++i) {
    const Mutation& m = mutations[i];
    Result<Scenario> s = parse_scenario(docs[i], "default.json", (kSource / "scenarios").string());
    SCOPED_TRACE(m.ptr + " = " + m.value.dump());
    EXPECT_EQ(schema_ok[i], m.accepted) << "schema";
    EXPECT_EQ(s.is_ok(), m.accepted) << "loader: " << s.status().message();
    if (!m.accepted && !s.is_ok()) {
      EXPECT_EQ(s.status().code(), StatusCode::kInvalidInput);
      // The loader names the place (the mutated pointer or a member of it).
      const std::string& msg = s.status().message();
      const std::string parent = m.ptr.substr(0, m.ptr.rfind('/'));
      EXPECT_TRUE(msg.find(": " + m.ptr) != std::string::npos ||
                  msg.find(": " + (parent.empty() ? "/" : parent)) != std::string::npos)
          << msg;
    }
  }
}

std::vector<std::string> enum_of(const json& j) {
  return j.at("enum").get<std::vector<std::string>>();
}

TEST(ScenarioSchemaTest, NamesAndBoundsAreTheLoaders) {
  const json schema = read_json(kSchema);
  const json& p = schema["properties"];
  std::vector<std::string> faults, checks, backends, transports;
  for (const FaultInfo& f : fault_registry()) faults.emplace_back(f.id);
  for (const CheckInfo& c : check_registry()) checks.emplace_back(c.name);
  for (const Capability& c : capability_table())
    (c.kind == "backend" ? backends : transports).emplace_back(c.name);
  EXPECT_EQ(enum_of(p["faults"]["items"]), faults);
  EXPECT_EQ(enum_of(p["checks"]["items"]), checks);
  EXPECT_EQ(enum_of(p["expect"]["properties"]["caught_by"]), checks);
  EXPECT_EQ(enum_of(p["backend"]), backends);
  EXPECT_EQ(enum_of(p["transport"]), transports);
  EXPECT_EQ(enum_of(p["model"]["properties"]["preset"]), model_preset_names());
  const json& o = p["model"]["properties"]["overrides"]["properties"];
  EXPECT_EQ(o["num_hidden_layers"]["maximum"], scenario_bounds::kLayers);
  EXPECT_EQ(o["hidden_size"]["maximum"], scenario_bounds::kHiddenSize);
  EXPECT_EQ(o["vocab_size"]["maximum"], scenario_bounds::kVocabSize);
  EXPECT_EQ(o["num_attention_heads"]["maximum"], scenario_bounds::kHeads);
  EXPECT_EQ(o["head_dim"]["maximum"], scenario_bounds::kHeadDim);
  const json& w = p["workload"]["properties"];
  EXPECT_EQ(w["prompts"]["maximum"], scenario_bounds::kPrompts);
  EXPECT_EQ(w["max_new_tokens"]["maximum"], scenario_bounds::kNewTokens);
  EXPECT_EQ(w["max_prompt_tokens"]["maximum"], scenario_bounds::kPromptTokens);
  EXPECT_EQ(p["speculative"]["properties"]["gamma"]["maximum"], scenario_bounds::kGamma);
  EXPECT_EQ(p["partitions"]["properties"]["splits"]["oneOf"][1]["maxItems"], kMaxPartitions);
  EXPECT_EQ(p["expect"]["properties"]["identical_splits"]["maximum"], kMaxPartitions);
}

// Parses `j` as scenarios/x.json; the error message, or "" when it parses.
std::string error_of(const json& j) {
  Result<Scenario> s = parse_scenario(j, "scenarios/x.json", "/base");
  if (s.is_ok()) return "";
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidInput);
  return s.status().message();
}

void expect_refused(const json& j, const std::string& pointer, const std::string& what) {
  const std::string msg = error_of(j);
  SCOPED_TRACE(j.dump());
  EXPECT_EQ(msg.rfind("scenarios/x.json: " + pointer + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

json with_override(const char* key, int value) {
  return json{{"model", {{"overrides", {{key, value}}}}}};
}

TEST(ScenarioBoundsTest, EachSizeBoundIsRefusedWithItsPointer) {
  namespace b = scenario_bounds;
  expect_refused(with_override("num_hidden_layers", b::kLayers + 1),
                 "/model/overrides/num_hidden_layers", "<= 256");
  expect_refused(with_override("hidden_size", b::kHiddenSize + 1), "/model/overrides/hidden_size",
                 "<= 16384");
  expect_refused(with_override("vocab_size", b::kVocabSize + 1), "/model/overrides/vocab_size",
                 "<= 262144");
  expect_refused(with_override("num_attention_heads", b::kHeads + 1),
                 "/model/overrides/num_attention_heads", "<= 256");
  expect_refused(json{{"workload", {{"prompts", b::kPrompts + 1}}}}, "/workload/prompts",
                 "<= 1024");
  expect_refused(json{{"workload", {{"max_new_tokens", b::kNewTokens + 1}}}},
                 "/workload/max_new_tokens", "<= 4096");
  expect_refused(json{{"workload", {{"max_prompt_tokens", b::kPromptTokens + 1}}}},
                 "/workload/max_prompt_tokens", "<= 8192");
  expect_refused(json{{"speculative", {{"gamma", b::kGamma + 1}}}}, "/speculative/gamma", "<= 16");
  // Every bound is reachable: the values at the bound load.
  EXPECT_EQ(error_of(json{{"model",
                           {{"overrides",
                             {{"num_hidden_layers", b::kLayers},
                              {"hidden_size", b::kHiddenSize},
                              {"vocab_size", b::kVocabSize},
                              {"num_attention_heads", b::kHeads}}}}},
                          {"workload",
                           {{"prompts", b::kPrompts},
                            {"max_new_tokens", b::kNewTokens},
                            {"max_prompt_tokens", b::kPromptTokens}}},
                          {"speculative", {{"gamma", b::kGamma}}}}),
            "");
}

TEST(ScenarioBoundsTest, EnumerationsPastTheBoundAreRefusedWithoutBuildingThem) {
  const json layers256 = {{"num_hidden_layers", 256}};
  // C(255, 8) is about 4e14: refused at load, before any partition is built.
  expect_refused(json{{"model", {{"overrides", layers256}}},
                      {"partitions", {{"pp", 9}, {"splits", "exhaustive"}}}},
                 "/partitions/splits", "more than 10000 partitions");
  // C(255, 127) overflows 64 bits many times over.
  expect_refused(json{{"model", {{"overrides", layers256}}},
                      {"partitions", {{"pp", 128}, {"splits", "exhaustive"}}}},
                 "/partitions/splits", "more than 10000");
  // The greedy pair cover of 255 positions with 2 cuts needs C(255, 2) = 32385 partitions.
  expect_refused(json{{"model", {{"overrides", layers256}}},
                      {"partitions", {{"pp", 3}, {"splits", "pairwise"}}}},
                 "/partitions/splits", "more than 10000");
  // pp 3 "all" over 256 layers resolves to that cover too.
  expect_refused(json{{"model", {{"overrides", layers256}}}, {"partitions", {{"pp", 3}}}},
                 "/partitions/splits", "more than 10000");
  EXPECT_EQ(error_of(json{{"model", {{"overrides", layers256}}},
                          {"partitions", {{"pp", 2}, {"splits", "exhaustive"}}}}),
            "");

  PartitionSpec spec;
  spec.mode = "exhaustive";
  spec.pp = 3;
  EXPECT_EQ(partition_count(spec, 32), 465u);  // C(31, 2)
  spec.pp = 128;
  EXPECT_EQ(partition_count(spec, 256), kMaxPartitions + 1);
  EXPECT_EQ(partition_count(spec, 256, UINT64_MAX - 1), UINT64_MAX);  // saturates, no wrap
  spec.pp = 5;
  EXPECT_EQ(partition_count(spec, 32, UINT64_MAX - 1), 31465u);  // C(31, 4)
  Result<std::vector<Partition>> refused = enumerate_partitions(spec, 32);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(refused.status().message().find("more than 10000"), std::string::npos);
  spec.mode = "pairwise";
  spec.pp = 4;
  Result<std::vector<Partition>> cover = enumerate_partitions(spec, 32);
  ASSERT_TRUE(cover.is_ok());
  EXPECT_EQ(partition_count(spec, 32), cover->size());
}

}  // namespace
}  // namespace splitcheck
