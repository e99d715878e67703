#include "harness/cli/sweep_cli.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include "harness/verdict/sweep.h"
#include "reports/report.h"
#if SPLITCHECK_HAVE_MPI
#include <mpi.h>

#include "harness/transport/mpi_transport.h"
#endif
#if SPLITCHECK_HAVE_NCCL
#include "harness/transport/nccl_channel.h"
#endif

namespace splitcheck {
namespace {

// This machine's name, for the console line that says where stages ran.
std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 && name[0] != '\0' ? name : "this machine";
}

}  // namespace

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
      ->add_option("--reuse", reuse,
                   "Layer reuse by content: on (a stage's layer call whose inputs, weights as "
                   "loaded included, equal a PP=1 call's takes PP=1's outcome), off (compute "
                   "everything), verify (compute everything and check every hit is equal)")
      ->check(CLI::IsMember({"on", "off", "verify"}));
  command
      ->add_option("--transport", transport,
                   "Where the stages run, overriding the scenario's transport: inproc (threads "
                   "of this process) or mpi (one process per stage: launch with mpirun -np "
                   "<stages>; rank 0 sweeps and reports), nccl (as mpi, the payload sent by "
                   "NCCL between one GPU per rank)")
      ->check(CLI::IsMember({"inproc", "mpi", "nccl"}));
  command->add_option("--transport-timeout", transport_timeout,
                      "Seconds a receive between stage processes waits before the rank that "
                      "should have sent is reported lost (default 120)");
  command->add_flag("--progress", progress, "Print a progress line on stderr");
  command->add_option("--reuse-memory", reuse_memory_mib,
                      "MiB of PP=1 layer outcomes kept for reuse (default 1024); past it, the "
                      "stages compute the calls PP=1 did not keep; 0: no bound");
  command->add_flag("--self-check", self_check,
                    "Run PP=1 twice before judging any split point; if PP=1 does not reproduce "
                    "itself, judge nothing, name the first difference and exit 4");
  command->add_option("--waivers", waivers,
                      "Waiver file (JSON): known divergences with reason, link and expiry; a "
                      "covered split point is reported as waived, an expired waiver fails");
}

