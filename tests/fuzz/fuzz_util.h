// Helpers shared by the libFuzzer targets of tests/fuzz/ (built with SPLITCHECK_FUZZ=ON).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/status.h"

namespace splitcheck::fuzz {

// Upper bound of the dataset bytes a target reads or compares per input, so that a
// file whose shape claims gigabytes of unwritten (fill-value) data stays cheap; the
// reader's own limit (kMaxDatasetBytes) is 1 TiB.
inline constexpr size_t kMaxFuzzDatasetBytes = size_t{16} << 20;

// Writes `size` bytes to a file of this process in $TMPDIR (or /tmp) and returns its
// path; `slot` tells apart several files of one input. HDF5 reads files by name.
inline std::string write_temp(const uint8_t* data, size_t size, int slot) {
  const char* dir = std::getenv("TMPDIR");
  std::string path = std::string(dir && *dir ? dir : "/tmp") + "/splitcheck-fuzz-" +
                     std::to_string(getpid()) + "-" + std::to_string(slot) + ".h5";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size != 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  if (std::fclose(f) != 0) std::abort();
  return path;
}

// A failure must be a clear invalid-input status: a crash, an internal error or an
// uncaught exception on a user's file is a bug.
inline void expect_invalid_input(const Status& s, const char* what) {
  if (s.is_ok() || s.code() == StatusCode::kInvalidInput) return;
  std::fprintf(stderr, "%s: status %d, not invalid input: %s\n", what, static_cast<int>(s.code()),
               s.message().c_str());
  std::abort();
}

}  // namespace splitcheck::fuzz
