#include "harness/sweep/bisect.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "reference/partial_files.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

BisectFinding finding_of(const CaseResult& c) {
  BisectFinding f;
  f.key = c.key;
  f.layout = c.layout;
  f.cuts = c.cuts;
  f.verdict = c.verdict;
  f.cause = classify_cause(c);
  f.message = c.message;
  f.request = c.first_divergence_request;
  f.step = c.first_divergence_step;
  if (!c.first_missing.empty()) {
    f.dataset = c.first_missing;
    f.forward = c.first_missing_forward;
    f.layer = c.first_missing_layer;
    f.site = c.first_missing.substr(c.first_missing.rfind('/') + 1);
  } else if (c.first_divergence) {
    f.dataset = c.first_divergence->path;
    f.forward = c.first_divergence_forward;
    f.layer = c.first_divergence_layer;
    f.site = c.first_divergence_site;
    f.token = c.first_divergence->first_row;
    f.channel = c.first_divergence->first_col;
  } else if (c.dispatch) {
    f.forward = c.dispatch->forward;
    f.layer = c.dispatch->layer;
    f.site = c.dispatch->site;
  }
  return f;
}

// What is wrong with the structure of `s`'s partition `key` ("layers 28-29 owned by no
// stage"); empty when it owns every layer exactly once or `s` has no such partition.
std::string ownership_problem_of(const Scenario& s, const std::string& key) {
  Result<std::vector<Partition>> parts =
      enumerate_partitions(s.partitions, s.model.num_hidden_layers, FaultSet{s.faults});
  if (!parts.is_ok()) return "";
  for (const Partition& p : *parts)
    if (p.key() == key) return p.ownership_problem();
  return "";
}

// One reduction attempt: the scenario as JSON, parsed, swept, classified.
struct Trial {
  bool same = false;
  BisectFinding finding;
};

}  // namespace

std::optional<BisectFinding> first_failure(const SweepResult& r) {
  for (const CaseResult& c : r.cases) {
    // An interrupted case proves nothing: it is no failure to bisect.
    if (c.verdict == Verdict::kPass || c.verdict == Verdict::kSkipped ||
        c.verdict == Verdict::kInterrupted)
      continue;
    return finding_of(c);
  }
  return std::nullopt;
}

ScenarioSize scenario_size(const Scenario& s) {
  ScenarioSize z;
  z.layers = s.model.num_hidden_layers;
  z.prompts = s.workload.prompts;
  z.max_new_tokens = s.workload.max_new_tokens;
  z.max_prompt_tokens = s.workload.max_prompt_tokens;
  z.max_in_flight = s.serving.enabled ? s.serving.max_in_flight : 0;
  Result<std::vector<Partition>> parts =
      enumerate_partitions(s.partitions, z.layers, FaultSet{s.faults});
  z.partitions = parts.is_ok() ? static_cast<int>(parts->size()) : -1;
  return z;
}

Status write_json_atomically(const std::string& path, const json& j) {
  const fs::path target(path);
  const fs::path tmp = target.string() + fmt::format(".tmp.{}", ::getpid());
  const PartialFile removed_on_interrupt(tmp.string());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return invalid_input(fmt::format("{}: cannot open for writing", tmp.string()));
    f << j.dump(2) << "\n";
    f.flush();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return internal_error(fmt::format("{}: write failed", tmp.string()));
    }
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return internal_error(fmt::format("{}: cannot rename into place: {}", path, ec.message()));
  }
  return Status::ok();
}

namespace {

// The split points in enumeration order, a batch at a time, up to the first failing batch:
// cases are independent, so this finds what a full sweep would find first.
Result<std::optional<BisectFinding>> first_failing_split(const Scenario& s,
                                                         const SweepOptions& sweep_options,
                                                         const std::string& base_dir, int threads,
                                                         BisectResult& out) {
  ASSIGN_OR_RETURN(
      std::vector<Partition> parts,
      enumerate_partitions(s.partitions, s.model.num_hidden_layers, FaultSet{s.faults}));
  // A partition whose cuts do not say what it owns (a planner's ranges that leave layers
  // unowned, or own them twice) is swept through the scenario's own partition spec: an
  // explicit list of its cuts would be a different, well-formed partition.
  const bool expressible_as_cuts = std::all_of(
      parts.begin(), parts.end(), [](const Partition& p) { return p.ownership_problem().empty(); });
  const size_t batch =
      std::max<size_t>(8, threads > 0 ? static_cast<size_t>(threads)
                                      : static_cast<size_t>(std::thread::hardware_concurrency()));
  std::optional<BisectFinding> first;
  for (size_t begin = 0; begin < parts.size() && !first; begin += batch) {
    json j = resolved_scenario_json(s);
    if (expressible_as_cuts) {
      json list = json::array();
      for (size_t i = begin; i < std::min(parts.size(), begin + batch); ++i)
        list.push_back(parts[i].cuts());
      j["partitions"] = {{"pp", s.partitions.pp}, {"splits", list}};
    } else {
      begin = parts.size();
    }
    ASSIGN_OR_RETURN(Scenario part, parse_scenario(j, s.name, base_dir));
    ASSIGN_OR_RETURN(SweepResult r, run_sweep(part, sweep_options));
    ++out.sweeps;
    first = first_failure(r);
  }
  return first;
}

// Shrinks a failing scenario one change at a time, keeping each change that still fails
// with the same cause (out.steps says which were kept and which dropped, and why).
class Shrinker {
 public:
  Shrinker(const Scenario& s, const SweepOptions& sweep_options, std::string base_dir,
           std::string cause, BisectResult& out)
      : s_(s),
        sweep_options_(sweep_options),
        base_dir_(std::move(base_dir)),
        cause_(std::move(cause)),
        out_(out),
        best_(resolved_scenario_json(s)) {
    best_["name"] = s.name + "-repro";
    json expect = {{"verdict", "divergent"}};
    if (s.expect.contains("caught_by")) expect["caught_by"] = s.expect["caught_by"];
    best_["expect"] = expect;
  }

