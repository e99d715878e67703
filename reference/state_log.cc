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

LoggedForward& StateLog::begin_forward(const ForwardRequest& request) {
  ops_.push_back(LoggedOp{EngineOp::kForward, static_cast<int32_t>(forwards_.size())});
  forwards_.emplace_back();
  forwards_.back().request = request;
  return forwards_.back();
}

size_t StateLog::state_bytes() const {
  size_t n = 0;
  for (const LoggedForward& f : forwards_) {
    for (const ResidualState& s : f.state_after)
      n += s.prefix.nbytes() + (s.has_delta ? s.delta.nbytes() : 0) + s.bank.nbytes();
  }
  return n;
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
