#include "harness/verdict/sweep.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "harness/engine/partitioned_engine.h"
#include "harness/transport/inproc.h"
#include "harness/verdict/checks.h"
#include "harness/verdict/serving_checks.h"
#include "harness/verdict/stage_checks.h"

namespace splitcheck {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The check a dataset belongs to, by its path in the dump layout.
std::string check_of(const std::string& path) {
  if (path.rfind("stage_trace/", 0) == 0 || path.rfind("stages/", 0) == 0) return "";
  if (path.rfind("generation/", 0) == 0 || path.rfind("serving/", 0) == 0) return "tokens";
  if (path.rfind("spec/", 0) == 0) return "acceptance";
  if (path.find("/taps/") != std::string::npos) return "taps";
  if (path.ends_with("/logits")) return "logits";
  if (path.ends_with("/input_ids") || path.ends_with("/next_tokens")) return "tokens";
  if (path.ends_with("/dispatch")) return "dispatch";
  return "tensors";
}

int32_t forward_of(const std::string& path) {
  if (path.rfind("forward/", 0) != 0) return -1;
  return std::atoi(path.c_str() + 8);
}

// Serving: the request a dataset belongs to (the `request` attribute of its forward, or
// the <r> of generation/<r>/ and spec/<r>/), -1 when none or not a serving record.
int32_t request_of(const RunRecord& ref, const std::string& path) {
  if (ref.find("serving/schedule") == nullptr) return -1;
  if (path.rfind("forward/", 0) == 0) {
    const std::string group = path.substr(0, path.find('/', 8));
    auto it = ref.attrs().find(group);
    if (it == ref.attrs().end()) return -1;
    auto a = it->second.find("request");
    if (a == it->second.end() || !std::holds_alternative<int64_t>(a->second)) return -1;
    return static_cast<int32_t>(std::get<int64_t>(a->second));
  }
  for (const char* prefix : {"generation/", "spec/"}) {
    const size_t n = std::strlen(prefix);
    if (path.rfind(prefix, 0) == 0 && path.size() > n && std::isdigit(path[n]))
      return std::atoi(path.c_str() + n);
  }
  return -1;
}

// The integer attribute `name` of the forward that holds `path`; -1 when none.
int64_t forward_attr(const RunRecord& ref, const std::string& path, const char* name) {
  if (path.rfind("forward/", 0) != 0) return -1;
  auto it = ref.attrs().find(path.substr(0, path.find('/', 8)));
  if (it == ref.attrs().end()) return -1;
  auto a = it->second.find(name);
  if (a == it->second.end() || !std::holds_alternative<int64_t>(a->second)) return -1;
  return std::get<int64_t>(a->second);
}

int32_t layer_of(const std::string& path) {
  const size_t p = path.find("/layers/");
  return p == std::string::npos ? -1 : std::atoi(path.c_str() + p + 8);
}

std::string site_of(const std::string& path) {
  const size_t p = path.rfind('/');
  return p == std::string::npos ? path : path.substr(p + 1);
}

// The name of kernel code `k`: as the dump declares it (its dispatch trace's `kernels`
// attribute, names by code) where it does, else the kernel registry's row.
std::string kernel_name(int32_t k, const std::vector<std::string>& declared) {
  if (k >= 0 && k < static_cast<int32_t>(declared.size()) && !declared[k].empty())
    return declared[k];
  auto reg = kernel_registry();
  if (k < 0 || k >= static_cast<int32_t>(reg.size())) return fmt::format("kernel#{}", k);
  return fmt::format("{}.{}", reg[k].op, reg[k].variant);
}

// Event-by-event diff of two dispatch tables [N, 4] (layer, site, kernel, aux).
std::optional<DispatchMismatch> diff_dispatch(int32_t forward, const Tensor& a, const Tensor& b,
                                              int64_t& mismatching_events,
                                              const std::vector<std::string>& kernels) {
  const int64_t na = a.dim(0), nb = b.dim(0);
  std::optional<DispatchMismatch> first;
  const int32_t* pa = a.data<int32_t>();
  const int32_t* pb = b.data<int32_t>();
  for (int64_t i = 0; i < std::max(na, nb); ++i) {
    const bool in_a = i < na, in_b = i < nb;
    if (in_a && in_b && std::equal(pa + i * 4, pa + i * 4 + 4, pb + i * 4)) continue;
    ++mismatching_events;
    if (first) continue;
    DispatchMismatch m;
    m.forward = forward;
    m.event = i;
    const int32_t* ev = in_a ? pa + i * 4 : pb + i * 4;
    m.layer = ev[0];
    m.site = std::string(site_name(static_cast<Site>(ev[1])));
    auto describe = [&](const int32_t* e) {
      std::string d = kernel_name(e[2], kernels);
      if (static_cast<Site>(e[1]) == Site::kTap) return d + fmt::format(" (tap {})", e[3]);
      return d;
    };
    // An event that one trace has and the other lacks shows as a shift: name it as
    // missing or extra rather than as the pair of events that happen to line up.
    const bool missing_here =
        in_a && i + 1 < na && in_b && std::equal(pa + (i + 1) * 4, pa + (i + 2) * 4, pb + i * 4);
    const bool extra_here =
        in_b && i + 1 < nb && in_a && std::equal(pb + (i + 1) * 4, pb + (i + 2) * 4, pa + i * 4);
    if (missing_here) {
      m.expected = describe(pa + i * 4);
      m.actual = "no such call";
    } else if (extra_here) {
      m.layer = pb[i * 4];
      m.site = std::string(site_name(static_cast<Site>(pb[i * 4 + 1])));
      m.expected = "no such call";
      m.actual = describe(pb + i * 4);
    } else {
      m.expected = in_a ? describe(pa + i * 4) : "(no event)";
      m.actual = in_b ? describe(pb + i * 4) : "(no event)";
      if (in_a && in_b && pa[i * 4 + 2] == pb[i * 4 + 2]) {
        m.expected +=
            fmt::format(" at layer {} {}", pa[i * 4], site_name(static_cast<Site>(pa[i * 4 + 1])));
        m.actual +=
            fmt::format(" at layer {} {}", pb[i * 4], site_name(static_cast<Site>(pb[i * 4 + 1])));
      }
    }
    first = m;
  }
  return first;
}

void add_failed(CaseResult& c, const std::string& check) {
  if (std::find(c.failed_checks.begin(), c.failed_checks.end(), check) == c.failed_checks.end())
    c.failed_checks.push_back(check);
}

std::string case_message(const CaseResult& c) {
  std::string msg;
  if (!c.first_missing.empty())
    msg = c.first_missing_extra
              ? fmt::format("{}: only in the partitioned run (dataset only in the partition)",
                            c.first_missing)
              : fmt::format("{}: missing in the partitioned run ({} not computed)", c.first_missing,
                            c.first_missing_layer >= 0 ? "layer" : "dataset");
  if (c.dispatch) {
    const DispatchMismatch& d = *c.dispatch;
    if (!msg.empty()) msg += "; ";
    msg += fmt::format("dispatch: forward {} layer {} {}: {} at PP=1, {} here", d.forward, d.layer,
                       d.site, d.expected, d.actual);
  }
  if (c.first_divergence) {
    if (!msg.empty()) msg += "; first numeric divergence: ";
    if (c.first_divergence_request >= 0)
      msg += fmt::format("request {} forward {}: ", c.first_divergence_request,
                         c.first_divergence_forward);
    msg += verdict_line(*c.first_divergence);
  }
  return msg;
}

// Records one failed check of SPEC 5.4 on the case: a passing case becomes divergent with
// this message; a failing one keeps its first message and gains this one.
void add_check_failure(CaseResult& c, const CheckFailure& f) {
  add_failed(c, f.check);
  if (c.verdict == Verdict::kPass) {
    c.verdict = Verdict::kDiverged;
    c.message = f.message;
  } else {
    c.message += c.message.empty() ? f.message : "; " + f.message;
  }
}

// SPEC 5.4 on one case: memory measured per stage against the placement rule, the
// embedding each stage holds, the drafter's binding (the same storage as its stage's
// embed_tokens) and the refusal of a missing placeholder, reached through the drafter's
// loading path on a stage without the embedding.
// A check that is not selected is not evaluated and cannot fail the case.
void check_stages(const Scenario& s, const Partition& p, WeightSource& source, CaseResult& c,
                  const std::function<bool(std::string_view)>& selected) {
  auto fail = [&](const CheckFailure& f) {
    if (selected(f.check)) add_check_failure(c, f);
  };
  if (selected("memory"))
    for (const CheckFailure& f : check_memory(s, p, c.stages)) fail(f);
  if (selected("embedding")) {
    for (const CheckFailure& f : check_embedding_placement(s, p, c.stages)) fail(f);
    if (c.drafter.embedding_source != "none") {
      if (std::optional<CheckFailure> f = check_drafter_identity(s, c.drafter)) fail(*f);
    }
    if (std::optional<CheckFailure> f = check_refusal_reachable(s, p, source, &c.refusal_probe))
      fail(*f);
  }
}

}  // namespace

