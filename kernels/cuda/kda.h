// KDA's recurrence on the GPU keeps the state in registers at the head sizes compiled for
// it (two lanes a value channel, each half the column), and in global memory (the generic
// instance, a thread a channel) at any other. Both sum over key channels in the same four
// quarters in the same order, so they give the same bits; the test hook below forces the
// generic instance so that a test can show it.
#pragma once

namespace splitcheck::cuda {

// Whether head size `hd` has an instance with the state in registers.
bool kda_head_size_compiled(int hd);

// Tests only: every KDA launch on this process takes the generic instance while set.
void kda_force_generic_for_test(bool on);

}  // namespace splitcheck::cuda
