// The report model of `splitcheck bisect --report`.
#include <fmt/format.h>

#include "harness/engine/run.h"
#include "harness/reports/model_common.h"
#include "harness/reports/report.h"

namespace splitcheck {
namespace {

nlohmann::json size_json(const ScenarioSize& z) {
  return {{"layers", z.layers},
          {"prompts", z.prompts},
          {"max_new_tokens", z.max_new_tokens},
          {"max_prompt_tokens", z.max_prompt_tokens},
          {"partitions", z.partitions},
          {"max_in_flight", z.max_in_flight}};
}

}  // namespace

Result<nlohmann::json> bisect_report(const BisectResult& r, const Scenario& s,
                                     const std::string& repro_path, const ReportContext& ctx) {
  ASSIGN_OR_RETURN(std::string scenario_sha, scenario_identity_sha256(s));
  ASSIGN_OR_RETURN(std::string model_sha, model_identity_sha256(s));
  const nlohmann::json resolved = resolved_scenario_json(s);
  nlohmann::json j;
  j["format"] = "splitcheck.report";
  j["format_version"] = 1;
  j["kind"] = "bisect";
  j["verdict"] = r.conformant ? "conformant" : "divergent";
  j["exit_code"] = r.conformant ? 0 : 1;
  j["scenario"] = {{"name", s.name},
                   {"sha256", scenario_sha},
                   {"model_sha256", model_sha},
                   {"layers", s.model.num_hidden_layers},
                   {"resolved", resolved}};
  j["provenance"] = provenance_json(resolved.value("backend", "cpu"));
  j["command"] = ctx.command;
  j["lane"] = {{"name", "exact"}, {"rule", "bitwise on the integer bit pattern; no tolerance"}};
  nlohmann::json cases = nlohmann::json::array();
  nlohmann::json bisect = {{"sweeps", r.sweeps},
                           {"steps", r.steps},
                           {"before", size_json(r.before)},
                           {"after", size_json(r.after)}};
  if (!r.conformant) {
    const BisectFinding& f = r.finding;
    nlohmann::json c = empty_case(f.key, 0);
    c["layout"] = f.layout;
    c["cuts"] = f.cuts;
    c["verdict"] = verdict_name(f.verdict);
    c["message"] = f.message;
    c["cause"] = f.cause;
    nlohmann::json where = {{"forward", f.forward}, {"layer", f.layer},     {"site", f.site},
                            {"token", f.token},     {"channel", f.channel}, {"dataset", f.dataset}};
    if (f.request >= 0) where["request"] = f.request;
    if (f.step >= 0) where["step"] = f.step;
    c["location"] = where;
    cases.push_back(c);
    bisect["cause"] = f.cause;
    bisect["first_failing_split"] = f.key;
    bisect["first_divergence"] = where;
    bisect["repro"] = {{"path", repro_path}, {"replay", "splitcheck sweep " + repro_path}};
  }
  j["bisect"] = bisect;
  j["counts"] = {{"total", cases.size()}};
  for (const CaseOutcome& o : case_outcomes())
    j["counts"][std::string(o.count_key)] =
        !r.conformant && o.verdict != Verdict::kPass && r.finding.verdict == o.verdict ? 1 : 0;
  j["cases"] = cases;
  return j;
}

}  // namespace splitcheck