std::string dataset_check(const std::string& path) { return check_of(path); }

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kDiverged:
      return "diverged";
    case Verdict::kConfigRejected:
      return "config-rejected";
    case Verdict::kError:
      return "error";
    case Verdict::kSkipped:
      return "skipped";
    case Verdict::kWaived:
      return "waived";
    case Verdict::kUnproven:
      return "unproven";
    case Verdict::kInterrupted:
      return "interrupted";
  }
  return "?";
}

int SweepResult::count(Verdict v) const {
  return static_cast<int>(std::count_if(cases.begin(), cases.end(),
                                        [&](const CaseResult& c) { return c.verdict == v; }));
}

std::string SweepResult::counts_line() const {
  std::string line;
  for (const Verdict v : {Verdict::kPass, Verdict::kDiverged, Verdict::kConfigRejected,
                          Verdict::kError, Verdict::kSkipped, Verdict::kWaived, Verdict::kUnproven,
                          Verdict::kInterrupted})
    line += fmt::format("{}{} {}", line.empty() ? "" : ", ", count(v), verdict_name(v));
  return line;
}

bool SweepResult::conformant() const {
  return !cases.empty() && std::all_of(cases.begin(), cases.end(), [](const CaseResult& c) {
    return c.verdict == Verdict::kPass || c.verdict == Verdict::kWaived;
  });
}

