// The runner fails closed: engines that lie about what they ran, or misbehave, swept
// through the real CLI. Each fake engine wraps `splitcheck run` (8-layer K3-mini,
// scenarios/external-self.json) and copies, links or edits its dumps; none of them may pass.
//   - evidence of the partition: an engine that ignores {cuts}, partitions at one cut only,
//     links {out} to the PP=1 dump, runs another layer count, writes a 2-stage "PP=1", or
//     writes no /stages (unproven, unless the scenario waives the evidence, said everywhere);
//   - datasets PP=1 has and the partition lacks (or the reverse), named first in PP=1's
//     execution order with their cause, by sweep and bisect;
//   - merge of shards whose PP=1 differs; --self-check of an engine that differs from itself;
//   - {seed} and command[0]'s PATH taken from the scenario's engine block.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::expect_one_line_refusal;
using cli_test::file_text;
using cli_test::quote;
using cli_test::write_text;
using nlohmann::json;

// Rewrites a dump by (mode, arg) pairs: drops datasets and groups under a prefix ("drop"),
// adds a copy of one dataset after it ("extra"), drops /stages ("nostages"), moves the first
// element of a dataset one integer step ("bump", its digest recomputed), or sets an integer
// attribute of a group ("attr", "stages/1:head_tied=1"); orders renumbered 0..n-1, digests
// kept where the bytes are the same.
constexpr const char* kEditDump = R"(import sys, os, h5py, numpy, xxhash
src, dst = sys.argv[1:3]
ops = list(zip(sys.argv[3::2], sys.argv[4::2]))
has = lambda mode, test: any(m == mode and test(a) for m, a in ops)
with h5py.File(src, "r") as a, h5py.File(dst + ".tmp", "w") as b:
    for k, v in a.attrs.items():
        b.attrs[k] = v
    objs = []
    a.visititems(lambda n, o: objs.append((n, o)))
    skip = lambda n: has("drop", lambda p: n.startswith(p)) or (has("nostages", lambda p: True) and n.startswith("stages"))
    for n, o in objs:
        if isinstance(o, h5py.Group) and not skip(n):
            g = b.require_group(n)
            for k, v in o.attrs.items():
                g.attrs[k] = v
    for m, arg in ops:
        if m == "attr":
            group, setting = arg.split(":")
            name, value = setting.split("=")
            b.require_group(group).attrs[name] = numpy.int64(int(value))
    ds = sorted([(n, o) for n, o in objs if isinstance(o, h5py.Dataset)], key=lambda x: int(x[1].attrs["order"]))
    out = []
    for n, o in ds:
        if skip(n):
            continue
        out.append((n, o))
        if has("extra", lambda p: n == p):
            out.append((n + "_extra", o))
    for i, (n, o) in enumerate(out):
        data = o[()]
        if has("bump", lambda p: n == p):
            data = numpy.ascontiguousarray(data).copy()
            view = data.reshape(-1).view("u%d" % data.dtype.itemsize)
            view[0] += 1
        d = b.create_dataset(n, data=data)
        for k, v in o.attrs.items():
            d.attrs[k] = v
        d.attrs.modify("order", i)
        if has("bump", lambda p: n == p):
            d.attrs["digest"] = "xxh3:%016x" % xxhash.xxh3_64_intdigest(data.tobytes())
os.rename(dst + ".tmp", dst)
)";

std::vector<pid_t> processes_with(const std::string& marker);

class HostileEngineTest : public cli_test::CliFixture {
 protected:
  HostileEngineTest() : CliFixture("splitcheck-hostile-") {}

  // Whatever the engine did, once splitcheck has returned no process of the test is left:
  // every engine, script and child has the test's directory in its command line.
  void TearDown() override {
    const std::vector<pid_t> left = processes_with(dir_.string());
    EXPECT_TRUE(left.empty()) << left.size() << " process(es) of the test still running";
    CliFixture::TearDown();
  }

  // scenarios/external-self.json with `engine_script` (given {scenario} {cuts} {out}) as
  // the engine; the script reaches the real CLI as $SPLITCHECK.
  json scenario_with(const std::string& engine_script) const {
    json j = json::parse(
        file_text(fs::path(SPLITCHECK_SOURCE_DIR) / "scenarios" / "external-self.json"));
    const fs::path engine = path("engine.sh");
    write_text(engine, "#!/bin/sh\nscenario=\"$1\" cuts=\"$2\" out=\"$3\"\nSPLITCHECK=" +
                           quote(SPLITCHECK_BINARY) + "\nEDIT=" + quote(path("edit.py").string()) +
                           "\n" + engine_script);
    write_text(path("edit.py"), kEditDump);
    fs::permissions(engine, fs::perms::owner_all);
    j["engine"]["command"] = {engine.string(), "{scenario}", "{cuts}", "{out}"};
    j.erase("expect");
    return j;
  }

  CliResult sweep(const json& scenario, const std::string& extra = "") const {
    const fs::path s = path("scenario.json");
    write_text(s, scenario.dump(2));
    return cli("sweep " + quote(s.string()) + " --jobs 2 --report " + quote(path("rep").string()) +
               " " + extra);
  }

