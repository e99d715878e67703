#include "reference/engine.h"

#include <algorithm>

#include "kernels/tensor_copy.h"

namespace splitcheck {

const char* forward_kind_name(ForwardKind kind) {
  switch (kind) {
    case ForwardKind::kPrefill:
      return "prefill";
    case ForwardKind::kDecode:
      return "decode";
    case ForwardKind::kVerify:
      return "verify";
    case ForwardKind::kReplay:
      return "replay";
  }
  return "?";
}

std::string forward_path(int32_t index) { return "forward/" + std::to_string(index) + "/"; }

Tensor ids_tensor(const std::vector<int32_t>& ids) {
  Tensor t = Tensor::zeros(DType::kI32, {static_cast<int64_t>(ids.size())});
  std::copy(ids.begin(), ids.end(), t.data<int32_t>());
  return t;
}

Tensor dispatch_table(const DispatchTrace& trace) {
  const int64_t n = static_cast<int64_t>(trace.events.size());
  Tensor t = Tensor::zeros(DType::kI32, {n, 4});
  int32_t* d = t.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const DispatchEvent& e = trace.events[i];
    d[i * 4 + 0] = e.layer;
    d[i * 4 + 1] = static_cast<int32_t>(e.site);
    d[i * 4 + 2] = e.kernel;
    d[i * 4 + 3] = e.aux;
  }
  return t;
}

Tensor dispatch_stages(const DispatchTrace& trace) {
  Tensor t = Tensor::zeros(DType::kI32, {static_cast<int64_t>(trace.events.size())});
  for (size_t i = 0; i < trace.events.size(); ++i) t.data<int32_t>()[i] = trace.events[i].stage;
  return t;
}

void record_forward_start(RunRecord* record, const ForwardRequest& req) {
  if (record == nullptr) return;
  const std::string path = forward_path(req.index);
  const std::string group = path.substr(0, path.size() - 1);
  record->set_attr(group, "kind", std::string(forward_kind_name(req.kind)));
  record->set_attr(group, "first_position", req.first_position);
  record->set_attr(group, "last_position",
                   req.first_position + static_cast<int64_t>(req.ids.size()) - 1);
  record->add(path + "input_ids", ids_tensor(req.ids));
}

void record_forward_end(RunRecord* record, const ForwardRequest& req, DumpLevel level,
                        const HeadOutput& head, const ResidualState& state,
                        const std::vector<std::pair<int, Tensor>>& taps,
                        const DispatchTrace& trace) {
  if (record == nullptr) return;
  const std::string path = forward_path(req.index);
  if (level != DumpLevel::kSummary) {
    record->add(path + "output", head.output.clone());
    record->add(path + "bank", state.bank.clone());
  }
  record->add(path + "logits", head.logits.clone());
  for (const auto& [k, t] : taps) record->add(path + "taps/" + std::to_string(k), t.clone());
  record->add(path + "next_tokens", head.next_tokens.clone());
  record->add(path + "dispatch", dispatch_table(trace));
  record->add("stage_trace/" + std::to_string(req.index), dispatch_stages(trace));
}

Tensor cache_tensor(const ModelConfig& c, int layer, const LayerCache& lc) {
  if (c.is_mla_layer(layer)) return latents_on_host(lc.mla_latent, c.kv_lora_rank);
  // A layer that has not run has no state yet: still zero.
  return lc.kda_state.shape().empty() ? zero_kda_state(c, Device::kCpu)
                                      : lc.kda_state.to(Device::kCpu);
}

Tensor concat_taps(const std::vector<std::pair<int, Tensor>>& taps, int64_t tokens, int64_t hidden,
                   Device device) {
  const int64_t n = static_cast<int64_t>(taps.size());
  Tensor out = Tensor::zeros(DType::kBF16, {tokens, n * hidden}, device);
  // One strided copy per tap (copy_tensor_runs: queued between device tensors, else a copy
  // that has finished on return).
  const size_t row = static_cast<size_t>(hidden) * sizeof(bf16);
  for (size_t i = 0; i < taps.size(); ++i)
    copy_tensor_runs(out, i * row, static_cast<size_t>(n) * row, taps[i].second, 0, row, row,
                     static_cast<size_t>(tokens));
  return out;
}