bool SweepResult::compared_data() const {
  const bool judges_stages = std::any_of(checks.begin(), checks.end(), [](const std::string& n) {
    return n == "memory" || n == "embedding";
  });
  return std::any_of(cases.begin(), cases.end(), [&](const CaseResult& c) {
    return c.datasets_compared > 0 || (judges_stages && !c.stages.empty());
  });
}

std::string SweepResult::verdict_word() const {
  if (interrupted_by != 0) return "interrupted";
  if (refused_to_judge()) return "refused";
  if (no_data_compared()) return "no-data";
  return conformant() ? "conformant" : "divergent";
}

int SweepResult::exit_code() const {
  if (interrupted_by != 0) return 128 + interrupted_by;
  if (refused_to_judge()) return 4;
  if (count(Verdict::kError) > 0) return 3;
  // Passes that compared nothing are exit 0 only where `expect` asks for exactly that.
  const nlohmann::json expect =
      scenario.is_object() ? scenario.value("expect", nlohmann::json()) : nlohmann::json();
  if (no_data_compared() &&
      !(expect.is_object() && expect.value("verdict", nlohmann::json()) == "no-data"))
    return 1;
  return conformant() && expect_failures.empty() && waiver_failures.empty() ? 0 : 1;
}

Status compare_records(const RunRecord& ref, const RunRecord& cand, CaseResult& c,
                       const std::vector<std::string>& checks,
                       const std::vector<std::string>& kernel_names) {
  auto selected = [&](const std::string& check) {
    return !check.empty() &&
           (checks.empty() || std::find(checks.begin(), checks.end(), check) != checks.end());
  };
  std::map<std::string, const Tensor*> by_path;
  for (const RecordEntry& e : cand.entries()) by_path[e.path] = &e.tensor;
  std::set<int32_t> diverged_requests;
  auto note_request = [&](const std::string& path) {
    const int32_t r = request_of(ref, path);
    if (r >= 0) diverged_requests.insert(r);
    return r;
  };
  std::map<int, TapVerdict> taps;
  std::set<std::string> seen;
  // The first forward (in execution order) that computes each layer.
  std::map<int32_t, int32_t> first_forward_of_layer;
  for (const RecordEntry& e : ref.entries()) {
    const int32_t f = forward_of(e.path);
    const int32_t l = layer_of(e.path);
    if (f < 0 || l < 0) continue;
    auto [it, inserted] = first_forward_of_layer.try_emplace(l, f);
    if (!inserted) it->second = std::min(it->second, f);
  }
  // Positions in PP=1's execution order: of the first missing dataset, of the first numeric
  // divergence, of each PP=1 dataset (to place the partition's extra datasets).
  double missing_at = -1, numeric_at = -1;
  std::string missing_path;
  bool missing_extra = false;
  std::map<std::string, double> ref_position;
  double position = 0;
  for (const RecordEntry& e : ref.entries()) {
    const std::string check = check_of(e.path);
    ref_position[e.path] = ++position;
    if (!selected(check)) continue;
    seen.insert(e.path);
    auto it = by_path.find(e.path);
    ++c.datasets_compared;
    if (it == by_path.end()) {
      note_request(e.path);
      ++c.datasets_differing;
      add_failed(c, check);
      if (missing_at < 0) missing_at = position, missing_path = e.path;
      continue;
    }
    const Tensor& b = *it->second;
    if (check == "dispatch") {
      std::optional<DispatchMismatch> m =
          diff_dispatch(forward_of(e.path), e.tensor, b, c.dispatch_mismatches, kernel_names);
      if (m) {
        note_request(e.path);
        ++c.datasets_differing;
        add_failed(c, check);
        if (!c.dispatch) c.dispatch = m;
      }
      continue;
    }
    ASSIGN_OR_RETURN(CompareResult r, compare_tensors("/" + e.path, e.tensor, b));
    const bool is_tap = check == "taps";
    int tap_id = -1;
    if (is_tap) {
      tap_id = std::atoi(e.path.c_str() + e.path.rfind('/') + 1);
      taps[tap_id].id = tap_id;
    }
    if (r.equal()) continue;
    const int32_t request = note_request(e.path);
    ++c.datasets_differing;
    add_failed(c, check);
    if (!r.structural_errors.empty() && c.message.empty()) c.message = r.structural_errors.front();
    if (r.diffs.empty()) continue;
    const TensorDiff& d = r.diffs.front();
    if (is_tap) {
      taps[tap_id].mismatches += d.mismatches;
      taps[tap_id].min_cosine = std::min(taps[tap_id].min_cosine, d.cosine);
    }
    if (!c.first_divergence) {
      numeric_at = position;
      c.first_divergence = d;
      c.first_divergence_forward = forward_of(e.path);
      c.first_divergence_layer = layer_of(e.path);
      c.first_divergence_site = site_of(e.path);
      c.first_divergence_request = request;
      c.first_divergence_step = static_cast<int32_t>(forward_attr(ref, e.path, "step"));
      if (auto it = first_forward_of_layer.find(c.first_divergence_layer);
          it != first_forward_of_layer.end())
        c.first_divergence_layer_ran_before = it->second < c.first_divergence_forward;
    }
  }
  // An extra dataset sits just after the last dataset both runs have that precedes it in
  // the partition's order.
  double last_common = 0;
  for (const RecordEntry& e : cand.entries()) {
    if (auto it = ref_position.find(e.path); it != ref_position.end()) {
      last_common = it->second;
      continue;
    }
    if (!selected(check_of(e.path))) continue;
    ++c.datasets_differing;
    add_failed(c, check_of(e.path));
    if (missing_at < 0 || last_common + 0.5 < missing_at)
      missing_at = last_common + 0.5, missing_path = e.path, missing_extra = true;
  }
  if (missing_at >= 0 && (numeric_at < 0 || missing_at < numeric_at)) {
    c.first_missing = missing_path;
    c.first_missing_extra = missing_extra;
    c.first_missing_forward = forward_of(missing_path);
    c.first_missing_layer = layer_of(missing_path);
  }
  c.diverged_requests.assign(diverged_requests.begin(), diverged_requests.end());
  for (const auto& [id, t] : taps) c.taps.push_back(t);
  if (c.failed_checks.empty()) {
    c.verdict = Verdict::kPass;
    c.message = c.datasets_compared > 0
                    ? fmt::format("bit-identical ({} datasets)", c.datasets_compared)
                    : "no data compared";
  } else {
    c.verdict = Verdict::kDiverged;
    // The headline first; a shape or dtype mismatch found on the way stays in the message.
    const std::string detail = case_message(c);
    if (!detail.empty()) c.message = c.message.empty() ? detail : detail + "; " + c.message;
    if (c.message.empty()) c.message = "differs in " + c.failed_checks.front();
  }
  return Status::ok();
}

