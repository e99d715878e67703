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

namespace {

// A streaming XXH3-128 over typed pieces; every variable-length piece is preceded by its
// length, so different splits of the same bytes never collide by construction.
class KeyHasher {
 public:
  KeyHasher() : state_(XXH3_createState(), &XXH3_freeState) { XXH3_128bits_reset(state_.get()); }
  void bytes(const void* p, size_t n) {
    u64(n);
    if (n > 0) XXH3_128bits_update(state_.get(), p, n);
  }
  void u64(uint64_t v) { XXH3_128bits_update(state_.get(), &v, sizeof v); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void tag(const char* s) { bytes(s, std::strlen(s)); }
  void tensor(const Tensor* t) {
    if (t == nullptr || t->empty()) {
      i64(-1);
      return;
    }
    i64(static_cast<int64_t>(t->dtype()));
    i64(static_cast<int64_t>(t->shape().size()));
    for (int64_t d : t->shape()) i64(d);
    bytes(t->bytes(), t->nbytes());
  }
  Digest128 digest() const {
    const XXH128_hash_t h = XXH3_128bits_digest(state_.get());
    return Digest128{h.high64, h.low64};
  }

 private:
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state_;
};

void hash_swiglu(KeyHasher& h, const SwiGluWeights& s) {
  h.tensor(s.gate);
  h.tensor(s.up);
  h.tensor(s.down);
}

// The fields of the config that any layer reads, with the float's bits.
void hash_config(KeyHasher& h, const ModelConfig& c) {
  h.tag("config");
  for (int v :
       {c.num_hidden_layers, c.attn_res_block_size, c.hidden_size, c.num_attention_heads,
        c.head_dim, c.vocab_size, c.n_routed_experts, c.num_experts_per_tok, c.n_shared_experts,
        c.moe_intermediate_size, c.intermediate_size, c.first_k_dense_replace, c.kv_lora_rank})
    h.i64(v);
  uint32_t eps_bits = 0;
  std::memcpy(&eps_bits, &c.rms_norm_eps, sizeof eps_bits);
  h.u64(eps_bits);
  const std::vector<int> native = native_sizes(c);
  h.i64(static_cast<int64_t>(native.size()));
  for (int n : native) h.i64(n);
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
  hash_config(h, config);
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

void LayerMemo::insert(const Digest128& key, LayerOutcome outcome) {
  if (frozen_ || map_.contains(key)) return;
  if (max_bytes_ != 0 && bytes_ + outcome.bytes > max_bytes_) {
    ++dropped_;
    return;
  }
  bytes_ += outcome.bytes;
  map_.emplace(key, std::move(outcome));
}

const LayerOutcome* LayerMemo::find(const Digest128& key) const {
  if (!frozen_) return nullptr;
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
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
      for (const RecordEntry& e : hit->entries)
        rec.record->add(rec.forward_path + e.path, e.tensor.clone());
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
