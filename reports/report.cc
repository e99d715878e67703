#include "reports/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "harness/build_info.h"
#include "harness/engine/partition.h"
#include "harness/verdict/checks.h"
#include "harness/verdict/faults.h"
#include "harness/verdict/scenario.h"
#include "reference/partial_files.h"
#include "reports/model_common.h"
#include "reports/writers.h"

namespace splitcheck {
namespace {

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

// Each case key's position in the scenario's full partition enumeration (before shard
// and filter), so shard reports can be merged back into the unsharded order.
std::map<std::string, int64_t> enumeration_index(const nlohmann::json& resolved) {
  std::map<std::string, int64_t> index;
  Result<Scenario> s = parse_scenario(resolved, "report", ".");
  if (!s.is_ok()) return index;
  Result<std::vector<Partition>> all =
      enumerate_partitions(s->partitions, s->model.num_hidden_layers, FaultSet{s->faults});
  if (!all.is_ok()) return index;
  for (size_t i = 0; i < all->size(); ++i) index.emplace((*all)[i].key(), static_cast<int64_t>(i));
  return index;
}

}  // namespace

nlohmann::json diff_json(const TensorDiff& d) {
  return {{"path", d.path},
          {"dtype", d.dtype},
          {"shape", d.shape},
          {"mismatches", d.mismatches},
          {"token", d.first_row},
          {"channel", d.first_col},
          {"expected_bits", format_bits(d.dtype == "bfloat16"  ? DType::kBF16
                                        : d.dtype == "float32" ? DType::kF32
                                                               : DType::kI32,
                                        d.first_a_bits)},
          {"actual_bits", format_bits(d.dtype == "bfloat16"  ? DType::kBF16
                                      : d.dtype == "float32" ? DType::kF32
                                                             : DType::kI32,
                                      d.first_b_bits)},
          {"max_ulp", d.max_ulp},
          {"max_abs", d.max_abs},
          {"cosine", d.cosine},
          {"nan_mismatch", d.nan_mismatch}};
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

nlohmann::json reuse_json(const ReuseSummary& u) {
  const bool used = u.mode != ReuseMode::kOff;
  return {{"mode", reuse_mode_name(u.mode)},
          {"scope", used ? "layer calls by content" : "none"},
          {"rule", used ? "PP=1 keeps each layer call's outcome under a digest of everything the "
                          "call reads (config, layer, the weights as loaded, the entering state "
                          "and cache); a stage whose call has the same digest, from the weights "
                          "it loaded and the state it holds, takes a copy of that outcome "
                          "(verify: computes it and checks it is equal); every other call, the "
                          "embedding, taps, handoff, head and drafter always run"
                        : "every split point runs every layer"},
          {"unused_because", u.unused_because},
          {"memo_bytes", u.memo_bytes},
          {"memo_entries", u.memo_entries},
          {"memory_bound", u.memory_bound},
          {"memo_dropped", u.memo_dropped},
          {"hits", u.calls.hits},
          {"misses", u.calls.misses},
          {"verified", u.calls.verified},
          {"computed", u.calls.computed}};
}

std::string reuse_line(const nlohmann::json& u) {
  const std::string mode = u.value("mode", "off");
  if (mode == "off") return fmt::format("none ({})", u.value("unused_because", ""));
  const int64_t hits = u.value("hits", int64_t{0});
  const int64_t misses = u.value("misses", int64_t{0});
  const int64_t verified = u.value("verified", int64_t{0});
  const int64_t computed = u.value("computed", int64_t{0});
  const int64_t all = hits + misses + verified + computed;
  return fmt::format(
      "layer calls by content, {}: {} of {} layer calls taken from PP=1, {} computed and checked "
      "equal, {} computed (no equal PP=1 input); {:.1f} MiB of PP=1 outcomes kept{}",
      mode, hits, all, verified, misses + computed,
      static_cast<double>(u.value("memo_bytes", int64_t{0})) / (1 << 20),
      u.value("memo_dropped", int64_t{0}) > 0
          ? fmt::format(" ({} not kept: memory bound)", u.value("memo_dropped", int64_t{0}))
          : "");
}

nlohmann::json sweep_report(const SweepResult& r, const ReportContext& ctx) {
  nlohmann::json j;
  j["format"] = "splitcheck.report";
  j["format_version"] = 1;
  j["kind"] = "sweep";
  // A sweep whose PP=1 did not reproduce itself judged nothing (--self-check): "refused".
  const bool refused = r.refused_to_judge();
  j["verdict"] = refused ? "refused" : r.conformant() ? "conformant" : "divergent";
  j["exit_code"] = r.exit_code();
  if (r.self_check.ran)
    j["self_check"] = {{"reproduced", r.self_check.reproduced},
                       {"datasets_compared", r.self_check.datasets_compared},
                       {"datasets_differing", r.self_check.datasets_differing},
                       {"first_difference", r.self_check.first_difference},
                       {"seconds", r.self_check.seconds}};
  j["checks"] = r.checks;
  j["scenario"] = {{"name", r.scenario_name},
                   {"sha256", r.scenario_sha256},
                   {"model_sha256", r.model_sha256},
                   {"layers", r.scenario.contains("model")
                                  ? r.scenario["model"]["overrides"].value("num_hidden_layers", 0)
                                  : 0},
                   {"resolved", r.scenario}};
  j["provenance"] = provenance_json(r.scenario.value("backend", "cpu"));
  j["command"] = ctx.command;
  j["counts"] = {{"total", r.cases.size()},
                 {"pass", r.count(Verdict::kPass)},
                 {"diverged", r.count(Verdict::kDiverged)},
                 {"config_rejected", r.count(Verdict::kConfigRejected)},
                 {"error", r.count(Verdict::kError)},
                 {"skipped", r.count(Verdict::kSkipped)},
                 {"waived", r.count(Verdict::kWaived)}};
  // Waived cases and expired waivers (harness/verdict/waivers.h).
  j["waivers"] = {{"failures", r.waiver_failures}};
  j["timing"] = {{"pp1_seconds", r.pp1_seconds},
                 {"total_seconds", r.total_seconds},
                 {"threads", r.threads},
                 {"cost_in_pp1_runs", r.pp1_seconds > 0 ? r.total_seconds / r.pp1_seconds : 0.0}};
  j["reuse"] = reuse_json(r.reuse);
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
  const std::map<std::string, int64_t> index = enumeration_index(r.scenario);
  for (size_t i = 0; i < r.cases.size(); ++i) {
    const CaseResult& c = r.cases[i];
    const auto at = index.find(c.key);
    nlohmann::json cj{{"key", c.key},
                      {"index", at != index.end() ? at->second : static_cast<int64_t>(i)},
                      {"layout", c.layout},
                      {"cuts", c.cuts},
                      {"verdict", verdict_name(c.verdict)},
                      {"message", c.message},
                      {"failed_checks", c.failed_checks},
                      {"datasets_compared", c.datasets_compared},
                      {"datasets_differing", c.datasets_differing},
                      {"dispatch_mismatches", c.dispatch_mismatches},
                      {"seconds", c.seconds}};
    if (!c.waivers.empty()) {
      nlohmann::json ws = nlohmann::json::array();
      for (const Waiver& w : c.waivers)
        ws.push_back({{"split", w.split},
                      {"check", w.check},
                      {"reason", w.reason},
                      {"link", w.link},
                      {"expires", w.expires}});
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
    cj["reuse"] = {{"hits", c.reuse.hits},
                   {"misses", c.reuse.misses},
                   {"verified", c.reuse.verified},
                   {"computed", c.reuse.computed}};
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
    cases.push_back(cj);
  }
  j["cases"] = cases;
  if (r.external) {
    // An external engine's sweep opens with what ran and the settings, and lists the checks
    // its dumps gave no evidence for (never counted as passed).
    const ExternalRunInfo& e = *r.external;
    nlohmann::json env = nlohmann::json::object();
    for (const auto& [k, v] : e.env) env[k] = v;
    j["engine"] = {{"pp1_command", e.pp1_command},
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
    j["not_judged"] = nlohmann::json::array();
    for (const NotJudged& n : e.not_judged)
      j["not_judged"].push_back({{"check", n.check}, {"reason", n.reason}});
    j["lane"]["rule"] =
        "bitwise on the integer bit pattern; no tolerance (the engine's dumps "
        "against its own PP=1)";
  }
  if (r.pp1_acceptance.speculative && !refused) {
    // SPEC 5.5: the speculative figures of every split point against PP=1's.
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
  if (!r.requests.empty() && !refused) {
    // SPEC 3.4: the request x split-point view, and every request against itself alone.
    nlohmann::json matrix = nlohmann::json::array();
    for (const CaseResult& c : r.cases) {
      nlohmann::json row = nlohmann::json::array();
      for (int32_t q : r.requests) {
        const bool diverged = std::find(c.diverged_requests.begin(), c.diverged_requests.end(),
                                        q) != c.diverged_requests.end();
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
  j["expect"] = {{"declared", r.scenario.value("expect", nlohmann::json::object())},
                 {"failures", r.expect_failures},
                 {"met", r.expect_failures.empty()}};
  return j;
}

Status write_reports(const std::string& dir, const nlohmann::json& report) {
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
