// What a run records beside its datasets, and what every verdict about a stage rests on:
// where each stage's layers are (StageRange), what each stage holds (StageHoldings, its
// /stages/<s>/ group), what the drafter was bound to (DrafterPlacement), the speculative
// figures (AcceptanceFigures, /spec) and where each stage ran (StagesPlacement). Plain
// values, written by the engines that measure them and read by the judge, so that the
// judge needs no engine to decide.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace splitcheck {

// Stage s of a partition runs layers [begin, end).
struct StageRange {
  int begin = 0;
  int end = 0;
};

// What a stage holds (SPEC 5.4), read by the engine from its own WeightStore: recorded under
// /stages/<s>/ in the dump. `embedding` says whether the store holds embed_tokens (real on
// the first stage, copy-for-drafter elsewhere, missing when it does not); parameter_bytes
// is measured from the storage the stage owns (WeightStore::parameter_bytes).
struct StageHoldings {
  int index = 0;
  StageRange range;
  std::string embedding;  // real | missing | copy-for-drafter
  std::vector<int> owned_taps;
  size_t parameter_bytes = 0;
  size_t tensors = 0;
  size_t storages = 0;  // distinct storages under the tensors (two names over one count once)
  // The storage of its embed_tokens as a label, "storage:<i>" (i: its place among the
  // distinct storages, in name order); empty when it holds none.
  std::string embedding_storage;
  // The storage of its lm_head.weight, the same way; empty when it holds no head.
  std::string head_storage;
};

// Where the drafter runs and what it was bound to (SPEC 5.4). same_object_as_target is
// measured: the bound embedding has the storage of the stage's embed_tokens.
struct DrafterPlacement {
  std::string method = "none";
  int stage = 0;
  std::string embedding_source = "none";  // target | own | missing | none (no drafter)
  bool same_object_as_target = false;
  std::string refusal;  // the load-time refusal, when one was made
};

// The acceptance figures of SPEC 5.5 for a report.
struct AcceptanceFigures {
  bool speculative = false;
  int64_t steps = 0;
  int64_t accepted = 0;
  double acceptance_rate = 0;
  double tokens_per_forward = 0;
  double mean_accepted = 0;
  // Steps that accepted a tokens, a = 0..gamma (SPEC 3.3); empty without a drafter.
  std::vector<int64_t> accepted_histogram;
  int strict_correct = 0;
  int flexible_correct = 0;
  int prompts = 0;
};

// Where stage `stage` of the sweep's partitions ran.
struct StagePlacement {
  int stage = 0;
  int rank = 0;        // the MPI rank (0 under inproc: a thread of rank 0's process)
  int64_t pid = 0;     // the OS process
  std::string host;    // gethostname()
  std::string device;  // "cpu", or the GPU: "cuda:0 (NVIDIA H200)"
};

// How a sweep's stages ran. Stage s runs at the same place in every partition (under `mpi`
// and `nccl` on rank s), so one row a stage covers every partition of the sweep.
struct StagesPlacement {
  std::string transport;  // "inproc", "mpi", "nccl"
  std::vector<StagePlacement> stages;
};

}  // namespace splitcheck
