// Payload bandwidth of the nccl transport between two GPUs: the channel's device path, as
// the stages use it with backend cuda (the body by one ncclSend straight from a device
// tensor, ncclRecv into the receiver's reused device buffer, with the announcement in hand:
// PayloadChannel::send/receive, what MpiTransport and the stage ranks call) against a
// plain ncclSend/ncclRecv of the same payload's bytes (header + body) between device
// buffers, in the same run. The raw receive knows its byte count from the loop; the
// channel's receiver holds the payload's announcement (the body's size, its form and the
// header), which in the transport rides the job envelope's MPI message, a message every
// job sends whatever carries its payload; here it is handed over once per size, untimed.
// A second figure, per job, charges that message to both sides: an MPI message of a job
// envelope then the raw transfer, against the framed job message (envelope +
// announcement, frame_job_message) then the channel's transfer, the receiver reading the
// announcement out of the message it got. Each figure is the median of 3 rounds, the
// modes alternating. Before timing each size, the received header and body are compared
// byte for byte with what was sent. The sizes are every size the given scenarios'
// payloads have (every cut, one token, a verify block, a whole prompt), then 1, 4, 16, 64
// and 256 MiB.
//   mpirun -np 2 nccl_payload_bench scenarios/default.json ...
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <span>

#include "harness/engine/handoff.h"
#include "harness/engine/stage_job.h"
#include "harness/scenario/capabilities.h"
#include "harness/transport/nccl_channel.h"

