#include "harness/runner/external_sweep.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <span>
#include <thread>

#include "harness/dump/digest.h"
#include "harness/dump/dump.h"
#include "harness/dump/printable.h"
#include "harness/dump/verify.h"
#include "harness/engine/partition.h"
#include "harness/runner/engine_process.h"
#include "harness/runner/interrupt.h"
#include "harness/verdict/checks.h"
#include "harness/verdict/faults.h"
#include "harness/verdict/judge.h"

namespace splitcheck {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The checks judged from datasets, by the check each dataset path belongs to.
constexpr const char* kDatasetChecks[] = {"tensors", "taps",     "logits",
                                          "tokens",  "dispatch", "acceptance"};
// The checks judged from /stages. `partition` is not among them: the evidence of the
// partition (partition_evidence) is required of every case, selected or not.
constexpr const char* kStageChecks[] = {"embedding", "memory"};

bool is_dataset_check(const std::string& c) {
  return std::any_of(std::begin(kDatasetChecks), std::end(kDatasetChecks),
                     [&](const char* n) { return c == n; });
}

// One dump, read whole and checked: its datasets in execution order, what its stages hold
// and its speculative figures.
struct LoadedDump {
  RunRecord record;
  std::vector<StageHoldings> stages;                           // empty when it carries no /stages
  std::vector<std::map<std::string, std::string>> stage_text;  // other stage attributes
  bool stage_bytes = false;  // every stage carries parameter_bytes
  AcceptanceFigures acceptance;
  std::map<std::string, std::string> root;  // root attributes as text (producer, partition, ...)
  std::set<int32_t> layers;                 // the layers of /forward/<f>/layers/<l> datasets
  // Over every dataset's path, dtype, shape and bytes, in order: PP=1's only (the report's
  // identity), empty for a case.
  std::string content_sha256;
  uintmax_t file_size = 0;
  std::string file_sha256;  // of the file's bytes: PP=1's only (a case's is taken when needed)
  std::string kernels;      // a dispatch dataset's `kernels` attribute (names by code)
};

// The layer of a dataset path "forward/<f>/layers/<l>/<site>", or -1.
int32_t layer_of_path(const std::string& path) {
  const size_t p = path.find("/layers/");
  if (path.rfind("forward/", 0) != 0 || p == std::string::npos) return -1;
  return std::atoi(path.c_str() + p + 8);
}

// `reference`: PP=1's dump, whose file and content digests the runner keeps.
Result<LoadedDump> load_dump(const std::string& path, bool reference = false) {
  ASSIGN_OR_RETURN(DumpReader r, DumpReader::open(path));
  // The layout here; each dataset's digest as read() reads it below.
  RETURN_IF_ERROR(verify_dump_layout(r).status());
  LoadedDump d;
  std::error_code ec;
  d.file_size = fs::file_size(path, ec);
  if (reference) {
    ASSIGN_OR_RETURN(d.file_sha256, sha256_file(path));
  }
  Sha256 content;
  auto feed = [&](const std::string& text) {
    const uint64_t n = text.size();
    content.update(std::as_bytes(std::span(&n, 1)));
    content.update(std::as_bytes(std::span(text.data(), text.size())));
  };
  ASSIGN_OR_RETURN(auto root, r.attributes("/"));
  for (const auto& [name, value] : root) d.root[name] = value.text;
  for (const DatasetInfo& info : r.datasets()) {
    ASSIGN_OR_RETURN(Tensor t, r.read(info.path));
    if (reference) {
      feed(info.path);
      feed(dtype_name(t.dtype()));
      feed(fmt::format("{}", fmt::join(t.shape(), ",")));
      content.update(std::span(t.bytes(), t.nbytes()));
    }
    if (const int32_t l = layer_of_path(info.path.substr(1)); l >= 0) d.layers.insert(l);
    if (info.path.ends_with("/dispatch") && d.kernels.empty())
      if (Result<std::string> k = r.attr_string(info.path, "kernels"); k.is_ok()) d.kernels = *k;
    if (info.path.ends_with("/dispatch") &&
        (t.dtype() != DType::kI32 || t.shape().size() != 2 || t.dim(1) != 4))
      return invalid_input(
          fmt::format("{}: {}: a dispatch trace is int32 [events, 4] (layer, site, kernel, aux)",
                      path, info.path));
    d.record.add(info.path.substr(1), std::move(t));
  }
  if (reference) d.content_sha256 = content.hex();
  for (int s = 0;; ++s) {
    const std::string g = fmt::format("/stages/{}", s);
    if (!r.exists(g)) break;
    StageHoldings h;
    h.index = s;
    ASSIGN_OR_RETURN(int64_t b, r.attr_int(g, "layer_begin"));
    ASSIGN_OR_RETURN(int64_t e, r.attr_int(g, "layer_end"));
    h.range = StageRange{static_cast<int>(b), static_cast<int>(e)};
    if (Result<std::string> emb = r.attr_string(g, "embedding"); emb.is_ok()) h.embedding = *emb;
    Result<int64_t> bytes = r.attr_int(g, "parameter_bytes");
    if (bytes.is_ok()) h.parameter_bytes = static_cast<size_t>(*bytes);
    d.stage_bytes = (s == 0 || d.stage_bytes) && bytes.is_ok();
    std::map<std::string, std::string> text;
    ASSIGN_OR_RETURN(auto attrs, r.attributes(g));
    for (const auto& [name, value] : attrs) text[name] = value.text;
    d.stages.push_back(std::move(h));
    d.stage_text.push_back(std::move(text));
  }
  if (const Tensor* hist = d.record.find("spec/accepted_histogram");
      hist != nullptr && hist->dtype() == DType::kI32 && hist->numel() > 1) {
    AcceptanceFigures& a = d.acceptance;
    a.speculative = true;
    for (int64_t i = 0; i < hist->numel(); ++i) {
      const int64_t n = hist->data<int32_t>()[i];
      a.accepted_histogram.push_back(n);
      a.steps += n;
      a.accepted += i * n;
    }
    if (a.steps > 0) {
      const double steps = static_cast<double>(a.steps), acc = static_cast<double>(a.accepted);
      a.mean_accepted = acc / steps;
      a.acceptance_rate = acc / (steps * static_cast<double>(hist->numel() - 1));
      a.tokens_per_forward = 1 + acc / steps;
    }
  }
  return d;
}

// The embedding and memory checks' evidence in what the case's dump says its stages hold:
// what it shows wrong (for the judge, in in.stage_failures), what it cannot show
// (in.not_judged) and whether a selected stage check was judged (in.stages_judged).
void stage_findings(const std::vector<std::string>& selected, const LoadedDump& pp1,
                    const LoadedDump& d, JudgeInput& in) {
  auto wanted = [&](const char* check) {
    return std::find(selected.begin(), selected.end(), check) != selected.end();
  };
  auto fail_check = [&](const char* check, std::string message) {
    in.stage_failures.push_back({check, std::move(message)});
  };
  for (const char* check : kStageChecks) {
    if (!wanted(check)) continue;
    const bool memory = std::string(check) == "memory";
    if (d.stages.empty())
      in.not_judged.push_back({check, "its dump carries no /stages"});
    else if (memory && !(d.stage_bytes && pp1.stage_bytes))
      in.not_judged.push_back({check, pp1.stage_bytes
                                          ? "its /stages carry no parameter_bytes"
                                          : "the PP=1 dump's /stages carry no parameter_bytes"});
    else
      in.stages_judged = true;
  }
  if (d.stages.empty()) return;
  if (wanted("embedding")) {
    const bool drafter = d.record.find("spec/accepted_histogram") != nullptr;
    for (size_t s = 0; s < d.stages.size(); ++s) {
      const std::string& e = d.stages[s].embedding;
      if (s == 0 && e != "real")
        fail_check("embedding",
                   fmt::format("embedding: stage 0 holds \"{}\", not the real "
                               "embedding",
                               e));
      if (s > 0 && e == "real")
        fail_check("embedding",
                   fmt::format("embedding: stage {} holds a real embedding "
                               "(only the first stage does)",
                               s));
      if (s > 0 && e == "copy-for-drafter" && !drafter)
        fail_check("embedding",
                   fmt::format("embedding: stage {} holds a copy for a drafter, "
                               "but no drafter ran (no /spec)",
                               s));
      const auto& text = d.stage_text[s];
      // "none": no drafter runs beside this stage (docs/dump-format.md).
      if (auto it = text.find("drafter_embedding");
          it != text.end() && it->second != "target" && it->second != "none")
        fail_check("embedding",
                   fmt::format("embedding: the drafter on stage {} uses the "
                               "\"{}\" embedding, not the target's",
                               s, it->second));
      if (auto it = text.find("drafter_same_object_as_target");
          it != text.end() && it->second == "0")
        fail_check("embedding",
                   fmt::format("embedding: the drafter on stage {} uses a copy, "
                               "not the target's embedding object",
                               s));
    }
  }
  if (wanted("memory") && d.stage_bytes && pp1.stage_bytes) {
    size_t held = 0, pp1_held = 0;
    for (const StageHoldings& h : d.stages) held += h.parameter_bytes;
    for (const StageHoldings& h : pp1.stages) pp1_held += h.parameter_bytes;
    if (held < pp1_held)
      fail_check("memory",
                 fmt::format("memory: the stages hold {} parameter bytes, {} fewer "
                             "than PP=1's {} (weights not loaded)",
                             held, pp1_held - held, pp1_held));
  }
}

// Judges `d` against the partition asked (`part`, over `layers` layers): its /stages must
// hold one range per stage, equal to the partition's; its root `partition` attribute, when
// written, must name the same layout; its per-layer tensors must name no layer past the
// model's last, and at PP=1 (one stage) every layer.
PartitionEvidence partition_evidence(const LoadedDump& d, const Partition& part, int layers) {
  PartitionEvidence ev;
  auto& bad = ev.contradictions;
  if (auto it = d.root.find("partition");
      it != d.root.end() && !it->second.empty() && it->second != part.layout())
    bad.push_back(fmt::format("its partition attribute says \"{}\", asked \"{}\"", it->second,
                              part.layout()));
  if (!d.layers.empty() && *d.layers.rbegin() >= layers)
    bad.push_back(fmt::format(
        "it holds tensors of layer {}, past the last of the {} layers the scenario names "
        "(num_hidden_layers)",
        *d.layers.rbegin(), layers));
  if (part.stages() == 1 && !d.layers.empty() && *d.layers.rbegin() < layers &&
      static_cast<int>(d.layers.size()) != layers)
    bad.push_back(fmt::format("its tensors cover {} of the {} layers", d.layers.size(), layers));
  if (d.stages.empty()) {
    ev.missing = "the dump carries no /stages (the layer range each stage ran)";
    return ev;
  }
  if (static_cast<int>(d.stages.size()) != part.stages())
    bad.push_back(
        fmt::format("{} stage(s) in its /stages, {} asked", d.stages.size(), part.stages()));
  for (int s = 0; s < std::min<int>(part.stages(), static_cast<int>(d.stages.size())); ++s) {
    const StageRange want = part.stage(s), got = d.stages[s].range;
    if (want.begin != got.begin || want.end != got.end)
      bad.push_back(fmt::format("stage {} ran layers {}-{}, asked {}-{}", s, got.begin, got.end,
                                want.begin, want.end));
  }
  return ev;
}

// What shows that the case's dump file is not its own run: a symbolic link, the PP=1 dump's
// file itself (a hard link), or a byte-for-byte copy of it under another partition.
std::vector<std::string> file_identity_problems(const std::string& dump, const LoadedDump& d,
                                                const std::string& pp1_dump, const LoadedDump& pp1,
                                                int stages) {
  std::vector<std::string> bad;
  struct stat link {};
  if (lstat(dump.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    std::error_code ec;
    bad.push_back(fmt::format("{{out}} is a symbolic link (to {}), not a dump the engine wrote",
                              fs::read_symlink(dump, ec).string()));
  }
  struct stat a {
  }, b{};
  if (!pp1_dump.empty() && stat(dump.c_str(), &a) == 0 && stat(pp1_dump.c_str(), &b) == 0 &&
      a.st_dev == b.st_dev && a.st_ino == b.st_ino)
    bad.push_back("its dump is the PP=1 dump's file itself");
  else if (stages > 1 && d.file_size == pp1.file_size) {
    // Only a file of PP=1's size can be its copy: the digest is taken then.
    const Result<std::string> digest = sha256_file(dump);
    if (digest.is_ok() && digest.value() == pp1.file_sha256)
      bad.push_back("its dump is byte for byte the PP=1 dump");
  }
  return bad;
}

// The dataset checks of `selected` that the PP=1 dump gives evidence for; the others are
// appended to `not_judged`.
std::vector<std::string> judged_dataset_checks(const std::vector<std::string>& selected,
                                               const RunRecord& pp1,
                                               std::vector<NotJudged>& not_judged) {
  std::set<std::string> present;
  for (const RecordEntry& e : pp1.entries()) present.insert(dataset_check(e.path));
  std::vector<std::string> judged;
  for (const std::string& c : selected) {
    if (!is_dataset_check(c)) continue;
    if (present.count(c)) {
      judged.push_back(c);
      continue;
    }
    const std::string what = c == "dispatch"     ? "no dispatch trace"
                             : c == "acceptance" ? "no /spec"
                             : c == "taps"       ? "no taps"
                             : c == "logits"     ? "no logits"
                             : c == "tokens"     ? "no token datasets"
                                                 : "no per-layer tensors";
    not_judged.push_back({c, "the PP=1 dump carries " + what});
  }
  return judged;
}

std::string make_work_dir(const std::string& requested) {
  if (!requested.empty()) return fs::absolute(requested).lexically_normal().string();
  const char* tmp = std::getenv("TMPDIR");
  std::string templ =
      std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/splitcheck-runs-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) return "";
  return templ;
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

// Runs the engine for one partition (or PP=1: empty cuts) into `dump`; an empty string
// when it wrote a dump, else why not (with `stderr_tail` set).
std::string run_engine(const Scenario& s, const std::vector<int>& cuts, const std::string& dump,
                       const std::string& scenario_file, ProcessOutcome& outcome,
                       std::string& stderr_tail) {
  const ExternalEngine& e = *s.external;
  std::error_code ec;
  fs::remove(dump, ec);
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
  if (!outcome.ok())
    why = "engine " + outcome.describe(e.timeout_s);
  else if (!fs::is_regular_file(dump, ec))
    why = fmt::format("engine exited with status 0 but wrote no dump at {}", dump);
  if (!why.empty()) stderr_tail = printable(file_tail(p.stderr_path));
  return why;
}

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
  const auto t0 = Clock::now();
  const std::string where = s.source_path.empty() ? s.name : s.source_path;
  if (!s.external) return invalid_input(where + ": /engine: no external engine (no \"command\")");
  const ExternalEngine& e = *s.external;
  SweepResult result;
  result.scenario_name = s.name;
  result.scenario = resolved_scenario_json(s);
  ASSIGN_OR_RETURN(result.scenario_sha256, scenario_identity_sha256(s));
  // The model is the engine's, which splitcheck cannot hash: the engine block names it.
  const std::string engine_text = external_engine_json(e).dump();
  result.model_sha256 =
      sha256_hex(std::as_bytes(std::span(engine_text.data(), engine_text.size())));
  ExternalRunInfo& info = result.external.emplace();
  info.cwd = e.cwd;
  info.env = e.env;
  info.timeout_s = e.timeout_s;
  info.golden = e.golden;
  info.jobs_requested = options.jobs;
  info.command_template = e.command;

  ASSIGN_OR_RETURN(
      std::vector<Partition> all,
      enumerate_partitions(s.partitions, s.model.num_hidden_layers, FaultSet{s.faults}));
  const std::vector<Partition> parts =
      select_partitions(all, options.shard_index, options.shard_count, options.filter);
  if (parts.empty())
    return invalid_input(fmt::format(
        "{}: {} of its {} split point(s): nothing to compare", where,
        options.filter.empty() ? "the shard holds none" : "--filter matches none", all.size()));
  info.work_dir = make_work_dir(options.work_dir);
  std::error_code ec;
  if (info.work_dir.empty() || (fs::create_directories(info.work_dir, ec), ec))
    return invalid_input(fmt::format("{}: cannot create the work directory", info.work_dir));
  // A directory made here is removed on every way out (finish_work_dir says so in the report).
  struct RemoveOnExit {
    std::string dir;
    ~RemoveOnExit() {
      std::error_code ignored;
      if (!dir.empty()) fs::remove_all(dir, ignored);
    }
  } remove_on_exit{options.work_dir.empty() && !options.keep_runs ? info.work_dir : ""};
  const std::string scenario_file = info.work_dir + "/scenario.json";
  {
    std::ofstream out(scenario_file, std::ios::binary);
    out << result.scenario.dump(2) << "\n";
    if (!out) return internal_error(scenario_file + ": cannot write");
  }
  const std::string pp1_dump = info.work_dir + "/pp1.h5";
  info.pp1_command = expand_command(e, placeholder_values(s, {}, pp1_dump, scenario_file));

  // PP=1, once (or its golden).
  const auto t_ref = Clock::now();
  LoadedDump pp1;
  std::string pp1_failure;
  if (!e.golden.empty()) {
    Result<LoadedDump> g = load_dump(e.golden, /*reference=*/true);
    if (!g.is_ok())
      return invalid_input(fmt::format("{}: /engine/golden: {}", where, g.status().message()));
    pp1 = std::move(*g);
    info.pp1_outcome = "golden " + e.golden;
  } else {
    ProcessOutcome o;
    pp1_failure = run_engine(s, {}, pp1_dump, scenario_file, o, info.pp1_stderr_tail);
    info.engine_seconds += o.seconds;
    info.pp1_interrupted = o.end == ProcessOutcome::End::kInterrupted;
    if (pp1_failure.empty()) {
      Result<LoadedDump> g = load_dump(pp1_dump, /*reference=*/true);
      if (g.is_ok())
        pp1 = std::move(*g);
      else
        pp1_failure = "corrupt dump: " + g.status().message();
    }
    info.pp1_outcome = pp1_failure.empty()
                           ? fmt::format("exited with status 0 in {:.2f} s", o.seconds)
                           : pp1_failure;
  }
  // The reference must be a PP=1 run: one stage over every layer. A dump that shows another
  // partition judges nothing; one that shows none leaves every case unproven.
  const int layers = s.model.num_hidden_layers;
  std::string pp1_unproven;
  if (pp1_failure.empty()) {
    const Partition whole = *Partition::from_cuts({}, layers);
    const PartitionEvidence ev = partition_evidence(pp1, whole, layers);
    if (!ev.contradictions.empty())
      pp1_failure = fmt::format("the PP=1 dump is not a run of one stage over layers 0-{}: {}",
                                layers, fmt::join(ev.contradictions, "; "));
    pp1_unproven = ev.missing.empty() ? "" : "PP=1: " + ev.missing;
    if (!pp1_failure.empty()) info.pp1_outcome = pp1_failure;
  }
  if (options.self_check && pp1_failure.empty() && e.golden.empty()) {
    // The engine's PP=1 must reproduce itself before anything is judged against it.
    const auto t_self = Clock::now();
    const std::string again = info.work_dir + "/pp1-self-check.h5";
    ProcessOutcome o;
    std::string tail;
    SelfCheckResult& sc = result.self_check;
    sc.ran = true;
    std::string why = run_engine(s, {}, again, scenario_file, o, tail);
    info.engine_seconds += o.seconds;
    Result<LoadedDump> second = why.empty() ? load_dump(again) : invalid_input(why);
    if (!second.is_ok()) {
      pp1_failure = "the self-check's second PP=1 run failed: " + second.status().message();
      info.pp1_stderr_tail = tail;
    } else {
      CaseResult probe;
      probe.key = "pp1-self-check";
      RETURN_IF_ERROR(compare_records(pp1.record, second->record, probe));
      sc.datasets_compared = probe.datasets_compared;
      sc.datasets_differing = probe.datasets_differing;
      sc.reproduced = probe.datasets_differing == 0 && probe.datasets_compared > 0;
      if (!sc.reproduced)
        sc.first_difference = probe.datasets_compared == 0
                                  ? std::string("the two runs recorded nothing to compare")
                                  : probe.message;
    }
    sc.seconds = seconds_since(t_self);
    if (result.refused_to_judge()) {
      info.pp1_outcome += "; the self-check's second PP=1 run differs: nothing judged";
      result.pp1_seconds = seconds_since(t_ref);
      result.total_seconds = seconds_since(t0);
      finish_work_dir(info, options);
      return result;
    }
  }
  info.evidence_waived = e.evidence_waived;
  info.pp1_content_sha256 = pp1.content_sha256;
  info.producer = pp1.root.count("producer") ? pp1.root.at("producer") : "";
  info.backend = pp1.root.count("backend") ? pp1.root.at("backend") : "";
  info.kernels = pp1.kernels;
  result.pp1_seconds = seconds_since(t_ref);
  result.pp1_acceptance = pp1.acceptance;
  info.pp1_failed = !pp1_failure.empty();

  std::vector<std::string> kernel_names;
  for (size_t at = 0; !pp1.kernels.empty() && at != std::string::npos;) {
    const size_t comma = pp1.kernels.find(',', at);
    kernel_names.push_back(pp1.kernels.substr(at, comma == std::string::npos ? comma : comma - at));
    at = comma == std::string::npos ? comma : comma + 1;
  }
  std::vector<NotJudged> sweep_not_judged;
  const std::vector<std::string> dataset_checks =
      judged_dataset_checks(s.checks, pp1.record, sweep_not_judged);
  if (std::find(s.checks.begin(), s.checks.end(), "config") != s.checks.end())
    sweep_not_judged.push_back(
        {"config", "an external engine's configuration-time refusals are not observed"});

  result.cases.resize(parts.size());
  std::atomic<size_t> next{0}, done{0};
  std::mutex mu;
  auto worker = [&] {
    for (size_t i = next++; i < parts.size(); i = next++) {
      const auto tc = Clock::now();
      CaseResult& c = result.cases[i];
      const Partition& part = parts[i];
      c.key = part.key();
      c.layout = part.layout();
      c.cuts = part.cuts();
      auto error = [&](const std::string& why) {
        c.verdict = Verdict::kError;
        c.message = fmt::format("{} ({}): {}", c.key, c.layout, why);
      };
      auto interrupted = [&](bool started) {
        c.verdict = Verdict::kInterrupted;
        c.message = fmt::format(
            "{} ({}): {} {}", c.key, c.layout,
            started ? "engine stopped:" : "not run:", interrupt_line(interrupt_signal()));
      };
      try {
        if (interrupt_signal() != 0 || info.pp1_interrupted) {
          interrupted(false);
        } else if (const std::string problem = part.ownership_problem(); !problem.empty()) {
          c.verdict = Verdict::kConfigRejected;
          c.message = fmt::format("partition {}: {}", c.layout, problem);
        } else if (info.pp1_failed) {
          error("not judged: the PP=1 run failed (" + pp1_failure + ")");
        } else {
          c.dump = info.work_dir + "/" + c.key + ".h5";
          ProcessOutcome o;
          const std::string why = run_engine(s, c.cuts, c.dump, scenario_file, o, c.stderr_tail);
          {
            std::lock_guard<std::mutex> lock(mu);
            info.engine_seconds += o.seconds;
          }
          c.engine_seconds = o.seconds;
          Result<LoadedDump> d =
              why.empty() ? load_dump(c.dump) : Result<LoadedDump>(invalid_input(why));
          if (o.end == ProcessOutcome::End::kInterrupted) {
            interrupted(true);
          } else if (!why.empty()) {
            error(why);
          } else if (!d.is_ok()) {
            error("corrupt dump: " + d.status().message());
          } else {
            c.acceptance = d->acceptance;
            c.stages = d->stages;
            PartitionEvidence ev = partition_evidence(*d, part, layers);
            for (std::string& p : file_identity_problems(
                     c.dump, *d, e.golden.empty() ? pp1_dump : e.golden, pp1, part.stages()))
              ev.contradictions.insert(ev.contradictions.begin(), std::move(p));
            JudgeInput in;
            in.pp1 = &pp1.record;
            in.candidate = &d->record;
            in.dataset_checks = dataset_checks;
            in.kernel_names = kernel_names;
            stage_findings(s.checks, pp1, *d, in);
            in.require_judgement = true;
            in.partition = &ev;
            in.pp1_unproven = pp1_unproven;
            in.evidence_waived = e.evidence_waived;
            judge_case(in, c);
          }
        }
      } catch (const std::exception& ex) {
        error(fmt::format("exception: {}", ex.what()));
      }
      c.seconds = seconds_since(tc);
      const size_t n = ++done;
      if (options.progress) {
        std::lock_guard<std::mutex> lock(mu);
        fmt::print(stderr, "\r[{}/{}] split points done   {}", n, parts.size(),
                   n == parts.size() ? "\n" : "");
      }
    }
  };
  int jobs = options.jobs > 0 ? options.jobs
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  jobs = std::max(1, std::min<int>(jobs, static_cast<int>(parts.size())));
  info.jobs = jobs;
  result.threads = jobs;
  std::vector<std::thread> pool;
  for (int i = 0; i < jobs; ++i) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();

  // A stage check is not judged for the sweep when no case that ran could judge it.
  for (const char* check : kStageChecks) {
    if (std::find(s.checks.begin(), s.checks.end(), check) == s.checks.end()) continue;
    bool judged = false;
    std::string reason;
    for (const CaseResult& c : result.cases) {
      if (c.verdict == Verdict::kError || c.verdict == Verdict::kConfigRejected) continue;
      auto it = std::find_if(c.not_judged.begin(), c.not_judged.end(),
                             [&](const NotJudged& n) { return n.check == check; });
      if (it == c.not_judged.end())
        judged = true;
      else if (reason.empty())
        reason = "no partition's dump gives evidence: " + it->reason;
    }
    if (!judged) sweep_not_judged.push_back({check, reason.empty() ? "no partition ran" : reason});
  }
  if (!e.evidence_waived.empty())
    sweep_not_judged.push_back(
        {"partition", "evidence WAIVED by the scenario (engine.evidence): " + e.evidence_waived});
  info.not_judged = sweep_not_judged;
  for (const CheckInfo& check : check_registry()) {
    const std::string name(check.name);
    const bool selected = std::find(s.checks.begin(), s.checks.end(), name) != s.checks.end();
    const bool not_judged = std::any_of(sweep_not_judged.begin(), sweep_not_judged.end(),
                                        [&](const NotJudged& n) { return n.check == name; });
    if (selected && !not_judged) result.checks.push_back(name);
  }
  result.total_seconds = seconds_since(t0);
  result.interrupted_by = interrupt_signal();
  info.interrupted_by = result.interrupted_by;
  finish_work_dir(info, options);
  const bool partial = !options.filter.empty() || options.shard_count > 1;
  result.expect_failures = evaluate_expect(partial ? nlohmann::json::object() : s.expect, result);
  return result;
}

}  // namespace splitcheck
