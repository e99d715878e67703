// `splitcheck sweep --ranks N`: starts `mpirun -np N` on this binary itself and supervises
// it, so that the shell sees the verdict's exit code whatever happened to the ranks.
//
// Why not plain `mpirun`: OpenMPI 4's mpirun kills every rank as soon as one dies, so rank
// 0 cannot report (the shell sees 137); with `--enable-recovery` rank 0 survives and
// reports, but mpirun then returns 0 whatever any rank returned (even every rank exiting 3,
// or rank 0 calling MPI_Abort(3)). So the launcher runs `mpirun --enable-recovery` in a
// process group of its own, and rank 0 hands it its exit code through a file in a
// directory they share (kRanksDirEnv). The launcher exits with that code; with none (rank
// 0 died, or mpirun ended first) it exits 3 naming how mpirun ended. Either way it kills
// the process group before it returns, so no rank, mpirun or child is left behind.
#pragma once

#include <string>
#include <vector>

namespace splitcheck {

// The directory `sweep --ranks` shares with its ranks: each rank writes rank<r>.pid when it
// starts, rank 0 writes `verdict` (its exit code) before it finalises or aborts.
inline constexpr const char* kRanksDirEnv = "SPLITCHECK_RANKS_DIR";

// Whether this process is a rank that `sweep --ranks` launched.
bool launched_by_ranks();
// Rank `rank`'s start, recorded for the launcher and for rank 0 (no-op outside --ranks).
void record_rank_started(int rank);
// Rank 0's exit code, recorded for the launcher (no-op outside --ranks).
void record_verdict(int exit_code);
// Rank 0, when the MPI job did not start in time: which of ranks 1..size-1 never started,
// ended, or still run without having joined (from their pid files); "" outside --ranks.
std::string ranks_not_joined(int size);

// Runs `mpiexec --enable-recovery --oversubscribe -np <ranks> <this binary> <args>` in its
// own process group and returns the verdict's exit code as described above. `grace_s`:
// how long mpirun may take to end once rank 0 gave its verdict.
int launch_ranks(const std::string& mpiexec, int ranks, const std::vector<std::string>& args,
                 double grace_s = 10);

}  // namespace splitcheck
