#include "kernels/dispatch.h"

#include <array>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ops.h"

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

// The test-only nondeterministic variant (arm_nondeterministic_kernel_for_test): armed,
// it replaces rms_norm.rows; `pending_flip` makes the first call after arming differ.
std::atomic<bool> g_nondeterminism_armed{false};
std::atomic<bool> g_pending_flip{false};

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
    {"attn_res", "native", native_eligible, call<AttnResArgs, cpu::attn_res_native>},
    {"attn_res", "fallback", always, call<AttnResArgs, cpu::attn_res_fallback>},
    {"embed", "gather", always, call<EmbedArgs, cpu::embed>},
    {"rms_norm", "rows", rows_eligible, call<RmsNormArgs, cpu::rms_norm>},
    {"lm_head", "matmul_nt", always, call<LmHeadArgs, cpu::lm_head>},
    {"argmax", "lowest_index", always, call<ArgmaxArgs, cpu::argmax>},
    {"mla", "latent_cache", always, call<MlaArgs, cpu::mla_attention>},
    {"kda", "recurrent", always, call<KdaArgs, cpu::kda_attention>},
    {"dense_mlp", "swiglu", always, call<DenseMlpArgs, cpu::dense_mlp>},
    {"moe", "grouped", always, call<MoeArgs, cpu::moe>},
    {"linear", "matmul", always, call<LinearArgs, cpu::linear>},
    {"dense_attention", "softmax", always, call<DenseAttentionArgs, cpu::dense_attention>},
    // Test-only (last, so the rows above keep the indices stored in dumps); eligible only
    // while arm_nondeterministic_kernel_for_test(true) holds.
    {"rms_norm", "nondeterministic_for_test", nondeterministic_eligible,
     rms_norm_nondeterministic_for_test},
};

}  // namespace

std::string_view site_name(Site site) {
  const auto i = static_cast<size_t>(site);
  return i < kSiteNames.size() ? kSiteNames[i] : "?";
}

std::span<const std::string_view> site_names() { return kSiteNames; }

std::span<const KernelRow> kernel_registry() { return kRegistry; }

int32_t find_kernel(std::string_view op, std::string_view variant) {
  for (size_t i = 0; i < std::size(kRegistry); ++i) {
    if (kRegistry[i].op == op && kRegistry[i].variant == variant) return static_cast<int32_t>(i);
  }
  return -1;
}

int32_t run_kernel(const KernelContext& ctx, std::string_view op, void* args) {
  for (size_t i = 0; i < std::size(kRegistry); ++i) {
    const KernelRow& row = kRegistry[i];
    if (row.op != op || !row.eligible(args)) continue;
    if (ctx.trace != nullptr) {
      ctx.trace->events.push_back(DispatchEvent{ctx.forward, ctx.layer, ctx.site,
                                                static_cast<int32_t>(i), ctx.stage, ctx.aux});
    }
    row.cpu(args);
    return static_cast<int32_t>(i);
  }
  throw std::logic_error("no eligible kernel for op " + std::string(op));
}

void arm_nondeterministic_kernel_for_test(bool armed) {
  g_pending_flip.store(armed);
  g_nondeterminism_armed.store(armed);
}

void run_variant(std::string_view op, std::string_view variant, void* args) {
  const int32_t i = find_kernel(op, variant);
  if (i < 0)
    throw std::logic_error("unknown kernel " + std::string(op) + "." + std::string(variant));
  kRegistry[i].cpu(args);
}

}  // namespace splitcheck
