// One pipeline stage of the partitioned engine: what it holds and one forward over its
// layers. The code under test lives here and in handoff.h: placement (what a stage
// loads), the receiver's zero delta, tap ownership, boundary taps and the relay.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "harness/dump/evidence.h"
#include "harness/engine/handoff.h"
#include "harness/scenario/faults.h"
#include "harness/scenario/partition.h"
#include "reference/cache_snapshot.h"
#include "reference/engine.h"
#include "reference/weight_source.h"

namespace splitcheck {

struct StageConfig {
  ModelConfig model;
  Partition partition;
  int index = 0;
  std::vector<int> capture_ids;
  DumpLevel level = DumpLevel::kLayer;
  FaultSet faults;
  std::string spec_method = "none";    // the registry's method (spec_methods.h)
  bool context_only_producer = false;  // the last stage proposes nothing
};

// What a stage holds and measures, from its store and configuration.
StageHoldings measure_holdings(const StageConfig& config, const WeightStore& weights);

// The names under which a stage stores its boundary copies (SPEC 2.6), loaded from layer
// end's self_attention_res_norm / self_attention_res_proj.
inline constexpr const char* kBoundaryAttnResNorm = "boundary_attn_res_norm";
inline constexpr const char* kBoundaryAttnResProj = "boundary_attn_res_proj";

// The placement rule (SPEC 2.6, 2.7): exactly the tensors stage `config.index` holds under
// the fixed protocol, with their shapes: its layers; embed_tokens on the first stage, and
// on the last when the registry says its drafter shares it and it is not a context-only
// producer; the output weights and lm_head on the last; the boundary copies of a non-last
// stage whose end is a capture id. `config.faults` is not consulted.
std::vector<TensorSpec> placed_tensors(const StageConfig& config);
// The bytes the placement rule allows the stage: the sum of placed_tensors' sizes (bf16).
size_t placed_parameter_bytes(const StageConfig& config);

// The target's weight bytes on one device while PP=1 and the stages of one partition
// (`stages`, every StageConfig of it) hold their weights as views of one source
// (WeightSource::view): the model once, however many hold it, plus what stages hold in
// storage of their own: the boundary copies, and a non-first stage's embedding copy for
// the drafter. What a sweep of that partition keeps resident for weights; the drafter's
// own tensors are not counted.
size_t one_device_weight_bytes(const std::vector<StageConfig>& stages);

// The placement the loading path asks the rule for: under pd.producer_embedding a
// context-only producer is placed as if it proposed (the historical embedding copy).
StageConfig loading_placement(const StageConfig& config);
// What the drafter beside stage `config.index` binds to, loaded as that stage loads it:
// its placed tensors outside its layers (the embedding copy, final norms, lm_head). The
// `mpi` transport's rank 0 drives generation, so its drafter binds to these.
Result<WeightStore> load_stage_head(const StageConfig& config, WeightSource& source);

// The result of one stage's forward: a payload for the next stage, or (last stage) the
// head's output, the final state and every tap in id order.
struct StageOutput {
  std::vector<std::byte> payload;  // the whole payload; on the device path only its header
  Tensor body;                     // the device path: the payload's body (handoff.h)
  HeadOutput head;
  ResidualState state;
  std::vector<std::pair<int, Tensor>> taps;
};

class Stage {
 public:
  // Loads only what the stage holds and refuses configurations it cannot run
  // (StatusCode::kConfigRejected), e.g. a boundary copy that was never loaded.
  static Result<std::unique_ptr<Stage>> create(const StageConfig& config, WeightSource& source);

  // One forward over [begin, end). `in` is the previous stage's payload (null on the first);
  // when `in_body` is given and not empty, `in` is only the header of a split payload and
  // `in_body` its body (handoff.h), wherever it lives.
  Result<StageOutput> run(const ForwardRequest& request, const std::vector<std::byte>* in,
                          RunRecord* record, DispatchTrace* trace, const Tensor* in_body = nullptr);
  // Whether the payloads this stage sends are split, the body built on the stage's device
  // (StageOutput::body), when its weights are on the device (backend cuda). Set by a
  // transport whose channel sends bodies from device memory (nccl); off by default, and
  // without effect on a stage that computes on the host.
  void set_device_payloads(bool on) { device_payloads_ = on; }
  bool sends_device_payloads() const {
    return device_payloads_ && weights_.device() != Device::kCpu;
  }
  void reset_sequence();
  void save_state();
  void restore_state();
  // The layer and head calls this stage computed since it was created.
  const ComputedCalls& computed() const { return computed_; }
  // At the full dump level: each of the stage's layers' cache, as PP=1 records it
  // ("forward/<f>/cache/<l>", reference/engine.h), after forward `forward`.
  void record_caches(int32_t forward, RunRecord& record) const;
  const StageHoldings& holdings() const { return holdings_; }
  // What the stage holds and owns (the last stage's embedding copy and lm_head for the
  // drafter, a non-last stage's boundary copies).
  const WeightStore& weights() const { return weights_; }
  int index() const { return cfg_.index; }
  // Whether the stage takes tap 0 to be resident here (computed here, never received).
  // Under the fixed protocol only where layer 0 runs (SPEC 2.7); under
  // tap.embed_resident_by_module wherever the embedding module is present, as the bug
  // decided it: a last stage holding the drafter's copy wrongly believes it.
  bool tap0_resident() const;
  // Whether tap 0 travels in the payloads: the engine decides it once for every stage
  // from the last stage's tap0_resident() (the sender and receivers must agree).
  void set_tap0_relayed(bool relayed) { tap0_relayed_ = relayed; }
  // Serving (SPEC 3.4, harness/engine/stage_batch.cc): one batched step over the stage's
  // layers. First the step's state updates (what the last stage's results asked for) are
  // applied to the stage's own per-request state table; then every segment runs on its
  // request's caches. `in` holds one payload per segment (ignored on the first stage);
  // `in_bodies`, where it holds a non-empty tensor for a segment, that segment's split
  // payload's body (`in` then holds its header), as run() takes `in_body`. `records` and
  // `traces` (one per segment, records may be null) receive what each segment's forward
  // records. Returns one StageOutput per segment, its payload sent as run() sends one
  // (split on the device path). The faults spec.rollback_last_stage_only,
  // batch.stale_microbatch_state and prefill.chunk_token_dropped live on this path.
  Result<std::vector<StageOutput>> run_batch(const BatchRequest& batch,
                                             const std::vector<std::vector<std::byte>>& in,
                                             const std::vector<Tensor>& in_bodies,
                                             std::vector<RunRecord>* records,
                                             std::vector<DispatchTrace>& traces);
  // At the full dump level: the caches of `request` after forward `forward`.
  void record_request_caches(int32_t forward, int32_t request, RunRecord& record);
  bool is_first() const { return cfg_.index == 0; }
  bool is_last() const { return cfg_.index == cfg_.partition.stages() - 1; }

