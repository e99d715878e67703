#include "harness/judge/judge.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "harness/judge/cause.h"
#include "harness/scenario/checks.h"

namespace splitcheck {
namespace {

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
  if (!c.first_missing.empty()) {
    FirstDeparture d{
        c.first_missing,
        c.first_missing_extra ? FirstDeparture::Kind::kExtra : FirstDeparture::Kind::kMissing,
        c.first_missing_layer_partly_recorded};
    msg = fmt::format("{}: {} the partitioned run ({})", c.first_missing,
                      c.first_missing_extra ? "only in" : "missing in", departure_cause(d));
  }
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
  // A failure that names its own cause leads the message: it is what the case is named for.
  const bool leads = !f.cause.empty() && c.stage_failure_cause.empty();
  if (leads) c.stage_failure_cause = f.cause;
  if (leads && c.first_missing.empty() && c.verdict != Verdict::kPass && !c.message.empty()) {
    c.message = f.message + "; " + c.message;
  } else if (c.verdict == Verdict::kPass) {
    c.verdict = Verdict::kDiverged;
    c.message = f.message;
  } else {
    c.message += c.message.empty() ? f.message : "; " + f.message;
  }
}

// A pass needs the evidence of the partition: a dump that shows another partition ran
// fails the `partition` check (named first); one that shows none (or whose PP=1 shows none)
// is unproven unless the scenario waives the evidence, which the case then says.
void apply_evidence(const PartitionEvidence& ev, const std::string& pp1_unproven,
                    const std::string& waived, CaseResult& c) {
  if (!ev.contradictions.empty()) {
    const std::string what = fmt::format("partition not run as asked ({}): {}", c.layout,
                                         fmt::join(ev.contradictions, "; "));
    if (std::find(c.failed_checks.begin(), c.failed_checks.end(), "partition") ==
        c.failed_checks.end())
      c.failed_checks.insert(c.failed_checks.begin(), "partition");
    c.message = c.verdict == Verdict::kPass ? what : what + "; " + c.message;
    c.verdict = Verdict::kDiverged;
    c.evidence = "contradicted";
    return;
  }
  std::vector<std::string> missing;
  if (!pp1_unproven.empty()) missing.push_back(pp1_unproven);
  if (!ev.missing.empty()) missing.push_back("this split point: " + ev.missing);
  if (missing.empty()) {
    c.evidence = "shown";
    return;
  }
  if (!waived.empty()) {
    c.evidence = "waived";
    c.message += fmt::format("; partition evidence WAIVED ({})", waived);
    return;
  }
  c.evidence = "missing";
  c.not_judged.push_back({"partition", fmt::format("{}", fmt::join(missing, "; "))});
  if (c.verdict != Verdict::kPass) return;  // a divergence stands without it
  c.verdict = Verdict::kUnproven;
  c.message = fmt::format("unproven: {}; not a pass without the evidence of the partition ({})",
                          fmt::join(missing, "; "), c.message);
}

// The source dtype a writer recorded for dataset `path` of `record` (its `source_dtype`
// attribute: the dump narrowed it), or "".
std::string source_dtype_of(const RunRecord& record, const std::string& path) {
  auto it = record.attrs().find(path);
  if (it == record.attrs().end()) return "";
  auto a = it->second.find("source_dtype");
  if (a == it->second.end() || !std::holds_alternative<std::string>(a->second)) return "";
  return std::get<std::string>(a->second);
}

// Counts a compared dataset that either side's writer narrowed (its equality is after
// rounding), naming the first few.
void note_rounding(const RunRecord& ref, const RunRecord& cand, const std::string& path,
                   const Tensor& t, CaseResult& c) {
  std::string source = source_dtype_of(ref, path);
  if (source.empty()) source = source_dtype_of(cand, path);
  if (source.empty()) return;
  ++c.datasets_rounded;
  if (c.rounded_examples.size() < kRoundedExamples)
    c.rounded_examples.push_back(
        fmt::format("/{}: {} stored as {}", path, source, dtype_name(t.dtype())));
}

// The words a case's message ends with when some of its datasets were compared after
// rounding; "" when none were.
std::string rounding_note(const CaseResult& c) {
  if (c.datasets_rounded == 0) return "";
  return fmt::format(
      "; {} datasets compared AFTER ROUNDING (the writer narrowed them: {}{})", c.datasets_rounded,
      fmt::join(c.rounded_examples, ", "),
      c.datasets_rounded > static_cast<int64_t>(c.rounded_examples.size()) ? ", ..." : "");
}

void set_error(CaseResult& c, const std::string& why) {
  c.verdict = Verdict::kError;
  c.message = fmt::format("{} ({}): {}", c.key, c.layout, why);
}

}  // namespace

