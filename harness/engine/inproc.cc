#include "harness/engine/inproc.h"

namespace splitcheck {

Result<std::unique_ptr<InprocTransport>> InprocTransport::create(
    const std::vector<StageConfig>& configs, WeightSource& source) {
  std::unique_ptr<InprocTransport> t(new InprocTransport());
  t->level_ = configs.front().level;
  for (const StageConfig& sc : configs) {
    ASSIGN_OR_RETURN(std::unique_ptr<Stage> stage, Stage::create(sc, source));
    t->stages_.push_back(std::move(stage));
  }
  // Tap 0 travels unless the last stage takes it to be resident (Stage::tap0_resident).
  const bool tap0_relayed = !t->stages_.back()->tap0_resident();
  for (auto& stage : t->stages_) stage->set_tap0_relayed(tap0_relayed);
  for (size_t s = 0; s <= t->stages_.size(); ++s)
    t->queues_.push_back(std::make_unique<BoundedQueue<StageJob>>(2));
  finish_thread_device_work();  // the stages' device tensors, written here, go to their threads
  for (size_t s = 0; s < t->stages_.size(); ++s)
    t->threads_.emplace_back([transport = t.get(), s] { transport->stage_loop(s); });
  return t;
}

InprocTransport::~InprocTransport() {
  for (auto& q : queues_) q->close();
  for (std::thread& th : threads_) th.join();
}

void InprocTransport::stage_loop(size_t s) {
  while (std::optional<StageJob> job = queues_[s]->pop()) {
    run_stage_job_guarded(*stages_[s], level_, *job);
    finish_thread_device_work();  // the job's device tensors go to the next thread
    if (!queues_[s + 1]->push(std::move(*job))) return;
  }
}

void InprocTransport::submit(StageJob job) { queues_.front()->push(std::move(job)); }

StageJob InprocTransport::collect() {
  std::optional<StageJob> done = queues_.back()->pop();
  if (done) return std::move(*done);
  StageJob failed;
  failed.status = internal_error("partitioned engine stopped");
  return failed;
}

std::vector<StageHoldings> InprocTransport::holdings() const {
  std::vector<StageHoldings> h;
  for (const auto& s : stages_) h.push_back(s->holdings());
  return h;
}

ComputedCalls InprocTransport::computed() {
  ComputedCalls sum;
  for (const auto& s : stages_) sum += s->computed();
  return sum;
}

Result<std::unique_ptr<Transport>> InprocFactory::connect(const std::vector<StageConfig>& stages,
                                                          WeightSource& source) {
  ASSIGN_OR_RETURN(std::unique_ptr<InprocTransport> t, InprocTransport::create(stages, source));
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace splitcheck
