#include "harness/transport/mpi_transport.h"

#include <fmt/format.h>
#include <mpi.h>
#include <signal.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <deque>
#include <future>
#include <thread>
#include <utility>

#include "harness/engine/run.h"
#include "harness/engine/wire.h"
#include "harness/transport/rank_launcher.h"

namespace splitcheck {
namespace {

using Clock = std::chrono::steady_clock;

// Message tags: commands from rank 0 and their replies; between consecutive stages a job
// message (the envelope and the payload's announcement, frame_job_message); the last
// stage's finished envelope to rank 0.
enum Tag : int { kCommand = 1, kReply = 2, kEnvelope = 3, kResult = 5, kHello = 6 };
enum class Command : int32_t { kBuild = 1, kStart = 2, kStats = 3, kEnd = 4, kPing = 5, kQuit = 6 };

// Sleeps a little between polls once a wait has lasted a while: a waiting rank must not
// take the core from the rank it waits for (3 ranks may share 2 cores).
void pause_poll(Clock::time_point started) {
  if (Clock::now() - started < std::chrono::milliseconds(2))
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(200));
}

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
}

// Completes a request by polling MPI_Test until `deadline`; false when it passed (the
// request is then cancelled) or MPI reported an error.
bool wait_request(MPI_Request& req, Clock::time_point deadline) {
  const auto started = Clock::now();
  for (;;) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    if (Clock::now() > deadline) {
      MPI_Cancel(&req);
      MPI_Request_free(&req);
      return false;
    }
    pause_poll(started);
  }
}

Status send_bytes(int to, int tag, const std::vector<std::byte>& bytes, double timeout_s) {
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    return internal_error(fmt::format(
        "message of {} bytes to rank {} is larger than MPI's int count", bytes.size(), to));
  MPI_Request req;
  if (MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, to, tag, MPI_COMM_WORLD,
                &req) != MPI_SUCCESS ||
      !wait_request(req, deadline_after(timeout_s)))
    return internal_error(fmt::format("sending {} bytes to rank {} did not complete within {} s",
                                      bytes.size(), to, timeout_s));
  return Status::ok();
}

struct Message {
  int source = -1;
  int tag = -1;
  std::vector<std::byte> bytes;
};

