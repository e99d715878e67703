#include "harness/transport/nccl_channel.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <thread>

#include "harness/engine/wire.h"
#include "kernels/cuda/runtime.h"

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

  bool carries_device_bodies() const override { return true; }

  // The announcement (it rides the job message): u64 bytes that follow by NCCL, u8 form
  // (0: the whole payload, staged through out_; 1: a split payload's body, sent from the
  // device tensor itself), then, in form 1, the header's bytes. No MPI message of the
  // channel's own precedes the ncclSend: one NCCL transfer per payload.
  std::vector<std::byte> announce(const std::vector<std::byte>& payload,
                                  const Tensor& body) override {
    const bool split = !body.empty() && body.device() != Device::kCpu;
    WireWriter head;
    if (!split) {
      head.put(
          static_cast<uint64_t>(body.empty() ? payload.size() : payload.size() + body.nbytes()));
      head.put(uint8_t{0});
      return std::move(head.out);
    }
    head.put(static_cast<uint64_t>(body.nbytes()));
    head.put(uint8_t{1});
    head.out.insert(head.out.end(), payload.begin(), payload.end());
    return std::move(head.out);
  }

  Status send(int to, const std::vector<std::byte>& payload, const Tensor& body, double timeout_s,
              const std::function<void()>& meanwhile) override {
    if (!body.empty() && body.device() == Device::kCpu)
      return send(to, join_payload(payload, body), Tensor(), timeout_s, meanwhile);
    const bool split = !body.empty();
    const size_t n = split ? body.nbytes() : payload.size();
    if (n == 0) return Status::ok();
    const void* from = body.address();
    // The body was written on the backend's stream; NCCL reads it on its own.
    if (split) cuda::synchronize();
    if (split && !said_device_) {
      // Once per process, for the logs (scripts/nccl-check.sh looks for it).
      said_device_ = true;
      fmt::print(stderr, "splitcheck: nccl: payload bodies travel from device memory ({} bytes)\n",
                 n);
    }
    if (!split) {
      RETURN_IF_ERROR(out_.reserve(n));
      RETURN_IF_ERROR(cuda_status(
          cudaMemcpyAsync(out_.data, payload.data(), n, cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync to the device"));
      from = out_.data;
    }
    RETURN_IF_ERROR(nccl_status(ncclSend(from, n, ncclUint8, to, comm_, stream_), "ncclSend"));
    return wait(timeout_s, fmt::format("ncclSend of {} bytes to rank {}", n, to), meanwhile);
  }

  Result<ChannelPayload> receive(int from, const std::vector<std::byte>& announcement,
                                 double timeout_s, size_t slot) override {
    WireReader rd(announcement);
    uint64_t n = 0;
    uint8_t split = 0;
    if (!rd.get(n) || !rd.get(split) || split > 1 || (split == 0 && rd.remaining() != 0) ||
        n > (uint64_t{1} << 40) || (split == 1 && n % sizeof(bf16) != 0))
      return internal_error(fmt::format("malformed payload announcement of {} bytes from rank {}",
                                        announcement.size(), from));
    ChannelPayload got;
    if (split == 1) {
      got.bytes.assign(announcement.end() - static_cast<std::ptrdiff_t>(rd.remaining()),
                       announcement.end());
      if (n == 0) return internal_error(fmt::format("empty payload body from rank {}", from));
      // Received into the slot's reused device tensor, grown only when a larger body comes;
      // the body handed on is a view of its first n bytes.
      const int64_t elements = static_cast<int64_t>(n / sizeof(bf16));
      if (slot >= bodies_in_.size()) bodies_in_.resize(slot + 1);
      Tensor& buffer = bodies_in_[slot];
      if (buffer.empty() || buffer.numel() < elements) {
        buffer = Tensor();
        try {
          buffer = Tensor::zeros(DType::kBF16, {elements}, Device::kCuda);
        } catch (const std::exception& e) {
          return internal_error(fmt::format("receive buffer of {} bytes: {}", n, e.what()));
        }
      }
      cuda::synchronize();  // a new buffer is zeroed on the backend's stream
      RETURN_IF_ERROR(nccl_status(ncclRecv(buffer.address(), n, ncclUint8, from, comm_, stream_),
                                  "ncclRecv"));
      RETURN_IF_ERROR(
          wait(timeout_s, fmt::format("ncclRecv of a {}-byte body from rank {}", n, from)));
      got.body = buffer.rows(0, elements);
      return got;
    }
    got.bytes.resize(n);
    if (n == 0) return got;
    RETURN_IF_ERROR(in_.reserve(n));
    RETURN_IF_ERROR(
        nccl_status(ncclRecv(in_.data, n, ncclUint8, from, comm_, stream_), "ncclRecv"));
    RETURN_IF_ERROR(
        cuda_status(cudaMemcpyAsync(got.bytes.data(), in_.data, n, cudaMemcpyDeviceToHost, stream_),
                    "cudaMemcpyAsync to the host"));
    RETURN_IF_ERROR(wait(timeout_s, fmt::format("ncclRecv of {} bytes from rank {}", n, from)));
    return got;
  }

 private:
  // Polls the stream until it is done or the deadline passes (then aborts the communicator),
  // calling `meanwhile` (when given) between polls.
  Status wait(double timeout_s, const std::string& what,
              const std::function<void()>& meanwhile = {}) {
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
      if (meanwhile) meanwhile();
      std::this_thread::yield();
    }
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer out_, in_;  // the whole payload's bytes, staged (host payloads)
  // Split payloads' bodies, received in place (device memory), one buffer a slot (a
  // serving step's segments' bodies stand side by side until the stage has read them).
  std::vector<Tensor> bodies_in_;
  bool said_device_ = false;
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

Result<std::unique_ptr<PayloadChannel>> make_nccl_channel(MpiWorld& world) {
  auto channel = std::make_unique<NcclChannel>();
  Status st = channel->init(world);
  if (st.code() == StatusCode::kInvalidInput) return st;  // every rank refuses alike
  RETURN_IF_ERROR(st, fmt::format("rank {}: NCCL bootstrap", world.rank()));
  return std::unique_ptr<PayloadChannel>(std::move(channel));
}

}  // namespace splitcheck
