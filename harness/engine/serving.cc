#include "harness/engine/serving.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <functional>

#include "reference/segment_tasks.h"

namespace splitcheck {
namespace {

// Where a request stands in the loop, beyond the scheduler's view.
struct RequestRun {
  std::vector<int32_t> prompt;
  SequenceResult seq;
  SpeculativeSequence spec;
  std::vector<int32_t> all_emitted;
  std::unique_ptr<Drafter> drafter;
  int32_t anchor = 0;
  int64_t position = 0;         // next position to consume
  std::vector<int32_t> draft;   // proposals of the verify in flight
  std::vector<int32_t> replay;  // [t_n, x_1..x_a] after a partly rejected verify
  int32_t bonus = 0;            // that verify's bonus token y_a (emitted)
  std::vector<int64_t> histogram;
};

Tensor int_table(const std::vector<ScheduleRow>& rows) {
  Tensor t = Tensor::zeros(DType::kI32, {static_cast<int64_t>(rows.size()), 6});
  int32_t* d = t.data<int32_t>();
  for (size_t i = 0; i < rows.size(); ++i) {
    const ScheduleRow& r = rows[i];
    d[i * 6 + 0] = r.step;
    d[i * 6 + 1] = r.request;
    d[i * 6 + 2] = static_cast<int32_t>(r.kind);
    d[i * 6 + 3] = static_cast<int32_t>(r.first_position);
    d[i * 6 + 4] = static_cast<int32_t>(r.tokens);
    d[i * 6 + 5] = r.forward;
  }
  return t;
}

Tensor i32_tensor(const std::vector<int64_t>& v) {
  Tensor t = Tensor::zeros(DType::kI32, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>(v[i]);
  return t;
}

Tensor proposals_table(const std::vector<std::vector<int32_t>>& p, int gamma) {
  Tensor t = Tensor::zeros(DType::kI32, {static_cast<int64_t>(p.size()), gamma});
  for (size_t i = 0; i < p.size(); ++i)
    std::copy(p[i].begin(), p[i].end(), t.data<int32_t>() + i * static_cast<size_t>(gamma));
  return t;
}

}  // namespace

std::map<int32_t, std::vector<int>> prefill_chunks(const std::vector<ScheduleRow>& schedule) {
  std::map<int32_t, std::vector<int>> out;
  for (const ScheduleRow& r : schedule)
    if (r.kind == ForwardKind::kPrefill) out[r.request].push_back(static_cast<int>(r.tokens));
  return out;
}

namespace {

// Whether the drafters of one step run on helper threads: SPLITCHECK_SERVING_DRAFTER_THREADS=0
// runs them one after another on this thread (the same bits; for measuring what the helper
// threads gain).
bool drafter_threads() {
  static const bool threads = [] {
    const char* v = std::getenv("SPLITCHECK_SERVING_DRAFTER_THREADS");
    return v == nullptr || std::string(v) != "0";
  }();
  return threads;
}

// Runs the drafters' calls of one step that do not group: each request's drafter on its own
// (they share nothing but read-only weights), at once on helper threads, each queued after
// this thread's device work so far, and this thread's later work after theirs. The first
// failure in the calls' order is returned.
Status run_drafters(const std::vector<std::function<Status()>>& calls) {
  if (calls.empty()) return Status::ok();
  std::vector<Status> status(calls.size(), Status::ok());
  const DeviceWorkMark before = mark_thread_device_work();
  std::vector<DeviceWorkMark> after(calls.size());
  run_segment_tasks(calls.size(), drafter_threads(), [&](size_t i) {
    queue_after_device_work(before);
    status[i] = calls[i]();
    after[i] = mark_thread_device_work();
  });
  for (const DeviceWorkMark& m : after) queue_after_device_work(m);
  for (const Status& st : status) RETURN_IF_ERROR(st);
  return Status::ok();
}

// The drafters' observations of one collected step, made after its segments are applied.
struct StepObservations {
  std::vector<Drafter*> drafters;
  std::vector<Observation> observations;
  void add(RequestRun& run, const Segment& seg, const ForwardResult& out) {
    drafters.push_back(run.drafter.get());
    observations.push_back(Observation{&seg.ids, &out.taps});
  }
};

// Lets every drafter of `group` observe its forward: as one group call where the drafters
// group (Drafter::groups), else through run_drafters.
Status observe_all(const std::vector<Drafter*>& group,
                   const std::vector<Observation>& observations) {
  if (group.empty()) return Status::ok();
  if (group.front()->groups()) return group.front()->observe_group(group, observations);
  std::vector<std::function<Status()>> calls;
  for (size_t i = 0; i < group.size(); ++i)
    calls.push_back(
        [&, i] { return group[i]->observe(*observations[i].ids, *observations[i].taps); });
  return run_drafters(calls);
}

// Has every drafter of `group` propose `gamma` tokens after its anchor into `drafts`, as
// observe_all calls them.
Status propose_all(const std::vector<Drafter*>& group, const std::vector<int32_t>& anchors,
                   int gamma, std::vector<std::vector<int32_t>>& drafts) {
  drafts.assign(group.size(), {});
  if (group.empty()) return Status::ok();
  if (group.front()->groups()) {
    RETURN_IF_ERROR(group.front()->propose_group(group, anchors, gamma, drafts));
  } else {
    std::vector<std::function<Status()>> calls;
    for (size_t i = 0; i < group.size(); ++i)
      calls.push_back([&, i]() -> Status {
        ASSIGN_OR_RETURN(drafts[i], group[i]->propose(anchors[i], gamma));
        return Status::ok();
      });
    RETURN_IF_ERROR(run_drafters(calls));
  }
  for (const std::vector<int32_t>& d : drafts)
    if (static_cast<int>(d.size()) != gamma)
      return internal_error("drafter proposed " + std::to_string(d.size()) + " tokens");
  return Status::ok();
}

// The serving loop of serve_requests: each step schedules, submits and (`depth` steps later)
// applies the results of a batch of segments, until every request has finished.
class ServingLoop {
 public:
  ServingLoop(Engine& engine, const ServingOptions& opt, RunRecord* record)
      : engine_(engine),
        opt_(opt),
        cfg_(opt.config),
        gamma_(opt.gamma),
        speculative_(opt.gamma > 0),
        record_(record) {
    result_.spec.accepted_histogram.assign(static_cast<size_t>(gamma_) + 1, 0);
  }

