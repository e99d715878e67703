// The `nccl` transport's payload channel: the mpi transport's ranks and messages, with the
// handoff payload sent by ncclSend/ncclRecv between the ranks' GPUs (one GPU per rank).
// The communicator is bootstrapped through MPI (ncclGetUniqueId on rank 0, MPI_Bcast).
// Two paths, chosen by the sender; on both, what the receiver must know first (the byte
// count, the form, a split payload's header) is the channel's announcement, which rides
// the job envelope's MPI message (PayloadChannel::announce), so that the payload itself
// is one NCCL transfer and no message of its own precedes it:
//  - device bodies (stages computing on their GPUs, backend cuda): the stage splits its
//    payload (handoff.h) into a host header and a body built on the device; the header and
//    the body's size are announced, the body goes by ncclSend straight from the stage's
//    device tensor, and the receiver ncclRecv's it into a device tensor it reuses (grown
//    only when a larger body comes), which the receiving stage slices on the device.
//    Nothing goes through the host but the header.
//  - host payloads (stages computing on the CPU): the whole payload's size is announced,
//    the bytes are copied to a reused device buffer, sent, and copied back to the host
//    after the receive.
// Every wait polls (cudaStreamQuery) with a deadline; a timeout aborts the communicator,
// and the rank is reported lost like any other.
#pragma once

#include <memory>
#include <string>

#include "harness/transport/mpi_transport.h"

namespace splitcheck {

// Empty when `ranks_on_host` ranks can each have one of the host's `gpus_on_host` GPUs;
// otherwise the refusal, naming both counts.
std::string ranks_per_gpu_problem(int ranks_on_host, int gpus_on_host);

// Every rank calls it (collective): the rank with local rank r among its host's ranks uses
// that host's GPU r. More ranks on a host than it has GPUs is refused on every rank as
// invalid input (StatusCode::kInvalidInput, naming both counts): NCCL forbids two ranks of
// one communicator on one GPU.
Result<std::unique_ptr<PayloadChannel>> make_nccl_channel(MpiWorld& world);

}  // namespace splitcheck
