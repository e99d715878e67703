#include "harness/engine/partitioned_engine.h"

#include <fmt/format.h>

namespace splitcheck {

Result<std::unique_ptr<PartitionedEngine>> PartitionedEngine::create(
    const ModelConfig& config, const Partition& partition, const EngineOptions& options,
    const FaultSet& faults, WeightSource& source, const LayerMemo* memo, ReuseMode reuse) {
  if (const std::string problem = partition.ownership_problem(); !problem.empty())
    return config_rejected(fmt::format("partition {}: {}", partition.layout(), problem));
  std::unique_ptr<PartitionedEngine> e(new PartitionedEngine());
  e->config_ = config;
  e->options_ = options;
  for (int s = 0; s < partition.stages(); ++s) {
    StageConfig sc{config,
                   partition,
                   s,
                   options.capture_ids,
                   options.level,
                   faults,
                   options.spec_method,
                   options.context_only_producer};
    ASSIGN_OR_RETURN(std::unique_ptr<Stage> stage, Stage::create(sc, source));
    stage->set_memo(memo, reuse);
    e->stages_.push_back(std::move(stage));
  }
  // Tap 0 travels unless the last stage takes it to be resident (Stage::tap0_resident).
  const bool tap0_relayed = !e->stages_.back()->tap0_resident();
  for (auto& stage : e->stages_) stage->set_tap0_relayed(tap0_relayed);
  for (int s = 0; s <= partition.stages(); ++s)
    e->queues_.push_back(std::make_unique<BoundedQueue<Job>>(2));
  for (size_t s = 0; s < e->stages_.size(); ++s)
    e->threads_.emplace_back([engine = e.get(), s] { engine->stage_loop(s); });
  return e;
}

ReuseStats PartitionedEngine::reuse_stats() const {
  ReuseStats sum;
  for (const auto& s : stages_) sum += s->reuse_stats();
  return sum;
}

PartitionedEngine::~PartitionedEngine() {
  for (auto& q : queues_) q->close();
  for (std::thread& t : threads_) t.join();
}

void PartitionedEngine::stage_loop(size_t s) {
  Stage& stage = *stages_[s];
  while (std::optional<Job> job = queues_[s]->pop()) {
    // An exception must not end the thread (std::terminate): it fails this operation,
    // and the job travels on so the caller sees the status.
    try {
      run_job(stage, *job);
    } catch (const std::exception& e) {
      job->status = internal_error(fmt::format("stage {} (layers {}-{}): exception: {}", s,
                                               stage.holdings().range.begin,
                                               stage.holdings().range.end, e.what()));
    } catch (...) {
      job->status = internal_error(fmt::format("stage {}: unknown exception", s));
    }
    if (!queues_[s + 1]->push(std::move(*job))) return;
  }
}

void PartitionedEngine::run_job(Stage& stage, Job& job) const {
  if (!job.status.is_ok()) return;  // an earlier stage failed: pass the status on
  switch (job.kind) {
    case JobKind::kReset:
      stage.reset_sequence();
      break;
    case JobKind::kSave:
      stage.save_state();
      break;
    case JobKind::kRestore:
      stage.restore_state();
      break;
    case JobKind::kBatch:
      run_batch_job(stage, job, options_.level);
      break;
    case JobKind::kForward: {
      const std::vector<std::byte>* in = stage.is_first() ? nullptr : &job.payload;
      Result<StageOutput> out =
          stage.run(job.request, in, job.wants_record ? &job.record : nullptr, &job.trace);
      if (!out.is_ok()) {
        job.status = out.status();
        break;
      }
      if (job.wants_record && options_.level == DumpLevel::kFull)
        stage.record_caches(job.request.index, job.caches);
      if (stage.is_last()) {
        job.last = std::move(*out);
        job.payload.clear();
      } else {
        job.payload = std::move(out->payload);
      }
      break;
    }
  }
}

PartitionedEngine::Job PartitionedEngine::round_trip(Job job) {
  queues_.front()->push(std::move(job));
  std::optional<Job> done = queues_.back()->pop();
  if (!done) {
    Job failed;
    failed.status = internal_error("partitioned engine stopped");
    return failed;
  }
  return std::move(*done);
}

void PartitionedEngine::control(JobKind kind) {
  Job job;
  job.kind = kind;
  round_trip(std::move(job));
}

Result<ForwardResult> PartitionedEngine::forward(const ForwardRequest& req, RunRecord* record) {
  for (int32_t id : req.ids) {
    if (id < 0 || id >= config_.vocab_size)
      return invalid_input("token id " + std::to_string(id) + " outside the vocabulary");
  }
  Job job;
  job.kind = JobKind::kForward;
  job.request = req;
  job.wants_record = record != nullptr;
  Job done = round_trip(std::move(job));
  if (!done.status.is_ok()) return done.status;
  record_forward_start(record, req);
  if (record != nullptr) record->append(done.record);
  const StageOutput& last = done.last;
  record_forward_end(record, req, options_.level, last.head, last.state, last.taps, done.trace);
  if (record != nullptr) record->append(done.caches);
  ForwardResult out;
  out.logits = last.head.logits;
  out.next_tokens = last.head.next_tokens;
  out.taps = concat_taps(last.taps, static_cast<int64_t>(req.ids.size()), config_.hidden_size);
  return out;
}

const WeightStore& PartitionedEngine::last_stage_weights() const {
  return stages_.back()->weights();
}

std::vector<StageHoldings> PartitionedEngine::holdings() const {
  std::vector<StageHoldings> h;
  for (const auto& s : stages_) h.push_back(s->holdings());
  return h;
}

void PartitionedEngine::record_holdings(RunRecord& record) const {
  for (const auto& s : stages_) {
    const StageHoldings& h = s->holdings();
    const std::string g = "stages/" + std::to_string(h.index);
    record.set_attr(g, "layer_begin", int64_t{h.range.begin});
    record.set_attr(g, "layer_end", int64_t{h.range.end});
    record.set_attr(g, "embedding", h.embedding);
    record.set_attr(g, "parameter_bytes", static_cast<int64_t>(h.parameter_bytes));
    std::string taps;
    for (int k : h.owned_taps) taps += (taps.empty() ? "" : ",") + std::to_string(k);
    record.set_attr(g, "owned_taps", taps);
  }
}

}  // namespace splitcheck
