// The runner protocol's pieces on their own: the one-pass template expansion, the engine
// block's validation, and real child processes (fake engines written as /bin/sh scripts)
// that exit non-zero, cannot start, or hang past their timeout with a child that ignores
// SIGTERM, after which no process of theirs may survive.
#include "harness/runner/engine_process.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness/scenario/engine_spec.h"
#include "harness/scenario/scenario.h"
#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::file_text;
using cli_test::write_text;

TEST(EngineTemplate, ExpandsInOnePassSoAValueIsNeverExpandedAgain) {
  const std::map<std::string, std::string> values{
      {"pp", "2"}, {"cuts", "5"}, {"out", "/tmp/{pp}{cuts}.h5"}, {"split", "pp2/split-5"}};
  EXPECT_EQ(expand_template("--out={out}", values), "--out=/tmp/{pp}{cuts}.h5");
  EXPECT_EQ(expand_template("{pp}x{cuts}", values), "2x5");
  EXPECT_EQ(expand_template("{{pp}} {{{pp}}}", values), "{pp} {2}");
  EXPECT_EQ(expand_template("{split}", values), "pp2/split-5");
}

TEST(EngineTemplate, MalformedTemplatesAreNamed) {
  EXPECT_EQ(template_error("--cuts={cuts} {{literal}}"), "");
  EXPECT_NE(template_error("{outt}").find("unknown placeholder {outt}"), std::string::npos);
  EXPECT_NE(template_error("{out").find("unclosed"), std::string::npos);
  EXPECT_NE(template_error("out}").find("unmatched"), std::string::npos);
}

nlohmann::json engine_scenario(nlohmann::json command) {
  return {
      {"engine", {{"command", std::move(command)}, {"num_hidden_layers", 6}, {"timeout_s", 5}}}};
}

TEST(EngineBlock, AnUnknownPlaceholderIsAScenarioErrorNamingItsPointer) {
  Result<Scenario> s =
      parse_scenario(engine_scenario({"python3", "run.py", "--out", "{out}", "--seed", "{seeed}"}),
                     "x.json", "/base");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(s.status().message().find("x.json: /engine/command/5: unknown placeholder {seeed}"),
            std::string::npos)
      << s.status().message();
}

TEST(EngineBlock, ResolvesAndRoundTripsAndSetsTheLayerCount) {
  nlohmann::json j = engine_scenario({"./engine", "{cuts}"});
  j["engine"]["cwd"] = "sub";
  j["engine"]["env"] = {{"A", "1"}};
  j["engine"]["attn_res_block_size"] = 3;
  Result<Scenario> s = parse_scenario(j, "x.json", "/base");
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  ASSERT_TRUE(s->external.has_value());
  EXPECT_EQ(s->external->cwd, "/base/sub");
  EXPECT_EQ(s->model.num_hidden_layers, 6);
  EXPECT_EQ(s->model.attn_res_block_size, 3);
  const nlohmann::json resolved = resolved_scenario_json(*s);
  Result<Scenario> again = parse_scenario(resolved, "x.json", "/elsewhere");
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  EXPECT_EQ(resolved_scenario_json(*again), resolved);
  // A layer count that the model block contradicts is refused.
  j["model"] = {{"overrides", {{"num_hidden_layers", 8}}}};
  Result<Scenario> bad = parse_scenario(j, "x.json", "/base");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("/engine/num_hidden_layers"), std::string::npos);
  // The external keys without a command are refused.
  Result<Scenario> no_cmd = parse_scenario({{"engine", {{"timeout_s", 3}}}}, "x.json", "/b");
  ASSERT_FALSE(no_cmd.is_ok());
  EXPECT_NE(no_cmd.status().message().find("/engine/timeout_s"), std::string::npos);
}

class EngineProcessTest : public cli_test::CliFixture {
 protected:
  EngineProcessTest() : CliFixture("splitcheck-engine-process-") {}

