#include "harness/reports/merge.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "harness/judge/expect.h"
#include "harness/judge/judge.h"
#include "harness/judge/result.h"
#include "harness/reports/report.h"
#include "harness/reports/writers.h"
#include "harness/scenario/checks.h"
#include "harness/scenario/partition.h"
#include "harness/scenario/scenario.h"

namespace splitcheck {
namespace {

constexpr int kFormatVersion = 1;

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// The value of `--name X` or `--name=X` in a command line, or "" when absent.
std::string option_value(const std::string& command, const std::string& name) {
  const std::vector<std::string> w = split_words(command);
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] == name && i + 1 < w.size()) return w[i + 1];
    if (w[i].rfind(name + "=", 0) == 0) return w[i].substr(name.size() + 1);
  }
  return "";
}

// The shard's command without `--shard`, writing to `report_dir`.
std::string unsharded_command(const std::string& command, const std::string& report_dir) {
  const std::vector<std::string> w = split_words(command);
  std::vector<std::string> out;
  bool has_report = false;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] == "--shard") {
      ++i;
    } else if (w[i].rfind("--shard=", 0) == 0) {
    } else if (w[i] == "--report" || w[i].rfind("--report=", 0) == 0) {
      out.push_back("--report");
      out.push_back(report_dir);
      has_report = true;
      if (w[i] == "--report") ++i;
    } else {
      out.push_back(w[i]);
    }
  }
  if (!has_report && !report_dir.empty()) {
    out.push_back("--report");
    out.push_back(report_dir);
  }
  return fmt::format("{}", fmt::join(out, " "));
}

Result<Verdict> parse_verdict(const std::string& name) {
  if (const CaseOutcome* o = find_outcome(name)) return o->verdict;
  return invalid_input("unknown verdict \"" + name + "\"");
}

}  // namespace

Result<nlohmann::json> load_report(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_input(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    return invalid_input(
        fmt::format("{}: not valid JSON (truncated?) at byte {}: {}", path, e.byte, e.what()));
  }
  if (!j.is_object() || j.value("format", "") != "splitcheck.report")
    return invalid_input(path + ": not a splitcheck report (format is not \"splitcheck.report\")");
  if (!j.contains("format_version") || !j["format_version"].is_number_integer() ||
      j["format_version"].get<int>() != kFormatVersion)
    return invalid_input(fmt::format("{}: unsupported format_version {} (expected {})", path,
                                     j.value("format_version", nlohmann::json()).dump(),
                                     kFormatVersion));
  if (j.value("kind", "") != "sweep")
    return invalid_input(path + ": only sweep reports can be merged (kind is " +
                         j.value("kind", nlohmann::json()).dump() + ")");
  if (!j.contains("scenario") || !j["scenario"].is_object() || !j["scenario"].contains("sha256") ||
      !j["scenario"]["sha256"].is_string() || !j["scenario"].contains("resolved") ||
      !j.contains("cases") || !j["cases"].is_array())
    return invalid_input(path + ": missing scenario.sha256, scenario.resolved or cases");
  return j;
}

