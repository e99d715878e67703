#include "reference/cache_snapshot.h"

#include <cstddef>
#include <stdexcept>

#include "kernels/tensor_copy.h"

namespace splitcheck {
namespace {

// The KDA layers' caches among `caches` (layers first, first + 1, ...).
std::vector<LayerCache*> kda_caches(const ModelConfig& c, int first, std::vector<LayerCache>& caches) {
  std::vector<LayerCache*> out;
  for (size_t i = 0; i < caches.size(); ++i)
    if (!c.is_mla_layer(first + static_cast<int>(i))) out.push_back(&caches[i]);
  return out;
}

// Whether layer j's state is row j of `states`, for every KDA layer.
bool views_of(const Tensor& states, const std::vector<LayerCache*>& kda) {
  if (states.shape().empty() || states.dim(0) != static_cast<int64_t>(kda.size())) return false;
  const size_t row = states.nbytes() / kda.size();
  for (size_t j = 0; j < kda.size(); ++j) {
    const Tensor& s = kda[j]->kda_state;
    if (s.address() != static_cast<const std::byte*>(states.address()) + j * row ||
        s.nbytes() != row)
      return false;
  }
  return true;
}

}  // namespace

void CacheSnapshot::take(const ModelConfig& c, int first, std::vector<LayerCache>& caches) {
  const std::vector<LayerCache*> kda = kda_caches(c, first, caches);
  if (!views_of(states_, kda)) {
    states_ = Tensor();
    const Tensor* allocated = nullptr;
    for (LayerCache* lc : kda)
      if (allocated == nullptr && !lc->kda_state.shape().empty()) allocated = &lc->kda_state;
    if (allocated != nullptr) {
      const int64_t n = allocated->numel();
      Tensor all = Tensor::zeros(DType::kF32, {static_cast<int64_t>(kda.size()), n},
                                 allocated->device());
      for (size_t j = 0; j < kda.size(); ++j) {
        const auto i = static_cast<int64_t>(j);
        Tensor row = all.rows(i, i + 1).reshaped({n});
        if (!kda[j]->kda_state.shape().empty()) copy_tensor(row, kda[j]->kda_state);
        kda[j]->kda_state = row;
      }
      states_ = std::move(all);
    }
  }
  taken_ = true;
  saved_ = states_.shape().empty() ? Tensor() : clone_queued(states_);
  latents_.clear();
  for (const LayerCache& lc : caches) latents_.push_back(lc.mla_latent.positions);
}

bool CacheSnapshot::restore(const ModelConfig& c, int first, std::vector<LayerCache>& caches) const {
  if (!taken_) return false;
  const std::vector<LayerCache*> kda = kda_caches(c, first, caches);
  if (latents_.size() != caches.size() || (!saved_.shape().empty() && !views_of(states_, kda)))
    throw std::logic_error("a cache snapshot restored onto caches that are not its own");
  for (size_t i = 0; i < caches.size(); ++i) {
    const LatentCache& m = caches[i].mla_latent;
    if (latents_[i] > 0 && (m.rows.shape().empty() || m.rows.dim(0) < latents_[i]))
      throw std::logic_error("a cache snapshot restored onto caches that are not its own");
  }
  if (saved_.shape().empty()) {
    // No KDA state was allocated at the snapshot: each returns to unallocated.
    for (LayerCache* lc : kda) lc->kda_state = Tensor();
  } else {
    Tensor states = states_;
    copy_tensor(states, saved_);
  }
  for (size_t i = 0; i < caches.size(); ++i) caches[i].mla_latent.positions = latents_[i];
  return true;
}

}  // namespace splitcheck
