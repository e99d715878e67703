// Files being written under a temporary name (`<path>.partial`, renamed into place when
// complete). While a PartialFile is alive its path is registered, and an interrupt
// (SIGINT, SIGTERM) removes every registered file before the process ends with that
// signal: an interrupted dump, report, checkpoint or golden write leaves neither a
// partial file at the final name nor a temporary beside it. After SIGKILL, which no
// handler sees, the temporary stays; every writer truncates its temporary on the next
// run, and nothing reads a `.partial` file.
#pragma once

#include <string>

namespace splitcheck {

// Registers `path` for removal on interrupt for as long as the object lives.
class PartialFile {
 public:
  explicit PartialFile(const std::string& path);
  ~PartialFile();
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;
  PartialFile(PartialFile&& other) noexcept;
  PartialFile& operator=(PartialFile&& other) noexcept;

 private:
  int slot_ = -1;  // -1: nothing registered (registry full, or moved from)
};

// Installs the SIGINT and SIGTERM handler that removes the registered files and then
// ends the process with the same signal (exit status 128 + signal in a shell). The
// command line calls it once at start.
void install_interrupt_cleanup();

// Test hook: when the environment variable SPLITCHECK_TEST_WRITE_PAUSE_MS is a positive
// number, sleeps that long. Writers call it once their temporary holds part of the output,
// so a test can deliver a real signal while a write is in progress. Unset (always, outside
// that test), it returns at once.
void pause_midway_for_test();

}  // namespace splitcheck