Device taps_device(const std::vector<std::pair<int, Tensor>>& taps) {
  if (taps.empty()) return Device::kCpu;
  const Device d = taps.front().second.device();
  for (const auto& [id, t] : taps)
    if (t.device() != d) return Device::kCpu;
  return d;
}

ReferenceEngine::ReferenceEngine(const ModelConfig& config, WeightStore weights,
                                 EngineOptions options)
    : config_(config), weights_(std::move(weights)), options_(std::move(options)) {}

Result<std::unique_ptr<ReferenceEngine>> ReferenceEngine::create(const ModelConfig& config,
                                                                 WeightStore weights,
                                                                 EngineOptions options) {
  std::unique_ptr<ReferenceEngine> e(
      new ReferenceEngine(config, std::move(weights), std::move(options)));
  for (const char* name : {"embed_tokens.weight", "norm.weight", "lm_head.weight",
                           "output_attn_res_norm.weight", "output_attn_res_proj.weight"}) {
    if (!e->weights_.has(name))
      return invalid_input(std::string("reference engine needs tensor '") + name + "'");
  }
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    ASSIGN_OR_RETURN(LayerWeights w, bind_layer(config, e->weights_, l));
    e->layers_.push_back(std::move(w));
  }
  e->reset_sequence();
  e->requests_ = RequestStateTable(config, 0, config.num_hidden_layers);
  return e;
}

void ReferenceEngine::reset_sequence() {
  snapshot_ = CacheSnapshot();
  caches_.clear();
  for (int l = 0; l < config_.num_hidden_layers; ++l)
    caches_.push_back(empty_layer_cache(config_, l));
}

void ReferenceEngine::save_state() { snapshot_.take(config_, 0, caches_); }

void ReferenceEngine::restore_state() { snapshot_.restore(config_, 0, caches_); }

Result<ForwardResult> ReferenceEngine::forward(const ForwardRequest& req, RunRecord* record) {
  const ModelConfig& c = config_;
  const int L = c.num_hidden_layers;
  for (int32_t id : req.ids) {
    if (id < 0 || id >= c.vocab_size)
      return invalid_input("token id " + std::to_string(id) + " outside the vocabulary");
  }
  record_forward_start(record, req);
  DispatchTrace trace;
  KernelContext ctx{&trace, req.index, -1, Site::kEmbed, 0, -1};
  const Tensor ids = ids_tensor(req.ids);
  ResidualState st = embed_state(ctx, c, weights_.get("embed_tokens.weight"), ids);
  const LayerRecording rec{record, forward_path(req.index), options_.level};
  auto captured = [&](int k) {
    return std::binary_search(options_.capture_ids.begin(), options_.capture_ids.end(), k);
  };
  std::vector<std::pair<int, Tensor>> taps;
  if (captured(0)) taps.emplace_back(0, clone_queued(st.prefix));
  for (int l = 0; l < L; ++l) {
    run_layer(ctx, c, l, layers_[l], st, caches_[l], rec);
    ++computed_.layers;
    const int k = l + 1;
    if (!captured(k)) continue;
    if (k < L) {
      taps.emplace_back(k,
                        read_tap(ctx, c, k, st, *layers_[k].sa_res_norm, *layers_[k].sa_res_proj));
    } else {
      taps.emplace_back(k, read_tap(ctx, c, k, st, weights_.get("output_attn_res_norm.weight"),
                                    weights_.get("output_attn_res_proj.weight")));
    }
  }
  const HeadOutput head = run_head(ctx, c, st, weights_);
  ++computed_.heads;
  record_forward_end(record, req, options_.level, head, st, taps, trace);
  if (record != nullptr && options_.level == DumpLevel::kFull) {
    for (int l = 0; l < L; ++l)
      record->add(forward_path(req.index) + "cache/" + std::to_string(l),
                  cache_tensor(c, l, caches_[l]));
  }
  ForwardResult out;
  out.logits = head.logits;
  out.next_tokens = head.next_tokens;
  out.taps = concat_taps(taps, ids.dim(0), c.hidden_size, taps_device(taps));
  return out;
}

}  // namespace splitcheck
