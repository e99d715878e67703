// The partitioned engine: one Stage per range of the partition, each on its own thread
// (the `inproc` transport), handing encoded payloads through bounded queues. It
// implements Engine, so the generation loop that drives PP=1 drives it unchanged, and it
// records the same logical dump layout as the reference engine, at every dump level. An
// exception in a stage thread becomes the failing status of the operation it ran.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "harness/engine/stage.h"
#include "harness/transport/transport.h"

namespace splitcheck {

class PartitionedEngine : public Engine {
 public:
  // Builds every stage (loading only what each holds) and starts their threads. A stage
  // that refuses its configuration makes this return StatusCode::kConfigRejected. With a
  // `memo` (filled by PP=1 and frozen, outliving this engine), every stage looks its layer
  // calls up in it per `reuse` (reference/layer_memo.h).
  static Result<std::unique_ptr<PartitionedEngine>> create(
      const ModelConfig& config, const Partition& partition, const EngineOptions& options,
      const FaultSet& faults, WeightSource& source, const LayerMemo* memo = nullptr,
      ReuseMode reuse = ReuseMode::kOff);
  ~PartitionedEngine() override;

  Result<ForwardResult> forward(const ForwardRequest& request, RunRecord* record) override;
  void reset_sequence() override { control(JobKind::kReset); }
  void save_state() override { control(JobKind::kSave); }
  void restore_state() override { control(JobKind::kRestore); }

  // Serving (SPEC 3.4): a step enters the first stage at once and travels on while the
  // caller submits the next, so while stage s works on micro-batch k, stage s-1 works on
  // k+1. The caller keeps a request in at most one micro-batch in flight.
  Status submit(const BatchRequest& batch, bool record) override;
  Result<BatchResult> collect(RunRecord* record) override;

  std::vector<StageHoldings> holdings() const;
  // What the stages' layer calls did with the memo, summed. Read after a run.
  ReuseStats reuse_stats() const;
  // The last stage's weights: the drafter's target lm_head and embedding copy live here.
  const WeightStore& last_stage_weights() const;
  // Records /stages/<s>/ (layer range, embedding, owned taps, parameter bytes).
  void record_holdings(RunRecord& record) const;

 private:
  enum class JobKind { kForward, kReset, kSave, kRestore, kBatch };
  struct Job {
    JobKind kind = JobKind::kForward;
    ForwardRequest request;
    std::vector<std::byte> payload;
    RunRecord record;  // per-layer tensors, appended stage by stage
    RunRecord caches;  // full dump level: every layer's cache after the forward
    DispatchTrace trace;
    bool wants_record = false;
    Status status;
    StageOutput last;  // the last stage's output
    // kBatch: the step, one payload, record, cache record and trace per segment, and the
    // last stage's outputs.
    BatchRequest batch;
    std::vector<std::vector<std::byte>> payloads;
    std::vector<RunRecord> segment_records, segment_caches;
    std::vector<DispatchTrace> segment_traces;
    std::vector<StageOutput> lasts;
  };

  PartitionedEngine() = default;
  void stage_loop(size_t s);
  // One job on one stage (stage_loop catches what it throws).
  void run_job(Stage& stage, Job& job) const;
  // One batched step on one stage (partitioned_serving.cc).
  static void run_batch_job(Stage& stage, Job& job, DumpLevel level);
  Job round_trip(Job job);
  void control(JobKind kind);

  ModelConfig config_;
  EngineOptions options_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<std::unique_ptr<BoundedQueue<Job>>>
      queues_;  // queues_[s] feeds stage s; last is results
  std::vector<std::thread> threads_;
  int in_flight_ = 0;  // batched steps submitted and not yet collected
};

}  // namespace splitcheck
