#include "reference/partial_files.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace splitcheck {
namespace {

// A fixed table the signal handler can read without allocating or locking: a slot's
// state goes free -> claimed (path being copied) -> ready -> free.
constexpr int kSlots = 64;
constexpr size_t kMaxPath = 4096;
enum SlotState : int { kFree = 0, kClaimed = 1, kReady = 2 };
struct Slot {
  std::atomic<int> state{kFree};
  char path[kMaxPath];
};
std::array<Slot, kSlots> g_slots;

extern "C" void remove_partials_and_reraise(int sig) {
  for (Slot& s : g_slots)
    if (s.state.load() == kReady) ::unlink(s.path);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

PartialFile::PartialFile(const std::string& path) {
  if (path.size() >= kMaxPath) return;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kClaimed)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(kReady);
    slot_ = i;
    return;
  }
}

PartialFile::~PartialFile() {
  if (slot_ >= 0) g_slots[slot_].state.store(kFree);
}

PartialFile::PartialFile(PartialFile&& other) noexcept : slot_(other.slot_) { other.slot_ = -1; }

PartialFile& PartialFile::operator=(PartialFile&& other) noexcept {
  if (this != &other) {
    if (slot_ >= 0) g_slots[slot_].state.store(kFree);
    slot_ = other.slot_;
    other.slot_ = -1;
  }
  return *this;
}

void install_interrupt_cleanup() {
  struct sigaction sa {};
  sa.sa_handler = remove_partials_and_reraise;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void pause_midway_for_test() {
  const char* ms = std::getenv("SPLITCHECK_TEST_WRITE_PAUSE_MS");
  if (ms == nullptr) return;
  const long n = std::strtol(ms, nullptr, 10);
  if (n > 0) std::this_thread::sleep_for(std::chrono::milliseconds(n));
}

}  // namespace splitcheck
