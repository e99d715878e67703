// Op cases: the inputs one kernel call received, kept so the call can be run again on
// any backend and evaluated by the float64 reference (float64_reference.h).
//
// `capture_op_cases` runs the scenario's PP=1 reference on the CPU backend with a kernel
// observer (kernels/dispatch.h) that copies every call's inputs to the host, so the cases
// are exactly what the engine feeds each op on that scenario. `run_op_case` replays one
// case on a device through the registry (the same variant the engine ran);
// `reference_op_case` evaluates it in float64.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/lanes/float64_reference.h"
#include "harness/scenario/scenario.h"
#include "kernels/dispatch.h"
#include "kernels/status.h"
#include "kernels/tensor.h"

namespace splitcheck {

// One kernel call: its registry row, where it was made, and its inputs on the host.
struct OpCase {
  std::string op;       // "attn_res", "moe", ...
  std::string variant;  // "native", "fallback", ...
  int32_t forward = 0;
  int32_t layer = -1;
  Site site = Site::kEmbed;
  // Input tensors by role ("prefix", "delta", "w_q", "experts.3.gate", ...); a role that
  // the call left null is absent.
  std::map<std::string, Tensor> tensors;
  // Integer and real parameters by name ("nb", "write_idx", "eps", "heads", "top_k", ...).
  std::map<std::string, double> params;
  std::vector<int> native_hidden_sizes;  // attn_res only
  std::vector<bf16> mla_cache;           // mla only: the latents before the call
  std::vector<float> kda_state;          // kda only: the state before the call
  Shape out_shape;
  DType out_dtype = DType::kBF16;

  // "attn_res.native"
  std::string row_name() const { return op + "." + variant; }
};

// How many calls of each registry row capture_op_cases keeps (the first ones made). The
// default keeps every call of the first forwards of k3-tiny (64 attn_res.native calls
// are the first two forwards' worth).
struct CaptureOptions {
  int max_calls_per_row = 64;
};

// The cases one call of registry row `row` gives (what the capture keeps of it): one for a
// plain call; for a call over segments (a batched forward's requests in MlaArgs::begin or
// KdaArgs::begin, a group of drafters in DenseAttentionArgs::begin) one a segment, the
// call of its own the segment stands for (its rows, its cache, state or keys); none for
// a row the lane does not judge.
std::vector<OpCase> op_cases_of_call(int32_t row, const KernelContext& ctx, const void* args);

// What one reference run's capture gives.
struct CapturedCalls {
  std::vector<OpCase> cases;  // in call order
  // Registry rows the run called whose calls gave no case (an op without a float64
  // evaluation, such as markov_chain.greedy), each with its number of calls: the lane
  // says what it did not judge rather than pass over it.
  std::map<std::string, int64_t> not_judged;
};

// Runs the scenario's PP=1 reference on the CPU backend (whatever backend the scenario
// names) and returns the calls it made.
Result<CapturedCalls> capture_op_cases(const Scenario& scenario,
                                       const CaptureOptions& options = {});

// Runs the case's registry row on `device` with copies of its inputs; the output on the
// host. With `updated`, also the inputs an op writes in place (attn_res's prefix and bank)
// as they are after the call, on the host. Throws std::runtime_error where the device is
// unavailable.
Tensor run_op_case(const OpCase& c, Device device,
                   std::map<std::string, Tensor>* updated = nullptr);

// The case in float64 (float64_reference.h): the unrounded output, [rows, cols] as
// f64::widen lays the output tensor out.
f64::Matrix reference_op_case(const OpCase& c);

// The four calls of one decoder layer in one forward (SPEC 2.3): attn_res at pre_attn, the
// attention, attn_res at pre_mlp, the MLP.
struct LayerCalls {
  const OpCase* pre_attn = nullptr;
  const OpCase* attn = nullptr;
  const OpCase* pre_mlp = nullptr;
  const OpCase* mlp = nullptr;
};
// Every layer whose four calls were all captured, in call order (pointers into `cases`).
std::vector<LayerCalls> layer_calls(const std::vector<OpCase>& cases);

// The whole layer on `device`, from the inputs of its pre_attn call: each op runs on what
// the previous one produced on that device (the prefix and bank as attn_res left them,
// SPEC 2.3 step 3 for the delta); returns the MLP's output, the delta leaving the layer.
Tensor run_layer_chain(const LayerCalls& layer, Device device);
// The same chain in float64: each op's output rounded to bf16 where it leaves the op (SPEC
// 1), the folded prefix and the bank row written as SPEC 2.2 steps 1-2 say; the MLP's
// output unrounded.
f64::Matrix reference_layer_chain(const LayerCalls& layer);

}  // namespace splitcheck
