// The worker pool both sweeps run their cases on: the built-in engine's partitions
// (harness/sweep/sweep.cc) and an external engine's runs (harness/sweep/external_sweep.cc).
#pragma once

#include <cstddef>
#include <functional>

namespace splitcheck {

// Runs `run_one(i)` once for every i in [0, count) on `threads` worker threads (0: one per
// core; never more than `count`, at least one), each worker taking the next index not yet
// taken. After each case, `done(n)` is called with how many have finished, one call at a
// time (the progress line on stderr). Returns the number of threads it ran.
//
//   run_worker_pool(parts.size(), 4, [&](size_t i) { run(parts[i]); },
//                   [&](size_t n) { fmt::print(stderr, "\r[{}/{}]", n, parts.size()); });
int run_worker_pool(size_t count, int threads, const std::function<void(size_t)>& run_one,
                    const std::function<void(size_t)>& done);

}  // namespace splitcheck
