#include "harness/engine/stage.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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
  for (bf16 v : t.span<const bf16>())
    if (std::isnan(to_f32(v))) return true;
  return false;
}

// Rows [0, rows) of a bank [T, R, H] as a new [T, rows, H] tensor.
Tensor bank_rows(const Tensor& bank, int64_t rows) {
  const int64_t t = bank.dim(0), r = bank.dim(1), h = bank.dim(2);
  Tensor out = Tensor::zeros(DType::kBF16, {t, rows, h});
  for (int64_t i = 0; i < t; ++i)
    std::memcpy(out.data<bf16>() + i * rows * h, bank.data<bf16>() + i * r * h,
                static_cast<size_t>(rows * h) * sizeof(bf16));
  return out;
}

}  // namespace

bool Stage::captured(int k) const {
  return std::binary_search(cfg_.capture_ids.begin(), cfg_.capture_ids.end(), k);
}

bool Stage::owns_tap(int k) const {
  return (k == 0 && is_first()) || (range_.begin < k && k <= range_.end);
}

bool Stage::relays_tap0() const {
  // tap.embed_resident_by_module: the last stage's embedding copy makes tap 0 look
  // resident there, so stage 0 never relays it (SPEC 2.7: a copy held for a drafter never
  // makes tap 0 resident).
  if (!cfg_.faults.has("tap.embed_resident_by_module")) return true;
  const int stages = cfg_.partition.stages();
  const bool producer = cfg_.context_only_producer && !cfg_.faults.has("pd.producer_embedding");
  return !last_stage_holds_embedding_copy(cfg_.spec_method, true, stages == 1, producer);
}

std::vector<int32_t> Stage::incoming_tap_ids() const {
  std::vector<int32_t> ids;
  for (int k : cfg_.capture_ids) {
    if (k == 0 && !relays_tap0()) continue;
    if (k == 0 ? !is_first() : k <= range_.begin) ids.push_back(k);
  }
  return ids;
}

Result<std::unique_ptr<Stage>> Stage::create(const StageConfig& cfg, WeightSource& source) {
  std::unique_ptr<Stage> st(new Stage(cfg));
  const ModelConfig& c = cfg.model;
  st->range_ = cfg.partition.stage(cfg.index);
  const StageRange r = st->range_;
  const int L = c.num_hidden_layers;
  const bool last = st->is_last();

  // tap.boundary_rejected: the historical refusal of any capture id at a stage end.
  if (cfg.faults.has("tap.boundary_rejected") && !last && st->captured(r.end)) {
    return config_rejected(
        fmt::format("stage {} ends at layer {}, which is a capture id", cfg.index, r.end));
  }

  // What the stage holds: its layers, the embedding on the first stage, the output
  // weights on the last.
  std::vector<std::string> names;
  // The last stage also holds a real copy of the embedding when the registry says its
  // drafter shares it (SPEC 2.7); pd.producer_embedding restores the historical copy on a
  // context-only producer.
  const bool producer = cfg.context_only_producer && !cfg.faults.has("pd.producer_embedding");
  const bool embedding_copy =
      last_stage_holds_embedding_copy(cfg.spec_method, last, st->is_first(), producer);
  if (st->is_first() || embedding_copy) names.push_back("embed_tokens.weight");
  for (int l = r.begin; l < r.end; ++l)
    for (const TensorSpec& s : layer_tensor_specs(c, l)) names.push_back(s.name);
  if (last) {
    for (const char* n : {"norm.weight", "output_attn_res_norm.weight",
                          "output_attn_res_proj.weight", "lm_head.weight"})
      names.push_back(n);
  }
  ASSIGN_OR_RETURN(st->weights_, load_weights(source, names),
                   fmt::format("stage {} ({}-{})", cfg.index, r.begin, r.end));
  for (int l = r.begin; l < r.end; ++l) {
    ASSIGN_OR_RETURN(LayerWeights w, bind_layer(c, st->weights_, l));
    st->layers_.push_back(std::move(w));
  }

  // Boundary copies (SPEC 2.6): a non-last stage that owns the tap at its end keeps its
  // own copies of layer end's two AttnRes vectors, NaN until loaded.
  if (!last && r.end < L && st->captured(r.end)) {
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
  }

  StageHoldings& h = st->holdings_;
  h.index = cfg.index;
  h.range = r;
  h.embedding = st->is_first() ? "real" : (embedding_copy ? "copy-for-drafter" : "missing");
  for (int k : cfg.capture_ids)
    if (st->owns_tap(k)) h.owned_taps.push_back(k);
  h.parameter_bytes =
      st->weights_.parameter_bytes() + st->boundary_norm_.nbytes() + st->boundary_proj_.nbytes();
  h.tensors = st->weights_.tensors().size();
  st->init_caches();
  return st;
}

