#include "harness/verdict/capabilities.h"

#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace splitcheck {
namespace {

std::string provided() { return ""; }

// The CUDA backend: built with SPLITCHECK_CUDA and a usable device, or why not.
std::string cuda_unavailable() {
#ifdef SPLITCHECK_HAVE_CUDA
  const std::string why = cuda::unavailable_reason();
  return why.empty() ? "" : why + "; the run would not be on a GPU";
#else
  return "this build has no CUDA backend (configure with -DSPLITCHECK_CUDA=ON where nvcc is "
         "installed); it would run on the CPU instead";
#endif
}

std::string mpi_not_built() {
  return "this build has no MPI transport (not implemented yet); the stages would run as "
         "threads of one process instead";
}

std::string nccl_not_built() {
  return "this build has no NCCL transport (not implemented yet); the stages would run as "
         "threads of one process instead";
}

constexpr Capability kCapabilities[] = {
    {"backend", "cpu", provided},          {"backend", "cuda", cuda_unavailable},
    {"transport", "inproc", provided},     {"transport", "mpi", mpi_not_built},
    {"transport", "nccl", nccl_not_built},
};

}  // namespace

std::span<const Capability> capability_table() { return kCapabilities; }

const Capability* find_capability(std::string_view kind, std::string_view name) {
  for (const Capability& c : kCapabilities)
    if (c.kind == kind && c.name == name) return &c;
  return nullptr;
}

std::string provided_names(std::string_view kind) {
  std::string out;
  for (const Capability& c : kCapabilities) {
    if (c.kind != kind || !c.unavailable().empty()) continue;
    out += (out.empty() ? "" : ", ") + std::string(c.name);
  }
  return out;
}

}  // namespace splitcheck