namespace {

std::vector<std::string> expect_failures_of(const nlohmann::json& expect, const SweepResult& r) {
  std::vector<std::string> fails;
  auto keys_with = [&](Verdict v) {
    std::vector<std::string> k;
    for (const CaseResult& c : r.cases)
      if (c.verdict == v) k.push_back(c.key);
    return k;
  };
  if (expect.contains("verdict")) {
    const std::string want = expect["verdict"].get<std::string>();
    const std::string got = r.verdict_word();
    if (want != got) fails.push_back(fmt::format("expected verdict {}, got {}", want, got));
  }
  if (r.no_data_compared() && expect.value("verdict", "") != "no-data")
    fails.push_back(fmt::format(
        "no data compared: the selected checks ({}) compared no dataset and judged no stage; "
        "only \"expect\": {{\"verdict\": \"no-data\"}} accepts that",
        fmt::join(r.checks, ", ")));
  if (expect.contains("identical_splits")) {
    const int want = expect["identical_splits"].get<int>();
    if (r.count(Verdict::kPass) != want)
      fails.push_back(
          fmt::format("expected {} identical split points, got {}", want, r.count(Verdict::kPass)));
  }
  for (const auto& [field, verdict] : {std::pair{"identical", Verdict::kPass},
                                       std::pair{"config_rejected", Verdict::kConfigRejected},
                                       std::pair{"diverged", Verdict::kDiverged}}) {
    if (!expect.contains(field)) continue;
    std::vector<std::string> want = expect[field].get<std::vector<std::string>>();
    std::vector<std::string> got = keys_with(verdict);
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    if (want != got)
      fails.push_back(fmt::format("expected {} = [{}], got [{}]", field, fmt::join(want, ", "),
                                  fmt::join(got, ", ")));
  }
  if (expect.contains("caught_by")) {
    const std::string check = expect["caught_by"].get<std::string>();
    int caught = 0;
    for (const CaseResult& c : r.cases) {
      const bool named =
          std::find(c.failed_checks.begin(), c.failed_checks.end(), check) != c.failed_checks.end();
      if (c.verdict == Verdict::kDiverged && !named)
        fails.push_back(fmt::format("{} diverged but the {} check did not fail", c.key, check));
      caught += named || (check == "config" && c.verdict == Verdict::kConfigRejected);
    }
    if (caught == 0) fails.push_back(fmt::format("no split point failed the {} check", check));
  }
  // SPEC 3.3 on PP=1's acceptance: its range, and every accepted length 0..gamma.
  const AcceptanceFigures& a = r.pp1_acceptance;
  for (const auto& [field, at_most] :
       {std::pair{"acceptance_rate_at_least", false}, std::pair{"acceptance_rate_at_most", true}}) {
    if (!expect.contains(field)) continue;
    const double bound = expect[field].get<double>();
    if (!a.speculative)
      fails.push_back(fmt::format("expected {} {}, but the run is not speculative", field, bound));
    else if (at_most ? a.acceptance_rate > bound : a.acceptance_rate < bound)
      fails.push_back(fmt::format("expected {} {}, got acceptance rate {:.4f}", field, bound,
                                  a.acceptance_rate));
  }
  if (expect.value("batch_invariant", false) && !r.batch_invariance.checked)
    fails.push_back("expected every request to equal itself served alone, but nothing checked it");
  // On a backend that does not promise it, batch invariance is measured; a scenario that
  // still expects it fails when a request differs.
  if (expect.value("batch_invariant", false) && !r.batch_invariance.not_invariant.empty())
    fails.push_back(fmt::format(
        "expected every request to equal itself served alone, but {} of {} differ (the backend "
        "is not batch-invariant): {}",
        r.batch_invariance.not_invariant.size(), r.batch_invariance.requests,
        r.batch_invariance.not_invariant.front()));
  if (expect.value("every_accepted_length", false)) {
    std::vector<size_t> missing;
    for (size_t n = 0; n < a.accepted_histogram.size(); ++n)
      if (a.accepted_histogram[n] == 0) missing.push_back(n);
    if (!a.speculative || a.accepted_histogram.empty())
      fails.push_back("expected every accepted length, but the run is not speculative");
    else if (!missing.empty())
      fails.push_back(fmt::format("expected every accepted length 0..{}, never accepted: {}",
                                  a.accepted_histogram.size() - 1, fmt::join(missing, ", ")));
  }
  return fails;
}

}  // namespace

