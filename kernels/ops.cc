#include "kernels/ops.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/tensor_copy.h"

namespace splitcheck {

void reserve_latents(LatentCache& cache, int64_t need, int64_t r, Device device) {
  const int64_t capacity = cache.rows.shape().size() == 2 ? cache.rows.dim(0) : 0;
  if (need <= capacity && (capacity == 0 || cache.rows.device() == device)) return;
  Tensor grown =
      Tensor::zeros(DType::kBF16, {std::max({need, 2 * capacity, int64_t{16}}), r}, device);
  const size_t kept = static_cast<size_t>(cache.positions * r) * sizeof(bf16);
  if (kept > 0) copy_tensor_runs(grown, 0, kept, cache.rows, 0, kept, kept, 1);
  cache.rows = std::move(grown);
}

Tensor latents_on_host(const LatentCache& cache, int64_t r) {
  const int64_t n = cache.positions * r;
  Tensor out = Tensor::zeros(DType::kBF16, {n});
  const size_t bytes = static_cast<size_t>(n) * sizeof(bf16);
  if (bytes > 0) copy_tensor_runs(out, 0, bytes, cache.rows, 0, bytes, bytes, 1);
  return out;
}

void check_segments(std::span<const int64_t> begin, std::span<const void* const> owners,
                    const Tensor& x, const Tensor& out) {
  const int64_t rows = x.dim(0);
  if (out.dim(0) != rows)
    throw std::invalid_argument("segmented attention: x has " + std::to_string(rows) +
                                " rows, out " + std::to_string(out.dim(0)));
  bool ordered = !owners.empty() && begin.size() == owners.size() + 1 && begin.front() == 0 &&
                 begin.back() == rows;
  for (size_t i = 0; ordered && i + 1 < begin.size(); ++i) ordered = begin[i] <= begin[i + 1];
  if (!ordered)
    throw std::invalid_argument("segmented attention: " + std::to_string(owners.size()) +
                                " segments, " + std::to_string(begin.size()) + " bounds, over " +
                                std::to_string(rows) +
                                " rows: the bounds must rise from 0 to the row count");
  const std::set<const void*> distinct(owners.begin(), owners.end());
  if (distinct.size() != owners.size() || distinct.count(nullptr) != 0)
    throw std::invalid_argument("segmented attention: two segments share a cache or state");
}

namespace {

// Segment i of a segmented call as a call of its own: x and out narrowed to its rows,
// `own` (the cache or state pointer) set to table[i].
template <typename Args, typename Own>
void each_segment(const Args& args, std::span<Own* const> table, Own* Args::*own,
                  void (*call)(Args&)) {
  const std::span<const int64_t> begin = args.begin;
  const std::vector<const void*> owners(table.begin(), table.end());
  check_segments(begin, owners, *args.x, *args.out);
  for (size_t i = 0; i < table.size(); ++i) {
    Tensor x = args.x->rows(begin[i], begin[i + 1]), out = args.out->rows(begin[i], begin[i + 1]);
    Args one = args;
    one.begin = {};
    one.*own = table[i];
    one.x = &x;
    one.out = &out;
    call(one);
  }
}

}  // namespace

void for_each_segment(const MlaArgs& args, void (*call)(MlaArgs&)) {
  each_segment(args, args.caches, &MlaArgs::cache, call);
}

void for_each_segment(const KdaArgs& args, void (*call)(KdaArgs&)) {
  each_segment(args, args.states, &KdaArgs::state, call);
}

bool attn_res_native_eligible(const AttnResArgs& a) {
  if (a.delta == nullptr || a.out_w == nullptr || a.nb <= 0 || a.write_idx >= 0) return false;
  const int h = static_cast<int>(a.prefix->dim(1));
  return std::find(a.native_hidden_sizes.begin(), a.native_hidden_sizes.end(), h) !=
         a.native_hidden_sizes.end();
}

int attn_res_fallback_block_l(int64_t tokens, int nb) { return (tokens >= 256 || nb <= 1) ? 1 : 4; }

void attn_res(const KernelContext& ctx, AttnResArgs& args) { run_kernel(ctx, "attn_res", &args); }
void embed(const KernelContext& ctx, EmbedArgs& args) { run_kernel(ctx, "embed", &args); }
void rms_norm(const KernelContext& ctx, RmsNormArgs& args) { run_kernel(ctx, "rms_norm", &args); }
void lm_head(const KernelContext& ctx, LmHeadArgs& args) { run_kernel(ctx, "lm_head", &args); }
void argmax(const KernelContext& ctx, ArgmaxArgs& args) { run_kernel(ctx, "argmax", &args); }
void markov_chain(const KernelContext& ctx, MarkovChainArgs& args) {
  for (const int32_t anchor : args.anchors)
    if (anchor < 0 || anchor >= args.w1->dim(0))
      throw std::out_of_range("markov_chain: an anchor is outside the vocabulary");
  if (args.chains() > 0 && args.u->dim(0) % args.chains() != 0)
    throw std::invalid_argument("markov_chain: U's " + std::to_string(args.u->dim(0)) +
                                " rows do not share out over " + std::to_string(args.chains()) +
                                " chains");
  run_kernel(ctx, "markov_chain", &args);
}
void mla_attention(const KernelContext& ctx, MlaArgs& args) { run_kernel(ctx, "mla", &args); }
void kda_attention(const KernelContext& ctx, KdaArgs& args) { run_kernel(ctx, "kda", &args); }
void dense_mlp(const KernelContext& ctx, DenseMlpArgs& args) {
  run_kernel(ctx, "dense_mlp", &args);
}
void moe(const KernelContext& ctx, MoeArgs& args) { run_kernel(ctx, "moe", &args); }
void linear(const KernelContext& ctx, LinearArgs& args) { run_kernel(ctx, "linear", &args); }
void dense_attention(const KernelContext& ctx, DenseAttentionArgs& args) {
  run_kernel(ctx, "dense_attention", &args);
}

}  // namespace splitcheck
