// StateLog: what a PP=1 run did and computed before every layer boundary, kept so that
// the first stage of a partitioned run can start from it instead of recomputing it.
//
// The first stage of a partition with its first cut at b runs the embedding and layers
// [0, b): the same code (run_layer, read_tap, embed_state) over the same weights as PP=1.
// Its caches, and so its outputs, are a function of the sequence of engine operations
// (reset, save, restore, forward with its ids and positions) it has seen. While that
// sequence equals PP=1's operation for operation, its residual state after layer b-1,
// the dispatch events and per-layer tensors it records, and the taps it reads below b
// are PP=1's, bit for bit. The log holds exactly those, per forward and per layer.
//
// ReferenceEngine::set_state_log fills it; harness/prefix_reuse.h consumes it.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "reference/engine.h"

namespace splitcheck {

enum class EngineOp : uint8_t { kReset, kSave, kRestore, kForward };
const char* engine_op_name(EngineOp op);

// One PP=1 forward, with a mark after each layer l (l < L): the residual state after
// layer l, and how many dispatch events and per-layer record entries it had by then
// (before the read of tap l+1).
struct LoggedForward {
  ForwardRequest request;
  std::vector<ResidualState> state_after;    // [l], deep copies
  std::vector<size_t> events_after;          // [l]
  std::vector<size_t> entries_after;         // [l], counts into layer_entries
  std::vector<DispatchEvent> events;         // the forward's whole trace
  std::vector<RecordEntry> layer_entries;    // forward/<i>/layers/... in record order
  std::vector<std::pair<int, Tensor>> taps;  // every tap, ascending id
};

// One engine operation; forwards index into StateLog::forwards().
struct LoggedOp {
  EngineOp op = EngineOp::kReset;
  int32_t forward = -1;
};

class StateLog {
 public:
  // `max_state_bytes` bounds the memory of the kept states: once the states reach it, the
  // log ends (it stops recording operations), and a stage that follows it leaves it there
  // as at any operation PP=1 did not make. 0 means no bound.
  explicit StateLog(int last_layer_kept, size_t max_state_bytes = 0)
      : last_layer_kept_(last_layer_kept), max_state_bytes_(max_state_bytes) {}

  // Layers whose state is kept: 0 .. last_layer_kept (a first stage ends at most at L-1).
  int last_layer_kept() const { return last_layer_kept_; }
  // What the logging engine captured and recorded: a stage may only follow a log made
  // with its own capture ids and dump level.
  const std::vector<int>& capture_ids() const { return capture_ids_; }
  DumpLevel level() const { return level_; }
  void set_origin(std::vector<int> capture_ids, DumpLevel level) {
    capture_ids_ = std::move(capture_ids);
    level_ = level;
  }
  const std::vector<LoggedOp>& ops() const { return ops_; }
  const LoggedForward& forward(const LoggedOp& op) const { return forwards_.at(op.forward); }
  size_t forward_count() const { return forwards_.size(); }
  // Bytes held by the kept states (what reuse costs in memory).
  size_t state_bytes() const { return state_bytes_; }
  // True when the memory bound ended the log before the run did.
  bool ended_early() const { return ended_; }

  // Appended by the engine as it runs; nothing is appended once the log has ended.
  void add_control(EngineOp op);
  // The forward's entry, or nullptr when the log has ended.
  LoggedForward* begin_forward(const ForwardRequest& request);
  void keep_state(LoggedForward& forward, const ResidualState& state);

 private:
  int last_layer_kept_ = 0;
  size_t max_state_bytes_ = 0;
  size_t state_bytes_ = 0;
  bool ended_ = false;
  std::vector<int> capture_ids_;
  DumpLevel level_ = DumpLevel::kLayer;
  std::vector<LoggedOp> ops_;
  std::vector<LoggedForward> forwards_;
};

// True when two requests are the same operation: ids, kind, positions and index.
bool same_request(const ForwardRequest& a, const ForwardRequest& b);

// A deep copy of a residual state.
ResidualState clone_state(const ResidualState& state);

}  // namespace splitcheck
