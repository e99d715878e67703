// What a backend guarantees beyond bit-identity across partitions.
#pragma once

#include "kernels/tensor.h"

namespace splitcheck {

// Whether every op on `device` gives a row the same bits whatever the number of rows of
// the call: true on the CPU (every product sums each row in ascending order); false on
// CUDA, where cuBLASLt picks its algorithm per shape (a decode row and the same row in a
// verify block may differ). Pipeline splits run the same shapes, so both stay
// bit-identical across partitions.
bool batch_invariant(Device device);

}  // namespace splitcheck
