#include "reference/segment_tasks.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

namespace splitcheck {
namespace {

// One call's tasks: indices are taken from `next`; the call returns when `finished`
// reaches n.
struct Job {
  size_t n = 0;
  const std::function<void(size_t)>* task = nullptr;
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::condition_variable all_done;
  size_t finished = 0;
  std::exception_ptr error;

  // Takes and runs indices until none is left.
  void work() {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      std::exception_ptr e;
      try {
        (*task)(i);
      } catch (...) {
        e = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu);
      if (e && !error) error = e;
      if (++finished == n) all_done.notify_all();
    }
  }
};

// Helper threads, started at the first parallel call and kept for the process (detached:
// they only ever wait for jobs). They block SIGINT, SIGTERM and SIGHUP whenever they start:
// a process-directed signal then never lands on one of them, so an InterruptWatch
// (harness/runner/interrupt.h) constructed after the first parallel call still takes it.
class Helpers {
 public:
  static Helpers& get() {
    static Helpers* helpers = new Helpers;  // never destroyed: its threads outlive main
    return *helpers;
  }
  size_t count() const { return threads_; }
  // Offers the job to up to `wanted` helpers.
  void offer(const std::shared_ptr<Job>& job, size_t wanted) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t k = 0; k < wanted; ++k) queue_.push_back(job);
    }
    ready_.notify_all();
  }

 private:
  Helpers() {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    threads_ = std::min<size_t>(7, cores - 1);
    for (size_t t = 0; t < threads_; ++t)
      std::thread([this] {
        sigset_t stop;
        sigemptyset(&stop);
        for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop, sig);
        pthread_sigmask(SIG_BLOCK, &stop, nullptr);
        loop();
      }).detach();
  }
  void loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [this] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job->work();
    }
  }
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::shared_ptr<Job>> queue_;
  size_t threads_ = 0;
};

}  // namespace

void run_segment_tasks(size_t n, bool parallel, const std::function<void(size_t)>& task) {
  Helpers* helpers = parallel && n > 1 ? &Helpers::get() : nullptr;
  if (helpers == nullptr || helpers->count() == 0) {
    for (size_t i = 0; i < n; ++i) task(i);
    return;
  }
  auto job = std::make_shared<Job>();
  job->n = n;
  job->task = &task;
  helpers->offer(job, std::min(n - 1, helpers->count()));
  job->work();
  std::unique_lock<std::mutex> lock(job->mu);
  job->all_done.wait(lock, [&] { return job->finished == n; });
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace splitcheck
