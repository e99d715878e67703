// Payload bandwidth of the nccl transport between two GPUs: the channel's path (host bytes
// copied to a reused device buffer, ncclSend/ncclRecv, copied back to the host, plus the
// size message over MPI) against a plain ncclSend/ncclRecv of the same bytes between
// device buffers, in the same run. The sizes are those the given scenarios' payloads
// have (every cut, one token, a verify block, a whole prompt), then powers of two.
//   mpirun -np 2 nccl_payload_bench scenarios/default.json ...
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "harness/engine/handoff.h"
#include "harness/transport/nccl_channel.h"

namespace splitcheck {
namespace {

int cdiv(int a, int b) { return (a + b - 1) / b; }

// The encoded size of the payload sent at cut `cut` for `tokens` tokens.
size_t payload_bytes(const Scenario& s, int cut, int64_t tokens) {
  HandoffPayload p;
  const int64_t h = s.model.hidden_size;
  for (int k : s.capture_ids)
    if (k <= cut) p.aux_ids.push_back(k);
  p.hidden = Tensor::zeros(DType::kBF16, {tokens, h});
  p.bank = Tensor::zeros(DType::kBF16, {tokens, cdiv(cut, s.model.attn_res_block_size), h});
  p.aux = Tensor::zeros(DType::kBF16, {tokens, static_cast<int64_t>(p.aux_ids.size()) * h});
  return encode_payload(p).size();
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(int argc, char** argv) {
  Result<std::unique_ptr<MpiWorld>> world = MpiWorld::init(&argc, &argv);
  if (!world.is_ok() || (*world)->size() != 2) {
    fmt::print(stderr, "nccl_payload_bench: run under mpirun -np 2\n");
    return 2;
  }
  MpiWorld& w = **world;
  w.timeout_s = 300;
  const int rank = w.rank();
  if (const std::string why = nccl_device_problem(); !why.empty()) {
    fmt::print(stderr, "nccl_payload_bench: rank {}: {}\n", rank, why);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  Result<std::unique_ptr<PayloadChannel>> channel = make_nccl_channel(w);
  if (!channel.is_ok()) {
    fmt::print(stderr, "nccl_payload_bench: {}\n", channel.status().message());
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  // A communicator of its own for the plain send/recv.
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t raw;
  ncclCommInitRank(&raw, 2, id, rank);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);

  std::set<size_t> sizes, scenario_sizes;
  for (int i = 1; i < argc; ++i) {
    Result<Scenario> s = load_scenario(argv[i]);
    if (!s.is_ok()) {
      if (rank == 0) fmt::print(stderr, "nccl_payload_bench: {}\n", s.status().message());
      continue;
    }
    const int64_t prompt = s->workload.max_prompt_tokens > 0 ? s->workload.max_prompt_tokens : 256;
    std::set<size_t> mine;
    for (int cut = 1; cut < s->model.num_hidden_layers; ++cut)
      for (int64_t t : {int64_t{1}, int64_t{s->speculative.gamma + 1}, prompt})
        mine.insert(payload_bytes(*s, cut, t));
    if (rank == 0)
      fmt::print("{}: {} payload sizes, {} to {} bytes\n", argv[i], mine.size(), *mine.begin(),
                 *mine.rbegin());
    // A spread of them: smallest, largest and every fourth in between.
    size_t n = 0;
    for (size_t b : mine)
      if (n++ % 4 == 0 || b == *mine.rbegin()) sizes.insert(b);
    scenario_sizes.insert(mine.begin(), mine.end());
  }
  for (size_t b = size_t{1} << 20; b <= (size_t{256} << 20); b <<= 2) sizes.insert(b);
  // The target: the channel at 90% of raw or more at every payload size a scenario makes.
  constexpr double kTarget = 0.90;
  int scenario_rows = 0, scenario_met = 0;

  void* dev = nullptr;
  cudaMalloc(&dev, *sizes.rbegin());
  if (rank == 0)
    fmt::print("{:>12}  {:>12}  {:>14}  {:>8}  {}\n", "bytes", "raw GB/s", "channel GB/s", "ratio",
               "size from / target 90%");
  for (size_t bytes : sizes) {
    const int iters = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / bytes, 5, 200));
    std::vector<std::byte> host(bytes, std::byte{0x5a});
    auto raw_once = [&] {
      if (rank == 0)
        ncclSend(dev, bytes, ncclUint8, 1, raw, stream);
      else
        ncclRecv(dev, bytes, ncclUint8, 0, raw, stream);
      cudaStreamSynchronize(stream);
    };
    auto channel_once = [&] {
      if (rank == 0) {
        (void)(*channel)->send(1, host, w.timeout_s);
      } else {
        Result<std::vector<std::byte>> got = (*channel)->receive(0, w.timeout_s);
        if (!got.is_ok() || got->size() != bytes) MPI_Abort(MPI_COMM_WORLD, 3);
      }
    };
    double t[2] = {0, 0};
    for (int mode = 0; mode < 2; ++mode) {
      for (int i = 0; i < 3; ++i) mode == 0 ? raw_once() : channel_once();
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) mode == 0 ? raw_once() : channel_once();
      MPI_Barrier(MPI_COMM_WORLD);
      t[mode] = seconds(t0);
    }
    const double raw_gbs = static_cast<double>(bytes) * iters / t[0] / 1e9;
    const double ch_gbs = static_cast<double>(bytes) * iters / t[1] / 1e9;
    const bool from_scenario = scenario_sizes.count(bytes) != 0;
    const bool met = ch_gbs >= kTarget * raw_gbs;
    scenario_rows += from_scenario;
    scenario_met += from_scenario && met;
    if (rank == 0)
      fmt::print("{:>12}  {:>12.2f}  {:>14.2f}  {:>7.1f}%  {} {}\n", bytes, raw_gbs, ch_gbs,
                 100 * ch_gbs / raw_gbs, from_scenario ? "scenario" : "fixed   ",
                 met ? "met" : "NOT MET");
  }
  if (rank == 0)
    fmt::print("target (channel >= 90% of raw) met at {} of {} scenario payload sizes measured\n",
               scenario_met, scenario_rows);
  cudaFree(dev);
  ncclCommDestroy(raw);
  return 0;  // the channel, then MPI (MpiWorld), are finalised on the way out
}

}  // namespace
}  // namespace splitcheck

int main(int argc, char** argv) { return splitcheck::run(argc, argv); }