// The next message from `source` with `tag` (MPI_ANY_* allowed), polled until the
// deadline: MPI_Iprobe for its size, then MPI_Irecv polled with MPI_Test.
Result<Message> receive(int source, int tag, double timeout_s) {
  const auto deadline = deadline_after(timeout_s);
  const auto started = Clock::now();
  MPI_Status st;
  for (;;) {
    int flag = 0;
    if (MPI_Iprobe(source, tag, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS)
      return internal_error("MPI_Iprobe failed");
    if (flag) break;
    if (Clock::now() > deadline)
      return internal_error(fmt::format("nothing received within {} s", timeout_s));
    pause_poll(started);
  }
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  Message m{st.MPI_SOURCE, st.MPI_TAG, std::vector<std::byte>(static_cast<size_t>(count))};
  MPI_Request req;
  if (MPI_Irecv(m.bytes.data(), count, MPI_BYTE, m.source, m.tag, MPI_COMM_WORLD, &req) !=
          MPI_SUCCESS ||
      !wait_request(req, deadline))
    return internal_error(
        fmt::format("receiving {} bytes from rank {} did not complete within {} s", count, m.source,
                    timeout_s));
  return m;
}

std::vector<std::byte> command(Command c) {
  WireWriter w;
  w.put(static_cast<int32_t>(c));
  return std::move(w.out);
}

void put_holdings(WireWriter& w, const StageHoldings& h) {
  w.put(static_cast<int32_t>(h.index));
  w.put(static_cast<int32_t>(h.range.begin));
  w.put(static_cast<int32_t>(h.range.end));
  w.put_string(h.embedding);
  w.put(static_cast<uint64_t>(h.owned_taps.size()));
  for (int k : h.owned_taps) w.put(static_cast<int32_t>(k));
  w.put(static_cast<uint64_t>(h.parameter_bytes));
  w.put(static_cast<uint64_t>(h.tensors));
  w.put(static_cast<uint64_t>(h.storages));
  w.put_string(h.embedding_storage);
  w.put_string(h.head_storage);
}

bool get_holdings(WireReader& r, StageHoldings& h) {
  int32_t index = 0, begin = 0, end = 0;
  uint64_t n = 0, bytes = 0, tensors = 0;
  if (!r.get(index) || !r.get(begin) || !r.get(end) || !r.get_string(h.embedding) ||
      !r.get_count(n))
    return false;
  h.index = index;
  h.range = StageRange{begin, end};
  h.owned_taps.resize(n);
  for (int& k : h.owned_taps) {
    int32_t v = 0;
    if (!r.get(v)) return false;
    k = v;
  }
  uint64_t storages = 0;
  if (!r.get(bytes) || !r.get(tensors) || !r.get(storages) || !r.get_string(h.embedding_storage) ||
      !r.get_string(h.head_storage))
    return false;
  h.parameter_bytes = bytes;
  h.tensors = tensors;
  h.storages = storages;
  return true;
}

// The message that carries `job` to the next stage: its envelope and the channel's
// announcement of each of its payloads (job_payloads), a forward's and a serving step's
// alike.
std::vector<std::byte> job_message(const StageJob& job, PayloadChannel& channel) {
  std::vector<std::vector<std::byte>> announcements;
  for (const PayloadRef& p : job_payloads(job))
    announcements.push_back(channel.announce(*p.bytes, *p.body));
  return frame_job_message(encode_job_envelope(job), announcements);
}

// What follows the job message: each payload's rest, in job_payloads' order.
Status send_payloads(PayloadChannel& channel, int to, const StageJob& job, double timeout_s,
                     const std::function<void()>& meanwhile) {
  for (const PayloadRef& p : job_payloads(job))
    RETURN_IF_ERROR(channel.send(to, *p.bytes, *p.body, timeout_s, meanwhile));
  return Status::ok();
}

// Every payload that `announcements` announce, in order, each into its own slot.
struct ReceivedPayloads {
  std::vector<std::vector<std::byte>> bytes;
  std::vector<Tensor> bodies;
};
Result<ReceivedPayloads> receive_payloads(PayloadChannel& channel, int from,
                                          const std::vector<std::vector<std::byte>>& announcements,
                                          double timeout_s) {
  ReceivedPayloads got;
  for (size_t i = 0; i < announcements.size(); ++i) {
    ASSIGN_OR_RETURN(ChannelPayload p, channel.receive(from, announcements[i], timeout_s, i),
                     fmt::format("payload {} of {}", i + 1, announcements.size()));
    got.bytes.push_back(std::move(p.bytes));
    got.bodies.push_back(std::move(p.body));
  }
  return got;
}

std::string stage_name(int rank, const StageConfig& c) {
  const StageRange r = c.partition.stage(c.index);
  return fmt::format("rank {} (stage {}, layers {}-{})", rank, c.index, r.begin, r.end);
}

// Rank 0's side of one partition: stage 0 runs here, on the caller's thread; stages
// 1..pp-1 run on ranks 1..pp-1.
class MpiTransport : public Transport {
 public:
  MpiTransport(MpiFactory& factory, std::vector<StageConfig> configs)
      : f_(factory), configs_(std::move(configs)), pp_(static_cast<int>(configs_.size())) {}
  ~MpiTransport() override {
    if (!f_.lost().empty()) return;
    for (int r = 1; r < f_.world().size(); ++r)
      if (!send_bytes(r, kCommand, command(Command::kEnd), timeout()).is_ok()) return;
  }

  Status build(WeightSource& source);
  void submit(StageJob job) override;
  StageJob collect() override;
  std::vector<StageHoldings> holdings() const override { return holdings_; }
  ComputedCalls computed() override;
  const WeightStore& last_stage_weights() const override {
    return pp_ == 1 ? stage0_->weights() : head_;
  }
  // Serving steps travel like forwards: their fields in the envelope (stage_job.h), their
  // payloads through the channel as a forward's (as the same bytes inproc hands over, or
  // over nccl by NCCL), checked by the receiving stage.
  bool carries_batches() const override { return true; }

 private:
  double timeout() const { return f_.world().timeout_s; }
  std::string where() const { return configs_.front().partition.key(); }
  // A transport failure: names the split point, marks the MPI job lost so the sweep stops.
  Status lose(const std::string& what) {
    f_.mark_lost(fmt::format("{}: {}", where(), what));
    return internal_error(what);
  }
  // Which of ranks 1..pp-1 no longer answer a ping, in words ("" when all answer).
  std::string silent_ranks();
  // Sends a job message to rank 1, taking in the results the last stage sends meanwhile:
  // with two serving steps in flight the last stage may be blocked sending the first
  // step's result while rank 1 waits to take the second step's message (or payload).
  Status send_job(const std::vector<std::byte>& bytes);
  // Takes in the last stage's next result when one waits; whether one was taken in.
  bool take_in_result();
  // The last stage's next result (one taken in while sending, or the next to come).
  Result<Message> next_result();

  MpiFactory& f_;
  std::vector<StageConfig> configs_;
  int pp_ = 1;
  std::unique_ptr<Stage> stage0_;
  WeightStore head_;  // the last stage's placed head tensors, for the drafter
  std::vector<StageHoldings> holdings_;
  // Jobs in submit() order: finished here (a failure, or PP=1), or in flight on the stage
  // ranks with what stage 0 recorded kept here (only later stages' records travel back).
  struct Pending {
    std::optional<StageJob> done;
    RunRecord record, caches;
    DispatchTrace trace;
    // A serving step's, per segment.
    std::vector<RunRecord> segment_records, segment_caches;
    std::vector<DispatchTrace> segment_traces;
  };
  std::deque<Pending> pending_;
  std::deque<Message> early_results_;  // taken in by send_job, in arrival order
  static Pending finished(StageJob job) {
    Pending p;
    p.done = std::move(job);
    return p;
  }
};

Status MpiTransport::build(WeightSource& source) {
  const Partition& part = configs_.front().partition;
  WireWriter build;
  build.put(static_cast<int32_t>(Command::kBuild));
  build.put(static_cast<int32_t>(part.layers()));
  build.put(static_cast<uint64_t>(pp_));
  for (int s = 0; s < pp_; ++s) {
    build.put(static_cast<int32_t>(part.stage(s).begin));
    build.put(static_cast<int32_t>(part.stage(s).end));
  }
  for (int r = 1; r < f_.world().size(); ++r) {
    Status st = send_bytes(r, kCommand, build.out, timeout());
    if (!st.is_ok()) return lose(fmt::format("rank {}: {}", r, st.message()));
  }
  // Stage 0 here, while the other ranks build theirs; the first refusal in stage order
  // is the answer, as inproc gives it.
  Status first = Status::ok();
  Result<std::unique_ptr<Stage>> s0 = Stage::create(configs_.front(), source);
  if (s0.is_ok()) {
    stage0_ = std::move(*s0);
    stage0_->set_device_payloads(f_.world().channel->carries_device_bodies());
    holdings_.push_back(stage0_->holdings());
  } else {
    first = s0.status();
  }
  bool last_tap0_resident = stage0_ != nullptr && stage0_->tap0_resident();
  for (int r = 1; r < f_.world().size(); ++r) {
    Result<Message> m = receive(r, kReply, timeout());
    if (!m.is_ok()) {
      const std::string who = r < pp_ ? stage_name(r, configs_[r])
                                      : fmt::format("rank {} (no stage in this partition)", r);
      return lose(fmt::format("{} died or hangs: it did not answer the build of its stage: {}", who,
                              m.status().message()));
    }
    if (r >= pp_) continue;  // idle for this partition
    WireReader rd(m->bytes);
    int32_t code = 0;
    std::string message;
    StageHoldings h;
    uint8_t resident = 0;
    if (!rd.get(code) || !rd.get_string(message) || !get_holdings(rd, h) || !rd.get(resident))
      return lose(fmt::format("{}: malformed build reply of {} bytes", stage_name(r, configs_[r]),
                              m->bytes.size()));
    if (code != 0 && first.is_ok()) first = Status(static_cast<StatusCode>(code), message);
    holdings_.push_back(h);
    if (r == pp_ - 1) last_tap0_resident = resident != 0;
  }
  RETURN_IF_ERROR(first);
  if (pp_ > 1) {
    ASSIGN_OR_RETURN(head_, load_stage_head(configs_.back(), source));
  }
  // Tap 0 travels unless the last stage takes it to be resident (Stage::tap0_resident).
  const bool relayed = !last_tap0_resident;
  stage0_->set_tap0_relayed(relayed);
  WireWriter start;
  start.put(static_cast<int32_t>(Command::kStart));
  start.put(static_cast<uint8_t>(relayed));
  for (int r = 1; r < pp_; ++r) {
    Status st = send_bytes(r, kCommand, start.out, timeout());
    if (!st.is_ok()) return lose(fmt::format("{}: {}", stage_name(r, configs_[r]), st.message()));
  }
  return Status::ok();
}

void MpiTransport::submit(StageJob job) {
  if (!f_.lost().empty()) {
    job.status = internal_error(f_.lost());
    pending_.push_back(finished(std::move(job)));
    return;
  }
  run_stage_job_guarded(*stage0_, configs_.front().level, job);
  if (pp_ == 1 || !job.status.is_ok()) {
    pending_.push_back(finished(std::move(job)));
    return;
  }
  Pending p;
  p.record = std::move(job.record);
  p.caches = std::move(job.caches);
  p.trace = std::move(job.trace);
  job.record = RunRecord();
  job.caches = RunRecord();
  job.trace = DispatchTrace();
  const size_t segments = job.segment_records.size();
  p.segment_records = std::exchange(job.segment_records, std::vector<RunRecord>(segments));
  p.segment_caches =
      std::exchange(job.segment_caches, std::vector<RunRecord>(job.segment_caches.size()));
  p.segment_traces =
      std::exchange(job.segment_traces, std::vector<DispatchTrace>(job.segment_traces.size()));
  PayloadChannel& channel = *f_.world().channel;
  Status st = send_job(job_message(job, channel));
  if (st.is_ok()) st = send_payloads(channel, 1, job, timeout(), [this] { take_in_result(); });
  if (!st.is_ok()) {
    job.status = lose(fmt::format("{}: {}", stage_name(1, configs_[1]), st.message()));
    pending_.push_back(finished(std::move(job)));
    return;
  }
  pending_.push_back(std::move(p));
}

Status MpiTransport::send_job(const std::vector<std::byte>& bytes) {
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    return internal_error(
        fmt::format("job message of {} bytes is larger than MPI's int count", bytes.size()));
  const auto failed = [&] {
    return internal_error(fmt::format("sending {} bytes to rank 1 did not complete within {} s",
                                      bytes.size(), timeout()));
  };
  MPI_Request req;
  if (MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, 1, kEnvelope,
                MPI_COMM_WORLD, &req) != MPI_SUCCESS)
    return failed();
  const auto deadline = deadline_after(timeout());
  const auto started = Clock::now();
  for (;;) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return failed();
    if (done) return Status::ok();
    if (take_in_result()) continue;
    if (Clock::now() > deadline) {
      MPI_Cancel(&req);
      MPI_Request_free(&req);
      return failed();
    }
    pause_poll(started);
  }
}

