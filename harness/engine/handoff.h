// The payload between pipeline stages (SPEC 2.7) and its byte encoding.
//
//   hidden  bf16(P + D), or P when there is no pending delta        [T, H]
//   bank    rows [0, cdiv(b_end, S)) of the sender's bank            [T, rows, H]
//   aux     every tap owned so far, ascending id, along hidden axis [T, n*H]
//
// Encoding (little-endian): magic "SCHP", version u32, forward i32, tokens i64,
// hidden i64, bank_rows i64, n_aux i64, aux ids i32[n_aux], then the three tensors'
// raw bf16 bytes. decode() checks every size against what the receiver expects.
//
// Split (the device path, harness/transport/nccl_channel.h): the same bytes in two parts,
// the header (everything before the tensors) in host memory and the body (the three
// tensors back to back, bf16) where the stage computes, built and read by byte copies on
// that device (Tensor::copy_runs_from), never through the host. header + body's bytes are
// exactly encode_payload's bytes, and the receiver makes the same checks, plus the body's
// exact length.
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

// The split form's header: encode_payload's bytes before the tensors, for a payload of
// `tokens` x `hidden` with `bank_rows` bank rows and the taps `aux_ids`.
std::vector<std::byte> encode_payload_header(int32_t forward, int64_t tokens, int64_t hidden,
                                             int64_t bank_rows,
                                             const std::vector<int32_t>& aux_ids);
// The bytes a body must have for that header: tokens * hidden * (1 + bank_rows + n_aux) bf16.
size_t payload_body_bytes(int64_t tokens, int64_t hidden, int64_t bank_rows, size_t n_aux);
// `payload` split: its header, and its body as one bf16 tensor on `device`.
std::vector<std::byte> encode_payload_header(const HandoffPayload& payload);
Tensor payload_body(const HandoffPayload& payload, Device device);
// Reads a split payload: the header is checked as decode_payload checks it (and must end
// where its aux ids end), the body must have exactly the bytes the header says; the
// tensors are new tensors on the body's device, copied out of it (the body may be a
// buffer the channel reuses).
Result<HandoffPayload> decode_payload(const std::vector<std::byte>& header, const Tensor& body,
                                      const PayloadExpectation& expect);

}  // namespace splitcheck
