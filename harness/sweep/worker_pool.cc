#include "harness/sweep/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace splitcheck {

int run_worker_pool(size_t count, int threads, const std::function<void(size_t)>& run_one,
                    const std::function<void(size_t)>& done) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(count)));
  std::atomic<size_t> next{0}, finished{0};
  std::mutex done_mu;
  auto worker = [&] {
    for (size_t i = next++; i < count; i = next++) {
      run_one(i);
      const size_t n = ++finished;
      std::lock_guard<std::mutex> lock(done_mu);
      done(n);
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  return threads;
}

}  // namespace splitcheck
