// Transports carry jobs (stage_job.h) through the stages of one partition: the seam
// between the partitioned engine and where its stages live. `inproc` runs each stage on
// its own thread of this process and connects them with bounded blocking queues (inproc.h);
// `mpi` runs each stage in its own process (mpi_transport.h). The handoff payload is the
// same bytes (handoff.h) whatever carries it, and every receiving stage checks it.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "harness/engine/placement.h"
#include "harness/engine/stage_job.h"

namespace splitcheck {

// A bounded multi-producer multi-consumer queue; close() wakes every waiter.
template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {}
  // Blocks while full; returns false when the queue was closed.
  bool push(T value) {
    std::unique_lock<std::mutex> lock(mu_);
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(std::move(value));
    not_empty_.notify_one();
    return true;
  }
  // Blocks while empty; nullopt once closed and drained.
  std::optional<T> pop() {
    std::unique_lock<std::mutex> lock(mu_);
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) return std::nullopt;
    T v = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return v;
  }
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

 private:
  size_t capacity_;
  std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<T> items_;
  bool closed_ = false;
};

// The stages of one partition, wherever they run. Jobs leave in submit() order and come
// back from collect() in the same order.
class Transport {
 public:
  virtual ~Transport() = default;
  // Hands a job to the first stage.
  virtual void submit(StageJob job) = 0;
  // The next job the last stage finished. A stage's failure, or the transport's (a
  // process that died, a receive past its deadline, a malformed message), is job.status.
  virtual StageJob collect() = 0;
  // What each stage holds, in stage order.
  virtual std::vector<StageHoldings> holdings() const = 0;
  // The layer and head calls the stages computed, summed (read after the run).
  virtual ComputedCalls computed() = 0;
  // The last stage's weights as it placed them: the drafter beside the last stage binds
  // its target lm_head and embedding copy here.
  virtual const WeightStore& last_stage_weights() const = 0;
  // Whether batched serving steps (JobKind::kBatch) can travel through it.
  virtual bool carries_batches() const { return false; }
};

// How a partition's stages are built: one StageConfig per stage, every stage loading only
// what it holds from `source`.
class TransportFactory {
 public:
  virtual ~TransportFactory() = default;
  // A stage that refuses its configuration makes this return StatusCode::kConfigRejected.
  virtual Result<std::unique_ptr<Transport>> connect(const std::vector<StageConfig>& stages,
                                                     WeightSource& source) = 0;
  // The most stages one partition may have (the ranks an MPI job was given).
  virtual int max_stages() const { return std::numeric_limits<int>::max(); }
  // Why no further partition can run (a process of the transport was lost); empty while
  // it can.
  virtual std::string lost() const { return {}; }
  // Where stages 0..stages-1 of its partitions run, computing on `backend` (in-process
  // unless overridden: every stage a thread of this process, rank 0).
  virtual std::vector<StagePlacement> placement(int stages, const std::string& backend) const {
    std::vector<StagePlacement> out;
    for (int s = 0; s < stages; ++s) out.push_back(this_process_placement(s, 0, backend));
    return out;
  }
};

}  // namespace splitcheck
