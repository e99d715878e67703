#include "harness/cli/sweep_cli.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "harness/cli/external_cli.h"
#include "harness/engine/generation.h"
#include "harness/reports/console.h"
#include "harness/reports/report.h"
#include "harness/runner/interrupt.h"
#include "harness/sweep/sweep.h"
#include "harness/transport/rank_launcher.h"
#if SPLITCHECK_HAVE_MPI
#include <mpi.h>

#include "harness/transport/mpi_transport.h"
#endif
#if SPLITCHECK_HAVE_NCCL
#include "harness/transport/nccl_channel.h"
#endif

namespace splitcheck {
void SweepCli::add_to(CLI::App& app) {
  scenario = std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/default.json";
  command = app.add_subcommand("sweep",
                               "Run PP=1 and every split point of a scenario, compare bit for bit");
  command->add_option("scenario", scenario, "Scenario JSON (default: the embedded default)");
  command->add_option("--report", report_dir,
                      "Directory for report.json, report.html, junit.xml, summary.md");
  command->add_option("--threads", threads, "Split points run at once (default: one per core)");
  command->add_option("--shard", shard, "Run share i of N of the split points, as i/N");
  command->add_option("--filter", filter, "Run only split points whose key contains this");
  command
      ->add_option("--transport", transport,
                   "Where the stages run, overriding the scenario's transport: inproc (threads "
                   "of this process) or mpi (one process per stage: launch with mpirun -np "
                   "<stages>; rank 0 sweeps and reports), nccl (as mpi, the payload sent by "
                   "NCCL between one GPU per rank)")
      ->check(CLI::IsMember({"inproc", "mpi", "nccl"}));
  command
      ->add_option("--ranks", ranks,
                   "Run the stages as N processes: starts `mpirun -np N` on this binary (the "
                   "transport mpi unless --transport nccl), supervises it, and exits with the "
                   "verdict's code also when a rank dies; no process is left behind")
      ->check(CLI::Range(1, 4096));
  command->add_option("--transport-timeout", transport_timeout,
                      "Seconds a receive between stage processes, or their setup (MPI_Init, "
                      "each rank's hello), waits before the rank that should have sent is "
                      "reported lost (default 120)");
  command->add_flag("--progress", progress, "Print a progress line on stderr");
  command->add_flag("--self-check", self_check,
                    "Run PP=1 twice before judging any split point; if PP=1 does not reproduce "
                    "itself, judge nothing, name the first difference and exit 4");
  command->add_option("--jobs", jobs,
                      "External engines: engine runs at once (default: --threads, one per core)");
  command->add_option("--work-dir", work_dir,
                      "External engines: directory for the dumps and each run's stdout/stderr "
                      "(default: <report>/runs, else a new directory under $TMPDIR, removed at "
                      "the end unless --keep-runs); one sweep at a time: a sweep given a work "
                      "directory another sweep or bisect holds is refused (exit 2)");
  command->add_flag("--keep-runs", keep_runs,
                    "External engines: keep the work directory made under $TMPDIR");
  command->add_option("--waivers", waivers,
                      "Waiver file (JSON): known divergences with reason, link and expiry; a "
                      "covered split point is reported as waived, an expired waiver fails");
}

int SweepCli::run() {
  if (ranks > 0) return launch();
  const int code = run_here();
  // Every way rank 0 ends without MPI_Abort (invalid input, say) reaches the launcher too.
  const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (env_rank == nullptr || std::string(env_rank) == "0") record_verdict(code);
  return code;
}

namespace {

// --shard i/N into `index` and `count` (0 and 1 when not given); false, having said why,
// when it is not i/N with 0 <= i < N.
bool parse_shard(const std::string& shard, int& index, int& count) {
  index = 0;
  count = 1;
  if (shard.empty()) return true;
  int i = -1, n = -1;
  if (std::sscanf(shard.c_str(), "%d/%d", &i, &n) != 2 || n < 1 || i < 0 || i >= n) {
    fmt::print(stderr, "splitcheck: error: --shard {}: expected i/N with 0 <= i < N\n", shard);
    return false;
  }
  index = i;
  count = n;
  return true;
}

}  // namespace

int SweepCli::run_here() {
  Result<Scenario> s = load_scenario(scenario);
  if (!s.is_ok()) {
    fmt::print(stderr, "splitcheck: error: {}\n", s.status().message());
    return s.status().code() == StatusCode::kInvalidInput ? 2 : 3;
  }
  if (!transport.empty()) {
    s->transport = transport;
    const Status st = check_capabilities(*s, "--transport");
    if (!st.is_ok()) {
      fmt::print(stderr, "splitcheck: error: {}\n", st.message());
      return 2;
    }
  }
  if (!waivers.empty()) {
    Result<std::vector<Waiver>> w = load_waivers(waivers);
    if (!w.is_ok()) {
      fmt::print(stderr, "splitcheck: error: {}\n", w.status().message());
      return 2;
    }
    waiver_list_ = std::move(*w);
  }
  int shard_index = 0, shard_count = 1;
  if (!parse_shard(shard, shard_index, shard_count)) return 2;
  if (s->external) return run_external(*s, shard_index, shard_count);
  SweepOptions opts;
  opts.threads = threads;
  opts.filter = filter;
  opts.progress = progress || isatty(STDERR_FILENO) != 0;
  opts.self_check = self_check;
  opts.shard_index = shard_index;
  opts.shard_count = shard_count;
#if SPLITCHECK_HAVE_MPI
  if (s->transport == "mpi" || s->transport == "nccl") return run_on_ranks(*s, opts);
#endif
  return sweep_and_report(*s, opts);
}

int SweepCli::run_external(const Scenario& s, int shard_index, int shard_count) {
  ExternalSweepOptions ext;
  ext.jobs = jobs > 0 ? jobs : threads;
  ext.filter = filter;
  ext.work_dir = work_dir.empty() && !report_dir.empty() ? report_dir + "/runs" : work_dir;
  ext.progress = progress || isatty(STDERR_FILENO) != 0;
  ext.keep_runs = keep_runs;
  ext.self_check = self_check;
  ext.shard_index = shard_index;
  ext.shard_count = shard_count;
  // SIGINT, SIGTERM, SIGHUP stop every engine; the report of what finished is written.
  const InterruptWatch watch;
  return external_sweep_and_report(s, ext, report_dir, command_line, waiver_list_);
}

#if SPLITCHECK_HAVE_MPI
int SweepCli::run_on_ranks(const Scenario& s, SweepOptions& opts) {
  // OpenMPI 4's mpirun --enable-recovery returns 0 whatever the ranks return
  // (rank_launcher.h): its exit status would say pass for any verdict.
  const char* recovery = std::getenv("OMPI_MCA_orte_enable_recovery");
  if (recovery != nullptr && std::string(recovery) == "1" && !launched_by_ranks()) {
    if (std::getenv("OMPI_COMM_WORLD_RANK") == nullptr ||
        std::string(std::getenv("OMPI_COMM_WORLD_RANK")) == "0")
      fmt::print(stderr,
                 "splitcheck: error: mpirun --enable-recovery exits 0 whatever the verdict; "
                 "run `splitcheck sweep --ranks N ...` (it starts mpirun itself and exits with "
                 "the verdict's code, also when a rank dies)\n");
    return 2;
  }
  const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  record_rank_started(env_rank != nullptr ? std::atoi(env_rank) : 0);
  Result<std::unique_ptr<MpiWorld>> world = MpiWorld::init(transport_timeout);
  if (!world.is_ok()) {
    fmt::print(stderr, "splitcheck: error: {}\n", world.status().message());
    return 3;
  }
  if ((*world)->rank() != 0 && !(*world)->setup_failure().empty()) {
    fmt::print(stderr, "splitcheck: error: rank {}: {}; exiting\n", (*world)->rank(),
               (*world)->setup_failure());
    std::fflush(stderr);
    ::_exit(3);
  }
#if SPLITCHECK_HAVE_NCCL
  if (s.transport == "nccl" && (*world)->setup_failure().empty()) {
    Result<std::unique_ptr<PayloadChannel>> nccl = make_nccl_channel(**world);
    if (!nccl.is_ok() && nccl.status().code() == StatusCode::kInvalidInput) {
      // Every rank refused alike (nccl_channel.h): rank 0 says why, all exit 2.
      if ((*world)->rank() == 0)
        fmt::print(stderr, "splitcheck: error: {}: {}\n", scenario, nccl.status().message());
      return 2;
    }
    if (!nccl.is_ok()) {
      fmt::print(stderr, "splitcheck: error: {}\n", nccl.status().message());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    (*world)->channel = std::move(*nccl);
  }
#endif
  (*world)->greet(s.backend);
  if ((*world)->rank() != 0) return serve_stage_rank(s, **world);
  MpiFactory factory(**world);
  opts.transport = &factory;
  const int code = sweep_and_report(s, opts);
  record_verdict(code);
  (*world)->finish(factory.lost(), code);
  return code;
}
#else
int SweepCli::run_on_ranks(const Scenario&, SweepOptions&) { return 3; }  // never called
#endif

int SweepCli::launch() {
  if (std::getenv("OMPI_COMM_WORLD_RANK") != nullptr) {
    fmt::print(stderr, "splitcheck: error: --ranks starts mpirun itself; run it without mpirun\n");
    return 2;
  }
#ifndef SPLITCHECK_MPIEXEC
  fmt::print(stderr,
             "splitcheck: error: --ranks needs the mpi transport, and this build has none "
             "(configure with -DSPLITCHECK_MPI=ON)\n");
  return 2;
#else
  std::vector<std::string> rank_args;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--ranks") {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind("--ranks=", 0) == 0) continue;
    rank_args.push_back(args[i]);
  }
  // The ranks run the scenario's transport when it has one of processes, else mpi.
  if (transport.empty()) {
    std::ifstream in(scenario);
    const nlohmann::json spec = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    const std::string named = spec.is_object() ? spec.value("transport", "") : "";
    if (named != "mpi" && named != "nccl")
      rank_args.insert(rank_args.end(), {"--transport", "mpi"});
  }
  return launch_ranks(SPLITCHECK_MPIEXEC, ranks, rank_args);
#endif
}

int SweepCli::sweep_and_report(const Scenario& scenario_in, SweepOptions& opts) {
  const Scenario* s = &scenario_in;
  Result<SweepResult> r = run_sweep(*s, opts);
  if (!r.is_ok()) {
    fmt::print(stderr, "splitcheck: error: {}\n", r.status().message());
    return r.status().code() == StatusCode::kInvalidInput ? 2 : 3;
  }
  if (r->refused_to_judge()) {
    // Exit 4: the reference is not reproducible here, so no split point can be judged. The
    // report (verdict "refused", no cases) says so and names the first difference.
    fmt::print(stderr,
               "splitcheck: error: self-check: PP=1 of {} does not reproduce itself ({} of {} "
               "datasets differ between two runs); first difference: {}; no split point judged\n",
               scenario, r->self_check.datasets_differing, r->self_check.datasets_compared,
               r->self_check.first_difference);
    if (!report_dir.empty()) {
      const Status st = write_reports(report_dir, sweep_report(*r, ReportContext{command_line}));
      if (!st.is_ok()) {
        fmt::print(stderr, "splitcheck: error: {}\n", st.message());
        return 3;
      }
      fmt::print("report: {}/report.json (refused: nothing judged)\n", report_dir);
    }
    return r->exit_code();
  }
  apply_waivers(waiver_list_, utc_today(), *r);
  const nlohmann::json report = sweep_report(*r, ReportContext{command_line});
  fmt::print("{}", render_console(report));
  if (!report_dir.empty()) {
    Status st = write_reports(report_dir, report);
    if (!st.is_ok()) {
      fmt::print(stderr, "splitcheck: error: {}\n", st.message());
      return 3;
    }
    fmt::print("report: {}/report.json\n", report_dir);
  }
  return r->exit_code();
}

}  // namespace splitcheck