std::vector<std::string> evaluate_expect(const nlohmann::json& expect, const SweepResult& r) {
  std::vector<std::string> fails;
  // The loader validates `expect` (scenario.cc); a block that still cannot be read here
  // (a hand-edited report given to merge, say) fails rather than passes.
  if (!expect.is_object()) {
    fails.push_back("expect cannot be read: expected an object, got " + expect.dump());
  } else {
    try {
      fails = expect_failures_of(expect, r);
    } catch (const nlohmann::json::exception& e) {
      fails.push_back(fmt::format("expect cannot be read: {}", e.what()));
    }
  }
  for (const CaseResult& c : r.cases)
    if (c.verdict == Verdict::kError)
      fails.push_back(fmt::format("{}: error: {}", c.key, c.message));
  // SPEC 3.4: on a batch-invariant backend a request in a batch equals the same request
  // served alone. Not an expectation a scenario may waive: a difference always fails the
  // sweep (BatchInvariance::differences holds only what must fail).
  for (const std::string& d : r.batch_invariance.differences)
    fails.push_back("batch invariance: " + d);
  return fails;
}

namespace {

// A sweep that compares nothing proves nothing: refuse a filter or shard that leaves no
// split point.
Status check_not_empty(const Scenario& s, const SweepOptions& options, size_t all, size_t kept) {
  if (kept > 0) return Status::ok();
  std::string why;
  if (!options.filter.empty()) why = fmt::format("--filter \"{}\" matches none", options.filter);
  if (options.shard_count > 1)
    why += fmt::format("{}shard {}/{} holds none", why.empty() ? "" : " and ", options.shard_index,
                       options.shard_count);
  if (why.empty()) why = "the scenario enumerates none";
  return invalid_input(fmt::format("{}: {} of its {} split point(s): nothing to compare",
                                   s.source_path.empty() ? s.name : s.source_path, why, all));
}

// The scenario's transport must be the one the sweep was given (nothing runs in-process
// in its place), with room for the partition with the most stages that would run. A
// partition that owns some layer twice or never is rejected at configuration before any
// stage is built (run_case's structural verdict), so it needs no rank: an MPI job with
// fewer ranks than its stages still gives its verdict.
Status check_transport(const Scenario& s, const SweepOptions& options,
                       const std::vector<Partition>& parts) {
  const std::string where = s.source_path.empty() ? s.name : s.source_path;
  if (s.transport != "inproc" && options.transport == nullptr)
    return invalid_input(fmt::format(
        "{}: /transport: \"{}\" needs its launcher (mpirun -np <stages> splitcheck sweep "
        "--transport {}); the sweep was given none",
        where, s.transport, s.transport));
  if (options.transport == nullptr) return Status::ok();
  for (const Partition& p : parts) {
    if (!p.ownership_problem().empty()) continue;  // rejected before anything runs
    if (p.stages() > options.transport->max_stages())
      return invalid_input(fmt::format(
          "{}: partition {} has {} stages, but the {} transport has {} rank(s): launch with "
          "mpirun -np {} or more",
          where, p.key(), p.stages(), s.transport, options.transport->max_stages(), p.stages()));
  }
  return Status::ok();
}

// One case: builds the partitioned engine, runs the workload, compares with PP=1 and
// evaluates the selected checks.
void run_case(const Scenario& s, const Partition& part, const EngineOptions& engine_options,
              const FaultSet& faults, WeightSource& source, TransportFactory* transport,
              const PreparedWorkload& workload, const RunRecord& ref_record, CaseResult& c) {
  const std::function<bool(std::string_view)> selected = [&](std::string_view check) {
    return std::find(s.checks.begin(), s.checks.end(), check) != s.checks.end();
  };
  // A refused configuration never ran: it is not a pass whatever `checks` says, and it
  // fails the config check when that check is selected.
  auto refused = [&](const Status& st) {
    const bool rejected = st.code() == StatusCode::kConfigRejected;
    c.verdict = rejected ? Verdict::kConfigRejected : Verdict::kError;
    c.message = rejected ? st.message() : fmt::format("{} ({}): {}", c.key, c.layout, st.message());
    if (rejected && selected("config")) c.failed_checks.push_back("config");
  };
  // The structural check comes before anything is built or compared.
  if (const std::string problem = part.ownership_problem(); !problem.empty()) {
    c.verdict = Verdict::kConfigRejected;
    c.message = fmt::format("partition {}: {}", c.layout, problem);
    if (selected("partition")) c.failed_checks.push_back("partition");
    return;
  }
  Result<std::unique_ptr<PartitionedEngine>> engine =
      PartitionedEngine::create(s.model, part, engine_options, faults, source, transport);
  if (!engine.is_ok()) return refused(engine.status());
  c.stages = (*engine)->holdings();
  RunRecord rec;
  const int last = part.stages() - 1;
  Result<GenerationSummary> g = run_generation(s, **engine, (*engine)->last_stage_weights(), last,
                                               last == 0, source, workload, &rec);
  c.computed = (*engine)->computed();
  if (!g.is_ok()) return refused(g.status());
  c.computed.drafter = g->drafter_calls;
  c.acceptance = acceptance_figures(*g);
  c.drafter = g->drafter;
  Status st = compare_records(ref_record, rec, c, s.checks);
  if (!st.is_ok()) {
    c.verdict = Verdict::kError;
    c.message = st.message();
    return;
  }
  const bool compares_datasets = std::any_of(s.checks.begin(), s.checks.end(), [](const auto& n) {
    return n != "embedding" && n != "memory" && n != "config";
  });
  if (compares_datasets && c.datasets_compared == 0) {
    c.verdict = Verdict::kError;
    c.message = fmt::format("no dataset of the selected checks ({}) was recorded: nothing compared",
                            fmt::join(s.checks, ", "));
    return;
  }
  check_stages(s, part, source, c, selected);
  if (c.verdict == Verdict::kPass && c.datasets_compared == 0 && !c.stages.empty() &&
      (selected("memory") || selected("embedding")))
    c.message = "no dataset compared; the holdings of every stage judged";
}

}  // namespace

