// The Engine interface both engines implement, and the reference (PP=1) engine.
//
// A forward takes token ids at consecutive positions, runs the whole model and returns
// the logits and greedy next tokens of every row. Its tensors go to a RunRecord under
// "forward/<index>/" in the canonical order: input_ids, layers/<l>/{pre_attn, attn_out,
// pre_mlp, mlp_out, prefix}, output, bank, logits, taps/<k> (ascending k), next_tokens,
// dispatch, and at level full cache/<l>; then "stage_trace/<index>" (which stage ran
// each dispatch event: ignored by comparisons, since it differs by design).
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "reference/batch.h"
#include "reference/cache_snapshot.h"
#include "reference/layer.h"

namespace splitcheck {

enum class ForwardKind { kPrefill, kDecode, kVerify, kReplay };
const char* forward_kind_name(ForwardKind kind);

struct ForwardRequest {
  std::vector<int32_t> ids;
  ForwardKind kind = ForwardKind::kPrefill;
  int64_t first_position = 0;
  int32_t index = 0;  // forward index, global over the run
};

struct ForwardResult {
  Tensor logits;       // float32 [T, V]
  Tensor next_tokens;  // int32 [T]
  // Taps for a drafter, concatenated along the hidden axis in ascending id [T, n*H].
  Tensor taps;
};

// What an engine computed itself, counted where the work runs: decoder layer calls (one
// per layer per forward or serving segment), output-head calls, and drafter calls
// (observe and propose). A sweep states the counts of the engine under test next to
// PP=1's, so every report shows that each call it judges was run by that engine.
struct ComputedCalls {
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t drafter = 0;
  ComputedCalls& operator+=(const ComputedCalls& o) {
    layers += o.layers;
    heads += o.heads;
    drafter += o.drafter;
    return *this;
  }
  bool operator==(const ComputedCalls&) const = default;
};

struct EngineOptions {
  std::vector<int> capture_ids;  // sorted, unique, in [0, L]
  DumpLevel level = DumpLevel::kLayer;
  // The speculative method (spec_methods.h) and whether the last stage is a context-only
  // prefill producer: they decide where a drafter's embedding copy is held (SPEC 2.7).
  std::string spec_method = "none";
  bool context_only_producer = false;
};

// The results of one batched step (reference/batch.h), one per segment in batch order.
struct BatchResult {
  int32_t step = 0;
  std::vector<ForwardResult> segments;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Serving (SPEC 3.4): starts one batched step. Its state updates are applied first, then
  // its segments run, each on its request's own state (a step may carry updates only). Steps are
  // collected in submission order; an engine may run several at once (the partitioned engine keeps
  // up to one per stage in flight). The default refuses: the engine serves one request at a time.
  virtual Status submit(const BatchRequest& batch, bool record);
  // The oldest submitted step's results; records its forwards into `record` when the step
  // was submitted with record = true and `record` is not null.
  virtual Result<BatchResult> collect(RunRecord* record);
  // Runs one forward; records into `record` when it is not null.
  virtual Result<ForwardResult> forward(const ForwardRequest& request, RunRecord* record) = 0;
  // Starts a new sequence: empty caches.
  virtual void reset_sequence() = 0;
  // What the engine computed since it was created (drafter calls are counted by whoever
  // drives the drafter).
  virtual ComputedCalls computed() = 0;
  // Snapshots every layer's cache (before a speculative verify block).
  virtual void save_state() = 0;
  // Returns every layer's cache to the last snapshot.
  virtual void restore_state() = 0;
};

// The PP=1 engine: one process, every layer, the golden side of every comparison.
class ReferenceEngine : public Engine {
 public:
  // `weights` must hold every tensor of the model.
  static Result<std::unique_ptr<ReferenceEngine>> create(const ModelConfig& config,
                                                         WeightStore weights,
                                                         EngineOptions options);
  Result<ForwardResult> forward(const ForwardRequest& request, RunRecord* record) override;
  void reset_sequence() override;
  void save_state() override;
  void restore_state() override;
  const WeightStore& weights() const { return weights_; }
  ComputedCalls computed() override { return computed_; }
  const ModelConfig& config() const { return config_; }
  Status submit(const BatchRequest& batch, bool record) override;
  Result<BatchResult> collect(RunRecord* record) override;
  // One batched step, synchronously (what submit runs).
  Result<BatchResult> forward_batch(const BatchRequest& batch, RunRecord* record);

 private:
  struct Pending {
    Result<BatchResult> result = internal_error("not run");
    RunRecord record;
  };
  std::deque<Pending> pending_;
  RequestStateTable requests_;
  ReferenceEngine(const ModelConfig& config, WeightStore weights, EngineOptions options);
  ModelConfig config_;
  WeightStore weights_;
  EngineOptions options_;
  std::vector<LayerWeights> layers_;
  std::vector<LayerCache> caches_;
  CacheSnapshot snapshot_;
  ComputedCalls computed_;
};

// Dump helpers shared by both engines.
std::string forward_path(int32_t index);  // "forward/<index>/"
Tensor ids_tensor(const std::vector<int32_t>& ids);
// The trace as int32 [N, 4] (layer, site, kernel, aux) plus the stages int32 [N].
Tensor dispatch_table(const DispatchTrace& trace);
Tensor dispatch_stages(const DispatchTrace& trace);
// Records the forward's attributes and the head of the canonical order (input_ids).
void record_forward_start(RunRecord* record, const ForwardRequest& request);
// Records the tail of the canonical order, from output to dispatch.
void record_forward_end(RunRecord* record, const ForwardRequest& request, DumpLevel level,
                        const HeadOutput& head, const ResidualState& state,
                        const std::vector<std::pair<int, Tensor>>& taps,
                        const DispatchTrace& trace);
// Layer `layer`'s cache as the full dump level records it under "cache/<layer>": the MLA
// latent (bf16) or the KDA state (float32), flattened.
Tensor cache_tensor(const ModelConfig& config, int layer, const LayerCache& cache);
// Records the attributes that place a segment of a batched step: its request and step.
void record_segment_attrs(RunRecord* record, const Segment& segment, int32_t step);
// The segment as the single-request ForwardRequest it stands for.
ForwardRequest segment_request(const Segment& segment);
// Concatenates taps (ascending id) along the hidden axis: [T, n*H], on `device` (copied
// there from wherever each tap is; between device tensors queued, the host not waiting).
Tensor concat_taps(const std::vector<std::pair<int, Tensor>>& taps, int64_t tokens, int64_t hidden,
                   Device device = Device::kCpu);
// Where a forward's taps are: their device when they all share one, else the host. A
// forward's concatenated taps (ForwardResult::taps) stay there, for the drafter that reads
// them where its weights are.
Device taps_device(const std::vector<std::pair<int, Tensor>>& taps);

}  // namespace splitcheck
