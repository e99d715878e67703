#include "harness/engine/stage.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "kernels/tensor_copy.h"
#include "reference/spec_methods.h"

namespace splitcheck {
namespace {

int cdiv(int a, int b) { return (a + b - 1) / b; }

Tensor nan_vector(int64_t n) {
  Tensor t = Tensor::zeros(DType::kBF16, {n});
  for (bf16& v : t.span<bf16>()) v = to_bf16(std::numeric_limits<float>::quiet_NaN());
  return t;
}

bool has_nan(const Tensor& t) {
  const Tensor host = t.on_host();
  for (bf16 v : host.span<const bf16>())
    if (std::isnan(to_f32(v))) return true;
  return false;
}

// Rows [0, rows) of a bank [T, R, H] as a new [T, rows, H] tensor on the bank's device.
Tensor bank_rows(const Tensor& bank, int64_t rows) {
  const int64_t t = bank.dim(0), r = bank.dim(1), h = bank.dim(2);
  Tensor out = Tensor::zeros(DType::kBF16, {t, rows, h}, bank.device());
  const size_t row = static_cast<size_t>(h) * sizeof(bf16);
  copy_tensor_runs(out, 0, static_cast<size_t>(rows) * row, bank, 0, static_cast<size_t>(r) * row,
                   static_cast<size_t>(rows) * row, static_cast<size_t>(t));
  return out;
}

// dispatch.stage_context_fallback: the variant a non-first stage took from where it ran.
constexpr VariantOverride kStageContextFallback{"attn_res", "fallback"};

// weights.rebound_after_load: a modified copy of `loaded` (every element doubled, exact in
// bf16), on its device: what a stage computes with once it re-binds the weight.
Tensor doubled_copy(const Tensor& loaded) {
  Tensor host = loaded.to(Device::kCpu);
  bf16* v = host.data<bf16>();
  for (int64_t i = 0; i < host.numel(); ++i) v[i] = to_bf16(2.0f * to_f32(v[i]));
  return host.to(loaded.device());
}

}  // namespace

KernelContext Stage::context(DispatchTrace* trace, int32_t forward) const {
  KernelContext ctx{trace, forward, -1, Site::kEmbed, cfg_.index, -1};
  if (!is_first() && cfg_.faults.has("dispatch.stage_context_fallback"))
    ctx.override_variant = &kStageContextFallback;
  return ctx;
}

bool Stage::captured(int k) const {
  return std::binary_search(cfg_.capture_ids.begin(), cfg_.capture_ids.end(), k);
}

bool Stage::owns_tap(int k) const {
  return (k == 0 && is_first()) || (range_.begin < k && k <= range_.end);
}

bool Stage::tap0_resident() const {
  // tap.embed_resident_by_module: the bug asked whether the embedding module is present
  // here, so the last stage's copy for the drafter made tap 0 look resident (SPEC 2.7: a
  // copy held for a drafter never makes tap 0 resident).
  if (cfg_.faults.has("tap.embed_resident_by_module"))
    return is_first() || weights_.has("embed_tokens.weight");
  return is_first();
}

std::vector<int32_t> Stage::incoming_tap_ids() const {
  std::vector<int32_t> ids;
  for (int k : cfg_.capture_ids) {
    if (k == 0 && !relays_tap0()) continue;
    if (k == 0 ? !is_first() : k <= range_.begin) ids.push_back(k);
  }
  return ids;
}

namespace {

// weights.stage_layer_offset: a layer range read one past its end. The first stage's last
// layer b-1 gets layer b's tensors wherever the two layers have a tensor of the same
// shape (always the six AttnRes and norm vectors; the attention and MLP weights too when
// the two layers are of the same kind).
Status load_one_past_the_end(const ModelConfig& c, int b, WeightSource& source,
                             WeightStore& store) {
  const std::string last = "layers." + std::to_string(b - 1) + ".";
  const std::string next = "layers." + std::to_string(b) + ".";
  std::map<std::string, Shape> next_shapes;
  for (const TensorSpec& t : layer_tensor_specs(c, b))
    next_shapes[t.name.substr(next.size())] = t.shape;
  for (const TensorSpec& t : layer_tensor_specs(c, b - 1)) {
    const std::string suffix = t.name.substr(last.size());
    auto it = next_shapes.find(suffix);
    if (it == next_shapes.end() || it->second != t.shape) continue;
    ASSIGN_OR_RETURN(Tensor wrong, source.view(next + suffix));
    store.put(t.name, std::move(wrong));
  }
  return Status::ok();
}

// The named tensors of stage `index` as views of the source (WeightSource::view), except
// a non-first stage's embed_tokens: the copy held for the drafter is loaded into storage
// of its own, so that it is never the first stage's object (SPEC 5.4).
Result<WeightStore> load_placed(WeightSource& source, const std::vector<std::string>& names,
                                int index) {
  std::vector<std::string> viewed;
  bool embedding_copy = false;
  for (const std::string& n : names) {
    if (index != 0 && n == "embed_tokens.weight")
      embedding_copy = true;
    else
      viewed.push_back(n);
  }
  ASSIGN_OR_RETURN(WeightStore store, load_weights(source, viewed));
  if (embedding_copy) {
    ASSIGN_OR_RETURN(Tensor copy, source.load("embed_tokens.weight"));
    store.put("embed_tokens.weight", std::move(copy));
  }
  return store;
}

}  // namespace

Result<std::unique_ptr<Stage>> Stage::create(const StageConfig& cfg, WeightSource& source) {
  std::unique_ptr<Stage> st(new Stage(cfg));
  const ModelConfig& c = cfg.model;
  st->range_ = cfg.partition.stage(cfg.index);
  const StageRange r = st->range_;
  const bool last = st->is_last();

  // tap.boundary_rejected: the historical refusal of any capture id at a stage end.
  if (cfg.faults.has("tap.boundary_rejected") && !last && st->captured(r.end)) {
    return config_rejected(
        fmt::format("stage {} ends at layer {}, which is a capture id", cfg.index, r.end));
  }

  // What the stage holds: the placement rule's tensors (SPEC 2.7), the boundary copies
  // apart (below). pd.producer_embedding restores the historical copy on a context-only
  // producer: the rule is asked as if the stage proposed.
  std::vector<std::string> names;
  bool boundary_copies = false;
  for (const TensorSpec& t : placed_tensors(loading_placement(cfg))) {
    if (t.name == kBoundaryAttnResNorm || t.name == kBoundaryAttnResProj)
      boundary_copies = true;
    else
      names.push_back(t.name);
  }
  ASSIGN_OR_RETURN(st->weights_, load_placed(source, names, cfg.index),
                   fmt::format("stage {} ({}-{})", cfg.index, r.begin, r.end));
  if (cfg.faults.has("weights.stage_layer_offset") && st->is_first() && !last)
    RETURN_IF_ERROR(load_one_past_the_end(c, r.end, source, st->weights_));
  for (int l = r.begin; l < r.end; ++l) {
    ASSIGN_OR_RETURN(LayerWeights w, bind_layer(c, st->weights_, l));
    st->layers_.push_back(std::move(w));
  }

  // Boundary copies (SPEC 2.6): a non-last stage that owns the tap at its end keeps its
  // own copies of layer end's two AttnRes vectors, NaN until loaded (load(), not a view:
  // storage of its own, 2 x H bf16).
  if (boundary_copies) {
    st->boundary_norm_ = nan_vector(c.hidden_size);
    st->boundary_proj_ = nan_vector(c.hidden_size);
    if (!cfg.faults.has("weights.no_boundary_copy")) {
      const std::string p = "layers." + std::to_string(r.end) + ".";
      ASSIGN_OR_RETURN(st->boundary_norm_, source.load(p + "self_attention_res_norm.weight"));
      ASSIGN_OR_RETURN(st->boundary_proj_, source.load(p + "self_attention_res_proj.weight"));
    }
    if (has_nan(st->boundary_norm_) || has_nan(st->boundary_proj_)) {
      return config_rejected(fmt::format(
          "stage {}: boundary copies (boundary_attn_res_norm, boundary_attn_res_proj) for tap {} "
          "were not loaded from the checkpoint (still NaN)",
          cfg.index, r.end));
    }
    // The stage owns its copies like every other tensor it loaded.
    st->weights_.put(kBoundaryAttnResNorm, st->boundary_norm_);
    st->weights_.put(kBoundaryAttnResProj, st->boundary_proj_);
  }

  st->holdings_ = measure_holdings(cfg, st->weights_);
  if (cfg.faults.has("weights.rebound_after_load") && !st->is_first()) {
    // After loading (and measuring) what it holds, the stage re-binds its first layer's
    // post_attention_layernorm (the pre_mlp read's output weight) to a modified copy: the
    // bytes it computes with are not those it loaded.
    st->rebound_ = doubled_copy(*st->layers_.front().post_attention_layernorm);
    st->layers_.front().post_attention_layernorm = &st->rebound_;
  }
  st->init_caches();
  return st;
}

StageConfig loading_placement(const StageConfig& cfg) {
  StageConfig placement = cfg;
  placement.context_only_producer =
      cfg.context_only_producer && !cfg.faults.has("pd.producer_embedding");
  return placement;
}

Result<WeightStore> load_stage_head(const StageConfig& cfg, WeightSource& source) {
  std::vector<std::string> names;
  for (const TensorSpec& t : placed_tensors(loading_placement(cfg))) {
    if (t.name.rfind("layers.", 0) == 0 || t.name == kBoundaryAttnResNorm ||
        t.name == kBoundaryAttnResProj)
      continue;
    names.push_back(t.name);
  }
  return load_placed(source, names, cfg.index);
}

StageHoldings measure_holdings(const StageConfig& cfg, const WeightStore& weights) {
  StageHoldings h;
  h.index = cfg.index;
  h.range = cfg.partition.stage(cfg.index);
  const bool first = cfg.index == 0;
  if (!weights.has("embed_tokens.weight"))
    h.embedding = "missing";
  else
    h.embedding = first ? "real" : "copy-for-drafter";
  for (int k : cfg.capture_ids)
    if ((k == 0 && first) || (h.range.begin < k && k <= h.range.end)) h.owned_taps.push_back(k);
  h.parameter_bytes = weights.parameter_bytes();
  h.tensors = weights.tensors().size();
  std::map<const void*, size_t> storage;  // address -> label, in name order
  for (const auto& [name, t] : weights.tensors()) {
    if (t.empty()) continue;
    const size_t label = storage.emplace(t.address(), storage.size()).first->second;
    if (name == "embed_tokens.weight") h.embedding_storage = fmt::format("storage:{}", label);
    if (name == "lm_head.weight") h.head_storage = fmt::format("storage:{}", label);
  }
  h.storages = storage.size();
  return h;
}

std::vector<TensorSpec> placed_tensors(const StageConfig& cfg) {
  const ModelConfig& c = cfg.model;
  const StageRange r = cfg.partition.stage(cfg.index);
  const bool first = cfg.index == 0;
  const bool last = cfg.index == cfg.partition.stages() - 1;
  std::vector<TensorSpec> specs;
  auto add = [&](const std::string& name) { specs.push_back(*find_tensor_spec(c, name)); };
  if (first ||
      last_stage_holds_embedding_copy(cfg.spec_method, last, first, cfg.context_only_producer))
    add("embed_tokens.weight");
  for (int l = r.begin; l < r.end; ++l)
    for (TensorSpec& t : layer_tensor_specs(c, l)) specs.push_back(std::move(t));
  if (last) {
    for (const char* n : {"norm.weight", "output_attn_res_norm.weight",
                          "output_attn_res_proj.weight", "lm_head.weight"})
      add(n);
  }
  const bool end_captured =
      std::binary_search(cfg.capture_ids.begin(), cfg.capture_ids.end(), r.end);
  if (!last && r.end < c.num_hidden_layers && end_captured) {
    for (const char* n : {kBoundaryAttnResNorm, kBoundaryAttnResProj})
      specs.push_back(TensorSpec{n, {c.hidden_size}});
  }
  return specs;
}

size_t placed_parameter_bytes(const StageConfig& cfg) {
  size_t n = 0;
  for (const TensorSpec& t : placed_tensors(cfg)) {
    size_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<size_t>(d);
    n += numel * dtype_size(DType::kBF16);
  }
  return n;
}

size_t one_device_weight_bytes(const std::vector<StageConfig>& stages) {
  auto bytes = [](const Shape& shape) {
    size_t numel = 1;
    for (int64_t d : shape) numel *= static_cast<size_t>(d);
    return numel * dtype_size(DType::kBF16);
  };
  if (stages.empty()) return 0;
  size_t n = 0;
  for (const TensorSpec& t : model_tensor_specs(stages.front().model)) n += bytes(t.shape);
  for (const StageConfig& c : stages) {
    for (const TensorSpec& t : placed_tensors(loading_placement(c))) {
      const bool embedding_copy = c.index != 0 && t.name == "embed_tokens.weight";
      if (embedding_copy || t.name == kBoundaryAttnResNorm || t.name == kBoundaryAttnResProj)
        n += bytes(t.shape);
    }
  }
  return n;
}

void Stage::init_caches() {
  snapshot_ = CacheSnapshot();
  caches_.clear();
  for (int l = range_.begin; l < range_.end; ++l)
    caches_.push_back(empty_layer_cache(cfg_.model, l));
}

void Stage::reset_sequence() { init_caches(); }

void Stage::save_state() { snapshot_.take(cfg_.model, range_.begin, caches_); }

void Stage::restore_state() { snapshot_.restore(cfg_.model, range_.begin, caches_); }

void Stage::record_caches(int32_t forward, RunRecord& record) const {
  for (int l = range_.begin; l < range_.end; ++l)
    record.add(forward_path(forward) + "cache/" + std::to_string(l),
               cache_tensor(cfg_.model, l, caches_[l - range_.begin]));
}

void Stage::read_tap_after(const KernelContext& ctx, int l, const ResidualState& st,
                           std::vector<std::pair<int, Tensor>>* taps) const {
  const ModelConfig& c = cfg_.model;
  const int k = l + 1;
  if (taps == nullptr || !captured(k)) return;
  if (k < range_.end) {
    const LayerWeights& next = layers_[k - range_.begin];
    taps->emplace_back(k, read_tap(ctx, c, k, st, *next.sa_res_norm, *next.sa_res_proj));
  } else if (k == c.num_hidden_layers) {
    taps->emplace_back(k, read_tap(ctx, c, k, st, weights_.get("output_attn_res_norm.weight"),
                                   weights_.get("output_attn_res_proj.weight")));
  } else if (cfg_.faults.has("tap.boundary_uses_prefix")) {
    taps->emplace_back(k, folded_hidden(st));  // the historical bug: the prefix, not the read
  } else {
    taps->emplace_back(k, read_tap(ctx, c, k, st, boundary_norm_, boundary_proj_));
  }
}

void Stage::run_layers(const KernelContext& ctx, ResidualState& st, const LayerRecording& rec,
                       std::vector<std::pair<int, Tensor>>* taps) {
  for (int l = range_.begin; l < range_.end; ++l) {
    const int i = l - range_.begin;
    run_layer(ctx, cfg_.model, l, layers_[i], st, caches_[i], rec);
    ++computed_.layers;
    read_tap_after(ctx, l, st, taps);
  }
}

Status Stage::receive_payload(int32_t forward, int64_t T, const std::vector<std::byte>& in,
                              const Tensor* body, ResidualState& st,
                              std::vector<std::pair<int, Tensor>>& taps) const {
  const ModelConfig& c = cfg_.model;
  PayloadExpectation expect{forward, T, c.hidden_size, cdiv(range_.begin, c.attn_res_block_size),
                            incoming_tap_ids()};
  const bool split = body != nullptr && !body->empty();
  ASSIGN_OR_RETURN(HandoffPayload p,
                   split ? decode_payload(in, *body, expect) : decode_payload(in, expect),
                   fmt::format("stage {} receiving forward {}", cfg_.index, forward));
  // The receiver: P = hidden, the bank rows it was sent, and an explicit zero delta
  // unless its first layer writes a block (then the layer starts a block itself). The
  // state is built where the payload's tensors are (the device, for a split payload), by
  // byte copies there.
  const Device d = p.hidden.device();
  const int64_t rows = p.bank.dim(1), h = c.hidden_size;
  const size_t row = static_cast<size_t>(h) * sizeof(bf16);
  st.prefix = p.hidden;
  st.bank = Tensor::zeros(DType::kBF16, {T, c.num_blocks(), c.hidden_size}, d);
  copy_tensor_runs(st.bank, 0, c.num_blocks() * row, p.bank, 0, rows * row, rows * row,
                   static_cast<size_t>(T));
  if (!c.is_block_write_layer(range_.begin) && !cfg_.faults.has("handoff.no_zero_delta")) {
    st.delta = Tensor::zeros(DType::kBF16, {T, c.hidden_size}, d);
    st.has_delta = true;
  }
  const size_t aux_row = static_cast<size_t>(p.aux.dim(1)) * sizeof(bf16);
  for (size_t i = 0; i < p.aux_ids.size(); ++i) {
    Tensor tap = Tensor::zeros(DType::kBF16, {T, h}, d);
    copy_tensor_runs(tap, 0, row, p.aux, i * row, aux_row, row, static_cast<size_t>(T));
    taps.emplace_back(p.aux_ids[i], std::move(tap));
  }
  return Status::ok();
}

std::vector<std::byte> Stage::send_payload(int32_t forward, int64_t T, const ResidualState& st,
                                           const std::vector<std::pair<int, Tensor>>& taps) const {
  const ModelConfig& c = cfg_.model;
  HandoffPayload p;
  p.forward = forward;
  p.hidden = folded_hidden(st);
  p.bank = bank_rows(st.bank, cdiv(range_.end, c.attn_res_block_size));
  std::vector<std::pair<int, Tensor>> relayed;
  for (const auto& [k, t] : taps) {
    if (k == 0 && !relays_tap0()) continue;
    p.aux_ids.push_back(k);
    relayed.emplace_back(k, t);
  }
  p.aux = concat_taps(relayed, T, c.hidden_size);
  return encode_payload(p);
}

void Stage::send_device_payload(int32_t forward, int64_t T, const ResidualState& st,
                                const std::vector<std::pair<int, Tensor>>& taps,
                                StageOutput& out) const {
  const ModelConfig& c = cfg_.model;
  const int64_t rows = cdiv(range_.end, c.attn_res_block_size), h = c.hidden_size;
  std::vector<int32_t> ids;
  std::vector<const Tensor*> relayed;
  for (const auto& [k, t] : taps) {
    if (k == 0 && !relays_tap0()) continue;
    ids.push_back(k);
    relayed.push_back(&t);
  }
  out.payload = encode_payload_header(forward, T, h, rows, ids);
  // The body: hidden [T, H], bank rows [T, rows, H], taps [T, n*H], as send_payload lays
  // them out, each placed by one device copy.
  const size_t row = static_cast<size_t>(h) * sizeof(bf16), runs = static_cast<size_t>(T);
  const size_t n = relayed.size();
  const size_t hidden_bytes = runs * row, bank_bytes = runs * rows * row;
  const Tensor hidden = folded_hidden(st);
  out.body = Tensor::zeros(DType::kBF16,
                           {static_cast<int64_t>(payload_body_bytes(T, h, rows, n) / sizeof(bf16))},
                           weights_.device());
  copy_tensor_runs(out.body, 0, hidden_bytes, hidden, 0, hidden_bytes, hidden_bytes, 1);
  copy_tensor_runs(out.body, hidden_bytes, rows * row, st.bank, 0, st.bank.dim(1) * row, rows * row,
                   runs);
  for (size_t i = 0; i < n; ++i)
    copy_tensor_runs(out.body, hidden_bytes + bank_bytes + i * row, n * row, *relayed[i], 0, row,
                     row, runs);
}

Result<StageOutput> Stage::run(const ForwardRequest& req, const std::vector<std::byte>* in,
                               RunRecord* record, DispatchTrace* trace, const Tensor* in_body) {
  const ModelConfig& c = cfg_.model;
  const int64_t T = static_cast<int64_t>(req.ids.size());
  const KernelContext ctx = context(trace, req.index);
  StageOutput out;
  ResidualState& st = out.state;
  std::vector<std::pair<int, Tensor>>& taps = out.taps;
  const LayerRecording rec{record, forward_path(req.index), cfg_.level};

  if (is_first()) {
    st = embed_state(ctx, c, weights_.get("embed_tokens.weight"), ids_tensor(req.ids));
    if (captured(0)) taps.emplace_back(0, st.prefix.clone());
    run_layers(ctx, st, rec, &taps);
  } else {
    if (in == nullptr)
      return internal_error(fmt::format("stage {} received no payload", cfg_.index));
    RETURN_IF_ERROR(receive_payload(req.index, T, *in, in_body, st, taps));
    place_state(st, weights_.device());  // the received state goes where the weights are
    run_layers(ctx, st, rec, &taps);
  }

  if (is_last()) {
    out.head = run_head(ctx, c, st, weights_);
    ++computed_.heads;
    if (!is_first() && captured(0) && !relays_tap0()) {
      // The "resident" tap 0 is a buffer nothing ever filled.
      taps.emplace_back(0, Tensor::zeros(DType::kBF16, {T, c.hidden_size}));
    }
    std::stable_sort(taps.begin(), taps.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    return out;
  }
  hand_on_payload(req.index, T, out);
  return out;
}

void Stage::hand_on_payload(int32_t forward, int64_t T, StageOutput& out) const {
  if (sends_device_payloads())
    send_device_payload(forward, T, out.state, out.taps, out);
  else
    out.payload = send_payload(forward, T, out.state, out.taps);
}

}  // namespace splitcheck
