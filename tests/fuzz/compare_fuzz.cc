// libFuzzer target: the comparator on a pair of dumps. The input is
//   u32 little-endian n, then dump A (n bytes, fewer if the input is shorter), then dump B
// (scripts/fuzz.sh builds such inputs from pairs of seed dumps). Both are written to
// files and compared twice (see below); every failure must be an invalid-input status.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "harness/dump/compare.h"
#include "harness/dump/dump.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// True when `path` opens and its datasets are small enough to stream quickly.
bool small_dump(const std::string& path) {
  splitcheck::Result<splitcheck::DumpReader> r = splitcheck::DumpReader::open(path);
  if (!r.is_ok()) return true;  // compare_dumps refuses it at once
  size_t total = 0;
  for (const splitcheck::DatasetInfo& d : r->datasets()) total += d.nbytes;
  return total <= splitcheck::fuzz::kMaxFuzzDatasetBytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t n = 0;
  std::memcpy(&n, data, 4);
  data += 4;
  size -= 4;
  const size_t na = std::min<size_t>(n, size);
  const std::string a = splitcheck::fuzz::write_temp(data, na, 1);
  const std::string b = splitcheck::fuzz::write_temp(data + na, size - na, 2);
  if (small_dump(a) && small_dump(b)) {
    // Exact lane, every byte read in small blocks; then trusted digests on the
    // approximate lane, stopping at the first difference.
    splitcheck::CompareOptions exact;
    exact.chunk_bytes = 4096;
    splitcheck::CompareOptions trusted;
    trusted.trust_digest = true;
    trusted.approximate = true;
    trusted.stop_at_first = true;
    for (const splitcheck::CompareOptions& options : {exact, trusted}) {
      splitcheck::Result<splitcheck::CompareResult> r = splitcheck::compare_dumps(a, b, options);
      splitcheck::fuzz::expect_invalid_input(r.status(), "compare_dumps");
      if (r.is_ok()) (void)splitcheck::verdict(*r);
    }
  }
  unlink(a.c_str());
  unlink(b.c_str());
  return 0;
}
