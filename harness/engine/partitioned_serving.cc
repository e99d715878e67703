// Serving on the partitioned engine: batched steps in flight through the stages.
#include <fmt/format.h>

#include "harness/engine/partitioned_engine.h"

namespace splitcheck {

Status PartitionedEngine::submit(const BatchRequest& batch, bool record) {
  for (const Segment& seg : batch.segments) {
    if (seg.ids.empty()) return internal_error("an empty segment");
    for (int32_t id : seg.ids)
      if (id < 0 || id >= config_.vocab_size)
        return invalid_input("token id " + std::to_string(id) + " outside the vocabulary");
  }
  if (!transport_->carries_batches())
    return invalid_input(
        "serving steps (batched requests) do not travel over this transport yet; use the "
        "inproc transport");
  StageJob job;
  job.kind = JobKind::kBatch;
  job.batch = batch;
  job.wants_record = record;
  const size_t n = batch.segments.size();
  job.segment_records.resize(n);
  job.segment_caches.resize(n);
  job.segment_traces.resize(n);
  transport_->submit(std::move(job));
  ++in_flight_;
  return Status::ok();
}

Result<BatchResult> PartitionedEngine::collect(RunRecord* record) {
  if (in_flight_ == 0) return internal_error("collect with no step submitted");
  StageJob job = transport_->collect();
  --in_flight_;
  if (!job.status.is_ok()) return job.status;
  BatchResult out;
  out.step = job.batch.step;
  const size_t n = job.batch.segments.size();
  if (job.lasts.size() != n)
    return internal_error(
        fmt::format("step {}: {} results for {} segments", job.batch.step, job.lasts.size(), n));
  for (size_t i = 0; i < n; ++i) {
    const Segment& seg = job.batch.segments[i];
    const StageOutput& last = job.lasts[i];
    if (record != nullptr && job.wants_record) {
      const ForwardRequest req = segment_request(seg);
      record_forward_start(record, req);
      record_segment_attrs(record, seg, job.batch.step);
      record->append(job.segment_records[i]);
      record_forward_end(record, req, options_.level, last.head, last.state, last.taps,
                         job.segment_traces[i]);
      record->append(job.segment_caches[i]);
    }
    ForwardResult f;
    f.logits = last.head.logits;
    f.next_tokens = last.head.next_tokens;
    f.taps = concat_taps(last.taps, static_cast<int64_t>(seg.ids.size()), config_.hidden_size,
                         taps_device(last.taps));
    out.segments.push_back(std::move(f));
  }
  return out;
}

}  // namespace splitcheck
