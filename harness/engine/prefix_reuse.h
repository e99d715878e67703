// Reuse of PP=1's stage-0 prefix in the sweep.
//
// Every split point's first stage runs the embedding and layers [0, b) with the same
// code and weights as PP=1 (reference/state_log.h says why its results are then PP=1's
// while its operations are). With reuse on, the first stage takes its residual state
// after layer b-1, its dispatch events, its per-layer tensors and its taps below b from
// PP=1's StateLog instead of recomputing them. What is under test still runs on every
// split point: the boundary tap with the stage's own copies, the tap relay, the payload
// encode and decode, every later stage, the head and the drafter.
//
// The first stage follows the run's operations against PP=1's, one by one. At the first
// operation that differs (other ids, another save/restore, more forwards than PP=1
// made) it leaves the log: it rebuilds its caches by replaying the operations that
// matched through its own layers, and computes everything itself from then on.
//
// Modes: off (compute everything), on (reuse), verify (compute everything and check,
// on every forward that follows the log, that reuse would have given the same bits; a
// difference is an internal error naming what differs).
#pragma once

#include <optional>
#include <span>
#include <string>

#include "harness/verdict/faults.h"
#include "reference/state_log.h"

namespace splitcheck {

enum class ReuseMode { kOff, kOn, kVerify };
const char* reuse_mode_name(ReuseMode mode);
std::optional<ReuseMode> parse_reuse_mode(const std::string& name);

// What the first stage of one split point did with the log.
struct ReuseStats {
  int64_t reused_forwards = 0;    // prefix taken from PP=1
  int64_t verified_forwards = 0;  // computed and found equal to PP=1's prefix (verify)
  int64_t computed_forwards = 0;  // computed without the log (off, or after leaving it)
  int32_t left_at_forward = -1;   // the forward index where the run left PP=1's log
  std::string left_because;       // which operation differed, when it left
  std::string unused_because;     // why the stage did not follow the log at all
};

// The log a partitioned engine's first stage may follow, and how.
struct PrefixReuse {
  const StateLog* log = nullptr;
  ReuseMode mode = ReuseMode::kOff;
  bool enabled() const { return log != nullptr && mode != ReuseMode::kOff; }
};

// Whether reuse may be on for a run with these faults: not when one of them changes
// what a first stage computes before its cut. Empty when it may, else the reason.
std::string reuse_blocked_by(const FaultSet& faults);

// Follows one first stage's operations against the log.
class PrefixFollower {
 public:
  explicit PrefixFollower(PrefixReuse reuse) : reuse_(reuse) {}

  struct Step {
    const LoggedForward* logged = nullptr;  // the PP=1 forward this one equals
    bool left_now = false;  // this operation left the log (rebuild caches before it, mode on)
  };
  // Called with every operation of the stage in order (`request` for forwards).
  Step follow(EngineOp op, const ForwardRequest* request);
  // The operations that matched before the run left the log.
  std::span<const LoggedOp> matched() const;
  const StateLog& log() const { return *reuse_.log; }
  ReuseMode mode() const { return reuse_.mode; }
  ReuseStats& stats() { return stats_; }
  const ReuseStats& stats() const { return stats_; }

 private:
  PrefixReuse reuse_;
  size_t cursor_ = 0;
  bool left_ = false;
  ReuseStats stats_;
};

}  // namespace splitcheck
