// One operation travelling through the stages of a partition (a forward, or a cache
// reset, save or restore, or a serving step), what each stage does with it, and its
// envelope's byte form for transports that cross a process boundary. A forward's handoff
// payload travels beside the envelope in its own bytes (handoff.h), never inside it; a
// serving step's payloads (one a segment) travel inside it, as the same bytes, with the
// step's segments, state updates, per-segment records, traces and outputs.
#pragma once

#include <cstddef>
#include <vector>

#include "harness/engine/stage.h"

namespace splitcheck {

// kBatch is a serving step (SPEC 3.4): a ragged batch of segments, one payload, record,
// cache record and trace per segment.
enum class JobKind : int32_t { kForward = 0, kReset = 1, kSave = 2, kRestore = 3, kBatch = 4 };

struct StageJob {
  JobKind kind = JobKind::kForward;
  ForwardRequest request;
  std::vector<std::byte> payload;  // the handoff payload (handoff.h) for the next stage
  // A split payload's body (the device path, Stage::set_device_payloads): `payload` then
  // holds only its header. Empty otherwise. Travels beside the envelope, like `payload`.
  Tensor body;
  RunRecord record;  // per-layer tensors, appended stage by stage
  RunRecord caches;  // full dump level: every layer's cache after the forward
  DispatchTrace trace;
  bool wants_record = false;
  Status status;     // the first stage's failure; later stages pass it on
  StageOutput last;  // the last stage's output
  // kBatch: the step, one payload, record, cache record and trace per segment, and the
  // last stage's outputs.
  BatchRequest batch;
  std::vector<std::vector<std::byte>> payloads;
  std::vector<RunRecord> segment_records, segment_caches;
  std::vector<DispatchTrace> segment_traces;
  std::vector<StageOutput> lasts;
};

// Runs one job on one stage at dump level `level`: a failed job passes through untouched,
// a stage's failure becomes job.status. Exceptions propagate (the transport catches them).
void run_stage_job(Stage& stage, DumpLevel level, StageJob& job);

// Runs `job` on `stage`, turning an exception into job.status naming the stage.
void run_stage_job_guarded(Stage& stage, DumpLevel level, StageJob& job);

// The envelope: every field but `payload` and `body`, as little-endian bytes (magic "SCJE").
std::vector<std::byte> encode_job_envelope(const StageJob& job);
// Reads an envelope; a truncated, oversized or otherwise malformed one is refused
// (internal error naming what is wrong), never read past its end.
Result<StageJob> decode_job_envelope(const std::vector<std::byte>& bytes);

}  // namespace splitcheck
