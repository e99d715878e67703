// The `mpi` transport: one OS process per stage, launched by mpirun. Rank 0 drives: it
// runs PP=1, holds stage 0 and the generation loop, compares and reports; rank r >= 1
// holds stage r and serves jobs (serve_stage_rank). The ranks are persistent: rank 0
// re-partitions them per split point (a Build command carrying the stage ranges), so the
// processes start and each rank builds its weight source once per sweep, not once per
// split; every stage computes every call of its layers.
//
// On the wire every message is bytes: commands and replies between rank 0 and a stage
// rank; between consecutive stages one message of a job envelope (stage_job.h) and the
// payload channel's announcement of each of the job's handoff payloads (job_payloads: a
// forward's one, a serving step's one a segment, alike; over `mpi`, the payload itself:
// the same bytes inproc hands over, checked by the receiving stage the same way; over
// `nccl`, its size and header, the body following by ncclSend);
// the last stage sends its envelope (per-layer records, dispatch events, taps, logits)
// back to rank 0. Every receive and send polls with a deadline: a rank that died or hangs
// becomes a failing status naming the rank, the stage and the split point, never a hang.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "harness/engine/transport.h"
#include "harness/scenario/scenario.h"

namespace splitcheck {

// A payload as a channel delivers it: the whole payload's bytes, or, on the device path,
// only its header with the body beside it (handoff.h's split form).
struct ChannelPayload {
  std::vector<std::byte> bytes;
  Tensor body;  // empty unless split
};

// How the handoff payload travels between consecutive stage ranks: as MPI bytes (`mpi`),
// or by NCCL send/recv between the ranks' GPUs (`nccl`, nccl_channel.h). The bytes are the
// same either way; the receiving stage checks them. A payload travels in two parts: the
// channel's announcement (announce()), which rides the job envelope's own MPI message (no
// message of its own), then whatever send() sends, which receive() takes with the
// announcement in hand.
class PayloadChannel {
 public:
  virtual ~PayloadChannel() = default;
  // What the receiver must hold before the rest of `payload` (with `body`, when not empty:
  // `payload` is then the header of a split payload) arrives: the mpi channel's is the
  // whole payload's bytes (nothing else travels); the nccl channel's the byte count that
  // follows, its form and a split payload's header.
  virtual std::vector<std::byte> announce(const std::vector<std::byte>& payload,
                                          const Tensor& body) = 0;
  // Sends to rank `to` what follows announce(payload, body), once the announcement left;
  // fails once `timeout_s` has passed. A channel that does not carry device bodies sends
  // header and body as the whole payload's bytes (the body copied to the host). While the
  // send waits on its peer it calls `meanwhile` (when given) between polls: rank 0 takes
  // in the last stage's results there, which that stage may be blocked sending while rank
  // 1 is still to take this payload (two serving steps in flight).
  virtual Status send(int to, const std::vector<std::byte>& payload, const Tensor& body,
                      double timeout_s, const std::function<void()>& meanwhile) = 0;
  // The payload from rank `from` that `announcement` announced; fails once `timeout_s` has
  // passed, or when the announcement is malformed. A job's payloads are received in order
  // into slots 0, 1, ...: a body received into a slot is valid until the next receive into
  // that slot (the channel may reuse its buffer), so a step's bodies stand side by side.
  virtual Result<ChannelPayload> receive(int from, const std::vector<std::byte>& announcement,
                                         double timeout_s, size_t slot) = 0;
  // Whether bodies travel from and to device memory (the stages then split their payloads,
  // Stage::set_device_payloads).
  virtual bool carries_device_bodies() const { return false; }
};

// The message between consecutive stage ranks: a job envelope (stage_job.h) and the
// channel's announcements of its payloads (one each, in job_payloads' order), framed as
// u64 envelope bytes, the envelope, u64 announcement count, then each announcement as u64
// bytes and its bytes.
std::vector<std::byte> frame_job_message(const std::vector<std::byte>& envelope,
                                         const std::vector<std::vector<std::byte>>& announcements);
// A job message split back into its envelope and announcements; a message shorter than its
// framing says, or with bytes past its last announcement, is refused (naming the lengths).
struct JobMessage {
  std::vector<std::byte> envelope;
  std::vector<std::vector<std::byte>> announcements;
};
Result<JobMessage> unframe_job_message(const std::vector<std::byte>& message);

// A split payload's header and body joined into the whole payload's bytes (the body copied
// to the host when it is on the device).
std::vector<std::byte> join_payload(const std::vector<std::byte>& header, const Tensor& body);

// Bytes to rank `to` under `tag`, polled with MPI_Test until the deadline.
Status mpi_send_bytes(int to, int tag, const std::vector<std::byte>& bytes, double timeout_s);
// The next bytes from rank `from` under `tag`, polled until the deadline.
Result<std::vector<std::byte>> mpi_receive_bytes(int from, int tag, double timeout_s);

// MPI_Init / MPI_Finalize for this process, and what the ranks share.
//
// Setup runs under the transport's deadline like every receive: MPI_Init (which waits for
// every rank to join) and each rank's hello to rank 0 (its pid, host and device). A rank
// that dies or hangs during setup does not hang rank 0: rank 0 records why in
// setup_failure(), the sweep's first split point fails with it (the rest are skipped), and
// the report is written as for a rank lost mid-sweep.
//
// Test-only fault hook: SPLITCHECK_TEST_KILL_RANK=<rank>:<point> makes that rank
// raise(SIGKILL) at a named point: `init` (before MPI_Init), `hello` (after MPI_Init,
// before its hello), `build-<k>` (on its k-th Build command: mid-sweep). The tests of
// tests/harness/mpi_sweep_test.cc kill ranks with it; nothing else sets it.
class MpiWorld {
 public:
  // Initialises MPI (thread support: serialized), waiting at most `timeout_s` for every
  // rank to join. Fails when MPI cannot start; a rank that did not join in time is not a
  // failure here but setup_failure() (rank 0 reports it; another rank exits 3).
  static Result<std::unique_ptr<MpiWorld>> init(double timeout_s);
  ~MpiWorld();
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Receives and sends give up after this many seconds (--transport-timeout).
  double timeout_s = 120;
  // Each rank >= 1 sends rank 0 its placement (its pid, host and device computing on
  // `backend`); rank 0 waits for every rank's under the deadline. Rank 0 keeps a failure in
  // setup_failure(); a rank >= 1 that cannot send exits 3.
  void greet(const std::string& backend);
  // Why the MPI job did not start (a rank did not join or did not say hello in time); empty
  // when it did.
  const std::string& setup_failure() const { return setup_failure_; }
  // Rank r's placement as its hello said (rank 0's own included); valid after greet().
  const std::vector<StagePlacement>& placements() const { return placements_; }
  // Rank 0, at the end of a sweep: tells every stage rank to quit and finalises; when a
  // rank was lost (`lost` non-empty), aborts the whole MPI job instead with `exit_code`,
  // so that no process is left behind (without MPI, when it never started: exits).
  void finish(const std::string& lost, int exit_code);
  // How payloads travel between stage ranks (MPI messages unless replaced).
  std::unique_ptr<PayloadChannel> channel;

