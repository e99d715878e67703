// Elementwise arithmetic on tensors outside the op registry: one way to compute each, so
// no kernel variant and no dispatch event (like the byte copies of kernels/tensor_copy.h).
#pragma once

#include "kernels/tensor.h"

namespace splitcheck {

// bf16(a + b) element by element (float32 sum, rounded once), a and b bf16 of one shape on
// one device, into a new tensor there: on the host a loop, on a device one kernel queued on
// the calling thread's stream (no host wait). Throws std::invalid_argument when their
// dtypes, shapes or devices differ.
Tensor add_bf16(const Tensor& a, const Tensor& b);

// a + b element by element in float32 (one rounding, the float sum's), a and b float32 of
// one shape on one device, into a new tensor there; computed and refused as add_bf16.
Tensor add_f32(const Tensor& a, const Tensor& b);

}  // namespace splitcheck
