#include "reference/batch.h"

#include <set>

#include "kernels/tensor_copy.h"
#include "reference/segment_tasks.h"

namespace splitcheck {

RequestState& RequestStateTable::at(int32_t request) {
  auto it = states_.find(request);
  if (it != states_.end()) return it->second;
  RequestState& st = states_[request];
  for (int l = begin_; l < end_; ++l) st.caches.push_back(empty_layer_cache(config_, l));
  return st;
}

void RequestStateTable::snapshot(int32_t request) {
  RequestState& st = at(request);
  st.snapshot = st.caches;
  st.snapshot_positions = st.positions;
}

void RequestStateTable::apply(const StateUpdate& u) {
  if (u.kind == StateUpdate::Kind::kRelease) {
    states_.erase(u.request);
    return;
  }
  RequestState& st = at(u.request);
  // A rollback of a request that took no snapshot (a stage that indexed its state through
  // another request's slot, as batch.stale_microbatch_state does) keeps its caches as they
  // are: the request then computes from the wrong state and diverges, and the table never
  // holds fewer layer caches than its layer range.
  if (st.snapshot.size() != st.caches.size()) return;
  st.caches = st.snapshot;
  st.positions = st.snapshot_positions;
}

void run_layer_batch(const std::vector<KernelContext>& ctxs, const ModelConfig& c, int l,
                     const LayerWeights& w, const std::vector<ResidualState*>& states,
                     const std::vector<LayerCache*>& caches,
                     const std::vector<LayerRecording>& recs) {
  const size_t n = states.size();
  if (n == 0) return;
  // Steps 1-4 per segment: at once, on the calling thread and helper threads, when no two
  // segments share a state or a cache (batch.stale_microbatch_state indexes two requests'
  // state through one slot; then one after another, as always). On a device each thread
  // queues on its own stream: a helper's segment is queued after the caller's work so far
  // (the last layer's scatter), and the caller's MLP after every helper's segment, through
  // stream marks (kernels/tensor.h), so no host waits.
  bool parallel = n > 1;
  if (parallel) {
    std::set<const void*> distinct;
    for (size_t i = 0; i < n; ++i) {
      distinct.insert(states[i]);
      distinct.insert(caches[i]);
    }
    parallel = distinct.size() == 2 * n;
  }
  const bool marks = parallel && states.front()->prefix.device() != Device::kCpu;
  const DeviceWorkMark before = marks ? mark_thread_device_work() : DeviceWorkMark{};
  std::vector<DeviceWorkMark> after(n);
  std::vector<Tensor> ys(n);
  run_segment_tasks(n, parallel, [&](size_t i) {
    queue_after_device_work(before);
    ys[i] = run_layer_until_mlp(ctxs[i], c, l, w, *states[i], *caches[i], recs[i]);
    if (marks) after[i] = mark_thread_device_work();
  });
  for (const DeviceWorkMark& m : after) queue_after_device_work(m);
  if (n == 1) {  // one segment: its own rows are the MLP's (no gather, no scatter)
    finish_layer(l, *states[0], run_layer_mlp(ctxs[0], c, l, w, ys[0]), recs[0]);
    return;
  }
  int64_t rows = 0;
  for (const Tensor& y : ys) rows += y.dim(0);
  // Step 5 once over the concatenated rows (the MLP is row-wise), gathered and scattered
  // by byte copies where the rows are (the device, on the cuda backend: queued on the
  // stream, kernels/tensor_copy.h).
  const int64_t h = c.hidden_size;
  const Device device = ys.front().device();
  Tensor y_all = Tensor::zeros(DType::kBF16, {rows, h}, device);
  size_t at = 0;
  for (const Tensor& y : ys) {
    copy_tensor_runs(y_all, at, y.nbytes(), y, 0, y.nbytes(), y.nbytes(), 1);
    at += y.nbytes();
  }
  DispatchTrace mlp_trace;
  KernelContext mlp_ctx = ctxs.front();
  mlp_ctx.trace = &mlp_trace;
  const Tensor m_all = run_layer_mlp(mlp_ctx, c, l, w, y_all);
  at = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t t = ys[i].dim(0);
    Tensor m = Tensor::zeros(DType::kBF16, {t, h}, m_all.device());
    copy_tensor_runs(m, 0, m.nbytes(), m_all, at, m.nbytes(), m.nbytes(), 1);
    at += m.nbytes();
    if (ctxs[i].trace != nullptr) {
      for (DispatchEvent e : mlp_trace.events) {
        e.forward = ctxs[i].forward;
        e.stage = ctxs[i].stage;
        ctxs[i].trace->events.push_back(e);
      }
    }
    finish_layer(l, *states[i], std::move(m), recs[i]);
  }
}

}  // namespace splitcheck