  fs::path script(const std::string& name, const std::string& body) {
    const fs::path p = path(name);
    write_text(p, "#!/bin/sh\n" + body);
    fs::permissions(p, fs::perms::owner_all);
    return p;
  }

  EngineProcess process(const fs::path& program, std::vector<std::string> args = {}) {
    EngineProcess p;
    p.argv = {program.string()};
    p.argv.insert(p.argv.end(), args.begin(), args.end());
    p.cwd = dir_.string();
    p.timeout_s = 5;
    p.stdout_path = path("run.stdout").string();
    p.stderr_path = path("run.stderr").string();
    return p;
  }
};

TEST_F(EngineProcessTest, RunsWithoutAShellInItsCwdWithItsEnvironment) {
  const fs::path s = script("engine.sh",
                            "echo \"argc=$#\"; for a in \"$@\"; do echo \"[$a]\"; done\n"
                            "echo \"cwd=$(pwd) X=$X_ENGINE pgid=$(ps -o pgid= -p $$ | tr -d ' ') "
                            "pid=$$\"\n");
  EngineProcess p = process(s, {"a b", "$(touch injected)", "; rm -rf /", ""});
  p.env = {{"X_ENGINE", "it works"}};
  Result<ProcessOutcome> o = run_engine_process(p);
  ASSERT_TRUE(o.is_ok()) << o.status().message();
  EXPECT_TRUE(o->ok()) << o->describe(5);
  const std::string out = file_text(path("run.stdout"));
  EXPECT_NE(out.find("argc=4\n[a b]\n[$(touch injected)]\n[; rm -rf /]\n[]\n"), std::string::npos)
      << out;
  EXPECT_FALSE(fs::exists(path("injected")));
  EXPECT_NE(out.find("cwd=" + dir_.string() + " X=it works"), std::string::npos) << out;
  // Its own process group: its pgid is its pid.
  const size_t pg = out.find("pgid="), pid = out.find("pid=", pg + 5);
  ASSERT_NE(pg, std::string::npos);
  ASSERT_NE(pid, std::string::npos);
  EXPECT_EQ(out.substr(pg + 5, out.find(' ', pg) - pg - 5),
            out.substr(pid + 4, out.find('\n', pid) - pid - 4));
}

TEST_F(EngineProcessTest, ExitStatusSignalAndACommandThatCannotStart) {
  Result<ProcessOutcome> fails =
      run_engine_process(process(script("fail.sh", "echo 'boom: bad input' >&2; exit 3\n")));
  ASSERT_TRUE(fails.is_ok());
  EXPECT_EQ(fails->end, ProcessOutcome::End::kExited);
  EXPECT_EQ(fails->exit_code, 3);
  EXPECT_EQ(fails->describe(5), "exited with status 3");
  EXPECT_EQ(file_tail(path("run.stderr").string()), "boom: bad input\n");

  Result<ProcessOutcome> crash = run_engine_process(process(script("crash.sh", "kill -SEGV $$\n")));
  ASSERT_TRUE(crash.is_ok());
  EXPECT_EQ(crash->end, ProcessOutcome::End::kSignaled);
  EXPECT_EQ(crash->signal, SIGSEGV);

  Result<ProcessOutcome> missing = run_engine_process(process(path("no-such-engine")));
  ASSERT_TRUE(missing.is_ok());
  EXPECT_EQ(missing->end, ProcessOutcome::End::kNotStarted);
  EXPECT_NE(missing->describe(5).find("No such file"), std::string::npos) << missing->describe(5);
}

