// The report model of `splitcheck compare --report`.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "harness/judge/cause.h"
#include "harness/reports/model_common.h"
#include "harness/reports/report.h"
#include "harness/reports/writers.h"

namespace splitcheck {
namespace {

// "/forward/3/layers/12/pre_attn" -> forward 3, layer 12, site "pre_attn"; -1 when absent.
void locate(const std::string& path, nlohmann::json& out) {
  const std::string p = path.starts_with('/') ? path.substr(1) : path;
  out["forward"] = p.starts_with("forward/") ? std::atoi(p.c_str() + 8) : -1;
  const size_t l = p.find("/layers/");
  out["layer"] = l == std::string::npos ? -1 : std::atoi(p.c_str() + l + 8);
  const size_t s = p.rfind('/');
  out["site"] = s == std::string::npos ? p : p.substr(s + 1);
}

// The identity of one input, from its root attributes, as (field, value) pairs in the
// order a reader scans them: who produced it, on what, with which environment, for what.
std::vector<std::pair<std::string, std::string>> input_identity(const DumpHeader& h) {
  auto parse = [](const std::string& text) {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    return j.is_object() ? j : nlohmann::json::object();
  };
  auto text = [](const nlohmann::json& v) {
    return v.is_string() ? v.get<std::string>() : v.dump();
  };
  const nlohmann::json producer = parse(h.producer_json), env = parse(h.env_json);
  std::vector<std::pair<std::string, std::string>> out = {
      {"producer", str_field(producer, "name")},
      {"version", str_field(producer, "version")},
      {"git_revision", str_field(producer, "git_revision").empty()
                           ? "unknown"
                           : str_field(producer, "git_revision")},
      {"backend", h.backend},
      {"device", str_field(env, "device")},
      {"compiler", str_field(env, "compiler")},
      {"flags", str_field(env, "flags")}};
  for (const auto& [k, v] : env.items())
    if (k != "device" && k != "compiler" && k != "flags") out.emplace_back("env." + k, text(v));
  out.emplace_back("partition", h.partition);
  out.emplace_back("format_version", std::to_string(h.format_version));
  out.emplace_back("model_sha256", h.model_sha256);
  out.emplace_back("scenario_sha256", h.scenario_sha256);
  return out;
}

// Each input's provenance side by side with the comparator's own build: one row per
// field, `differs` when the two inputs disagree on it.
nlohmann::json inputs_provenance(const CompareResult& r) {
  const auto a = input_identity(r.header_a), b = input_identity(r.header_b);
  std::vector<std::string> names;
  std::map<std::string, std::string> va, vb;
  for (const auto& [k, v] : a) {
    names.push_back(k);
    va[k] = v;
  }
  for (const auto& [k, v] : b) {
    if (!va.contains(k)) names.push_back(k);
    vb[k] = v;
  }
  const nlohmann::json self = provenance_json("cpu");
  const std::map<std::string, std::string> comparator = {
      {"producer", str_field(self, "producer")},
      {"version", str_field(self, "version")},
      {"git_revision", str_field(self, "git_revision")},
      {"compiler", str_field(self, "compiler")},
      {"flags", str_field(self, "flags")}};
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& n : names) {
    const std::string x = va.contains(n) ? va[n] : "", y = vb.contains(n) ? vb[n] : "";
    rows.push_back({{"field", n},
                    {"a", x},
                    {"b", y},
                    {"comparator", comparator.contains(n) ? comparator.at(n) : ""},
                    {"differs", x != y}});
  }
  return rows;
}

// Elements of a dataset of `shape`.
int64_t elements_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The per-layer profile for the chart: for every layer that has compared datasets
// (paths .../layers/<l>/<site>), the largest mismatch fraction over its forwards and
// sites, the largest ULP and the smallest cosine; layers in increasing order.
nlohmann::json layer_profile(const CompareResult& r) {
  struct Layer {
    int datasets = 0, differing = 0;
    double fraction = 0, max_ulp = 0, min_cosine = 1;
  };
  std::map<int, Layer> layers;
  auto layer_of = [](const std::string& path) {
    const size_t at = path.find("/layers/");
    return at == std::string::npos ? -1 : std::atoi(path.c_str() + at + 8);
  };
  for (const std::string& p : r.compared_paths)
    if (const int l = layer_of(p); l >= 0) ++layers[l].datasets;
  for (const TensorDiff& d : r.diffs) {
    const int l = layer_of(d.path);
    if (l < 0) continue;
    Layer& x = layers[l];
    ++x.differing;
    const int64_t n = elements_of(d.shape);
    x.fraction = std::max(x.fraction, n > 0 ? static_cast<double>(d.mismatches) / n : 0.0);
    x.max_ulp = std::max(x.max_ulp, d.max_ulp);
    x.min_cosine = std::min(x.min_cosine, d.cosine);
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [l, x] : layers)
    out.push_back({{"layer", l},
                   {"datasets", x.datasets},
                   {"differing", x.differing},
                   {"mismatch_fraction", x.fraction},
                   {"max_ulp", x.max_ulp},
                   {"min_cosine", x.min_cosine}});
  return out;
}

}  // namespace