  // Every request's slot and run, its drafter made when speculative.
  Status admit(const std::vector<std::vector<int32_t>>& prompts, const DrafterFactory& drafters);
  Status run_steps();
  // The last requests' releases: a step of updates only, so every holder frees their
  // state (the engine serves other requests with the same ids afterwards).
  Status flush_releases();
  // Per request, in prompt order: the sequences, histograms and their records.
  void finish_requests();
  // The acceptance figures and the serving and spec attributes of the record.
  ServingResult summarize();

 private:
  struct InFlight {
    int32_t step;
    std::vector<Segment> segments;
  };

  RequestSlot& slot_of(int32_t id) {
    return *std::find_if(slots_.begin(), slots_.end(),
                         [&](const RequestSlot& s) { return s.id == id; });
  }
  RequestRun& run_of(int32_t id) { return runs_[index_of_.at(id)]; }
  int32_t id_of(size_t i) const {
    return i < opt_.ids.size() ? opt_.ids[i] : static_cast<int32_t>(i);
  }
  void finish(RequestSlot& s) {
    s.phase = RequestPhase::kFinished;
    updates_.push_back(StateUpdate{s.id, StateUpdate::Kind::kRelease});
  }
  bool all_finished() const {
    return std::all_of(slots_.begin(), slots_.end(),
                       [](const RequestSlot& s) { return s.phase == RequestPhase::kFinished; });
  }
  bool done(const RequestRun& run) const {
    return static_cast<int>(run.seq.emitted.size()) >= opt_.max_new_tokens;
  }

  // With nothing scheduled and nothing in flight: ok while a request waits (to arrive, be
  // admitted or for its last step's results), else the error naming every request's state.
  Status check_waiting(int32_t step) const;
  // Schedules, proposes the drafts of and submits step `step` of `plan`.
  Status submit_step(int32_t step, const std::vector<ScheduledSegment>& plan);
  Result<Segment> make_segment(int32_t step, const ScheduledSegment& p);
  Status collect_one();
  // Applies one collected step's results to the requests it carried.
  Status apply(const InFlight& f, const BatchResult& b);
  void apply_verify(RequestSlot& s, RequestRun& run, const Segment& seg, const ForwardResult& out,
                    const int32_t* y, StepObservations& observed);