std::string dataset_check(const std::string& path) { return check_of(path); }

void judge_refusal(Refusal why, const std::string& message,
                   const std::vector<std::string>& selected, CaseResult& c) {
  c.verdict = Verdict::kConfigRejected;
  c.message = message;
  const char* check = why == Refusal::kOwnership ? "partition" : "config";
  if (std::find(selected.begin(), selected.end(), check) != selected.end()) add_failed(c, check);
}

std::vector<std::string> judged_checks(const std::vector<std::string>& selected,
                                       const std::vector<CaseResult>& cases,
                                       std::vector<NotJudged>& sweep_not_judged) {
  auto is_selected = [&](std::string_view name) {
    return std::find(selected.begin(), selected.end(), name) != selected.end();
  };
  for (const std::string& check : checks_of_kind(CheckKind::kStage)) {
    if (!is_selected(check)) continue;
    bool judged = false;
    std::string reason;
    for (const CaseResult& c : cases) {
      if (c.verdict == Verdict::kError || c.verdict == Verdict::kConfigRejected ||
          c.verdict == Verdict::kSkipped || c.verdict == Verdict::kInterrupted)
        continue;
      auto it = std::find_if(c.not_judged.begin(), c.not_judged.end(),
                             [&](const NotJudged& n) { return n.check == check; });
      if (it == c.not_judged.end())
        judged = true;
      else if (reason.empty())
        reason = "no partition's dump gives evidence: " + it->reason;
    }
    if (!judged) sweep_not_judged.push_back({check, reason.empty() ? "no partition ran" : reason});
  }
  std::vector<std::string> judged;
  for (const CheckInfo& check : check_registry()) {
    const bool not_judged = std::any_of(sweep_not_judged.begin(), sweep_not_judged.end(),
                                        [&](const NotJudged& n) { return n.check == check.name; });
    if (is_selected(check.name) && !not_judged) judged.emplace_back(check.name);
  }
  return judged;
}

namespace {

// The first forward (in execution order) that computes each layer.
std::map<int32_t, int32_t> first_forward_of_layers(const RunRecord& ref) {
  std::map<int32_t, int32_t> first_forward_of_layer;
  for (const RecordEntry& e : ref.entries()) {
    const int32_t f = forward_of(e.path);
    const int32_t l = layer_of(e.path);
    if (f < 0 || l < 0) continue;
    auto [it, inserted] = first_forward_of_layer.try_emplace(l, f);
    if (!inserted) it->second = std::min(it->second, f);
  }
  return first_forward_of_layer;
}

// The first dataset missing from either run, by its position in PP=1's execution order (an
// extra dataset of the partition's between two of PP=1's).
struct FirstMissing {
  double at = -1;
  std::string path;
  bool extra = false;
};

// Records the case's first numeric divergence, `d` in PP=1's dataset `path`.
void note_first_divergence(const RunRecord& ref, const std::string& path, const TensorDiff& d,
                           int32_t request, const std::map<int32_t, int32_t>& first_forward,
                           CaseResult& c) {
  c.first_divergence = d;
  c.first_divergence_forward = forward_of(path);
  c.first_divergence_layer = layer_of(path);
  c.first_divergence_site = site_of(path);
  c.first_divergence_request = request;
  c.first_divergence_step = static_cast<int32_t>(forward_attr(ref, path, "step"));
  if (auto it = first_forward.find(c.first_divergence_layer); it != first_forward.end())
    c.first_divergence_layer_ran_before = it->second < c.first_divergence_forward;
}

// Counts the partition's datasets that PP=1 does not have. An extra dataset sits just after
// the last dataset both runs have that precedes it in the partition's order.
template <typename Selected>
void count_extra_datasets(const RunRecord& cand, const std::map<std::string, double>& ref_position,
                          const Selected& selected, FirstMissing& missing, CaseResult& c) {
  double last_common = 0;
  for (const RecordEntry& e : cand.entries()) {
    if (auto it = ref_position.find(e.path); it != ref_position.end()) {
      last_common = it->second;
      continue;
    }
    if (!selected(check_of(e.path))) continue;
    ++c.datasets_differing;
    add_failed(c, check_of(e.path));
    if (missing.at < 0 || last_common + 0.5 < missing.at)
      missing = FirstMissing{last_common + 0.5, e.path, true};
  }
}

// The case's verdict and message from its failed checks.
void conclude(CaseResult& c) {
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
  c.message += rounding_note(c);
}

}  // namespace