Result<SweepResult> run_sweep(const Scenario& s, const SweepOptions& options) {
  const auto t0 = Clock::now();
  // Nothing runs on a backend or transport this build cannot provide (load_scenario
  // refuses it too; this covers scenarios built in code).
  RETURN_IF_ERROR(check_capabilities(s, s.source_path.empty() ? s.name : s.source_path));
  if (s.external)
    return invalid_input(fmt::format(
        "{}: /engine/command: an external engine is swept by the runner (splitcheck sweep, "
        "harness/runner/external_sweep.h), not by the built-in sweep",
        s.source_path.empty() ? s.name : s.source_path));
  SweepResult result;
  result.scenario_name = s.name;
  result.scenario = resolved_scenario_json(s);
  for (const CheckInfo& check : check_registry())
    if (std::find(s.checks.begin(), s.checks.end(), check.name) != s.checks.end())
      result.checks.emplace_back(check.name);
  ASSIGN_OR_RETURN(result.scenario_sha256, scenario_identity_sha256(s));
  ASSIGN_OR_RETURN(result.model_sha256, model_identity_sha256(s));
  ASSIGN_OR_RETURN(
      std::vector<Partition> all,
      enumerate_partitions(s.partitions, s.model.num_hidden_layers, FaultSet{s.faults}));
  const std::vector<Partition> parts =
      select_partitions(all, options.shard_index, options.shard_count, options.filter);
  RETURN_IF_ERROR(check_not_empty(s, options, all.size(), parts.size()));
  RETURN_IF_ERROR(check_transport(s, options, parts));
  // Where the stages run: known before anything runs, so a refused sweep reports it too.
  int most_stages = 1;
  for (const Partition& p : parts) most_stages = std::max(most_stages, p.stages());
  result.placement.transport = options.transport != nullptr ? s.transport : "inproc";
  result.placement.stages = options.transport != nullptr
                                ? options.transport->placement(most_stages, s.backend)
                                : InprocFactory().placement(most_stages, s.backend);

  // PP=1, once, over the weight source every split point shares. Nothing of its outcomes
  // stands in for a stage's work: every partition computes every call it is judged on.
  const FaultSet faults{s.faults};
  const auto t_ref = Clock::now();
  std::unique_ptr<WeightSource> own_source;
  if (options.weights == nullptr) own_source = scenario_weight_source(s);
  WeightSource& source = options.weights != nullptr ? *options.weights : *own_source;
  Result<ReferenceRun> ref_run = internal_error("PP=1 run did not start");
  try {
    ref_run = run_reference(s, source);
  } catch (const std::exception& e) {
    return internal_error(fmt::format("PP=1 run: exception: {}", e.what()));
  }
  ASSIGN_OR_RETURN(ReferenceRun ref, std::move(ref_run), "PP=1 run");
  const PreparedWorkload& workload = ref.workload;
  const RunRecord& ref_record = ref.record;
  result.pp1_acceptance = acceptance_figures(ref.summary);
  result.pp1_drafter = ref.summary.drafter;
  result.pp1_seconds = seconds_since(t_ref);
  result.pp1_computed = ref.computed;
  if (options.self_check) {
    // A PP=1 that differs from itself is never reported as a PP divergence: refuse.
    ASSIGN_OR_RETURN(result.self_check, check_pp1_reproduces(s, source, ref_record));
    if (result.refused_to_judge()) {
      result.total_seconds = seconds_since(t0);
      return result;
    }
  }
  const EngineOptions engine_options{s.capture_ids, s.dump_level, s.speculative.method,
                                     s.speculative.context_only_producer};
  if (s.serving.enabled) {
    if (options.requests_alone) {
      ASSIGN_OR_RETURN(result.batch_invariance, check_requests_alone(s, source, ref),
                       "serving each request alone at PP=1");
    }
    for (size_t r = 0; r < workload.prompts.size(); ++r)
      result.requests.push_back(static_cast<int32_t>(r));
  }

  result.cases.resize(parts.size());
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::mutex progress_mu;
  auto worker = [&] {
    for (size_t i = next++; i < parts.size(); i = next++) {
      const auto tc = Clock::now();
      CaseResult& c = result.cases[i];
      c.key = parts[i].key();
      c.layout = parts[i].layout();
      c.cuts = parts[i].cuts();
      // An exception (a hostile weight source, a bug) fails this case, never the process.
      try {
        if (options.transport != nullptr && !options.transport->lost().empty()) {
          c.verdict = Verdict::kSkipped;
          c.message = "not run: " + options.transport->lost();
        } else {
          run_case(s, parts[i], engine_options, faults, source, options.transport, workload,
                   ref_record, c);
        }
      } catch (const std::exception& e) {
        c.verdict = Verdict::kError;
        c.message = fmt::format("{} ({}): exception: {}", c.key, c.layout, e.what());
      } catch (...) {
        c.verdict = Verdict::kError;
        c.message = fmt::format("{} ({}): unknown exception", c.key, c.layout);
      }
      c.seconds = seconds_since(tc);
      const size_t n = ++done;
      if (options.progress) {
        std::lock_guard<std::mutex> lock(progress_mu);
        const double elapsed = seconds_since(t0);
        const double eta = elapsed / static_cast<double>(n) * static_cast<double>(parts.size() - n);
        fmt::print(stderr, "\r[{}/{}] split points done, ETA {:.0f} s   ", n, parts.size(), eta);
        if (n == parts.size()) fmt::print(stderr, "\n");
      }
    }
  };
  // A transport of processes serves one partition at a time.
  int threads = options.transport != nullptr ? 1
                : options.threads > 0
                    ? options.threads
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(parts.size())));
  result.threads = threads;
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  result.total_seconds = seconds_since(t0);
  // `expect` speaks of the whole sweep: a filtered or sharded run cannot meet or miss it
  // (splitcheck merge evaluates it once the shards are joined). Errors still count.
  const bool partial = !options.filter.empty() || options.shard_count > 1;
  result.expect_failures = evaluate_expect(partial ? nlohmann::json::object() : s.expect, result);
  return result;
}

}  // namespace splitcheck
