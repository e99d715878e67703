// junit.xml: one test case per split point (compare: per differing dataset, while tests=
// counts the datasets compared; bisect: the first failing split); each verdict is a <failure>,
// an <error>, a <skipped/> or a pass as the outcome table says (harness/judge/outcome.h).
// A sweep whose scenario `expect` is not met has one more test case, "expect", failing
// (type "expect-not-met") with every unmet expectation: the gate failed on it. A sweep
// refused by --self-check has one test case, "self-check", in error with the first difference.
#include <fmt/format.h>

#include "harness/judge/outcome.h"
#include "harness/reports/report.h"
#include "harness/reports/writers.h"

namespace splitcheck {

namespace {

// The suite's properties: the verdict and identity, the digests' and placement's standing,
// the command, the inputs' provenance, the engine's rows and what was not judged.
std::string junit_properties(const nlohmann::json& r) {
  std::string out;
  out += fmt::format("    <properties>\n      <property name=\"verdict\" value=\"{}\"/>\n",
                     xml_escape(str_field(r, "verdict")));
  out += fmt::format("      <property name=\"scenario_sha256\" value=\"{}\"/>\n",
                     xml_escape(str_field(obj_field(r, "scenario"), "sha256")));
  if (r.contains("digests")) {
    out += fmt::format("      <property name=\"digests\" value=\"{}\"/>\n",
                       xml_escape(str_field(r, "digests")));
    out += fmt::format("      <property name=\"digests_rule\" value=\"{}\"/>\n",
                       xml_escape(str_field(r, "digests_rule")));
  }
  if (const nlohmann::json& p = obj_field(r, "placement_judgement"); p.contains("line")) {
    out += fmt::format("      <property name=\"placement\" value=\"{}\"/>\n",
                       xml_escape(str_field(p, "judgement")));
    out += fmt::format("      <property name=\"placement_line\" value=\"{}\"/>\n",
                       xml_escape(str_field(p, "line")));
  }
  out += fmt::format("      <property name=\"command\" value=\"{}\"/>\n",
                     xml_escape(str_field(r, "command")));
  for (const nlohmann::json& row : r.value("inputs_provenance", nlohmann::json::array()))
    for (const char* side : {"a", "b"})
      out += fmt::format("      <property name=\"{}.{}\" value=\"{}\"/>\n", side,
                         xml_escape(str_field(row, "field")), xml_escape(str_field(row, side)));
  if (const std::string a = acceptance_line(r); !a.empty())
    out += fmt::format("      <property name=\"acceptance\" value=\"{}\"/>\n", xml_escape(a));
  for (const auto& [k, v] : engine_rows(r))
    out += fmt::format("      <property name=\"engine {}\" value=\"{}\"/>\n", xml_escape(k),
                       xml_escape(v));
  for (const std::string& line : not_judged_lines(r))
    out += fmt::format("      <property name=\"not judged\" value=\"{}\"/>\n", xml_escape(line));
  for (const std::string& line : rounding_lines(r))
    out += fmt::format("      <property name=\"compared after rounding\" value=\"{}\"/>\n",
                       xml_escape(line));
  out += "    </properties>\n";
  return out;
}

// One split point's test case: its caveats on every verdict, a failure, error or skip
// naming its checks and figures otherwise.
std::string junit_case(const nlohmann::json& r, const nlohmann::json& c, const std::string& suite) {
  std::string out;
  const std::string verdict = str_field(c, "verdict");
  const std::string message = xml_escape(str_field(c, "message"));
  out += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\"", suite,
                     xml_escape(str_field(c, "key")), c.value("seconds", 0.0));
  out += ">\n";
  if (c.contains("computed") && r.contains("computed"))
    out += fmt::format("      <system-out>computed: {}</system-out>\n",
                       xml_escape(computed_text(c["computed"], obj_field(r["computed"], "pp1"))));
  // What this case could not judge, and a waived evidence: on every case, passes included.
  std::string caveats;
  for (const std::string& line : not_judged_lines(c))
    caveats += (caveats.empty() ? "" : "\n") + line;
  if (str_field(c, "evidence") == "waived")
    caveats += std::string(caveats.empty() ? "" : "\n") + "partition evidence WAIVED: " +
               str_field(obj_field(obj_field(r, "engine"), "evidence"), "waived");
  for (const std::string& line : rounding_lines(c)) caveats += (caveats.empty() ? "" : "\n") + line;
  if (!caveats.empty())
    out += fmt::format("      <system-out>{}</system-out>\n", xml_escape(caveats));
  const CaseOutcome* outcome = find_outcome(verdict);
  const JunitElement element = outcome ? outcome->junit : JunitElement::kError;
  if (element == JunitElement::kNone) return out + "    </testcase>\n";
  std::string checks;
  for (const auto& f : c.value("failed_checks", nlohmann::json::array()))
    checks += (checks.empty() ? "" : ", ") + f.get<std::string>();
  if (c.contains("cause")) checks += "; cause: " + str_field(c, "cause");
  if (element == JunitElement::kFailure) {
    out += fmt::format(
        "      <failure type=\"{}\" message=\"{}\">layout {}; failed checks: "
        "{}\n{}{}</failure>\n",
        xml_escape(verdict), message, xml_escape(str_field(c, "layout")), xml_escape(checks),
        message, dataset_figures(c).empty() ? "" : "\n" + xml_escape(dataset_figures(c)));
  } else if (element == JunitElement::kError) {
    const std::string tail = str_field(c, "stderr_tail");
    out += fmt::format("      <error type=\"{}\" message=\"{}\">{}{}</error>\n",
                       xml_escape(verdict), message, message,
                       tail.empty() ? "" : xml_escape("\nengine stderr (tail):\n" + tail));
  } else if (verdict == "waived") {
    // A known divergence under a waiver: shown apart from passes, not a failure.
    out += fmt::format("      <skipped type=\"waived\" message=\"{}\">{}</skipped>\n",
                       xml_escape(waiver_line(c)), message);
  } else {
    out += fmt::format("      <skipped message=\"{}\"/>\n", message);
  }
  out += "    </testcase>\n";
  return out;
}

// The gate's test cases beyond split points, each one when its condition holds.
struct GateCases {
  bool expect_unmet;   // "expect", failing: the scenario's expect is not met
  bool refused;        // "self-check", in error: PP=1 does not reproduce itself
  bool no_reference;   // "pp1", in error: PP=1 gave no reference (its run failed)
  bool no_data;        // "no-data": the selected checks compared no data...
  bool no_data_fails;  // ...failing unless the scenario's expect asks for that verdict
};

GateCases gate_cases_of(const nlohmann::json& r) {
  const nlohmann::json& expect = obj_field(r, "expect");
  const std::string verdict = str_field(r, "verdict");
  const bool no_data = verdict == "no-data";
  return {expect.contains("met") && expect["met"].is_boolean() && !expect["met"].get<bool>(),
          verdict == "refused", verdict == "error", no_data,
          no_data && r.value("exit_code", 1) != 0};
}

// The test cases of the gate beyond split points: a refused self-check, no data compared,
// an unmet expect, expired waivers.
std::string junit_gate_cases(const nlohmann::json& r, const std::string& suite) {
  std::string out;
  const GateCases g = gate_cases_of(r);
  if (g.refused) {
    const nlohmann::json& sc = obj_field(r, "self_check");
    out += fmt::format(
        "    <testcase classname=\"{}\" name=\"self-check\" time=\"0.000\">\n      <error "
        "type=\"not-reproducible\" message=\"PP=1 does not reproduce itself: no split point "
        "judged\">{} of {} datasets differ between two PP=1 runs; first difference: "
        "{}</error>\n    </testcase>\n",
        suite, sc.value("datasets_differing", 0), sc.value("datasets_compared", 0),
        xml_escape(str_field(sc, "first_difference")));
  }
  if (g.no_reference)
    out += fmt::format(
        "    <testcase classname=\"{}\" name=\"pp1\" time=\"0.000\">\n      <error "
        "type=\"no-reference\" message=\"PP=1 gave no reference: no split point "
        "judged\">{}</error>\n    </testcase>\n",
        suite, xml_escape(str_field(r, "reference_failure")));
  if (g.no_data) {
    const std::string what =
        "no data compared: every split point passed, but its selected checks compared no "
        "dataset and judged no stage";
    out += fmt::format("    <testcase classname=\"{}\" name=\"no-data\" time=\"0.000\">\n", suite);
    out += g.no_data_fails
               ? fmt::format("      <failure type=\"no-data\" message=\"{}\">{}</failure>\n",
                             xml_escape(what), xml_escape(what))
               : fmt::format(
                     "      <system-out>{} (the scenario's expect asks for the verdict "
                     "no-data)</system-out>\n",
                     xml_escape(what));
    out += "    </testcase>\n";
  }
  if (g.expect_unmet) {
    std::string fails;
    for (const auto& f : obj_field(r, "expect").value("failures", nlohmann::json::array()))
      fails += (fails.empty() ? "" : "\n") + (f.is_string() ? f.get<std::string>() : f.dump());
    const std::string message = "the scenario's expect is not met";
    out += fmt::format(
        "    <testcase classname=\"{}\" name=\"expect\" time=\"0.000\">\n      <failure "
        "type=\"expect-not-met\" message=\"{}\">{}</failure>\n    </testcase>\n",
        suite, message, xml_escape(fails));
  }
  if (const std::vector<std::string> expired = waiver_failures(r); !expired.empty()) {
    std::string fails;
    for (const std::string& f : expired) fails += (fails.empty() ? "" : "\n") + f;
    out += fmt::format(
        "    <testcase classname=\"{}\" name=\"waivers\" time=\"0.000\">\n      <failure "
        "type=\"waiver-expired\" message=\"{} waiver(s) expired\">{}</failure>\n    "
        "</testcase>\n",
        suite, expired.size(), xml_escape(fails));
  }
  return out;
}

}  // namespace

