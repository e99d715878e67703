#include "harness/judge/partition_evidence.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "harness/scenario/checks.h"
#include "kernels/dispatch.h"

namespace splitcheck {
namespace {

// Dispatch sites whose events belong to the stage that owns their layer: a drafter's
// (draft) and a capture's (tap) are left out, since they may run beside another stage.
bool site_owned_by_layer(int32_t site) {
  return site != static_cast<int32_t>(Site::kTap) && site != static_cast<int32_t>(Site::kDraft);
}

// What the dump's own dispatch trace (`/forward/<f>/dispatch` and `/stage_trace/<f>`, the
// stage of each event) says against the partition: an event of a stage past the last, of a
// layer outside its stage's range, or declared stages that ran nothing of their layers.
// One line per kind, naming the first event.
void stage_trace_contradictions(const LoadedDump& d, const Partition& part,
                                std::vector<std::string>& bad) {
  std::string past, outside, other;
  int64_t outside_count = 0;
  std::set<int32_t> seen, layers_traced;
  for (const RecordEntry& e : d.record.entries()) {
    if (e.path.rfind("stage_trace/", 0) != 0) continue;
    const std::string f = e.path.substr(12);
    const Tensor* table = d.record.find("forward/" + f + "/dispatch");
    const Tensor& st = e.tensor;
    if (table == nullptr || st.dtype() != DType::kI32 || st.shape().size() != 1 ||
        st.dim(0) != table->dim(0)) {
      if (other.empty())
        other = fmt::format("its /{} does not give one stage per event of /forward/{}/dispatch",
                            e.path, f);
      continue;
    }
    const int32_t* stage = st.data<int32_t>();
    const int32_t* row = table->data<int32_t>();
    for (int64_t i = 0; i < st.dim(0); ++i) {
      const int32_t s = stage[i], layer = row[i * 4], site = row[i * 4 + 1];
      if (s < 0 || s >= part.stages()) {
        if (past.empty())
          past = fmt::format("its /{} names stage {} (event {}), of {} stage(s)", e.path, s, i,
                             part.stages());
        continue;
      }
      seen.insert(s);
      if (layer < 0 || !site_owned_by_layer(site)) continue;
      layers_traced.insert(layer);
      const StageRange r = part.stage(s);
      if (layer >= r.begin && layer < r.end) continue;
      if (outside_count++ == 0)
        outside =
            fmt::format("its /{} has stage {} run layer {} (event {}), outside its layers {}-{}",
                        e.path, s, layer, i, r.begin, r.end);
    }
  }
  for (std::string* line : {&other, &past})
    if (!line->empty()) bad.push_back(std::move(*line));
  if (outside_count > 0)
    bad.push_back(outside_count == 1
                      ? outside
                      : fmt::format("{} (and {} more such events)", outside, outside_count - 1));
  std::vector<int> idle;
  for (int s = 0; s < part.stages(); ++s) {
    const StageRange r = part.stage(s);
    const auto l = layers_traced.lower_bound(r.begin);
    if (!seen.count(s) && l != layers_traced.end() && *l < r.end) idle.push_back(s);
  }
  if (!idle.empty())
    bad.push_back(
        fmt::format("its dispatch trace shows events of {} of the {} stages: {} {} ran "
                    "none of {} layers",
                    seen.size(), part.stages(), idle.size() == 1 ? "stage" : "stages",
                    fmt::join(idle, ", "), idle.size() == 1 ? "its" : "their"));
}

}  // namespace

PartitionEvidence partition_evidence(const LoadedDump& d, const Partition& part, int layers) {
  PartitionEvidence ev;
  auto& bad = ev.contradictions;
  if (auto it = d.root.find("partition");
      it != d.root.end() && !it->second.empty() && it->second != part.layout())
    bad.push_back(fmt::format("its partition attribute says \"{}\", asked \"{}\"", it->second,
                              part.layout()));
  if (!d.layers.empty() && *d.layers.rbegin() >= layers)
    bad.push_back(fmt::format(
        "it holds tensors of layer {}, past the last of the {} layers the scenario names "
        "(num_hidden_layers)",
        *d.layers.rbegin(), layers));
  if (part.stages() == 1 && !d.layers.empty() && *d.layers.rbegin() < layers &&
      static_cast<int>(d.layers.size()) != layers)
    bad.push_back(fmt::format("its tensors cover {} of the {} layers", d.layers.size(), layers));
  stage_trace_contradictions(d, part, bad);
  if (d.stages.empty()) {
    ev.missing = "the dump carries no /stages (the layer range each stage ran)";
    return ev;
  }
  if (static_cast<int>(d.stages.size()) != part.stages())
    bad.push_back(
        fmt::format("{} stage(s) in its /stages, {} asked", d.stages.size(), part.stages()));
  for (int s = 0; s < std::min<int>(part.stages(), static_cast<int>(d.stages.size())); ++s) {
    const StageRange want = part.stage(s), got = d.stages[s].range;
    if (want.begin != got.begin || want.end != got.end)
      bad.push_back(fmt::format("stage {} ran layers {}-{}, asked {}-{}", s, got.begin, got.end,
                                want.begin, want.end));
  }
  return ev;
}

std::vector<std::string> judged_dataset_checks(const std::vector<std::string>& selected,
                                               const RunRecord& pp1,
                                               std::vector<NotJudged>& not_judged) {
  std::set<std::string> present;
  for (const RecordEntry& e : pp1.entries()) present.insert(dataset_check(e.path));
  std::vector<std::string> judged;
  for (const std::string& c : selected) {
    if (!check_is(c, CheckKind::kDataset)) continue;
    if (present.count(c)) {
      judged.push_back(c);
      continue;
    }
    const std::string what = c == "dispatch"     ? "no dispatch trace"
                             : c == "acceptance" ? "no /spec"
                             : c == "taps"       ? "no taps"
                             : c == "logits"     ? "no logits"
                             : c == "tokens"     ? "no token datasets"
                                                 : "no per-layer tensors";
    not_judged.push_back({c, "the PP=1 dump carries " + what});
  }
  return judged;
}

}  // namespace splitcheck
