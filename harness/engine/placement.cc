#include "harness/engine/placement.h"

#include <fmt/format.h>
#include <unistd.h>

#if SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace splitcheck {

StagePlacement this_process_placement(int stage, int rank, const std::string& backend) {
  StagePlacement p;
  p.stage = stage;
  p.rank = rank;
  p.pid = static_cast<int64_t>(::getpid());
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) p.host = host;
  p.device = "cpu";
#if SPLITCHECK_HAVE_CUDA
  if (backend == "cuda") {
    const cuda::DeviceInfo d = cuda::device_info();
    p.device = fmt::format("cuda:{} ({})", d.index, d.name);
  }
#else
  (void)backend;
#endif
  return p;
}

}  // namespace splitcheck
