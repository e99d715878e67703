#include "harness/gates/environment.h"

#include <fmt/format.h>

#include "harness/build_info.h"
#include "harness/engine/run.h"
#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace splitcheck {
namespace {

// The instruction set this translation unit is compiled for, from the compiler's own
// predefined macros (the kernels are compiled with the same flags).
std::string compiled_isa() {
  std::string isa;
#if defined(__x86_64__)
  isa = "x86-64";
#if defined(__SSE2__)
  isa += " sse2";
#endif
#if defined(__SSE3__)
  isa += " sse3";
#endif
#if defined(__SSSE3__)
  isa += " ssse3";
#endif
#if defined(__SSE4_1__)
  isa += " sse4.1";
#endif
#if defined(__SSE4_2__)
  isa += " sse4.2";
#endif
#if defined(__AVX__)
  isa += " avx";
#endif
#if defined(__AVX2__)
  isa += " avx2";
#endif
#if defined(__FMA__)
  isa += " fma";
#endif
#if defined(__F16C__)
  isa += " f16c";
#endif
#if defined(__AVX512F__)
  isa += " avx512f";
#endif
#if defined(__AVX512BF16__)
  isa += " avx512bf16";
#endif
#elif defined(__aarch64__)
  isa = "aarch64";
#if defined(__ARM_NEON)
  isa += " neon";
#endif
#if defined(__ARM_FEATURE_FMA)
  isa += " fma";
#endif
#if defined(__ARM_FEATURE_SVE)
  isa += " sve";
#endif
#else
  isa = "unknown";
#endif
  return isa;
}

}  // namespace

nlohmann::json environment_fingerprint() {
  return {{"compiler", SPLITCHECK_COMPILER},
          {"flags", SPLITCHECK_CXX_FLAGS},
          {"isa", compiled_isa()},
          {"device", "cpu"}};
}

nlohmann::json environment_fingerprint(const std::string& backend) {
  nlohmann::json env = environment_fingerprint();
  if (backend_device(backend) != Device::kCuda) return env;
#ifdef SPLITCHECK_HAVE_CUDA
  const std::string why = cuda::unavailable_reason();
#else
  const std::string why = "this build has no CUDA backend";
#endif
  if (!why.empty()) {
    env["device"] = "cuda unavailable: " + why;
    return env;
  }
  // The device part of a dump's env (backend_provenance), less the matrix-product
  // algorithms, which depend on the shapes a run happened to use.
  const nlohmann::json d = backend_provenance(backend);
  env["device"] = "cuda";
  env["gpu"] = d.value("device", "");
  for (const char* key : {"compute_capability", "sm_count", "driver_version",
                          "cuda_driver_api_version", "cuda_runtime_version", "cublaslt_version"})
    if (d.contains(key)) env[key] = d[key];
  return env;
}

nlohmann::json upgrade_fingerprint(const nlohmann::json& env) {
  if (!env.is_object() || !env.contains("driver_version") || !env["driver_version"].is_number() ||
      env.contains("cuda_driver_api_version"))
    return env;
  nlohmann::json up = env;
  up["cuda_driver_api_version"] = env["driver_version"];
  up.erase("driver_version");
  return up;
}

FingerprintDiff diff_fingerprints(const nlohmann::json& golden0, const nlohmann::json& here) {
  const nlohmann::json golden = upgrade_fingerprint(golden0);
  FingerprintDiff d;
  auto text = [](const nlohmann::json& v) {
    return v.is_string() ? v.get<std::string>() : v.dump();
  };
  for (const auto& [key, value] : here.items()) {
    if (!golden.is_object() || !golden.contains(key)) {
      d.unrecorded.push_back(key);
      continue;
    }
    if (golden[key] != value)
      d.differences.push_back(
          fmt::format("{}: golden '{}', this build '{}'", key, text(golden[key]), text(value)));
  }
  // A field only the golden records (a GPU golden's sm_count, say) is a difference too.
  if (golden.is_object())
    for (const auto& [key, value] : golden.items())
      if (!here.contains(key))
        d.differences.push_back(
            fmt::format("{}: golden '{}', this build records none", key, text(value)));
  return d;
}

}  // namespace splitcheck
