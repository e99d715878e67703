// The payload between pipeline stages (SPEC 2.7) and its byte encoding.
//
//   hidden  bf16(P + D), or P when there is no pending delta        [T, H]
//   bank    rows [0, cdiv(b_end, S)) of the sender's bank            [T, rows, H]
//   aux     every tap owned so far, ascending id, along hidden axis [T, n*H]
//
// Encoding (little-endian): magic "SCHP", version u32, forward i32, tokens i64,
// hidden i64, bank_rows i64, n_aux i64, aux ids i32[n_aux], then the three tensors'
// raw bf16 bytes. decode() checks every size against what the receiver expects.
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/status.h"
#include "kernels/tensor.h"

namespace splitcheck {

struct HandoffPayload {
  int32_t forward = 0;
  Tensor hidden;
  Tensor bank;
  std::vector<int32_t> aux_ids;
  Tensor aux;
};

std::vector<std::byte> encode_payload(const HandoffPayload& payload);

// What the receiving stage expects; a payload that disagrees is refused with a message
// naming the field.
struct PayloadExpectation {
  int32_t forward = 0;
  int64_t tokens = 0;
  int64_t hidden = 0;
  int64_t bank_rows = 0;
  std::vector<int32_t> aux_ids;
};
Result<HandoffPayload> decode_payload(const std::vector<std::byte>& bytes,
                                      const PayloadExpectation& expect);

}  // namespace splitcheck
