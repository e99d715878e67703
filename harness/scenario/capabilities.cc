#include "harness/scenario/capabilities.h"

#include <cstdlib>

#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif
#if SPLITCHECK_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <fmt/format.h>
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

std::string mpi_unavailable() {
#if SPLITCHECK_HAVE_MPI
  // OpenMPI's launcher (mpirun, orterun) sets these in every process it starts.
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr)
    return "";
  return "this process was not launched by mpirun (run: splitcheck sweep --ranks <stages> ..., "
         "which starts mpirun itself); the stages would run as threads of one process instead";
#else
  return "this build has no MPI transport (configure with -DSPLITCHECK_MPI=ON); the stages "
         "would run as threads of one process instead";
#endif
}

#if SPLITCHECK_HAVE_NCCL
// Empty when this process can use NCCL (a CUDA device is visible); otherwise why not.
std::string nccl_device_problem() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess)
    return fmt::format("no CUDA device is usable here ({})", cudaGetErrorString(e));
  if (devices == 0) return "no CUDA device is visible here";
  return "";
}
#endif

std::string nccl_unavailable() {
#if SPLITCHECK_HAVE_NCCL
  if (const std::string mpi = mpi_unavailable(); !mpi.empty()) return mpi;
  return nccl_device_problem();
#else
  return "this build has no NCCL transport (configure with -DSPLITCHECK_MPI=ON "
         "-DSPLITCHECK_NCCL=ON); the stages would run as threads of one process instead";
#endif
}

constexpr Capability kCapabilities[] = {
    {"backend", "cpu", provided},
    {"backend", "cuda", cuda_unavailable},
    {"transport", "inproc", provided},
    {"transport", "mpi", mpi_unavailable},
    {"transport", "nccl", nccl_unavailable},
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
