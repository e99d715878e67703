#include "harness/lanes/op_cases.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <xtensor/xview.hpp>

#include "harness/engine/run.h"
#include "kernels/ops.h"

namespace splitcheck {
namespace {

// The observer's state while one reference run is captured.
struct Capture {
  std::mutex mutex;
  CaptureOptions options;
  std::map<int32_t, int> calls_per_row;
  CapturedCalls captured;
};

// Activations are copied (the engine updates some in place after the call); weights are
// immutable, so an owned weight is shared rather than copied.
void keep_activation(OpCase& c, const std::string& role, const Tensor* t) {
  if (t != nullptr) c.tensors[role] = t->to(Device::kCpu);
}
void keep_weight(OpCase& c, const std::string& role, const Tensor* t) {
  if (t == nullptr) return;
  c.tensors[role] = t->is_owned() && t->device() == Device::kCpu ? *t : t->to(Device::kCpu);
}
void keep_swiglu(OpCase& c, const std::string& prefix, const SwiGluWeights& w) {
  keep_weight(c, prefix + ".gate", w.gate);
  keep_weight(c, prefix + ".up", w.up);
  keep_weight(c, prefix + ".down", w.down);
}

// A call over segments (a batched forward's requests, a group of drafters) stands for one
// call a segment: the number of segments, or -1 for a plain call. (The observer sees a
// call before its kernel checks it: bounds and owners that disagree give the fewer.)
int64_t segments_of(const std::string& op, const void* args) {
  auto count = [](const auto& begin, size_t owners) {
    if (begin.empty()) return int64_t{-1};
    return static_cast<int64_t>(std::min(begin.size() - 1, owners));
  };
  if (op == "mla") {
    const auto& a = *static_cast<const MlaArgs*>(args);
    return count(a.begin, a.caches.size());
  }
  if (op == "kda") {
    const auto& a = *static_cast<const KdaArgs*>(args);
    return count(a.begin, a.states.size());
  }
  if (op == "dense_attention") {
    const auto& a = *static_cast<const DenseAttentionArgs*>(args);
    return count(a.begin, std::min(a.keys.size(), a.values.size()));
  }
  return -1;
}

// The rows of x that segment `seg` owns (all of x for a plain call, seg < 0).
Tensor segment_rows(const Tensor& x, std::span<const int64_t> begin, int seg) {
  if (seg < 0) return x;
  return x.rows(begin[static_cast<size_t>(seg)], begin[static_cast<size_t>(seg) + 1]);
}

// Copies the inputs of a call that runs on whole tensors into a case; false for any other
// op.
bool fill_plain_case(OpCase& c, const void* args) {
  const std::string& op = c.op;
  if (op == "attn_res") {
    const auto& a = *static_cast<const AttnResArgs*>(args);
    keep_activation(c, "prefix", a.prefix);
    keep_activation(c, "delta", a.delta);
    keep_activation(c, "bank", a.bank);
    keep_weight(c, "norm_w", a.norm_w);
    keep_weight(c, "proj_w", a.proj_w);
    keep_weight(c, "out_w", a.out_w);
    c.params = {{"nb", a.nb}, {"write_idx", a.write_idx}, {"eps", a.eps}, {"out_eps", a.out_eps}};
    c.native_hidden_sizes.assign(a.native_hidden_sizes.begin(), a.native_hidden_sizes.end());
    c.out_shape = a.out->shape();
  } else if (op == "embed") {
    const auto& a = *static_cast<const EmbedArgs*>(args);
    keep_activation(c, "ids", a.ids);
    keep_weight(c, "table", a.table);
    c.out_shape = a.out->shape();
  } else if (op == "rms_norm") {
    const auto& a = *static_cast<const RmsNormArgs*>(args);
    keep_activation(c, "x", a.x);
    keep_weight(c, "weight", a.weight);
    c.params = {{"eps", a.eps}};
    c.out_shape = a.out->shape();
  } else if (op == "lm_head") {
    const auto& a = *static_cast<const LmHeadArgs*>(args);
    keep_activation(c, "x", a.x);
    keep_weight(c, "lm_head", a.lm_head);
    c.out_shape = a.logits->shape();
    c.out_dtype = DType::kF32;
  } else if (op == "argmax") {
    const auto& a = *static_cast<const ArgmaxArgs*>(args);
    keep_activation(c, "logits", a.logits);
    c.out_shape = a.tokens->shape();
    c.out_dtype = DType::kI32;
  } else if (op == "dense_mlp") {
    const auto& a = *static_cast<const DenseMlpArgs*>(args);
    keep_activation(c, "x", a.x);
    keep_swiglu(c, "mlp", a.w);
    c.out_shape = a.out->shape();
  } else if (op == "moe") {
    const auto& a = *static_cast<const MoeArgs*>(args);
    keep_activation(c, "x", a.x);
    keep_weight(c, "router", a.router);
    for (size_t e = 0; e < a.experts.size(); ++e)
      keep_swiglu(c, fmt::format("experts.{}", e), a.experts[e]);
    for (size_t e = 0; e < a.shared.size(); ++e)
      keep_swiglu(c, fmt::format("shared.{}", e), a.shared[e]);
    c.params = {{"top_k", a.top_k},
                {"experts", static_cast<double>(a.experts.size())},
                {"shared", static_cast<double>(a.shared.size())}};
    c.out_shape = a.out->shape();
  } else if (op == "linear") {
    const auto& a = *static_cast<const LinearArgs*>(args);
    keep_activation(c, "x", a.x);
    keep_weight(c, "weight", a.weight);
    c.out_shape = a.out->shape();
  } else {
    return false;
  }
  return true;
}

// Copies the inputs of an attention call, which may be segmented, into a case (of a
// segmented call, segment `seg`'s: its rows, its cache or state); false for any other op.
bool fill_attention_case(OpCase& c, const void* args, int seg) {
  const std::string& op = c.op;
  if (op == "mla") {
    const auto& a = *static_cast<const MlaArgs*>(args);
    const Tensor x = segment_rows(*a.x, a.begin, seg);
    keep_activation(c, "x", &x);
    keep_weight(c, "w_q", a.w_q);
    keep_weight(c, "w_dkv", a.w_dkv);
    keep_weight(c, "kv_norm", a.kv_norm);
    keep_weight(c, "w_uk", a.w_uk);
    keep_weight(c, "w_uv", a.w_uv);
    keep_weight(c, "w_g", a.w_g);
    keep_weight(c, "w_o", a.w_o);
    c.params = {{"heads", a.heads}, {"head_dim", a.head_dim}, {"eps", a.eps}};
    const LatentCache& cache = seg < 0 ? *a.cache : *a.caches[static_cast<size_t>(seg)];
    const Tensor latents = latents_on_host(cache, a.w_dkv->dim(1));
    c.mla_cache.assign(latents.data<bf16>(), latents.data<bf16>() + latents.numel());
    c.out_shape = {x.dim(0), a.out->dim(1)};
  } else if (op == "kda") {
    const auto& a = *static_cast<const KdaArgs*>(args);
    const Tensor x = segment_rows(*a.x, a.begin, seg);
    keep_activation(c, "x", &x);
    for (auto [role, t] : {std::pair{"w_q", a.w_q},
                           {"w_k", a.w_k},
                           {"w_v", a.w_v},
                           {"w_b", a.w_b},
                           {"w_a", a.w_a},
                           {"w_g", a.w_g},
                           {"o_norm", a.o_norm},
                           {"w_o", a.w_o}})
      keep_weight(c, role, t);
    c.params = {{"heads", a.heads}, {"head_dim", a.head_dim}, {"eps", a.eps}};
    const Tensor state = (seg < 0 ? *a.state : *a.states[static_cast<size_t>(seg)]).on_host();
    c.kda_state.assign(state.data<float>(), state.data<float>() + state.numel());
    c.out_shape = {x.dim(0), a.out->dim(1)};
  } else if (op == "dense_attention") {
    const auto& a = *static_cast<const DenseAttentionArgs*>(args);
    const Tensor q = segment_rows(*a.q, a.begin, seg);
    keep_activation(c, "q", &q);
    keep_activation(c, "k", seg < 0 ? a.k : a.keys[static_cast<size_t>(seg)]);
    keep_activation(c, "v", seg < 0 ? a.v : a.values[static_cast<size_t>(seg)]);
    c.params = {{"heads", a.heads}, {"head_dim", a.head_dim}};
    c.out_shape = {q.dim(0), a.out->dim(1)};
  } else {
    return false;
  }
  return true;
}

// Copies one call's inputs into a case (of a segmented call, segment `seg`'s: its rows,
// its cache or state); false for a row the lane does not judge.
bool fill_case(OpCase& c, const void* args, int seg) {
  return fill_plain_case(c, args) || fill_attention_case(c, args, seg);
}

void observe(void* user, const KernelContext& ctx, int32_t row, const void* args) {
  Capture& cap = *static_cast<Capture*>(user);
  const KernelRow& r = kernel_registry()[static_cast<size_t>(row)];
  if (r.variant.ends_with("_for_test")) return;
  std::lock_guard lock(cap.mutex);
  if (cap.calls_per_row[row] >= cap.options.max_calls_per_row) return;  // copy nothing
  std::vector<OpCase> cases = op_cases_of_call(row, ctx, args);
  if (cases.empty()) ++cap.captured.not_judged[fmt::format("{}.{}", r.op, r.variant)];
  for (OpCase& c : cases) {
    if (cap.calls_per_row[row]++ >= cap.options.max_calls_per_row) return;
    cap.captured.cases.push_back(std::move(c));
  }
}

// Clears the observer however the run ends.
struct ObserverGuard {
  ObserverGuard(Capture& cap) { set_kernel_observer(observe, &cap); }
  ~ObserverGuard() { set_kernel_observer(nullptr, nullptr); }
};

const Tensor& need(const std::map<std::string, Tensor>& m, const std::string& role) {
  auto it = m.find(role);
  if (it == m.end()) throw std::logic_error("op case lacks its input '" + role + "'");
  return it->second;
}
const Tensor* maybe(std::map<std::string, Tensor>& m, const std::string& role) {
  auto it = m.find(role);
  return it == m.end() ? nullptr : &it->second;
}
int param(const OpCase& c, const char* name) { return static_cast<int>(c.params.at(name)); }
float fparam(const OpCase& c, const char* name) { return static_cast<float>(c.params.at(name)); }

SwiGluWeights swiglu_of(std::map<std::string, Tensor>& m, const std::string& prefix) {
  return SwiGluWeights{maybe(m, prefix + ".gate"), maybe(m, prefix + ".up"),
                       maybe(m, prefix + ".down")};
}

f64::Matrix f64_of(const OpCase& c, const std::string& role) {
  return f64::widen(need(c.tensors, role));
}
f64::Matrix f64_or_empty(const OpCase& c, const std::string& role) {
  auto it = c.tensors.find(role);
  return it == c.tensors.end() ? f64::Matrix() : f64::widen(it->second);
}
f64::SwiGlu f64_swiglu(const OpCase& c, const std::string& prefix) {
  return {f64_of(c, prefix + ".gate"), f64_of(c, prefix + ".up"), f64_of(c, prefix + ".down")};
}

}  // namespace

std::vector<OpCase> op_cases_of_call(int32_t row, const KernelContext& ctx, const void* args) {
  const KernelRow& r = kernel_registry()[static_cast<size_t>(row)];
  OpCase base;
  base.op = std::string(r.op);
  base.variant = std::string(r.variant);
  base.forward = ctx.forward;
  base.layer = ctx.layer;
  base.site = ctx.site;
  std::vector<OpCase> cases;
  const int64_t segments = segments_of(base.op, args);
  for (int64_t i = segments < 0 ? -1 : 0; i < std::max<int64_t>(segments, 0); ++i) {
    OpCase c = base;
    if (fill_case(c, args, static_cast<int>(i))) cases.push_back(std::move(c));
  }
  return cases;
}

Result<CapturedCalls> capture_op_cases(const Scenario& scenario, const CaptureOptions& options) {
  Scenario s = scenario;
  s.backend = "cpu";
  Capture cap;
  cap.options = options;
  {
    ObserverGuard guard(cap);
    ASSIGN_OR_RETURN(ReferenceRun run, run_reference(s));
    (void)run;
  }
  if (cap.captured.cases.empty()) return internal_error("the reference run made no kernel call");
  return std::move(cap.captured);
}

Tensor run_op_case(const OpCase& c, Device device, std::map<std::string, Tensor>* updated) {
  std::map<std::string, Tensor> t;
  for (const auto& [role, tensor] : c.tensors) t[role] = tensor.to(device);
  Tensor out = Tensor::zeros(c.out_dtype, c.out_shape, device);
  const std::string& op = c.op;
  auto run = [&](auto& args) { run_variant(op, c.variant, &args); };
  if (op == "attn_res") {
    AttnResArgs a{&t.at("prefix"),      maybe(t, "delta"),     &t.at("bank"),
                  maybe(t, "norm_w"),   maybe(t, "proj_w"),    maybe(t, "out_w"),
                  param(c, "nb"),       param(c, "write_idx"), fparam(c, "eps"),
                  fparam(c, "out_eps"), c.native_hidden_sizes, &out};
    run(a);
  } else if (op == "embed") {
    EmbedArgs a{maybe(t, "ids"), maybe(t, "table"), &out};
    run(a);
  } else if (op == "rms_norm") {
    RmsNormArgs a{maybe(t, "x"), maybe(t, "weight"), fparam(c, "eps"), &out};
    run(a);
  } else if (op == "lm_head") {
    LmHeadArgs a{maybe(t, "x"), maybe(t, "lm_head"), &out};
    run(a);
  } else if (op == "argmax") {
    ArgmaxArgs a{maybe(t, "logits"), &out};
    run(a);
  } else if (op == "mla") {
    const int64_t r = maybe(t, "w_dkv")->dim(1);
    LatentCache cache{
        Tensor::zeros(DType::kBF16, {static_cast<int64_t>(c.mla_cache.size()) / r, r}),
        static_cast<int64_t>(c.mla_cache.size()) / r};
    std::copy(c.mla_cache.begin(), c.mla_cache.end(), cache.rows.data<bf16>());
    MlaArgs a{maybe(t, "x"),
              maybe(t, "w_q"),
              maybe(t, "w_dkv"),
              maybe(t, "kv_norm"),
              maybe(t, "w_uk"),
              maybe(t, "w_uv"),
              maybe(t, "w_g"),
              maybe(t, "w_o"),
              param(c, "heads"),
              param(c, "head_dim"),
              fparam(c, "eps"),
              &cache,
              &out};
    run(a);
  } else if (op == "kda") {
    Tensor state = Tensor::zeros(DType::kF32, {static_cast<int64_t>(c.kda_state.size())});
    std::copy(c.kda_state.begin(), c.kda_state.end(), state.data<float>());
    KdaArgs a{maybe(t, "x"),
              maybe(t, "w_q"),
              maybe(t, "w_k"),
              maybe(t, "w_v"),
              maybe(t, "w_b"),
              maybe(t, "w_a"),
              maybe(t, "w_g"),
              maybe(t, "o_norm"),
              maybe(t, "w_o"),
              param(c, "heads"),
              param(c, "head_dim"),
              fparam(c, "eps"),
              &state,
              &out};
    run(a);
  } else if (op == "dense_mlp") {
    DenseMlpArgs a{maybe(t, "x"), swiglu_of(t, "mlp"), &out};
    run(a);
  } else if (op == "moe") {
    std::vector<SwiGluWeights> experts, shared;
    for (int e = 0; e < param(c, "experts"); ++e)
      experts.push_back(swiglu_of(t, fmt::format("experts.{}", e)));
    for (int e = 0; e < param(c, "shared"); ++e)
      shared.push_back(swiglu_of(t, fmt::format("shared.{}", e)));
    MoeArgs a{maybe(t, "x"), maybe(t, "router"), experts, shared, param(c, "top_k"), &out};
    run(a);
  } else if (op == "linear") {
    LinearArgs a{maybe(t, "x"), maybe(t, "weight"), &out};
    run(a);
  } else if (op == "dense_attention") {
    DenseAttentionArgs a{maybe(t, "q"),
                         maybe(t, "k"),
                         maybe(t, "v"),
                         param(c, "heads"),
                         param(c, "head_dim"),
                         &out,
                         {},
                         {},
                         {}};
    run(a);
  } else {
    throw std::logic_error("no replay for op " + op);
  }
  if (updated != nullptr) {
    for (const char* role : {"prefix", "bank"})
      if (t.count(role)) (*updated)[role] = t.at(role).to(Device::kCpu);
  }
  return out.to(Device::kCpu);
}

f64::Matrix reference_op_case(const OpCase& c) {
  const std::string& op = c.op;
  if (op == "attn_res") {
    const Tensor& bank = need(c.tensors, "bank");
    return f64::attn_res(f64_of(c, "prefix"), f64_or_empty(c, "delta"), f64::widen(bank),
                         bank.dim(1), f64_of(c, "norm_w"), f64_of(c, "proj_w"),
                         f64_or_empty(c, "out_w"), param(c, "nb"), c.params.at("eps"),
                         c.params.at("out_eps"));
  }
  if (op == "embed") {
    const f64::Matrix table = f64_of(c, "table");
    const Tensor& ids = need(c.tensors, "ids");
    f64::Matrix out = xt::zeros<double>({static_cast<size_t>(ids.numel()), table.shape(1)});
    for (int64_t t = 0; t < ids.numel(); ++t) {
      int32_t id = ids.data<int32_t>()[t];
      if (id < 0 || id >= static_cast<int32_t>(table.shape(0))) id = 0;
      xt::row(out, t) = xt::row(table, id);
    }
    return out;
  }
  if (op == "rms_norm")
    return f64::rms_norm(f64_of(c, "x"), f64_of(c, "weight"), c.params.at("eps"));
  if (op == "lm_head") return f64::lm_head(f64_of(c, "x"), f64_of(c, "lm_head"));
  if (op == "argmax") return xt::transpose(f64::argmax(f64_of(c, "logits")));
  if (op == "mla") {
    const f64::MlaWeights w{f64_of(c, "w_q"),  f64_of(c, "w_dkv"), f64_of(c, "kv_norm"),
                            f64_of(c, "w_uk"), f64_of(c, "w_uv"),  f64_of(c, "w_g"),
                            f64_of(c, "w_o")};
    const size_t r = w.w_dkv.shape(1);
    f64::Matrix cache = xt::zeros<double>({c.mla_cache.size() / r, r});
    std::transform(c.mla_cache.begin(), c.mla_cache.end(), cache.begin(),
                   [](bf16 b) { return double(to_f32(b)); });
    return f64::mla(f64_of(c, "x"), w, cache, param(c, "heads"), param(c, "head_dim"),
                    c.params.at("eps"));
  }
  if (op == "kda") {
    const f64::KdaWeights w{f64_of(c, "w_q"),    f64_of(c, "w_k"), f64_of(c, "w_v"),
                            f64_of(c, "w_b"),    f64_of(c, "w_a"), f64_of(c, "w_g"),
                            f64_of(c, "o_norm"), f64_of(c, "w_o")};
    const size_t hd = static_cast<size_t>(param(c, "head_dim"));
    f64::Matrix state = xt::zeros<double>({c.kda_state.size() / hd, hd});
    std::copy(c.kda_state.begin(), c.kda_state.end(), state.begin());
    return f64::kda(f64_of(c, "x"), w, state, param(c, "heads"), param(c, "head_dim"),
                    c.params.at("eps"));
  }
  if (op == "dense_mlp") return f64::swiglu(f64_of(c, "x"), f64_swiglu(c, "mlp"));
  if (op == "moe") {
    std::vector<f64::SwiGlu> experts, shared;
    for (int e = 0; e < param(c, "experts"); ++e)
      experts.push_back(f64_swiglu(c, fmt::format("experts.{}", e)));
    for (int e = 0; e < param(c, "shared"); ++e)
      shared.push_back(f64_swiglu(c, fmt::format("shared.{}", e)));
    return f64::moe(f64_of(c, "x"), f64_of(c, "router"), experts, shared, param(c, "top_k"));
  }
  if (op == "linear") return f64::matmul(f64_of(c, "x"), f64_of(c, "weight"));
  if (op == "dense_attention")
    return f64::dense_attention(f64_of(c, "q"), f64_of(c, "k"), f64_of(c, "v"), param(c, "heads"),
                                param(c, "head_dim"));
  throw std::logic_error("no float64 reference for op " + op);
}

std::vector<LayerCalls> layer_calls(const std::vector<OpCase>& cases) {
  std::map<std::pair<int32_t, int32_t>, LayerCalls> by_layer;
  std::vector<std::pair<int32_t, int32_t>> order;
  for (const OpCase& c : cases) {
    if (c.layer < 0) continue;
    const auto key = std::make_pair(c.forward, c.layer);
    auto [it, inserted] = by_layer.try_emplace(key);
    if (inserted) order.push_back(key);
    LayerCalls& l = it->second;
    if (c.site == Site::kPreAttn && c.op == "attn_res") l.pre_attn = &c;
    if (c.site == Site::kAttn && (c.op == "mla" || c.op == "kda")) l.attn = &c;
    if (c.site == Site::kPreMlp && c.op == "attn_res") l.pre_mlp = &c;
    if (c.site == Site::kMlp && (c.op == "moe" || c.op == "dense_mlp")) l.mlp = &c;
  }
  std::vector<LayerCalls> out;
  for (const auto& key : order) {
    const LayerCalls& l = by_layer[key];
    if (l.pre_attn && l.attn && l.pre_mlp && l.mlp) out.push_back(l);
  }
  return out;
}

namespace {

// SPEC 2.3 steps 3-4's inputs: after a block-write layer P = a and no delta; otherwise the
// prefix as attn_res left it and D = a.
OpCase pre_mlp_case(const LayerCalls& l, const Tensor& prefix, const Tensor& bank,
                    const Tensor& a) {
  OpCase c = *l.pre_mlp;
  if (l.pre_attn->params.at("write_idx") >= 0) {
    c.tensors["prefix"] = a;
    c.tensors.erase("delta");
  } else {
    c.tensors["prefix"] = prefix;
    c.tensors["delta"] = a;
  }
  c.tensors["bank"] = bank;
  return c;
}

Tensor bf16_tensor(const f64::Matrix& m, const Shape& shape) {
  Tensor t = Tensor::zeros(DType::kBF16, shape);
  bf16* out = t.data<bf16>();
  for (size_t i = 0; i < m.size(); ++i)
    out[i] = to_bf16(static_cast<float>(f64::round_to_bf16(m.data()[i])));
  return t;
}

}  // namespace

Tensor run_layer_chain(const LayerCalls& l, Device device) {
  std::map<std::string, Tensor> state;
  const Tensor x = run_op_case(*l.pre_attn, device, &state);
  OpCase attn = *l.attn;
  attn.tensors["x"] = x;
  const Tensor a = run_op_case(attn, device);
  OpCase mlp = *l.mlp;
  mlp.tensors["x"] = run_op_case(pre_mlp_case(l, state.at("prefix"), state.at("bank"), a), device);
  return run_op_case(mlp, device);
}

f64::Matrix reference_layer_chain(const LayerCalls& l) {
  const OpCase& pre = *l.pre_attn;
  const Tensor& prefix = need(pre.tensors, "prefix");
  // SPEC 2.2 steps 1-2: p = bf16(P + D); bank[write_idx] = p.
  f64::Matrix p = f64::widen(prefix);
  if (pre.tensors.count("delta")) p += f64_of(pre, "delta");
  const Tensor p_t = bf16_tensor(p, prefix.shape());
  Tensor bank = need(pre.tensors, "bank").clone();
  const int write_idx = param(pre, "write_idx");
  if (write_idx >= 0) {
    const int64_t rows = bank.dim(1), h = bank.dim(2);
    for (int64_t t = 0; t < prefix.dim(0); ++t)
      std::copy_n(p_t.data<bf16>() + t * h, h, bank.data<bf16>() + (t * rows + write_idx) * h);
  }
  OpCase attn = *l.attn;
  attn.tensors["x"] = bf16_tensor(reference_op_case(pre), pre.out_shape);
  const Tensor a = bf16_tensor(reference_op_case(attn), attn.out_shape);
  const OpCase mid = pre_mlp_case(l, p_t, bank, a);
  OpCase mlp = *l.mlp;
  mlp.tensors["x"] = bf16_tensor(reference_op_case(mid), mid.out_shape);
  return reference_op_case(mlp);
}

}  // namespace splitcheck