  json report(const std::string& dir = "rep") const {
    return json::parse(file_text(path(dir) / "report.json"));
  }

  // Starts `splitcheck <args>` in the background, stdout and stderr into `out`.
  static pid_t start_cli(const std::vector<std::string>& args, const std::string& out) {
    std::vector<std::string> argv_s{SPLITCHECK_BINARY};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      if (freopen(out.c_str(), "w", stdout) == nullptr || dup2(STDOUT_FILENO, STDERR_FILENO) < 0)
        _exit(126);
      execv(SPLITCHECK_BINARY, argv.data());
      _exit(127);
    }
    return pid;
  }

  // Waits up to `seconds` for `file` to exist.
  static bool wait_for(const fs::path& file, double seconds = 60) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!fs::exists(file) && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return fs::exists(file);
  }

  static bool have_h5py() {
    return std::system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") == 0;
  }
};

// Processes whose command line holds `marker` (the engines and whatever they started).
std::vector<pid_t> processes_with(const std::string& marker) {
  std::vector<pid_t> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ifstream st(entry.path() / "stat");
    std::string stat;
    std::getline(st, stat);
    const size_t close = stat.rfind(')');
    const bool zombie =
        close != std::string::npos && stat.size() > close + 2 && stat[close + 2] == 'Z';
    if (!zombie && cmdline.find(marker) != std::string::npos) found.push_back(std::stoi(name));
  }
  return found;
}

// Waits up to `seconds` for every process holding `marker` to be gone.
bool all_gone(const std::string& marker, double seconds = 5) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!processes_with(marker).empty()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

int count_verdict(const json& rep, const std::string& verdict) {
  int n = 0;
  for (const json& c : rep["cases"]) n += c["verdict"] == verdict;
  return n;
}

std::string message_of(const json& rep, const std::string& key) {
  for (const json& c : rep["cases"])
    if (c["key"] == key) return c["message"];
  return "";
}

TEST_F(HostileEngineTest, AnEngineThatIgnoresCutsPassesNoSplitPoint) {
  const CliResult r =
      sweep(scenario_with("exec \"$SPLITCHECK\" run \"$scenario\" --split '' "
                          "--out \"$out\"\n"));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json rep = report();
  EXPECT_EQ(rep["counts"]["pass"], 0);
  EXPECT_EQ(count_verdict(rep, "diverged"), 7);
  EXPECT_NE(message_of(rep, "split-3").find("partition not run as asked (0-3|3-8)"),
            std::string::npos)
      << message_of(rep, "split-3");
  EXPECT_NE(message_of(rep, "split-3").find("1 stage(s) in its /stages, 2 asked"),
            std::string::npos);
  EXPECT_NE(r.out.find("partition not run as asked"), std::string::npos) << r.out;
}

TEST_F(HostileEngineTest, AnEngineThatPartitionsAtOneCutPassesOnlyThatOne) {
  const CliResult r = sweep(scenario_with(
      "[ -z \"$cuts\" ] || cuts=4\nexec \"$SPLITCHECK\" run \"$scenario\" --split \"$cuts\" "
      "--out \"$out\"\n"));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json rep = report();
  EXPECT_EQ(rep["counts"]["pass"], 1);
  EXPECT_EQ(message_of(rep, "split-4").rfind("bit-identical", 0), 0u) << message_of(rep, "split-4");
  EXPECT_NE(message_of(rep, "split-2").find("stage 0 ran layers 0-4, asked 0-2"), std::string::npos)
      << message_of(rep, "split-2");
}

TEST_F(HostileEngineTest, AnOutThatLinksToThePp1DumpIsNotItsRun) {
  const CliResult r = sweep(scenario_with(
      "if [ -n \"$cuts\" ]; then ln -s \"$(dirname \"$out\")/pp1.h5\" \"$out\"; exit 0; fi\n"
      "exec \"$SPLITCHECK\" run \"$scenario\" --split '' --out \"$out\"\n"));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json rep = report();
  EXPECT_EQ(rep["counts"]["pass"], 0);
  EXPECT_NE(message_of(rep, "split-5").find("{out} is a symbolic link"), std::string::npos)
      << message_of(rep, "split-5");
}

TEST_F(HostileEngineTest, AnEngineOfAnotherLayerCountJudgesNothing) {
  // The engine runs its own 8-layer model whatever the scenario says (4 layers here).
  const fs::path own = path("own.json");
  json j = scenario_with("exec \"$SPLITCHECK\" run " + quote(own.string()) +
                         " --split \"$cuts\" --out \"$out\"\n");
  write_text(own, j.dump(2));
  j["engine"]["num_hidden_layers"] = 4;
  j["model"]["overrides"]["num_hidden_layers"] = 4;
  const CliResult r = sweep(j);
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("the PP=1 dump is not a run of one stage over layers 0-4"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(report()["counts"]["pass"], 0);
}

TEST_F(HostileEngineTest, APp1RunThatWritesTwoStagesIsNoReference) {
  const CliResult r = sweep(scenario_with(
      "[ -n \"$cuts\" ] || cuts=4\nexec \"$SPLITCHECK\" run \"$scenario\" --split \"$cuts\" "
      "--out \"$out\"\n"));
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("2 stage(s) in its /stages, 1 asked"), std::string::npos) << r.out;
  EXPECT_EQ(report()["counts"]["error"], 7);
}

