#include "reference/batch.h"

#include <set>
#include <stdexcept>

#include "kernels/tensor_copy.h"
#include "reference/engine.h"
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
  st.snapshot.take(config_, begin_, st.caches);
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
  if (st.snapshot.restore(config_, begin_, st.caches)) st.positions = st.snapshot_positions;
}

ResidualState BatchRows::segment(size_t i) const {
  const int64_t b = begin.at(i), e = begin.at(i + 1);
  ResidualState st;
  st.prefix = all.prefix.rows(b, e);
  st.has_delta = all.has_delta;
  if (all.has_delta) st.delta = all.delta.rows(b, e);
  st.bank = all.bank.rows(b, e);
  return st;
}

namespace {

// The parts' tensors `field` appended along the first axis.
Tensor concat_field(const std::vector<ResidualState>& parts, Tensor ResidualState::*field) {
  const Tensor& first = parts.front().*field;
  Shape shape = first.shape();
  shape[0] = 0;
  for (const ResidualState& p : parts) {
    const Tensor& t = p.*field;
    Shape rest = t.shape();
    rest[0] = 0;
    if (rest != shape || t.dtype() != first.dtype() || t.device() != first.device())
      throw std::invalid_argument("concat_rows: segment states of shapes " +
                                  shape_string(first.shape()) + " and " + shape_string(t.shape()) +
                                  " (or dtypes, devices) differ");
  }
  for (const ResidualState& p : parts) shape[0] += (p.*field).dim(0);
  Tensor out = Tensor::for_overwrite(first.dtype(), shape, first.device());
  size_t at = 0;
  for (const ResidualState& p : parts) {
    const Tensor& t = p.*field;
    if (t.nbytes() > 0) copy_tensor_runs(out, at, t.nbytes(), t, 0, t.nbytes(), t.nbytes(), 1);
    at += t.nbytes();
  }
  return out;
}

// Whether one call can stand for every segment's: the same stage and variant override.
bool same_context(const std::vector<KernelContext>& ctxs) {
  for (const KernelContext& c : ctxs)
    if (c.override_variant != ctxs.front().override_variant || c.stage != ctxs.front().stage)
      return false;
  return true;
}

// attn_res at `site` of layer l over every segment's rows: once, when each row then gets
// the bits its segment's own call gives it, else once per segment on views of its rows.
void attn_res_rows(const std::vector<KernelContext>& ctxs, int l, Site site, const BatchRows& rows,
                   const AttnResArgs& args) {
  const bool once = one_call_for_all(ctxs, rows, args.nb);
  if (once) {
    once_for_all(ctxs, [&](const KernelContext& ctx) {
      AttnResArgs a = args;
      attn_res(ctx.at(l, site), a);
    });
    return;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t b = rows.begin[i], e = rows.begin[i + 1];
    Tensor prefix = args.prefix->rows(b, e), bank = args.bank->rows(b, e),
           out = args.out->rows(b, e);
    Tensor delta = args.delta != nullptr ? args.delta->rows(b, e) : Tensor();
    AttnResArgs a = args;
    a.prefix = &prefix;
    a.delta = args.delta != nullptr ? &delta : nullptr;
    a.bank = &bank;
    a.out = &out;
    attn_res(ctxs[i].at(l, site), a);
  }
}

// A tensor of t's dtype, shape and device for kernels that write all of its rows.
Tensor output_like(const Tensor& t) {
  return Tensor::for_overwrite(t.dtype(), t.shape(), t.device());
}

}  // namespace

bool one_call_for_all(const std::vector<KernelContext>& ctxs, const BatchRows& rows, int nb) {
  if (!same_context(ctxs)) return false;
  const int all = attn_res_fallback_block_l(rows.begin.back(), nb);
  for (size_t i = 0; i < rows.size(); ++i)
    if (attn_res_fallback_block_l(rows.begin[i + 1] - rows.begin[i], nb) != all) return false;
  return true;
}

BatchRows concat_rows(const std::vector<ResidualState>& parts) {
  BatchRows rows;
  rows.begin.push_back(0);
  for (const ResidualState& p : parts) rows.begin.push_back(rows.begin.back() + p.prefix.dim(0));
  if (parts.size() == 1) {
    rows.all = parts.front();
    return rows;
  }
  if (parts.empty()) return rows;
  for (const ResidualState& p : parts)
    if (p.has_delta != parts.front().has_delta)
      throw std::invalid_argument("concat_rows: segment states differ in holding a delta");
  rows.all.prefix = concat_field(parts, &ResidualState::prefix);
  rows.all.has_delta = parts.front().has_delta;
  if (rows.all.has_delta) rows.all.delta = concat_field(parts, &ResidualState::delta);
  rows.all.bank = concat_field(parts, &ResidualState::bank);
  return rows;
}

BatchRows embed_rows(const std::vector<KernelContext>& ctxs, const ModelConfig& c,
                     const Tensor& table, const std::vector<Segment>& segments) {
  if (segments.size() <= 1 || !same_context(ctxs)) {
    std::vector<ResidualState> states;
    for (size_t i = 0; i < segments.size(); ++i)
      states.push_back(embed_state(ctxs[i], c, table, ids_tensor(segments[i].ids)));
    return concat_rows(states);
  }
  BatchRows rows;
  rows.begin.push_back(0);
  std::vector<int32_t> all;
  for (const Segment& seg : segments) {
    all.insert(all.end(), seg.ids.begin(), seg.ids.end());
    rows.begin.push_back(static_cast<int64_t>(all.size()));
  }
  once_for_all(ctxs, [&](const KernelContext& ctx) {
    rows.all = embed_state(ctx, c, table, ids_tensor(all));
  });
  return rows;
}

