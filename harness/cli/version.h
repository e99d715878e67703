// What `splitcheck --version` prints: the build's identity, the dump format versions it
// writes and reads, and the capabilities compiled in.
#pragma once

#include <string>

namespace splitcheck {

// Several lines, e.g.
//   splitcheck 0.1.0 (git 990f7de1a2b3)
//   dump format: writes version 2 (xxh3 digests); reads versions 1 to 2
//   capabilities: cuda no, mpi yes, nccl no
//   compiler: GNU 12.2.0, flags -O3 -fno-fast-math -ffp-contract=off
std::string version_text();

}  // namespace splitcheck
