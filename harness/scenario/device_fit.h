// Whether a scenario's tensors fit in the GPU's free memory, estimated from its model
// configuration before anything is allocated: a CUDA run that would not fit is refused
// (exit 2, naming the bytes needed and free) rather than failing part-way through.
#pragma once

#include <cstddef>
#include <string>

#include "harness/scenario/scenario.h"

namespace splitcheck {

// The device bytes a CUDA run of the scenario needs, by its model configuration: the
// model's bf16 weights once (every stage views PP=1's copy), and the activations of the
// largest forward (tokens: the serving token budget, else the prefill chunk or the
// prompt limit, else kUnboundedPromptTokens), for each of kForwardsInFlight forwards
// (a sweep's threads), the layer caches in device memory (each KDA layer's state and each
// MLA layer's latents for the longest sequence, twice for a rollback's snapshot, for every
// sequence in flight: serving's max_in_flight, else one; for each of kForwardsInFlight
// runs), plus kDeviceReserveBytes for the libraries' workspaces.
struct DeviceFootprint {
  size_t weight_bytes = 0;
  size_t activation_bytes = 0;  // all forwards in flight together
  size_t cache_bytes = 0;       // all runs' caches together
  size_t reserve_bytes = 0;
  int64_t forward_tokens = 0;  // tokens of the largest forward assumed
  size_t total() const { return weight_bytes + activation_bytes + cache_bytes + reserve_bytes; }
};

inline constexpr int64_t kUnboundedPromptTokens = 2048;
inline constexpr int kForwardsInFlight = 4;
inline constexpr size_t kDeviceReserveBytes = size_t{1} << 30;

DeviceFootprint estimate_device_footprint(const Scenario& scenario);

// Empty when the footprint fits in `free_bytes`; otherwise why not, naming both figures:
// "needs 170.1 GiB of GPU memory (weights 168.9 GiB, ...), 139.2 GiB free".
std::string device_fit_problem(const DeviceFootprint& footprint, size_t free_bytes);

}  // namespace splitcheck
