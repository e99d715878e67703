// What splitcheck does when it gets SIGINT, SIGTERM or SIGHUP while engines run: with an
// InterruptWatch alive, the signal is recorded instead of killing splitcheck, every live
// engine run (harness/runner/engine_process.h) is told to stop (its supervisor kills all of
// the engine's processes and the run returns ProcessOutcome::End::kInterrupted), and no new
// run starts. The caller then writes the report of what finished and exits with
// exit_status_for_signal(interrupt_signal()).
//
//   int main(int argc, char** argv) {
//     InterruptWatch watch;  // before any thread starts
//     ... run the sweep on worker threads, write the reports ...
//     if (interrupt_signal() != 0) return exit_status_for_signal(interrupt_signal());
//   }
//
// Without an InterruptWatch the three signals keep their default action.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <thread>

namespace splitcheck {

// While alive, SIGINT, SIGTERM and SIGHUP are blocked in the thread that constructed it
// (and so in every thread that thread starts afterwards) and taken by a watching thread,
// which records the first one (interrupt_signal()) and tells every live engine run to
// stop; a later signal repeats the stop. Construct it in the main thread before any other
// thread starts: a thread started earlier keeps the signals unblocked, and a signal
// delivered to it still ends the process. One at a time. The destructor stops the watching
// thread and restores the signal mask; the recorded signal stays.
class InterruptWatch {
 public:
  InterruptWatch();
  ~InterruptWatch();
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;

 private:
  sigset_t previous_mask_;
  int signal_fd_ = -1;  // reads the three signals
  int stop_fd_ = -1;    // an eventfd the destructor writes to end the thread
  std::thread thread_;
};

// The first signal an InterruptWatch took (SIGINT, SIGTERM or SIGHUP), or 0.
int interrupt_signal();

// The shell's convention for a process ended by `sig`: 128 + sig (130 for SIGINT, 143 for
// SIGTERM, 129 for SIGHUP).
int exit_status_for_signal(int sig);

// Forgets the recorded signal, so that one test's interrupt does not stop the next test's
// runs. Tests only.
void reset_interrupt_for_testing();

// The registry of live engine-run supervisors, for engine_process.cc. Registers `pid`, a
// process that stops its engine on SIGTERM; false when an interrupt was already recorded,
// in which case the caller stops it itself (registration and the watch's stop are ordered
// by one mutex, so no run misses an interrupt).
bool register_engine_supervisor(pid_t pid);

// Removes `pid`; call it before reaping the process, so its pid is never signalled after
// it may have been reused.
void unregister_engine_supervisor(pid_t pid);

}  // namespace splitcheck