  json& best() { return best_; }

  // Sweeps `j` and says whether it still fails with the cause.
  Result<Trial> trial(const json& j) {
    ASSIGN_OR_RETURN(Scenario t, parse_scenario(j, s_.name + "-repro", base_dir_));
    SweepOptions o = sweep_options_;
    o.threads = 1;
    ASSIGN_OR_RETURN(SweepResult r, run_sweep(t, o));
    ++out_.sweeps;
    Trial tr;
    if (std::optional<BisectFinding> f = first_failure(r)) {
      tr.finding = *f;
      if (f->verdict == Verdict::kConfigRejected && !ownership_problem_of(t, f->key).empty())
        tr.finding.cause = kCauseStructural;
      tr.same = tr.finding.cause == cause_;
    }
    return tr;
  }

  // Applies `mutate` to a copy of the best scenario and keeps it when it still fails; true
  // when it was kept.
  Result<bool> attempt(const std::string& what, const std::function<bool(json&)>& mutate) {
    json j = best_;
    if (!mutate(j)) return false;
    Result<Trial> t = trial(j);
    if (!t.is_ok()) {
      out_.steps.push_back(fmt::format("{}: dropped ({})", what, t.status().message()));
      return false;
    }
    if (!t->same) {
      out_.steps.push_back(fmt::format("{}: dropped (cause became {})", what,
                                       t->finding.cause.empty() ? "none" : t->finding.cause));
      return false;
    }
    best_ = std::move(j);
    out_.steps.push_back(fmt::format("{}: kept", what));
    return true;
  }

  // The first of `values` (smallest first) that `apply` accepts and that keeps the failure.
  Status first_kept(const std::vector<int>& values, const std::string& what,
                    const std::function<bool(json&, int)>& apply) {
    for (int n : values) {
      ASSIGN_OR_RETURN(bool kept, attempt(fmt::format("{} -> {}", what, n),
                                          [&](json& j) { return apply(j, n); }));
      if (kept) break;
    }
    return Status::ok();
  }

