// Serving on the reference engine: batched steps (reference/batch.h), run synchronously.
#include <algorithm>

#include "kernels/tensor_copy.h"
#include "reference/engine.h"

namespace splitcheck {

Status Engine::submit(const BatchRequest&, bool) {
  return internal_error("this engine serves one request at a time (no batched steps)");
}

Result<BatchResult> Engine::collect(RunRecord*) {
  return internal_error("this engine serves one request at a time (no batched steps)");
}

void record_segment_attrs(RunRecord* record, const Segment& seg, int32_t step) {
  if (record == nullptr) return;
  const std::string path = forward_path(seg.index);
  const std::string group = path.substr(0, path.size() - 1);
  record->set_attr(group, "request", int64_t{seg.request});
  record->set_attr(group, "step", int64_t{step});
}

ForwardRequest segment_request(const Segment& seg) {
  return ForwardRequest{seg.ids, seg.kind, seg.first_position, seg.index};
}

Status ReferenceEngine::submit(const BatchRequest& batch, bool record) {
  Pending p;
  p.result = forward_batch(batch, record ? &p.record : nullptr);
  pending_.push_back(std::move(p));
  return Status::ok();
}

Result<BatchResult> ReferenceEngine::collect(RunRecord* record) {
  if (pending_.empty()) return internal_error("collect with no step submitted");
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  if (record != nullptr && p.result.is_ok()) record->append(p.record);
  return std::move(p.result);
}

Result<BatchResult> ReferenceEngine::forward_batch(const BatchRequest& batch, RunRecord* record) {
  const ModelConfig& c = config_;
  const int L = c.num_hidden_layers;
  for (const StateUpdate& u : batch.updates) requests_.apply(u);
  const size_t n = batch.segments.size();
  if (n == 0) return BatchResult{batch.step, {}};  // updates only (the last releases)
  for (const Segment& seg : batch.segments) {
    if (seg.ids.empty()) return internal_error("an empty segment");
    for (int32_t id : seg.ids)
      if (id < 0 || id >= c.vocab_size)
        return invalid_input("token id " + std::to_string(id) + " outside the vocabulary");
  }
  auto captured = [&](int k) {
    return std::binary_search(options_.capture_ids.begin(), options_.capture_ids.end(), k);
  };
  std::vector<RunRecord> records(n);
  std::vector<DispatchTrace> traces(n);
  std::vector<KernelContext> ctxs;
  std::vector<LayerRecording> recs;
  std::vector<std::vector<std::pair<int, Tensor>>> taps(n);
  // Every tap over all the segments' rows where each was read once for all of them: the
  // segments' concatenated taps then come from one concat_taps (views of its rows).
  std::vector<std::pair<int, Tensor>> taps_all;
  bool all_once = n > 1;
  for (size_t i = 0; i < n; ++i) {
    const Segment& seg = batch.segments[i];
    if (seg.kind == ForwardKind::kVerify) requests_.snapshot(seg.request);
    RunRecord* r = record != nullptr ? &records[i] : nullptr;
    record_forward_start(r, segment_request(seg));
    record_segment_attrs(r, seg, batch.step);
    ctxs.push_back(KernelContext{&traces[i], seg.index, -1, Site::kEmbed, 0, -1});
    recs.push_back(LayerRecording{r, forward_path(seg.index), options_.level});
  }
  BatchRows rows = embed_rows(ctxs, c, weights_.get("embed_tokens.weight"), batch.segments);
  if (captured(0)) {
    const Tensor tap = clone_queued(rows.all.prefix);
    for (size_t i = 0; i < n; ++i)
      taps[i].emplace_back(0, tap.rows(rows.begin[i], rows.begin[i + 1]));
    taps_all.emplace_back(0, tap);
  }
  for (int l = 0; l < L; ++l) {
    std::vector<LayerCache*> caches;
    for (const Segment& seg : batch.segments)
      caches.push_back(&requests_.at(seg.request).caches[l]);
    run_layer_batch(ctxs, c, l, layers_[l], rows, caches, recs);
    computed_.layers += static_cast<int64_t>(n);
    const int k = l + 1;
    if (!captured(k)) continue;
    const bool last = k == L;
    const Tensor& norm =
        last ? weights_.get("output_attn_res_norm.weight") : *layers_[k].sa_res_norm;
    const Tensor& proj =
        last ? weights_.get("output_attn_res_proj.weight") : *layers_[k].sa_res_proj;
    Tensor all;
    const std::vector<Tensor> read = read_tap_rows(
        ctxs, c, k, rows,
        [&](const KernelContext& ctx, const ResidualState& st) {
          return read_tap(ctx, c, k, st, norm, proj);
        },
        &all);
    for (size_t i = 0; i < n; ++i) taps[i].emplace_back(k, read[i]);
    all_once = all_once && !all.empty();
    taps_all.emplace_back(k, std::move(all));
  }
  const Tensor concatenated =
      all_once && !taps_all.empty()
          ? concat_taps(taps_all, rows.begin.back(), c.hidden_size, taps_device(taps_all))
          : Tensor();
  std::vector<HeadOutput> heads = run_head_rows(ctxs, c, rows, weights_);
  computed_.heads += static_cast<int64_t>(n);
  BatchResult out;
  out.step = batch.step;
  for (size_t i = 0; i < n; ++i) {
    const Segment& seg = batch.segments[i];
    const ResidualState state = rows.segment(i);
    const HeadOutput& head = heads[i];
    RunRecord* r = record != nullptr ? &records[i] : nullptr;
    record_forward_end(r, segment_request(seg), options_.level, head, state, taps[i],
                       traces[i]);
    RequestState& rs = requests_.at(seg.request);
    rs.positions = seg.first_position + static_cast<int64_t>(seg.ids.size());
    if (r != nullptr && options_.level == DumpLevel::kFull) {
      for (int l = 0; l < L; ++l)
        r->add(forward_path(seg.index) + "cache/" + std::to_string(l),
               cache_tensor(c, l, rs.caches[l]));
    }
    if (record != nullptr) record->append(records[i]);
    ForwardResult f;
    f.logits = head.logits;
    f.next_tokens = head.next_tokens;
    f.taps = !concatenated.empty()
                 ? concatenated.rows(rows.begin[i], rows.begin[i + 1])
                 : concat_taps(taps[i], static_cast<int64_t>(seg.ids.size()), c.hidden_size,
                               taps_device(taps[i]));
    out.segments.push_back(std::move(f));
  }
  return out;
}

}  // namespace splitcheck
