// A rollback point of a range of layer caches, taken before a speculative verify block and
// restored when the block is partly rejected: one copy each way, whatever the layer count.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.h"
#include "reference/config.h"
#include "reference/layer.h"

namespace splitcheck {

// What a restore needs of layer caches `caches` (layers first, first + 1, ...): each MLA
// layer's latent count (the latents past it are rewritten by the next appends, so they
// need no copy) and a copy of every KDA state. At its first snapshot of a set of caches
// the KDA states are gathered into one tensor, each layer's state becoming a view of its
// row (a state not allocated yet starts there as the zeros its first call would make),
// so a snapshot is one queued copy of that tensor and a restore one copy back.
class CacheSnapshot {
 public:
  void take(const ModelConfig& config, int first, std::vector<LayerCache>& caches);
  // Returns `caches` to the snapshot: false, changing nothing, when none was taken.
  // Throws std::logic_error for caches that are not the snapshot's (replaced since).
  bool restore(const ModelConfig& config, int first, std::vector<LayerCache>& caches) const;
  bool taken() const { return taken_; }

 private:
  bool taken_ = false;
  Tensor states_;  // what the KDA layers' states are views of (empty: not gathered)
  Tensor saved_;   // states_ at the snapshot (empty: no KDA state was allocated then)
  std::vector<int64_t> latents_;
};

}  // namespace splitcheck