 private:
  const Scenario& s_;
  const SweepOptions& sweep_options_;
  const std::string base_dir_;
  const std::string cause_;
  BisectResult& out_;
  json best_;
};

// The failing split alone; this one must keep the failure or there is nothing to shrink.
// A structural verdict keeps the scenario's own partition spec (it enumerates to the one
// malformed partition, or to it among well-formed ones that pass).
Status isolate_split(const Scenario& s, const BisectFinding& first, bool structural,
                     Shrinker& shrink, BisectResult& out) {
  json j = shrink.best();
  if (!structural)
    j["partitions"] = {{"pp", s.partitions.pp}, {"splits", json::array({first.cuts})}};
  ASSIGN_OR_RETURN(Trial t, shrink.trial(j));
  if (!t.same) {
    return internal_error(fmt::format("{}: {} alone does not reproduce the cause {} (got {})",
                                      s.name, first.key, first.cause,
                                      t.finding.cause.empty() ? "pass" : t.finding.cause));
  }
  shrink.best() = std::move(j);
  out.steps.push_back(
      structural ? fmt::format("partitions: as the scenario plans them ({}): kept", first.key)
                 : fmt::format("partitions: only {}: kept", first.key));
  if (structural) {
    // Nothing was computed for the partition: no layer, token or request to narrow. Only
    // PP=1's share of the repro shrinks, so that replaying it is quick.
    out.steps.push_back(
        "structural verdict at configuration: nothing was computed for this partition, so "
        "there is no numeric divergence to narrow");
  }
  return Status::ok();
}

// Fewer layers first, since every later trial then costs less: multiples of the AttnRes
// block size S that still hold every cut, so each layer keeps its place in its block;
// capture ids past the end are dropped and the final capture (id L) follows the new L.
Status shrink_layers(const Scenario& s, const BisectFinding& first, Shrinker& shrink) {
  const int layers = s.model.num_hidden_layers;
  const int block = std::max(1, s.model.attn_res_block_size);
  const int last_cut = first.cuts.empty() ? 0 : first.cuts.back();
  std::vector<int> candidates;
  for (int l = block; l < layers; l += block)
    if (l > last_cut && l >= s.partitions.pp) candidates.push_back(l);
  return shrink.first_kept(candidates, "num_hidden_layers", [layers](json& j, int l) {
    j["model"]["overrides"]["num_hidden_layers"] = l;
    std::vector<int> ids;
    for (int id : j["capture_ids"].get<std::vector<int>>()) {
      if (id == layers) {
        ids.push_back(l);
      } else if (id <= l) {
        ids.push_back(id);
      }
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    j["capture_ids"] = ids;
    return true;
  });
}

// Fewer decode steps (a serving workload's steps follow from them), shorter prompts, fewer
// prompts, and for serving a lower concurrency, each smallest first.
Status shrink_workload(const Scenario& s, Shrinker& shrink) {
  RETURN_IF_ERROR(shrink.first_kept({1, 2, 4}, "max_new_tokens", [](json& j, int n) {
    if (j["workload"]["max_new_tokens"].get<int>() <= n) return false;
    j["workload"]["max_new_tokens"] = n;
    return true;
  }));
  RETURN_IF_ERROR(shrink.first_kept({4, 8}, "max_prompt_tokens", [](json& j, int n) {
    const int cur = j["workload"]["max_prompt_tokens"].get<int>();
    if (cur != 0 && cur <= n) return false;
    j["workload"]["max_prompt_tokens"] = n;
    return true;
  }));
  // Fewer prompts: 1, 2, 4, ... below the current count. A serving fault may need several
  // requests in flight to show, so one prompt is not enough to try. Explicit arrival steps
  // keep one per remaining prompt.
  std::vector<int> prompts;
  for (int n = 1; n < s.workload.prompts; n *= 2) prompts.push_back(n);
  RETURN_IF_ERROR(shrink.first_kept(prompts, "prompts", [](json& j, int n) {
    if (j["workload"]["prompts"].get<int>() <= n) return false;
    j["workload"]["prompts"] = n;
    if (j.contains("serving") && j["serving"].contains("arrival_steps") &&
        j["serving"]["arrival_steps"].is_array() && j["serving"]["arrival_steps"].size() > 0) {
      json& steps = j["serving"]["arrival_steps"];
      steps.erase(steps.begin() + std::min<std::ptrdiff_t>(n, std::ssize(steps)), steps.end());
    }
    return true;
  }));
  if (!s.serving.enabled) return Status::ok();
  std::vector<int> in_flight;
  for (int n = 1; n < s.serving.max_in_flight; n *= 2) in_flight.push_back(n);
  return shrink.first_kept(in_flight, "serving.max_in_flight", [](json& j, int n) {
    if (j["serving"]["max_in_flight"].get<int>() <= n) return false;
    j["serving"]["max_in_flight"] = n;
    return true;
  });
}

}  // namespace

Result<BisectResult> bisect(const Scenario& s, const BisectOptions& options) {
  const std::string where = s.source_path.empty() ? s.name : s.source_path;
  if (s.transport != "inproc")
    return invalid_input(fmt::format(
        "bisect refused ({}): {} runs its stages over the {} transport, and bisect sweeps "
        "its reduced scenarios in this process with in-process stages only; set "
        "\"transport\": \"inproc\" to bisect the partition's arithmetic, or sweep it under "
        "mpirun to judge the transport",
        kRefusedTransport, where, s.transport));
  BisectResult out;
  out.before = scenario_size(s);
  // Bisect judges split points only: serving every request alone (the batch invariance)
  // is the sweep's business and would double the cost of every trial.
  SweepOptions sweep_options;
  sweep_options.threads = options.threads;
  sweep_options.requests_alone = false;
  const std::string base_dir =
      s.source_path.empty() ? std::string(".") : fs::path(s.source_path).parent_path().string();
  ASSIGN_OR_RETURN(std::optional<BisectFinding> first,
                   first_failing_split(s, sweep_options, base_dir, options.threads, out));
  if (!first) {
    out.after = out.before;
    return out;
  }
  out.conformant = false;
  out.finding = *first;
  if (const std::string problem = ownership_problem_of(s, first->key); !problem.empty()) {
    out.finding.cause = kCauseStructural;
    out.finding.message = fmt::format("partition {}: {}", first->layout, problem);
  }
  const bool structural = out.finding.cause == kCauseStructural;
  first->cause = out.finding.cause;
  Shrinker shrink(s, sweep_options, base_dir, out.finding.cause, out);
  RETURN_IF_ERROR(isolate_split(s, *first, structural, shrink, out));
  // Not with a checkpoint (its shapes are fixed), nor for a structural verdict (the layer
  // count is what the planner got wrong).
  if (s.checkpoint.empty() && !structural) RETURN_IF_ERROR(shrink_layers(s, *first, shrink));
  RETURN_IF_ERROR(shrink_workload(s, shrink));
  // Where the repro fails: a serving repro names its own first diverging request and step,
  // which may differ from the full scenario's once requests are dropped.
  ASSIGN_OR_RETURN(Scenario repro, parse_scenario(shrink.best(), s.name + "-repro", base_dir));
  out.after = scenario_size(repro);
  out.repro = resolved_scenario_json(repro);
  return out;
}

}  // namespace splitcheck
