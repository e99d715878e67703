// Where a sweep's stages ran: the transport, and for each stage its MPI rank, OS process,
// host and device. Filled by the transport (TransportFactory::placement) and carried into
// every report form (reports/report.h: placement_json, placement_line), so a report says
// which processes computed what it judged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace splitcheck {

// Where stage `stage` of the sweep's partitions ran.
struct StagePlacement {
  int stage = 0;
  int rank = 0;        // the MPI rank (0 under inproc: a thread of rank 0's process)
  int64_t pid = 0;     // the OS process
  std::string host;    // gethostname()
  std::string device;  // "cpu", or the GPU: "cuda:0 (NVIDIA H200)"
};

// How a sweep's stages ran. Stage s runs at the same place in every partition (under `mpi`
// and `nccl` on rank s), so one row a stage covers every partition of the sweep.
struct StagesPlacement {
  std::string transport;  // "inproc", "mpi", "nccl"
  std::vector<StagePlacement> stages;
};

// This process as stage `stage` on MPI rank `rank`, computing on `backend` ("cpu", or
// "cuda": the current CUDA device, by index and name).
StagePlacement this_process_placement(int stage, int rank, const std::string& backend);

}  // namespace splitcheck
