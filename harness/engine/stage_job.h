// One operation travelling through the stages of a partition (a forward, or a cache
// reset, save or restore, or a serving step), what each stage does with it, and its
// envelope's byte form for transports that cross a process boundary. Handoff payloads
// (handoff.h) travel beside the envelope, never inside it: a forward's one, a serving
// step's one a segment, alike (job_payloads); the envelope carries a step's segments,
// state updates, per-segment records, traces and outputs.
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
  // last stage's outputs. `bodies`, beside `payloads` (one each, or none), holds a split
  // payload's body as `body` does a forward's; payloads and bodies travel beside the
  // envelope, like `payload`.
  BatchRequest batch;
  std::vector<std::vector<std::byte>> payloads;
  std::vector<Tensor> bodies;
  std::vector<RunRecord> segment_records, segment_caches;
  std::vector<DispatchTrace> segment_traces;
  std::vector<StageOutput> lasts;
};

// Runs one job on one stage at dump level `level`: a failed job passes through untouched,
// a stage's failure becomes job.status. Exceptions propagate (the transport catches them).
void run_stage_job(Stage& stage, DumpLevel level, StageJob& job);

// Runs `job` on `stage`, turning an exception into job.status naming the stage.
void run_stage_job_guarded(Stage& stage, DumpLevel level, StageJob& job);

// The handoff payloads a job hands to the next stage, in order, each with its body (empty
// unless split): a serving step's, one a segment; any other job's one (a forward's; empty
// for a reset, save or restore). What a transport across processes sends beside the
// envelope, the same way for every kind of job.
struct PayloadRef {
  const std::vector<std::byte>* bytes;
  const Tensor* body;
};
std::vector<PayloadRef> job_payloads(const StageJob& job);
// Puts received payloads (job_payloads' order) where `job` (its kind decoded from the
// envelope) takes them; a job that is not a serving step takes exactly one, else the
// count is refused (internal error naming it).
Status take_job_payloads(StageJob& job, std::vector<std::vector<std::byte>> payloads,
                         std::vector<Tensor> bodies);

// The envelope: every field but the payloads and bodies (`payload`, `body`, `payloads`,
// `bodies`), as little-endian bytes (magic "SCJE").
std::vector<std::byte> encode_job_envelope(const StageJob& job);
// Reads an envelope; a truncated, oversized or otherwise malformed one is refused
// (internal error naming what is wrong), never read past its end.
Result<StageJob> decode_job_envelope(const std::vector<std::byte>& bytes);

}  // namespace splitcheck