bool MpiTransport::take_in_result() {
  int waiting = 0;
  if (MPI_Iprobe(pp_ - 1, kResult, MPI_COMM_WORLD, &waiting, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
      !waiting)
    return false;
  Result<Message> m = receive(pp_ - 1, kResult, timeout());
  if (!m.is_ok()) return false;
  early_results_.push_back(std::move(*m));
  return true;
}

Result<Message> MpiTransport::next_result() {
  if (early_results_.empty()) return receive(pp_ - 1, kResult, timeout());
  Message m = std::move(early_results_.front());
  early_results_.pop_front();
  return m;
}

std::string MpiTransport::silent_ranks() {
  std::string out;
  for (int r = 1; r < pp_; ++r) {
    const double patience = std::min(timeout(), 5.0);
    bool answered = send_bytes(r, kCommand, command(Command::kPing), patience).is_ok() &&
                    receive(r, kReply, patience).is_ok();
    if (!answered) out += fmt::format("{}{}", out.empty() ? "" : ", ", stage_name(r, configs_[r]));
  }
  return out;
}

StageJob MpiTransport::collect() {
  StageJob failed;
  if (pending_.empty()) {
    failed.status = internal_error("collect() without a job in flight");
    return failed;
  }
  Pending front = std::move(pending_.front());
  pending_.pop_front();
  if (front.done) return std::move(*front.done);
  const int last = pp_ - 1;
  Result<Message> m = next_result();
  if (!m.is_ok()) {
    const std::string silent = silent_ranks();
    failed.status = lose(
        silent.empty() ? fmt::format("no result from {} within {} s",
                                     stage_name(last, configs_[last]), timeout())
                       : fmt::format("{} died or hangs: no result within {} s, no answer to a ping",
                                     silent, timeout()));
    return failed;
  }
  Result<StageJob> job = decode_job_envelope(m->bytes);
  if (!job.is_ok()) {
    failed.status = lose(fmt::format("{} sent a malformed result: {}",
                                     stage_name(last, configs_[last]), job.status().message()));
    return failed;
  }
  // Stage 0's records, then the later stages' in stage order, as inproc appends them.
  front.record.append(job->record);
  front.caches.append(job->caches);
  front.trace.events.insert(front.trace.events.end(), job->trace.events.begin(),
                            job->trace.events.end());
  job->record = std::move(front.record);
  job->caches = std::move(front.caches);
  job->trace = std::move(front.trace);
  // A serving step's, segment by segment, likewise.
  if (job->segment_records.size() != front.segment_records.size() ||
      job->segment_caches.size() != front.segment_caches.size() ||
      job->segment_traces.size() != front.segment_traces.size()) {
    failed.status = lose(fmt::format("{} sent a result of {} segments for a step of {}",
                                     stage_name(last, configs_[last]), job->segment_records.size(),
                                     front.segment_records.size()));
    return failed;
  }
  for (size_t i = 0; i < front.segment_records.size(); ++i)
    front.segment_records[i].append(job->segment_records[i]);
  for (size_t i = 0; i < front.segment_caches.size(); ++i)
    front.segment_caches[i].append(job->segment_caches[i]);
  for (size_t i = 0; i < front.segment_traces.size(); ++i)
    front.segment_traces[i].events.insert(front.segment_traces[i].events.end(),
                                          job->segment_traces[i].events.begin(),
                                          job->segment_traces[i].events.end());
  job->segment_records = std::move(front.segment_records);
  job->segment_caches = std::move(front.segment_caches);
  job->segment_traces = std::move(front.segment_traces);
  return std::move(*job);
}

ComputedCalls MpiTransport::computed() {
  ComputedCalls sum = stage0_ ? stage0_->computed() : ComputedCalls{};
  if (!f_.lost().empty()) return sum;
  for (int r = 1; r < pp_; ++r) {
    Result<Message> m = send_bytes(r, kCommand, command(Command::kStats), timeout()).is_ok()
                            ? receive(r, kReply, timeout())
                            : Result<Message>(internal_error("send failed"));
    ComputedCalls s;
    const std::vector<std::byte> bytes = m.is_ok() ? m->bytes : std::vector<std::byte>{};
    WireReader rd(bytes);
    if (!m.is_ok() || !rd.get(s.layers) || !rd.get(s.heads)) {
      (void)lose(fmt::format("{} did not report what it computed", stage_name(r, configs_[r])));
      return sum;
    }
    sum += s;
  }
  return sum;
}

// Rank r's state between commands.
class StageRank {
 public:
  StageRank(const Scenario& s, MpiWorld& world)
      : s_(s), world_(world), source_(scenario_weight_source(s)) {}
  int serve();

 private:
  double timeout() const { return world_.timeout_s; }
  std::string name() const {
    return stage_ ? stage_name(world_.rank(), *config_) : fmt::format("rank {}", world_.rank());
  }
  Status reply(const std::vector<std::byte>& bytes) {
    return send_bytes(0, kReply, bytes, timeout());
  }
  Status build(WireReader& rd);
  Status start_before_jobs();
  Status serve_job(const Message& envelope);

  const Scenario& s_;
  MpiWorld& world_;
  std::unique_ptr<WeightSource> source_;
  std::optional<StageConfig> config_;
  std::unique_ptr<Stage> stage_;
  bool started_ = false;
  int builds_ = 0;  // Build commands taken (the test-only fault hook counts them)
};

Status StageRank::build(WireReader& rd) {
  test_kill_point(world_.rank(), fmt::format("build-{}", ++builds_));
  stage_.reset();
  config_.reset();
  started_ = false;
  int32_t layers = 0;
  uint64_t pp = 0;
  if (!rd.get(layers) || !rd.get_count(pp)) return internal_error("malformed build command");
  std::vector<StageRange> ranges(pp);
  for (StageRange& r : ranges)
    if (!rd.get(r.begin) || !rd.get(r.end)) return internal_error("malformed build command");
  WireWriter w;
  const int rank = world_.rank();
  if (rank >= static_cast<int>(pp)) {  // idle for this partition
    w.put(int32_t{0});
    w.put_string("idle");
    put_holdings(w, StageHoldings{});
    w.put(uint8_t{0});
    return reply(w.out);
  }
  config_ = StageConfig{s_.model,
                        Partition::from_ranges(ranges, layers),
                        rank,
                        s_.capture_ids,
                        s_.dump_level,
                        FaultSet{s_.faults},
                        s_.speculative.method,
                        s_.speculative.context_only_producer};
  Result<std::unique_ptr<Stage>> stage = internal_error("not built");
  try {
    stage = Stage::create(*config_, *source_);
  } catch (const std::exception& e) {
    stage = internal_error(fmt::format("{}: exception building the stage: {}", name(), e.what()));
  }
  if (stage.is_ok()) {
    stage_ = std::move(*stage);
    stage_->set_device_payloads(world_.channel->carries_device_bodies());
  }
  w.put(static_cast<int32_t>(stage.status().code()));
  w.put_string(stage.status().message());
  put_holdings(w, stage_ ? stage_->holdings() : StageHoldings{});
  w.put(static_cast<uint8_t>(stage_ && stage_->tap0_resident()));
  return reply(w.out);
}

// A job may overtake rank 0's Start (they come from different ranks): take Start first.
Status StageRank::start_before_jobs() {
  if (started_) return Status::ok();
  ASSIGN_OR_RETURN(Message m, receive(0, kCommand, timeout()), name() + ": waiting for Start");
  WireReader rd(m.bytes);
  int32_t c = 0;
  uint8_t relayed = 0;
  if (!rd.get(c) || c != static_cast<int32_t>(Command::kStart) || !rd.get(relayed))
    return internal_error(name() + ": a job arrived before its stage was started");
  stage_->set_tap0_relayed(relayed != 0);
  started_ = true;
  return Status::ok();
}

Status StageRank::serve_job(const Message& envelope) {
  const int rank = world_.rank();
  StageJob job;
  // The payloads' rest follows only what their announcements announced; a message whose
  // framing is broken announces nothing that can be received.
  Result<JobMessage> message = unframe_job_message(envelope.bytes);
  Result<ReceivedPayloads> payloads =
      message.is_ok()
          ? receive_payloads(*world_.channel, envelope.source, message->announcements, timeout())
          : Result<ReceivedPayloads>(message.status());
  Result<StageJob> decoded =
      message.is_ok() ? decode_job_envelope(message->envelope) : Result<StageJob>(message.status());
  if (!payloads.is_ok()) {
    job.status = internal_error(fmt::format("{}: no payload from rank {}: {}", name(),
                                            envelope.source, payloads.status().message()));
  } else if (!decoded.is_ok()) {
    job.status = internal_error(fmt::format("{}: malformed job envelope from rank {}: {}", name(),
                                            envelope.source, decoded.status().message()));
  } else if (stage_ == nullptr) {
    job = std::move(*decoded);
    if (job.status.is_ok())
      job.status = internal_error(fmt::format("{}: a job arrived but no stage is built", name()));
  } else {
    job = std::move(*decoded);
    Status took = take_job_payloads(job, std::move(payloads->bytes), std::move(payloads->bodies));
    if (!took.is_ok() && job.status.is_ok())
      job.status = internal_error(fmt::format("{}: malformed job message from rank {}: {}", name(),
                                              envelope.source, took.message()));
    Status started = start_before_jobs();
    if (!started.is_ok() && job.status.is_ok()) job.status = started;
    run_stage_job_guarded(*stage_, config_->level, job);
    if (!job.status.is_ok() && job.status.message().find("rank ") == std::string::npos)
      job.status = job.status.with_context(name());
  }
  const bool last = config_ && stage_ && stage_->is_last();
  if (last || !config_) return send_bytes(0, kResult, encode_job_envelope(job), timeout());
  PayloadChannel& channel = *world_.channel;
  RETURN_IF_ERROR(send_bytes(rank + 1, kEnvelope, job_message(job, channel), timeout()));
  return send_payloads(channel, rank + 1, job, timeout(), {});
}

int StageRank::serve() {
  // Rank 0 may compute for long between two commands (its own PP=1, comparisons).
  const double idle = std::max(600.0, 10 * timeout());
  for (;;) {
    Result<Message> m = receive(MPI_ANY_SOURCE, MPI_ANY_TAG, idle);
    if (!m.is_ok()) {
      fmt::print(stderr, "splitcheck: error: rank {}: rank 0 sent nothing within {} s; exiting\n",
                 world_.rank(), idle);
      return 3;
    }
    Status st = Status::ok();
    if (m->tag == kEnvelope) {
      st = serve_job(*m);
    } else if (m->tag == kCommand && m->source == 0) {
      WireReader rd(m->bytes);
      int32_t c = 0;
      rd.get(c);
      switch (static_cast<Command>(c)) {
        case Command::kBuild:
          st = build(rd);
          break;
        case Command::kStart: {
          uint8_t relayed = 0;
          if (stage_ != nullptr && rd.get(relayed)) {
            stage_->set_tap0_relayed(relayed != 0);
            started_ = true;
          }
          break;
        }
        case Command::kStats: {
          const ComputedCalls s = stage_ ? stage_->computed() : ComputedCalls{};
          WireWriter w;
          for (int64_t v : {s.layers, s.heads}) w.put(v);
          st = reply(w.out);
          break;
        }
        case Command::kEnd:
          stage_.reset();
          config_.reset();
          started_ = false;
          break;
        case Command::kPing:
          st = reply({});
          break;
        case Command::kQuit:
          return 0;
        default:
          st = internal_error(fmt::format("unknown command {}", c));
      }
    } else {
      st = internal_error(
          fmt::format("unexpected message (tag {}) from rank {}", m->tag, m->source));
    }
    if (!st.is_ok())
      fmt::print(stderr, "splitcheck: error: rank {}: {}\n", world_.rank(), st.message());
  }
}

// Payloads as MPI bytes: the whole payload is its own announcement, so it travels inside
// the job message and nothing follows.
class MpiChannel : public PayloadChannel {
 public:
  std::vector<std::byte> announce(const std::vector<std::byte>& payload,
                                  const Tensor& body) override {
    return body.empty() ? payload : join_payload(payload, body);
  }
  Status send(int, const std::vector<std::byte>&, const Tensor&, double,
              const std::function<void()>&) override {
    return Status::ok();
  }
  Result<ChannelPayload> receive(int, const std::vector<std::byte>& announcement, double,
                                 size_t) override {
    return ChannelPayload{announcement, Tensor()};
  }
};

}  // namespace

