#include "harness/reports/console.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "harness/engine/generation.h"
#include "harness/judge/outcome.h"
#include "harness/reports/escape.h"
#include "harness/reports/report.h"
#include "harness/reports/writers.h"

namespace splitcheck {
namespace {

// A multi-line text an engine wrote (its stderr tail), indented under what it belongs to.
void add_tail(const std::string& tail, std::string& out) {
  size_t start = 0;
  while (start < tail.size()) {
    size_t end = tail.find('\n', start);
    if (end == std::string::npos) end = tail.size();
    out += fmt::format("      | {}\n", console_line(tail.substr(start, end - start)));
    start = end + 1;
  }
}

bool external(const nlohmann::json& r) { return r.contains("engine"); }

// An external engine's opening rows and its PP=1 stderr; nothing for the built-in engine.
std::string console_opening(const nlohmann::json& r) {
  std::string out;
  for (const auto& [k, v] : engine_rows(r))
    out += fmt::format("{:<16} {}\n", k + ":", console_line(v));
  const std::string tail = str_field(obj_field(r, "engine"), "pp1_stderr_tail");
  if (!tail.empty()) {
    out += "PP=1 stderr (tail):\n";
    add_tail(tail, out);
  }
  return out;
}

std::string console_self_check(const nlohmann::json& r) {
  if (!r.contains("self_check")) return "";
  const nlohmann::json& sc = r["self_check"];
  if (sc.value("reproduced", false))
    return fmt::format("self-check: PP=1 run twice, bit-identical ({} datasets, {:.2f} s)\n",
                       sc.value("datasets_compared", int64_t{0}), sc.value("seconds", 0.0));
  return fmt::format(
      "self-check: PP=1 run twice DIFFERS ({} of {} datasets): {}; no split point judged "
      "(exit 4)\n",
      sc.value("datasets_differing", int64_t{0}), sc.value("datasets_compared", int64_t{0}),
      console_line(str_field(sc, "first_difference")));
}

// One line per split point, then what it computed, its waivers, what it alone could not
// judge and the engine's stderr when it failed.
std::string console_cases(const nlohmann::json& r) {
  const nlohmann::json& scenario = obj_field(r, "scenario");
  std::vector<std::string> faults;
  for (const nlohmann::json& f : r.value("faults", nlohmann::json::array()))
    faults.push_back(str_field(f, "id"));
  const nlohmann::json cases = r.value("cases", nlohmann::json::array());
  std::string out = fmt::format(
      "sweep {} ({} split points, {})\n", console_line(str_field(scenario, "name")), cases.size(),
      external(r)
          ? std::string("external engine")
          : fmt::format("faults: {}",
                        faults.empty() ? "none" : fmt::format("{}", fmt::join(faults, ", "))));
  const nlohmann::json pp1_computed = obj_field(obj_field(r, "computed"), "pp1");
  std::vector<std::string> sweep_wide;
  for (const nlohmann::json& n : r.value("not_judged", nlohmann::json::array()))
    sweep_wide.push_back(str_field(n, "check"));
  for (const nlohmann::json& c : cases) {
    const std::string cause = str_field(c, "cause");
    out += fmt::format("  {:<16} {:<16} {}{}\n", console_line(str_field(c, "key")),
                       console_line(str_field(c, "verdict")), console_line(str_field(c, "message")),
                       cause.empty() ? "" : " (cause: " + console_line(cause) + ")");
    if (c.contains("computed"))
      out += fmt::format("  {:<16} {:<16} computed: {}\n", "", "",
                         computed_text(c["computed"], pp1_computed));
    for (const nlohmann::json& w : c.value("waivers", nlohmann::json::array()))
      out +=
          fmt::format("  {:<16} {:<16} {} ({}, expires {}; {})\n", "", "",
                      console_line(str_field(w, "reason")), console_line(str_field(w, "link")),
                      console_line(str_field(w, "expires")), console_line(str_field(w, "where")));
    for (const nlohmann::json& n : c.value("not_judged", nlohmann::json::array()))
      if (std::find(sweep_wide.begin(), sweep_wide.end(), str_field(n, "check")) ==
          sweep_wide.end())
        out += fmt::format("      {}: not judged ({})\n", console_line(str_field(n, "check")),
                           console_line(str_field(n, "reason")));
    if (const std::string tail = str_field(c, "stderr_tail"); !tail.empty()) add_tail(tail, out);
  }
  return out;
}

// The checks judged, those not judged and the datasets compared after rounding; where the
// stages ran; the counts.
std::string console_checks(const nlohmann::json& r) {
  std::vector<std::string> checks;
  for (const nlohmann::json& c : r.value("checks", nlohmann::json::array()))
    if (c.is_string()) checks.push_back(c.get<std::string>());
  std::string out = fmt::format("checks: {}\n", fmt::join(checks, ", "));
  for (const std::string& line : not_judged_lines(r))
    out += fmt::format("  {}\n", console_line(line));
  for (const std::string& line : rounding_lines(r)) out += console_line(line) + "\n";
  if (r.contains("placement")) out += fmt::format("stages: {}\n", placement_line(r["placement"]));
  std::string counts;
  const nlohmann::json& n = obj_field(r, "counts");
  for (const CaseOutcome& o : case_outcomes())
    counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ",
                          n.value(std::string(o.count_key), int64_t{0}), o.name);
  const int64_t rounded = obj_field(r, "rounded").value("cases", int64_t{0});
  out += fmt::format("summary: {}{}\n", counts,
                     rounded > 0 ? fmt::format(" ({} compared after rounding, not on the "
                                               "engine's own bits)",
                                               rounded)
                                 : "");
  for (const std::string& f : waiver_failures(r))
    out += "waiver: EXPIRED: " + console_line(f) + "\n";
  return out;
}

std::string console_timing(const nlohmann::json& r) {
  const nlohmann::json& t = obj_field(r, "timing");
  const double pp1 = t.value("pp1_seconds", 0.0), total = t.value("total_seconds", 0.0);
  if (external(r))
    return fmt::format("time: PP=1 {:.2f} s, sweep {:.2f} s {}; engine runs {:.2f} s in all\n", pp1,
                       total, parallelism_text(r),
                       obj_field(r, "engine").value("engine_seconds", 0.0));
  return fmt::format("time: PP=1 {:.2f} s, sweep {:.2f} s {} ({:.1f} PP=1 runs)\ncomputed: {}\n",
                     pp1, total, parallelism_text(r), total / std::max(1e-9, pp1),
                     computed_summary(r));
}

// The accepted-length histogram as every form writes it (histogram_text).
std::string histogram_line(const nlohmann::json& histogram) {
  std::vector<int64_t> counts;
  for (const nlohmann::json& n : histogram)
    counts.push_back(n.is_number_integer() ? n.get<int64_t>() : 0);
  return histogram_text(counts);
}
// SPEC 5.5: PP=1's speculative figures, and how many split points share them.
std::string console_acceptance(const nlohmann::json& r) {
  const nlohmann::json rows = r.value("acceptance", nlohmann::json::array());
  if (rows.empty() || !rows[0].is_object()) return "";
  const nlohmann::json& a = rows[0];
  int64_t equal = 0;
  for (size_t i = 1; i < rows.size(); ++i) equal += rows[i].value("equal_to_pp1", false);
  if (external(r))
    return fmt::format(
        "speculative: PP=1 acceptance rate {:.4f}, accepted lengths [{}]; {} of {} split points "
        "with the same acceptance\n",
        a.value("acceptance_rate", 0.0),
        histogram_line(a.value("accepted_histogram", nlohmann::json::array())), equal,
        rows.size() - 1);
  const nlohmann::json spec =
      obj_field(obj_field(obj_field(r, "scenario"), "resolved"), "speculative");
  return fmt::format(
      "speculative ({}, gamma {}, departure rate {}): PP=1 {} steps, mean accepted length {:.3f}, "
      "acceptance rate {:.3f}, tokens per forward {:.3f}, accepted lengths [{}], GSM8K strict "
      "{}/{}, flexible {}/{}; {} of {} split points with the same acceptance\n",
      console_line(str_field(spec, "method")), spec.value("gamma", 0),
      spec.contains("departure_rate") ? spec["departure_rate"].dump() : "0",
      a.value("steps", int64_t{0}), a.value("mean_accepted_length", 0.0),
      a.value("acceptance_rate", 0.0), a.value("tokens_per_forward", 0.0),
      histogram_line(a.value("accepted_histogram", nlohmann::json::array())),
      a.value("gsm8k_strict", 0), a.value("prompts", 0), a.value("gsm8k_flexible", 0),
      a.value("prompts", 0), equal, rows.size() - 1);
}

// SPEC 3.4: every request against itself served alone, and the requests each split point
// diverged on.
std::string console_serving(const nlohmann::json& r) {
  const nlohmann::json& b = obj_field(obj_field(r, "serving"), "batch_invariance");
  if (!b.value("checked", false)) return "";
  std::string out = fmt::format(
      "serving: {} of {} requests equal themselves served alone at PP=1{}\n",
      b.value("identical", 0), b.value("requests", 0),
      b.value("required", true)
          ? ""
          : fmt::format(" (measured: backend {} is not batch-invariant)",
                        str_field(obj_field(obj_field(r, "scenario"), "resolved"), "backend")));
  for (const nlohmann::json& c : r.value("cases", nlohmann::json::array())) {
    const nlohmann::json diverged = c.value("diverged_requests", nlohmann::json::array());
    if (diverged.empty()) continue;
    std::vector<std::string> ids;
    for (const nlohmann::json& q : diverged) ids.push_back(q.dump());
    out += fmt::format("  {}: requests diverged: {}\n", console_line(str_field(c, "key")),
                       fmt::join(ids, ", "));
  }
  return out;
}

// The expectations not met, and what the gate's result rests on beyond the split points.
std::string console_result(const nlohmann::json& r) {
  std::string out;
  if (const std::string why = str_field(obj_field(r, "expect"), "not_evaluated"); !why.empty())
    out += "expect: " + console_line(why) + "\n";
  for (const nlohmann::json& f : obj_field(r, "expect").value("failures", nlohmann::json::array()))
    out +=
        "expect: NOT MET: " + console_line(f.is_string() ? f.get<std::string>() : f.dump()) + "\n";
  const std::string verdict = str_field(r, "verdict");
  const int exit_code = r.value("exit_code", 1);
  if (verdict == "error")
    out += "result: error: PP=1 gave no reference, no split point judged: " +
           console_line(str_field(r, "reference_failure")) + "\n";
  else if (verdict == "no-data")
    out += fmt::format(
        "result: no data compared: the selected checks ({}) compared no dataset and judged no "
        "stage{}\n",
        fmt::join(r.value("checks", std::vector<std::string>{}), ", "),
        exit_code == 0 ? " (the scenario's expect asks for the verdict no-data)" : "");
  else if (verdict == "conformant" && exit_code != 0 && !obj_field(r, "expect").value("met", true))
    out += "result: every split point passed, but the scenario's expect is not met\n";
  return out;
}

}  // namespace

std::string render_console(const nlohmann::json& r) {
  std::string out = console_opening(r) + console_self_check(r);
  if (str_field(r, "verdict") == "refused") return out;
  return out + console_cases(r) + console_checks(r) + console_timing(r) + console_acceptance(r) +
         console_serving(r) + console_result(r);
}

}  // namespace splitcheck
