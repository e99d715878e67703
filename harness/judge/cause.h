// The likely cause of a case that is not a pass: ONE rule book, read by every form that
// names a cause (sweep's console, report.json, report.html and summary.md, `compare` and
// `bisect`). A cause follows from where the first divergence lies in PP=1's execution order,
// whatever the fault behind it, so a new fault needs no special case; docs/bisect.md lists
// every cause with what to look at.
//
//   const std::string cause = classify_cause(c);  // "dispatch mismatch", "head: lm_head", ...
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "harness/dump/compare.h"
#include "harness/judge/result.h"

namespace splitcheck {

// The causes, in the order classify_cause tests them:
// - partition structure: some layer is owned by no stage or by two; a verdict at
//   configuration, before anything runs (nothing numeric to minimise);
// - config-rejected: the partition was refused at configuration for another reason;
// - error: the case did not run to a dump (a crash, a timeout, a corrupt file);
// - partition evidence: an external engine's dump does not show the partition asked;
// - a dataset missing or extra before any numeric divergence (the four below);
// - head not tied to the embedding: PP=1's head shares the embedding's storage and a stage's
//   does not (a stage check, named before any logits differ);
// - embedding: another embedding or memory rule failed on a stage;
// - NaN: a NaN where PP=1 has a number;
// - tap source: a tap is the first thing to differ;
// - dispatch mismatch: a kernel variant differs at or before the first numeric divergence;
// - handoff input differs: the first divergence is the `pre_attn` of a non-first stage's
//   first layer, the first value computed from what the stage received;
// - carried state: a layer differs although an earlier forward computed it identically
//   and everything before it in this forward is identical: its caches, positions or
//   per-request state carried from an earlier forward differ (serving, rollback);
// - layer weights: a layer differs in the first forward that computes it, with identical
//   inputs and the same kernel variants: the stage computes it with other weights;
// - head: final norm / head: lm_head / sampling: every layer is equal and the first
//   divergence is the hidden state entering the head or the final norm's output
//   (`output`, `final_norm`), the logits where the final norm's output was recorded equal,
//   or the tokens chosen from equal logits; "head: final norm or lm_head" for the logits
//   where the run records no `final_norm` to tell the two apart;
// - propagated from earlier: any other first divergence outside the layers (the bank, a
//   forward's input ids, a drafter's proposals) that nothing before it explains.
inline constexpr const char* kCauseStructural = "partition structure";
inline constexpr const char* kCauseConfigRejected = "config-rejected";
inline constexpr const char* kCauseError = "error";
inline constexpr const char* kCausePartitionEvidence = "partition evidence";
// A dataset PP=1 has and the partition lacks comes first in PP=1's execution order: every
// dataset of a layer in that forward ("layer not computed"), some of its sites while others
// are there ("site not recorded": a recording gap, not a PP bug), or a dataset outside the
// layers ("dataset not computed"); or the partition has one PP=1 lacks ("dataset only in the
// partition").
inline constexpr const char* kCauseLayerNotComputed = "layer not computed";
inline constexpr const char* kCauseSiteNotRecorded = "site not recorded";
inline constexpr const char* kCauseDatasetNotComputed = "dataset not computed";
inline constexpr const char* kCauseOnlyInPartition = "dataset only in the partition";
inline constexpr const char* kCauseHeadNotTied = "head not tied to the embedding";
inline constexpr const char* kCauseEmbedding = "embedding";
inline constexpr const char* kCauseNan = "NaN";
inline constexpr const char* kCauseTapSource = "tap source";
inline constexpr const char* kCauseDispatch = "dispatch mismatch";
inline constexpr const char* kCauseHandoff = "handoff input differs";
inline constexpr const char* kCauseCarriedState = "carried state";
inline constexpr const char* kCauseLayerWeights = "layer weights";
inline constexpr const char* kCauseHeadNorm = "head: final norm";
inline constexpr const char* kCauseHeadLmHead = "head: lm_head";
inline constexpr const char* kCauseHeadEither = "head: final norm or lm_head";
inline constexpr const char* kCauseSampling = "sampling";
inline constexpr const char* kCausePropagated = "propagated from earlier";

// Every cause above, in the order classify_cause tests them (docs/bisect.md's table).
std::span<const char* const> known_causes();

// The first place a run departs from PP=1 in PP=1's execution order, as the dataset alone
// shows it: a dataset missing from the run, one only in the run, or one whose values differ.
struct FirstDeparture {
  std::string path;  // "forward/0/layers/3/attn_out" (no leading slash)
  enum class Kind { kMissing, kExtra, kDiffers } kind = Kind::kDiffers;
  // kMissing, a layer's dataset: the run records some other dataset of that layer in that
  // forward (a site not recorded, not a layer not computed).
  bool layer_partly_recorded = false;
  bool nan = false;  // kDiffers: a NaN where PP=1 has a number (or the reverse)
  // kDiffers, the logits: the forward's final norm output (`final_norm`) was recorded by both
  // runs (and, coming earlier, compared equal), so the lm_head is what differs.
  bool final_norm_recorded = false;
};

// The cause the first departure names by itself: the four missing-or-extra causes, NaN, and
// for a difference outside the layers the head's causes (head: final norm, head: lm_head,
// sampling); "" where the case's other evidence decides (a layer's values, a tap, another
// dataset outside the layers).
std::string departure_cause(const FirstDeparture& d);

// Names the likely cause of a non-pass case (one of the kCause* strings); "" for a pass, a
// skipped or an interrupted case, which show none.
std::string classify_cause(const CaseResult& c);

// The cause of a `compare` of two dumps that differ, from what the two files alone show:
// departure_cause on the first divergence in A's execution order; for a layer's values,
// "dispatch mismatch" when a dispatch trace differs too; "propagated from earlier" for
// another dataset outside the layers; "" when the files are equal or when two files alone
// cannot tell (a layer's values: its weights, its handoff or its carried state; bisect the
// scenario to tell them apart).
std::string compare_cause(const CompareResult& r);

// Whether `path` ("forward/0/layers/3/attn_out", with or without a leading slash) is a
// layer's dataset, and the "forward/<f>/layers/<l>/" prefix of its layer (else "").
std::string layer_prefix(std::string_view path);

}  // namespace splitcheck