int SweepCli::run() {
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
  SweepOptions opts;
  opts.threads = threads;
  opts.filter = filter;
  opts.progress = progress || isatty(STDERR_FILENO) != 0;
  opts.reuse = *parse_reuse_mode(reuse);
  opts.reuse_memory_bytes = reuse_memory_mib << 20;
  opts.self_check = self_check;
  if (!shard.empty()) {
    int i = -1, n = -1;
    if (std::sscanf(shard.c_str(), "%d/%d", &i, &n) != 2 || n < 1 || i < 0 || i >= n) {
      fmt::print(stderr, "splitcheck: error: --shard {}: expected i/N with 0 <= i < N\n", shard);
      return 2;
    }
    opts.shard_index = i;
    opts.shard_count = n;
  }
#if SPLITCHECK_HAVE_MPI
  if (s->transport == "mpi" || s->transport == "nccl") {
    Result<std::unique_ptr<MpiWorld>> world = MpiWorld::init(nullptr, nullptr);
    if (!world.is_ok()) {
      fmt::print(stderr, "splitcheck: error: {}\n", world.status().message());
      return 3;
    }
    (*world)->timeout_s = transport_timeout;
#if SPLITCHECK_HAVE_NCCL
    if (s->transport == "nccl") {
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
    if ((*world)->rank() != 0)
      return serve_stage_rank(*s, **world, effective_reuse(*s, opts.reuse),
                              opts.reuse_memory_bytes);
    MpiFactory factory(**world);
    opts.transport = &factory;
    stages_line_ = fmt::format(
        "transport: {} (stages on MPI ranks 0-{} of {} processes, rank 0 on {}; payloads {})",
        s->transport, (*world)->size() - 1, (*world)->size(), host_name(),
        s->transport == "nccl" ? "by NCCL between the ranks' GPUs" : "as MPI messages");
    const int code = sweep_and_report(*s, opts);
    (*world)->finish(factory.lost(), code);
    return code;
  }
#endif
  stages_line_ = fmt::format("transport: {} (every stage a thread of this process on {})",
                             s->transport.empty() ? "inproc" : s->transport, host_name());
  return sweep_and_report(*s, opts);
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
  if (r->self_check.ran)
    fmt::print("self-check: PP=1 reproduced itself ({} datasets bit-identical, {:.2f} s)\n",
               r->self_check.datasets_compared, r->self_check.seconds);
  fmt::print("sweep {} ({} split points, faults: {})\n", s->name, r->cases.size(),
             s->faults.empty() ? "none" : fmt::format("{}", fmt::join(s->faults, ", ")));
  if (!stages_line_.empty()) fmt::print("{}\n", stages_line_);
  for (const CaseResult& c : r->cases) {
    fmt::print("  {:<16} {:<16} {}\n", c.key, verdict_name(c.verdict), c.message);
    for (const Waiver& w : c.waivers)
      fmt::print("  {:<16} {:<16} {} ({}, expires {}; {})\n", "", "", w.reason, w.link, w.expires,
                 w.where);
  }
  fmt::print("checks: {}\n", fmt::join(r->checks, ", "));
  fmt::print("summary: {} pass, {} diverged, {} config-rejected, {} error, {} skipped, {} waived\n",
             r->count(Verdict::kPass), r->count(Verdict::kDiverged),
             r->count(Verdict::kConfigRejected), r->count(Verdict::kError),
             r->count(Verdict::kSkipped), r->count(Verdict::kWaived));
  for (const std::string& f : r->waiver_failures) fmt::print("waiver: EXPIRED: {}\n", f);
  fmt::print("time: PP=1 {:.2f} s, sweep {:.2f} s on {} threads ({:.1f} PP=1 runs)\n",
             r->pp1_seconds, r->total_seconds, r->threads,
             r->total_seconds / std::max(1e-9, r->pp1_seconds));
  fmt::print("reuse: {}\n", reuse_line(reuse_json(r->reuse)));
  if (r->pp1_acceptance.speculative) {
    const AcceptanceFigures& a = r->pp1_acceptance;
    int equal = 0;
    for (const CaseResult& c : r->cases) {
      equal += same_acceptance(c.acceptance, a);
    }
    fmt::print(
        "speculative ({}, gamma {}, departure rate {}): PP=1 {} steps, mean accepted length "
        "{:.3f}, acceptance rate {:.3f}, tokens per forward {:.3f}, accepted lengths [{}], GSM8K "
        "strict {}/{}, flexible {}/{}; {} of {} split points with the same acceptance\n",
        s->speculative.method, s->speculative.gamma, s->speculative.departure_rate, a.steps,
        a.mean_accepted, a.acceptance_rate, a.tokens_per_forward,
        histogram_text(a.accepted_histogram), a.strict_correct, a.prompts, a.flexible_correct,
        a.prompts, equal, r->cases.size());
  }
  if (r->batch_invariance.checked) {
    // SPEC 3.4: every request against itself served alone, and the request x split view.
    fmt::print("serving: {} of {} requests equal themselves served alone at PP=1{}\n",
               r->batch_invariance.identical, r->batch_invariance.requests,
               r->batch_invariance.required
                   ? ""
                   : fmt::format(" (measured: backend {} is not batch-invariant)", s->backend));
    for (const CaseResult& c : r->cases)
      if (!c.diverged_requests.empty())
        fmt::print("  {}: requests diverged: {}\n", c.key, fmt::join(c.diverged_requests, ", "));
  }
  for (const std::string& f : r->expect_failures) fmt::print("expect: NOT MET: {}\n", f);
  if (!report_dir.empty()) {
    ReportContext ctx{command_line};
    Status st = write_reports(report_dir, sweep_report(*r, ctx));
    if (!st.is_ok()) {
      fmt::print(stderr, "splitcheck: error: {}\n", st.message());
      return 3;
    }
    fmt::print("report: {}/report.json\n", report_dir);
  }
  if (r->conformant() && !r->expect_failures.empty())
    fmt::print("result: every split point passed, but the scenario's expect is not met\n");
  return r->exit_code();
}

}  // namespace splitcheck
