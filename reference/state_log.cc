#include "reference/state_log.h"

namespace splitcheck {

const char* engine_op_name(EngineOp op) {
  switch (op) {
    case EngineOp::kReset:
      return "reset";
    case EngineOp::kSave:
      return "save";
    case EngineOp::kRestore:
      return "restore";
    case EngineOp::kForward:
      return "forward";
  }
  return "?";
}

void StateLog::add_control(EngineOp op) {
  if (max_state_bytes_ > 0 && state_bytes_ >= max_state_bytes_) ended_ = true;
  if (!ended_) ops_.push_back(LoggedOp{op, -1});
}

LoggedForward* StateLog::begin_forward(const ForwardRequest& request) {
  if (max_state_bytes_ > 0 && state_bytes_ >= max_state_bytes_) ended_ = true;
  if (ended_) return nullptr;
  ops_.push_back(LoggedOp{EngineOp::kForward, static_cast<int32_t>(forwards_.size())});
  forwards_.emplace_back();
  forwards_.back().request = request;
  return &forwards_.back();
}

void StateLog::keep_state(LoggedForward& forward, const ResidualState& state) {
  forward.state_after.push_back(clone_state(state));
  const ResidualState& s = forward.state_after.back();
  state_bytes_ += s.prefix.nbytes() + (s.has_delta ? s.delta.nbytes() : 0) + s.bank.nbytes();
}

bool same_request(const ForwardRequest& a, const ForwardRequest& b) {
  return a.ids == b.ids && a.kind == b.kind && a.first_position == b.first_position &&
         a.index == b.index;
}

ResidualState clone_state(const ResidualState& s) {
  ResidualState c;
  c.prefix = s.prefix.clone();
  c.has_delta = s.has_delta;
  if (s.has_delta) c.delta = s.delta.clone();
  c.bank = s.bank.clone();
  return c;
}

}  // namespace splitcheck
