// The bitwise comparator: two dumps (or two tensors), dataset by dataset, in execution
// order (SPEC 5.1, 5.2).
//
// Equality is on the integer bit pattern of every element: the exact lane has no
// tolerance. Consequences worth knowing:
//   - NaN equals NaN when the bits are equal (a partitioned run that reproduces the
//     golden's NaN bit for bit is conformant); NaNs with different payloads or signs
//     are a mismatch and set TensorDiff::nan_mismatch.
//   - +0.0 and -0.0 are a mismatch (ULP distance 0).
// This is exactly `h5diff -N` (NaN detection off: h5diff 1.10 then compares bits, and
// reports 0 vs -0 too). Plain `h5diff` agrees except on two NaNs with different bits,
// which it calls equal; tests/harness/compare_test.cc checks both by experiment.
//
//   ASSIGN_OR_RETURN(CompareResult r, compare_dumps(golden, candidate, {}));
//   if (!r.equal()) std::puts(verdict(r).c_str());
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "harness/dump/dump.h"
#include "kernels/status.h"
#include "kernels/tensor.h"
#include "reference/record.h"

namespace splitcheck {

// How one dataset differs. Indices point at the first mismatching element in row-major
// order: row is its index along the first axis (the token), col along the last (the
// channel).
struct TensorDiff {
  std::string path;
  std::string dtype;  // "bfloat16", "float32", "int32", "float16"
  Shape shape;
  int64_t order = 0;
  int64_t mismatches = 0;
  int64_t first_index = -1;  // flat; -1 if none
  int64_t first_row = -1;
  int64_t first_col = -1;
  uint32_t first_a_bits = 0;
  uint32_t first_b_bits = 0;
  double max_ulp = 0;  // over mismatching non-NaN pairs; |a - b| for int32
  double max_abs = 0;  // over mismatching non-NaN pairs
  double cosine = 1;   // over the whole tensor, finite pairs only, in double
  bool digest_equal = false;
  bool nan_mismatch = false;  // some mismatching pair has a NaN on either side
  // Some mismatching pair has a NaN or an infinity on either side (a NaN or infinity
  // against a finite value, infinities of opposite sign, NaNs of different bits): never
  // within the approximate lane's tolerance. Such pairs stay out of max_ulp and max_abs.
  bool non_finite_mismatch = false;
  bool within_tolerance = false;  // approximate lane only: differs, but within thresholds
};

// What to compare and how.
struct CompareOptions {
  // Upper bound of the bytes read per file at a time (two buffers of this size at most).
  size_t chunk_bytes = size_t{64} << 20;
  // Stop after the first differing or problematic dataset in execution order.
  bool stop_at_first = false;
  // Off (the default): every byte of both files is read and compared, and each file's
  // stored digests are checked against the bytes in the same pass (a mismatch is a
  // corrupt file: kInvalidInput naming it and the dataset). On (`compare
  // --trust-digests`): datasets whose stored digests are equal (dtypes and shapes too)
  // are taken as equal unread, and the result says its verdict rests on unverified
  // digests (CompareResult::digests_trusted, datasets_unverified).
  bool trust_digest = false;
  // The approximate lane (SPEC 5.2): CPU against CUDA, or an external engine against
  // the reference, where accumulation order legitimately differs. The thresholds live
  // here and only here, and are stated in the report next to every verdict:
  //  - bfloat16: 2 ULP. A bf16 value is a float32 accumulation rounded to 8 mantissa
  //    bits; a different summation order moves the float32 result by a few float32 ULP,
  //    which after rounding flips at most the last bf16 bit, and twice through a
  //    residual add.
  //  - float32 (logits): no ULP bound, because a reordered sum of thousands of terms can
  //    move a value near zero by any number of ULP; the cosine bound decides.
  //  - int32 (token ids): exact, always.
  //  - every dtype: cosine >= 0.999 over the tensor, i.e. the direction of the hidden
  //    state is kept to about 2.6 degrees; a wrong op or layer gives far less.
  //  - a NaN or an infinity that is not matched bit for bit always fails: NaN or inf
  //    against a finite value, and +inf against -inf, are divergences whatever the ULP
  //    distance (inf is one bf16 ULP from the largest finite value) or the cosine (taken
  //    over finite pairs only) say.
  bool approximate = false;
  double max_ulp_bf16 = 2;
  double max_ulp_f32 = std::numeric_limits<double>::infinity();
  //  - float16 (an outside engine's own dtype): 2 ULP, as bfloat16 and for its reasons.
  double max_ulp_f16 = 2;
  double min_cosine = 0.999;
  // Datasets whose path starts with one of these are skipped in both files.
  std::vector<std::string> ignore_prefixes;
  // The placement (`/stages`: each stage's layer range, embedding, drafter embedding and
  // measured parameter bytes; `/stage_trace`: which stage ran each dispatch event). On
  // (`compare`): judged like every other dataset and attribute when both files record
  // `/stages`; skipped, and CompareResult::placement says which file lacks it, when only
  // one does. Off: compared as any other path (unless ignore_prefixes skips them).
  bool judge_placement = false;
  // Threads that read, hash and compare datasets stored contiguously in both files, a
  // dataset at a time; 0: one per core.
  int threads = 0;
};

// What a comparison with CompareOptions::judge_placement said about placement.
enum class PlacementJudgement {
  kNotAsked,     // judge_placement off
  kJudged,       // both files record /stages: compared
  kNotJudged,    // only one does: /stages and /stage_trace skipped
  kNotRecorded,  // neither does (PP=1 dumps, external engines): nothing to judge
  // Both record /stages of different partitions (root `partition` differs): the stages
  // differ by design, so /stages and /stage_trace are skipped; the data is still compared.
  kPartitionsDiffer,
};

// An attribute that carries results and differs between the files (or exists in only
// one): `a` and `b` are its values as text, or "absent".
struct AttributeDiff {
  std::string object;  // "/spec", "/forward/3", "/" for the root
  std::string name;
  std::string a, b;
};

// The outcome of a comparison.
struct CompareResult {
  // Differing or problematic datasets, in A's execution order.
  std::vector<TensorDiff> diffs;
  std::vector<std::string> only_in_a, only_in_b;
  // The `order` (A's execution order) of only_in_a's first dataset; -1 when none.
  int64_t only_in_a_first_order = -1;
  // Shape or dtype mismatches, one human-readable line each, naming the dataset.
  std::vector<std::string> structural_errors;
  // Attributes compared by compare_dumps() that differ (docs/dump-format.md lists which).
  std::vector<AttributeDiff> attribute_diffs;
  int64_t datasets_compared = 0;
  // Every dataset compared (present in both, same dtype and shape), in A's execution order.
  std::vector<std::string> compared_paths;
  int64_t bytes_read = 0;  // data bytes read from both files together
  // CompareOptions::trust_digest was on: datasets_unverified of the datasets compared
  // were taken as equal on their stored digests, unread and unchecked.
  bool digests_trusted = false;
  int64_t datasets_unverified = 0;
  // Datasets compared after rounding: either file's writer narrowed them (`source_dtype`),
  // so equal bits there are not the engine's own. rounded_examples: the first few, each
  // "<path>: <source dtype> stored as <dtype>".
  int64_t datasets_rounded = 0;
  std::vector<std::string> rounded_examples;
  // CompareOptions::judge_placement: whether /stages and /stage_trace were judged, and
  // stages_a / stages_b, the /stages/<s> groups each file records.
  PlacementJudgement placement = PlacementJudgement::kNotAsked;
  int64_t stages_a = 0, stages_b = 0;
  std::string partition_a, partition_b;  // root `partition` of each file, when not judged
  // The root attributes of each file (compare_dumps only): who produced it, where, how.
  DumpHeader header_a, header_b;

