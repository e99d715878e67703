// A content-addressed memo of layer computations, filled by the PP=1 run and read by
// every stage of every split point of a sweep.
//
// run_layer is a pure function of what it reads: the model config, layer l's weights,
// the residual state entering the layer (prefix P, pending delta D, bank), the layer's
// cache (MLA latents or KDA state) and the recording level. A LayerKey is a 128-bit
// XXH3 digest of all of it, *by content*: the weights as the caller holds them (so a
// stage that loaded the wrong tensor for a layer gets another key, and computes), the
// state and the cache as they are at that call. Two calls with equal keys compute the
// same outcome bit for bit: the state and cache after the layer, its dispatch events and
// the per-layer tensors it records.
//
// The state enters the key as the layer reads it. SPEC 2.2 step 1 folds a pending delta
// into the prefix, p = bf16(P + D), before anything reads P or D, and nothing reads the
// old D afterwards; whether D is given decides the dispatch (native needs it). So the key
// holds bf16(P + D) and the "D given" flag, not P and D apart: a stage that receives
// hidden = bf16(P + D) with an explicit zero delta (SPEC 2.7) has PP=1's key at that
// layer, and one that drops the delta (handoff.no_zero_delta) or sends another hidden
// does not. Verify mode computes every such call and checks the claim. A stage whose inputs equal
// what PP=1 had at that layer (every layer of a first stage, and every layer after the first of a
// later stage once the handoff rebuilt PP=1's state) takes a deep copy of PP=1's outcome instead of
// computing it; any other input misses and is computed. Nothing is ever taken on the
// strength of "the same code ran the same operations": only on equal inputs.
//
// Modes: off (compute everything), on (hits are taken), verify (compute everything and,
// where the memo holds the key, require the same bits: a difference means a key missed
// an input, and is an internal error naming the layer and what differed).
//
//   LayerMemo memo(1 << 30);
//   reference_engine->set_memo(&memo, ReuseMode::kOn);      // PP=1 fills
//   stage->set_memo(&memo, ReuseMode::kOn);                  // stages look up
#pragma once

#include <xxhash.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/status.h"
#include "reference/layer.h"

namespace splitcheck {

enum class ReuseMode { kOff, kOn, kVerify };
const char* reuse_mode_name(ReuseMode mode);
std::optional<ReuseMode> parse_reuse_mode(const std::string& name);

// A 128-bit content digest.
struct Digest128 {
  uint64_t hi = 0, lo = 0;
  bool operator==(const Digest128&) const = default;
};

// A streaming XXH3-128 over typed pieces; every variable-length piece is preceded by its
// length, so different splits of the same bytes never collide by construction. The
// memo's keys are built with it; a drafter builds its own with it (reference/dspark.h).
class ContentHasher {
 public:
  ContentHasher();
  void bytes(const void* p, size_t n);
  void u64(uint64_t v) { XXH3_128bits_update(state_.get(), &v, sizeof v); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void tag(const char* s);
  void digest(const Digest128& d) {
    u64(d.hi);
    u64(d.lo);
  }
  // dtype, shape and bytes; an absent or empty tensor hashes as -1.
  void tensor(const Tensor* t);
  // The fields of the config that any layer, head or drafter reads.
  void config(const ModelConfig& c);
  Digest128 digest() const;

 private:
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state_;
};

// The digest of everything layer l reads from its weights: every tensor it binds, in a
// fixed order, with dtype, shape and bytes.
Digest128 layer_weights_digest(const LayerWeights& w);

// The key of one layer call: config, layer index, weights digest, what the call records
// (the level, and whether it has a dispatch trace), the entering state and the layer's
// cache, by content.
Digest128 layer_key(const ModelConfig& config, int l, const Digest128& weights,
                    const ResidualState& state, const LayerCache& cache, DumpLevel level,
                    bool traced);

// The signature of layer_key, so that a test can give a memo a key that misses an input
// and show that verify mode catches it.
using LayerKeyFn = Digest128 (*)(const ModelConfig&, int, const Digest128&, const ResidualState&,
                                 const LayerCache&, DumpLevel, bool);

// What one layer call produced. Events carry forward 0 and stage 0; entries carry paths
// relative to the forward ("layers/3/pre_attn").
struct LayerOutcome {
  ResidualState state;
  LayerCache cache;
  std::vector<DispatchEvent> events;
  std::vector<RecordEntry> entries;
  size_t bytes = 0;
};

// What one call of the output head (run_head) produced: its outputs, the prefix it leaves
// (the head's read folds a pending delta into P), and its dispatch events.
struct HeadOutcome {
  HeadOutput head;
  Tensor prefix;
  std::vector<DispatchEvent> events;
  size_t bytes = 0;
};

// How many layer calls one engine took from the memo, computed, or computed and checked.
struct ReuseStats {
  int64_t hits = 0;      // taken from the memo (mode on)
  int64_t misses = 0;    // computed: the memo had no outcome for these inputs
  int64_t verified = 0;  // computed and found equal to the memo's outcome (mode verify)
  int64_t computed = 0;  // computed with reuse off
  // The output head's calls and a drafter's proposals taken from the memo, and computed
  // and found equal (verify); not part of the layer counts above.
  int64_t head_hits = 0, head_verified = 0, proposal_hits = 0, proposal_verified = 0;
  int64_t draft_rows_hits = 0, draft_rows_verified = 0;
  ReuseStats& operator+=(const ReuseStats& o) {
    hits += o.hits;
    misses += o.misses;
    verified += o.verified;
    computed += o.computed;
    head_hits += o.head_hits;
    head_verified += o.head_verified;
    proposal_hits += o.proposal_hits;
    proposal_verified += o.proposal_verified;
    draft_rows_hits += o.draft_rows_hits;
    draft_rows_verified += o.draft_rows_verified;
    return *this;
  }
};

// The memo. Filled by one engine (single writer), then read concurrently by many: call
// freeze() once filling is done; lookups before that are refused.
class LayerMemo {
 public:
  // `max_bytes` bounds the outcomes kept (0: no bound); past it, insertions are dropped
  // and dropped() counts them.
  explicit LayerMemo(size_t max_bytes, LayerKeyFn key = &layer_key)
      : max_bytes_(max_bytes), key_(key) {}
  LayerMemo(const LayerMemo&) = delete;
  LayerMemo& operator=(const LayerMemo&) = delete;

