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

Result<ServingResult> serve_requests(Engine& engine,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     const DrafterFactory& drafters, const ServingOptions& opt,
                                     RunRecord* record) {
  const ServingConfig& cfg = opt.config;
  const int gamma = opt.gamma;
  const bool speculative = gamma > 0;
  const size_t n = prompts.size();
  ServingResult result;
  SpeculativeResult& res = result.spec;
  res.accepted_histogram.assign(static_cast<size_t>(gamma) + 1, 0);
  std::vector<RequestSlot> slots(n);
  std::vector<RequestRun> runs(n);
  std::map<int32_t, size_t> index_of;
  for (size_t i = 0; i < n; ++i) {
    if (prompts[i].empty()) return invalid_input("prompt " + std::to_string(i) + " is empty");
    RequestSlot& s = slots[i];
    s.id = i < opt.ids.size() ? opt.ids[i] : static_cast<int32_t>(i);
    if (i < opt.arrivals.size())
      s.arrival = opt.arrivals[i];
    else if (i < cfg.arrival_steps.size())
      s.arrival = cfg.arrival_steps[i];
    else
      s.arrival = static_cast<int>(i) * cfg.arrival_every;
    s.prompt_tokens = static_cast<int64_t>(prompts[i].size());
    if (auto it = opt.forced_chunks.find(s.id); it != opt.forced_chunks.end())
      s.forced_chunks = it->second;
    index_of[s.id] = i;
    runs[i].prompt = prompts[i];
    runs[i].seq.prompt_ids = prompts[i];
    runs[i].histogram.assign(static_cast<size_t>(gamma) + 1, 0);
    if (speculative) {
      ASSIGN_OR_RETURN(runs[i].drafter, drafters(s.id));
    }
  }
  // The scheduler walks requests in id order.
  std::sort(slots.begin(), slots.end(),
            [](const RequestSlot& a, const RequestSlot& b) { return a.id < b.id; });

  struct InFlight {
    int32_t step;
    std::vector<Segment> segments;
  };
  std::deque<InFlight> in_flight;
  std::vector<StateUpdate> updates;
  int32_t forwards = 0;
  auto slot_of = [&](int32_t id) -> RequestSlot& {
    return *std::find_if(slots.begin(), slots.end(),
                         [&](const RequestSlot& s) { return s.id == id; });
  };
  auto finish = [&](RequestSlot& s) {
    s.phase = RequestPhase::kFinished;
    updates.push_back(StateUpdate{s.id, StateUpdate::Kind::kRelease});
  };

  // Runs the drafters' calls of one step. Drafters that group (Drafter::groups) take them
  // as one group call (observe_all, propose_all). Others run each request's drafter on its
  // own (they share nothing but read-only weights): at once on helper threads, each queued
  // after this thread's device work so far, and this thread's later work after theirs.
  // The first failure in the calls' order is returned.
  // SPLITCHECK_SERVING_DRAFTER_THREADS=0 runs them one after another on this thread (the
  // same bits; for measuring what the helper threads gain).
  static const bool drafter_threads = [] {
    const char* v = std::getenv("SPLITCHECK_SERVING_DRAFTER_THREADS");
    return v == nullptr || std::string(v) != "0";
  }();
  auto run_drafters = [&](const std::vector<std::function<Status()>>& calls) -> Status {
    if (calls.empty()) return Status::ok();
    std::vector<Status> status(calls.size(), Status::ok());
    const DeviceWorkMark before = mark_thread_device_work();
    std::vector<DeviceWorkMark> after(calls.size());
    run_segment_tasks(calls.size(), drafter_threads, [&](size_t i) {
      queue_after_device_work(before);
      status[i] = calls[i]();
      after[i] = mark_thread_device_work();
    });
    for (const DeviceWorkMark& m : after) queue_after_device_work(m);
    for (const Status& st : status) RETURN_IF_ERROR(st);
    return Status::ok();
  };
  auto observe_all = [&](const std::vector<Drafter*>& group,
                         const std::vector<Observation>& observations) -> Status {
    if (group.empty()) return Status::ok();
    if (group.front()->groups()) return group.front()->observe_group(group, observations);
    std::vector<std::function<Status()>> calls;
    for (size_t i = 0; i < group.size(); ++i)
      calls.push_back(
          [&, i] { return group[i]->observe(*observations[i].ids, *observations[i].taps); });
    return run_drafters(calls);
  };
  auto propose_all = [&](const std::vector<Drafter*>& group, const std::vector<int32_t>& anchors,
                         std::vector<std::vector<int32_t>>& drafts) -> Status {
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
  };

  // Applies one collected step's results to the requests it carried.
  auto apply = [&](const InFlight& f, const BatchResult& b) -> Status {
    std::vector<Drafter*> observers;  // the drafters' observations, after the loop
    std::vector<Observation> observations;
    auto observe = [&](RequestRun& run, const Segment& seg, const ForwardResult& out) {
      observers.push_back(run.drafter.get());
      observations.push_back(Observation{&seg.ids, &out.taps});
    };
    if (b.segments.size() != f.segments.size())
      return internal_error(fmt::format("step {}: {} results for {} segments", f.step,
                                        b.segments.size(), f.segments.size()));
    for (size_t i = 0; i < f.segments.size(); ++i) {
      const Segment& seg = f.segments[i];
      const ForwardResult& out = b.segments[i];
      RequestSlot& s = slot_of(seg.request);
      RequestRun& run = runs[index_of.at(seg.request)];
      // The tokens on the host, wherever the engine computed them.
      const Tensor tokens = out.next_tokens.to(Device::kCpu);
      if (tokens.numel() != static_cast<int64_t>(seg.ids.size()))
        return internal_error(fmt::format("step {}: {} next tokens for a segment of {}", f.step,
                                          tokens.numel(), seg.ids.size()));
      const int32_t* y = tokens.data<int32_t>();
      const int64_t T = static_cast<int64_t>(seg.ids.size());
      switch (seg.kind) {
        case ForwardKind::kPrefill:
          if (speculative) observe(run, seg, out);
          s.prefilled += T;
          if (s.prefilled < s.prompt_tokens) break;
          run.anchor = y[T - 1];
          run.seq.emitted.push_back(run.anchor);
          run.position = s.prompt_tokens;
          s.phase = speculative ? RequestPhase::kVerify : RequestPhase::kDecode;
          if (static_cast<int>(run.seq.emitted.size()) >= opt.max_new_tokens) finish(s);
          break;
        case ForwardKind::kDecode:
          run.anchor = y[0];
          run.seq.emitted.push_back(run.anchor);
          run.position += 1;
          if (static_cast<int>(run.seq.emitted.size()) >= opt.max_new_tokens) finish(s);
          break;
        case ForwardKind::kVerify: {
          const std::vector<int32_t>& x = run.draft;
          int a = 0;
          while (a < gamma && x[a] == y[a]) ++a;
          for (int i2 = 0; i2 < a; ++i2) run.seq.emitted.push_back(x[i2]);
          run.seq.emitted.push_back(y[a]);
          run.spec.proposals.push_back(x);
          run.spec.accepted.push_back(a);
          ++res.steps;
          res.accepted_total += a;
          ++res.accepted_histogram[static_cast<size_t>(a)];
          ++run.histogram[static_cast<size_t>(a)];
          const bool done = static_cast<int>(run.seq.emitted.size()) >= opt.max_new_tokens;
          if (a == gamma) {
            // Every draft verified: the caches hold exactly these positions.
            observe(run, seg, out);
            run.position += gamma + 1;
            run.anchor = y[gamma];
          } else if (!done) {
            updates.push_back(StateUpdate{s.id, StateUpdate::Kind::kRollback});
            run.bonus = y[a];
            run.replay.assign(seg.ids.begin(), seg.ids.begin() + a + 1);
            s.replay_tokens = a + 1;
            s.phase = RequestPhase::kReplay;
          }
          if (done) finish(s);
          break;
        }
        case ForwardKind::kReplay:
          // The replay predicts the verify's bonus token again when the engine rolled back
          // right on a batch-invariant backend; an engine under test that did not goes on
          // from its own prediction (its forwards already differ from PP=1's, which the
          // comparison reports). Elsewhere the row count may change the prediction: the
          // request goes on from the emitted bonus token (ServingOptions::batch_invariant).
          observe(run, seg, out);
          run.position += T;
          run.anchor = y[T - 1];
          if (y[T - 1] != run.bonus) {
            ++res.replay_bonus_mismatches;
            if (!opt.batch_invariant) run.anchor = run.bonus;
          }
          s.phase = RequestPhase::kVerify;
          break;
      }
    }
    return observe_all(observers, observations);
  };
  auto collect_one = [&]() -> Status {
    ASSIGN_OR_RETURN(BatchResult b, engine.collect(record));
    InFlight f = std::move(in_flight.front());
    in_flight.pop_front();
    if (b.step != f.step)
      return internal_error(fmt::format("collected step {}, expected {}", b.step, f.step));
    return apply(f, b);
  };

  constexpr int32_t kMaxSteps = 1000000;
  int32_t step = 0;
  auto all_finished = [&] {
    return std::all_of(slots.begin(), slots.end(),
                       [](const RequestSlot& s) { return s.phase == RequestPhase::kFinished; });
  };
  while (!all_finished()) {
    if (step >= kMaxSteps) return internal_error("serving did not finish within the step bound");
    // Step `step` sees exactly the results of steps <= step - depth.
    while (!in_flight.empty() && in_flight.front().step <= step - cfg.depth)
      RETURN_IF_ERROR(collect_one());
    if (all_finished()) break;
    std::vector<ScheduledSegment> plan = schedule_step(cfg, gamma, step, slots);
    if (plan.empty()) {
      if (in_flight.empty()) {
        const bool waiting = std::any_of(slots.begin(), slots.end(), [&](const RequestSlot& s) {
          return s.phase != RequestPhase::kFinished &&
                 (s.arrival > step || !s.admitted || step < s.last_step + cfg.depth);
        });
        if (!waiting) {
          std::string states;
          for (const RequestSlot& s : slots)
            if (s.phase != RequestPhase::kFinished)
              states += fmt::format(" request {} (phase {}, prefilled {}/{}, replay {})", s.id,
                                    static_cast<int>(s.phase), s.prefilled, s.prompt_tokens,
                                    s.replay_tokens);
          return internal_error(
              fmt::format("step {}: no request can be scheduled:{}", step, states));
        }
      }
      ++step;
      continue;
    }
    BatchRequest batch;
    batch.step = step;
    batch.updates = std::move(updates);
    updates.clear();
    std::vector<Drafter*> proposers;  // the verify segments' drafters, their anchors
    std::vector<int32_t> anchors;
    std::vector<size_t> verifying;  // their segments' indices
    for (const ScheduledSegment& p : plan) {
      RequestRun& run = runs[index_of.at(p.request)];
      const RequestSlot& s = slot_of(p.request);
      Segment seg;
      seg.request = p.request;
      seg.kind = p.kind;
      seg.index = forwards++;
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
        case ForwardKind::kVerify: {
          // The anchor, then gamma drafts (proposed after the loop).
          seg.ids.assign(static_cast<size_t>(gamma) + 1, run.anchor);
          seg.first_position = run.position;
          verifying.push_back(batch.segments.size());
          proposers.push_back(run.drafter.get());
          anchors.push_back(run.anchor);
          break;
        }
        case ForwardKind::kReplay:
          seg.ids = run.replay;
          seg.first_position = run.position;
          break;
      }
      if (static_cast<int64_t>(seg.ids.size()) > 0 && p.kind == ForwardKind::kPrefill &&
          s.prefilled + p.tokens > s.prompt_tokens)
        return internal_error(
            fmt::format("request {}: a forced prefill chunk runs past its prompt", p.request));
      result.schedule.push_back(ScheduleRow{step, seg.request, seg.kind, seg.first_position,
                                            static_cast<int64_t>(seg.ids.size()), seg.index});
      result.tokens += static_cast<int64_t>(seg.ids.size());
      batch.segments.push_back(std::move(seg));
    }
    std::vector<std::vector<int32_t>> drafts;
    RETURN_IF_ERROR(propose_all(proposers, anchors, drafts));
    for (size_t i = 0; i < verifying.size(); ++i) {
      Segment& seg = batch.segments[verifying[i]];
      std::vector<int32_t>& draft = runs[index_of.at(seg.request)].draft;
      draft = std::move(drafts[i]);
      std::copy(draft.begin(), draft.end(), seg.ids.begin() + 1);
    }
    RETURN_IF_ERROR(engine.submit(batch, record != nullptr));
    in_flight.push_back(InFlight{step, batch.segments});
    ++step;
  }
  while (!in_flight.empty()) RETURN_IF_ERROR(collect_one());
  result.steps = step;
  // The last requests' releases: a step of updates only, so every holder frees their
  // state (the engine serves other requests with the same ids afterwards).
  if (!updates.empty()) {
    BatchRequest flush;
    flush.step = step;
    flush.updates = std::move(updates);
    RETURN_IF_ERROR(engine.submit(flush, false));
    ASSIGN_OR_RETURN(BatchResult none, engine.collect(nullptr));
    if (!none.segments.empty()) return internal_error("a step of updates only returned results");
  }

  // Per request, in prompt order.
  for (size_t i = 0; i < n; ++i) {
    RequestRun& run = runs[i];
    const int32_t id = i < opt.ids.size() ? opt.ids[i] : static_cast<int32_t>(i);
    std::vector<int32_t> all = run.seq.emitted;
    if (static_cast<int>(run.seq.emitted.size()) > opt.max_new_tokens)
      run.seq.emitted.resize(opt.max_new_tokens);
    if (record != nullptr) {
      const std::string g = "generation/" + std::to_string(id) + "/";
      record->add(g + "prompt_ids", ids_tensor(run.seq.prompt_ids));
      record->add(g + "emitted", ids_tensor(run.seq.emitted));
      if (speculative) {
        const std::string sp = "spec/" + std::to_string(id) + "/";
        record->add(sp + "proposals", proposals_table(run.spec.proposals, gamma));
        record->add(sp + "accepted", ids_tensor(run.spec.accepted));
        record->add(sp + "emitted", ids_tensor(all));
        record->add(sp + "accepted_histogram", i32_tensor(run.histogram));
      }
    }
    res.generation.sequences.push_back(std::move(run.seq));
    res.sequences.push_back(std::move(run.spec));
    result.histograms.push_back(run.histogram);
  }
  res.generation.forwards = forwards;
  if (res.steps > 0) {
    const double steps = static_cast<double>(res.steps);
    const double acc = static_cast<double>(res.accepted_total);
    res.mean_accepted = acc / steps;
    res.acceptance_rate = acc / (steps * gamma);
    res.tokens_per_forward = 1.0 + acc / steps;
  }
  if (record != nullptr) {
    record->add("serving/schedule", int_table(result.schedule));
    record->set_attr("serving", "steps", int64_t{result.steps});
    record->set_attr("serving", "tokens", result.tokens);
    if (speculative) {
      record->add("spec/accepted_histogram", i32_tensor(res.accepted_histogram));
      record->set_attr("spec", "steps", res.steps);
      record->set_attr("spec", "gamma", int64_t{gamma});
      record->set_attr("spec", "acceptance_rate", res.acceptance_rate);
      record->set_attr("spec", "tokens_per_forward", res.tokens_per_forward);
      record->set_attr("spec", "mean_accepted", res.mean_accepted);
    }
  }
  return result;
}

}  // namespace splitcheck