void Stage::init_caches() {
  caches_.clear();
  for (int l = range_.begin; l < range_.end; ++l)
    caches_.push_back(empty_layer_cache(cfg_.model, l));
}

const LoggedForward* Stage::follow(EngineOp op, const ForwardRequest* request) {
  if (!follower_) return nullptr;
  const PrefixFollower::Step step = follower_->follow(op, request);
  if (step.left_now && follower_->mode() == ReuseMode::kOn) rebuild_caches();
  return step.logged;
}

void Stage::reset_sequence() {
  follow(EngineOp::kReset, nullptr);
  init_caches();
}

void Stage::save_state() {
  follow(EngineOp::kSave, nullptr);
  snapshot_ = caches_;
}

void Stage::restore_state() {
  follow(EngineOp::kRestore, nullptr);
  caches_ = snapshot_;
}

void Stage::record_caches(int32_t forward, RunRecord& record) const {
  for (int l = range_.begin; l < range_.end; ++l)
    record.add(forward_path(forward) + "cache/" + std::to_string(l),
               cache_tensor(cfg_.model, l, caches_[l - range_.begin]));
}

void Stage::follow_log(PrefixReuse reuse) {
  std::string& why = reuse_unused_because_;
  if (!reuse.enabled()) {
    why = "reuse is off";
  } else if (cfg_.level == DumpLevel::kFull) {
    why = "the full dump level records the caches, which the log does not keep";
  } else if (!is_first() || is_last()) {
    why = "only a first stage that is not also the last reuses";
  } else if (reuse.log->capture_ids() != cfg_.capture_ids || reuse.log->level() != cfg_.level) {
    why = "the log was made with other capture ids or another dump level";
  } else if (reuse.log->last_layer_kept() < range_.end - 1) {
    why = fmt::format("the log keeps states up to layer {}, this stage ends at {}",
                      reuse.log->last_layer_kept(), range_.end);
  } else {
    why.clear();
    follower_ = std::make_unique<PrefixFollower>(reuse);
  }
}

ReuseStats Stage::reuse_stats() const {
  ReuseStats s = follower_ ? follower_->stats() : ReuseStats{};
  s.unused_because = reuse_unused_because_;
  return s;
}

void Stage::rebuild_caches() {
  // Every matched operation, applied to fresh caches; forwards through the stage's own
  // layers, recording nothing (what they recorded came from the log).
  init_caches();
  snapshot_.clear();
  const StateLog& log = follower_->log();
  for (const LoggedOp& op : follower_->matched()) {
    switch (op.op) {
      case EngineOp::kReset:
        init_caches();
        break;
      case EngineOp::kSave:
        snapshot_ = caches_;
        break;
      case EngineOp::kRestore:
        caches_ = snapshot_;
        break;
      case EngineOp::kForward: {
        const ForwardRequest& req = log.forward(op).request;
        DispatchTrace scratch;
        const KernelContext ctx{&scratch, req.index, -1, Site::kEmbed, cfg_.index, -1};
        ResidualState st =
            embed_state(ctx, cfg_.model, weights_.get("embed_tokens.weight"), ids_tensor(req.ids));
        run_layers(ctx, st, LayerRecording{}, nullptr);
        break;
      }
    }
  }
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
    read_tap_after(ctx, l, st, taps);
  }
}