  // Keeps `outcome` under `key` unless the bound is reached or the key is present.
  void insert(const Digest128& key, LayerOutcome outcome);
  // Ends filling; from now on the memo is read-only and safe to share between threads.
  void freeze() { frozen_ = true; }
  // The outcome of `key`, or nullptr (also before freeze()).
  const LayerOutcome* find(const Digest128& key) const;
  // The same for the output head's calls and a drafter's proposals, under the same bound.
  void insert_head(const Digest128& key, HeadOutcome outcome);
  const HeadOutcome* find_head(const Digest128& key) const;
  void insert_proposal(const Digest128& key, std::vector<int32_t> tokens);
  const std::vector<int32_t>* find_proposal(const Digest128& key) const;
  // A drafter's context rows (one bf16 block per draft cache it appends to).
  void insert_draft_rows(const Digest128& key, std::vector<std::vector<bf16>> rows);
  const std::vector<std::vector<bf16>>* find_draft_rows(const Digest128& key) const;

  // The key function every user of this memo computes keys with.
  LayerKeyFn key() const { return key_; }
  size_t bytes() const { return bytes_; }
  size_t entries() const { return map_.size(); }
  int64_t dropped() const { return dropped_; }
  size_t max_bytes() const { return max_bytes_; }

 private:
  struct KeyHash {
    size_t operator()(const Digest128& d) const { return static_cast<size_t>(d.lo); }
  };
  size_t max_bytes_;
  LayerKeyFn key_;
  size_t bytes_ = 0;
  int64_t dropped_ = 0;
  bool frozen_ = false;
  bool admit(size_t bytes);
  std::unordered_map<Digest128, LayerOutcome, KeyHash> map_;
  std::unordered_map<Digest128, HeadOutcome, KeyHash> heads_;
  std::unordered_map<Digest128, std::vector<int32_t>, KeyHash> proposals_;
  std::unordered_map<Digest128, std::vector<std::vector<bf16>>, KeyHash> draft_rows_;
};

// How an engine uses a memo: fill it (PP=1), or read it in a mode.
struct MemoUse {
  LayerMemo* fill = nullptr;         // PP=1: every computed outcome is inserted
  const LayerMemo* read = nullptr;   // a stage: looked up per `mode`
  ReuseMode mode = ReuseMode::kOff;  // for `read`
};

// run_layer through the memo: computes (and fills) or takes a deep copy of a hit, and
// appends the layer's events to ctx.trace and its tensors to rec (with ctx's forward
// and stage) exactly as computing it would. `weights_digest` must be
// layer_weights_digest(w). In verify mode a computed outcome that differs from the
// memo's is an internal error.
Status run_layer_reusing(const KernelContext& ctx, const ModelConfig& config, int l,
                         const LayerWeights& w, const Digest128& weights_digest,
                         ResidualState& state, LayerCache& cache, const LayerRecording& rec,
                         const MemoUse& memo, ReuseStats* stats);

// The digest of what the output head reads from its weights: output_attn_res_norm,
// output_attn_res_proj, norm and lm_head as `store` holds them.
Digest128 head_weights_digest(const WeightStore& store);

// run_head through the memo, like run_layer_reusing: the key is the config, the head's
// weights digest, the state as the head reads it (bf16(P + D), whether D is given, the
// bank) and whether the call is traced. A hit gives copies of the memo's outputs, sets
// the prefix the head leaves and replays its dispatch events into ctx.trace; verify
// mode computes and requires the same bits. `stats` counts the call (may be null).
Result<HeadOutput> run_head_reusing(const KernelContext& ctx, const ModelConfig& config,
                                    ResidualState& state, const WeightStore& store,
                                    const Digest128& weights_digest, const MemoUse& memo,
                                    ReuseStats* stats);

// A deep copy of a residual state.
ResidualState clone_state(const ResidualState& state);

}  // namespace splitcheck
