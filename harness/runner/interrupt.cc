#include "harness/runner/interrupt.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <vector>

#include "harness/dump/blocks.h"

namespace splitcheck {
namespace {

std::atomic<int> recorded_signal{0};

// Live supervisors and the recorded signal change together under this mutex.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::vector<pid_t>& live_supervisors() {
  static std::vector<pid_t> pids;
  return pids;
}

sigset_t interrupt_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

void on_interrupt(int sig) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  int none = 0;
  recorded_signal.compare_exchange_strong(none, sig);
  dump_reading_stopped().store(true);
  for (pid_t pid : live_supervisors()) kill(pid, SIGTERM);
}

// The watching thread: takes the signals from `signal_fd` until `stop_fd` is written.
void watch(int signal_fd, int stop_fd) {
  for (;;) {
    pollfd fds[2] = {{signal_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      std::perror("splitcheck: interrupt watch: poll");
      return;
    }
    if (fds[1].revents != 0) return;
    signalfd_siginfo info;
    if (read(signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info))
      on_interrupt(static_cast<int>(info.ssi_signo));
  }
}

}  // namespace

InterruptWatch::InterruptWatch() {
  const sigset_t set = interrupt_signals();
  pthread_sigmask(SIG_BLOCK, &set, &previous_mask_);
  signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC);
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (signal_fd_ < 0 || stop_fd_ < 0) {
    // Out of descriptors at startup: the signals keep their default action.
    std::perror("splitcheck: warning: cannot watch for SIGINT/SIGTERM/SIGHUP");
    if (signal_fd_ >= 0) close(signal_fd_);
    if (stop_fd_ >= 0) close(stop_fd_);
    signal_fd_ = stop_fd_ = -1;
    pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
    return;
  }
  thread_ = std::thread(watch, signal_fd_, stop_fd_);
}

InterruptWatch::~InterruptWatch() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  while (write(stop_fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
  thread_.join();
  close(signal_fd_);
  close(stop_fd_);
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

int interrupt_signal() { return recorded_signal.load(); }

int exit_status_for_signal(int sig) { return 128 + sig; }

void reset_interrupt_for_testing() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  recorded_signal.store(0);
  dump_reading_stopped().store(false);
}

bool register_engine_supervisor(pid_t pid) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (recorded_signal.load() != 0) return false;
  live_supervisors().push_back(pid);
  return true;
}

void unregister_engine_supervisor(pid_t pid) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<pid_t>& pids = live_supervisors();
  pids.erase(std::remove(pids.begin(), pids.end(), pid), pids.end());
}

}  // namespace splitcheck
