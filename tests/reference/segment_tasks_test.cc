// run_segment_tasks: every task once, on several threads when asked, in order on the
// calling thread when not, and a task's exception rethrown after the others finish.
#include "reference/segment_tasks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace splitcheck {
namespace {

TEST(SegmentTasksTest, EveryTaskRunsOnceInParallel) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{5}, size_t{64}}) {
    std::vector<std::atomic<int>> runs(n);
    run_segment_tasks(n, true, [&](size_t i) { runs[i].fetch_add(1); });
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(runs[i].load(), 1) << "task " << i << " of " << n;
  }
}

TEST(SegmentTasksTest, NotParallelRunsInOrderOnTheCallingThread) {
  std::vector<size_t> order;
  const std::thread::id caller = std::this_thread::get_id();
  bool same_thread = true;
  run_segment_tasks(6, false, [&](size_t i) {
    order.push_back(i);
    same_thread = same_thread && std::this_thread::get_id() == caller;
  });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(same_thread);
}

// Where the machine has more than one core, two tasks that wait for each other (10 s at
// most) both see the other arrive only if they run at once, on two threads.
TEST(SegmentTasksTest, ParallelTasksRunAtOnceWhereThereAreCores) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: no helper thread";
  std::atomic<int> arrived{0};
  std::mutex mu;
  std::set<std::thread::id> threads;
  run_segment_tasks(2, true, [&](size_t) {
    {
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
    }
    arrived.fetch_add(1);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < 2 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::yield();
  });
  EXPECT_EQ(arrived.load(), 2);
  EXPECT_EQ(threads.size(), 2u);
}

TEST(SegmentTasksTest, AnExceptionReachesTheCallerAfterEveryTaskFinished) {
  std::atomic<int> finished{0};
  EXPECT_THROW(run_segment_tasks(8, true,
                                 [&](size_t i) {
                                   if (i == 3) throw std::runtime_error("task 3");
                                   finished.fetch_add(1);
                                 }),
               std::runtime_error);
  EXPECT_EQ(finished.load(), 7);
}

}  // namespace
}  // namespace splitcheck
