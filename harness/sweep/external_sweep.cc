#include "harness/sweep/external_sweep.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <span>

#include "harness/dump/digest.h"
#include "harness/dump/dump.h"
#include "harness/dump/printable.h"
#include "harness/dump/stage_facts.h"
#include "harness/dump/verify.h"
#include "harness/engine/run.h"
#include "harness/judge/judge.h"
#include "harness/judge/partition_evidence.h"
#include "harness/judge/stage_checks.h"
#include "harness/runner/engine_dump.h"
#include "harness/runner/engine_process.h"
#include "harness/runner/interrupt.h"
#include "harness/scenario/checks.h"
#include "harness/scenario/partition.h"
#include "harness/sweep/driver.h"

namespace splitcheck {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double elapsed_seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string make_work_dir(const std::string& requested) {
  if (!requested.empty()) return fs::absolute(requested).lexically_normal().string();
  const char* tmp = std::getenv("TMPDIR");
  std::string templ =
      std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/splitcheck-runs-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) return "";
  return templ;
}

// The work directory held by one sweep: an exclusive lock on <work>/.splitcheck-lock, taken
// for the sweep's life and released by the kernel however it ends.
class WorkDirLock {
 public:
  WorkDirLock() = default;
  WorkDirLock(const WorkDirLock&) = delete;
  WorkDirLock& operator=(const WorkDirLock&) = delete;
  ~WorkDirLock() {
    if (fd_ >= 0) close(fd_);
  }
  // Takes the lock, or says (invalid input, exit 2) that another sweep holds it.
  Status take(const std::string& dir) {
    const std::string path = dir + "/.splitcheck-lock";
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      return internal_error(fmt::format("{}: cannot create: {}", path, std::strerror(errno)));
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char holder[32] = {};
      const ssize_t n = pread(fd_, holder, sizeof holder - 1, 0);
      return invalid_input(fmt::format(
          "{}: the work directory is in use by another sweep or bisect (pid {}); give each its "
          "own --report or --work-dir",
          dir, n > 0 ? std::string(holder, static_cast<size_t>(n)) : "unknown"));
    }
    const std::string pid = std::to_string(getpid());
    if (ftruncate(fd_, 0) != 0 || pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
      // The pid only names the holder in the message above; the lock stands without it.
    }
    return Status::ok();
  }

 private:
  int fd_ = -1;
};

// Whether `path` (not followed, should it be a link) exists and was last modified in a
// second before `t` (whole seconds: some file systems keep no finer time).
bool modified_before(const std::string& path, time_t t) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 && st.st_mtim.tv_sec < t;
}

// "splitcheck got SIGINT (engine processes killed)".
std::string interrupt_line(int sig) {
  return fmt::format("splitcheck got SIG{} (engine processes killed)",
                     sig > 0 ? sigabbrev_np(sig) : "?");
}

// Removes the work directory made under $TMPDIR unless it was asked for or is to be kept.
void finish_work_dir(ExternalRunInfo& info, const ExternalSweepOptions& options) {
  if (!options.work_dir.empty() || options.keep_runs) return;
  std::error_code ec;
  fs::remove_all(info.work_dir, ec);
  info.work_dir += ec ? " (could not be removed: " + ec.message() + ")"
                      : " (removed at the end; --keep-runs keeps it)";
}

// The exit status an engine gives when it refuses the partition at configuration, with
// its reason at <out>.refusal (docs/external-engines.md, "Refusing a configuration").
constexpr int kRefusalExitStatus = 4;
// The most of a refusal record kept as the case's message.
constexpr size_t kRefusalBytes = 4096;