TEST_F(HostileEngineTest, ADumpWithoutStagesIsUnprovenUnlessWaivedEverywhere) {
  if (!have_h5py()) GTEST_SKIP() << "Debian's python3-h5py is not installed (scripts/setup.sh)";
  const std::string strip =
      "\"$SPLITCHECK\" run \"$scenario\" --split \"$cuts\" --out \"$out.full\" || exit 1\n"
      "[ \"$cuts\" = 3 ] && exec /usr/bin/python3 \"$EDIT\" \"$out.full\" \"$out\" nostages x\n"
      "mv \"$out.full\" \"$out\"\n";
  CliResult r = sweep(scenario_with(strip));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  json rep = report();
  EXPECT_EQ(rep["counts"]["pass"], 6);
  EXPECT_EQ(rep["counts"]["unproven"], 1);
  EXPECT_EQ(message_of(rep, "split-3")
                .rfind("unproven: this split point: the dump carries no "
                       "/stages",
                       0),
            0u)
      << message_of(rep, "split-3");
  // The console, summary.md and junit.xml say so too, not only report.json.
  EXPECT_NE(r.out.find("split-3          unproven"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 unproven"), std::string::npos) << r.out;
  EXPECT_NE(file_text(path("rep") / "summary.md").find("unproven"), std::string::npos);
  EXPECT_NE(file_text(path("rep") / "junit.xml").find("<failure type=\"unproven\""),
            std::string::npos);

  // Waived by name: a pass, and the waiver printed in every form, every time.
  json waived = scenario_with(strip);
  waived["engine"]["evidence"] = {{"waived", "engine 0.3 writes no /stages (issue 7)"}};
  r = sweep(waived);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  rep = report();
  EXPECT_EQ(rep["counts"]["pass"], 7);
  EXPECT_NE(r.out.find("evidence:        WAIVED by the scenario: engine 0.3 writes no /stages"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("partition evidence WAIVED"), std::string::npos) << r.out;
  for (const char* form : {"summary.md", "junit.xml", "report.html"})
    EXPECT_NE(file_text(path("rep") / form).find("WAIVED"), std::string::npos) << form;
}

TEST_F(HostileEngineTest, AMissingLayerIsNamedFirstWithItsCause) {
  if (!have_h5py()) GTEST_SKIP() << "Debian's python3-h5py is not installed (scripts/setup.sh)";
  json j = scenario_with(
      "\"$SPLITCHECK\" run \"$scenario\" --split \"$cuts\" --out \"$out.full\" || exit 1\n"
      "[ \"$cuts\" = 3 ] && exec /usr/bin/python3 \"$EDIT\" \"$out.full\" \"$out\" drop "
      "forward/0/layers/5\n"
      "[ \"$cuts\" = 6 ] && exec /usr/bin/python3 \"$EDIT\" \"$out.full\" \"$out\" extra "
      "forward/0/layers/6/attn_out\n"
      "mv \"$out.full\" \"$out\"\n");
  const CliResult r = sweep(j);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json rep = report();
  EXPECT_EQ(rep["counts"]["pass"], 5);
  EXPECT_EQ(message_of(rep, "split-3")
                .rfind("forward/0/layers/5/pre_attn: missing in the partitioned run (layer not "
                       "computed)",
                       0),
            0u)
      << message_of(rep, "split-3");
  EXPECT_EQ(message_of(rep, "split-6")
                .rfind("forward/0/layers/6/attn_out_extra: only in the partitioned run", 0),
            0u)
      << message_of(rep, "split-6");
  const fs::path s = path("scenario.json");
  const CliResult b =
      cli("bisect " + quote(s.string()) + " --out " + quote(path("repro.json").string()));
  EXPECT_EQ(b.code, 1) << b.out << b.err;
  EXPECT_NE(b.out.find("cause: layer not computed"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("(forward/0/layers/5/pre_attn)"), std::string::npos) << b.out;
  // The repro holds the blocks the engine uses: this one reads {scenario}, so the author's.
  const json repro = json::parse(file_text(path("repro.json")));
  EXPECT_EQ(repro["partitions"]["splits"], json::parse("[[3]]"));
  EXPECT_FALSE(repro.contains("speculative")) << repro.dump();
  // compare leads with the same dataset.
  const std::string runs = (path("rep") / "runs").string();
  const CliResult c = cli("compare " + quote(runs + "/pp1.h5") + " " + quote(runs + "/split-3.h5"));
  EXPECT_EQ(c.code, 1) << c.out << c.err;
  EXPECT_EQ(c.out.rfind("dataset /forward/0/layers/5/pre_attn only in A (missing from B) (cause: "
                        "layer not computed)",
                        0),
            0u)
      << c.out;
}

// The causes beyond the layers, and the tied head, through the runner: an engine that leaves
// one site of a layer unrecorded (a recording gap: "site not recorded", not a layer not
// computed), one whose logits differ with every layer equal (the head), and one whose PP=1
// declares its head tied to the embedding while a stage's is not ("head not tied to the
// embedding", from the stage check). Sweep lines, report.json and bisect all name them.
TEST_F(HostileEngineTest, CausesBeyondTheLayersAndAnUntiedHeadAreNamed) {
  if (!have_h5py()) GTEST_SKIP() << "Debian's python3-h5py is not installed (scripts/setup.sh)";
  json j = scenario_with(
      "\"$SPLITCHECK\" run \"$scenario\" --split \"$cuts\" --out \"$out.full\" || exit 1\n"
      "py() { exec /usr/bin/python3 \"$EDIT\" \"$out.full\" \"$out\" \"$@\"; }\n"
      "[ -z \"$cuts\" ] && py attr stages/0:head_tied=1\n"
      "[ \"$cuts\" = 2 ] && py attr stages/1:head_tied=1 drop forward/0/layers/4/attn_out\n"
      "[ \"$cuts\" = 4 ] && py attr stages/1:head_tied=1 bump forward/0/logits\n"
      "[ \"$cuts\" = 6 ] && py attr stages/1:head_tied=0\n"
      "py attr stages/1:head_tied=1\n");
  const CliResult r = sweep(j);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json rep = report();
  EXPECT_EQ(rep["counts"]["pass"], 4) << r.out;
  auto cause_of = [&](const std::string& key) {
    for (const json& c : rep["cases"])
      if (c["key"] == key) return c.value("cause", std::string("(none)"));
    return std::string("(no case)");
  };
  EXPECT_EQ(cause_of("split-2"), "site not recorded");
  EXPECT_EQ(message_of(rep, "split-2")
                .rfind("forward/0/layers/4/attn_out: missing in the partitioned run (site not "
                       "recorded)",
                       0),
            0u)
      << message_of(rep, "split-2");
  EXPECT_EQ(cause_of("split-4"), "head: final norm or lm_head");
  EXPECT_EQ(cause_of("split-6"), "head not tied to the embedding");
  EXPECT_EQ(message_of(rep, "split-6").rfind("head not tied to the embedding: stage 1's head", 0),
            0u)
      << message_of(rep, "split-6");
  EXPECT_EQ(cause_of("split-3"), "(none)");
  // Report nits: the stages' tensors are the dump's held_tensors; the timing speaks of jobs.
  EXPECT_GT(rep["cases"][0]["stages"][0].value("tensors", 0), 0) << rep["cases"][0].dump();
  EXPECT_NE(file_text(path("rep") / "report.html").find("with 2 jobs"), std::string::npos);
  // The console's line of each ends with its cause; summary.md and report.html show it too.
  for (const char* cause : {"(cause: site not recorded)", "(cause: head: final norm or lm_head)",
                            "(cause: head not tied to the embedding)"})
    EXPECT_NE(r.out.find(cause), std::string::npos) << cause << "\n" << r.out;
  EXPECT_NE(file_text(path("rep") / "summary.md").find("**head not tied to the embedding**"),
            std::string::npos);
  EXPECT_NE(file_text(path("rep") / "report.html").find("data-cause=\"site not recorded\""),
            std::string::npos);
  const CliResult b = cli("bisect " + quote(path("scenario.json").string()) + " --jobs 2 --out " +
                          quote(path("repro.json").string()));
  EXPECT_EQ(b.code, 1) << b.out << b.err;
  EXPECT_NE(b.out.find("cause: site not recorded"), std::string::npos) << b.out;
}

// Bytes edited after they were written (the dataset's digest attribute left as it was): the
// runner reads every dataset once and checks its digest as it reads, so the case is an
// error naming the dataset, never a comparison of bytes the engine did not write.
TEST_F(HostileEngineTest, BytesThatNoLongerMatchTheirDigestAreACorruptDump) {
  if (!have_h5py()) GTEST_SKIP() << "Debian's python3-h5py is not installed (scripts/setup.sh)";
  const std::string flip =
      "\"$SPLITCHECK\" run \"$scenario\" --split \"$cuts\" --out \"$out\" || exit 1\n"
      "[ \"$cuts\" = 3 ] || exit 0\n"
      "exec /usr/bin/python3 - \"$out\" <<'PY'\n"
      "import sys, h5py, numpy as np\n"
      "with h5py.File(sys.argv[1], 'r+') as f:\n"
      "    d = f['forward/0/logits']\n"
      "    a = d[()]\n"
      "    raw = np.frombuffer(a.tobytes(), np.uint8).copy()\n"
      "    raw[0] ^= 1\n"
      "    d[...] = np.frombuffer(raw.tobytes(), a.dtype).reshape(a.shape)\n"
      "PY\n";
  const CliResult r = sweep(scenario_with(flip));
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  const json rep = report();
  EXPECT_EQ(rep["counts"]["pass"], 6);
  EXPECT_EQ(count_verdict(rep, "error"), 1);
  const std::string m = message_of(rep, "split-3");
  EXPECT_NE(m.find("corrupt dump"), std::string::npos) << m;
  EXPECT_NE(m.find("/forward/0/logits"), std::string::npos) << m;
  EXPECT_NE(m.find("hash to"), std::string::npos) << m;
}

TEST_F(HostileEngineTest, ShardsOfDifferentPp1sAreNotMerged) {
  // The engine's model seed comes from a file the scenario does not see.
  const fs::path seed = path("seed.txt");
  json j =
      scenario_with("sed \"s/\\\"seed\\\": [0-9]*/\\\"seed\\\": $(cat " + seed.string() +
                    ")/\" \"$scenario\" > \"$out.json\"\n"
                    "exec \"$SPLITCHECK\" run \"$out.json\" --split \"$cuts\" --out \"$out\"\n");
  const fs::path s = path("scenario.json");
  write_text(s, j.dump(2));
  for (const char* shard : {"0", "1"}) {
    write_text(seed, shard[0] == '0' ? "11" : "12");
    const CliResult r = cli("sweep " + quote(s.string()) + " --shard " + shard + "/2 --report " +
                            quote(path(std::string("shard") + shard).string()));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
  }
  const CliResult m = cli("merge " + quote((path("shard0") / "report.json").string()) + " " +
                          quote((path("shard1") / "report.json").string()) + " --report " +
                          quote(path("merged").string()));
  EXPECT_EQ(m.code, 2) << m.out << m.err;
  EXPECT_NE(m.err.find("different identity.pp1_content_sha256"), std::string::npos) << m.err;
  EXPECT_FALSE(fs::exists(path("merged") / "report.json"));
}

TEST_F(HostileEngineTest, SelfCheckRefusesAnEngineThatDiffersFromItself) {
  // Every other run of the engine uses another model seed.
  const fs::path count = path("count.txt");
  json j = scenario_with(
      "n=$(cat " + count.string() + " 2>/dev/null || echo 0); echo $((n+1)) > " + count.string() +
      "\nsed \"s/\\\"seed\\\": [0-9]*/\\\"seed\\\": $((n % 2 + 3))/\" "
      "\"$scenario\" > \"$out.json\"\n"
      "exec \"$SPLITCHECK\" run \"$out.json\" --split \"$cuts\" --out \"$out\"\n");
  const CliResult r = sweep(j, "--self-check");
  EXPECT_EQ(r.code, 4) << r.out << r.err;
  EXPECT_NE(r.out.find("PP=1 run twice DIFFERS"), std::string::npos) << r.out;
  const json rep = report();
  EXPECT_EQ(rep["verdict"], "refused");
  EXPECT_FALSE(rep["self_check"]["reproduced"].get<bool>());
  EXPECT_TRUE(rep["cases"].empty());
}

TEST_F(HostileEngineTest, CommandZeroIsFoundOnTheScenariosPath) {
  // splitcheck's own PATH has a `myengine` that fails; the scenario's env names another.
  const fs::path good = path("good"), bad = path("bad");
  fs::create_directories(good);
  fs::create_directories(bad);
  write_text(good / "myengine", "#!/bin/sh\nexec " + quote(SPLITCHECK_BINARY) +
                                    " run \"$1\" --split \"$2\" --out \"$3\"\n");
  write_text(bad / "myengine", "#!/bin/sh\necho wrong engine >&2; exit 9\n");
  fs::permissions(good / "myengine", fs::perms::owner_all);
  fs::permissions(bad / "myengine", fs::perms::owner_all);
  json j = scenario_with("");
  j["engine"]["command"] = {"myengine", "{scenario}", "{cuts}", "{out}"};
  j["engine"]["env"] = {{"PATH", good.string() + ":/usr/bin:/bin"}};
  const fs::path s = path("scenario.json");
  write_text(s, j.dump(2));
  const std::string cmd = "PATH=" + quote(bad.string()) + ":\"$PATH\" " + quote(SPLITCHECK_BINARY) +
                          " sweep " + quote(s.string()) + " > " + quote(path("out.txt").string()) +
                          " 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string out = file_text(path("out.txt"));
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("7 pass"), std::string::npos) << out;
  EXPECT_EQ(out.find("wrong engine"), std::string::npos) << out;
}

TEST_F(HostileEngineTest, SeedIsTheEnginesOwn) {
  json j = scenario_with("echo \"seed=$4\" >&2; exit 1\n");
  j["engine"]["command"] = {path("engine.sh").string(), "{scenario}", "{cuts}", "{out}", "{seed}"};
  j.erase("model");
  const fs::path s = path("scenario.json");
  write_text(s, j.dump(2));
  // {seed} without engine.seed (nor an explicit model seed) is refused, naming the place.
  CliResult r = cli("sweep " + quote(s.string()));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("/engine/command/4: {seed} needs the engine's seed"), std::string::npos)
      << r.err;
  j["engine"]["seed"] = 1234;
  write_text(s, j.dump(2));
  r = cli("sweep " + quote(s.string()));
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("| seed=1234"), std::string::npos) << r.out;
}

TEST_F(HostileEngineTest, AGrandchildThatLeavesTheSessionEndsWithItsRun) {
  // A copy of sleep named after the test: its command line is the marker.
  const std::string marker = "splitcheck-escape-" + std::to_string(getpid());
  const std::string sleeper = path(marker).string();
  fs::copy_file("/bin/sleep", sleeper);
  const CliResult r = sweep(
      scenario_with("setsid " + sleeper +
                    " 300 </dev/null >/dev/null 2>&1 &\n"
                    "( ( " +
                    sleeper +
                    " 301 & ) & ) </dev/null >/dev/null 2>&1\n"
                    "exec \"$SPLITCHECK\" run \"$scenario\" --split \"$cuts\" --out \"$out\"\n"));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(all_gone(marker, 2)) << processes_with(marker).size() << " left";
}

// SIGINT, SIGTERM and SIGHUP mid-sweep: every engine (and what it started) killed, the report
// of what finished written with the rest interrupted, the exit status 128 + the signal.
class InterruptTest : public HostileEngineTest, public ::testing::WithParamInterface<int> {};

TEST_P(InterruptTest, KillsEveryEngineAndStillReports) {
  const int sig = GetParam();
  const std::string marker = "splitcheck-sleeper-" + std::to_string(getpid());
  const std::string sleeper = path(marker).string();
  fs::copy_file("/bin/sleep", sleeper);
  json j = scenario_with(
      "if [ \"$cuts\" = 5 ] || [ \"$cuts\" = 6 ]; then\n"
      "  setsid " +
      sleeper +
      " 300 </dev/null >/dev/null 2>&1 &\n"
      "  touch \"$out.started\"; exec " +
      sleeper +
      " 300\nfi\n"
      "exec \"$SPLITCHECK\" run \"$scenario\" --split \"$cuts\" --out \"$out\"\n");
  const fs::path s = path("scenario.json");
  write_text(s, j.dump(2));
  const std::string out = path("out.txt").string();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (freopen(out.c_str(), "w", stdout) == nullptr) _exit(126);
    execl(SPLITCHECK_BINARY, SPLITCHECK_BINARY, "sweep", s.c_str(), "--jobs", "2", "--report",
          path("rep").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const fs::path runs = path("rep") / "runs";
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(fs::exists(runs / "split-5.h5.started") && fs::exists(runs / "split-6.h5.started")) &&
         std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(fs::exists(runs / "split-6.h5.started"));
  const auto t0 = std::chrono::steady_clock::now();
  kill(pid, sig);
  int status = 0;
  waitpid(pid, &status, 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status)) << "splitcheck died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 128 + sig) << file_text(out);
  EXPECT_LT(seconds, 10);
  EXPECT_TRUE(all_gone(marker, 2)) << processes_with(marker).size() << " left";
  const json rep = report();
  EXPECT_EQ(rep["verdict"], "interrupted");
  EXPECT_EQ(rep["exit_code"], 128 + sig);
  EXPECT_GE(rep["counts"]["interrupted"].get<int>(), 2);
  EXPECT_EQ(rep["counts"]["pass"].get<int>() + rep["counts"]["interrupted"].get<int>(), 7);
  EXPECT_NE(file_text(out).find("interrupted"), std::string::npos) << file_text(out);
}

INSTANTIATE_TEST_SUITE_P(Signals, InterruptTest, ::testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const auto& info) { return std::string(sigabbrev_np(info.param)); });

