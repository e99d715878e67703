#include "harness/scenario/scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string_view>
#include <utility>

#include "harness/scenario/capabilities.h"
#include "harness/scenario/checks.h"
#include "harness/scenario/device_fit.h"
#include "harness/scenario/faults.h"
#include "harness/scenario/partition.h"
#include "harness/scenario/suggest.h"
#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace splitcheck {

namespace {

using json = nlohmann::json;

// Names of the things a field may be, as error messages spell them.
std::string type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    case json::value_t::string:
      return "string";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    default:
      return j.type_name();
  }
}

// RFC 6901: the pointer to member `key` of the value at `ptr`.
std::string child(const std::string& ptr, std::string_view key) {
  std::string out = ptr + "/";
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string child(const std::string& ptr, size_t index) {
  return ptr + "/" + std::to_string(index);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

template <typename Row>
std::string registry_names(std::span<const Row> rows, std::string_view Row::*field) {
  std::vector<std::string> names;
  for (const Row& r : rows) names.emplace_back(r.*field);
  return join(names);
}

// Relative paths name files next to the scenario; empty means "none".
std::string resolve_path(const std::string& path, const std::string& base_dir) {
  if (path.empty()) return path;
  std::filesystem::path p(path);
  if (p.is_relative() && !base_dir.empty()) p = std::filesystem::path(base_dir) / p;
  return p.lexically_normal().string();
}

// The largest scenario file read (the committed ones are a few KB).
constexpr uintmax_t kMaxScenarioBytes = uintmax_t{16} << 20;
// The deepest nesting of arrays and objects read (the schema's deepest is 4): deeper
// text is refused before the JSON library, whose recursion a hostile file could exhaust.
constexpr int kMaxScenarioDepth = 64;

constexpr std::string_view kMethods[] = {"none", "dspark", "eagle3"};
constexpr std::string_view kSplitModes[] = {"all", "pairwise", "every-layer", "balanced",
                                            "exhaustive"};

namespace bounds = scenario_bounds;

// The integer fields of ModelConfig that a scenario may override, with their range.
struct ModelIntField {
  std::string_view name;
  int ModelConfig::*member;
  int min;
  int max;
};

constexpr ModelIntField kModelIntFields[] = {
    {"num_hidden_layers", &ModelConfig::num_hidden_layers, 1, bounds::kLayers},
    {"attn_res_block_size", &ModelConfig::attn_res_block_size, 1, bounds::kLayers},
    {"hidden_size", &ModelConfig::hidden_size, 1, bounds::kHiddenSize},
    {"num_attention_heads", &ModelConfig::num_attention_heads, 1, bounds::kHeads},
    {"head_dim", &ModelConfig::head_dim, 1, bounds::kHeadDim},
    {"vocab_size", &ModelConfig::vocab_size, 256, bounds::kVocabSize},  // byte tokens: 256 ids
    {"n_routed_experts", &ModelConfig::n_routed_experts, 1, bounds::kExperts},
    {"num_experts_per_tok", &ModelConfig::num_experts_per_tok, 1, bounds::kExperts},
    {"n_shared_experts", &ModelConfig::n_shared_experts, 0, bounds::kSharedExperts},
    {"moe_intermediate_size", &ModelConfig::moe_intermediate_size, 1, bounds::kIntermediate},
    {"intermediate_size", &ModelConfig::intermediate_size, 1, bounds::kIntermediate},
    {"first_k_dense_replace", &ModelConfig::first_k_dense_replace, 0, bounds::kLayers},
    {"kv_lora_rank", &ModelConfig::kv_lora_rank, 1, bounds::kLoraRank},
};

// Reads typed values out of a parsed scenario; every error names the source and pointer.
class ScenarioReader {
 public:
  explicit ScenarioReader(std::string source) : source_(std::move(source)) {}

  Status error(const std::string& ptr, const std::string& what) const {
    return invalid_input(source_ + ": " + (ptr.empty() ? "/" : ptr) + ": " + what);
  }

  Status type_error(const json& j, const std::string& ptr, std::string_view expected) const {
    return error(ptr, "expected " + std::string(expected) + ", got " + type_name(j));
  }

  // `j` must be an object whose keys are all in `allowed`.
  Status check_object(const json& j, const std::string& ptr,
                      std::initializer_list<std::string_view> allowed) const {
    if (!j.is_object()) return type_error(j, ptr, "object");
    for (const auto& [key, value] : j.items()) {
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        return error(child(ptr, key),
                     "unknown key" + did_you_mean(key, std::vector<std::string_view>(allowed)));
      }
    }
    return Status::ok();
  }

  Result<int64_t> integer(const json& j, const std::string& ptr, int64_t lo, int64_t hi) const {
    if (!j.is_number_integer()) return type_error(j, ptr, "integer");
    if (j.is_number_unsigned() &&
        j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return error(ptr, "must be <= " + std::to_string(hi) + ", got " + j.dump());
    }
    int64_t v = j.get<int64_t>();
    if (v < lo) return error(ptr, "must be >= " + std::to_string(lo) + ", got " + j.dump());
    if (v > hi) return error(ptr, "must be <= " + std::to_string(hi) + ", got " + j.dump());
    return v;
  }

  Result<int> int32(const json& j, const std::string& ptr, int lo, int hi = INT_MAX) const {
    ASSIGN_OR_RETURN(int64_t v, integer(j, ptr, lo, hi));
    return static_cast<int>(v);
  }

  Result<uint64_t> seed(const json& j, const std::string& ptr) const {
    if (!j.is_number_integer()) return type_error(j, ptr, "integer");
    if (j.is_number_unsigned()) return j.get<uint64_t>();
    if (j.get<int64_t>() < 0) return error(ptr, "must be >= 0, got " + j.dump());
    return static_cast<uint64_t>(j.get<int64_t>());
  }

  Result<std::string> string(const json& j, const std::string& ptr) const {
    if (!j.is_string()) return type_error(j, ptr, "string");
    return j.get<std::string>();
  }

  Result<bool> boolean(const json& j, const std::string& ptr) const {
    if (!j.is_boolean()) return type_error(j, ptr, "boolean");
    return j.get<bool>();
  }

  // A string that must be one of `choices`.
  template <typename Choices>
  Result<std::string> one_of(const json& j, const std::string& ptr, const Choices& choices) const {
    ASSIGN_OR_RETURN(std::string v, string(j, ptr));
    std::vector<std::string> names;
    for (std::string_view c : choices) {
      if (c == v) return v;
      names.emplace_back(c);
    }
    return error(ptr, "unknown value \"" + v + "\" (expected one of: " + join(names) + ")");
  }

  Result<std::string> one_of(const json& j, const std::string& ptr,
                             std::initializer_list<std::string_view> choices) const {
    return one_of<std::initializer_list<std::string_view>>(j, ptr, choices);
  }

  // A list of distinct strings, each accepted by `known`; `what` names one item.
  template <typename Known>
  Result<std::vector<std::string>> name_list(const json& j, const std::string& ptr,
                                             std::string_view what, Known known,
                                             const std::string& known_names) const {
    if (!j.is_array()) return type_error(j, ptr, "array");
    std::vector<std::string> out;
    for (size_t i = 0; i < j.size(); ++i) {
      ASSIGN_OR_RETURN(std::string v, string(j[i], child(ptr, i)));
      if (!known(v)) {
        return error(child(ptr, i), "unknown " + std::string(what) + " \"" + v +
                                        "\" (known: " + known_names + ")");
      }
      if (std::find(out.begin(), out.end(), v) != out.end()) {
        return error(child(ptr, i), "duplicate " + std::string(what) + " \"" + v + "\"");
      }
      out.push_back(std::move(v));
    }
    return out;
  }

 private:
  std::string source_;
};

// `obj[key]` or nullptr when absent.
const json* member(const json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::vector<int> default_capture_ids(const std::string& method, int layers) {
  std::vector<int> ids;
  if (method == "eagle3") {
    ids = {2, layers / 2, layers - 3};  // SPEC 3.2: k3-tiny 2, 16, 29
  } else {
    ids = {0, layers / 4 - 1, layers / 2, 3 * layers / 4 + 1, layers};  // 0, 7, 16, 25, 32
  }
  for (int& id : ids) id = std::clamp(id, 0, layers);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

Status parse_model(const ScenarioReader& r, const json& j, ModelConfig* out) {
  const std::string ptr = "/model";
  RETURN_IF_ERROR(r.check_object(j, ptr, {"preset", "seed", "overrides"}));
  std::string preset = "k3-tiny";
  if (const json* v = member(j, "preset")) {
    ASSIGN_OR_RETURN(preset, r.string(*v, ptr + "/preset"));
  }
  std::optional<ModelConfig> base = model_preset(preset);
  if (!base) {
    return r.error(ptr + "/preset",
                   "unknown preset \"" + preset + "\" (known: " + join(model_preset_names()) + ")");
  }
  ModelConfig m = *base;

  const std::string optr = ptr + "/overrides";
  const json* overrides = member(j, "overrides");
  const json empty = json::object();
  const json& o = overrides ? *overrides : empty;
  if (!o.is_object()) return r.type_error(o, optr, "object");
  for (const auto& [key, value] : o.items()) {
    const std::string kptr = child(optr, key);
    auto field = std::find_if(std::begin(kModelIntFields), std::end(kModelIntFields),
                              [&k = key](const ModelIntField& f) { return f.name == k; });
    if (field != std::end(kModelIntFields)) {
      ASSIGN_OR_RETURN(m.*(field->member), r.int32(value, kptr, field->min, field->max));
    } else if (key == "rms_norm_eps") {
      if (!value.is_number()) return r.type_error(value, kptr, "number");
      const float eps = static_cast<float>(value.get<double>());
      if (!(eps > 0.0f) || !std::isfinite(eps)) {
        return r.error(kptr, "must be a positive finite float, got " + value.dump());
      }
      m.rms_norm_eps = eps;
    } else if (key == "native_attn_res_hidden_sizes") {
      if (!value.is_array()) return r.type_error(value, kptr, "array");
      m.native_attn_res_hidden_sizes.clear();
      for (size_t i = 0; i < value.size(); ++i) {
        ASSIGN_OR_RETURN(int h, r.int32(value[i], child(kptr, i), 1, bounds::kHiddenSize));
        m.native_attn_res_hidden_sizes.push_back(h);
      }
    } else if (key == "seed") {
      if (member(j, "seed")) return r.error(kptr, "conflicts with /model/seed; set only one");
      ASSIGN_OR_RETURN(m.seed, r.seed(value, kptr));
    } else {
      std::vector<std::string_view> known = {"rms_norm_eps", "native_attn_res_hidden_sizes",
                                             "seed"};
      for (const ModelIntField& f : kModelIntFields) known.push_back(f.name);
      return r.error(kptr, "unknown key" + did_you_mean(key, known));
    }
  }
  if (const json* v = member(j, "seed")) {
    ASSIGN_OR_RETURN(m.seed, r.seed(*v, ptr + "/seed"));
  }

  // Relations between fields: blame the one the file set, else the other.
  auto blame = [&](std::string_view a, std::string_view b) {
    return child(optr, (member(o, a) || !member(o, b)) ? a : b);
  };
  if (m.num_experts_per_tok > m.n_routed_experts) {
    return r.error(blame("num_experts_per_tok", "n_routed_experts"),
                   "num_experts_per_tok (" + std::to_string(m.num_experts_per_tok) +
                       ") must be <= n_routed_experts (" + std::to_string(m.n_routed_experts) +
                       ")");
  }
  if (static_cast<int64_t>(m.num_attention_heads) * m.head_dim > INT_MAX) {
    return r.error(blame("head_dim", "num_attention_heads"),
                   "num_attention_heads * head_dim overflows");
  }
  *out = std::move(m);
  return Status::ok();
}

Status parse_workload(const ScenarioReader& r, const json& j, const std::string& base_dir,
                      WorkloadConfig* out) {
  const std::string ptr = "/workload";
  RETURN_IF_ERROR(
      r.check_object(j, ptr, {"file", "seed", "prompts", "max_new_tokens", "max_prompt_tokens"}));
  WorkloadConfig w;
  if (const json* v = member(j, "file")) {
    ASSIGN_OR_RETURN(std::string file, r.string(*v, ptr + "/file"));
    w.file = resolve_path(file, base_dir);
  }
  if (const json* v = member(j, "seed")) {
    ASSIGN_OR_RETURN(w.seed, r.seed(*v, ptr + "/seed"));
  }
  if (const json* v = member(j, "prompts")) {
    ASSIGN_OR_RETURN(w.prompts, r.int32(*v, ptr + "/prompts", 1, bounds::kPrompts));
  }
  if (const json* v = member(j, "max_new_tokens")) {
    ASSIGN_OR_RETURN(w.max_new_tokens, r.int32(*v, ptr + "/max_new_tokens", 1, bounds::kNewTokens));
  }
  if (const json* v = member(j, "max_prompt_tokens")) {
    ASSIGN_OR_RETURN(w.max_prompt_tokens,
                     r.int32(*v, ptr + "/max_prompt_tokens", 0, bounds::kPromptTokens));
  }
  *out = std::move(w);
  return Status::ok();
}

Status parse_engine(const ScenarioReader& r, const json& j, const std::string& source,
                    const std::string& base_dir, Scenario* s) {
  const std::string ptr = "/engine";
  RETURN_IF_ERROR(
      r.check_object(j, ptr,
                     {"prefill_chunk", "dump_level", "command", "cwd", "env", "timeout_s",
                      "num_hidden_layers", "attn_res_block_size", "golden", "seed", "evidence"}));
  if (j.contains("command")) {
    ASSIGN_OR_RETURN(ExternalEngine e, parse_external_engine(j, source, base_dir));
    s->model.num_hidden_layers = e.num_hidden_layers;
    if (e.attn_res_block_size > 0) s->model.attn_res_block_size = e.attn_res_block_size;
    s->external = std::move(e);
  } else {
    for (const char* key : kExternalEngineKeys)
      if (j.contains(key))
        return r.error(child(ptr, key), "only an external engine (with \"command\") takes it");
  }
  if (const json* v = member(j, "prefill_chunk")) {
    ASSIGN_OR_RETURN(s->prefill_chunk,
                     r.int32(*v, ptr + "/prefill_chunk", 0, bounds::kPrefillChunk));
  }
  if (const json* v = member(j, "dump_level")) {
    ASSIGN_OR_RETURN(std::string level,
                     r.one_of(*v, ptr + "/dump_level", {"summary", "layer", "full"}));
    s->dump_level = level == "summary" ? DumpLevel::kSummary
                    : level == "full"  ? DumpLevel::kFull
                                       : DumpLevel::kLayer;
  }
  return Status::ok();
}

Status parse_speculative(const ScenarioReader& r, const json& j, SpeculativeConfig* out) {
  const std::string ptr = "/speculative";
  RETURN_IF_ERROR(
      r.check_object(j, ptr, {"method", "gamma", "context_only_producer", "departure_rate"}));
  SpeculativeConfig sp;
  if (const json* v = member(j, "method")) {
    ASSIGN_OR_RETURN(sp.method, r.one_of(*v, ptr + "/method", kMethods));
  }
  if (const json* v = member(j, "gamma")) {
    ASSIGN_OR_RETURN(sp.gamma, r.int32(*v, ptr + "/gamma", 1, bounds::kGamma));
  }
  if (const json* v = member(j, "context_only_producer")) {
    ASSIGN_OR_RETURN(sp.context_only_producer, r.boolean(*v, ptr + "/context_only_producer"));
  }
  if (const json* v = member(j, "departure_rate")) {
    const std::string vptr = ptr + "/departure_rate";
    if (!v->is_number()) return r.type_error(*v, vptr, "number");
    const double rate = v->get<double>();
    if (!(rate >= 0.0 && rate <= 1.0))
      return r.error(vptr, "must be a number in [0, 1], got " + v->dump());
    sp.departure_rate = rate;
  }
  *out = std::move(sp);
  return Status::ok();
}

Status parse_serving(const ScenarioReader& r, const json& j, const Scenario& s,
                     ServingConfig* out) {
  const std::string ptr = "/serving";
  RETURN_IF_ERROR(r.check_object(
      j, ptr,
      {"arrival_steps", "arrival_every", "max_in_flight", "token_budget", "chunk", "depth"}));
  ServingConfig sv;
  sv.enabled = true;
  if (const json* v = member(j, "arrival_steps")) {
    const std::string aptr = ptr + "/arrival_steps";
    if (!v->is_array()) return r.type_error(*v, aptr, "array");
    if (static_cast<int>(v->size()) != s.workload.prompts)
      return r.error(aptr, "expected one step per prompt (" + std::to_string(s.workload.prompts) +
                               "), got " + std::to_string(v->size()));
    for (size_t i = 0; i < v->size(); ++i) {
      ASSIGN_OR_RETURN(int step, r.int32((*v)[i], child(aptr, i), 0, bounds::kServingSteps));
      if (!sv.arrival_steps.empty() && step < sv.arrival_steps.back())
        return r.error(child(aptr, i), "arrival steps must not decrease");
      sv.arrival_steps.push_back(step);
    }
  }
  if (const json* v = member(j, "arrival_every")) {
    if (member(j, "arrival_steps"))
      return r.error(ptr + "/arrival_every", "give arrival_steps or arrival_every, not both");
    ASSIGN_OR_RETURN(sv.arrival_every,
                     r.int32(*v, ptr + "/arrival_every", 0, bounds::kServingSteps));
  }
  if (const json* v = member(j, "max_in_flight")) {
    ASSIGN_OR_RETURN(sv.max_in_flight, r.int32(*v, ptr + "/max_in_flight", 1, bounds::kPrompts));
  }
  if (const json* v = member(j, "token_budget")) {
    ASSIGN_OR_RETURN(sv.token_budget,
                     r.int32(*v, ptr + "/token_budget", 1, bounds::kServingTokens));
  }
  if (const json* v = member(j, "chunk")) {
    ASSIGN_OR_RETURN(sv.chunk, r.int32(*v, ptr + "/chunk", 1, bounds::kServingTokens));
  }
  if (const json* v = member(j, "depth")) {
    ASSIGN_OR_RETURN(sv.depth, r.int32(*v, ptr + "/depth", 1, bounds::kServingDepth));
  }
  // A verify block must fit in one step, or a speculative request never runs again.
  if (s.speculative.method != "none" && sv.token_budget < s.speculative.gamma + 1)
    return r.error(ptr + "/token_budget", "must hold a verify block of gamma + 1 = " +
                                              std::to_string(s.speculative.gamma + 1) +
                                              " tokens, got " + std::to_string(sv.token_budget));
  if (s.speculative.context_only_producer)
    return r.error(ptr, "serving with a context-only producer is not supported");
  *out = std::move(sv);
  return Status::ok();
}

Status parse_capture_ids(const ScenarioReader& r, const json& j, int layers,
                         std::vector<int>* out) {
  const std::string ptr = "/capture_ids";
  if (!j.is_array()) return r.type_error(j, ptr, "array");
  std::vector<int> ids;
  for (size_t i = 0; i < j.size(); ++i) {
    ASSIGN_OR_RETURN(int id, r.int32(j[i], child(ptr, i), -1, layers));
    ids.push_back(id == -1 ? 0 : id);  // -1 is ATOM's name for the embedding output
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  *out = std::move(ids);
  return Status::ok();
}

Status parse_partitions(const ScenarioReader& r, const json& j, int layers, PartitionSpec* out) {
  const std::string ptr = "/partitions";
  RETURN_IF_ERROR(r.check_object(j, ptr, {"pp", "splits"}));
  PartitionSpec p;
  if (const json* v = member(j, "pp")) {
    ASSIGN_OR_RETURN(p.pp, r.int32(*v, ptr + "/pp", 1));
  }
  if (p.pp > layers) {
    return r.error(ptr + "/pp", "must be <= num_hidden_layers (" + std::to_string(layers) +
                                    "), got " + std::to_string(p.pp));
  }
  const json* splits = member(j, "splits");
  const std::string sptr = ptr + "/splits";
  if (splits && splits->is_array()) {
    p.mode = "list";
    if (splits->empty()) return r.error(sptr, "expected at least one partition");
    for (size_t i = 0; i < splits->size(); ++i) {
      const json& e = (*splits)[i];
      const std::string eptr = child(sptr, i);
      if (!e.is_array()) return r.type_error(e, eptr, "array");
      if (static_cast<int>(e.size()) != p.pp - 1) {
        return r.error(eptr, "expected " + std::to_string(p.pp - 1) + " cut point(s) for pp " +
                                 std::to_string(p.pp) + ", got " + std::to_string(e.size()));
      }
      std::vector<int> cuts;
      for (size_t k = 0; k < e.size(); ++k) {
        ASSIGN_OR_RETURN(int b, r.int32(e[k], child(eptr, k), 1, layers - 1));
        if (!cuts.empty() && b <= cuts.back()) {
          return r.error(child(eptr, k), "cut points must be strictly increasing");
        }
        cuts.push_back(b);
      }
      if (std::find(p.cuts.begin(), p.cuts.end(), cuts) != p.cuts.end()) {
        return r.error(eptr, "duplicate partition " + e.dump());
      }
      p.cuts.push_back(std::move(cuts));
    }
  } else if (splits) {
    if (!splits->is_string()) return r.type_error(*splits, sptr, "string or array");
    ASSIGN_OR_RETURN(p.mode, r.one_of(*splits, sptr, kSplitModes));
  }
  if (p.mode == "list" && p.cuts.size() > kMaxPartitions) {
    return r.error(sptr,
                   fmt::format("{} partitions listed, at most {}", p.cuts.size(), kMaxPartitions));
  }
  if (partition_count(p, layers) > kMaxPartitions) {
    return r.error(sptr, fmt::format("\"{}\" over {} layers with pp {} gives more than {} "
                                     "partitions (the most one sweep may run)",
                                     p.mode, layers, p.pp, kMaxPartitions));
  }
  *out = std::move(p);
  return Status::ok();
}

// `expect` (what the sweep must conclude; evaluate_expect in harness/judge/expect.cc reads it):
// every key typed, and a catching check that the sweep runs.
Status parse_expect(const ScenarioReader& r, const json& j, const Scenario& s) {
  const std::string ptr = "/expect";
  RETURN_IF_ERROR(
      r.check_object(j, ptr,
                     {"verdict", "identical_splits", "identical", "diverged", "config_rejected",
                      "caught_by", "acceptance_rate_at_least", "acceptance_rate_at_most",
                      "every_accepted_length", "batch_invariant"}));
  for (const char* field : {"acceptance_rate_at_least", "acceptance_rate_at_most"}) {
    if (const json* v = member(j, field)) {
      const std::string vptr = child(ptr, field);
      if (!v->is_number()) return r.type_error(*v, vptr, "number");
      const double rate = v->get<double>();
      if (!(rate >= 0.0 && rate <= 1.0))
        return r.error(vptr, "must be a number in [0, 1], got " + v->dump());
    }
  }
  if (const json* v = member(j, "batch_invariant")) {
    RETURN_IF_ERROR(r.boolean(*v, ptr + "/batch_invariant").status());
  }
  if (const json* v = member(j, "every_accepted_length")) {
    RETURN_IF_ERROR(r.boolean(*v, ptr + "/every_accepted_length").status());
  }
  if (const json* v = member(j, "verdict")) {
    RETURN_IF_ERROR(
        r.one_of(*v, ptr + "/verdict", {"conformant", "divergent", "no-data"}).status());
  }
  if (const json* v = member(j, "identical_splits")) {
    RETURN_IF_ERROR(r.integer(*v, ptr + "/identical_splits", 0, kMaxPartitions).status());
  }
  for (const char* field : {"identical", "diverged", "config_rejected"}) {
    // Split keys ("split-12"); whether the sweep has them is for the sweep to judge (a
    // bisect re-parses the scenario over a subset of its partitions).
    if (const json* v = member(j, field)) {
      RETURN_IF_ERROR(r.name_list(
                           *v, child(ptr, field), "split key",
                           [](const std::string& k) { return !k.empty(); }, "a non-empty key")
                          .status());
    }
  }
  if (const json* v = member(j, "caught_by")) {
    const std::string cptr = ptr + "/caught_by";
    ASSIGN_OR_RETURN(std::string check, r.string(*v, cptr));
    if (find_check(check) == nullptr) {
      return r.error(cptr, "unknown check \"" + check + "\" (known: " +
                               registry_names(check_registry(), &CheckInfo::name) + ")");
    }
    if (std::find(s.checks.begin(), s.checks.end(), check) == s.checks.end()) {
      return r.error(cptr, "the " + check + " check is not among /checks (" + join(s.checks) +
                               "), so nothing could ever be caught by it");
    }
  }
  return Status::ok();
}

// An external engine's model: its layer counts as /model/overrides say (a conflict is
// refused) and its {seed}, /engine/seed else an explicit /model/seed.
Status check_external_model(const ScenarioReader& r, const json& j, Scenario& s) {
  // The engine's layer count is the model's: an override that says otherwise is refused.
  const json model = j.value("model", json::object());
  const json* o = model.is_object() ? member(model, "overrides") : nullptr;
  for (const auto& [key, value] :
       {std::pair{"num_hidden_layers", s.external->num_hidden_layers},
        std::pair{"attn_res_block_size", s.external->attn_res_block_size}}) {
    const json* v = o != nullptr && o->is_object() ? member(*o, key) : nullptr;
    if (v != nullptr && value > 0 && *v != value)
      return r.error(
          std::string("/engine/") + key,
          fmt::format("{} conflicts with /model/overrides/{} ({})", value, key, v->dump()));
  }
  // {seed} is the engine's seed: /engine/seed, else an explicit /model/seed; never the
  // K3-mini preset's default, which an external engine knows nothing of.
  const json engine = j.value("engine", json::object());
  const bool engine_seed = engine.is_object() && member(engine, "seed") != nullptr;
  const bool model_seed = model.is_object() && member(model, "seed") != nullptr;
  if (!engine_seed && model_seed) s.external->seed = static_cast<int64_t>(s.model.seed);
  for (size_t i = 0; i < s.external->command.size() && !engine_seed && !model_seed; ++i)
    if (s.external->command[i].find("{seed}") != std::string::npos)
      return r.error(fmt::format("/engine/command/{}", i),
                     "{seed} needs the engine's seed: set /engine/seed");
  return Status::ok();
}

// /faults and /checks (every check when absent), each fault's catching check among them.
Status parse_faults_and_checks(const ScenarioReader& r, const json& j, Scenario& s) {
  if (const json* v = member(j, "faults")) {
    ASSIGN_OR_RETURN(s.faults, r.name_list(
                                   *v, "/faults", "fault id",
                                   [](const std::string& id) { return find_fault(id) != nullptr; },
                                   registry_names(fault_registry(), &FaultInfo::id)));
  }
  const std::string check_names = registry_names(check_registry(), &CheckInfo::name);
  if (const json* v = member(j, "checks")) {
    ASSIGN_OR_RETURN(
        s.checks, r.name_list(
                      *v, "/checks", "check",
                      [](const std::string& n) { return find_check(n) != nullptr; }, check_names));
    if (s.checks.empty()) return r.error("/checks", "expected at least one check");
  } else {
    for (const CheckInfo& c : check_registry()) s.checks.emplace_back(c.name);
  }
  // A fault whose catching check does not run could never be caught: such a scenario
  // proves nothing.
  for (size_t i = 0; i < s.faults.size(); ++i) {
    const std::string check(find_fault(s.faults[i])->caught_by);
    if (std::find(s.checks.begin(), s.checks.end(), check) == s.checks.end()) {
      return r.error(child("/faults", i), "fault \"" + s.faults[i] + "\" is caught by the " +
                                              check + " check, which is not among /checks (" +
                                              join(s.checks) + ")");
    }
  }
  return Status::ok();
}

}  // namespace

Result<Scenario> parse_scenario(const nlohmann::json& j, const std::string& source_name,
                                const std::string& base_dir) {
  ScenarioReader r(source_name);
  RETURN_IF_ERROR(r.check_object(j, "",
                                 {"name", "description", "model", "checkpoint", "workload",
                                  "engine", "capture_ids", "speculative", "serving", "partitions",
                                  "faults", "checks", "backend", "transport", "expect"}));
  Scenario s;
  s.source_path = source_name;
  s.name = std::filesystem::path(source_name).stem().string();
  if (const json* v = member(j, "name")) {
    ASSIGN_OR_RETURN(s.name, r.string(*v, "/name"));
    if (s.name.empty()) return r.error("/name", "must not be empty");
  }
  if (const json* v = member(j, "description")) {
    ASSIGN_OR_RETURN(s.description, r.string(*v, "/description"));
  }
  RETURN_IF_ERROR(parse_model(r, j.value("model", json::object()), &s.model));
  if (const json* v = member(j, "checkpoint")) {
    ASSIGN_OR_RETURN(std::string path, r.string(*v, "/checkpoint"));
    s.checkpoint = resolve_path(path, base_dir);
  }
  RETURN_IF_ERROR(parse_workload(r, j.value("workload", json::object()), base_dir, &s.workload));
  RETURN_IF_ERROR(parse_engine(r, j.value("engine", json::object()), source_name, base_dir, &s));
  if (s.external) RETURN_IF_ERROR(check_external_model(r, j, s));
  RETURN_IF_ERROR(parse_speculative(r, j.value("speculative", json::object()), &s.speculative));
  if (const json* v = member(j, "serving")) {
    if (!v->is_object()) return r.type_error(*v, "/serving", "object");
    RETURN_IF_ERROR(parse_serving(r, *v, s, &s.serving));
  }
  const int layers = s.model.num_hidden_layers;
  if (const json* v = member(j, "capture_ids")) {
    RETURN_IF_ERROR(parse_capture_ids(r, *v, layers, &s.capture_ids));
  } else {
    s.capture_ids = default_capture_ids(s.speculative.method, layers);
  }
  RETURN_IF_ERROR(
      parse_partitions(r, j.value("partitions", json::object()), layers, &s.partitions));
  RETURN_IF_ERROR(parse_faults_and_checks(r, j, s));
  for (const char* kind : {"backend", "transport"}) {
    const json* v = member(j, kind);
    if (v == nullptr) continue;
    std::vector<std::string_view> names;
    for (const Capability& c : capability_table())
      if (c.kind == kind) names.push_back(c.name);
    ASSIGN_OR_RETURN(std::string name, r.one_of(*v, std::string("/") + kind, names));
    (std::string_view(kind) == "backend" ? s.backend : s.transport) = name;
  }
  if (const json* v = member(j, "expect")) {
    if (!v->is_object()) return r.type_error(*v, "/expect", "object");
    RETURN_IF_ERROR(parse_expect(r, *v, s));
    s.expect = *v;
  }
  return s;
}

Status check_capabilities(const Scenario& s, const std::string& source_name) {
  const ScenarioReader r(source_name);
  // Serving (SPEC 3.4) runs on either backend over every transport: over mpi and nccl a
  // step's segments travel in the job envelope and their payloads through the payload
  // channel as a forward's does (over nccl by NCCL, device bodies when the stages compute
  // on their GPUs), checked by the receiving stage as inproc's are. Only what this build or
  // machine cannot provide is refused, below.
  for (const auto& [kind, name] :
       {std::pair<std::string_view, const std::string&>{"backend", s.backend},
        {"transport", s.transport}}) {
    const Capability* c = find_capability(kind, name);
    const std::string why = c == nullptr ? "unknown" : c->unavailable();
    if (why.empty()) continue;
    return r.error("/" + std::string(kind),
                   std::string(kind) + " \"" + name + "\" cannot run here: " + why +
                       " (this build provides: " + provided_names(kind) + ")");
  }
#ifdef SPLITCHECK_HAVE_CUDA
  // A CUDA run whose tensors would not fit in the GPU's free memory is refused before
  // anything is allocated (harness/scenario/device_fit.h).
  if (s.backend == "cuda") {
    const std::string why =
        device_fit_problem(estimate_device_footprint(s), cuda::device_memory().free);
    if (!why.empty())
      return r.error("/backend", "backend \"cuda\" cannot run this scenario here: it " + why);
  }
#endif
  return Status::ok();
}

std::string json_nesting_error(const std::string& text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth <= max_depth) continue;
      const size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + i, '\n'));
      const size_t newline = text.rfind('\n', i);
      const size_t column = i - (newline == std::string::npos ? 0 : newline + 1) + 1;
      return fmt::format("{}:{}: JSON nested deeper than {} levels", line, column, max_depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return "";
}

Result<Scenario> load_scenario(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path)) return invalid_input(path + ": cannot open");
  // A scenario is a page of JSON: a file past kMaxScenarioBytes is refused before it is
  // read, so a hostile file cannot make the reader hold it in memory.
  std::error_code size_ec;
  const uintmax_t size = std::filesystem::file_size(path, size_ec);
  if (!size_ec && size > kMaxScenarioBytes)
    return invalid_input(fmt::format("{}: {} bytes, more than the {} MiB a scenario file may have",
                                     path, size, kMaxScenarioBytes >> 20));
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  if (const std::string deep = json_nesting_error(text, kMaxScenarioDepth); !deep.empty())
    return invalid_input(path + ":" + deep);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    // nlohmann reports a byte count; editors want line:column.
    const size_t byte = std::min<size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    size_t line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < byte; ++i) {
      if (text[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    std::string what = e.what();
    const size_t colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    return invalid_input(path + ":" + std::to_string(line) + ":" +
                         std::to_string(byte - line_start + 1) + ": malformed JSON: " + what);
  }
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  const std::string base_dir =
      (ec ? std::filesystem::path(path) : abs).parent_path().lexically_normal().string();
  ASSIGN_OR_RETURN(Scenario s, parse_scenario(j, path, base_dir));
  RETURN_IF_ERROR(check_capabilities(s, path));
  return s;
}

nlohmann::json resolved_scenario_json(const Scenario& s) {
  const ModelConfig& m = s.model;
  json overrides = json::object();
  for (const ModelIntField& f : kModelIntFields) overrides[std::string(f.name)] = m.*(f.member);
  overrides["rms_norm_eps"] = m.rms_norm_eps;
  overrides["native_attn_res_hidden_sizes"] = m.native_attn_res_hidden_sizes;

  json splits;
  if (s.partitions.mode == "list") {
    splits = s.partitions.cuts;
  } else {
    splits = s.partitions.mode;
  }

  json resolved = json{
      {"name", s.name},
      {"description", s.description},
      {"model", {{"preset", m.preset}, {"seed", m.seed}, {"overrides", overrides}}},
      {"checkpoint", s.checkpoint},
      {"workload",
       {{"file", s.workload.file},
        {"seed", s.workload.seed},
        {"prompts", s.workload.prompts},
        {"max_new_tokens", s.workload.max_new_tokens},
        {"max_prompt_tokens", s.workload.max_prompt_tokens}}},
      {"engine",
       {{"prefill_chunk", s.prefill_chunk}, {"dump_level", dump_level_name(s.dump_level)}}},
      {"capture_ids", s.capture_ids},
      {"speculative",
       {{"method", s.speculative.method},
        {"gamma", s.speculative.gamma},
        {"context_only_producer", s.speculative.context_only_producer},
        {"departure_rate", s.speculative.departure_rate}}},
      {"partitions", {{"pp", s.partitions.pp}, {"splits", splits}}},
      {"faults", s.faults},
      {"checks", s.checks},
      {"backend", s.backend},
      {"transport", s.transport},
      {"expect", s.expect},
  };
  if (s.external) resolved["engine"].update(external_engine_json(*s.external));
  // Only a serving scenario names the block, so the resolved form (and the identity
  // hash) of every other scenario stays as it was.
  if (s.serving.enabled) {
    resolved["serving"] = {{"max_in_flight", s.serving.max_in_flight},
                           {"token_budget", s.serving.token_budget},
                           {"chunk", s.serving.chunk},
                           {"depth", s.serving.depth}};
    if (!s.serving.arrival_steps.empty())
      resolved["serving"]["arrival_steps"] = s.serving.arrival_steps;
    else
      resolved["serving"]["arrival_every"] = s.serving.arrival_every;
  }
  return resolved;
}

}  // namespace splitcheck