 private:
  MpiWorld() = default;
  int rank_ = 0;
  int size_ = 1;
  bool initialized_ = false;  // MPI_Init returned in time
  bool finished_ = false;
  std::string setup_failure_;
  std::vector<StagePlacement> placements_;
};

// The test-only fault hook above: raises SIGKILL when SPLITCHECK_TEST_KILL_RANK names
// `rank` and `point`.
void test_kill_point(int rank, const std::string& point);

// Rank 0's factory: builds each partition's stages on ranks 0..pp-1.
class MpiFactory : public TransportFactory {
 public:
  explicit MpiFactory(MpiWorld& world) : world_(world) {}
  Result<std::unique_ptr<Transport>> connect(const std::vector<StageConfig>& stages,
                                             WeightSource& source) override;
  int max_stages() const override { return world_.size(); }
  // Stage s on rank s, as rank s's hello said.
  std::vector<StagePlacement> placement(int stages, const std::string& backend) const override;
  std::string lost() const override { return lost_; }
  // Records that a rank was lost (the first reason is kept).
  void mark_lost(const std::string& why) {
    if (lost_.empty()) lost_ = why;
  }
  MpiWorld& world() { return world_; }

 private:
  MpiWorld& world_;
  std::string lost_;
};

// Rank r >= 1: serves Build, Start, job, Stats, End, Ping and Quit messages until Quit.
// Returns the process's exit code (0 after Quit; 3 when rank 0 stopped talking).
int serve_stage_rank(const Scenario& scenario, MpiWorld& world);

}  // namespace splitcheck