bool process_gone(pid_t pid) {
  // Reparented to init once its parent died: wait (bounded) until init has reaped it.
  for (int i = 0; i < 200; ++i) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    if (!stat || !std::getline(stat, text)) return true;
    const size_t close = text.rfind(')');
    if (close != std::string::npos && text.size() > close + 2 && text[close + 2] == 'Z' && i > 50)
      return true;  // a zombie: dead, waiting for its reaper
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST_F(EngineProcessTest, ATimeoutKillsTheWholeGroupEvenWhatIgnoresSigterm) {
  const fs::path pids = path("pids");
  const fs::path s =
      script("hang.sh", "trap '' TERM\n(trap '' TERM; exec sleep 1000) &\necho $! > " +
                            pids.string() + "\necho $$ >> " + pids.string() +
                            "\necho 'hanging at split 3' >&2\n"
                            "while :; do sleep 1; done\n");
  EngineProcess p = process(s);
  p.timeout_s = 0.5;
  p.kill_grace_s = 0.2;
  const auto t0 = std::chrono::steady_clock::now();
  Result<ProcessOutcome> o = run_engine_process(p);
  ASSERT_TRUE(o.is_ok());
  EXPECT_EQ(o->end, ProcessOutcome::End::kTimedOut);
  EXPECT_EQ(o->describe(0.5), "timed out after 0.5 s (process group killed)");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5);
  EXPECT_NE(file_tail(path("run.stderr").string()).find("hanging at split 3"), std::string::npos);
  std::ifstream in(pids);
  pid_t child = 0, leader = 0;
  ASSERT_TRUE(in >> child >> leader);
  EXPECT_TRUE(process_gone(child)) << "the engine's child " << child << " survived";
  EXPECT_TRUE(process_gone(leader)) << "the engine " << leader << " survived";
}

TEST_F(EngineProcessTest, WhatANormalExitLeavesInItsGroupIsKilled) {
  const fs::path pids = path("pids");
  const fs::path s =
      script("leaves.sh", "(exec sleep 1000) &\necho $! > " + pids.string() + "\nexit 0\n");
  Result<ProcessOutcome> o = run_engine_process(process(s));
  ASSERT_TRUE(o.is_ok());
  EXPECT_TRUE(o->ok());
  std::ifstream in(pids);
  pid_t child = 0;
  ASSERT_TRUE(in >> child);
  EXPECT_TRUE(process_gone(child)) << "the engine left " << child << " running";
}

TEST_F(EngineProcessTest, OutputIsKeptCappedAtItsFirstAndLastBytesWithoutStoppingTheEngine) {
  // 10 MB on each stream, fast: the engine must finish (nothing blocks it) and each file
  // keep the first and the last MiB, the rest counted.
  const fs::path s =
      script("loud.sh",
             "printf HEAD; head -c 10000000 /dev/zero; printf TAIL\n"
             "printf HEAD >&2; head -c 10000000 /dev/zero >&2; echo last line >&2\n");
  EngineProcess p = process(s);
  Result<ProcessOutcome> o = run_engine_process(p);
  ASSERT_TRUE(o.is_ok()) << o.status().message();
  EXPECT_TRUE(o->ok()) << o->describe(5);
  const size_t keep = p.output_keep_bytes;
  ASSERT_EQ(keep, size_t{1} << 20);
  const std::pair<const char*, size_t> streams[] = {{"run.stdout", 10000008},
                                                    {"run.stderr", 10000014}};
  for (const auto& [name, bytes] : streams) {
    const std::string text = file_text(path(name));
    const std::string omitted = fmt::format("\n... {} bytes omitted ...\n", bytes - 2 * keep);
    EXPECT_EQ(text.size(), 2 * keep + omitted.size()) << name;
    EXPECT_EQ(text.rfind("HEAD", 0), 0u) << name;
    EXPECT_EQ(text.find(omitted), keep) << name;
  }
  EXPECT_TRUE(file_text(path("run.stdout")).ends_with("TAIL"));
  EXPECT_TRUE(file_tail(path("run.stderr").string()).ends_with("last line\n"));
  // Under the cap, a stream is kept whole, without a note.
  ASSERT_TRUE(run_engine_process(process(script("quiet.sh", "echo quiet >&2\n"))).is_ok());
  EXPECT_EQ(file_text(path("run.stderr")), "quiet\n");
}

}  // namespace
}  // namespace splitcheck
