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
      stage.run_batch(job.batch, job.payloads, records, job.segment_traces);
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
  if (stage.is_last()) {
    job.lasts = std::move(*outs);
  } else {
    for (StageOutput& o : *outs) job.payloads.push_back(std::move(o.payload));
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

constexpr char kMagic[4] = {'S', 'C', 'J', 'E'};
constexpr uint32_t kVersion = 1;
}  // namespace

std::vector<std::byte> encode_job_envelope(const StageJob& job) {
  WireWriter w;
  for (char c : kMagic) w.put(c);
  w.put(kVersion);
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
  w.put(static_cast<uint64_t>(job.trace.events.size()));
  for (const DispatchEvent& e : job.trace.events) {
    w.put(e.forward);
    w.put(e.layer);
    w.put(static_cast<int32_t>(e.site));
    w.put(e.kernel);
    w.put(e.stage);
    w.put(e.aux);
  }
  const StageOutput& o = job.last;
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
  if (std::memcmp(magic, kMagic, 4) != 0) return bad("magic");
  if (!r.get(version) || version != kVersion) return bad("version");
  int32_t kind = 0, request_kind = 0, code = 0;
  uint64_t n = 0;
  if (!r.get(kind) || kind < 0 || kind > static_cast<int32_t>(JobKind::kRestore))
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
  if (!r.get_count(n)) return bad("dispatch trace");
  job.trace.events.resize(n);
  for (DispatchEvent& e : job.trace.events) {
    int32_t site = 0;
    if (!r.get(e.forward) || !r.get(e.layer) || !r.get(site) || !r.get(e.kernel) ||
        !r.get(e.stage) || !r.get(e.aux))
      return bad("dispatch event");
    if (site < 0 || site >= static_cast<int32_t>(site_names().size())) return bad("dispatch site");
    e.site = static_cast<Site>(site);
  }
  StageOutput& o = job.last;
  if (!r.get_tensor(o.head.output) || !r.get_tensor(o.head.logits) ||
      !r.get_tensor(o.head.next_tokens))
    return bad("head output");
  if (!r.get_tensor(o.state.prefix) || !r.get_tensor(o.state.delta) || !r.get(flag) || flag > 1)
    return bad("final state");
  o.state.has_delta = flag == 1;
  if (!r.get_tensor(o.state.bank) || !r.get_count(n)) return bad("final state");
  for (uint64_t i = 0; i < n; ++i) {
    int32_t id = 0;
    Tensor t;
    if (!r.get(id) || !r.get_tensor(t)) return bad("taps");
    o.taps.emplace_back(id, std::move(t));
  }
  if (r.remaining() != 0) return bad("trailing bytes");
  return job;
}

}  // namespace splitcheck