  // True when nothing differs (diffs within the approximate lane's tolerance aside).
  bool equal() const;
  // The first diff (in execution order) that is not within tolerance, or nullptr.
  const TensorDiff* first_divergence() const;
};

// Compares dump `b` against dump `a` (the golden): every dataset's bytes, then the
// attributes that carry results. Datasets are streamed in blocks of at most
// options.chunk_bytes per file, each file's stored digests checked in the same pass;
// statistics are computed only for datasets whose bytes differ (a second pass over that
// dataset). Errors (unreadable or corrupt files, a digest that does not match its bytes,
// I/O) are a status, not a difference.
Result<CompareResult> compare_dumps(const std::string& a, const std::string& b,
                                    const CompareOptions& options = {});

// Compares two in-memory tensors as compare_dumps() compares one dataset; the result
// holds at most one diff or one structural error, and datasets_compared == 1.
Result<CompareResult> compare_tensors(const std::string& path, const Tensor& a, const Tensor& b,
                                      const CompareOptions& options = {});

// Compares two record entries as compare_tensors() compares their tensors, where either
// may be a StoredTensor (reference/record.h): its bytes are streamed from its file in
// blocks of at most options.chunk_bytes (mapped when stored contiguously) and checked
// against its digest in the same pass. A digest that does not match the bytes, or a file
// whose dataset no longer carries the digest it was loaded with, is kInvalidInput naming
// the file and the dataset. The diff is the one compare_tensors() gives for the same bytes.
Result<CompareResult> compare_entries(const RecordEntry& a, const RecordEntry& b,
                                      const CompareOptions& options = {});

// An element's bits in hex, as wide as the dtype: "0x3f80" (bfloat16, float16),
// "0x3f800000" (float32).
std::string format_bits(DType dtype, uint32_t bits);

// The DType a diff's `dtype` names (float32 for a name no DType has).
DType diff_dtype(const TensorDiff& diff);

// A dataset path as words: "/forward/0/layers/12/pre_attn" -> "forward 0 layer 12
// pre_attn", "/forward/1/taps/2" -> "forward 1 tap 2".
std::string describe_site(const std::string& path);

// One line for a diff, e.g. "layer 12 pre_attn token 3 channel 41: 0x3f80 != 0x3f81".
std::string verdict_line(const TensorDiff& diff);

// One line for an attribute difference: "attribute kind of /forward/3: \"decode\" in A,
// \"verify\" in B".
std::string attribute_line(const AttributeDiff& diff);

// One line that says what the verdict rests on: digests verified, or trusted (with the
// count of datasets taken as equal unread).
std::string digests_line(const CompareResult& result);

// One line naming the datasets compared after rounding (CompareResult::datasets_rounded):
// "compared AFTER ROUNDING: 3 datasets narrowed by their writer (...)"; "" when none.
std::string rounding_line(const CompareResult& result);

// One line about placement (CompareOptions::judge_placement): "placement judged: 3 stages
// in A, 3 in B", "placement not judged: B records no /stages (A records 3 stages)", or
// "placement not recorded by either dump"; "" when not asked.
std::string placement_line(const CompareResult& result);

// One line for a whole comparison: "equal (N datasets)" (with "on K unverified digests"
// when digests were trusted, and "K compared AFTER ROUNDING" when a writer narrowed some), or the first divergence in execution order, a structural
// error, a missing dataset, or an attribute difference.
std::string verdict(const CompareResult& result);

}  // namespace splitcheck