// The refusal record at `path`, one line: its text up to kRefusalBytes, trailing blanks
// dropped, made printable; "" when there is none, it is empty, or it predates `started`.
std::string read_refusal(const std::string& path, time_t started) {
  std::ifstream in(path, std::ios::binary);
  if (!in || modified_before(path, started)) return "";
  std::string text(kRefusalBytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return printable(text);
}

// Runs the engine for one partition (or PP=1: empty cuts) into `dump`; an empty string
// when it wrote a dump or refused the partition (`refusal` set to its reason), else why
// not (with `stderr_tail` set). Without `refusal` (the self-check's PP=1 runs) a refusal is
// a failure like any other.
std::string run_engine(const Scenario& s, const std::vector<int>& cuts, const std::string& dump,
                       const std::string& scenario_file, ProcessOutcome& outcome,
                       std::string& stderr_tail, std::string* refusal = nullptr) {
  const ExternalEngine& e = *s.external;
  std::error_code ec;
  const std::string refusal_path = dump + ".refusal";
  // The dump counts only when this run made it: nothing is at {out} when the run starts.
  for (const std::string& f : {dump, refusal_path})
    if (fs::remove(f, ec), fs::symlink_status(f, ec).type() != fs::file_type::not_found)
      return fmt::format("an earlier file at {} cannot be removed before the run", f);
  const time_t started = time(nullptr);
  const std::string stem = dump.substr(0, dump.size() - 3);
  EngineProcess p{expand_command(e, placeholder_values(s, cuts, dump, scenario_file)),
                  e.cwd,
                  e.env,
                  e.timeout_s,
                  stem + ".stdout",
                  stem + ".stderr"};
  Result<ProcessOutcome> o = run_engine_process(p);
  if (!o.is_ok()) return o.status().message();
  outcome = *o;
  std::string why;
  const bool refused =
      outcome.end == ProcessOutcome::End::kExited && outcome.exit_code == kRefusalExitStatus;
  const std::string reason = refused ? read_refusal(refusal_path, started) : "";
  if (refused && reason.empty())
    why = fmt::format(
        "engine exited with status {} (a configuration refusal) but wrote no refusal record "
        "at {}",
        kRefusalExitStatus, refusal_path);
  else if (refused && refusal == nullptr)
    why = "engine refused its configuration: " + reason;
  else if (refused)
    *refusal = reason;
  else if (!outcome.ok())
    why = "engine " + outcome.describe(e.timeout_s);
  else if (!fs::is_regular_file(dump, ec))
    why = fmt::format("engine exited with status 0 but wrote no dump at {}", dump);
  else if (modified_before(dump, started))
    why = fmt::format(
        "engine exited with status 0, but the file at {} was last modified before its run "
        "started: not a dump this run wrote",
        dump);
  if (!why.empty()) stderr_tail = printable(file_tail(p.stderr_path));
  return why;
}

// What one external sweep's steps share: the scenario and options, the result being
// built, the work directory's files, PP=1's dump and what it allows to be judged.
struct ExternalSweep {
  ExternalSweep(const Scenario& scenario, const ExternalSweepOptions& o)
      : s(scenario), options(o) {}
  const Scenario& s;
  const ExternalSweepOptions& options;
  ExternalRunInfo* info = nullptr;  // the result's (set by begin)
  const ExternalEngine& e = *s.external;
  const std::string where = s.source_path.empty() ? s.name : s.source_path;
  const int layers = s.model.num_hidden_layers;
  std::string scenario_file, pp1_dump;
  LoadedDump pp1;
  StageEvidence pp1_stages;  // PP=1's stage facts
  std::string pp1_failure;   // why PP=1 judges nothing (empty: it stands)
  std::string pp1_unproven;  // what PP=1's dump does not show of its partition
  std::vector<std::string> kernel_names, dataset_checks;
  std::vector<NotJudged> not_judged;  // the sweep's, beside each case's own
  std::mutex mu;                      // info->engine_seconds
};

// The model's identity and the run's settings, before anything runs.
void begin_info(ExternalSweep& x, SweepResult& r) {
  // The model is the engine's, which splitcheck cannot hash: the engine block names it.
  const std::string engine_text = external_engine_json(x.e).dump();
  r.model_sha256 = sha256_hex(std::as_bytes(std::span(engine_text.data(), engine_text.size())));
  x.info->cwd = x.e.cwd;
  x.info->env = x.e.env;
  x.info->timeout_s = x.e.timeout_s;
  x.info->golden = x.e.golden;
  x.info->jobs_requested = x.options.jobs;
  x.info->command_template = x.e.command;
}

// Writes the resolved scenario where the engine reads it ({scenario}) and names PP=1's dump.
Status write_scenario_file(ExternalSweep& x, const SweepResult& r) {
  x.scenario_file = x.info->work_dir + "/scenario.json";
  std::ofstream out(x.scenario_file, std::ios::binary);
  out << r.scenario.dump(2) << "\n";
  if (!out) return internal_error(x.scenario_file + ": cannot write");
  x.pp1_dump = x.info->work_dir + "/pp1.h5";
  x.info->pp1_command =
      expand_command(x.e, placeholder_values(x.s, {}, x.pp1_dump, x.scenario_file));
  return Status::ok();
}

// PP=1, once (or its golden), into x.pp1; a run that failed sets x.pp1_failure. A golden
// that cannot be read is invalid input.
Status run_pp1(ExternalSweep& x) {
  ExternalRunInfo& info = *x.info;
  if (!x.e.golden.empty()) {
    Result<LoadedDump> g = load_dump(x.e.golden, /*reference=*/true);
    if (!g.is_ok())
      return invalid_input(fmt::format("{}: /engine/golden: {}", x.where, g.status().message()));
    x.pp1 = std::move(*g);
    info.pp1_outcome = "golden " + x.e.golden;
  } else {
    ProcessOutcome o;
    std::string refusal;
    x.pp1_failure =
        run_engine(x.s, {}, x.pp1_dump, x.scenario_file, o, info.pp1_stderr_tail, &refusal);
    if (!refusal.empty()) x.pp1_failure = "the PP=1 run refused its configuration: " + refusal;
    info.engine_seconds += o.seconds;
    info.pp1_interrupted = o.end == ProcessOutcome::End::kInterrupted;
    if (x.pp1_failure.empty()) {
      Result<LoadedDump> g = load_dump(x.pp1_dump, /*reference=*/true);
      if (g.is_ok())
        x.pp1 = std::move(*g);
      else
        x.pp1_failure = "corrupt dump: " + g.status().message();
    }
    info.pp1_outcome = x.pp1_failure.empty()
                           ? fmt::format("exited with status 0 in {:.2f} s", o.seconds)
                           : x.pp1_failure;
  }
  // The reference must be a PP=1 run: one stage over every layer. A dump that shows another
  // partition judges nothing; one that shows none leaves every case unproven.
  if (!x.pp1_failure.empty()) return Status::ok();
  const Partition whole = *Partition::from_cuts({}, x.layers);
  const PartitionEvidence ev = partition_evidence(x.pp1, whole, x.layers);
  if (!ev.contradictions.empty())
    x.pp1_failure = fmt::format("the PP=1 dump is not a run of one stage over layers 0-{}: {}",
                                x.layers, fmt::join(ev.contradictions, "; "));
  x.pp1_unproven = ev.missing.empty() ? "" : "PP=1: " + ev.missing;
  if (!x.pp1_failure.empty()) info.pp1_outcome = x.pp1_failure;
  return Status::ok();
}

// One PP=1 run of the engine for the self-check, into `dump`, read back.
Result<LoadedDump> self_check_run(ExternalSweep& x, const std::string& dump) {
  ProcessOutcome o;
  std::string tail;
  const std::string why = run_engine(x.s, {}, dump, x.scenario_file, o, tail);
  x.info->engine_seconds += o.seconds;
  if (!tail.empty()) x.info->pp1_stderr_tail = tail;
  if (!why.empty()) return invalid_input(why);
  return load_dump(dump);
}

// The engine's PP=1 must reproduce itself before anything is judged against it: runs it a
// second time and compares (result.self_check); a failed run sets x.pp1_failure. With a
// golden as the reference, the engine's PP=1 runs twice (pp1.h5, pp1-self-check.h5) and the
// two runs are compared; the golden stays the reference.
Status run_self_check(ExternalSweep& x, SelfCheckResult& sc) {
  const auto t_self = Clock::now();
  sc.ran = true;
  const LoadedDump* first = &x.pp1;
  std::optional<Result<LoadedDump>> own;
  if (!x.e.golden.empty()) {
    own = self_check_run(x, x.pp1_dump);
    if (!own->is_ok()) {
      x.pp1_failure = "the self-check's first PP=1 run failed: " + own->status().message();
      sc.seconds = elapsed_seconds(t_self);
      return Status::ok();
    }
    first = &own->value();
  }
  Result<LoadedDump> second = self_check_run(x, x.info->work_dir + "/pp1-self-check.h5");
  if (!second.is_ok()) {
    x.pp1_failure = "the self-check's second PP=1 run failed: " + second.status().message();
  } else {
    RETURN_IF_ERROR(judge_reproduction(first->record, second->record, sc));
  }
  sc.seconds = elapsed_seconds(t_self);
  return Status::ok();
}

// What PP=1's dump says of the engine, and which checks it lets the cases be judged on.
void take_pp1_evidence(ExternalSweep& x, SweepResult& result) {
  ExternalRunInfo& info = *x.info;
  const LoadedDump& pp1 = x.pp1;
  info.evidence_waived = x.e.evidence_waived;
  info.pp1_content_sha256 = pp1.content_sha256;
  info.producer = pp1.root.count("producer") ? pp1.root.at("producer") : "";
  info.backend = pp1.root.count("backend") ? pp1.root.at("backend") : "";
  info.kernels = pp1.kernels;
  result.pp1_acceptance = pp1.acceptance;
  x.pp1_stages = stage_evidence_of(pp1.record);
  // A serving run's requests (its forwards' `request`), as the built-in sweep lists them:
  // each case then names the requests that diverged.
  if (pp1.record.find("serving/schedule") != nullptr) {
    std::set<int32_t> requests;
    for (const auto& [object, attrs] : pp1.record.attrs()) {
      auto it = attrs.find("request");
      if (object.starts_with("forward/") && it != attrs.end())
        if (const int64_t* r = std::get_if<int64_t>(&it->second)) requests.insert(*r);
    }
    result.requests.assign(requests.begin(), requests.end());
  }
  info.pp1_failed = !x.pp1_failure.empty();
  for (size_t at = 0; !pp1.kernels.empty() && at != std::string::npos;) {
    const size_t comma = pp1.kernels.find(',', at);
    x.kernel_names.push_back(
        pp1.kernels.substr(at, comma == std::string::npos ? comma : comma - at));
    at = comma == std::string::npos ? comma : comma + 1;
  }
  const std::vector<std::string>& checks = x.s.checks;
  x.dataset_checks = judged_dataset_checks(checks, pp1.record, x.not_judged);
}

// Judges one case's dump: what it shows of its partition and its stages, then the judge.
void judge_dump(ExternalSweep& x, const Partition& part, const LoadedDump& d, CaseResult& c) {
  c.acceptance = d.acceptance;
  c.stages = d.stages;
  PartitionEvidence ev = partition_evidence(d, part, x.layers);
  const std::string& pp1_file = x.e.golden.empty() ? x.pp1_dump : x.e.golden;
  for (std::string& p : file_identity_problems(c.dump, d, pp1_file, x.pp1, part.stages()))
    ev.contradictions.insert(ev.contradictions.begin(), std::move(p));
  JudgeInput in;
  in.pp1 = &x.pp1.record;
  in.candidate = &d.record;
  in.dataset_checks = x.dataset_checks;
  in.kernel_names = x.kernel_names;
  // The stage checks: the one rule set over the facts its dump records, as the built-in
  // sweep judges its own (harness/judge/stage_checks.h).
  StageJudgement j = judge_stage_checks(x.s.checks, stage_evidence_of(d.record), x.pp1_stages);
  in.stage_failures = std::move(j.failures);
  in.not_judged = std::move(j.not_judged);
  in.stages_judged = j.judged;
  in.require_judgement = true;
  in.partition = &ev;
  in.pp1_unproven = x.pp1_unproven;
  in.evidence_waived = x.e.evidence_waived;
  judge_case(in, c);
}

// One case: runs the engine at `part` and judges its dump, or says why it could not.
void run_engine_case(ExternalSweep& x, const Partition& part, CaseResult& c) {
  auto error = [&](const std::string& why) {
    c.verdict = Verdict::kError;
    c.message = fmt::format("{} ({}): {}", c.key, c.layout, why);
  };
  auto interrupted = [&](bool started) {
    c.verdict = Verdict::kInterrupted;
    c.message =
        fmt::format("{} ({}): {} {}", c.key, c.layout,
                    started ? "engine stopped:" : "not run:", interrupt_line(interrupt_signal()));
  };
  if (interrupt_signal() != 0 || x.info->pp1_interrupted) return interrupted(false);
  if (x.info->pp1_failed) return error("not judged: the PP=1 run failed (" + x.pp1_failure + ")");
  c.dump = x.info->work_dir + "/" + c.key + ".h5";
  ProcessOutcome o;
  std::string refusal;
  const std::string why =
      run_engine(x.s, c.cuts, c.dump, x.scenario_file, o, c.stderr_tail, &refusal);
  {
    std::lock_guard<std::mutex> lock(x.mu);
    x.info->engine_seconds += o.seconds;
  }
  c.engine_seconds = o.seconds;
  if (o.end == ProcessOutcome::End::kInterrupted) return interrupted(true);
  if (!why.empty()) return error(why);
  // Refused at configuration where PP=1 was not (PP=1 refusing judges nothing): the
  // built-in sweep's verdict for its own engine's refusal, failing `config` when selected.
  if (!refusal.empty()) return judge_refusal(Refusal::kConfiguration, refusal, x.s.checks, c);
  Result<LoadedDump> d = load_dump(c.dump);
  // Reading stops at the next block once splitcheck is interrupted: the case is then
  // interrupted, not a corrupt dump, and not judged on what was read.
  if (!d.is_ok() && interrupt_signal() != 0) return interrupted(true);
  if (!d.is_ok()) return error("corrupt dump: " + d.status().message());
  judge_dump(x, part, *d, c);
  if (c.verdict == Verdict::kError && interrupt_signal() != 0) interrupted(true);
}

// An engine run through its command template: PP=1 (or its golden) into the work
// directory, then one run per partition, each dump read, checked and judged.
class ExternalCases : public CaseSource {
 public:
  ExternalCases(const Scenario& s, const ExternalSweepOptions& options) : x_(s, options) {}
  ~ExternalCases() override {
    std::error_code ignored;
    if (!remove_on_exit_.empty()) fs::remove_all(remove_on_exit_, ignored);
  }

  Status begin(const SweepCases&, SweepResult& result) override {
    x_.info = &result.external.emplace();
    begin_info(x_, result);
    ExternalRunInfo& info = *x_.info;
    info.work_dir = make_work_dir(x_.options.work_dir);
    std::error_code ec;
    if (info.work_dir.empty() || (fs::create_directories(info.work_dir, ec), ec))
      return invalid_input(fmt::format("{}: cannot create the work directory", info.work_dir));
    // One sweep per work directory, so that no case is judged on another sweep's files.
    RETURN_IF_ERROR(lock_.take(info.work_dir));
    // A directory made here is removed on every way out (finish_work_dir says so in the
    // report).
    if (x_.options.work_dir.empty() && !x_.options.keep_runs) remove_on_exit_ = info.work_dir;
    return write_scenario_file(x_, result);
  }

  Status reference(SweepResult&) override { return run_pp1(x_); }
  std::string reference_failure() const override { return x_.pp1_failure; }

  Status reproduce(SweepResult& result) override {
    RETURN_IF_ERROR(run_self_check(x_, result.self_check));
    if (result.refused_to_judge())
      x_.info->pp1_outcome += "; the self-check's second PP=1 run differs: nothing judged";
    return Status::ok();
  }

  Status take_reference(SweepResult& result) override {
    take_pp1_evidence(x_, result);
    if (!x_.e.evidence_waived.empty())
      x_.not_judged.push_back({"partition", "evidence WAIVED by the scenario (engine.evidence): " +
                                                x_.e.evidence_waived});
    return Status::ok();
  }

  int jobs(int requested) const override { return requested; }

  void run_case(const Partition& part, CaseResult& c) override { run_engine_case(x_, part, c); }

  std::vector<NotJudged> sweep_not_judged() const override { return x_.not_judged; }

  void end(SweepResult& result) override {
    x_.info->jobs = result.cases.empty() ? 0 : result.threads;  // 0: no case ran
    result.interrupted_by = interrupt_signal();
    x_.info->interrupted_by = result.interrupted_by;
    finish_work_dir(*x_.info, x_.options);
  }

 private:
  ExternalSweep x_;
  WorkDirLock lock_;
  std::string remove_on_exit_;  // the work directory made under $TMPDIR, when not kept
};

}  // namespace