void run_layer_batch(const std::vector<KernelContext>& ctxs, const ModelConfig& c, int l,
                     const LayerWeights& w, BatchRows& rows, const std::vector<LayerCache*>& caches,
                     const std::vector<LayerRecording>& recs) {
  const size_t n = rows.size();
  if (n == 0) return;
  ResidualState& st = rows.all;
  const std::vector<int> native = native_sizes(c);
  auto record_rows = [&](const char* name, const Tensor& t) {
    for (size_t i = 0; i < n; ++i)
      record_layer(recs[i], l, name, t.rows(rows.begin[i], rows.begin[i + 1]));
  };

  // 1. x = attn_res(P, D, bank, ...) at site pre_attn, over every segment's rows.
  Tensor x = output_like(st.prefix);
  attn_res_rows(ctxs, l, Site::kPreAttn, rows, pre_attn_args(c, l, w, st, native, &x));
  record_rows("pre_attn", x);

  // 2. a = attention_l(x), each segment on its rows and its own cache. On a device, one
  // segmented call runs every segment at once (its products once over all rows, one
  // attention or recurrence launch). Otherwise (the CPU, or segments that share a cache,
  // as batch.stale_microbatch_state makes them, or whose contexts differ) a call per
  // segment: at once on the calling thread and helper threads when no two segments share
  // a cache, else one after another. On a device each helper queues on its own stream: a
  // segment after the caller's work so far (step 1), the caller's step 4 after every
  // segment, through stream marks (kernels/tensor.h), so no host waits.
  Tensor a = output_like(st.prefix);
  std::set<const void*> distinct(caches.begin(), caches.end());
  const bool own_caches = distinct.size() == n;
  if (n > 1 && own_caches && st.prefix.device() != Device::kCpu && same_context(ctxs)) {
    once_for_all(ctxs, [&](const KernelContext& ctx) {
      run_attention_segments(ctx, c, l, w, x, rows.begin, caches, a);
    });
  } else {
    const bool parallel = n > 1 && own_caches;
    const bool marks = parallel && st.prefix.device() != Device::kCpu;
    const DeviceWorkMark before = marks ? mark_thread_device_work() : DeviceWorkMark{};
    std::vector<DeviceWorkMark> after(n);
    run_segment_tasks(n, parallel, [&](size_t i) {
      queue_after_device_work(before);
      const int64_t b = rows.begin[i], e = rows.begin[i + 1];
      Tensor a_rows = a.rows(b, e);
      run_attention(ctxs[i], c, l, w, x.rows(b, e), *caches[i], a_rows);
      if (marks) after[i] = mark_thread_device_work();
    });
    for (const DeviceWorkMark& m : after) queue_after_device_work(m);
  }
  record_rows("attn_out", a);

  // 3. A block-write layer starts a new block: P = a, no delta. Otherwise D = a.
  take_attention(c, l, st, a);

  // 4. y = attn_res(P, D, bank, ...) at site pre_mlp, over every segment's rows.
  Tensor y = output_like(st.prefix);
  attn_res_rows(ctxs, l, Site::kPreMlp, rows, pre_mlp_args(c, l, w, st, native, &y));
  record_rows("pre_mlp", y);

  // 5. D = mlp_l(y), once over every segment's rows (the MLP is row-wise).
  Tensor m;
  once_for_all(ctxs, [&](const KernelContext& ctx) { m = run_layer_mlp(ctx, c, l, w, y); });
  record_rows("mlp_out", m);
  record_rows("prefix", st.prefix);
  st.delta = std::move(m);
  st.has_delta = true;
}


std::vector<Tensor> read_tap_rows(
    const std::vector<KernelContext>& ctxs, const ModelConfig& c, int k, const BatchRows& rows,
    const std::function<Tensor(const KernelContext&, const ResidualState&)>& read,
    Tensor* all_rows) {
  std::vector<Tensor> taps;
  if (rows.size() > 1 && one_call_for_all(ctxs, rows, tap_blocks(c, k))) {
    Tensor all;
    once_for_all(ctxs, [&](const KernelContext& ctx) { all = read(ctx, rows.all); });
    for (size_t i = 0; i < rows.size(); ++i)
      taps.push_back(all.rows(rows.begin[i], rows.begin[i + 1]));
    if (all_rows != nullptr) *all_rows = all;
    return taps;
  }
  for (size_t i = 0; i < rows.size(); ++i) taps.push_back(read(ctxs[i], rows.segment(i)));
  return taps;
}

std::vector<HeadOutput> run_head_rows(const std::vector<KernelContext>& ctxs,
                                      const ModelConfig& c, BatchRows& rows,
                                      const WeightStore& store) {
  std::vector<HeadOutput> heads;
  if (rows.size() > 1 && one_call_for_all(ctxs, rows, c.num_blocks())) {
    HeadOutput all;
    once_for_all(ctxs, [&](const KernelContext& ctx) { all = run_head(ctx, c, rows.all, store); });
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t b = rows.begin[i], e = rows.begin[i + 1];
      heads.push_back(HeadOutput{all.output.rows(b, e), all.logits.rows(b, e),
                                 all.next_tokens.rows(b, e)});
    }
    return heads;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    ResidualState st = rows.segment(i);
    heads.push_back(run_head(ctxs[i], c, st, store));
  }
  return heads;
}

}  // namespace splitcheck