  Engine& engine_;
  const ServingOptions& opt_;
  const ServingConfig& cfg_;
  const int gamma_;
  const bool speculative_;
  RunRecord* record_;
  ServingResult result_;
  std::vector<RequestSlot> slots_;
  std::vector<RequestRun> runs_;
  std::map<int32_t, size_t> index_of_;
  std::deque<InFlight> in_flight_;
  std::vector<StateUpdate> updates_;
  int32_t forwards_ = 0;
  int32_t step_ = 0;
};

Status ServingLoop::admit(const std::vector<std::vector<int32_t>>& prompts,
                          const DrafterFactory& drafters) {
  const size_t n = prompts.size();
  slots_.resize(n);
  runs_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (prompts[i].empty()) return invalid_input("prompt " + std::to_string(i) + " is empty");
    RequestSlot& s = slots_[i];
    s.id = id_of(i);
    if (i < opt_.arrivals.size())
      s.arrival = opt_.arrivals[i];
    else if (i < cfg_.arrival_steps.size())
      s.arrival = cfg_.arrival_steps[i];
    else
      s.arrival = static_cast<int>(i) * cfg_.arrival_every;
    s.prompt_tokens = static_cast<int64_t>(prompts[i].size());
    if (auto it = opt_.forced_chunks.find(s.id); it != opt_.forced_chunks.end())
      s.forced_chunks = it->second;
    index_of_[s.id] = i;
    runs_[i].prompt = prompts[i];
    runs_[i].seq.prompt_ids = prompts[i];
    runs_[i].histogram.assign(static_cast<size_t>(gamma_) + 1, 0);
    if (speculative_) {
      ASSIGN_OR_RETURN(runs_[i].drafter, drafters(s.id));
    }
  }
  // The scheduler walks requests in id order.
  std::sort(slots_.begin(), slots_.end(),
            [](const RequestSlot& a, const RequestSlot& b) { return a.id < b.id; });
  return Status::ok();
}

void ServingLoop::apply_verify(RequestSlot& s, RequestRun& run, const Segment& seg,
                               const ForwardResult& out, const int32_t* y,
                               StepObservations& observed) {
  SpeculativeResult& res = result_.spec;
  const std::vector<int32_t>& x = run.draft;
  int a = 0;
  while (a < gamma_ && x[a] == y[a]) ++a;
  for (int i2 = 0; i2 < a; ++i2) run.seq.emitted.push_back(x[i2]);
  run.seq.emitted.push_back(y[a]);
  run.spec.proposals.push_back(x);
  run.spec.accepted.push_back(a);
  ++res.steps;
  res.accepted_total += a;
  ++res.accepted_histogram[static_cast<size_t>(a)];
  ++run.histogram[static_cast<size_t>(a)];
  const bool finished = done(run);
  if (a == gamma_) {
    // Every draft verified: the caches hold exactly these positions.
    observed.add(run, seg, out);
    run.position += gamma_ + 1;
    run.anchor = y[gamma_];
  } else if (!finished) {
    updates_.push_back(StateUpdate{s.id, StateUpdate::Kind::kRollback});
    run.bonus = y[a];
    run.replay.assign(seg.ids.begin(), seg.ids.begin() + a + 1);
    s.replay_tokens = a + 1;
    s.phase = RequestPhase::kReplay;
  }
  if (finished) finish(s);
}

Status ServingLoop::apply(const InFlight& f, const BatchResult& b) {
  StepObservations observed;  // the drafters' observations, after the loop
  if (b.segments.size() != f.segments.size())
    return internal_error(fmt::format("step {}: {} results for {} segments", f.step,
                                      b.segments.size(), f.segments.size()));
  for (size_t i = 0; i < f.segments.size(); ++i) {
    const Segment& seg = f.segments[i];
    const ForwardResult& out = b.segments[i];
    RequestSlot& s = slot_of(seg.request);
    RequestRun& run = run_of(seg.request);
    // The tokens on the host, wherever the engine computed them.
    const Tensor tokens = out.next_tokens.to(Device::kCpu);
    if (tokens.numel() != static_cast<int64_t>(seg.ids.size()))
      return internal_error(fmt::format("step {}: {} next tokens for a segment of {}", f.step,
                                        tokens.numel(), seg.ids.size()));
    const int32_t* y = tokens.data<int32_t>();
    const int64_t T = static_cast<int64_t>(seg.ids.size());
    switch (seg.kind) {
      case ForwardKind::kPrefill:
        if (speculative_) observed.add(run, seg, out);
        s.prefilled += T;
        if (s.prefilled < s.prompt_tokens) break;
        run.anchor = y[T - 1];
        run.seq.emitted.push_back(run.anchor);
        run.position = s.prompt_tokens;
        s.phase = speculative_ ? RequestPhase::kVerify : RequestPhase::kDecode;
        if (done(run)) finish(s);
        break;
      case ForwardKind::kDecode:
        run.anchor = y[0];
        run.seq.emitted.push_back(run.anchor);
        run.position += 1;
        if (done(run)) finish(s);
        break;
      case ForwardKind::kVerify:
        apply_verify(s, run, seg, out, y, observed);
        break;
      case ForwardKind::kReplay:
        // The replay predicts the verify's bonus token again when the engine rolled back
        // right on a batch-invariant backend; an engine under test that did not goes on
        // from its own prediction (its forwards already differ from PP=1's, which the
        // comparison reports). Elsewhere the row count may change the prediction: the
        // request goes on from the emitted bonus token (ServingOptions::batch_invariant).
        observed.add(run, seg, out);
        run.position += T;
        run.anchor = y[T - 1];
        if (y[T - 1] != run.bonus) {
          ++result_.spec.replay_bonus_mismatches;
          if (!opt_.batch_invariant) run.anchor = run.bonus;
        }
        s.phase = RequestPhase::kVerify;
        break;
    }
  }
  return observe_all(observed.drafters, observed.observations);
}

Status ServingLoop::collect_one() {
  ASSIGN_OR_RETURN(BatchResult b, engine_.collect(record_));
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  if (b.step != f.step)
    return internal_error(fmt::format("collected step {}, expected {}", b.step, f.step));
  return apply(f, b);
}

Status ServingLoop::check_waiting(int32_t step) const {
  const bool waiting = std::any_of(slots_.begin(), slots_.end(), [&](const RequestSlot& s) {
    return s.phase != RequestPhase::kFinished &&
           (s.arrival > step || !s.admitted || step < s.last_step + cfg_.depth);
  });
  if (waiting) return Status::ok();
  std::string states;
  for (const RequestSlot& s : slots_)
    if (s.phase != RequestPhase::kFinished)
      states +=
          fmt::format(" request {} (phase {}, prefilled {}/{}, replay {})", s.id,
                      static_cast<int>(s.phase), s.prefilled, s.prompt_tokens, s.replay_tokens);
  return internal_error(fmt::format("step {}: no request can be scheduled:{}", step, states));
}

Result<Segment> ServingLoop::make_segment(int32_t step, const ScheduledSegment& p) {
  const RequestRun& run = run_of(p.request);
  const RequestSlot& s = slot_of(p.request);
  Segment seg;
  seg.request = p.request;
  seg.kind = p.kind;
  seg.index = forwards_++;
  switch (p.kind) {
    case ForwardKind::kPrefill: {
      const int64_t begin = s.prefilled;
      seg.ids.assign(run.prompt.begin() + begin, run.prompt.begin() + begin + p.tokens);
      seg.first_position = begin;
      break;
    }
    case ForwardKind::kDecode:
      seg.ids = {run.anchor};
      seg.first_position = run.position;
      break;
    case ForwardKind::kVerify:
      // The anchor, then gamma drafts (proposed after the loop).
      seg.ids.assign(static_cast<size_t>(gamma_) + 1, run.anchor);
      seg.first_position = run.position;
      break;
    case ForwardKind::kReplay:
      seg.ids = run.replay;
      seg.first_position = run.position;
      break;
  }
  if (static_cast<int64_t>(seg.ids.size()) > 0 && p.kind == ForwardKind::kPrefill &&
      s.prefilled + p.tokens > s.prompt_tokens)
    return internal_error(
        fmt::format("request {}: a forced prefill chunk runs past its prompt", p.request));
  result_.schedule.push_back(ScheduleRow{step, seg.request, seg.kind, seg.first_position,
                                         static_cast<int64_t>(seg.ids.size()), seg.index});
  result_.tokens += static_cast<int64_t>(seg.ids.size());
  return seg;
}

Status ServingLoop::submit_step(int32_t step, const std::vector<ScheduledSegment>& plan) {
  BatchRequest batch;
  batch.step = step;
  batch.updates = std::move(updates_);
  updates_.clear();
  std::vector<Drafter*> proposers;  // the verify segments' drafters, their anchors
  std::vector<int32_t> anchors;
  std::vector<size_t> verifying;  // their segments' indices
  for (const ScheduledSegment& p : plan) {
    ASSIGN_OR_RETURN(Segment seg, make_segment(step, p));
    if (p.kind == ForwardKind::kVerify) {
      RequestRun& run = run_of(p.request);
      verifying.push_back(batch.segments.size());
      proposers.push_back(run.drafter.get());
      anchors.push_back(run.anchor);
    }
    batch.segments.push_back(std::move(seg));
  }
  std::vector<std::vector<int32_t>> drafts;
  RETURN_IF_ERROR(propose_all(proposers, anchors, gamma_, drafts));
  for (size_t i = 0; i < verifying.size(); ++i) {
    Segment& seg = batch.segments[verifying[i]];
    std::vector<int32_t>& draft = run_of(seg.request).draft;
    draft = std::move(drafts[i]);
    std::copy(draft.begin(), draft.end(), seg.ids.begin() + 1);
  }
  RETURN_IF_ERROR(engine_.submit(batch, record_ != nullptr));
  in_flight_.push_back(InFlight{step, batch.segments});
  return Status::ok();
}

Status ServingLoop::run_steps() {
  constexpr int32_t kMaxSteps = 1000000;
  int32_t& step = step_;
  while (!all_finished()) {
    if (step >= kMaxSteps) return internal_error("serving did not finish within the step bound");
    // Step `step` sees exactly the results of steps <= step - depth.
    while (!in_flight_.empty() && in_flight_.front().step <= step - cfg_.depth)
      RETURN_IF_ERROR(collect_one());
    if (all_finished()) break;
    std::vector<ScheduledSegment> plan = schedule_step(cfg_, gamma_, step, slots_);
    if (plan.empty()) {
      if (in_flight_.empty()) RETURN_IF_ERROR(check_waiting(step));
      ++step;
      continue;
    }
    RETURN_IF_ERROR(submit_step(step, plan));
    ++step;
  }
  while (!in_flight_.empty()) RETURN_IF_ERROR(collect_one());
  result_.steps = step;
  return Status::ok();
}

Status ServingLoop::flush_releases() {
  if (updates_.empty()) return Status::ok();
  BatchRequest flush;
  flush.step = step_;
  flush.updates = std::move(updates_);
  RETURN_IF_ERROR(engine_.submit(flush, false));
  ASSIGN_OR_RETURN(BatchResult none, engine_.collect(nullptr));
  if (!none.segments.empty()) return internal_error("a step of updates only returned results");
  return Status::ok();
}

void ServingLoop::finish_requests() {
  SpeculativeResult& res = result_.spec;
  for (size_t i = 0; i < runs_.size(); ++i) {
    RequestRun& run = runs_[i];
    const int32_t id = id_of(i);
    std::vector<int32_t> all = run.seq.emitted;
    if (static_cast<int>(run.seq.emitted.size()) > opt_.max_new_tokens)
      run.seq.emitted.resize(opt_.max_new_tokens);
    if (record_ != nullptr) {
      const std::string g = "generation/" + std::to_string(id) + "/";
      record_->add(g + "prompt_ids", ids_tensor(run.seq.prompt_ids));
      record_->add(g + "emitted", ids_tensor(run.seq.emitted));
      if (speculative_) {
        const std::string sp = "spec/" + std::to_string(id) + "/";
        record_->add(sp + "proposals", proposals_table(run.spec.proposals, gamma_));
        record_->add(sp + "accepted", ids_tensor(run.spec.accepted));
        record_->add(sp + "emitted", ids_tensor(all));
        record_->add(sp + "accepted_histogram", i32_tensor(run.histogram));
      }
    }
    res.generation.sequences.push_back(std::move(run.seq));
    res.sequences.push_back(std::move(run.spec));
    result_.histograms.push_back(run.histogram);
  }
}

ServingResult ServingLoop::summarize() {
  SpeculativeResult& res = result_.spec;
  res.generation.forwards = forwards_;
  if (res.steps > 0) {
    const double steps = static_cast<double>(res.steps);
    const double acc = static_cast<double>(res.accepted_total);
    res.mean_accepted = acc / steps;
    res.acceptance_rate = acc / (steps * gamma_);
    res.tokens_per_forward = 1.0 + acc / steps;
  }
  if (record_ != nullptr) {
    record_->add("serving/schedule", int_table(result_.schedule));
    record_->set_attr("serving", "steps", int64_t{result_.steps});
    record_->set_attr("serving", "tokens", result_.tokens);
    if (speculative_) {
      record_->add("spec/accepted_histogram", i32_tensor(res.accepted_histogram));
      record_->set_attr("spec", "steps", res.steps);
      record_->set_attr("spec", "gamma", int64_t{gamma_});
      record_->set_attr("spec", "acceptance_rate", res.acceptance_rate);
      record_->set_attr("spec", "tokens_per_forward", res.tokens_per_forward);
      record_->set_attr("spec", "mean_accepted", res.mean_accepted);
    }
  }
  return std::move(result_);
}

}  // namespace

Result<ServingResult> serve_requests(Engine& engine,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     const DrafterFactory& drafters, const ServingOptions& opt,
                                     RunRecord* record) {
  ServingLoop loop(engine, opt, record);
  RETURN_IF_ERROR(loop.admit(prompts, drafters));
  RETURN_IF_ERROR(loop.run_steps());
  RETURN_IF_ERROR(loop.flush_releases());
  loop.finish_requests();
  return loop.summarize();
}

}  // namespace splitcheck
