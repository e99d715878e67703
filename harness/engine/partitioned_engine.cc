#include "harness/engine/partitioned_engine.h"

#include <fmt/format.h>

#include "harness/engine/inproc.h"

namespace splitcheck {

Result<std::unique_ptr<PartitionedEngine>> PartitionedEngine::create(
    const ModelConfig& config, const Partition& partition, const EngineOptions& options,
    const FaultSet& faults, WeightSource& source, TransportFactory* transport) {
  if (const std::string problem = partition.ownership_problem(); !problem.empty())
    return config_rejected(fmt::format("partition {}: {}", partition.layout(), problem));
  std::unique_ptr<PartitionedEngine> e(new PartitionedEngine());
  e->config_ = config;
  e->options_ = options;
  std::vector<StageConfig> stages;
  for (int s = 0; s < partition.stages(); ++s) {
    stages.push_back(StageConfig{config, partition, s, options.capture_ids, options.level, faults,
                                 options.spec_method, options.context_only_producer});
  }
  InprocFactory inproc;
  TransportFactory& factory = transport != nullptr ? *transport : inproc;
  ASSIGN_OR_RETURN(e->transport_, factory.connect(stages, source));
  return e;
}

StageJob PartitionedEngine::round_trip(StageJob job) {
  transport_->submit(std::move(job));
  return transport_->collect();
}

void PartitionedEngine::control(JobKind kind) {
  StageJob job;
  job.kind = kind;
  round_trip(std::move(job));
}

Result<ForwardResult> PartitionedEngine::forward(const ForwardRequest& req, RunRecord* record) {
  for (int32_t id : req.ids) {
    if (id < 0 || id >= config_.vocab_size)
      return invalid_input("token id " + std::to_string(id) + " outside the vocabulary");
  }
  StageJob job;
  job.kind = JobKind::kForward;
  job.request = req;
  job.wants_record = record != nullptr;
  StageJob done = round_trip(std::move(job));
  if (!done.status.is_ok()) return done.status;
  record_forward_start(record, req);
  if (record != nullptr) record->append(done.record);
  const StageOutput& last = done.last;
  record_forward_end(record, req, options_.level, last.head, last.state, last.taps, done.trace);
  if (record != nullptr) record->append(done.caches);
  ForwardResult out;
  out.logits = last.head.logits;
  out.next_tokens = last.head.next_tokens;
  out.taps = concat_taps(last.taps, static_cast<int64_t>(req.ids.size()), config_.hidden_size,
                         taps_device(last.taps));
  return out;
}

void PartitionedEngine::record_holdings(RunRecord& record) const {
  for (const StageHoldings& h : holdings()) {
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
