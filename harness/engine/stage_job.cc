#include "harness/engine/stage_job.h"

#include <fmt/format.h>

#include <cstring>
#include <string>

#include "harness/engine/wire.h"

namespace splitcheck {

namespace {

// One batched serving step on one stage.
void run_batch_job(Stage& stage, DumpLevel level, StageJob& job) {
  std::vector<RunRecord>* records = job.wants_record ? &job.segment_records : nullptr;
  Result<std::vector<StageOutput>> outs =
      stage.run_batch(job.batch, job.payloads, job.bodies, records, job.segment_traces);
  if (!outs.is_ok()) {
    job.status = outs.status();
    return;
  }
  if (job.wants_record && level == DumpLevel::kFull) {
    for (size_t i = 0; i < job.batch.segments.size(); ++i)
      stage.record_request_caches(job.batch.segments[i].index, job.batch.segments[i].request,
                                  job.segment_caches[i]);
  }
  job.payloads.clear();
  job.bodies.clear();
  if (stage.is_last()) {
    job.lasts = std::move(*outs);
  } else {
    for (StageOutput& o : *outs) {
      job.payloads.push_back(std::move(o.payload));
      job.bodies.push_back(std::move(o.body));
    }
  }
}

}  // namespace

void run_stage_job(Stage& stage, DumpLevel level, StageJob& job) {
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
      run_batch_job(stage, level, job);
      break;
    case JobKind::kForward: {
      const std::vector<std::byte>* in = stage.is_first() ? nullptr : &job.payload;
      Result<StageOutput> out = stage.run(job.request, in, job.wants_record ? &job.record : nullptr,
                                          &job.trace, &job.body);
      if (!out.is_ok()) {
        job.status = out.status();
        break;
      }
      if (job.wants_record && level == DumpLevel::kFull)
        stage.record_caches(job.request.index, job.caches);
      if (stage.is_last()) {
        job.last = std::move(*out);
        job.payload.clear();
        job.body = Tensor();
      } else {
        job.payload = std::move(out->payload);
        job.body = std::move(out->body);
      }
      break;
    }
  }
}

void run_stage_job_guarded(Stage& stage, DumpLevel level, StageJob& job) {
  // An exception must not end a stage's thread or process: it fails this operation, and
  // the job travels on so the caller sees the status.
  const StageRange& r = stage.holdings().range;
  try {
    run_stage_job(stage, level, job);
  } catch (const std::exception& e) {
    job.status = internal_error(fmt::format("stage {} (layers {}-{}): exception: {}", stage.index(),
                                            r.begin, r.end, e.what()));
  } catch (...) {
    job.status = internal_error(fmt::format("stage {}: unknown exception", stage.index()));
  }
}

