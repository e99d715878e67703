#include "harness/cli/version.h"

#include <fmt/format.h>

#include "harness/build_info.h"
#include "harness/dump/dump.h"

namespace splitcheck {
namespace {

// Compiled in, whatever the machine: a capability that needs a device (cuda) may still be
// unusable at run time, which a scenario naming it reports.
constexpr bool kCuda =
#ifdef SPLITCHECK_HAVE_CUDA
    true;
#else
    false;
#endif
constexpr bool kMpi =
#if SPLITCHECK_HAVE_MPI
    true;
#else
    false;
#endif
constexpr bool kNccl =
#if SPLITCHECK_HAVE_NCCL
    true;
#else
    false;
#endif

const char* yes_no(bool b) { return b ? "yes" : "no"; }

}  // namespace

std::string version_text() {
  return fmt::format(
      "splitcheck {} (git {})\n"
      "dump format: writes version {} (xxh3 digests); reads versions {} to {}\n"
      "capabilities: cuda {}, mpi {}, nccl {}\n"
      "compiler: {}, flags {}\n",
      SPLITCHECK_VERSION, SPLITCHECK_GIT_REVISION, kDumpFormatVersion, kDumpFormatVersionOldest,
      kDumpFormatVersion, yes_no(kCuda), yes_no(kMpi), yes_no(kNccl), SPLITCHECK_COMPILER,
      SPLITCHECK_CXX_FLAGS);
}

}  // namespace splitcheck
