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

class NcclChannel : public PayloadChannel {
 public:
  ~NcclChannel() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  Status init(MpiWorld& world) {
    int devices = 0;
    RETURN_IF_ERROR(cuda_status(cudaGetDeviceCount(&devices), "cudaGetDeviceCount"));
    if (devices == 0) return internal_error("no CUDA device");
    RETURN_IF_ERROR(cuda_status(cudaSetDevice(world.rank() % devices), "cudaSetDevice"));
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
  RETURN_IF_ERROR(channel->init(world), fmt::format("rank {}: NCCL bootstrap", world.rank()));
  return std::unique_ptr<PayloadChannel>(std::move(channel));
}

}  // namespace splitcheck
