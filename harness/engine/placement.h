// Where a sweep's stages ran: the transport, and for each stage its MPI rank, OS process,
// host and device. Filled by the transport (TransportFactory::placement) and carried into
// every report form (harness/reports/report.h: placement_json, placement_line), so a report says
// which processes computed what it judged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/dump/evidence.h"

namespace splitcheck {

// This process as stage `stage` on MPI rank `rank`, computing on `backend` ("cpu", or
// "cuda": the current CUDA device, by index and name).
StagePlacement this_process_placement(int stage, int rank, const std::string& backend);

}  // namespace splitcheck