void Stage::take_prefix(const LoggedForward& f, StageOutput& out, RunRecord* record,
                        DispatchTrace* trace) const {
  const size_t last = static_cast<size_t>(range_.end - 1);
  out.state = clone_state(f.state_after[last]);
  trace->events.insert(trace->events.end(), f.events.begin(),
                       f.events.begin() + static_cast<std::ptrdiff_t>(f.events_after[last]));
  if (record != nullptr && cfg_.level != DumpLevel::kSummary) {
    for (size_t i = 0; i < f.entries_after[last]; ++i)
      record->add(f.layer_entries[i].path, f.layer_entries[i].tensor);
  }
  for (const auto& [k, t] : f.taps)
    if (k < range_.end) out.taps.emplace_back(k, t);
}

Status Stage::check_prefix(const LoggedForward& f, const StageOutput& out, const RunRecord* record,
                           size_t entries_before, const DispatchTrace& trace,
                           size_t events_before) const {
  const size_t last = static_cast<size_t>(range_.end - 1);
  const int32_t fwd = f.request.index;
  auto differs = [&](const std::string& what) {
    return internal_error(fmt::format(
        "prefix reuse would change forward {} of the first stage (layers 0-{}): {} differs from "
        "what the stage computed",
        fwd, range_.end, what));
  };
  const ResidualState& want = f.state_after[last];
  const ResidualState& got = out.state;
  if (!want.prefix.bit_equal(got.prefix)) return differs("the prefix P");
  if (want.has_delta != got.has_delta || (want.has_delta && !want.delta.bit_equal(got.delta)))
    return differs("the pending delta D");
  if (!want.bank.bit_equal(got.bank)) return differs("the bank");
  const size_t n_events = f.events_after[last];
  if (trace.events.size() < events_before + n_events)
    return differs("the number of dispatch events");
  for (size_t i = 0; i < n_events; ++i) {
    const DispatchEvent& a = f.events[i];
    const DispatchEvent& b = trace.events[events_before + i];
    if (a.forward != b.forward || a.layer != b.layer || a.site != b.site || a.kernel != b.kernel ||
        a.stage != b.stage || a.aux != b.aux)
      return differs(fmt::format("dispatch event {}", i));
  }
  if (record != nullptr && cfg_.level != DumpLevel::kSummary) {
    const size_t n_entries = f.entries_after[last];
    if (record->entries().size() < entries_before + n_entries)
      return differs("the number of per-layer tensors");
    for (size_t i = 0; i < n_entries; ++i) {
      const RecordEntry& a = f.layer_entries[i];
      const RecordEntry& b = record->entries()[entries_before + i];
      if (a.path != b.path || !a.tensor.bit_equal(b.tensor)) return differs(a.path);
    }
  }
  std::vector<const std::pair<int, Tensor>*> want_taps, got_taps;
  for (const auto& t : f.taps)
    if (t.first < range_.end) want_taps.push_back(&t);
  for (const auto& t : out.taps)
    if (t.first < range_.end) got_taps.push_back(&t);
  if (want_taps.size() != got_taps.size()) return differs("the set of taps below the cut");
  for (size_t i = 0; i < want_taps.size(); ++i) {
    if (want_taps[i]->first != got_taps[i]->first ||
        !want_taps[i]->second.bit_equal(got_taps[i]->second))
      return differs(fmt::format("tap {}", want_taps[i]->first));
  }
  return Status::ok();
}