std::vector<std::byte> frame_job_message(const std::vector<std::byte>& envelope,
                                         const std::vector<std::vector<std::byte>>& announcements) {
  WireWriter w;
  w.put(static_cast<uint64_t>(envelope.size()));
  w.out.insert(w.out.end(), envelope.begin(), envelope.end());
  w.put(static_cast<uint64_t>(announcements.size()));
  for (const std::vector<std::byte>& a : announcements) {
    w.put(static_cast<uint64_t>(a.size()));
    w.out.insert(w.out.end(), a.begin(), a.end());
  }
  return std::move(w.out);
}

Result<JobMessage> unframe_job_message(const std::vector<std::byte>& message) {
  WireReader rd(message);
  JobMessage out;
  uint64_t n = 0;
  if (!rd.get(n) || !rd.get_bytes(n, out.envelope))
    return internal_error(fmt::format(
        "malformed job message of {} bytes: its framing announces an envelope of {} bytes",
        message.size(), n));
  uint64_t count = 0;
  if (!rd.get_count(count))
    return internal_error(fmt::format(
        "malformed job message of {} bytes: no announcement count after its envelope of {} bytes",
        message.size(), out.envelope.size()));
  out.announcements.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    if (!rd.get(n) || !rd.get_bytes(n, out.announcements[i]))
      return internal_error(fmt::format(
          "malformed job message of {} bytes: announcement {} of {} is cut short (it announces "
          "{} bytes)",
          message.size(), i + 1, count, n));
  }
  if (rd.remaining() != 0)
    return internal_error(
        fmt::format("malformed job message of {} bytes: {} bytes past its last announcement",
                    message.size(), rd.remaining()));
  return out;
}