namespace {

constexpr char kJobMagic[4] = {'S', 'C', 'J', 'E'};
// Version 2: a serving step's fields (kBatch) follow the last stage's output. Version 3: a
// step's payloads left the envelope (they travel beside it, as a forward's does).
constexpr uint32_t kJobVersion = 3;

void put_trace(WireWriter& w, const DispatchTrace& trace) {
  w.put(static_cast<uint64_t>(trace.events.size()));
  for (const DispatchEvent& e : trace.events) {
    w.put(e.forward);
    w.put(e.layer);
    w.put(static_cast<int32_t>(e.site));
    w.put(e.kernel);
    w.put(e.stage);
    w.put(e.aux);
  }
}

bool get_trace(WireReader& r, DispatchTrace& trace) {
  uint64_t n = 0;
  if (!r.get_count(n)) return false;
  trace.events.resize(n);
  for (DispatchEvent& e : trace.events) {
    int32_t site = 0;
    if (!r.get(e.forward) || !r.get(e.layer) || !r.get(site) || !r.get(e.kernel) ||
        !r.get(e.stage) || !r.get(e.aux))
      return false;
    if (site < 0 || site >= static_cast<int32_t>(site_names().size())) return false;
    e.site = static_cast<Site>(site);
  }
  return true;
}

void put_output(WireWriter& w, const StageOutput& o) {
  w.put_tensor(o.head.output);
  w.put_tensor(o.head.logits);
  w.put_tensor(o.head.next_tokens);
  w.put_tensor(o.state.prefix);
  w.put_tensor(o.state.delta);
  w.put(static_cast<uint8_t>(o.state.has_delta));
  w.put_tensor(o.state.bank);
  w.put(static_cast<uint64_t>(o.taps.size()));
  for (const auto& [id, t] : o.taps) {
    w.put(static_cast<int32_t>(id));
    w.put_tensor(t);
  }
}

// Reads a stage output; the name of what is malformed, or nullptr.
const char* get_output(WireReader& r, StageOutput& o) {
  uint8_t flag = 0;
  uint64_t n = 0;
  if (!r.get_tensor(o.head.output) || !r.get_tensor(o.head.logits) ||
      !r.get_tensor(o.head.next_tokens))
    return "head output";
  if (!r.get_tensor(o.state.prefix) || !r.get_tensor(o.state.delta) || !r.get(flag) || flag > 1)
    return "final state";
  o.state.has_delta = flag == 1;
  if (!r.get_tensor(o.state.bank) || !r.get_count(n)) return "final state";
  for (uint64_t i = 0; i < n; ++i) {
    int32_t id = 0;
    Tensor t;
    if (!r.get(id) || !r.get_tensor(t)) return "taps";
    o.taps.emplace_back(id, std::move(t));
  }
  return nullptr;
}

void put_ids(WireWriter& w, const std::vector<int32_t>& ids) {
  w.put(static_cast<uint64_t>(ids.size()));
  for (int32_t id : ids) w.put(id);
}

bool get_ids(WireReader& r, std::vector<int32_t>& ids) {
  uint64_t n = 0;
  if (!r.get_count(n)) return false;
  ids.resize(n);
  for (int32_t& id : ids)
    if (!r.get(id)) return false;
  return true;
}

bool get_forward_kind(WireReader& r, ForwardKind& kind) {
  int32_t k = 0;
  if (!r.get(k) || k < 0 || k > static_cast<int32_t>(ForwardKind::kReplay)) return false;
  kind = static_cast<ForwardKind>(k);
  return true;
}

// A serving step's fields: the step (its segments and state updates), and per segment the
// records, cache records, dispatch traces and the last stage's outputs (its payloads
// travel beside the envelope).
void put_batch(WireWriter& w, const StageJob& job) {
  const BatchRequest& b = job.batch;
  w.put(b.step);
  w.put(static_cast<uint64_t>(b.segments.size()));
  for (const Segment& seg : b.segments) {
    w.put(seg.request);
    put_ids(w, seg.ids);
    w.put(seg.first_position);
    w.put(static_cast<int32_t>(seg.kind));
    w.put(seg.index);
  }
  w.put(static_cast<uint64_t>(b.updates.size()));
  for (const StateUpdate& u : b.updates) {
    w.put(u.request);
    w.put(static_cast<int32_t>(u.kind));
  }
  w.put(static_cast<uint64_t>(job.segment_records.size()));
  for (const RunRecord& rec : job.segment_records) w.put_record(rec);
  w.put(static_cast<uint64_t>(job.segment_caches.size()));
  for (const RunRecord& rec : job.segment_caches) w.put_record(rec);
  w.put(static_cast<uint64_t>(job.segment_traces.size()));
  for (const DispatchTrace& t : job.segment_traces) put_trace(w, t);
  w.put(static_cast<uint64_t>(job.lasts.size()));
  for (const StageOutput& o : job.lasts) put_output(w, o);
}

// Reads put_batch's fields; the name of what is malformed, or nullptr.
const char* get_batch(WireReader& r, StageJob& job) {
  BatchRequest& b = job.batch;
  uint64_t n = 0;
  if (!r.get(b.step) || !r.get_count(n)) return "batch step";
  b.segments.resize(n);
  for (Segment& seg : b.segments)
    if (!r.get(seg.request) || !get_ids(r, seg.ids) || !r.get(seg.first_position) ||
        !get_forward_kind(r, seg.kind) || !r.get(seg.index))
      return "batch segment";
  if (!r.get_count(n)) return "batch updates";
  b.updates.resize(n);
  for (StateUpdate& u : b.updates) {
    int32_t kind = 0;
    if (!r.get(u.request) || !r.get(kind) || kind < 0 ||
        kind > static_cast<int32_t>(StateUpdate::Kind::kRelease))
      return "batch update";
    u.kind = static_cast<StateUpdate::Kind>(kind);
  }
  for (std::vector<RunRecord>* records : {&job.segment_records, &job.segment_caches}) {
    if (!r.get_count(n)) return "segment records";
    records->resize(n);
    for (RunRecord& rec : *records)
      if (!r.get_record(rec)) return "segment record";
  }
  if (!r.get_count(n)) return "segment traces";
  job.segment_traces.resize(n);
  for (DispatchTrace& t : job.segment_traces)
    if (!get_trace(r, t)) return "segment trace";
  if (!r.get_count(n)) return "segment outputs";
  job.lasts.resize(n);
  for (StageOutput& o : job.lasts)
    if (const char* bad = get_output(r, o)) return bad;
  return nullptr;
}
}  // namespace