TEST_F(HostileEngineTest, AnyBytesOnStderrStillGiveEveryReport) {
  // Every byte 0x00-0xFF, ANSI and OSC escapes, then 100 MB of noise on one case.
  const CliResult r = sweep(scenario_with(
      "if [ \"$cuts\" = 2 ]; then /usr/bin/printf 'x\\033[31mred\\033]0;title\\007 "
      "\\377\\376\\n' >&2; i=0; while [ $i -lt 256 ]; do /usr/bin/printf \"\\\\$(printf %o $i)\" "
      ">&2; i=$((i+1)); done; exit 1; fi\n"
      "if [ \"$cuts\" = 3 ]; then head -c 100000000 /dev/urandom >&2; exit 1; fi\n"
      "exec \"$SPLITCHECK\" run \"$scenario\" --split \"$cuts\" --out \"$out\"\n"));
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  EXPECT_NE(r.out.find("x\\x1b[31mred\\x1b]0;title\\x07"), std::string::npos);
  const json rep = report();
  EXPECT_EQ(rep["counts"]["error"], 2);
  EXPECT_EQ(rep["counts"]["pass"], 5);
  // Of the 100 MB, the first and the last MiB are kept on disk; the rest is counted.
  EXPECT_LE(fs::file_size(path("rep") / "runs" / "split-3.stderr"), (uintmax_t{2} << 20) + 100);
  EXPECT_NE(file_text(path("rep") / "runs" / "split-3.stderr").find(" bytes omitted ..."),
            std::string::npos);
  for (const char* form : {"summary.md", "junit.xml", "report.html", "report.json"}) {
    const std::string text = file_text(path("rep") / form);
    EXPECT_EQ(text.find('\x1b'), std::string::npos) << form;
    EXPECT_NE(text.find("red"), std::string::npos) << form;
  }
  // A --report path with a byte that is not UTF-8.
  const fs::path odd = path("rep-\xff");
  const CliResult o =
      cli("sweep " + quote(path("scenario.json").string()) + " --report " + quote(odd.string()));
  EXPECT_EQ(o.code, 3) << o.err;
  EXPECT_TRUE(fs::exists(odd / "report.json"));
  EXPECT_TRUE(fs::exists(odd / "report.html"));
}

