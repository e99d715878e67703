#include "harness/engine/prefix_reuse.h"

#include <fmt/format.h>

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

std::string reuse_blocked_by(const FaultSet& faults) {
  for (const std::string& id : faults.ids) {
    const FaultInfo* f = find_fault(id);
    if (f != nullptr && f->alters_first_stage_prefix)
      return fmt::format("fault {} changes what a first stage computes before its cut", id);
  }
  return "";
}

PrefixFollower::Step PrefixFollower::follow(EngineOp op, const ForwardRequest* request) {
  Step step;
  if (left_) {
    if (op == EngineOp::kForward) ++stats_.computed_forwards;
    return step;
  }
  const std::vector<LoggedOp>& ops = reuse_.log->ops();
  std::string differs;
  if (cursor_ >= ops.size() && reuse_.log->ended_early()) {
    differs = fmt::format("{} after PP=1's log ended at its memory bound ({} operations)",
                          engine_op_name(op), ops.size());
  } else if (cursor_ >= ops.size()) {
    differs =
        fmt::format("{} after the last of PP=1's {} operations", engine_op_name(op), ops.size());
  } else if (ops[cursor_].op != op) {
    differs = fmt::format("operation {}: {} here, {} at PP=1", cursor_, engine_op_name(op),
                          engine_op_name(ops[cursor_].op));
  } else if (op == EngineOp::kForward &&
             !same_request(*request, reuse_.log->forward(ops[cursor_]).request)) {
    differs = fmt::format("forward {}: its ids or positions differ from PP=1's", request->index);
  }
  if (!differs.empty()) {
    left_ = true;
    step.left_now = true;
    stats_.left_because = differs;
    stats_.left_at_forward = request != nullptr ? request->index : -1;
    if (op == EngineOp::kForward) ++stats_.computed_forwards;
    return step;
  }
  if (op == EngineOp::kForward) {
    step.logged = &reuse_.log->forward(ops[cursor_]);
    ++(reuse_.mode == ReuseMode::kVerify ? stats_.verified_forwards : stats_.reused_forwards);
  }
  ++cursor_;
  return step;
}

std::span<const LoggedOp> PrefixFollower::matched() const {
  return std::span<const LoggedOp>(reuse_.log->ops()).first(cursor_);
}

}  // namespace splitcheck
