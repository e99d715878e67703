// The `inproc` transport: every stage a thread of this process, handing jobs through
// bounded queues; the handoff payload is serialised to bytes as between processes.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "harness/engine/transport.h"

namespace splitcheck {

class InprocTransport : public Transport {
 public:
  // Builds every stage and starts their threads (a refusal is kConfigRejected).
  static Result<std::unique_ptr<InprocTransport>> create(const std::vector<StageConfig>& stages,
                                                         WeightSource& source);
  ~InprocTransport() override;

  void submit(StageJob job) override;
  StageJob collect() override;
  std::vector<StageHoldings> holdings() const override;
  ComputedCalls computed() override;
  const WeightStore& last_stage_weights() const override { return stages_.back()->weights(); }
  bool carries_batches() const override { return true; }

 private:
  InprocTransport() = default;
  void stage_loop(size_t s);

  DumpLevel level_ = DumpLevel::kLayer;
  std::vector<std::unique_ptr<Stage>> stages_;
  // queues_[s] feeds stage s; the last one holds finished jobs.
  std::vector<std::unique_ptr<BoundedQueue<StageJob>>> queues_;
  std::vector<std::thread> threads_;
};

// Builds InprocTransports.
class InprocFactory : public TransportFactory {
 public:
  Result<std::unique_ptr<Transport>> connect(const std::vector<StageConfig>& stages,
                                             WeightSource& source) override;
};

}  // namespace splitcheck
