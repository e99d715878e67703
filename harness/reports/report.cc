#include "harness/reports/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "harness/build_info.h"
#include "harness/dump/printable.h"
#include "harness/engine/generation.h"
#include "harness/judge/cause.h"
#include "harness/reports/model_common.h"
#include "harness/reports/writers.h"
#include "harness/scenario/checks.h"
#include "harness/scenario/faults.h"
#include "harness/scenario/partition.h"
#include "harness/scenario/scenario.h"
#include "reference/partial_files.h"

namespace splitcheck {
namespace {

constexpr const char* kEvidenceRule =
    "a pass needs each dump's /stages equal to the partition asked, and PP=1's dump one stage "
    "over every layer";

Status write_atomically(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".partial";
  const PartialFile removed_on_interrupt(tmp.string());
  {
    std::ofstream out(tmp, std::ios::binary);
    const size_t half = text.size() / 2;
    out.write(text.data(), static_cast<std::streamsize>(half)).flush();
    pause_midway_for_test();
    out.write(text.data() + half, static_cast<std::streamsize>(text.size() - half));
    if (!out) return internal_error(path.string() + ": cannot write");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return internal_error(path.string() + ": cannot rename: " + ec.message());
  return Status::ok();
}

}  // namespace

nlohmann::json diff_json(const TensorDiff& d) {
  return {{"path", d.path},
          {"dtype", d.dtype},
          {"shape", d.shape},
          {"mismatches", d.mismatches},
          {"token", d.first_row},
          {"channel", d.first_col},
          {"expected_bits", format_bits(diff_dtype(d), d.first_a_bits)},
          {"actual_bits", format_bits(diff_dtype(d), d.first_b_bits)},
          {"max_ulp", d.max_ulp},
          {"max_abs", d.max_abs},
          {"cosine", d.cosine},
          {"nan_mismatch", d.nan_mismatch},
          {"non_finite_mismatch", d.non_finite_mismatch}};
}

nlohmann::json provenance_json(const std::string& backend) {
  return {{"producer", "splitcheck"},
          {"version", SPLITCHECK_VERSION},
          {"git_revision", SPLITCHECK_GIT_REVISION},
          {"compiler", SPLITCHECK_COMPILER},
          {"flags", SPLITCHECK_CXX_FLAGS},
          {"backend", backend}};
}

nlohmann::json empty_case(const std::string& key, int64_t index) {
  return {{"key", key},
          {"index", index},
          {"layout", ""},
          {"cuts", nlohmann::json::array()},
          {"verdict", "pass"},
          {"message", ""},
          {"failed_checks", nlohmann::json::array()},
          {"datasets_compared", 0},
          {"datasets_differing", 0},
          {"dispatch_mismatches", 0},
          {"taps", nlohmann::json::array()},
          {"stages", nlohmann::json::array()}};
}

nlohmann::json computed_json(const ComputedCalls& c) {
  return {{"layer_calls", c.layers}, {"head_calls", c.heads}, {"drafter_calls", c.drafter}};
}

std::string computed_text(const nlohmann::json& c, const nlohmann::json& of) {
  auto count = [](const nlohmann::json& j, const char* name) {
    return j.is_object() ? j.value(name, int64_t{0}) : int64_t{0};
  };
  return fmt::format("layer calls {} of {}, head calls {} of {}, drafter calls {} of {}",
                     count(c, "layer_calls"), count(of, "layer_calls"), count(c, "head_calls"),
                     count(of, "head_calls"), count(c, "drafter_calls"),
                     count(of, "drafter_calls"));
}

std::string computed_text(const ComputedCalls& calls, const ComputedCalls& of) {
  return computed_text(computed_json(calls), computed_json(of));
}

std::string computed_summary(const nlohmann::json& r) {
  const nlohmann::json c = r.value("computed", nlohmann::json::object());
  const nlohmann::json all = c.value("cases", nlohmann::json::object());
  const nlohmann::json pp1 = c.value("pp1", nlohmann::json::object());
  return fmt::format(
      "the engine under test ran every call it is judged on, nothing taken from PP=1: {} layer "
      "calls, {} head calls, {} drafter calls over {} split points; PP=1 ran once ({} layer "
      "calls, {} head calls, {} drafter calls)",
      all.value("layer_calls", int64_t{0}), all.value("head_calls", int64_t{0}),
      all.value("drafter_calls", int64_t{0}),
      r.contains("cases") && r["cases"].is_array() ? r["cases"].size() : size_t{0},
      pp1.value("layer_calls", int64_t{0}), pp1.value("head_calls", int64_t{0}),
      pp1.value("drafter_calls", int64_t{0}));
}

namespace {

// The report model's `computed` object of a sweep: PP=1's calls and the cases' summed.
nlohmann::json sweep_computed_json(const SweepResult& r) {
  ComputedCalls all;
  for (const CaseResult& c : r.cases) all += c.computed;
  return {{"pp1", computed_json(r.pp1_computed)},
          {"cases", computed_json(all)},
          {"rule",
           "every split point's stages compute every layer and head call, and its drafter "
           "every call, of the workload they are judged on; PP=1 runs once per sweep and "
           "nothing of its outcomes stands in for a stage's work"}};
}

}  // namespace

std::string computed_summary(const SweepResult& r) {
  nlohmann::json j{{"computed", sweep_computed_json(r)}, {"cases", nlohmann::json::array()}};
  for (size_t i = 0; i < r.cases.size(); ++i) j["cases"].push_back(nullptr);
  return computed_summary(j);
}

nlohmann::json placement_json(const StagesPlacement& p) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StagePlacement& s : p.stages)
    stages.push_back({{"stage", s.stage},
                      {"rank", s.rank},
                      {"pid", s.pid},
                      {"host", s.host},
                      {"device", s.device}});
  return {{"transport", p.transport}, {"stages", stages}};
}