namespace splitcheck {
namespace {

int cdiv(int a, int b) { return (a + b - 1) / b; }

// The payload sent at cut `cut` for `tokens` tokens: its header's bytes and its body's.
struct Split {
  size_t header = 0, body = 0;
};
Split payload_split(const Scenario& s, int cut, int64_t tokens) {
  std::vector<int32_t> ids;
  const int64_t h = s.model.hidden_size, rows = cdiv(cut, s.model.attn_res_block_size);
  for (int k : s.capture_ids)
    if (k <= cut) ids.push_back(k);
  return Split{encode_payload_header(0, tokens, h, rows, ids).size(),
               payload_body_bytes(tokens, h, rows, ids.size())};
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(int argc, char** argv) {
  (void)argc, (void)argv;
  Result<std::unique_ptr<MpiWorld>> world = MpiWorld::init(/*timeout_s=*/300);
  if (!world.is_ok() || !(*world)->setup_failure().empty() || (*world)->size() != 2) {
    fmt::print(stderr, "nccl_payload_bench: run under mpirun -np 2\n");
    return 2;
  }
  MpiWorld& w = **world;
  const int rank = w.rank();
  if (const std::string why = find_capability("transport", "nccl")->unavailable(); !why.empty()) {
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

  std::map<size_t, Split> sizes;  // by the whole payload's bytes
  std::set<size_t> scenario_sizes;
  for (int i = 1; i < argc; ++i) {
    Result<Scenario> s = load_scenario(argv[i]);
    if (!s.is_ok()) {
      if (rank == 0) fmt::print(stderr, "nccl_payload_bench: {}\n", s.status().message());
      continue;
    }
    const int64_t prompt = s->workload.max_prompt_tokens > 0 ? s->workload.max_prompt_tokens : 256;
    std::map<size_t, Split> mine;
    for (int cut = 1; cut < s->model.num_hidden_layers; ++cut)
      for (int64_t t : {int64_t{1}, int64_t{s->speculative.gamma + 1}, prompt}) {
        const Split sp = payload_split(*s, cut, t);
        mine[sp.header + sp.body] = sp;
      }
    if (rank == 0)
      fmt::print("{}: {} payload sizes, {} to {} bytes\n", argv[i], mine.size(),
                 mine.begin()->first, mine.rbegin()->first);
    // Every one of them.
    for (const auto& [b, sp] : mine) {
      sizes[b] = sp;
      scenario_sizes.insert(b);
    }
  }
  // The fixed sizes: a payload of no taps (a 44-byte header) and an even body.
  for (size_t b = size_t{1} << 20; b <= (size_t{256} << 20); b <<= 2)
    if (!sizes.count(b)) sizes[b] = Split{44, b - 44};
  // The target: the channel at 90% of raw or more at every payload size a scenario makes.
  constexpr double kTarget = 0.90;
  int scenario_rows = 0, scenario_met = 0, fixed_rows = 0, fixed_met = 0;

  void* dev = nullptr;
  cudaMalloc(&dev, sizes.rbegin()->first);
  // The sender's body: a device tensor as a stage builds it (managed memory, on the GPU).
  const size_t largest_body = [&] {
    size_t m = 0;
    for (const auto& [b, sp] : sizes) m = std::max(m, sp.body);
    return m;
  }();
  Tensor body_buffer;
  try {
    body_buffer =
        Tensor::zeros(DType::kBF16, {static_cast<int64_t>(largest_body / 2)}, Device::kCuda);
  } catch (const std::exception& e) {
    fmt::print(stderr,
               "nccl_payload_bench: rank {}: no device tensors ({}); build with "
               "-DSPLITCHECK_CUDA=ON\n",
               rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  // A job envelope as the stages send it (its size matters, not its fields).
  const std::vector<std::byte> envelope = encode_job_envelope(StageJob());
  constexpr int kJobTag = 7;
  if (rank == 0)
    fmt::print("{:>12}  {:>10}  {:>12}  {:>14}  {:>8}  {:>8}  {}\n", "bytes", "header", "raw GB/s",
               "channel GB/s", "ratio", "per job", "size from / target 90% / bytes");
  int job_met = 0;
  bool all_checked = true;
  for (const auto& [bytes, split] : sizes) {
    const int iters = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / bytes, 5, 500));
    const Tensor body = body_buffer.rows(0, static_cast<int64_t>(split.body / 2));
    std::vector<std::byte> header(split.header);
    for (size_t i = 0; i < header.size(); ++i) header[i] = std::byte(i * 7 + bytes);
    const int pattern = static_cast<int>((bytes * 31 + 1) & 0xff);
    if (rank == 0) {
      cudaMemset(body_buffer.address(), pattern, split.body);
      cudaDeviceSynchronize();
    }
    auto raw_once = [&] {
      if (rank == 0)
        ncclSend(dev, bytes, ncclUint8, 1, raw, stream);
      else
        ncclRecv(dev, bytes, ncclUint8, 0, raw, stream);
      cudaStreamSynchronize(stream);
    };
    // The announcement, handed over once (rank 1 holds what rank 0 announced).
    std::vector<std::byte> announcement = (*channel)->announce(header, body);
    {
      Status st = rank == 0 ? mpi_send_bytes(1, kJobTag, announcement, w.timeout_s) : Status::ok();
      if (rank == 1) {
        Result<std::vector<std::byte>> got = mpi_receive_bytes(0, kJobTag, w.timeout_s);
        st = got.status();
        if (got.is_ok()) announcement = std::move(*got);
      }
      if (!st.is_ok()) MPI_Abort(MPI_COMM_WORLD, 3);
    }
    // Returns the received payload on rank 1 (the body a view of the channel's buffer).
    auto channel_receive = [&](const std::vector<std::byte>& ann) -> ChannelPayload {
      Result<ChannelPayload> got = (*channel)->receive(0, ann, w.timeout_s, 0);
      if (!got.is_ok() || got->bytes.size() != split.header || got->body.nbytes() != split.body)
        MPI_Abort(MPI_COMM_WORLD, 3);
      return std::move(*got);
    };
    auto channel_once = [&]() -> ChannelPayload {
      if (rank == 0) {
        if (!(*channel)->send(1, header, body, w.timeout_s, {}).is_ok())
          MPI_Abort(MPI_COMM_WORLD, 3);
        return {};
      }
      return channel_receive(announcement);
    };
    // Per job: the MPI message every job sends, then the payload's transfer.
    const std::vector<std::byte> framed = frame_job_message(envelope, {announcement});
    auto job_raw_once = [&] {
      if (rank == 0) {
        if (!mpi_send_bytes(1, kJobTag, envelope, w.timeout_s).is_ok())
          MPI_Abort(MPI_COMM_WORLD, 3);
      } else if (!mpi_receive_bytes(0, kJobTag, w.timeout_s).is_ok()) {
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
      raw_once();
    };
    auto job_channel_once = [&] {
      if (rank == 0) {
        if (!mpi_send_bytes(1, kJobTag, framed, w.timeout_s).is_ok() ||
            !(*channel)->send(1, header, body, w.timeout_s, {}).is_ok())
          MPI_Abort(MPI_COMM_WORLD, 3);
        return;
      }
      Result<std::vector<std::byte>> message = mpi_receive_bytes(0, kJobTag, w.timeout_s);
      Result<JobMessage> parts =
          message.is_ok() ? unframe_job_message(*message) : Result<JobMessage>(message.status());
      if (!parts.is_ok() || parts->announcements.size() != 1) MPI_Abort(MPI_COMM_WORLD, 3);
      (void)channel_receive(parts->announcements.front());
    };
    // The bytes, once, before timing: the header and every body byte as sent.
    bool checked = true;
    {
      ChannelPayload got = channel_once();
      if (rank == 1) {
        const Tensor host = got.body.to(Device::kCpu);
        checked = got.bytes == header;
        for (std::byte v : std::span<const std::byte>(host.bytes(), host.nbytes()))
          checked = checked && v == std::byte(pattern);
        if (!checked)
          fmt::print(stderr, "nccl_payload_bench: {} bytes: received bytes differ from sent\n",
                     bytes);
      }
      int ok = checked ? 1 : 0, all = 0;
      MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      checked = all == 1;
      all_checked = all_checked && checked;
    }
    // Modes: raw, channel, raw per job, channel per job; 3 rounds, modes alternating.
    constexpr int kModes = 4, kRounds = 3;
    auto once = [&](int mode) {
      if (mode == 0) raw_once();
      if (mode == 1) (void)channel_once();
      if (mode == 2) job_raw_once();
      if (mode == 3) job_channel_once();
    };
    std::vector<double> times[kModes];
    for (int round = 0; round < kRounds; ++round)
      for (int mode = 0; mode < kModes; ++mode) {
        for (int i = 0; i < 3; ++i) once(mode);
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) once(mode);
        MPI_Barrier(MPI_COMM_WORLD);
        times[mode].push_back(seconds(t0));
      }
    double t[kModes];
    for (int mode = 0; mode < kModes; ++mode) {
      std::sort(times[mode].begin(), times[mode].end());
      t[mode] = times[mode][kRounds / 2];
    }
    const double raw_gbs = static_cast<double>(bytes) * iters / t[0] / 1e9;
    const double ch_gbs = static_cast<double>(bytes) * iters / t[1] / 1e9;
    const double job_ratio = t[2] / t[3];
    const bool from_scenario = scenario_sizes.count(bytes) != 0;
    const bool met = ch_gbs >= kTarget * raw_gbs;
    scenario_rows += from_scenario;
    scenario_met += from_scenario && met;
    fixed_rows += !from_scenario;
    fixed_met += !from_scenario && met;
    job_met += from_scenario && job_ratio >= kTarget;
    if (rank == 0)
      fmt::print("{:>12}  {:>10}  {:>12.2f}  {:>14.2f}  {:>7.1f}%  {:>7.1f}%  {} {} {}\n", bytes,
                 split.header, raw_gbs, ch_gbs, 100 * ch_gbs / raw_gbs, 100 * job_ratio,
                 from_scenario ? "scenario" : "fixed   ", met ? "met    " : "NOT MET",
                 checked ? "bytes-equal" : "BYTES-DIFFER");
  }
  if (rank == 0) {
    fmt::print(
        "path: device bodies (the split payload's body sent from and received into "
        "device memory, one ncclSend a payload; its size and header announced in the job "
        "message)\n");
    fmt::print("target (channel >= 90% of raw) met at {} of {} fixed sizes (1-256 MiB)\n",
               fixed_met, fixed_rows);
    fmt::print("bytes: {}\n", all_checked ? "every size received as sent"
                                          : "SOME SIZE RECEIVED OTHER BYTES THAN SENT");
  }
  if (rank == 0)
    fmt::print("target (channel >= 90% of raw) met at {} of {} scenario payload sizes measured\n",
               scenario_met, scenario_rows);
  if (rank == 0)
    fmt::print(
        "per job (job message + channel vs envelope message + raw) >= 90% at {} of {} scenario "
        "payload sizes\n",
        job_met, scenario_rows);
  cudaFree(dev);
  ncclCommDestroy(raw);
  body_buffer = Tensor();
  return all_checked ? 0 : 1;  // the channel, then MPI (MpiWorld), are finalised on the way out
}

}  // namespace
}  // namespace splitcheck

int main(int argc, char** argv) { return splitcheck::run(argc, argv); }