namespace {

// Like with like: the same scenario, PP=1, engine, splitcheck and --filter in every shard.
Status check_same_sweep(const std::vector<nlohmann::json>& reports,
                        const std::vector<std::string>& paths, const std::string& filter) {
  const nlohmann::json& first = reports[0];
  const std::string sha = first["scenario"]["sha256"];
  for (size_t i = 1; i < reports.size(); ++i) {
    const std::string other = reports[i]["scenario"]["sha256"];
    if (other != sha)
      return invalid_input(fmt::format(
          "{} and {}: different scenarios (scenario.sha256 {} vs {}): shards of different sweeps",
          paths[0], paths[i], sha, other));
    // Like with like: the same PP=1, engine, scenario and splitcheck in every shard.
    const nlohmann::json none = nlohmann::json::object();
    const nlohmann::json& id0 = first.contains("identity") ? first["identity"] : none;
    const nlohmann::json& idi = reports[i].contains("identity") ? reports[i]["identity"] : none;
    for (const char* field :
         {"pp1_content_sha256", "engine_command", "scenario_sha256", "splitcheck_version"}) {
      const nlohmann::json a = id0.is_object() ? id0.value(field, nlohmann::json()) : nullptr;
      const nlohmann::json b = idi.is_object() ? idi.value(field, nlohmann::json()) : nullptr;
      if (a != b)
        return invalid_input(fmt::format(
            "{} and {}: different identity.{} ({} vs {}): shards of different runs cannot be "
            "merged",
            paths[0], paths[i], field,
            a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
            b.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
    }
    const std::string f = option_value(reports[i].value("command", ""), "--filter");
    if (f != filter)
      return invalid_input(fmt::format("{} and {}: different --filter (\"{}\" vs \"{}\")", paths[0],
                                       paths[i], filter, f));
  }
  return Status::ok();
}

// The shards' cases joined in the scenario's order, and the report each key came from.
struct JoinedCases {
  std::vector<nlohmann::json> cases;
  std::map<std::string, size_t> key_from;
};

// Joins the shards' cases: each a split point of the scenario at its own index, none twice,
// every split point that --filter selects present.
Result<JoinedCases> join_cases(const std::vector<nlohmann::json>& reports,
                               const std::vector<std::string>& paths,
                               const std::vector<Partition>& all, const std::string& filter) {
  std::map<std::string, int64_t> position;
  for (size_t i = 0; i < all.size(); ++i) position.emplace(all[i].key(), static_cast<int64_t>(i));
  JoinedCases joined;
  std::map<std::string, size_t>& key_from = joined.key_from;  // key -> report it came from
  std::map<int64_t, size_t> index_from;
  for (size_t r = 0; r < reports.size(); ++r) {
    for (const nlohmann::json& c : reports[r]["cases"]) {
      if (!c.is_object() || !c.contains("key") || !c["key"].is_string() || !c.contains("index") ||
          !c["index"].is_number_integer())
        return invalid_input(paths[r] + ": a case without a string key or an integer index");
      const std::string key = c["key"];
      const int64_t index = c["index"];
      const auto at = position.find(key);
      if (at == position.end())
        return invalid_input(
            fmt::format("{}: case {} is not a split point of the scenario", paths[r], key));
      if (at->second != index)
        return invalid_input(
            fmt::format("{}: case {} has index {}, the scenario enumerates it at {}", paths[r], key,
                        index, at->second));
      if (auto k = key_from.find(key); k != key_from.end())
        return invalid_input(fmt::format("{} and {}: case {} appears twice (overlapping shards)",
                                         paths[k->second], paths[r], key));
      if (auto k = index_from.find(index); k != index_from.end())
        return invalid_input(fmt::format("{} and {}: case index {} appears twice", paths[k->second],
                                         paths[r], index));
      key_from.emplace(key, r);
      index_from.emplace(index, r);
      joined.cases.push_back(c);
    }
  }
  std::vector<std::string> missing;
  for (const Partition& p : all) {
    const std::string key = p.key();
    if (!filter.empty() && key.find(filter) == std::string::npos) continue;
    if (!key_from.count(key)) missing.push_back(key);
  }
  if (!missing.empty()) {
    const size_t shown = std::min<size_t>(missing.size(), 8);
    return invalid_input(fmt::format(
        "merge: {} split point(s) of the scenario are in none of the {} reports ({}{}): a shard "
        "report is missing",
        missing.size(), reports.size(),
        fmt::join(missing.begin(), missing.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
        missing.size() > shown ? ", ..." : ""));
  }
  std::sort(joined.cases.begin(), joined.cases.end(),
            [](const nlohmann::json& a, const nlohmann::json& b) {
              return a["index"].get<int64_t>() < b["index"].get<int64_t>();
            });
  return joined;
}

// What the judge's aggregation (verdict, counts, judged checks, expect, exit status) reads of
// the shards, from their report models: each case's verdict and findings in the unsharded
// order, and what ends a sweep before or beside its cases (a signal, a PP=1 that gave no
// reference or did not reproduce itself), so that the merged verdict is the one the
// unsharded sweep gives.
Result<SweepResult> rebuilt_result(const std::vector<nlohmann::json>& reports,
                                   const JoinedCases& joined,
                                   const std::vector<std::string>& paths) {
  const nlohmann::json& first = reports[0];
  SweepResult result;
  for (const nlohmann::json& r : reports) {
    const std::string verdict = r.value("verdict", "");
    const int code = r.value("exit_code", 0);
    if (verdict == "interrupted")
      result.interrupted_by = std::max(result.interrupted_by, code > 128 ? code - 128 : 1);
    if (r.contains("self_check") && r["self_check"].is_object() &&
        !r["self_check"].value("reproduced", true)) {
      result.self_check.ran = true;
      result.self_check.reproduced = false;
    }
    if (result.reference_failure.empty())
      result.reference_failure = r.value("reference_failure", "");
  }
  result.scenario_name = first["scenario"].value("name", "");
  result.scenario_sha256 = first["scenario"]["sha256"].get<std::string>();
  result.model_sha256 = first["scenario"].value("model_sha256", "");
  result.scenario = first["scenario"]["resolved"];
  result.checks = first.value("checks", std::vector<std::string>{});
  for (const nlohmann::json& c : joined.cases) {
    CaseResult cr;
    cr.key = c["key"];
    ASSIGN_OR_RETURN(cr.verdict, parse_verdict(c.value("verdict", "")),
                     paths[joined.key_from.at(cr.key)] + ": case " + cr.key);
    cr.message = c.value("message", "");
    cr.failed_checks = c.value("failed_checks", std::vector<std::string>{});
    cr.datasets_compared = c.value("datasets_compared", int64_t{0});
    for (const nlohmann::json& n : c.value("not_judged", nlohmann::json::array()))
      if (n.is_object()) cr.not_judged.push_back({n.value("check", ""), n.value("reason", "")});
    if (const auto it = c.find("stages"); it != c.end() && it->is_array())
      cr.stages.resize(it->size());  // compared_data() reads only whether stages were measured
    result.cases.push_back(std::move(cr));
  }
  return result;
}

bool has_acceptance(const nlohmann::json& report) {
  return report.contains("acceptance") && report["acceptance"].is_array() &&
         !report["acceptance"].empty();
}

// What `expect` reads of PP=1's acceptance (equal in every shard): the first row of the table.
void read_pp1_acceptance(const nlohmann::json& first, SweepResult& result) {
  if (!has_acceptance(first) || !first["acceptance"][0].is_object()) return;
  const nlohmann::json& row = first["acceptance"][0];
  AcceptanceFigures& a = result.pp1_acceptance;
  a.speculative = true;
  a.steps = row.value("steps", int64_t{0});
  a.accepted = row.value("accepted", int64_t{0});
  a.acceptance_rate = row.value("acceptance_rate", 0.0);
  a.tokens_per_forward = row.value("tokens_per_forward", 0.0);
  a.mean_accepted = row.value("mean_accepted_length", 0.0);
  a.accepted_histogram = row.value("accepted_histogram", std::vector<int64_t>{});
  a.strict_correct = row.value("gsm8k_strict", 0);
  a.flexible_correct = row.value("gsm8k_flexible", 0);
  a.prompts = row.value("prompts", 0);
}

// Appends the strings of `from` that `to` does not hold yet.
void append_new(std::vector<std::string>& to, const std::vector<std::string>& from) {
  for (const std::string& s : from)
    if (std::find(to.begin(), to.end(), s) == to.end()) to.push_back(s);
}

// The merged serving section (SPEC 3.4): the request x split-point matrix, one row per split
// point in the unsharded order; every shard checked batch invariance on its own PP=1 run, so
// the merged check is the worst shard's, with every shard's differences (also read into
// `result` for `expect`).
Result<nlohmann::json> merged_serving(const std::vector<nlohmann::json>& reports,
                                      const std::vector<std::string>& paths,
                                      const JoinedCases& joined, SweepResult& result) {
  const nlohmann::json& first = reports[0];
  std::map<std::string, nlohmann::json> rows;
  nlohmann::json invariance = first["serving"].value("batch_invariance", nlohmann::json::object());
  std::vector<std::string> differences, not_invariant;
  bool required = true;
  for (size_t r = 0; r < reports.size(); ++r) {
    const nlohmann::json sv = reports[r].value("serving", nlohmann::json::object());
    if (sv.value("requests", nlohmann::json()) != first["serving"]["requests"])
      return invalid_input(
          fmt::format("{} and {}: different serving requests", paths[0], paths[r]));
    for (const nlohmann::json& row : sv.value("matrix", nlohmann::json::array()))
      if (row.is_object()) rows[row.value("split", "")] = row;
    const nlohmann::json bi = sv.value("batch_invariance", nlohmann::json::object());
    if (bi.value("identical", 0) < invariance.value("identical", 0) || !bi.value("checked", false))
      invariance = {{"checked", bi.value("checked", false)},
                    {"requests", bi.value("requests", 0)},
                    {"identical", bi.value("identical", 0)}};
    append_new(differences, bi.value("differences", std::vector<std::string>{}));
    // A report from before the field was written required it (the cpu backend only).
    required = required && bi.value("required", true);
    append_new(not_invariant, bi.value("not_invariant", std::vector<std::string>{}));
  }
  invariance["differences"] = differences;
  invariance["required"] = required;
  invariance["not_invariant"] = not_invariant;
  result.batch_invariance.checked = invariance.value("checked", false);
  result.batch_invariance.required = required;
  result.batch_invariance.requests = invariance.value("requests", 0);
  result.batch_invariance.identical = invariance.value("identical", 0);
  result.batch_invariance.differences = differences;
  result.batch_invariance.not_invariant = not_invariant;
  nlohmann::json matrix = nlohmann::json::array();
  for (const nlohmann::json& c : joined.cases) {
    const std::string key = c["key"].get<std::string>();
    auto it = rows.find(key);
    if (it == rows.end())
      return invalid_input(fmt::format("{}: case {} has no row in serving.matrix",
                                       paths[joined.key_from.at(key)], key));
    matrix.push_back(it->second);
  }
  return nlohmann::json{{"matrix", matrix}, {"batch_invariance", invariance}};
}

// The acceptance table: PP=1's row (equal in every shard), then one row per split point in
// the unsharded order.
nlohmann::json merged_acceptance(const std::vector<nlohmann::json>& reports,
                                 const std::vector<nlohmann::json>& cases) {
  std::map<std::string, nlohmann::json> rows;
  for (const nlohmann::json& r : reports) {
    for (const nlohmann::json& row : r.value("acceptance", nlohmann::json::array())) {
      if (row.is_object()) rows[row.value("split", "")] = row;
    }
  }
  nlohmann::json acceptance = nlohmann::json::array({reports[0]["acceptance"][0]});
  for (const nlohmann::json& c : cases) {
    auto it = rows.find(c["key"].get<std::string>());
    if (it != rows.end()) acceptance.push_back(it->second);
  }
  return acceptance;
}

// The shards' timing: PP=1 the longest shard's, the total and cost summed over shards.
void merge_timing(const std::vector<nlohmann::json>& reports, nlohmann::json& merged) {
  double pp1 = 0, total = 0;
  int threads = 0;
  for (const nlohmann::json& r : reports) {
    const nlohmann::json t = r.value("timing", nlohmann::json::object());
    pp1 = std::max(pp1, t.value("pp1_seconds", 0.0));
    total += t.value("total_seconds", 0.0);
    threads = std::max(threads, t.value("threads", 0));
  }
  merged["timing"]["pp1_seconds"] = pp1;
  merged["timing"]["total_seconds"] = total;
  merged["timing"]["threads"] = threads;
  merged["timing"]["cost_in_pp1_runs"] = pp1 > 0 ? total / pp1 : 0.0;
  merged["timing"]["shards"] = reports.size();
}

// External engines: the judge's rule over the joined cases (a stage check some case judged
// is judged); what PP=1's dump cannot show is the same in every shard.
void merge_not_judged(const nlohmann::json& first, const SweepResult& result,
                      nlohmann::json& merged) {
  std::vector<NotJudged> sweep_not_judged;
  for (const nlohmann::json& n : first["not_judged"])
    if (n.is_object() && !check_is(n.value("check", ""), CheckKind::kStage))
      sweep_not_judged.push_back({n.value("check", ""), n.value("reason", "")});
  std::vector<std::string> selected;
  for (const auto& c : merged.value("scenario", nlohmann::json::object())
                           .value("resolved", nlohmann::json::object())
                           .value("checks", nlohmann::json::array()))
    if (c.is_string()) selected.push_back(c.get<std::string>());
  merged["checks"] = judged_checks(selected, result.cases, sweep_not_judged);
  nlohmann::json not_judged = nlohmann::json::array();
  for (const NotJudged& n : sweep_not_judged)
    not_judged.push_back({{"check", n.check}, {"reason", n.reason}});
  merged["not_judged"] = not_judged;
}

// What the engine under test computed: the joined cases' calls summed (PP=1's is every
// shard's own run of the same workload, so the first shard's).
void merge_computed(const std::vector<nlohmann::json>& cases, nlohmann::json& merged) {
  nlohmann::json& u = merged["computed"];
  for (const char* count : {"layer_calls", "head_calls", "drafter_calls"}) {
    int64_t sum = 0;
    for (const nlohmann::json& c : cases)
      if (c.contains("computed") && c["computed"].is_object())
        sum += c["computed"].value(count, int64_t{0});
    u["cases"][count] = sum;
  }
}

// The merged report: the first shard's, with every section that shards hold apart joined.
nlohmann::json merged_report(const std::vector<nlohmann::json>& reports,
                             const std::string& report_dir, const JoinedCases& joined,
                             const nlohmann::json& serving, const SweepResult& result) {
  const nlohmann::json& first = reports[0];
  nlohmann::json merged = first;
  if (has_acceptance(first)) merged["acceptance"] = merged_acceptance(reports, joined.cases);
  if (!serving.is_null()) {
    merged["serving"]["matrix"] = serving["matrix"];
    merged["serving"]["batch_invariance"] = serving["batch_invariance"];
  }
  // Each shard ran its stages in its own processes (on its own CI machine, say).
  merged.erase("placement");
  merged["placement_by_shard"] = nlohmann::json::array();
  for (const nlohmann::json& r : reports)
    if (r.contains("placement")) merged["placement_by_shard"].push_back(r["placement"]);
  merged["verdict"] = result.verdict_word();
  if (!result.reference_failure.empty()) merged["reference_failure"] = result.reference_failure;
  merged["command"] = unsharded_command(first.value("command", ""), report_dir);
  merged["counts"] = counts_json(result);
  merge_timing(reports, merged);
  merged["cases"] = joined.cases;
  if (nlohmann::json rounded = rounding_summary(merged["cases"]); !rounded.is_null())
    merged["rounded"] = rounded;
  if (first.contains("not_judged")) merge_not_judged(first, result, merged);
  if (first.contains("computed") && first["computed"].is_object())
    merge_computed(joined.cases, merged);
  merged["expect"]["failures"] = result.expect_failures;
  merged["expect"]["met"] = result.expect_failures.empty();
  merged["expect"].erase("not_evaluated");  // a shard's; the joined shards' follows
  if (!result.expect_not_evaluated.empty())
    merged["expect"]["not_evaluated"] = result.expect_not_evaluated;
  merged["waivers"] = {{"failures", result.waiver_failures}};
  merged["exit_code"] = result.exit_code();
  return merged;
}

}  // namespace

Result<nlohmann::json> merge_reports(const std::vector<nlohmann::json>& reports,
                                     const std::vector<std::string>& paths,
                                     const std::string& report_dir) {
  if (reports.empty()) return invalid_input("merge: no reports given");
  const nlohmann::json& first = reports[0];
  const std::string filter = option_value(first.value("command", ""), "--filter");
  RETURN_IF_ERROR(check_same_sweep(reports, paths, filter));

  // The scenario's full enumeration: where each key belongs and which keys must be present.
  const nlohmann::json& resolved = first["scenario"]["resolved"];
  Result<Scenario> s = parse_scenario(resolved, paths[0] + ": scenario.resolved", ".");
  if (!s.is_ok()) return s.status();
  ASSIGN_OR_RETURN(
      std::vector<Partition> all,
      enumerate_partitions(s->partitions, s->model.num_hidden_layers, FaultSet{s->faults}));
  ASSIGN_OR_RETURN(JoinedCases joined, join_cases(reports, paths, all, filter));

  ASSIGN_OR_RETURN(SweepResult result, rebuilt_result(reports, joined, paths));
  // What `expect` reads besides the cases: PP=1's acceptance and, for serving, the batch
  // invariance check.
  read_pp1_acceptance(first, result);
  nlohmann::json serving;
  if (first.contains("serving") && first["serving"].is_object()) {
    ASSIGN_OR_RETURN(serving, merged_serving(reports, paths, joined, result));
  }
  // The judge's rule, as in run_sweep: a filtered sweep says `expect` was not evaluated.
  judge_expect(s->expect, filter, 0, 1, result);
  // Each shard applied the same waiver file: its expired waivers, once each.
  for (const nlohmann::json& r : reports) append_new(result.waiver_failures, waiver_failures(r));
  return merged_report(reports, report_dir, joined, serving, result);
}

}  // namespace splitcheck
