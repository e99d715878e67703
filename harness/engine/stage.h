// One pipeline stage of the partitioned engine: what it holds and one forward over its
// layers. The code under test lives here and in handoff.h: placement (what a stage
// loads), the receiver's zero delta, tap ownership, boundary taps and the relay.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "harness/engine/handoff.h"
#include "harness/engine/partition.h"
#include "harness/verdict/faults.h"
#include "reference/engine.h"
#include "reference/layer_memo.h"
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

// What a stage holds (SPEC 5.4): recorded under /stages/<s>/ in the dump.
struct StageHoldings {
  int index = 0;
  StageRange range;
  std::string embedding;  // real | missing | copy-for-drafter
  std::vector<int> owned_taps;
  size_t parameter_bytes = 0;
  size_t tensors = 0;
};

// The result of one stage's forward: a payload for the next stage, or (last stage) the
// head's output, the final state and every tap in id order.
struct StageOutput {
  std::vector<std::byte> payload;
  HeadOutput head;
  ResidualState state;
  std::vector<std::pair<int, Tensor>> taps;
};

class Stage {
 public:
  // Loads only what the stage holds and refuses configurations it cannot run
  // (StatusCode::kConfigRejected), e.g. a boundary copy that was never loaded.
  static Result<std::unique_ptr<Stage>> create(const StageConfig& config, WeightSource& source);

  // One forward over [begin, end). `in` is the previous stage's payload (null on the first).
  Result<StageOutput> run(const ForwardRequest& request, const std::vector<std::byte>* in,
                          RunRecord* record, DispatchTrace* trace);
  void reset_sequence();
  void save_state();
  void restore_state();
  // From now on, looks every layer call up in `memo` (filled by PP=1, frozen) per `mode`
  // (reference/layer_memo.h): keys are computed from the weights as this stage loaded
  // them and from its own state, so only inputs equal to PP=1's are ever reused.
  void set_memo(const LayerMemo* memo, ReuseMode mode);
  // What the stage's layer calls did with the memo.
  const ReuseStats& reuse_stats() const { return reuse_stats_; }
  const StageHoldings& holdings() const { return holdings_; }
  // What the stage holds (the last stage's embedding copy and lm_head for the drafter).
  const WeightStore& weights() const { return weights_; }
  bool is_first() const { return cfg_.index == 0; }
  bool is_last() const { return cfg_.index == cfg_.partition.stages() - 1; }

 private:
  explicit Stage(StageConfig cfg) : cfg_(std::move(cfg)) {}
  bool captured(int k) const;
  bool owns_tap(int k) const;
  // Ids of taps that arrive in the payload: captured and owned by an earlier stage.
  std::vector<int32_t> incoming_tap_ids() const;
  // Whether tap 0 travels in the payload (always, unless a fault says otherwise).
  bool relays_tap0() const;
  void init_caches();
  // The tap read after layer l (tap l+1), when it is captured: an inner tap, the output
  // read at L, or the boundary tap with the stage's own copies.
  void read_tap_after(const KernelContext& ctx, int l, const ResidualState& st,
                      std::vector<std::pair<int, Tensor>>* taps) const;
  // Runs the stage's layers on `st` (through the memo when one is set); reads the
  // captured taps.
  Status run_layers(const KernelContext& ctx, ResidualState& st, const LayerRecording& rec,
                    std::vector<std::pair<int, Tensor>>* taps);

  StageConfig cfg_;
  StageRange range_;
  WeightStore weights_;
  std::vector<LayerWeights> layers_;  // index l - range_.begin
  std::vector<LayerCache> caches_, snapshot_;
  Tensor boundary_norm_, boundary_proj_;  // layer end's AttnRes vectors, for the boundary tap
  StageHoldings holdings_;
  const LayerMemo* memo_ = nullptr;
  ReuseMode memo_mode_ = ReuseMode::kOff;
  std::vector<Digest128> layer_digests_;  // of layers_, as loaded, while a memo is set
  ReuseStats reuse_stats_;
};

}  // namespace splitcheck
