#include "reference/dspark.h"

#include <cmath>
#include <cstring>

namespace splitcheck {

std::vector<TensorSpec> drafter_tensor_specs(const ModelConfig& c, const std::string& method,
                                             int n_taps) {
  std::vector<TensorSpec> s;
  if (method != "dspark") return s;
  const int64_t h = c.hidden_size;
  auto lin = [&](const std::string& name, int64_t out, int64_t in) {
    s.push_back(TensorSpec{
        name, {out, in}, WeightInit::kUniform, std::sqrt(3.0f / static_cast<float>(in))});
  };
  auto vec = [&](const std::string& name, WeightInit init, float scale) {
    s.push_back(TensorSpec{name, {h}, init, scale});
  };
  lin("drafter.ctx_proj.weight", h, h * n_taps);
  vec("drafter.ctx_norm.weight", WeightInit::kOnePlus, 0.1f);
  vec("drafter.mask_embedding", WeightInit::kUniform, 1.0f);
  for (int j = 0; j < kDsparkLayers; ++j) {
    const std::string p = "drafter.layers." + std::to_string(j) + ".";
    vec(p + "input_norm.weight", WeightInit::kOnePlus, 0.1f);
    for (const char* n : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"})
      lin(p + n, h, h);
  }
  vec("drafter.norm.weight", WeightInit::kOnePlus, 0.1f);
  for (const char* n : {"drafter.markov.w1", "drafter.markov.w2"})
    s.push_back(TensorSpec{n,
                           {c.vocab_size, kDsparkMarkovRank},
                           WeightInit::kUniform,
                           std::sqrt(3.0f / kDsparkMarkovRank)});
  return s;
}

std::vector<int32_t> markov_head(const KernelContext& ctx, const Tensor& u, const Tensor& w1,
                                 const Tensor& w2, int32_t anchor) {
  const int64_t gamma = u.dim(0), v = u.dim(1), r = w1.dim(1);
  const KernelContext dctx = ctx.at(-1, Site::kDraft);
  std::vector<int32_t> x;
  int32_t prev = anchor;
  Tensor row = Tensor::zeros(DType::kBF16, {1, r});
  Tensor bias = Tensor::zeros(DType::kF32, {1, v});
  Tensor tok = Tensor::zeros(DType::kI32, {1});
  for (int64_t k = 0; k < gamma; ++k) {
    std::memcpy(row.data<bf16>(), w1.data<bf16>() + static_cast<int64_t>(prev) * r,
                static_cast<size_t>(r) * sizeof(bf16));
    LmHeadArgs la{&row, &w2, &bias};
    lm_head(dctx, la);
    float* b = bias.data<float>();
    for (int64_t i = 0; i < v; ++i) b[i] = u.data<float>()[k * v + i] + b[i];
    ArgmaxArgs aa{&bias, &tok};
    argmax(dctx, aa);
    prev = tok.data<int32_t>()[0];
    x.push_back(prev);
  }
  return x;
}

}  // namespace splitcheck
