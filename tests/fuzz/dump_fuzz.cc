// libFuzzer target: the dump reader. The input is written to a file, opened with
// DumpReader::open, and every dataset (whole and in row chunks) and every attribute of
// every object is read; then verify_dump() checks the file. Every failure must be an
// invalid-input status.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "harness/dump/dump.h"
#include "harness/dump/verify.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void read_everything(splitcheck::DumpReader& r) {
  using splitcheck::fuzz::expect_invalid_input;
  size_t total = 0;
  for (const splitcheck::DatasetInfo& d : r.datasets()) total += d.nbytes;
  const bool small = total <= splitcheck::fuzz::kMaxFuzzDatasetBytes;
  std::vector<std::byte> buf;
  for (const splitcheck::DatasetInfo& d : r.datasets()) {
    if (small) {
      expect_invalid_input(r.read(d.path).status(), "DumpReader::read");
      const int64_t rows = d.shape.empty() ? 1 : d.shape[0];
      for (int64_t row = 0; row < rows && !d.shape.empty(); row += 2)
        expect_invalid_input(r.read_chunk(d.path, row, std::min<int64_t>(2, rows - row), buf),
                             "DumpReader::read_chunk");
    }
    (void)r.contiguous_offset(d.path);
    (void)r.find(d.path);
  }
  for (const std::string& object : r.objects()) {
    expect_invalid_input(r.attributes(object).status(), "DumpReader::attributes");
    (void)r.exists(object);
    expect_invalid_input(r.attr_string(object, "dtype").status(), "DumpReader::attr_string");
    expect_invalid_input(r.attr_int(object, "order").status(), "DumpReader::attr_int");
    expect_invalid_input(r.attr_double(object, "order").status(), "DumpReader::attr_double");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = splitcheck::fuzz::write_temp(data, size, 0);
  bool small = false;
  {
    splitcheck::Result<splitcheck::DumpReader> r = splitcheck::DumpReader::open(path);
    splitcheck::fuzz::expect_invalid_input(r.status(), "DumpReader::open");
    if (r.is_ok()) {
      read_everything(*r);
      size_t total = 0;
      for (const splitcheck::DatasetInfo& d : r->datasets()) total += d.nbytes;
      small = total <= splitcheck::fuzz::kMaxFuzzDatasetBytes;
    }
  }
  if (small)
    splitcheck::fuzz::expect_invalid_input(splitcheck::verify_dump(path, 4096).status(),
                                           "verify_dump");
  unlink(path.c_str());
  return 0;
}