// Two sweeps given one report folder: while the first runs, the second (whose engine writes
// nothing and exits 0) is refused, as is any sweep or bisect given the first's work
// directory; the first, undisturbed, passes on its own dumps.
TEST_F(HostileEngineTest, ASweepIntoAWorkDirectoryInUseIsRefused) {
  const std::string release = path("release").string();
  const json a = scenario_with(
      "\"$SPLITCHECK\" run \"$scenario\" --split \"$cuts\" --out \"$out\" || exit 1\n"
      "[ -n \"$cuts\" ] && exit 0\ntouch \"$out.started\"; i=0\n"
      "while [ ! -e " +
      quote(release) + " ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done\n");
  write_text(path("a.json"), a.dump(2));
  const fs::path liar = path("liar.sh");
  write_text(liar, "#!/bin/sh\nsleep 0.1\nexit 0\n");
  fs::permissions(liar, fs::perms::owner_all);
  json b = a;
  b["engine"]["command"] = {liar.string(), "{out}"};
  write_text(path("b.json"), b.dump(2));
  const pid_t pid = start_cli(
      {"sweep", path("a.json").string(), "--filter", "split-3", "--report", path("rep").string()},
      path("a.txt").string());
  ASSERT_GT(pid, 0);
  const bool started = wait_for(path("rep") / "runs" / "pp1.h5.started");
  const std::string runs = (path("rep") / "runs").string();
  const std::string in_use = runs +
                             ": the work directory is in use by another sweep or bisect (pid " +
                             std::to_string(pid) + ")";
  if (started) {
    expect_one_line_refusal(
        cli("sweep " + quote(path("b.json").string()) + " --report " + quote(path("rep").string())),
        {in_use});
    expect_one_line_refusal(cli("sweep " + quote(path("b.json").string()) + " --work-dir " +
                                quote(runs) + " --report " + quote(path("rep-b").string())),
                            {in_use});
    expect_one_line_refusal(cli("bisect " + quote(path("b.json").string()) + " --work-dir " +
                                quote(runs) + " --out " + quote(path("b-repro.json").string())),
                            {in_use});
  }
  write_text(release, "");
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(started) << file_text(path("a.txt"));
  EXPECT_EQ(WEXITSTATUS(status), 0) << file_text(path("a.txt"));
  EXPECT_EQ(report()["counts"]["pass"], 1) << file_text(path("a.txt"));
  EXPECT_FALSE(fs::exists(path("rep-b") / "report.json"));
}

