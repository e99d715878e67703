// Running the segments of a ragged batch (reference/batch.h) at once. A segment's steps
// 1-4 of a layer (AttnRes, attention, AttnRes) read and write only its own state, cache,
// dispatch trace and record, so where it runs changes none of its bits or events.
#pragma once

#include <cstddef>
#include <functional>

namespace splitcheck {

// Runs task(i) once for every i < n and returns when all have finished: on the calling
// thread and on the process's helper threads (one fewer than the cores, at most 7), each
// taking the next i not yet taken, so a caller never waits for a task nobody runs. With
// parallel false, or n <= 1, one after another on the calling thread, in order. The first
// exception a task throws is rethrown here, after every taken task has finished.
void run_segment_tasks(size_t n, bool parallel, const std::function<void(size_t)>& task);

}  // namespace splitcheck