 private:
  explicit Stage(StageConfig cfg) : cfg_(std::move(cfg)) {}
  // The handoff receiver (SPEC 2.7): decodes forward `forward`'s payload of T rows into
  // `st` (P = hidden, the bank rows sent, an explicit zero delta unless the first layer
  // writes a block) and appends the taps it carries. A malformed payload is its status.
  // `body`, when not null, is a split payload's body and `in` its header.
  Status receive_payload(int32_t forward, int64_t T, const std::vector<std::byte>& in,
                         const Tensor* body, ResidualState& st,
                         std::vector<std::pair<int, Tensor>>& taps) const;
  // The handoff sender: forward `forward`'s payload (folded hidden, the bank rows up to
  // this stage's end, the relayed taps) from the state after the stage's last layer.
  std::vector<std::byte> send_payload(int32_t forward, int64_t T, const ResidualState& st,
                                      const std::vector<std::pair<int, Tensor>>& taps) const;
  // The same payload split (sends_device_payloads): its header into `out.payload`, its body
  // built on the stage's device by device copies into `out.body`.
  void send_device_payload(int32_t forward, int64_t T, const ResidualState& st,
                           const std::vector<std::pair<int, Tensor>>& taps, StageOutput& out) const;
  // The payload a non-last stage hands on, into `out`: split when it sends device payloads
  // (send_device_payload), whole bytes otherwise (send_payload). A forward's and a serving
  // segment's alike.
  void hand_on_payload(int32_t forward, int64_t T, StageOutput& out) const;
  // Serving's update path: what the last stage's results asked of every stage (rollback,
  // release) applied to the stage's table of per-request state.
  void apply_updates(const std::vector<StateUpdate>& updates);
  // Whose state each segment of `batch` uses (its own request's, but see
  // batch.stale_microbatch_state); remembers the batch's requests.
  std::vector<int32_t> state_owners(const BatchRequest& batch);
  // A batched step's outputs handed on: the head's and the taps on the last stage, the
  // payload on any other; each request's next position.
  void finish_batch(const BatchRequest& batch, const std::vector<int32_t>& owner,
                    std::vector<HeadOutput>& heads, std::vector<StageOutput>& outs);
  // The kernel context of this stage's calls in forward `forward` (the dispatch override
  // of fault dispatch.stage_context_fallback on a non-first stage).
  KernelContext context(DispatchTrace* trace, int32_t forward) const;
  bool captured(int k) const;
  bool owns_tap(int k) const;
  // Ids of taps that arrive in the payload: captured and owned by an earlier stage.
  std::vector<int32_t> incoming_tap_ids() const;
  // Whether tap 0 travels in the payload (set_tap0_relayed).
  bool relays_tap0() const { return tap0_relayed_; }
  void init_caches();
  // The tap read after layer l (tap l+1), when it is captured: an inner tap, the output
  // read at L, or the boundary tap with the stage's own copies.
  void read_tap_after(const KernelContext& ctx, int l, const ResidualState& st,
                      std::vector<std::pair<int, Tensor>>* taps) const;
  // Runs the stage's layers on `st`; reads the captured taps.
  void run_layers(const KernelContext& ctx, ResidualState& st, const LayerRecording& rec,
                  std::vector<std::pair<int, Tensor>>* taps);

  StageConfig cfg_;
  StageRange range_;
  WeightStore weights_;
  std::vector<LayerWeights> layers_;  // index l - range_.begin
  std::vector<LayerCache> caches_;
  CacheSnapshot snapshot_;
  Tensor boundary_norm_, boundary_proj_;  // layer end's AttnRes vectors, for the boundary tap
  Tensor rebound_;  // fault weights.rebound_after_load: the copy the first layer re-binds to
  StageHoldings holdings_;
  bool tap0_relayed_ = true;
  bool device_payloads_ = false;
  ComputedCalls computed_;
  // Serving: the stage's per-request state (created on first use) and the request ids of
  // every batched step it ran, in order (what batch.stale_microbatch_state reads).
  std::unique_ptr<RequestStateTable> requests_;
  std::vector<std::vector<int32_t>> memberships_;
};

}  // namespace splitcheck