// A file at {out} that the run did not make: one last modified before the run started (an
// earlier run's dump, copied with its time) is no dump of this run.
TEST_F(HostileEngineTest, ADumpOlderThanItsRunIsNotItsRun) {
  const CliResult r =
      sweep(scenario_with("\"$SPLITCHECK\" run \"$scenario\" --split \"$cuts\" --out "
                          "\"$out\" || exit 1\n"
                          "[ -z \"$cuts\" ] || touch -d '2020-01-01 00:00:00' \"$out\"\n"),
            "--filter split-3");
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  const json rep = report();
  EXPECT_EQ(rep["counts"]["pass"], 0);
  EXPECT_NE(message_of(rep, "split-3").find("was last modified before its run started"),
            std::string::npos)
      << message_of(rep, "split-3");
}

// An engine that computes PP=1 whatever it is asked, and writes the /stages asked: its own
// dispatch trace (every event on stage 0) shows that the partition did not run.
TEST_F(HostileEngineTest, AStageTraceOfFewerStagesThanDeclaredIsNotThePartition) {
  if (!have_h5py()) GTEST_SKIP() << "Debian's python3-h5py is not installed (scripts/setup.sh)";
  const CliResult r =
      sweep(scenario_with("\"$SPLITCHECK\" run \"$scenario\" --split '' --out \"$out\" || exit 1\n"
                          "[ -z \"$cuts\" ] && exit 0\n"
                          "exec /usr/bin/python3 - \"$out\" \"$cuts\" <<'PY'\n"
                          "import sys, h5py\n"
                          "bounds = [0] + [int(c) for c in sys.argv[2].split(',')] + [8]\n"
                          "with h5py.File(sys.argv[1], 'r+') as f:\n"
                          "    s0 = dict(f['stages/0'].attrs)\n"
                          "    del f['stages']\n"
                          "    for s in range(len(bounds) - 1):\n"
                          "        g = f.create_group(f'stages/{s}')\n"
                          "        for k, v in s0.items():\n"
                          "            g.attrs[k] = v\n"
                          "        g.attrs.modify('layer_begin', bounds[s])\n"
                          "        g.attrs.modify('layer_end', bounds[s + 1])\n"
                          "        if s > 0:\n"
                          "            g.attrs['embedding'] = 'missing'\n"
                          "    if 'partition' in f.attrs:\n"
                          "        del f.attrs['partition']\n"
                          "PY\n"),
            "--filter split-3");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json rep = report();
  EXPECT_EQ(rep["counts"]["pass"], 0);
  const std::string m = message_of(rep, "split-3");
  EXPECT_NE(m.find("partition not run as asked"), std::string::npos) << m;
  EXPECT_NE(m.find("has stage 0 run layer 3"), std::string::npos) << m;
  EXPECT_NE(m.find("outside its layers 0-3"), std::string::npos) << m;
  EXPECT_NE(m.find("events of 1 of the 2 stages"), std::string::npos) << m;
}

