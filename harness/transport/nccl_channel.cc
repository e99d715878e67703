#include "harness/transport/nccl_channel.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <thread>

#include "harness/engine/wire.h"

namespace splitcheck {
namespace {

using Clock = std::chrono::steady_clock;

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return internal_error(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::ok();
  return internal_error(fmt::format("{}: {}", what, ncclGetErrorString(r)));
}

// A device buffer that grows and is then reused.
struct DeviceBuffer {
  void* data = nullptr;
  size_t capacity = 0;
  Status reserve(size_t n) {
    if (n <= capacity) return Status::ok();
    if (data != nullptr) cudaFree(data);
    data = nullptr;
    capacity = 0;
    RETURN_IF_ERROR(cuda_status(cudaMalloc(&data, n), "cudaMalloc"));
    capacity = n;
    return Status::ok();
  }
  ~DeviceBuffer() {
    if (data != nullptr) cudaFree(data);
  }
};

// This rank's GPU: its rank among the ranks of its host (MPI_COMM_TYPE_SHARED). NCCL
// refuses two ranks of one communicator on one GPU (ncclInvalidUsage, "Duplicate GPU
// detected", since NCCL 2.5), so a host with more ranks than GPUs is refused here, as
// invalid input, on every rank alike (the verdict is agreed by an MPI_Allreduce), before
// any communicator exists.
Result<int> rank_device(MpiWorld& world) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  MPI_Comm host = MPI_COMM_NULL;
  int local_rank = world.rank(), local_size = world.size();
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL,
                          &host) == MPI_SUCCESS) {
    MPI_Comm_rank(host, &local_rank);
    MPI_Comm_size(host, &local_size);
    MPI_Comm_free(&host);
  }
  const std::string mine = ranks_per_gpu_problem(local_size, devices);
  // Every rank learns whether any rank's host has more ranks than GPUs.
  const int problem = mine.empty() ? 0 : 1;
  int any = 0;
  if (MPI_Allreduce(&problem, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
    return internal_error("MPI_Allreduce of the ranks' GPU counts failed");
  if (any == 0) return local_rank;
  if (!mine.empty()) return invalid_input(mine);
  return invalid_input(
      "--transport nccl: another host of the MPI job has more ranks than GPUs; the nccl "
      "transport needs one GPU per rank");
}

class NcclChannel : public PayloadChannel {
 public:
  ~NcclChannel() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  Status init(MpiWorld& world) {
    ASSIGN_OR_RETURN(const int device, rank_device(world));
    RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "cudaSetDevice"));
    RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                                "cudaStreamCreate"));
    ncclUniqueId id;
    if (world.rank() == 0) RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    if (MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
      return internal_error("MPI_Bcast of the NCCL unique id failed");
    return nccl_status(ncclCommInitRank(&comm_, world.size(), id, world.rank()),
                       "ncclCommInitRank");
  }

  Status send(int to, const std::vector<std::byte>& payload, double timeout_s) override {
    WireWriter size;
    size.put(static_cast<uint64_t>(payload.size()));
    RETURN_IF_ERROR(mpi_send_bytes(to, kPayloadTag, size.out, timeout_s));
    if (payload.empty()) return Status::ok();
    RETURN_IF_ERROR(out_.reserve(payload.size()));
    RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(out_.data, payload.data(), payload.size(), cudaMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync to the device"));
    RETURN_IF_ERROR(nccl_status(ncclSend(out_.data, payload.size(), ncclUint8, to, comm_, stream_),
                                "ncclSend"));
    return wait(timeout_s, fmt::format("ncclSend of {} bytes to rank {}", payload.size(), to));
  }

  Result<std::vector<std::byte>> receive(int from, double timeout_s) override {
    ASSIGN_OR_RETURN(std::vector<std::byte> size_bytes,
                     mpi_receive_bytes(from, kPayloadTag, timeout_s));
    WireReader rd(size_bytes);
    uint64_t n = 0;
    if (!rd.get(n) || rd.remaining() != 0 || n > (uint64_t{1} << 40))
      return internal_error(fmt::format("malformed payload size from rank {}", from));
    std::vector<std::byte> payload(n);
    if (n == 0) return payload;
    RETURN_IF_ERROR(in_.reserve(n));
    RETURN_IF_ERROR(
        nccl_status(ncclRecv(in_.data, n, ncclUint8, from, comm_, stream_), "ncclRecv"));
    RETURN_IF_ERROR(
        cuda_status(cudaMemcpyAsync(payload.data(), in_.data, n, cudaMemcpyDeviceToHost, stream_),
                    "cudaMemcpyAsync to the host"));
    RETURN_IF_ERROR(wait(timeout_s, fmt::format("ncclRecv of {} bytes from rank {}", n, from)));
    return payload;
  }

 private:
  // Polls the stream until it is done or the deadline passes (then aborts the communicator).
  Status wait(double timeout_s, const std::string& what) {
    const auto deadline =
        Clock::now() + std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6));
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return Status::ok();
      if (e != cudaErrorNotReady) return cuda_status(e, what.c_str());
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess) return nccl_status(async, what.c_str());
      if (Clock::now() > deadline) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        return internal_error(fmt::format("{} did not complete within {} s", what, timeout_s));
      }
      std::this_thread::yield();
    }
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer out_, in_;
};

}  // namespace

std::string ranks_per_gpu_problem(int ranks_on_host, int gpus_on_host) {
  if (ranks_on_host <= gpus_on_host) return "";
  return fmt::format(
      "--transport nccl: {} ranks on a host with {} visible GPU(s); the nccl transport needs "
      "one GPU per rank (NCCL refuses two ranks of one communicator on one GPU): launch at most "
      "one rank per GPU (mpirun -np <stages> with <stages> <= GPUs), or use --transport mpi",
      ranks_on_host, gpus_on_host);
}

std::string nccl_device_problem() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess)
    return fmt::format("no CUDA device is usable here ({})", cudaGetErrorString(e));
  if (devices == 0) return "no CUDA device is visible here";
  return "";
}

Result<std::unique_ptr<PayloadChannel>> make_nccl_channel(MpiWorld& world) {
  auto channel = std::make_unique<NcclChannel>();
  Status st = channel->init(world);
  if (st.code() == StatusCode::kInvalidInput) return st;  // every rank refuses alike
  RETURN_IF_ERROR(st, fmt::format("rank {}: NCCL bootstrap", world.rank()));
  return std::unique_ptr<PayloadChannel>(std::move(channel));
}

}  // namespace splitcheck
