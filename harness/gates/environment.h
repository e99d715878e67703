// The environment fingerprint a golden carries (DESIGN.md "Goldens"): what can change a
// computed bit without any change to the code under test. For the CPU backend: the
// compiler and its version, the flags the numeric code is compiled with, and the CPU ISA
// it is compiled for (architecture and the vector extensions the compiler may use).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace splitcheck {

// This build's fingerprint: {"compiler", "flags", "isa", "device"}, e.g. {"GNU 12.2.0",
// "-O3 -fno-fast-math -ffp-contract=off", "x86-64 sse sse2", "cpu"}.
nlohmann::json environment_fingerprint();

// The fingerprint of a run on `backend` ("cpu" or "cuda"). On CUDA it adds what cuBLAS's
// bitwise promise depends on, as the dump's env.device records it (harness/engine/run.h):
// {"device": "cuda", "gpu": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132,
// "driver_version": "580.159.04" (the NVIDIA driver), "cuda_driver_api_version": 13000
// (the CUDA API it serves, cudaDriverGetVersion), "cuda_runtime_version": ...,
// "cublaslt_version": ...}. Where no
// CUDA device can run, "device" says why ("cuda unavailable: ...") and the GPU fields are
// absent, so a GPU golden's fingerprint differs from it field by field.
nlohmann::json environment_fingerprint(const std::string& backend);

// How a golden's recorded fingerprint differs from this build's.
struct FingerprintDiff {
  // One line per differing field: "flags: golden '-O3 ...', this build '-O1 ...'".
  std::vector<std::string> differences;
  // Fields this build records that the golden does not (made before they were recorded):
  // not compared, and said so.
  std::vector<std::string> unrecorded;
  bool same() const { return differences.empty(); }
};

// A fingerprint recorded before the driver's own version was: its "driver_version" is a
// number, the CUDA driver API version, so it becomes "cuda_driver_api_version" and the
// driver's version is left unrecorded (not compared, and said so). Any other: unchanged.
nlohmann::json upgrade_fingerprint(const nlohmann::json& env);

// Compares `golden` (a MANIFEST entry's "env", upgraded as above; not an object: nothing
// recorded) with `here`.
FingerprintDiff diff_fingerprints(const nlohmann::json& golden, const nlohmann::json& here);

}  // namespace splitcheck
