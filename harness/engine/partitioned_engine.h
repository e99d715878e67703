// The partitioned engine: one Stage per range of the partition, reached through a
// Transport (engine/transport.h): by default `inproc`, each stage on its own thread,
// handing encoded payloads through bounded queues; `mpi`, each stage its own process. It
// implements Engine, so the generation loop that drives PP=1 drives it unchanged, and it
// records the same logical dump layout as the reference engine, at every dump level. An
// exception in a stage becomes the failing status of the operation it ran.
#pragma once

#include <memory>
#include <vector>

#include "harness/engine/stage.h"
#include "harness/engine/transport.h"

namespace splitcheck {

class PartitionedEngine : public Engine {
 public:
  // Builds every stage (loading only what each holds) through `transport` (null: inproc).
  // A stage that refuses its configuration makes this return StatusCode::kConfigRejected.
  static Result<std::unique_ptr<PartitionedEngine>> create(
      const ModelConfig& config, const Partition& partition, const EngineOptions& options,
      const FaultSet& faults, WeightSource& source, TransportFactory* transport = nullptr);

  Result<ForwardResult> forward(const ForwardRequest& request, RunRecord* record) override;
  void reset_sequence() override { control(JobKind::kReset); }
  void save_state() override { control(JobKind::kSave); }
  void restore_state() override { control(JobKind::kRestore); }

  // Serving (SPEC 3.4): a step enters the first stage at once and travels on while the
  // caller submits the next, so while stage s works on micro-batch k, stage s-1 works on
  // k+1. The caller keeps a request in at most one micro-batch in flight. A transport that
  // does not carry batched steps refuses them (invalid input, naming the transport).
  Status submit(const BatchRequest& batch, bool record) override;
  Result<BatchResult> collect(RunRecord* record) override;

  std::vector<StageHoldings> holdings() const { return transport_->holdings(); }
  // The layer and head calls the stages computed, summed. Read after a run.
  ComputedCalls computed() override { return transport_->computed(); }
  // The last stage's weights: the drafter's target lm_head and embedding copy live here.
  const WeightStore& last_stage_weights() const { return transport_->last_stage_weights(); }
  // Records /stages/<s>/ (layer range, embedding, owned taps, parameter bytes).
  void record_holdings(RunRecord& record) const;

 private:
  PartitionedEngine() = default;
  StageJob round_trip(StageJob job);
  void control(JobKind kind);

  ModelConfig config_;
  EngineOptions options_;
  std::unique_ptr<Transport> transport_;
  int in_flight_ = 0;  // batched steps submitted and not yet collected
};

}  // namespace splitcheck
