// Serving on one stage: batched steps over the stage's layers, the stage's own table of
// per-request state, and the update path from the last stage's results (rollback,
// release). Three of SPEC 6's faults restore historical bugs of this path.
#include <fmt/format.h>

#include "harness/engine/stage.h"

namespace splitcheck {

void Stage::record_request_caches(int32_t forward, int32_t request, RunRecord& record) {
  if (!requests_) return;
  const RequestState& rs = requests_->at(request);
  for (int l = range_.begin; l < range_.end; ++l)
    record.add(forward_path(forward) + "cache/" + std::to_string(l),
               cache_tensor(cfg_.model, l, rs.caches[l - range_.begin]));
}

Result<std::vector<StageOutput>> Stage::run_batch(const BatchRequest& batch,
                                                  const std::vector<std::vector<std::byte>>& in,
                                                  const std::vector<Tensor>& in_bodies,
                                                  std::vector<RunRecord>* records,
                                                  std::vector<DispatchTrace>& traces) {
  const ModelConfig& c = cfg_.model;
  if (!requests_) requests_ = std::make_unique<RequestStateTable>(c, range_.begin, range_.end);
  RequestStateTable& table = *requests_;

  apply_updates(batch.updates);
  const size_t n = batch.segments.size();
  if (n == 0) return std::vector<StageOutput>{};  // updates only
  const std::vector<int32_t> owner = state_owners(batch);

  std::vector<KernelContext> ctxs;
  std::vector<StageOutput> outs(n);
  std::vector<ResidualState> states;
  std::vector<LayerRecording> recs;
  for (size_t i = 0; i < n; ++i) {
    const Segment& seg = batch.segments[i];
    const int64_t T = static_cast<int64_t>(seg.ids.size());
    RunRecord* record = records != nullptr ? &(*records)[i] : nullptr;
    ctxs.push_back(context(&traces[i], seg.index));
    recs.push_back(LayerRecording{record, forward_path(seg.index), cfg_.level});
    if (seg.kind == ForwardKind::kVerify) table.snapshot(owner[i]);
    RequestState& rs = table.at(owner[i]);
    // prefill.chunk_token_dropped (the class of vLLM issue 41133): when a prompt's prefill
    // continues in a later step, a non-first stage loses the token at the chunk boundary
    // (the last position of the previous chunk) from its MLA caches.
    if (seg.kind == ForwardKind::kPrefill && seg.first_position > 0 && !is_first() &&
        cfg_.faults.has("prefill.chunk_token_dropped")) {
      for (int l = range_.begin; l < range_.end; ++l)
        truncate_layer_cache(c, l, rs.caches[l - range_.begin], seg.first_position - 1);
    }
    if (is_first()) continue;  // embedded below, every segment at once
    ResidualState& st = outs[i].state;
    if (i >= in.size())
      return internal_error(fmt::format("stage {} received no payload", cfg_.index));
    const Tensor* body = i < in_bodies.size() ? &in_bodies[i] : nullptr;
    RETURN_IF_ERROR(receive_payload(seg.index, T, in[i], body, st, outs[i].taps));
    place_state(st, weights_.device());  // the received state goes where the weights are
    states.push_back(st);
  }

  BatchRows rows = is_first()
                       ? embed_rows(ctxs, c, weights_.get("embed_tokens.weight"), batch.segments)
                       : concat_rows(states);
  if (is_first() && captured(0)) {
    const Tensor tap = rows.all.prefix.clone();
    for (size_t i = 0; i < n; ++i)
      outs[i].taps.emplace_back(0, tap.rows(rows.begin[i], rows.begin[i + 1]));
  }
  for (int l = range_.begin; l < range_.end; ++l) {
    std::vector<LayerCache*> caches;
    for (size_t i = 0; i < n; ++i) caches.push_back(&table.at(owner[i]).caches[l - range_.begin]);
    const int li = l - range_.begin;
    run_layer_batch(ctxs, c, l, layers_[li], rows, caches, recs);
    computed_.layers += static_cast<int64_t>(n);
    if (!captured(l + 1)) continue;
    const std::vector<Tensor> read =
        read_tap_rows(ctxs, c, l + 1, rows, [&](const KernelContext& ctx, const ResidualState& st) {
          std::vector<std::pair<int, Tensor>> one;
          read_tap_after(ctx, l, st, &one);
          return one.front().second;
        });
    for (size_t i = 0; i < n; ++i) outs[i].taps.emplace_back(l + 1, read[i]);
  }
  std::vector<HeadOutput> heads;
  if (is_last()) {
    heads = run_head_rows(ctxs, c, rows, weights_);
    computed_.heads += static_cast<int64_t>(n);
  }
  for (size_t i = 0; i < n; ++i) outs[i].state = rows.segment(i);
  finish_batch(batch, owner, heads, outs);
  return outs;
}

void Stage::apply_updates(const std::vector<StateUpdate>& updates) {
  for (const StateUpdate& u : updates) {
    // spec.rollback_last_stage_only (vLLM PR 44697): only the last stage rolls back after
    // a partly rejected verify; the others keep the rejected drafts in their caches.
    if (u.kind == StateUpdate::Kind::kRollback && !is_last() &&
        cfg_.faults.has("spec.rollback_last_stage_only"))
      continue;
    requests_->apply(u);
  }
}

std::vector<int32_t> Stage::state_owners(const BatchRequest& batch) {
  // Which state each segment's rows use: its own request's. Under
  // batch.stale_microbatch_state (vLLM issue 55951) a non-first stage indexes its table
  // by the segment's slot in the micro-batch it ran pp steps earlier.
  const int pp = cfg_.partition.stages();
  const size_t n = batch.segments.size();
  std::vector<int32_t> owner(n);
  std::vector<int32_t> members;
  for (size_t i = 0; i < n; ++i) {
    owner[i] = batch.segments[i].request;
    members.push_back(batch.segments[i].request);
  }
  if (cfg_.faults.has("batch.stale_microbatch_state") && !is_first() &&
      memberships_.size() >= static_cast<size_t>(pp)) {
    const std::vector<int32_t>& stale = memberships_[memberships_.size() - pp];
    for (size_t i = 0; i < n && i < stale.size(); ++i) owner[i] = stale[i];
  }
  memberships_.push_back(std::move(members));
  return owner;
}

void Stage::finish_batch(const BatchRequest& batch, const std::vector<int32_t>& owner,
                         std::vector<HeadOutput>& heads, std::vector<StageOutput>& outs) {
  for (size_t i = 0; i < batch.segments.size(); ++i) {
    const Segment& seg = batch.segments[i];
    const int64_t T = static_cast<int64_t>(seg.ids.size());
    RequestState& rs = requests_->at(owner[i]);
    rs.positions = seg.first_position + T;
    StageOutput& out = outs[i];
    if (is_last()) {
      out.head = std::move(heads[i]);
      if (!is_first() && captured(0) && !relays_tap0())
        out.taps.emplace_back(0, Tensor::zeros(DType::kBF16, {T, cfg_.model.hidden_size}));
      std::stable_sort(out.taps.begin(), out.taps.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      continue;
    }
    hand_on_payload(seg.index, T, out);
  }
}

}  // namespace splitcheck
