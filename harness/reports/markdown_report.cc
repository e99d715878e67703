// summary.md: a short report for a PR comment.
#include <fmt/format.h>

#include <algorithm>

#include "harness/judge/outcome.h"
#include "harness/reports/report.h"
#include "harness/reports/writers.h"

namespace splitcheck {
namespace {

constexpr size_t kShownDivergences = 5;

// `compare A B`: the inputs, their provenance side by side, the digests' standing and the
// placement's judgement.
std::string markdown_compare_inputs(const nlohmann::json& r) {
  std::string out;
  const nlohmann::json& counts = r["counts"];
  const nlohmann::json& in = obj_field(r, "inputs");
  out += fmt::format("{} against {}: {} datasets, exit code {}. {}\n\n",
                     markdown_code(str_field(in, "b")), markdown_code(str_field(in, "a")),
                     counts.value("total", 0), r.value("exit_code", 0),
                     markdown_text(str_field(r, "summary")));
  const bool trusted = str_field(r, "digests") == "trusted";
  out += fmt::format("{}Digests {}: {}.\n\n", trusted ? "⚠️ " : "",
                     trusted ? "**UNVERIFIED**" : "verified",
                     markdown_text(str_field(r, "digests_rule")));
  if (r.contains("inputs_provenance")) {
    out += "| input | golden (a) | candidate (b) | comparator (this build) |\n|---|---|---|---|\n";
    for (const nlohmann::json& row : r["inputs_provenance"]) {
      const bool differs = row.value("differs", false);
      const std::string mark = differs ? "**" : "";
      out += fmt::format(
          "| {}{}{} | {}{}{} | {}{}{} | {} |\n", mark, markdown_text(str_field(row, "field")),
          differs ? " (differs)**" : "", mark, markdown_code(str_field(row, "a")), mark, mark,
          markdown_code(str_field(row, "b")), mark, markdown_code(str_field(row, "comparator")));
    }
    out += "\n";
  }
  if (const nlohmann::json& p = obj_field(r, "placement_judgement"); p.contains("line"))
    out += fmt::format("{}Placement: {}.\n\n",
                       str_field(p, "judgement") == "not-judged" ? "⚠️ **NOT JUDGED** " : "",
                       markdown_text(str_field(p, "line")));
  return out;
}

// The counts, one column a verdict (waived, never in pass).
std::string markdown_counts(const nlohmann::json& r) {
  std::string out;
  const nlohmann::json& counts = r["counts"];
  // One column a verdict, in the outcome table's order (harness/judge/outcome.h): waived
  // (known divergences under a waiver) is a column of its own, never in pass.
  std::string header = "|", rule = "|", row = "|";
  for (const CaseOutcome& o : case_outcomes()) {
    header += fmt::format(" {} |", o.name);
    rule += "---:|";
    row += fmt::format(" {} |", counts.value(std::string(o.count_key), 0));
  }
  out += header + " total |\n" + rule + "---:|\n" + row +
         fmt::format(" {} |\n\n", counts.value("total", 0));
  return out;
}

// What the report does not pass on evidence: per split point, then for the whole sweep.
std::string markdown_caveats(const nlohmann::json& r) {
  std::string out;
  // Per case: what it could not judge, and a waived evidence of the partition (passes too).
  std::string case_caveats;
  const std::vector<std::string> sweep_wide = not_judged_lines(r);
  for (const nlohmann::json& c : r.value("cases", nlohmann::json::array())) {
    for (const nlohmann::json& n : c.value("not_judged", nlohmann::json::array()))
      if (std::none_of(sweep_wide.begin(), sweep_wide.end(), [&](const std::string& w) {
            return w.rfind(str_field(n, "check") + ":", 0) == 0;
          }))
        case_caveats += fmt::format(
            "- {}: {}: not judged ({})\n", markdown_code(str_field(c, "key")),
            markdown_text(str_field(n, "check")), markdown_text(str_field(n, "reason")));
    if (str_field(c, "evidence") == "waived")
      case_caveats +=
          fmt::format("- {}: partition evidence WAIVED\n", markdown_code(str_field(c, "key")));
    for (const std::string& line : rounding_lines(c))
      case_caveats +=
          fmt::format("- {}: {}\n", markdown_code(str_field(c, "key")), markdown_text(line));
  }
  if (!case_caveats.empty())
    out += "**Per split point** (not passed on evidence):\n\n" + case_caveats + "\n";
  for (const std::string& line : rounding_lines(r))
    out += fmt::format("**{}**\n\n", markdown_text(line));
  if (const std::vector<std::string> nj = not_judged_lines(r); !nj.empty()) {
    out += "**Not judged** (no evidence in the dumps; not passed):\n\n";
    for (const std::string& line : nj) out += fmt::format("- {}\n", markdown_text(line));
    out += "\n";
  }
  return out;
}

// The first divergences (at most kShownDivergences) and the waived cases.
std::string markdown_divergences(const nlohmann::json& r, const std::string& kind) {
  std::string out;
  std::vector<const nlohmann::json*> bad, waived;
  for (const nlohmann::json& c : r["cases"]) {
    const std::string v = str_field(c, "verdict");
    if (v == "waived")
      waived.push_back(&c);
    else if (v != "pass")
      bad.push_back(&c);
  }
  if (!bad.empty()) {
    out += fmt::format("### First divergences ({} of {})\n\n",
                       std::min(bad.size(), kShownDivergences), bad.size());
    if (kind == "compare") {
      out +=
          "| dataset | mismatching elements | fraction | max ULP | cosine | first difference "
          "|\n|---|---:|---:|---:|---:|---|\n";
    } else {
      out += "| split | layout | verdict | first layer | cause |\n|---|---|---|---:|---|\n";
    }
    for (size_t i = 0; i < bad.size() && i < kShownDivergences; ++i) {
      const nlohmann::json& c = *bad[i];
      const int layer = first_divergent_layer(c);
      if (kind == "compare") {
        const nlohmann::json& d = obj_field(c, "first_divergence");
        out +=
            d.contains("elements")
                ? fmt::format("| {} | {} of {} | {:.4g}% | {:g} | {:.6g} | {} |\n",
                              markdown_code(str_field(c, "key")), d.value("mismatches", int64_t{0}),
                              d.value("elements", int64_t{0}),
                              100.0 * d.value("mismatch_fraction", 0.0), d.value("max_ulp", 0.0),
                              d.value("cosine", 1.0), markdown_text(str_field(c, "message")))
                : fmt::format("| {} | - | - | - | - | {} |\n", markdown_code(str_field(c, "key")),
                              markdown_text(str_field(c, "message")));
        continue;
      }
      out +=
          fmt::format("| {} | {} | {} | {} | {} |\n", markdown_code(str_field(c, "key")),
                      markdown_code(str_field(c, "layout")), markdown_text(str_field(c, "verdict")),
                      layer >= 0 ? std::to_string(layer) : "-",
                      (c.contains("cause") ? "**" + markdown_text(str_field(c, "cause")) + "**: "
                                           : std::string()) +
                          markdown_text(str_field(c, "message")) +
                          (c.contains("stderr_tail")
                               ? "<br>stderr: " + markdown_text(str_field(c, "stderr_tail"))
                               : ""));
    }
    out += "\n";
  }
  if (!waived.empty()) {
    out += fmt::format("### Waived (known divergences, not passes: {})\n\n", waived.size());
    out += "| split | layout | waiver | divergence |\n|---|---|---|---|\n";
    for (const nlohmann::json* c : waived)
      out += fmt::format("| {} | {} | {} | {} |\n", markdown_code(str_field(*c, "key")),
                         markdown_code(str_field(*c, "layout")), markdown_text(waiver_line(*c)),
                         markdown_text(str_field(*c, "message")));
    out += "\n";
  }
  return out;
}

// The cause bisect found, with its minimised scenario.
std::string markdown_cause(const nlohmann::json& r) {
  std::string out;
  const nlohmann::json& b = obj_field(r, "bisect");
  if (b.contains("cause")) {
    const nlohmann::json& at = obj_field(b, "first_divergence");
    out += fmt::format(
        "**Cause:** {} at {}: forward {}, layer {}, site {}, token {}, channel {}.\n\n",
        markdown_text(str_field(b, "cause")), markdown_code(str_field(b, "first_failing_split")),
        at.value("forward", -1), at.value("layer", -1), markdown_text(str_field(at, "site")),
        at.value("token", -1), at.value("channel", -1));
    const nlohmann::json& repro = obj_field(b, "repro");
    out += fmt::format("Minimised scenario {}; replay:\n\n{}\n",
                       markdown_code(str_field(repro, "path")),
                       markdown_fence(str_field(repro, "replay"), "sh"));
  }
  return out;
}

}  // namespace

std::string render_markdown(const nlohmann::json& r) {
  const nlohmann::json& counts = r["counts"];
  const std::string verdict = str_field(r, "verdict");
  const bool ok = verdict == "conformant";
  // Every split point identical is not a pass when the gate failed on something else
  // (an unmet expect): the headline says so.
  const bool gate_ok = r.value("exit_code", ok ? 0 : 1) == 0;
  const bool refused = verdict == "refused";
  const bool no_data = verdict == "no-data";
  const bool rounded = !rounding_lines(r).empty();
  std::string out = fmt::format(
      "## splitcheck {}: **{}** {}\n\n", markdown_text(str_field(r, "kind", "sweep")),
      refused                       ? "REFUSED: PP=1 DOES NOT REPRODUCE ITSELF"
      : verdict == "error"          ? "ERROR: PP=1 GAVE NO REFERENCE, NOTHING JUDGED"
      : no_data && gate_ok          ? "NO DATA COMPARED (AS THE SCENARIO'S EXPECT ASKS)"
      : no_data                     ? "NO DATA COMPARED"
      : !ok                         ? "DIVERGENT"
      : gate_ok && rounded          ? "CONFORMANT AFTER ROUNDING (NOT THE ENGINE'S OWN BITS)"
      : gate_ok                     ? "CONFORMANT"
      : !waiver_failures(r).empty() ? "FAILED: A WAIVER HAS EXPIRED"
                                    : "CONFORMANT, BUT THE SCENARIO'S EXPECT IS NOT MET",
      (ok || no_data) && gate_ok ? (rounded ? "⚠️" : "✅") : "❌");
  const std::string kind = str_field(r, "kind", "sweep");
  if (kind == "compare") {
    out += markdown_compare_inputs(r);
  } else {
    const nlohmann::json& scenario = obj_field(r, "scenario");
    out += fmt::format("Scenario {} (sha256 {}), {} split points, exit code {}.\n\n",
                       markdown_code(str_field(scenario, "name")),
                       markdown_code(str_field(scenario, "sha256").substr(0, 12)),
                       counts.value("total", 0), r.value("exit_code", 0));
  }
  if (const auto rows = engine_rows(r); !rows.empty()) {
    out += "| engine | |\n|---|---|\n";
    for (const auto& [k, v] : rows)
      out += fmt::format("| {} | {} |\n", markdown_text(k), markdown_code(v));
    out += "\n";
  }
  if (refused) {
    const nlohmann::json& sc = obj_field(r, "self_check");
    out += fmt::format(
        "PP=1 run twice gave different bits ({} of {} datasets differ), so no split point was "
        "judged (exit code 4). First difference: {}.\n\n",
        sc.value("datasets_differing", 0), sc.value("datasets_compared", 0),
        markdown_code(str_field(sc, "first_difference")));
  }
  out += markdown_counts(r);
  if (r.contains("placement"))
    out += fmt::format("Stages ran on {}.\n\n", markdown_text(placement_line(r["placement"])));
  for (size_t i = 0; i < r.value("placement_by_shard", nlohmann::json::array()).size(); ++i)
    out += fmt::format("Shard {}'s stages ran on {}.\n\n", i,
                       markdown_text(placement_line(r["placement_by_shard"][i])));
  if (r.contains("checks") && r["checks"].is_array()) {
    std::string names;
    for (const auto& c : r["checks"])
      if (c.is_string()) names += (names.empty() ? "" : ", ") + c.get<std::string>();
    out += fmt::format("Checks evaluated: {}.\n\n", markdown_text(names));
  }
  out += markdown_caveats(r);
  if (r.contains("computed")) {
    out += fmt::format("Computed: {}.\n\n", markdown_text(computed_summary(r)));
    out +=
        "<details><summary>What each split point computed</summary>\n\n"
        "| split | verdict | computed (this split point of PP=1's) |\n|---|---|---|\n";
    for (const nlohmann::json& c : r["cases"])
      out += fmt::format(
          "| {} | {} | {} |\n", markdown_code(str_field(c, "key")),
          markdown_text(str_field(c, "verdict")),
          markdown_text(computed_text(obj_field(c, "computed"), obj_field(r["computed"], "pp1"))));
    out += "\n</details>\n\n";
  }
  if (const std::string a = acceptance_line(r); !a.empty())
    out += fmt::format("Speculative decoding: {}.\n\n", markdown_text(a));
  out += markdown_divergences(r, kind);
  if (const std::vector<std::string> expired = waiver_failures(r); !expired.empty()) {
    out += "**Expired waivers (the gate fails):**\n\n";
    for (const std::string& f : expired) out += fmt::format("- {}\n", markdown_text(f));
    out += "\n";
  }
  if (const std::string why = str_field(obj_field(r, "expect"), "not_evaluated"); !why.empty())
    out += "**Scenario expectations:** " + markdown_text(why) + "\n\n";
  if (r.contains("expect") && r["expect"].contains("failures") &&
      !r["expect"]["failures"].empty()) {
    out += "**Scenario expectations not met:**\n\n";
    for (const auto& f : r["expect"]["failures"])
      out += fmt::format("- {}\n", markdown_text(f.get<std::string>()));
    out += "\n";
  }
  out += markdown_cause(r);
  out += "Reproduce:\n\n" + markdown_fence(str_field(r, "command"), "sh");
  return out;
}

}  // namespace splitcheck