// --self-check with engine.golden: the engine's PP=1 still runs twice and the two runs are
// compared (the golden stays the reference); an engine that differs from itself is refused.
TEST_F(HostileEngineTest, SelfCheckWithAGoldenRunsTheEnginesPp1Twice) {
  json j =
      scenario_with("exec \"$SPLITCHECK\" run \"$scenario\" --split \"$cuts\" --out \"$out\"\n");
  write_text(path("plain.json"), j.dump(2));
  const CliResult g = cli("run " + quote(path("plain.json").string()) + " --split '' --out " +
                          quote(path("golden.h5").string()));
  ASSERT_EQ(g.code, 0) << g.out << g.err;
  j["engine"]["golden"] = path("golden.h5").string();
  CliResult r = sweep(j, "--self-check --filter split-3");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("self-check: PP=1 run twice, bit-identical"), std::string::npos) << r.out;
  EXPECT_TRUE(report()["self_check"]["reproduced"].get<bool>());

  const fs::path count = path("count.txt");
  json odd = scenario_with(
      "n=$(cat " + count.string() + " 2>/dev/null || echo 0); echo $((n+1)) > " + count.string() +
      "\nsed \"s/\\\"seed\\\": [0-9]*/\\\"seed\\\": $((n % 2 + 3))/\" "
      "\"$scenario\" > \"$out.json\"\n"
      "exec \"$SPLITCHECK\" run \"$out.json\" --split \"$cuts\" --out \"$out\"\n");
  odd["engine"]["golden"] = path("golden.h5").string();
  r = sweep(odd, "--self-check --filter split-3");
  EXPECT_EQ(r.code, 4) << r.out << r.err;
  EXPECT_NE(r.out.find("PP=1 run twice DIFFERS"), std::string::npos) << r.out;
  EXPECT_EQ(report()["verdict"], "refused");
}

