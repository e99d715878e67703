#include "kernels/dispatch.h"

#include <array>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/batch.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ops.h"
#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
#define SPLITCHECK_CUDA_FN(Args, fn) call<Args, cuda::fn>
#else
#define SPLITCHECK_CUDA_FN(Args, fn) nullptr
#endif

namespace splitcheck {
namespace {

constexpr std::array<std::string_view, 11> kSiteNames = {
    "embed",      "pre_attn", "attn",   "pre_mlp", "mlp",  "output",
    "final_norm", "lm_head",  "sample", "tap",     "draft"};

template <typename Args, void (*Fn)(Args&)>
void call(void* args) {
  Fn(*static_cast<Args*>(args));
}

bool always(const void*) { return true; }

// The device of a call is the device of one tensor of its arguments (a weight when the op
// has one: weights are placed on the backend's device when they are loaded).
template <typename Args, auto Member>
Device on(const void* args) {
  const Tensor* t = static_cast<const Args*>(args)->*Member;
  return t != nullptr ? t->device() : Device::kCpu;
}

Device dense_mlp_device(const void* args) {
  const Tensor* t = static_cast<const DenseMlpArgs*>(args)->w.gate;
  return t != nullptr ? t->device() : Device::kCpu;
}

// The test-only nondeterministic variant (arm_nondeterministic_kernel_for_test): armed,
// it replaces rms_norm.rows; `pending_flip` makes the first call after arming differ.
std::atomic<bool> g_nondeterminism_armed{false};
std::atomic<bool> g_pending_flip{false};

std::atomic<KernelObserver> g_observer{nullptr};
std::atomic<void*> g_observer_user{nullptr};

bool rows_eligible(const void*) { return !g_nondeterminism_armed.load(); }
bool nondeterministic_eligible(const void*) { return g_nondeterminism_armed.load(); }

void rms_norm_nondeterministic_for_test(void* args) {
  RmsNormArgs& a = *static_cast<RmsNormArgs*>(args);
  cpu::rms_norm(a);
  if (g_pending_flip.exchange(false) && a.out->nbytes() > 0) {
    a.out->data<unsigned char>()[0] ^= 1;
  }
}

bool native_eligible(const void* args) {
  return attn_res_native_eligible(*static_cast<const AttnResArgs*>(args));
}

// The registry. Order within an op is priority: the first eligible row runs.
const KernelRow kRegistry[] = {
    {"attn_res", "native", native_eligible, on<AttnResArgs, &AttnResArgs::norm_w>,
     call<AttnResArgs, cpu::attn_res_native>, SPLITCHECK_CUDA_FN(AttnResArgs, attn_res_native)},
    {"attn_res", "fallback", always, on<AttnResArgs, &AttnResArgs::norm_w>,
     call<AttnResArgs, cpu::attn_res_fallback>, SPLITCHECK_CUDA_FN(AttnResArgs, attn_res_fallback)},
    {"embed", "gather", always, on<EmbedArgs, &EmbedArgs::table>, call<EmbedArgs, cpu::embed>,
     SPLITCHECK_CUDA_FN(EmbedArgs, embed)},
    {"rms_norm", "rows", rows_eligible, on<RmsNormArgs, &RmsNormArgs::weight>,
     call<RmsNormArgs, cpu::rms_norm>, SPLITCHECK_CUDA_FN(RmsNormArgs, rms_norm)},
    {"lm_head", "matmul_nt", always, on<LmHeadArgs, &LmHeadArgs::lm_head>,
     call<LmHeadArgs, cpu::lm_head>, SPLITCHECK_CUDA_FN(LmHeadArgs, lm_head)},
    {"argmax", "lowest_index", always, on<ArgmaxArgs, &ArgmaxArgs::logits>,
     call<ArgmaxArgs, cpu::argmax>, SPLITCHECK_CUDA_FN(ArgmaxArgs, argmax)},
    {"mla", "latent_cache", always, on<MlaArgs, &MlaArgs::w_q>, call<MlaArgs, cpu::mla_attention>,
     SPLITCHECK_CUDA_FN(MlaArgs, mla_attention)},
    {"kda", "recurrent", always, on<KdaArgs, &KdaArgs::w_q>, call<KdaArgs, cpu::kda_attention>,
     SPLITCHECK_CUDA_FN(KdaArgs, kda_attention)},
    {"dense_mlp", "swiglu", always, dense_mlp_device, call<DenseMlpArgs, cpu::dense_mlp>,
     SPLITCHECK_CUDA_FN(DenseMlpArgs, dense_mlp)},
    {"moe", "grouped", always, on<MoeArgs, &MoeArgs::router>, call<MoeArgs, cpu::moe>,
     SPLITCHECK_CUDA_FN(MoeArgs, moe)},
    {"linear", "matmul", always, on<LinearArgs, &LinearArgs::weight>, call<LinearArgs, cpu::linear>,
     SPLITCHECK_CUDA_FN(LinearArgs, linear)},
    {"dense_attention", "softmax", always, on<DenseAttentionArgs, &DenseAttentionArgs::q>,
     call<DenseAttentionArgs, cpu::dense_attention>,
     SPLITCHECK_CUDA_FN(DenseAttentionArgs, dense_attention)},
    {"markov_chain", "greedy", always, on<MarkovChainArgs, &MarkovChainArgs::w2>,
     call<MarkovChainArgs, cpu::markov_chain>, SPLITCHECK_CUDA_FN(MarkovChainArgs, markov_chain)},
    // Test-only (last, so the rows above keep the indices stored in dumps); eligible only
    // while arm_nondeterministic_kernel_for_test(true) holds. CPU only.
    {"rms_norm", "nondeterministic_for_test", nondeterministic_eligible,
     on<RmsNormArgs, &RmsNormArgs::weight>, rms_norm_nondeterministic_for_test, nullptr},
};

// Runs a row on the device of its call.
void run_row(const KernelRow& row, void* args) {
  if (row.device(args) == Device::kCpu) {
    row.cpu(args);
    return;
  }
  if (row.cuda == nullptr) {
    throw std::logic_error("kernel " + std::string(row.op) + "." + std::string(row.variant) +
                           " was called on CUDA tensors in a build without SPLITCHECK_CUDA");
  }
  row.cuda(args);
}

}  // namespace

std::string_view site_name(Site site) {
  const auto i = static_cast<size_t>(site);
  return i < kSiteNames.size() ? kSiteNames[i] : "?";
}

std::span<const std::string_view> site_names() { return kSiteNames; }

std::span<const KernelRow> kernel_registry() { return kRegistry; }

bool batch_invariant(Device device) { return device == Device::kCpu; }

int32_t find_kernel(std::string_view op, std::string_view variant) {
  for (size_t i = 0; i < std::size(kRegistry); ++i) {
    if (kRegistry[i].op == op && kRegistry[i].variant == variant) return static_cast<int32_t>(i);
  }
  return -1;
}

int32_t run_kernel(const KernelContext& ctx, std::string_view op, void* args) {
  for (size_t i = 0; i < std::size(kRegistry); ++i) {
    const KernelRow& row = kRegistry[i];
    if (row.op != op) continue;
    const VariantOverride* o = ctx.override_variant;
    if (o != nullptr && o->op == op ? row.variant != o->variant : !row.eligible(args)) continue;
    if (ctx.trace != nullptr) {
      ctx.trace->events.push_back(DispatchEvent{ctx.forward, ctx.layer, ctx.site,
                                                static_cast<int32_t>(i), ctx.stage, ctx.aux});
    }
    if (KernelObserver observe = g_observer.load()) {
      observe(g_observer_user.load(), ctx, static_cast<int32_t>(i), args);
    }
    run_row(row, args);
    return static_cast<int32_t>(i);
  }
  throw std::logic_error("no eligible kernel for op " + std::string(op));
}

void arm_nondeterministic_kernel_for_test(bool armed) {
  g_pending_flip.store(armed);
  g_nondeterminism_armed.store(armed);
}

void set_kernel_observer(KernelObserver observer, void* user) {
  g_observer_user.store(user);
  g_observer.store(observer);
}

void run_variant(std::string_view op, std::string_view variant, void* args) {
  const int32_t i = find_kernel(op, variant);
  if (i < 0)
    throw std::logic_error("unknown kernel " + std::string(op) + "." + std::string(variant));
  run_row(kRegistry[i], args);
}

}  // namespace splitcheck