Result<StageOutput> Stage::run(const ForwardRequest& req, const std::vector<std::byte>* in,
                               RunRecord* record, DispatchTrace* trace) {
  const ModelConfig& c = cfg_.model;
  const int S = c.attn_res_block_size;
  const int64_t T = static_cast<int64_t>(req.ids.size());
  KernelContext ctx{trace, req.index, -1, Site::kEmbed, cfg_.index, -1};
  StageOutput out;
  ResidualState& st = out.state;
  std::vector<std::pair<int, Tensor>>& taps = out.taps;
  const LayerRecording rec{record, forward_path(req.index), cfg_.level};

  const LoggedForward* logged = is_first() ? follow(EngineOp::kForward, &req) : nullptr;
  if (logged != nullptr && follower_->mode() == ReuseMode::kOn) {
    // PP=1's prefix; the boundary tap after the last layer is this stage's own.
    take_prefix(*logged, out, record, trace);
    read_tap_after(ctx, range_.end - 1, st, &taps);
  } else if (is_first()) {
    const size_t events_before = trace->events.size();
    const size_t entries_before = record != nullptr ? record->entries().size() : 0;
    st = embed_state(ctx, c, weights_.get("embed_tokens.weight"), ids_tensor(req.ids));
    if (captured(0)) taps.emplace_back(0, st.prefix.clone());
    run_layers(ctx, st, rec, &taps);
    if (logged != nullptr)
      RETURN_IF_ERROR(check_prefix(*logged, out, record, entries_before, *trace, events_before));
  } else {
    if (in == nullptr)
      return internal_error(fmt::format("stage {} received no payload", cfg_.index));
    PayloadExpectation expect{req.index, T, c.hidden_size, cdiv(range_.begin, S),
                              incoming_tap_ids()};
    ASSIGN_OR_RETURN(HandoffPayload p, decode_payload(*in, expect),
                     fmt::format("stage {} receiving forward {}", cfg_.index, req.index));
    // The receiver: P = hidden, the bank rows it was sent, and an explicit zero delta
    // unless its first layer writes a block (then the layer starts a block itself).
    st.prefix = p.hidden;
    st.bank = Tensor::zeros(DType::kBF16, {T, c.num_blocks(), c.hidden_size});
    const int64_t rows = p.bank.dim(1), h = c.hidden_size;
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(st.bank.data<bf16>() + t * c.num_blocks() * h, p.bank.data<bf16>() + t * rows * h,
                  static_cast<size_t>(rows * h) * sizeof(bf16));
    if (!c.is_block_write_layer(range_.begin) && !cfg_.faults.has("handoff.no_zero_delta")) {
      st.delta = Tensor::zeros(DType::kBF16, {T, c.hidden_size});
      st.has_delta = true;
    }
    for (size_t i = 0; i < p.aux_ids.size(); ++i) {
      Tensor tap = Tensor::zeros(DType::kBF16, {T, h});
      for (int64_t t = 0; t < T; ++t)
        std::memcpy(tap.data<bf16>() + t * h,
                    p.aux.data<bf16>() + t * p.aux.dim(1) + static_cast<int64_t>(i) * h,
                    static_cast<size_t>(h) * sizeof(bf16));
      taps.emplace_back(p.aux_ids[i], std::move(tap));
    }
    run_layers(ctx, st, rec, &taps);
  }

  if (is_last()) {
    out.head = run_head(ctx, c, st, weights_);
    if (!is_first() && captured(0) && !relays_tap0()) {
      // The "resident" tap 0 is a buffer nothing ever filled.
      taps.emplace_back(0, Tensor::zeros(DType::kBF16, {T, c.hidden_size}));
    }
    std::stable_sort(taps.begin(), taps.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    return out;
  }
  HandoffPayload p;
  p.forward = req.index;
  p.hidden = folded_hidden(st);
  p.bank = bank_rows(st.bank, cdiv(range_.end, S));
  std::vector<std::pair<int, Tensor>> relayed;
  for (const auto& [k, t] : taps) {
    if (k == 0 && !relays_tap0()) continue;
    p.aux_ids.push_back(k);
    relayed.emplace_back(k, t);
  }
  p.aux = concat_taps(relayed, T, c.hidden_size);
  out.payload = encode_payload(p);
  return out;
}

}  // namespace splitcheck
