// One pipeline stage of the partitioned engine: what it holds and one forward over its
// layers. The code under test lives here and in handoff.h: placement (what a stage
// loads), the receiver's zero delta, tap ownership, boundary taps and the relay.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "harness/engine/handoff.h"
#include "harness/engine/partition.h"
#include "harness/engine/prefix_reuse.h"
#include "harness/verdict/faults.h"
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
  // At the full dump level: each of the stage's layers' cache, as PP=1 records it
  // ("forward/<f>/cache/<l>", reference/engine.h), after forward `forward`.
  void record_caches(int32_t forward, RunRecord& record) const;
  // Lets a first stage (that is not also the last) follow PP=1's log (prefix_reuse.h).
  // Call before the first operation; reuse_stats() says why it did not, when it did not.
  void follow_log(PrefixReuse reuse);
  // What the stage did with the log (zero without one).
  ReuseStats reuse_stats() const;
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
  // Runs the stage's layers on `st`; reads the captured taps unless `taps` is null.
  void run_layers(const KernelContext& ctx, ResidualState& st, const LayerRecording& rec,
                  std::vector<std::pair<int, Tensor>>* taps);
  // The first stage's prefix from PP=1's log: state after its last layer, dispatch
  // events, per-layer tensors and taps below its end.
  void take_prefix(const LoggedForward& f, StageOutput& out, RunRecord* record,
                   DispatchTrace* trace) const;
  // Verify mode: what the stage computed equals what take_prefix would have given.
  Status check_prefix(const LoggedForward& f, const StageOutput& out, const RunRecord* record,
                      size_t entries_before, const DispatchTrace& trace,
                      size_t events_before) const;
  // Leaving the log (mode on): caches as if every matched operation had been computed.
  void rebuild_caches();
  // One engine operation, told to the follower; true when the cached prefix applies.
  const LoggedForward* follow(EngineOp op, const ForwardRequest* request);

  StageConfig cfg_;
  StageRange range_;
  WeightStore weights_;
  std::vector<LayerWeights> layers_;  // index l - range_.begin
  std::vector<LayerCache> caches_, snapshot_;
  Tensor boundary_norm_, boundary_proj_;  // layer end's AttnRes vectors, for the boundary tap
  StageHoldings holdings_;
  std::unique_ptr<PrefixFollower> follower_;  // first stage following PP=1's log
  std::string reuse_unused_because_ = "reuse is off";
};

}  // namespace splitcheck
