// libFuzzer target: the handoff payload decoder (decode_payload). The receiver's
// expectation is read from the payload's own header when its sizes are small (so the
// decoder gets past the header checks), else a fixed one is used. A payload that
// decodes must encode back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "harness/engine/handoff.h"

namespace {

template <typename T>
T field(const uint8_t* data, size_t size, size_t offset, T fallback) {
  if (offset + sizeof(T) > size) return fallback;
  T v;
  std::memcpy(&v, data + offset, sizeof(T));
  return v;
}

splitcheck::PayloadExpectation expectation(const uint8_t* data, size_t size) {
  // Header offsets: magic 0, version 4, forward 8, tokens 12, hidden 20, bank_rows 28,
  // n_aux 36, aux ids 44.
  splitcheck::PayloadExpectation e;
  e.forward = field<int32_t>(data, size, 8, 0);
  e.tokens = field<int64_t>(data, size, 12, 2);
  e.hidden = field<int64_t>(data, size, 20, 4);
  e.bank_rows = field<int64_t>(data, size, 28, 1);
  int64_t n_aux = field<int64_t>(data, size, 36, 1);
  const bool small = e.tokens >= 0 && e.tokens <= 64 && e.hidden >= 0 && e.hidden <= 256 &&
                     e.bank_rows >= 0 && e.bank_rows <= 16 && n_aux >= 0 && n_aux <= 8;
  if (!small) {
    e.tokens = 2;
    e.hidden = 4;
    e.bank_rows = 1;
    n_aux = 1;
  }
  for (int64_t i = 0; i < n_aux; ++i)
    e.aux_ids.push_back(field<int32_t>(data, size, 44 + 4 * static_cast<size_t>(i), 0));
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* p = reinterpret_cast<const std::byte*>(data);
  const std::vector<std::byte> bytes(p, p + size);
  splitcheck::Result<splitcheck::HandoffPayload> r =
      splitcheck::decode_payload(bytes, expectation(data, size));
  if (!r.is_ok()) return 0;
  if (splitcheck::encode_payload(*r) != bytes) {
    std::fprintf(stderr, "decoded payload does not encode to its bytes\n");
    std::abort();
  }
  return 0;
}