std::vector<std::byte> join_payload(const std::vector<std::byte>& header, const Tensor& body) {
  std::vector<std::byte> bytes = header;
  if (body.empty()) return bytes;
  const Tensor host = body.device() == Device::kCpu ? body : body.to(Device::kCpu);
  bytes.insert(bytes.end(), host.bytes(), host.bytes() + host.nbytes());
  return bytes;
}

Status mpi_send_bytes(int to, int tag, const std::vector<std::byte>& bytes, double timeout_s) {
  return send_bytes(to, tag, bytes, timeout_s);
}

Result<std::vector<std::byte>> mpi_receive_bytes(int from, int tag, double timeout_s) {
  ASSIGN_OR_RETURN(Message m, receive(from, tag, timeout_s));
  return std::move(m.bytes);
}

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

}  // namespace

void test_kill_point(int rank, const std::string& point) {
  const char* v = std::getenv("SPLITCHECK_TEST_KILL_RANK");
  if (v != nullptr && std::string(v) == fmt::format("{}:{}", rank, point)) {
    fmt::print(stderr, "splitcheck: rank {}: test fault hook: SIGKILL at {}\n", rank, point);
    std::fflush(stderr);
    ::raise(SIGKILL);
  }
}

Result<std::unique_ptr<MpiWorld>> MpiWorld::init(double timeout_s) {
  std::unique_ptr<MpiWorld> w(new MpiWorld());
  w->timeout_s = timeout_s;
  // Before MPI_Init returns, the launcher's environment says who this is.
  w->rank_ = env_int("OMPI_COMM_WORLD_RANK", 0);
  w->size_ = env_int("OMPI_COMM_WORLD_SIZE", 1);
  test_kill_point(w->rank_, "init");
  // MPI_Init waits for every rank to join; a rank that died first would hang it forever,
  // so it runs on its own thread and this one waits at most the deadline.
  struct Joined {
    int rc = MPI_ERR_OTHER;
    int provided = 0;
  };
  auto joined = std::make_shared<std::promise<Joined>>();
  std::future<Joined> done = joined->get_future();
  std::thread([joined] {
    Joined j;
    j.rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &j.provided);
    joined->set_value(j);
  }).detach();
  if (done.wait_for(std::chrono::duration<double>(timeout_s)) != std::future_status::ready) {
    w->setup_failure_ = fmt::format(
        "the MPI job did not start: not every one of its {} ranks joined (MPI_Init) within {} s{}",
        w->size_, timeout_s, [&] {
          const std::string who = ranks_not_joined(w->size_);
          return who.empty() ? std::string() : ": " + who;
        }());
    w->finished_ = true;  // nothing to finalise
    w->channel = std::make_unique<MpiChannel>();
    return w;
  }
  const Joined j = done.get();
  if (j.rc != MPI_SUCCESS) return internal_error("MPI_Init_thread failed");
  w->initialized_ = true;
  // Errors come back as return codes (a dead peer is a verdict, not an abort).
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (j.provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    w->finished_ = true;
    return internal_error("MPI provides no MPI_THREAD_SERIALIZED support");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &w->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &w->size_);
  w->channel = std::make_unique<MpiChannel>();
  return w;
}

