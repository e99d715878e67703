// The report model of `splitcheck compare --report`.
#include <fmt/format.h>

#include <cstdlib>

#include "reports/model_common.h"
#include "reports/report.h"

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

  const int64_t total =
      r.datasets_compared + static_cast<int64_t>(r.structural_errors.size() + r.only_in_a.size() +
                                                 r.only_in_b.size() + r.attribute_diffs.size());
  const int64_t diverged = static_cast<int64_t>(cases.size());
  nlohmann::json j;
  j["format"] = "splitcheck.report";
  j["format_version"] = 1;
  j["kind"] = "compare";
  j["verdict"] = r.equal() ? "conformant" : "divergent";
  j["exit_code"] = r.equal() ? 0 : 1;
  j["summary"] = verdict(r);
  j["inputs"] = {{"a", a}, {"b", b}};
  j["provenance"] = provenance_json("cpu");
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