nlohmann::json compare_report(const CompareResult& r, const std::string& a, const std::string& b,
                              const ReportContext& ctx, bool approximate) {
  nlohmann::json cases = nlohmann::json::array();
  auto add = [&](const std::string& key, const std::string& message, const char* check) {
    nlohmann::json c = empty_case(key, static_cast<int64_t>(cases.size()));
    c["layout"] = "dataset";
    c["verdict"] = "diverged";
    c["message"] = message;
    c["failed_checks"] = {check};
    c["datasets_compared"] = 1;
    c["datasets_differing"] = 1;
    cases.push_back(std::move(c));
    return &cases.back();
  };
  for (const TensorDiff& d : r.diffs) {
    if (d.within_tolerance) continue;
    nlohmann::json* c = add(d.path, verdict_line(d), "bits");
    (*c)["first_divergence"] = diff_json(d);
    const int64_t n = elements_of(d.shape);
    (*c)["first_divergence"]["elements"] = n;
    (*c)["first_divergence"]["mismatch_fraction"] =
        n > 0 ? static_cast<double>(d.mismatches) / static_cast<double>(n) : 0.0;
    locate(d.path, (*c)["first_divergence"]);
  }
  for (const std::string& e : r.structural_errors) {
    const size_t colon = e.find(':');
    add(colon == std::string::npos ? e : e.substr(0, colon), e, "structure");
  }
  for (const std::string& p : r.only_in_a) add(p, "dataset " + p + " only in A", "missing");
  for (const std::string& p : r.only_in_b) add(p, "dataset " + p + " only in B", "missing");
  for (const AttributeDiff& d : r.attribute_diffs)
    add(d.object + "@" + d.name, attribute_line(d), "attributes");

  // The likely cause, on the case of the first departure in A's execution order.
  if (const std::string cause = compare_cause(r); !cause.empty()) {
    const TensorDiff* first = r.first_divergence();
    const bool missing_first =
        !r.only_in_a.empty() && (first == nullptr || r.only_in_a_first_order < first->order);
    const std::string key = missing_first      ? r.only_in_a.front()
                            : first != nullptr ? first->path
                                               : r.only_in_b.front();
    for (nlohmann::json& c : cases)
      if (str_field(c, "key") == key) {
        c["cause"] = cause;
        break;
      }
  }
  const int64_t total =
      r.datasets_compared + static_cast<int64_t>(r.structural_errors.size() + r.only_in_a.size() +
                                                 r.only_in_b.size() + r.attribute_diffs.size());
  const int64_t diverged = static_cast<int64_t>(cases.size());
  nlohmann::json j;
  j["format"] = "splitcheck.report";
  j["format_version"] = 1;
  j["kind"] = "compare";
  // Two files compared are one case, judged by the outcome tables as a sweep's are.
  const SweepOutcome& outcome =
      outcome_of(r.equal() ? SweepVerdict::kConformant : SweepVerdict::kDivergent);
  j["verdict"] = std::string(outcome.word);
  j["exit_code"] = outcome_of(r.equal() ? Verdict::kPass : Verdict::kDiverged).exit_status;
  j["summary"] = verdict(r);
  if (const std::string cause = compare_cause(r); !cause.empty())
    j["summary"] = verdict(r) + " (cause: " + cause + ")";
  j["inputs"] = {{"a", a}, {"b", b}};
  j["provenance"] = provenance_json("cpu");  // the comparator's own build
  j["inputs_provenance"] = inputs_provenance(r);
  j["layers"] = layer_profile(r);
  j["command"] = ctx.command;
  j["counts"] = {{"total", total},       {"pass", std::max<int64_t>(0, total - diverged)},
                 {"diverged", diverged}, {"config_rejected", 0},
                 {"error", 0},           {"skipped", 0}};
  j["lane"] = approximate ? nlohmann::json{{"name", "approximate"},
                                           {"rule",
                                            "bfloat16 within 2 ULP, cosine >= 0.999, "
                                            "int32 exact, NaN and infinities bit for bit"}}
                          : nlohmann::json{{"name", "exact"},
                                           {"rule",
                                            "bitwise on the integer bit pattern; no "
                                            "tolerance"}};
  j["digests"] = r.digests_trusted ? "trusted" : "verified";
  j["unverified_datasets"] = r.datasets_unverified;
  j["digests_rule"] = digests_line(r);
  if (r.datasets_rounded > 0)
    j["rounded"] = {{"datasets", r.datasets_rounded}, {"examples", r.rounded_examples}};
  const char* placement = r.placement == PlacementJudgement::kJudged        ? "judged"
                          : r.placement == PlacementJudgement::kNotJudged   ? "not-judged"
                          : r.placement == PlacementJudgement::kNotRecorded ? "not-recorded"
                          : r.placement == PlacementJudgement::kPartitionsDiffer
                              ? "partitions-differ"
                              : "not-asked";
  j["placement_judgement"] = {{"judgement", placement},
                              {"stages_a", r.stages_a},
                              {"stages_b", r.stages_b},
                              {"line", placement_line(r)}};
  j["cases"] = cases;
  return j;
}

}  // namespace splitcheck