void MpiWorld::greet(const std::string& backend) {
  const StagePlacement me = this_process_placement(rank_, rank_, backend);
  placements_.assign(static_cast<size_t>(size_), StagePlacement{});
  placements_[static_cast<size_t>(rank_)] = me;
  if (!initialized_) return;
  if (rank_ != 0) {
    test_kill_point(rank_, "hello");
    WireWriter w;
    w.put(static_cast<int64_t>(me.pid));
    w.put_string(me.host);
    w.put_string(me.device);
    const Status st = send_bytes(0, kHello, w.out, timeout_s);
    if (!st.is_ok()) {
      fmt::print(stderr, "splitcheck: error: rank {}: hello to rank 0: {}; exiting\n", rank_,
                 st.message());
      std::fflush(stderr);
      ::_exit(3);
    }
    return;
  }
  for (int r = 1; r < size_; ++r) {
    Result<Message> m = receive(r, kHello, timeout_s);
    StagePlacement& p = placements_[static_cast<size_t>(r)];
    p.stage = p.rank = r;
    const std::vector<std::byte> bytes = m.is_ok() ? m->bytes : std::vector<std::byte>{};
    WireReader rd(bytes);
    int64_t pid = 0;
    if (!m.is_ok() || !rd.get(pid) || !rd.get_string(p.host) || !rd.get_string(p.device)) {
      setup_failure_ =
          fmt::format("the MPI job did not start: rank {} died or hangs during setup: {}", r,
                      m.is_ok() ? fmt::format("malformed hello of {} bytes", m->bytes.size())
                                : fmt::format("no hello within {} s", timeout_s));
      return;
    }
    p.pid = pid;
  }
}