// SIGINT while bisect's sweep runs: no repro (an interrupted case proves no cause), exit 130,
// every engine gone.
TEST_F(HostileEngineTest, AnInterruptedBisectWritesNoRepro) {
  const std::string marker = "splitcheck-bisect-sleeper-" + std::to_string(getpid());
  const std::string sleeper = path(marker).string();
  fs::copy_file("/bin/sleep", sleeper);
  const json j =
      scenario_with("if [ \"$cuts\" = 1 ]; then touch \"$out.started\"; exec " + sleeper +
                    " 300; fi\n"
                    "exec \"$SPLITCHECK\" run \"$scenario\" --split \"$cuts\" --out "
                    "\"$out\"\n");
  write_text(path("scenario.json"), j.dump(2));
  const fs::path repro = path("repro.json");
  const pid_t pid = start_cli({"bisect", path("scenario.json").string(), "--threads", "2",
                               "--work-dir", path("work").string(), "--out", repro.string()},
                              path("out.txt").string());
  ASSERT_GT(pid, 0);
  const bool started = wait_for(path("work") / "split-1.h5.started");
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(started) << file_text(path("out.txt"));
  ASSERT_TRUE(WIFEXITED(status)) << "splitcheck died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 130) << file_text(path("out.txt"));
  EXPECT_FALSE(fs::exists(repro)) << file_text(repro);
  const std::string out = file_text(path("out.txt"));
  EXPECT_NE(out.find("interrupted by SIGINT"), std::string::npos) << out;
  EXPECT_NE(out.find("no repro written"), std::string::npos) << out;
  EXPECT_EQ(out.find("cause: error"), std::string::npos) << out;
  EXPECT_TRUE(all_gone(marker, 2)) << processes_with(marker).size() << " left";
}

}  // namespace
}  // namespace splitcheck