std::string placement_line(const nlohmann::json& p) {
  const nlohmann::json stages = p.value("stages", nlohmann::json::array());
  std::string out = p.value("transport", "?") + ":";
  // Consecutive stages at one place are one group: "stages 0-2 on rank 0 (...)".
  const auto place = [](const nlohmann::json& s) {
    return fmt::format("rank {} (pid {}, host {}, {})", s.value("rank", -1),
                       s.value("pid", int64_t{-1}), s.value("host", "?"), s.value("device", "?"));
  };
  for (size_t i = 0; i < stages.size();) {
    size_t j = i + 1;
    while (j < stages.size() && place(stages[j]) == place(stages[i])) ++j;
    const int first = stages[i].value("stage", -1), last = stages[j - 1].value("stage", -1);
    out += fmt::format(
        "{} {} on {}", i == 0 ? "" : ",",
        j - i == 1 ? fmt::format("stage {}", first) : fmt::format("stages {}-{}", first, last),
        place(stages[i]));
    i = j;
  }
  return out;
}

namespace {

// Who computed the sweep: an external engine's report speaks of the engine, its own
// producer and backend as its PP=1 dump declares them, with the comparator that judged it
// as `judged_by`; the built-in engine's is this build's.
void set_provenance(const SweepResult& r, nlohmann::json& j) {
  if (!r.external) {
    j["provenance"] = provenance_json(r.scenario.value("backend", "cpu"));
    return;
  }
  const ExternalRunInfo& e = *r.external;
  nlohmann::json producer = nlohmann::json::parse(e.producer, nullptr, false, false);
  if (!producer.is_object()) producer = {{"name", e.producer}};
  auto field = [&](const char* a, const char* b) {
    for (const char* k : {a, b})
      if (producer.contains(k) && producer[k].is_string()) return producer[k].get<std::string>();
    return std::string();
  };
  // A producer that records no revision is said to be "unknown", never an empty row.
  const std::string revision = field("git_revision", "revision");
  j["provenance"] = {{"producer", field("name", "producer")},
                     {"version", field("version", "version")},
                     {"git_revision", revision.empty() ? "unknown" : revision},
                     {"backend", e.backend}};
  j["judged_by"] = provenance_json("cpu");
}

// One case of the report: its verdict, message and evidence, in the engine's terms (an
// external engine's case carries its engine time, the built-in engine's what it computed).
nlohmann::json case_json(const SweepResult& r, const CaseResult& c, int64_t index) {
  nlohmann::json cj{{"key", c.key},
                    {"index", index},
                    {"layout", c.layout},
                    {"cuts", c.cuts},
                    {"verdict", verdict_name(c.verdict)},
                    {"message", c.message},
                    {"failed_checks", c.failed_checks},
                    {"datasets_compared", c.datasets_compared},
                    {"datasets_differing", c.datasets_differing},
                    {"dispatch_mismatches", c.dispatch_mismatches},
                    {"seconds", c.seconds}};
  // The likely cause, where it says more than the verdict ("error" of an error does not).
  if (const std::string cause = classify_cause(c);
      !cause.empty() && cause != verdict_name(c.verdict))
    cj["cause"] = cause;
  if (!c.waivers.empty()) {
    nlohmann::json ws = nlohmann::json::array();
    for (const Waiver& w : c.waivers)
      ws.push_back({{"split", w.split},
                    {"check", w.check},
                    {"reason", w.reason},
                    {"link", w.link},
                    {"expires", w.expires},
                    {"where", w.where}});
    cj["waivers"] = ws;
  }
  if (c.first_divergence) {
    cj["first_divergence"] = diff_json(*c.first_divergence);
    cj["first_divergence"]["forward"] = c.first_divergence_forward;
    cj["first_divergence"]["layer"] = c.first_divergence_layer;
    cj["first_divergence"]["site"] = c.first_divergence_site;
    if (c.first_divergence_request >= 0)
      cj["first_divergence"]["request"] = c.first_divergence_request;
  }
  if (!r.requests.empty()) cj["diverged_requests"] = c.diverged_requests;
  if (c.dispatch) {
    cj["dispatch"] = {{"forward", c.dispatch->forward},   {"event", c.dispatch->event},
                      {"layer", c.dispatch->layer},       {"site", c.dispatch->site},
                      {"expected", c.dispatch->expected}, {"actual", c.dispatch->actual}};
  }
  nlohmann::json taps = nlohmann::json::array();
  for (const TapVerdict& t : c.taps)
    taps.push_back({{"id", t.id},
                    {"mismatches", t.mismatches},
                    {"min_cosine", t.min_cosine},
                    {"verdict", t.mismatches == 0 ? "pass" : "diverged"}});
  cj["taps"] = taps;
  nlohmann::json stages = nlohmann::json::array();
  for (const StageHoldings& s : c.stages)
    stages.push_back({{"index", s.index},
                      {"layers", {s.range.begin, s.range.end}},
                      {"embedding", s.embedding},
                      {"owned_taps", s.owned_taps},
                      {"parameter_bytes", s.parameter_bytes},
                      {"tensors", s.tensors}});
  cj["stages"] = stages;
  if (!r.external) cj["computed"] = computed_json(c.computed);
  if (!c.evidence.empty()) cj["evidence"] = c.evidence;
  if (c.datasets_rounded > 0)
    cj["rounded"] = {{"datasets", c.datasets_rounded}, {"examples", c.rounded_examples}};
  if (r.external) cj["engine_seconds"] = c.engine_seconds;
  if (c.drafter.method != "none") {
    cj["drafter"] = {{"stage", c.drafter.stage},
                     {"embedding_source", c.drafter.embedding_source},
                     {"same_object_as_target", c.drafter.same_object_as_target},
                     {"refusal_probe", c.refusal_probe}};
  }
  if (!c.dump.empty()) cj["dump"] = c.dump;
  if (!c.stderr_tail.empty()) cj["stderr_tail"] = c.stderr_tail;
  if (!c.not_judged.empty()) {
    cj["not_judged"] = nlohmann::json::array();
    for (const NotJudged& n : c.not_judged)
      cj["not_judged"].push_back({{"check", n.check}, {"reason", n.reason}});
  }
  return cj;
}

// An external engine's sweep opens with what ran and the settings, and lists the checks its
// dumps gave no evidence for (never counted as passed).
void set_engine(const ExternalRunInfo& e, nlohmann::json& j) {
  nlohmann::json env = nlohmann::json::object();
  for (const auto& [k, v] : e.env) env[k] = v;
  j["engine"] = {
      {"pp1_command", e.pp1_command},
      {"command_template", e.command_template},
      {"producer", j["provenance"]},
      {"kernels", e.kernels},
      {"pp1_content_sha256", e.pp1_content_sha256},
      {"evidence", e.evidence_waived.empty()
                       ? nlohmann::json{{"rule", kEvidenceRule}}
                       : nlohmann::json{{"rule", kEvidenceRule}, {"waived", e.evidence_waived}}},
      {"cwd", e.cwd},
      {"env", env},
      {"timeout_s", e.timeout_s},
      {"golden", e.golden},
      {"work_dir", e.work_dir},
      {"jobs_requested", e.jobs_requested},
      {"jobs", e.jobs},
      {"pp1_outcome", e.pp1_outcome},
      {"pp1_failed", e.pp1_failed},
      {"pp1_stderr_tail", e.pp1_stderr_tail},
      {"engine_seconds", e.engine_seconds}};
  j["lane"]["rule"] =
      "bitwise on the integer bit pattern; no tolerance (the engine's dumps "
      "against its own PP=1)";
}

// SPEC 5.5: the speculative figures of every split point against PP=1's.
void set_acceptance(const SweepResult& r, nlohmann::json& j) {
  auto row = [](const std::string& split, const AcceptanceFigures& a,
                const AcceptanceFigures& ref) {
    const bool equal = same_acceptance(a, ref);
    return nlohmann::json{{"split", split},
                          {"steps", a.steps},
                          {"accepted", a.accepted},
                          {"mean_accepted_length", a.mean_accepted},
                          {"acceptance_rate", a.acceptance_rate},
                          {"tokens_per_forward", a.tokens_per_forward},
                          {"accepted_histogram", a.accepted_histogram},
                          {"gsm8k_strict", a.strict_correct},
                          {"gsm8k_flexible", a.flexible_correct},
                          {"prompts", a.prompts},
                          {"equal_to_pp1", equal}};
  };
  nlohmann::json acc = nlohmann::json::array();
  acc.push_back(row("PP=1", r.pp1_acceptance, r.pp1_acceptance));
  for (const CaseResult& c : r.cases) acc.push_back(row(c.key, c.acceptance, r.pp1_acceptance));
  j["acceptance"] = acc;
  j["drafter"] = {{"method", r.pp1_drafter.method},
                  {"pp1_embedding_source", r.pp1_drafter.embedding_source},
                  {"pp1_same_object_as_target", r.pp1_drafter.same_object_as_target}};
}

// SPEC 3.4: the request x split-point view, and every request against itself alone.
void set_serving(const SweepResult& r, nlohmann::json& j) {
  nlohmann::json matrix = nlohmann::json::array();
  for (const CaseResult& c : r.cases) {
    nlohmann::json row = nlohmann::json::array();
    for (int32_t q : r.requests) {
      const bool diverged = std::find(c.diverged_requests.begin(), c.diverged_requests.end(), q) !=
                            c.diverged_requests.end();
      row.push_back(c.verdict == Verdict::kDiverged && diverged ? "diverged"
                    : c.verdict == Verdict::kPass || c.verdict == Verdict::kDiverged
                        ? "pass"
                        : verdict_name(c.verdict));
    }
    matrix.push_back({{"split", c.key}, {"requests", row}});
  }
  j["serving"] = {{"requests", r.requests},
                  {"matrix", matrix},
                  {"batch_invariance",
                   {{"checked", r.batch_invariance.checked},
                    {"required", r.batch_invariance.required},
                    {"requests", r.batch_invariance.requests},
                    {"identical", r.batch_invariance.identical},
                    {"differences", r.batch_invariance.differences},
                    {"not_invariant", r.batch_invariance.not_invariant}}}};
}

}  // namespace