std::string render_junit(const nlohmann::json& r) {
  const nlohmann::json& counts = r["counts"];
  const GateCases g = gate_cases_of(r);
  const int64_t total = counts.value("total", 0) + (g.expect_unmet ? 1 : 0) + (g.refused ? 1 : 0) +
                        (g.no_reference ? 1 : 0) + (g.no_data ? 1 : 0);
  int64_t failures = (g.expect_unmet ? 1 : 0) + (g.no_data_fails ? 1 : 0);
  int64_t errors = (g.refused ? 1 : 0) + (g.no_reference ? 1 : 0);
  int64_t skipped = 0;
  for (const CaseOutcome& o : case_outcomes()) {
    const int64_t n = counts.value(std::string(o.count_key), int64_t{0});
    if (o.junit == JunitElement::kFailure) failures += n;
    if (o.junit == JunitElement::kError) errors += n;
    // Waived cases are shown as skipped test cases, but JUnit's count of skipped ones keeps
    // to cases that never ran.
    if (o.junit == JunitElement::kSkipped && o.verdict == Verdict::kSkipped) skipped += n;
  }
  const double seconds = r.contains("timing") ? r["timing"].value("total_seconds", 0.0) : 0.0;
  const std::string suite =
      xml_escape(str_field(obj_field(r, "scenario"), "name", str_field(r, "kind", "scenario")));
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format(
      "<testsuites name=\"splitcheck\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
      "time=\"{:.3f}\">\n",
      total, failures, errors, skipped, seconds);
  out += fmt::format(
      "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
      "time=\"{:.3f}\">\n",
      suite, total, failures, errors, skipped, seconds);
  out += junit_properties(r);
  for (const nlohmann::json& c : r["cases"]) {
    out += junit_case(r, c, suite);
  }
  // One system-out for what a compare verdict does not rest on.
  std::string caveats;
  if (str_field(r, "digests") == "trusted")
    caveats += "UNVERIFIED: " + xml_escape(str_field(r, "digests_rule"));
  if (str_field(obj_field(r, "placement_judgement"), "judgement") == "not-judged")
    caveats += std::string(caveats.empty() ? "" : "\n") +
               "NOT JUDGED: " + xml_escape(str_field(obj_field(r, "placement_judgement"), "line"));
  if (!caveats.empty()) out += fmt::format("    <system-out>{}</system-out>\n", caveats);
  out += junit_gate_cases(r, suite);
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

}  // namespace splitcheck