Status compare_records(const RunRecord& ref, const RunRecord& cand, CaseResult& c,
                       const std::vector<std::string>& checks,
                       const std::vector<std::string>& kernel_names) {
  auto selected = [&](const std::string& check) {
    return !check.empty() &&
           (checks.empty() || std::find(checks.begin(), checks.end(), check) != checks.end());
  };
  std::map<std::string, const RecordEntry*> by_path;
  for (const RecordEntry& e : cand.entries()) by_path[e.path] = &e;
  std::set<int32_t> diverged_requests;
  auto note_request = [&](const std::string& path) {
    const int32_t r = request_of(ref, path);
    if (r >= 0) diverged_requests.insert(r);
    return r;
  };
  std::map<int, TapVerdict> taps;
  const std::map<int32_t, int32_t> first_forward_of_layer = first_forward_of_layers(ref);
  // Positions in PP=1's execution order: of the first missing dataset, of the first numeric
  // divergence, of each PP=1 dataset (to place the partition's extra datasets).
  FirstMissing missing;
  double numeric_at = -1;
  std::map<std::string, double> ref_position;
  double position = 0;
  for (const RecordEntry& e : ref.entries()) {
    const std::string check = check_of(e.path);
    ref_position[e.path] = ++position;
    if (!selected(check)) continue;
    auto it = by_path.find(e.path);
    ++c.datasets_compared;
    if (it == by_path.end()) {
      note_request(e.path);
      ++c.datasets_differing;
      add_failed(c, check);
      if (missing.at < 0) missing.at = position, missing.path = e.path;
      continue;
    }
    const RecordEntry& eb = *it->second;
    const Tensor& b = eb.tensor;
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
    ASSIGN_OR_RETURN(CompareResult r, compare_entries(e, eb));
    if (r.structural_errors.empty()) note_rounding(ref, cand, e.path, e.tensor, c);
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
      note_first_divergence(ref, e.path, d, request, first_forward_of_layer, c);
    }
  }
  count_extra_datasets(cand, ref_position, selected, missing, c);
  if (missing.at >= 0 && (numeric_at < 0 || missing.at < numeric_at)) {
    c.first_missing = missing.path;
    c.first_missing_extra = missing.extra;
    c.first_missing_forward = forward_of(missing.path);
    c.first_missing_layer = layer_of(missing.path);
    const std::string prefix = layer_prefix(missing.path);
    auto other = by_path.lower_bound(prefix);
    c.first_missing_layer_partly_recorded = !missing.extra && !prefix.empty() &&
                                            other != by_path.end() &&
                                            other->first.starts_with(prefix);
  }
  if (c.first_divergence && c.first_divergence->path.ends_with("/logits")) {
    const std::string& p = c.first_divergence->path;
    const std::string norm =
        p.substr(p.starts_with('/') ? 1 : 0, p.size() - 6 - (p.starts_with('/') ? 1 : 0)) +
        "final_norm";
    c.final_norm_recorded = ref.find(norm) != nullptr && by_path.contains(norm);
  }
  c.diverged_requests.assign(diverged_requests.begin(), diverged_requests.end());
  for (const auto& [id, t] : taps) c.taps.push_back(t);
  conclude(c);
  return Status::ok();
}

void judge_case(const JudgeInput& in, CaseResult& c) {
  c.verdict = Verdict::kPass;
  if (!in.dataset_checks.empty()) {
    if (Status st = compare_records(*in.pp1, *in.candidate, c, in.dataset_checks, in.kernel_names);
        !st.is_ok())
      return set_error(c, st.message());
    if (c.datasets_compared == 0)
      return set_error(c, fmt::format("no dataset of the selected checks ({}) was recorded: "
                                      "nothing compared",
                                      fmt::join(in.dataset_checks, ", ")));
  }
  for (const CheckFailure& f : in.stage_failures) add_check_failure(c, f);
  c.not_judged.insert(c.not_judged.end(), in.not_judged.begin(), in.not_judged.end());
  const bool judged_any = !in.dataset_checks.empty() || in.stages_judged;
  if (!judged_any && in.require_judgement)
    return set_error(c, "nothing judged: the dumps give no evidence for any check");
  if (c.verdict == Verdict::kPass && c.datasets_compared == 0)
    c.message = in.stages_judged ? "no dataset compared; every stage check its evidence allows "
                                   "passed"
                                 : "no data compared";
  if (in.partition != nullptr)
    apply_evidence(*in.partition, in.pp1_unproven, in.evidence_waived, c);
}

}  // namespace splitcheck