nlohmann::json counts_json(const SweepResult& result) {
  nlohmann::json counts = {{"total", result.cases.size()}};
  for (const CaseOutcome& o : case_outcomes())
    counts[std::string(o.count_key)] = result.count(o.verdict);
  return counts;
}

nlohmann::json sweep_report(const SweepResult& r, const ReportContext& ctx) {
  nlohmann::json j;
  j["format"] = "splitcheck.report";
  j["format_version"] = 1;
  j["kind"] = "sweep";
  // A sweep whose PP=1 did not reproduce itself judged nothing (--self-check): "refused".
  const bool refused = r.refused_to_judge();
  j["verdict"] = r.verdict_word();
  j["exit_code"] = r.exit_code();
  if (r.self_check.ran)
    j["self_check"] = {{"reproduced", r.self_check.reproduced},
                       {"datasets_compared", r.self_check.datasets_compared},
                       {"datasets_differing", r.self_check.datasets_differing},
                       {"first_difference", r.self_check.first_difference},
                       {"seconds", r.self_check.seconds}};
  j["checks"] = r.checks;
  j["not_judged"] = nlohmann::json::array();
  for (const NotJudged& n : r.not_judged)
    j["not_judged"].push_back({{"check", n.check}, {"reason", n.reason}});
  if (!r.reference_failure.empty()) j["reference_failure"] = r.reference_failure;
  j["scenario"] = {{"name", r.scenario_name},
                   {"sha256", r.scenario_sha256},
                   {"model_sha256", r.model_sha256},
                   {"layers", r.scenario.contains("model")
                                  ? r.scenario["model"]["overrides"].value("num_hidden_layers", 0)
                                  : 0},
                   {"resolved", r.scenario}};
  set_provenance(r, j);
  j["command"] = ctx.command;
  // What `merge` requires equal across shards: the same PP=1 (an external engine's PP=1 dump
  // content), the same engine command, scenario and splitcheck.
  j["identity"] = {
      {"scenario_sha256", r.scenario_sha256},
      {"splitcheck_version", std::string(SPLITCHECK_VERSION) + " " + SPLITCHECK_GIT_REVISION},
      {"engine_command",
       r.external ? nlohmann::json(r.external->command_template) : nlohmann::json("built-in")},
      {"pp1_content_sha256", r.external ? r.external->pp1_content_sha256 : ""}};
  j["counts"] = counts_json(r);
  // Waived cases and expired waivers (harness/judge/waivers.h).
  j["waivers"] = {{"failures", r.waiver_failures}};
  if (!r.external) j["placement"] = placement_json(r.placement);
  j["timing"] = {{"pp1_seconds", r.pp1_seconds},
                 {"total_seconds", r.total_seconds},
                 {"threads", r.threads},
                 {"cost_in_pp1_runs", r.pp1_seconds > 0 ? r.total_seconds / r.pp1_seconds : 0.0}};
  // What the built-in engine computed; an external engine's cases count datasets compared.
  if (!r.external) j["computed"] = sweep_computed_json(r);
  j["lane"] = {{"name", "exact"}, {"rule", "bitwise on the integer bit pattern; no tolerance"}};
  nlohmann::json faults = nlohmann::json::array();
  for (const auto& id : r.scenario.value("faults", std::vector<std::string>{})) {
    const FaultInfo* f = find_fault(id);
    faults.push_back({{"id", id},
                      {"restores", f ? std::string(f->restores) : ""},
                      {"caught_by", f ? std::string(f->caught_by) : ""}});
  }
  j["faults"] = faults;
  nlohmann::json cases = nlohmann::json::array();
  // Each case's place in the scenario's enumeration travels with it (CaseResult::index).
  for (size_t i = 0; i < r.cases.size(); ++i)
    cases.push_back(case_json(r, r.cases[i],
                              r.cases[i].index >= 0 ? r.cases[i].index : static_cast<int64_t>(i)));
  j["cases"] = cases;
  if (nlohmann::json rounded = rounding_summary(cases); !rounded.is_null()) j["rounded"] = rounded;
  if (r.external) set_engine(*r.external, j);
  if (r.pp1_acceptance.speculative && !refused) set_acceptance(r, j);
  if (!r.requests.empty() && !refused) set_serving(r, j);
  j["expect"] = {{"declared", r.scenario.value("expect", nlohmann::json::object())},
                 {"failures", r.expect_failures},
                 {"met", r.expect_failures.empty()}};
  if (!r.expect_not_evaluated.empty()) j["expect"]["not_evaluated"] = r.expect_not_evaluated;
  return j;
}

Status write_reports(const std::string& dir, const nlohmann::json& untrusted) {
  // Engine stderr, dataset and file names may hold any bytes: every form is written from
  // the printable model, so no byte an engine emits can lose a report.
  const nlohmann::json report = printable_json(untrusted);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return invalid_input(dir + ": cannot create report directory: " + ec.message());
  const std::filesystem::path base(dir);
  const std::pair<const char*, std::string> files[] = {{"report.json", report.dump(2) + "\n"},
                                                       {"report.html", render_html(report)},
                                                       {"junit.xml", render_junit(report)},
                                                       {"summary.md", render_markdown(report)}};
  for (const auto& [name, text] : files) RETURN_IF_ERROR(write_atomically(base / name, text));
  return Status::ok();
}

}  // namespace splitcheck
