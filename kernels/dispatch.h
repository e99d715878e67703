// The kernel registry and the dispatch trace (SPEC 5.3).
//
// Every kernel variant is one row of one table: (op, variant, eligibility, where its
// tensors are, cpu function, cuda function). `run_kernel` picks the first eligible variant
// of an op in table order, appends a DispatchEvent to the caller's trace and runs it on
// the device its tensors live on, so the trace is written by the registry and never by
// callers, and the trace is the same on every backend. Adding a variant is one row plus
// its functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/tensor.h"

namespace splitcheck {

// Where in the model a kernel is called. Codes are stable: they are stored in dumps.
enum class Site : int32_t {
  kEmbed = 0,
  kPreAttn = 1,
  kAttn = 2,
  kPreMlp = 3,
  kMlp = 4,
  kOutput = 5,
  kFinalNorm = 6,
  kLmHead = 7,
  kSample = 8,
  kTap = 9,
  kDraft = 10,
};
std::string_view site_name(Site site);
std::span<const std::string_view> site_names();  // indexed by code

struct DispatchEvent {
  int32_t forward = 0;
  int32_t layer = -1;  // -1 outside any layer (embedding, output, head)
  Site site = Site::kEmbed;
  int32_t kernel = 0;  // row index in the kernel registry (op and variant)
  int32_t stage = 0;   // recorded, but ignored when traces are compared
  int32_t aux = -1;    // tap id for Site::kTap, else -1
};

struct DispatchTrace {
  std::vector<DispatchEvent> events;
};

// What a kernel call is: forwarded to the trace with the chosen variant.
// A variant a caller picks for an op from its own context rather than from the op's
// arguments: what fault dispatch.stage_context_fallback restores (a non-first stage
// taking attn_res.fallback because of where it runs). The registry honours it for that op
// and records the choice in the trace like any other.
struct VariantOverride {
  std::string_view op;
  std::string_view variant;
};

struct KernelContext {
  DispatchTrace* trace = nullptr;  // nullptr: do not record (unit tests of one variant)
  int32_t forward = 0;
  int32_t layer = -1;
  Site site = Site::kEmbed;
  int32_t stage = 0;
  int32_t aux = -1;
  const VariantOverride* override_variant = nullptr;  // null: eligibility alone decides

  KernelContext at(int32_t new_layer, Site new_site) const {
    KernelContext c = *this;
    c.layer = new_layer;
    c.site = new_site;
    return c;
  }
};

// One row of the registry. `args` points at the op's argument struct (kernels/ops.h).
struct KernelRow {
  std::string_view op;
  std::string_view variant;
  bool (*eligible)(const void* args);
  // The device of the call: where the op's weight (or, for weightless ops, its input) is.
  Device (*device)(const void* args);
  void (*cpu)(void* args);
  void (*cuda)(void* args);  // nullptr in a build without SPLITCHECK_CUDA
};

// The registry: every op and variant the engines can run, in priority order per op.
std::span<const KernelRow> kernel_registry();
// Row index of (op, variant), or -1.
int32_t find_kernel(std::string_view op, std::string_view variant);

// Picks the first eligible variant of `op`, records it in ctx.trace, runs it on the
// call's device (a CUDA call has finished when this returns). Returns the row index it
// ran. Throws std::logic_error when the device has no implementation in this build.
int32_t run_kernel(const KernelContext& ctx, std::string_view op, void* args);
// Runs one named variant on the call's device without eligibility or trace (tests and
// benchmarks).
void run_variant(std::string_view op, std::string_view variant, void* args);

// Sees every call run_kernel makes, before the kernel runs, with the registry row it
// chose and the op's argument struct (kernels/ops.h). One observer at a time (nullptr:
// none, the default); it must not change the arguments. The approximate lane
// (harness/lanes/approx_lane.h) uses it to capture the inputs the engine feeds each op.
using KernelObserver = void (*)(void* user, const KernelContext& ctx, int32_t row,
                                const void* args);
void set_kernel_observer(KernelObserver observer, void* user);

// Test hook: while armed, `rms_norm` dispatches to its test-only variant
// `rms_norm.nondeterministic_for_test`, which computes what `rms_norm.rows` computes and
// then flips the lowest bit of the first output element of the first call after arming,
// so two runs of one scenario differ as a nondeterministic kernel's would. Disarmed (the
// default, and every production path), the variant is never eligible.
void arm_nondeterministic_kernel_for_test(bool armed);

}  // namespace splitcheck