std::map<std::string, std::string> placeholder_values(const Scenario& s,
                                                      const std::vector<int>& cuts,
                                                      const std::string& out,
                                                      const std::string& scenario_file) {
  std::string split = "pp1";
  if (!cuts.empty()) {
    Result<Partition> p = Partition::from_cuts(cuts, s.model.num_hidden_layers);
    split = fmt::format("pp{}/{}", cuts.size() + 1,
                        p.is_ok() ? p->key() : fmt::format("split-{}", fmt::join(cuts, "-")));
  }
  return {{"pp", std::to_string(cuts.size() + 1)},
          {"cuts", fmt::format("{}", fmt::join(cuts, ","))},
          {"split", split},
          {"out", out},
          {"scenario", scenario_file},
          {"seed", std::to_string(s.external ? s.external->seed : 0)}};
}

Result<SweepResult> run_external_sweep(const Scenario& s, const ExternalSweepOptions& options) {
  if (!s.external)
    return invalid_input((s.source_path.empty() ? s.name : s.source_path) +
                         ": /engine: no external engine (no \"command\")");
  ExternalCases source(s, options);
  const DriveOptions drive{options.jobs,   options.shard_index, options.shard_count,
                           options.filter, options.progress,    options.self_check};
  return drive_sweep(s, drive, source);
}

}  // namespace splitcheck