std::vector<PayloadRef> job_payloads(const StageJob& job) {
  static const Tensor kNoBody;
  if (job.kind != JobKind::kBatch) return {PayloadRef{&job.payload, &job.body}};
  std::vector<PayloadRef> out;
  for (size_t i = 0; i < job.payloads.size(); ++i)
    out.push_back(PayloadRef{&job.payloads[i], i < job.bodies.size() ? &job.bodies[i] : &kNoBody});
  return out;
}

Status take_job_payloads(StageJob& job, std::vector<std::vector<std::byte>> payloads,
                         std::vector<Tensor> bodies) {
  if (payloads.size() != bodies.size())
    return internal_error(
        fmt::format("{} payloads arrived with {} bodies", payloads.size(), bodies.size()));
  if (job.kind == JobKind::kBatch) {
    job.payloads = std::move(payloads);
    job.bodies = std::move(bodies);
    return Status::ok();
  }
  if (payloads.size() != 1)
    return internal_error(fmt::format("a job of kind {} takes one payload; {} arrived",
                                      static_cast<int>(job.kind), payloads.size()));
  job.payload = std::move(payloads.front());
  job.body = std::move(bodies.front());
  return Status::ok();
}

std::vector<std::byte> encode_job_envelope(const StageJob& job) {
  WireWriter w;
  for (char c : kJobMagic) w.put(c);
  w.put(kJobVersion);
  w.put(static_cast<int32_t>(job.kind));
  w.put(static_cast<int32_t>(job.request.kind));
  w.put(job.request.first_position);
  w.put(job.request.index);
  w.put(static_cast<uint64_t>(job.request.ids.size()));
  for (int32_t id : job.request.ids) w.put(id);
  w.put(static_cast<uint8_t>(job.wants_record));
  w.put(static_cast<int32_t>(job.status.code()));
  w.put_string(job.status.message());
  w.put_record(job.record);
  w.put_record(job.caches);
  put_trace(w, job.trace);
  put_output(w, job.last);
  put_batch(w, job);
  return std::move(w.out);
}

Result<StageJob> decode_job_envelope(const std::vector<std::byte>& bytes) {
  WireReader r(bytes);
  StageJob job;
  auto bad = [&](const char* where) {
    return internal_error(fmt::format("job envelope of {} bytes: malformed at byte {} ({})",
                                      bytes.size(), r.position(), where));
  };
  char magic[4];
  uint32_t version = 0;
  for (char& m : magic)
    if (!r.get(m)) return bad("header");
  if (std::memcmp(magic, kJobMagic, 4) != 0) return bad("magic");
  if (!r.get(version) || version != kJobVersion) return bad("version");
  int32_t kind = 0, request_kind = 0, code = 0;
  uint64_t n = 0;
  if (!r.get(kind) || kind < 0 || kind > static_cast<int32_t>(JobKind::kBatch))
    return bad("job kind");
  job.kind = static_cast<JobKind>(kind);
  if (!r.get(request_kind) || request_kind < 0 ||
      request_kind > static_cast<int32_t>(ForwardKind::kReplay))
    return bad("forward kind");
  job.request.kind = static_cast<ForwardKind>(request_kind);
  if (!r.get(job.request.first_position) || !r.get(job.request.index) || !r.get_count(n))
    return bad("request");
  job.request.ids.resize(n);
  for (int32_t& id : job.request.ids)
    if (!r.get(id)) return bad("token ids");
  uint8_t flag = 0;
  if (!r.get(flag) || flag > 1) return bad("wants_record");
  job.wants_record = flag == 1;
  std::string message;
  if (!r.get(code) || !r.get_string(message)) return bad("status");
  if (code != 0 && code != 2 && code != 3 && code != 4) return bad("status code");
  job.status = code == 0 ? Status::ok() : Status(static_cast<StatusCode>(code), message);
  if (!r.get_record(job.record)) return bad("record");
  if (!r.get_record(job.caches)) return bad("caches");
  if (!get_trace(r, job.trace)) return bad("dispatch trace");
  if (const char* what = get_output(r, job.last)) return bad(what);
  if (const char* what = get_batch(r, job)) return bad(what);
  if (r.remaining() != 0) return bad("trailing bytes");
  return job;
}

}  // namespace splitcheck
