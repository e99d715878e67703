#include "harness/judge/cause.h"

#include <algorithm>

namespace splitcheck {
namespace {

constexpr const char* kCauses[] = {
    kCauseStructural,
    kCauseConfigRejected,
    kCauseError,
    kCausePartitionEvidence,
    kCauseLayerNotComputed,
    kCauseSiteNotRecorded,
    kCauseDatasetNotComputed,
    kCauseOnlyInPartition,
    kCauseHeadNotTied,
    kCauseEmbedding,
    kCauseNan,
    kCauseTapSource,
    kCauseDispatch,
    kCauseHandoff,
    kCauseCarriedState,
    kCauseLayerWeights,
    kCauseHeadNorm,
    kCauseHeadLmHead,
    kCauseHeadEither,
    kCauseSampling,
    kCausePropagated,
};

bool has_check(const CaseResult& c, const std::string& check) {
  return std::find(c.failed_checks.begin(), c.failed_checks.end(), check) != c.failed_checks.end();
}

// The dispatch mismatch comes no later than the first numeric divergence.
bool dispatch_first(const CaseResult& c) {
  if (!c.dispatch) return false;
  if (!c.first_divergence) return true;
  const DispatchMismatch& d = *c.dispatch;
  if (d.forward != c.first_divergence_forward) return d.forward < c.first_divergence_forward;
  // Within one forward: a layer-less divergence (taps, output, logits) comes after layers.
  return c.first_divergence_layer < 0 || d.layer <= c.first_divergence_layer;
}

// The first layer of every stage but the first: the layers that read a handoff.
bool is_stage_first_layer(const CaseResult& c, int32_t layer) {
  return std::find(c.cuts.begin(), c.cuts.end(), layer) != c.cuts.end();
}

std::string_view last_component(std::string_view path) {
  const size_t p = path.rfind('/');
  return p == std::string_view::npos ? path : path.substr(p + 1);
}

// The head's causes for a dataset outside the layers that differs first; "" for another.
std::string head_cause(std::string_view path, bool final_norm_recorded) {
  if (path.starts_with('/')) path.remove_prefix(1);
  if (!path.starts_with("forward/")) {
    const bool emitted = path.starts_with("generation/") && path.ends_with("/emitted");
    return emitted ? kCauseSampling : "";
  }
  const std::string_view site = last_component(path);
  if (site == "output" || site == "final_norm") return kCauseHeadNorm;
  if (site == "logits") return final_norm_recorded ? kCauseHeadLmHead : kCauseHeadEither;
  if (site == "next_tokens") return kCauseSampling;
  return "";
}

FirstDeparture missing_of(const CaseResult& c) {
  FirstDeparture d;
  d.path = c.first_missing;
  d.kind = c.first_missing_extra ? FirstDeparture::Kind::kExtra : FirstDeparture::Kind::kMissing;
  d.layer_partly_recorded = c.first_missing_layer_partly_recorded;
  return d;
}

}  // namespace

std::span<const char* const> known_causes() { return kCauses; }

std::string layer_prefix(std::string_view path) {
  if (path.starts_with('/')) path.remove_prefix(1);
  const size_t p = path.find("/layers/");
  if (!path.starts_with("forward/") || p == std::string_view::npos) return "";
  const size_t end = path.find('/', p + 8);
  return end == std::string_view::npos ? "" : std::string(path.substr(0, end + 1));
}

std::string departure_cause(const FirstDeparture& d) {
  const bool in_layer = !layer_prefix(d.path).empty();
  switch (d.kind) {
    case FirstDeparture::Kind::kExtra:
      return kCauseOnlyInPartition;
    case FirstDeparture::Kind::kMissing:
      if (!in_layer) return kCauseDatasetNotComputed;
      return d.layer_partly_recorded ? kCauseSiteNotRecorded : kCauseLayerNotComputed;
    case FirstDeparture::Kind::kDiffers:
      if (d.nan) return kCauseNan;
      return in_layer ? "" : head_cause(d.path, d.final_norm_recorded);
  }
  return "";
}

std::string classify_cause(const CaseResult& c) {
  if (c.verdict == Verdict::kPass || c.verdict == Verdict::kSkipped ||
      c.verdict == Verdict::kInterrupted)
    return "";  // nothing to explain, or stopped: it shows no cause
  if (c.verdict == Verdict::kConfigRejected)
    return has_check(c, "partition") ? kCauseStructural : kCauseConfigRejected;
  if (c.verdict == Verdict::kError) return kCauseError;
  if (c.verdict == Verdict::kUnproven || c.evidence == "contradicted")
    return kCausePartitionEvidence;
  if (!c.first_missing.empty()) return departure_cause(missing_of(c));
  if (!c.stage_failure_cause.empty()) return c.stage_failure_cause;
  if (has_check(c, "embedding") || has_check(c, "memory")) return kCauseEmbedding;
  if (c.first_divergence && c.first_divergence->nan_mismatch) return kCauseNan;
  // The layers, logits and output all agree and the first divergence is a tap (at most
  // the tap's own dispatch differs): the tap's source is wrong. What differs after it
  // (a drafter's proposals and acceptance, the verify blocks' ids) follows from the tap.
  const bool first_is_tap =
      c.first_divergence && c.first_divergence->path.find("/taps/") != std::string::npos;
  const bool dispatch_before =
      c.dispatch && c.dispatch->site != "tap" && c.dispatch->forward <= c.first_divergence_forward;
  if (first_is_tap && !dispatch_before) return kCauseTapSource;
  if (dispatch_first(c)) return kCauseDispatch;
  if (c.first_divergence && c.first_divergence_layer >= 0) {
    // Everything before the first divergence in execution order is identical, so this
    // layer's inputs within the forward are too.
    if (c.first_divergence_site == "pre_attn" && is_stage_first_layer(c, c.first_divergence_layer))
      return kCauseHandoff;
    return c.first_divergence_layer_ran_before ? kCauseCarriedState : kCauseLayerWeights;
  }
  if (c.first_divergence) {
    FirstDeparture d;
    d.path = c.first_divergence->path;
    d.final_norm_recorded = c.final_norm_recorded;
    if (std::string head = departure_cause(d); !head.empty()) return head;
  }
  return kCausePropagated;
}

std::string compare_cause(const CompareResult& r) {
  if (r.equal()) return "";
  const TensorDiff* diff = r.first_divergence();
  FirstDeparture d;
  if (!r.only_in_a.empty() && (diff == nullptr || r.only_in_a_first_order < diff->order)) {
    d.path = r.only_in_a.front();
    d.kind = FirstDeparture::Kind::kMissing;
    const std::string prefix = layer_prefix(d.path);
    auto in_layer = [&](const std::string& p) {
      return !prefix.empty() && layer_prefix(p) == prefix;
    };
    // compared_paths holds every dataset both files have, equal or not.
    d.layer_partly_recorded =
        std::any_of(r.compared_paths.begin(), r.compared_paths.end(), in_layer);
    return departure_cause(d);
  }
  if (diff == nullptr) return r.only_in_b.empty() ? "" : kCauseOnlyInPartition;
  d.path = diff->path;
  d.nan = diff->nan_mismatch;
  if (d.path.ends_with("/logits")) {
    const std::string norm = d.path.substr(0, d.path.size() - 6) + "final_norm";
    d.final_norm_recorded =
        std::find(r.compared_paths.begin(), r.compared_paths.end(), norm) != r.compared_paths.end();
  }
  if (std::string cause = departure_cause(d); !cause.empty()) return cause;
  if (layer_prefix(d.path).empty()) return kCausePropagated;
  const bool dispatch_differs = std::any_of(
      r.diffs.begin(), r.diffs.end(),
      [](const TensorDiff& t) { return t.path.ends_with("/dispatch") && !t.within_tolerance; });
  return dispatch_differs ? kCauseDispatch : "";
}

}  // namespace splitcheck
