// Ragged batches (SPEC 3.4): one forward carries several requests' tokens, concatenated.
//
// A segment is one request's consecutive tokens in a forward (a prefill chunk, a decode
// token, a verify block or a replay). Every segment has its own forward index, so a
// dump records it under "forward/<index>/" exactly as the same forward of the request
// served alone would be recorded, plus the attributes `request` and `step`. The segments'
// residual states are concatenated (BatchRows), so the row-wise steps of a layer
// (AttnRes, the MLP, the taps and the head) run once on every segment's rows; attention
// runs per segment with its own cache (on a device in one segmented call). Every CPU
// kernel is row-independent, so a request's results in a batch equal the same request
// served alone, bit for bit.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "reference/cache_snapshot.h"
#include "reference/config.h"
#include "reference/layer.h"

namespace splitcheck {

enum class ForwardKind;

// One request's tokens in a batched forward.
struct Segment {
  int32_t request = 0;
  std::vector<int32_t> ids;
  int64_t first_position = 0;
  ForwardKind kind{};
  int32_t index = 0;  // forward index, global over the run
};

// What the last stage's results ask every holder of a request's state to do, applied at
// the start of the next batch that carries it: roll back to the snapshot taken before
// the request's last verify (a partly rejected verify is followed by a replay), or free
// the state of a finished request.
struct StateUpdate {
  enum class Kind { kRollback, kRelease };
  int32_t request = 0;
  Kind kind = Kind::kRollback;
};

// One step of the serving loop: its segments (disjoint requests) and the state updates
// to apply before running them.
struct BatchRequest {
  int32_t step = 0;
  std::vector<Segment> segments;
  std::vector<StateUpdate> updates;
};

// One request's caches over a range of layers, the positions they hold, and the
// snapshot taken before its last verify block with the positions then.
struct RequestState {
  std::vector<LayerCache> caches;
  int64_t positions = 0;
  CacheSnapshot snapshot;
  int64_t snapshot_positions = 0;
};

// Per-request state of an engine or a stage over layers [begin, end).
class RequestStateTable {
 public:
  RequestStateTable() = default;
  RequestStateTable(const ModelConfig& config, int begin, int end)
      : config_(config), begin_(begin), end_(end) {}
  // The request's state, created empty on first use.
  RequestState& at(int32_t request);
  bool contains(int32_t request) const { return states_.count(request) > 0; }
  // Snapshots the request's caches (before a verify block).
  void snapshot(int32_t request);
  // Applies one update (rollback to the snapshot, or release). A rollback of a request
  // without a snapshot changes nothing.
  void apply(const StateUpdate& update);
  void clear() { states_.clear(); }

 private:
  ModelConfig config_;
  int begin_ = 0, end_ = 0;
  std::map<int32_t, RequestState> states_;
};

// A ragged batch's residual state: every segment's rows of P, D and the bank, concatenated
// in segment order.
struct BatchRows {
  ResidualState all;
  std::vector<int64_t> begin;  // segment i's rows are [begin[i], begin[i + 1])
  size_t size() const { return begin.empty() ? 0 : begin.size() - 1; }
  // Segment i's state: views of its rows (until a layer replaces P).
  ResidualState segment(size_t i) const;
};
// The parts' rows concatenated, copied where they are (one part is taken as it is). Throws
// std::invalid_argument when the parts differ in width, bank rows, device or delta.
BatchRows concat_rows(const std::vector<ResidualState>& parts);

// Every segment's embedding (embed_state) over its token ids, concatenated: one gather
// over all the segments' ids where their contexts agree (its dispatch event recorded in
// each segment's trace, as once_for_all does), else one a segment and concat_rows. A
// gather's row has the same bits either way.
BatchRows embed_rows(const std::vector<KernelContext>& ctxs, const ModelConfig& config,
                     const Tensor& table, const std::vector<Segment>& segments);

// Whether one call of an AttnRes read over `nb` blocks (or any row-wise op beside it)
// over every segment's rows gives each row the bits its segment's own call gives: the
// segments' dispatch contexts agree (stage, variant override), and the fallback's BLOCK_L
// rule of SPEC 2.2 picks the same BLOCK_L for all the rows as for each segment's.
bool one_call_for_all(const std::vector<KernelContext>& ctxs, const BatchRows& rows, int nb);

// Runs `op` once on a context standing for every segment's (the first's, recording into a
// trace of its own), then records the events it dispatched in each segment's trace as
// that segment's own.
template <typename Op>
void once_for_all(const std::vector<KernelContext>& ctxs, const Op& op) {
  if (ctxs.size() == 1) {
    op(ctxs.front());
    return;
  }
  DispatchTrace trace;
  KernelContext ctx = ctxs.front();
  ctx.trace = &trace;
  op(ctx);
  for (const KernelContext& c : ctxs) {
    if (c.trace == nullptr) continue;
    for (DispatchEvent e : trace.events) {
      e.forward = c.forward;
      e.stage = c.stage;
      c.trace->events.push_back(e);
    }
  }
}

// Layer l (SPEC 2.3) over a ragged batch: steps 1 and 4 (AttnRes) once over every
// segment's rows when one_call_for_all, otherwise per segment; step 2 each segment with
// its own cache: on a device one segmented call when the caches are distinct and the
// contexts agree, otherwise a call per segment on views of its rows (at once,
// reference/segment_tasks.h, unless two share a cache; on a device each on its thread's
// stream, ordered by stream marks); step 5 (the MLP) once over all rows. A call over all
// rows records its dispatch event in every segment's trace. Each segment's result and
// record equal run_layer's on that segment alone (on the CPU; on a device a product's
// bits may depend on its row count, kernels/batch.h).
void run_layer_batch(const std::vector<KernelContext>& ctxs, const ModelConfig& config, int l,
                     const LayerWeights& w, BatchRows& rows, const std::vector<LayerCache*>& caches,
                     const std::vector<LayerRecording>& recs);

// The tap k read from every segment's rows (reference/layer.h read_tap's weights), by
// `read` on a context and a state: once over all rows when one_call_for_all, else per
// segment. Element i is segment i's tap (views of one tensor's rows, or its own); `all`,
// where given, is set to that one tensor when there is one (else left empty).
std::vector<Tensor> read_tap_rows(
    const std::vector<KernelContext>& ctxs, const ModelConfig& config, int k,
    const BatchRows& rows,
    const std::function<Tensor(const KernelContext&, const ResidualState&)>& read,
    Tensor* all = nullptr);

// The output head (run_head) of every segment: once over all rows when one_call_for_all
// (one wait for the next tokens), else per segment. Element i is segment i's head.
std::vector<HeadOutput> run_head_rows(const std::vector<KernelContext>& ctxs,
                                      const ModelConfig& config, BatchRows& rows,
                                      const WeightStore& store);

}  // namespace splitcheck