MpiWorld::~MpiWorld() {
  if (!finished_) MPI_Finalize();
}

void MpiWorld::finish(const std::string& lost, int exit_code) {
  finished_ = true;
  if (!initialized_) {
    // MPI never started here: nothing to tell the other ranks or to finalise.
    fmt::print(stderr, "splitcheck: rank {}: {}; exiting {}\n", rank_, lost, exit_code);
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(exit_code);
  }
  if (!lost.empty()) {
    fmt::print(stderr, "splitcheck: rank 0: {}; aborting the MPI job (exit {})\n", lost, exit_code);
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  }
  if (rank_ == 0)
    for (int r = 1; r < size_; ++r)
      (void)send_bytes(r, kCommand, command(Command::kQuit), timeout_s);
  MPI_Finalize();
}

std::vector<StagePlacement> MpiFactory::placement(int stages, const std::string&) const {
  std::vector<StagePlacement> out;
  // A rank that never said hello (setup failed) ran no stage.
  for (int s = 0; s < stages && s < static_cast<int>(world_.placements().size()); ++s)
    if (world_.placements()[static_cast<size_t>(s)].pid != 0)
      out.push_back(world_.placements()[static_cast<size_t>(s)]);
  return out;
}

Result<std::unique_ptr<Transport>> MpiFactory::connect(const std::vector<StageConfig>& stages,
                                                       WeightSource& source) {
  const int pp = static_cast<int>(stages.size());
  if (pp > world_.size())
    return invalid_input(fmt::format("partition {} has {} stages; the MPI job has {} ranks",
                                     stages.front().partition.key(), pp, world_.size()));
  if (!lost_.empty()) return internal_error(lost_);
  if (!world_.setup_failure().empty()) {
    mark_lost(world_.setup_failure());
    return internal_error(world_.setup_failure());
  }
  auto t = std::make_unique<MpiTransport>(*this, stages);
  RETURN_IF_ERROR(t->build(source));
  return std::unique_ptr<Transport>(std::move(t));
}

int serve_stage_rank(const Scenario& scenario, MpiWorld& world) {
  StageRank rank(scenario, world);
  return rank.serve();
}

}  // namespace splitcheck
