#include "reference/layer_memo.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <cstring>
#include <memory>

namespace splitcheck {

const char* reuse_mode_name(ReuseMode mode) {
  switch (mode) {
    case ReuseMode::kOff:
      return "off";
    case ReuseMode::kOn:
      return "on";
    case ReuseMode::kVerify:
      return "verify";
  }
  return "?";
}

std::optional<ReuseMode> parse_reuse_mode(const std::string& name) {
  for (ReuseMode m : {ReuseMode::kOff, ReuseMode::kOn, ReuseMode::kVerify})
    if (name == reuse_mode_name(m)) return m;
  return std::nullopt;
}

ContentHasher::ContentHasher() : state_(XXH3_createState(), &XXH3_freeState) {
  XXH3_128bits_reset(state_.get());
}

void ContentHasher::bytes(const void* p, size_t n) {
  u64(n);
  if (n > 0) XXH3_128bits_update(state_.get(), p, n);
}

void ContentHasher::tag(const char* s) { bytes(s, std::strlen(s)); }

void ContentHasher::tensor(const Tensor* t) {
  if (t == nullptr || t->empty()) {
    i64(-1);
    return;
  }
  i64(static_cast<int64_t>(t->dtype()));
  i64(static_cast<int64_t>(t->shape().size()));
  for (int64_t d : t->shape()) i64(d);
  const Tensor host = t->on_host();  // a device tensor is hashed from a host copy
  bytes(host.bytes(), host.nbytes());
}

void ContentHasher::config(const ModelConfig& c) {
  tag("config");
  for (int v :
       {c.num_hidden_layers, c.attn_res_block_size, c.hidden_size, c.num_attention_heads,
        c.head_dim, c.vocab_size, c.n_routed_experts, c.num_experts_per_tok, c.n_shared_experts,
        c.moe_intermediate_size, c.intermediate_size, c.first_k_dense_replace, c.kv_lora_rank})
    i64(v);
  uint32_t eps_bits = 0;
  std::memcpy(&eps_bits, &c.rms_norm_eps, sizeof eps_bits);
  u64(eps_bits);
  const std::vector<int> native = native_sizes(c);
  i64(static_cast<int64_t>(native.size()));
  for (int n : native) i64(n);
}

Digest128 ContentHasher::digest() const {
  const XXH128_hash_t h = XXH3_128bits_digest(state_.get());
  return Digest128{h.high64, h.low64};
}

namespace {

using KeyHasher = ContentHasher;

void hash_swiglu(KeyHasher& h, const SwiGluWeights& s) {
  h.tensor(s.gate);
  h.tensor(s.up);
  h.tensor(s.down);
}

size_t state_bytes(const ResidualState& s) {
  return s.prefix.nbytes() + (s.has_delta ? s.delta.nbytes() : 0) + s.bank.nbytes();
}

size_t cache_bytes(const LayerCache& c) {
  return c.mla_latent.size() * sizeof(bf16) + c.kda_state.size() * sizeof(float);
}

bool same_bits(const void* a, const void* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

// What differs between a computed outcome and the memo's, or empty.
std::string first_difference(const LayerOutcome& want, const ResidualState& state,
                             const LayerCache& cache, std::span<const DispatchEvent> events,
                             std::span<const RecordEntry> entries, const std::string& prefix) {
  if (!want.state.prefix.bit_equal(state.prefix)) return "the prefix P";
  if (want.state.has_delta != state.has_delta ||
      (state.has_delta && !want.state.delta.bit_equal(state.delta)))
    return "the pending delta D";
  if (!want.state.bank.bit_equal(state.bank)) return "the bank";
  if (want.cache.mla_latent.size() != cache.mla_latent.size() ||
      !same_bits(want.cache.mla_latent.data(), cache.mla_latent.data(),
                 cache.mla_latent.size() * sizeof(bf16)))
    return "the MLA cache";
  if (want.cache.kda_state.size() != cache.kda_state.size() ||
      !same_bits(want.cache.kda_state.data(), cache.kda_state.data(),
                 cache.kda_state.size() * sizeof(float)))
    return "the KDA state";
  if (want.events.size() != events.size()) return "the number of dispatch events";
  for (size_t i = 0; i < events.size(); ++i) {
    const DispatchEvent& a = want.events[i];
    const DispatchEvent& b = events[i];
    if (a.layer != b.layer || a.site != b.site || a.kernel != b.kernel || a.aux != b.aux)
      return fmt::format("dispatch event {}", i);
  }
  if (want.entries.size() != entries.size()) return "the number of per-layer tensors";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (prefix + want.entries[i].path != entries[i].path ||
        !want.entries[i].tensor.bit_equal(entries[i].tensor))
      return entries[i].path;
  }
  return {};
}

}  // namespace

Digest128 layer_weights_digest(const LayerWeights& w) {
  KeyHasher h;
  h.tag("layer-weights");
  for (const Tensor* t : {w.sa_res_norm, w.sa_res_proj, w.input_layernorm, w.mlp_res_norm,
                          w.mlp_res_proj, w.post_attention_layernorm})
    h.tensor(t);
  h.u64(w.mla);
  for (const Tensor* t :
       {w.q, w.kv_a, w.kv_norm, w.k_b, w.v_b, w.k, w.v, w.b, w.a, w.o_norm, w.g, w.o})
    h.tensor(t);
  h.u64(w.moe);
  hash_swiglu(h, w.dense);
  h.tensor(w.router);
  h.i64(static_cast<int64_t>(w.experts.size()));
  for (const SwiGluWeights& e : w.experts) hash_swiglu(h, e);
  h.i64(static_cast<int64_t>(w.shared.size()));
  for (const SwiGluWeights& e : w.shared) hash_swiglu(h, e);
  return h.digest();
}

Digest128 layer_key(const ModelConfig& config, int l, const Digest128& weights,
                    const ResidualState& state, const LayerCache& cache, DumpLevel level,
                    bool traced) {
  KeyHasher h;
  h.tag("splitcheck.layer.v1");
  h.config(config);
  h.i64(l);
  h.u64(weights.hi);
  h.u64(weights.lo);
  h.i64(static_cast<int64_t>(level));
  h.u64(traced);
  // The layer reads P and D only through their fold (see the header).
  h.u64(state.has_delta);
  if (state.has_delta) {
    const Tensor folded = folded_hidden(state);
    h.tensor(&folded);
  } else {
    h.tensor(&state.prefix);
  }
  h.tensor(&state.bank);
  h.bytes(cache.mla_latent.data(), cache.mla_latent.size() * sizeof(bf16));
  h.bytes(cache.kda_state.data(), cache.kda_state.size() * sizeof(float));
  return h.digest();
}

bool LayerMemo::admit(size_t bytes) {
  if (max_bytes_ != 0 && bytes_ + bytes > max_bytes_) {
    ++dropped_;
    return false;
  }
  bytes_ += bytes;
  return true;
}

void LayerMemo::insert(const Digest128& key, LayerOutcome outcome) {
  if (frozen_ || map_.contains(key) || !admit(outcome.bytes)) return;
  map_.emplace(key, std::move(outcome));
}

const LayerOutcome* LayerMemo::find(const Digest128& key) const {
  if (!frozen_) return nullptr;
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

void LayerMemo::insert_head(const Digest128& key, HeadOutcome outcome) {
  if (frozen_ || heads_.contains(key) || !admit(outcome.bytes)) return;
  heads_.emplace(key, std::move(outcome));
}

const HeadOutcome* LayerMemo::find_head(const Digest128& key) const {
  if (!frozen_) return nullptr;
  auto it = heads_.find(key);
  return it == heads_.end() ? nullptr : &it->second;
}

void LayerMemo::insert_proposal(const Digest128& key, std::vector<int32_t> tokens) {
  if (frozen_ || proposals_.contains(key) || !admit(tokens.size() * sizeof(int32_t))) return;
  proposals_.emplace(key, std::move(tokens));
}

const std::vector<int32_t>* LayerMemo::find_proposal(const Digest128& key) const {
  if (!frozen_) return nullptr;
  auto it = proposals_.find(key);
  return it == proposals_.end() ? nullptr : &it->second;
}

void LayerMemo::insert_draft_rows(const Digest128& key, std::vector<std::vector<bf16>> rows) {
  size_t bytes = 0;
  for (const auto& r : rows) bytes += r.size() * sizeof(bf16);
  if (frozen_ || draft_rows_.contains(key) || !admit(bytes)) return;
  draft_rows_.emplace(key, std::move(rows));
}

const std::vector<std::vector<bf16>>* LayerMemo::find_draft_rows(const Digest128& key) const {
  if (!frozen_) return nullptr;
  auto it = draft_rows_.find(key);
  return it == draft_rows_.end() ? nullptr : &it->second;
}

Digest128 head_weights_digest(const WeightStore& store) {
  KeyHasher h;
  h.tag("head-weights");
  for (const char* name : {"output_attn_res_norm.weight", "output_attn_res_proj.weight",
                           "norm.weight", "lm_head.weight"})
    h.tensor(store.find(name));
  return h.digest();
}

Result<HeadOutput> run_head_reusing(const KernelContext& ctx, const ModelConfig& config,
                                    ResidualState& state, const WeightStore& store,
                                    const Digest128& weights_digest, const MemoUse& memo,
                                    ReuseStats* stats) {
  const bool reading = memo.read != nullptr && memo.mode != ReuseMode::kOff;
  const bool filling = memo.fill != nullptr;
  if (!reading && !filling) return run_head(ctx, config, state, store);
  // The head reads P and D only through their fold, like a layer (see the header).
  const Tensor folded = folded_hidden(state);
  KeyHasher h;
  h.tag("splitcheck.head.v1");
  h.config(config);
  h.digest(weights_digest);
  h.u64(ctx.trace != nullptr);
  h.u64(state.has_delta);
  h.tensor(&folded);
  h.tensor(&state.bank);
  const Digest128 key = h.digest();
  const HeadOutcome* hit = reading ? memo.read->find_head(key) : nullptr;
  if (hit != nullptr && memo.mode == ReuseMode::kOn) {
    HeadOutput out{hit->head.output.clone(), hit->head.logits.clone(),
                   hit->head.next_tokens.clone()};
    state.prefix = hit->prefix.clone();
    if (ctx.trace != nullptr) {
      for (DispatchEvent e : hit->events) {
        e.forward = ctx.forward;
        e.stage = ctx.stage;
        ctx.trace->events.push_back(e);
      }
    }
    if (stats != nullptr) ++stats->head_hits;
    return out;
  }
  const size_t events_before = ctx.trace != nullptr ? ctx.trace->events.size() : 0;
  HeadOutput out = run_head(ctx, config, state, store);
  std::span<const DispatchEvent> events;
  if (ctx.trace != nullptr)
    events = std::span<const DispatchEvent>(ctx.trace->events).subspan(events_before);
  if (hit != nullptr) {
    std::string diff;
    if (!hit->head.output.bit_equal(out.output))
      diff = "the output read o";
    else if (!hit->head.logits.bit_equal(out.logits))
      diff = "the logits";
    else if (!hit->head.next_tokens.bit_equal(out.next_tokens))
      diff = "the next tokens";
    else if (!hit->prefix.bit_equal(state.prefix))
      diff = "the prefix the head leaves";
    else if (hit->events.size() != events.size())
      diff = "the number of dispatch events";
    for (size_t i = 0; diff.empty() && i < events.size(); ++i) {
      const DispatchEvent& a = hit->events[i];
      const DispatchEvent& b = events[i];
      if (a.layer != b.layer || a.site != b.site || a.kernel != b.kernel || a.aux != b.aux)
        diff = fmt::format("dispatch event {}", i);
    }
    if (!diff.empty())
      return internal_error(fmt::format(
          "head reuse would change forward {} (stage {}): {} differs from what the head "
          "computed, so the memo's key misses an input",
          ctx.forward, ctx.stage, diff));
    if (stats != nullptr) ++stats->head_verified;
  }
  if (filling) {
    HeadOutcome o;
    o.head = HeadOutput{out.output.clone(), out.logits.clone(), out.next_tokens.clone()};
    o.prefix = state.prefix.clone();
    for (DispatchEvent e : events) {
      e.forward = 0;
      e.stage = 0;
      o.events.push_back(e);
    }
    o.bytes = o.head.output.nbytes() + o.head.logits.nbytes() + o.head.next_tokens.nbytes() +
              o.prefix.nbytes() + o.events.size() * sizeof(DispatchEvent);
    memo.fill->insert_head(key, std::move(o));
  }
  return out;
}

ResidualState clone_state(const ResidualState& s) {
  ResidualState out;
  out.prefix = s.prefix.clone();
  out.has_delta = s.has_delta;
  if (s.has_delta) out.delta = s.delta.clone();
  out.bank = s.bank.clone();
  return out;
}

Status run_layer_reusing(const KernelContext& ctx, const ModelConfig& config, int l,
                         const LayerWeights& w, const Digest128& weights_digest,
                         ResidualState& state, LayerCache& cache, const LayerRecording& rec,
                         const MemoUse& memo, ReuseStats* stats) {
  const bool reading = memo.read != nullptr && memo.mode != ReuseMode::kOff;
  const bool filling = memo.fill != nullptr;
  // What the call records is part of its outcome: the level when it records layers, and
  // whether it has a trace at all.
  const DumpLevel level = rec.wants_layers() ? rec.level : DumpLevel::kSummary;
  Digest128 key;
  if (reading || filling) {
    const LayerKeyFn key_fn = filling ? memo.fill->key() : memo.read->key();
    key = key_fn(config, l, weights_digest, state, cache, level, ctx.trace != nullptr);
  }
  const LayerOutcome* hit = reading ? memo.read->find(key) : nullptr;

  if (hit != nullptr && memo.mode == ReuseMode::kOn) {
    state = clone_state(hit->state);
    cache = hit->cache;
    if (ctx.trace != nullptr) {
      for (DispatchEvent e : hit->events) {
        e.forward = ctx.forward;
        e.stage = ctx.stage;
        ctx.trace->events.push_back(e);
      }
    }
    if (rec.wants_layers())
      // The recorded tensors are outputs nothing computes with: the memo's immutable bytes
      // are shared, not copied (the comparator still reads every byte of them).
      for (const RecordEntry& e : hit->entries)
        rec.record->add(rec.forward_path + e.path, e.tensor);
    if (stats != nullptr) ++stats->hits;
    return Status::ok();
  }

  const size_t events_before = ctx.trace != nullptr ? ctx.trace->events.size() : 0;
  const size_t entries_before = rec.wants_layers() ? rec.record->entries().size() : 0;
  run_layer(ctx, config, l, w, state, cache, rec);
  std::span<const DispatchEvent> events;
  if (ctx.trace != nullptr)
    events = std::span<const DispatchEvent>(ctx.trace->events).subspan(events_before);
  std::span<const RecordEntry> entries;
  if (rec.wants_layers())
    entries = std::span<const RecordEntry>(rec.record->entries()).subspan(entries_before);

  if (hit != nullptr) {
    const std::string diff =
        first_difference(*hit, state, cache, events, entries, rec.forward_path);
    if (!diff.empty())
      return internal_error(fmt::format(
          "layer reuse would change forward {} layer {} (stage {}): {} differs from what the "
          "layer computed, so the memo's key misses an input",
          ctx.forward, l, ctx.stage, diff));
    if (stats != nullptr) ++stats->verified;
  } else if (stats != nullptr) {
    ++(reading ? stats->misses : stats->computed);
  }

  if (filling) {
    LayerOutcome o;
    o.state = clone_state(state);
    o.cache = cache;
    for (DispatchEvent e : events) {
      e.forward = 0;
      e.stage = 0;
      o.events.push_back(e);
    }
    for (const RecordEntry& e : entries)
      o.entries.push_back(RecordEntry{e.path.substr(rec.forward_path.size()), e.tensor.clone()});
    o.bytes = state_bytes(o.state) + cache_bytes(o.cache) + o.events.size() * sizeof(DispatchEvent);
    for (const RecordEntry& e : o.entries) o.bytes += e.tensor.nbytes() + e.path.size();
    memo.fill->insert(key, std::move(o));
  }
  return Status::ok();
}

}  // namespace splitcheck
