#include "harness/judge/expect.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace splitcheck {

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
  // A PP=1 that gave no reference judged nothing: the expectation is neither met nor missed
  // by any split point, and the one line says why (every case is the same error).
  if (!r.reference_failure.empty())
    return {fmt::format("not evaluated: PP=1 gave no reference, nothing judged ({})",
                        r.reference_failure)};
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

void judge_expect(const nlohmann::json& expect, const std::string& filter, int shard_index,
                  int shard_count, SweepResult& result) {
  const bool declared = expect.is_object() && !expect.empty();
  if (filter.empty() && shard_count <= 1) {
    result.expect_failures = evaluate_expect(expect, result);
    return;
  }
  // Errors of the block itself still count; what it expects of the whole sweep does not.
  result.expect_failures = evaluate_expect(nlohmann::json::object(), result);
  if (!declared) return;
  result.expect_not_evaluated =
      !filter.empty()
          ? fmt::format(
                "not evaluated: the run is partial (--filter \"{}\": {} split points of "
                "the scenario's); sweep without --filter to evaluate it",
                filter, result.cases.size())
          : fmt::format(
                "not evaluated on one shard (--shard {}/{}): splitcheck merge evaluates "
                "it once the shards are joined",
                shard_index, shard_count);
}

}  // namespace splitcheck
