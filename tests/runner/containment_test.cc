// Every process an engine run starts ends with its run: real engines (/bin/sh scripts in a
// temporary directory) that leave grandchildren in new sessions or double-forked out of
// their group, hang past the deadline ignoring SIGTERM, look for descriptors they should
// not have, are found on the PATH of their own environment, or are running when splitcheck
// gets SIGTERM. Every process of a test has the test's directory in its command line (the
// scripts live there, and `sleep` is called through a link there), so a scan of
// /proc/*/cmdline finds whatever survived.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/runner/engine_process.h"
#include "harness/runner/interrupt.h"
#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::file_text;
using cli_test::write_text;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The pids of live processes (zombies have no command line) whose command line holds
// `marker`.
std::vector<pid_t> processes_with(const std::string& marker) {
  std::vector<pid_t> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = file_text(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) != std::string::npos) found.push_back(std::stoi(name));
  }
  return found;
}

std::string describe_processes(const std::vector<pid_t>& pids) {
  std::string out;
  for (pid_t pid : pids) {
    std::string cmdline = file_text("/proc/" + std::to_string(pid) + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    out += std::to_string(pid) + ": " + cmdline + "\n";
  }
  return out;
}

// Waits (at most `seconds`) until every file in `paths` is non-empty.
bool wait_for_files(const std::vector<fs::path>& paths, double seconds) {
  const auto t0 = Clock::now();
  for (;;) {
    bool all = true;
    for (const fs::path& p : paths) all = all && !file_text(p).empty();
    if (all) return true;
    if (seconds_since(t0) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

class ContainmentTest : public cli_test::CliFixture {
 protected:
  ContainmentTest() : CliFixture("splitcheck-containment-") {}

  void SetUp() override {
    CliFixture::SetUp();
    fs::create_symlink("/usr/bin/sleep", path("sleep"));
  }
  void TearDown() override {
    reset_interrupt_for_testing();
    CliFixture::TearDown();
  }

  std::string marker() const { return dir_.string(); }
  std::string sleep_cmd() const { return path("sleep").string(); }

  fs::path script(const std::string& name, const std::string& body) {
    const fs::path p = path(name);
    write_text(p, "#!/bin/sh\n" + body);
    fs::permissions(p, fs::perms::owner_all);
    return p;
  }

  // Shell lines that start three grandchildren which outlive the engine's process group:
  // one in a new session, one double-forked, one a daemon (new session, parent gone),
  // each writing its pid to `<tag>-<n>.pid` just before it becomes a long sleep; then
  // lines that wait until all three have.
  std::string escaping_grandchildren(const std::string& tag) {
    const std::string s = sleep_cmd();
    const std::string pid_file = path(tag).string();
    std::string body = "setsid sh -c 'echo $$ > " + pid_file + "-1.pid; exec " + s + " 300' &\n" +
                       "( ( sh -c 'echo $$ > " + pid_file + "-2.pid; exec " + s +
                       " 301' & ) & )\n" + "setsid sh -c '( sh -c \"echo \\$\\$ > " + pid_file +
                       "-3.pid; exec " + s + " 302\" & )' &\n";
    body += "while [ ! -s " + pid_file + "-1.pid ] || [ ! -s " + pid_file + "-2.pid ] || [ ! -s " +
            pid_file + "-3.pid ]; do " + s + " 0.01; done\n";
    return body;
  }

  std::vector<pid_t> grandchildren(const std::string& tag) {
    std::vector<pid_t> pids;
    for (int i = 1; i <= 3; ++i) {
      std::ifstream in(path(tag + "-" + std::to_string(i) + ".pid"));
      pid_t pid = 0;
      if (in >> pid) pids.push_back(pid);
    }
    return pids;
  }

  EngineProcess process(const fs::path& program, const std::string& run = "run") {
    EngineProcess p;
    p.argv = {program.string()};
    p.cwd = dir_.string();
    p.timeout_s = 30;
    p.stdout_path = path(run + ".stdout").string();
    p.stderr_path = path(run + ".stderr").string();
    return p;
  }

  void expect_nothing_left() {
    const std::vector<pid_t> left = processes_with(marker());
    EXPECT_TRUE(left.empty()) << "left running:\n" << describe_processes(left);
  }
};

TEST_F(ContainmentTest, GrandchildrenInNewSessionsOrDoubleForkedEndWhenTheEngineExits) {
  const fs::path s = script("engine.sh", escaping_grandchildren("gc") + "exit 0\n");
  Result<ProcessOutcome> o = run_engine_process(process(s));
  ASSERT_TRUE(o.is_ok()) << o.status().message();
  EXPECT_TRUE(o->ok()) << o->describe(30) << file_text(path("run.stderr"));
  const std::vector<pid_t> gc = grandchildren("gc");
  EXPECT_EQ(gc.size(), 3u);
  // Checked at once: the run returns only after every process of it was reaped.
  for (pid_t pid : gc) EXPECT_FALSE(fs::exists("/proc/" + std::to_string(pid))) << pid;
  expect_nothing_left();
}

TEST_F(ContainmentTest, ATimeoutEndsEveryProcessOfTheRun) {
  const fs::path s =
      script("engine.sh", escaping_grandchildren("gc") + "exec " + sleep_cmd() + " 299\n");
  EngineProcess p = process(s);
  p.timeout_s = 1;
  p.kill_grace_s = 1;
  const auto t0 = Clock::now();
  Result<ProcessOutcome> o = run_engine_process(p);
  const double took = seconds_since(t0);
  ASSERT_TRUE(o.is_ok()) << o.status().message();
  EXPECT_EQ(o->end, ProcessOutcome::End::kTimedOut) << o->describe(1);
  EXPECT_GE(took, 1.0);
  EXPECT_LT(took, p.timeout_s + p.kill_grace_s + 1) << "took " << took << " s";
  EXPECT_EQ(grandchildren("gc").size(), 3u);
  expect_nothing_left();
}

TEST_F(ContainmentTest, WhatIgnoresSigtermIsKilledAfterTheGrace) {
  // The engine, its child in a new session and the sleeps all ignore SIGTERM.
  const fs::path s =
      script("engine.sh", "trap '' TERM\nsetsid sh -c 'trap \"\" TERM; echo $$ > " +
                              path("gc-1.pid").string() + "; exec " + sleep_cmd() +
                              " 300' &\nwhile :; do " + sleep_cmd() + " 0.05; done\n");
  EngineProcess p = process(s);
  p.timeout_s = 0.5;
  p.kill_grace_s = 1;
  const auto t0 = Clock::now();
  Result<ProcessOutcome> o = run_engine_process(p);
  const double took = seconds_since(t0);
  ASSERT_TRUE(o.is_ok()) << o.status().message();
  EXPECT_EQ(o->end, ProcessOutcome::End::kTimedOut) << o->describe(0.5);
  EXPECT_GE(took, p.timeout_s + p.kill_grace_s) << "SIGKILL came before the grace was over";
  EXPECT_LT(took, p.timeout_s + p.kill_grace_s + 1) << "took " << took << " s";
  EXPECT_EQ(grandchildren("gc").size(), 1u);
  expect_nothing_left();
}

// The descriptors `ls -l /proc/self/fd` listed, as "fd -> target" lines.
std::map<int, std::string> listed_descriptors(const std::string& listing) {
  std::map<int, std::string> fds;
  std::istringstream in(listing);
  for (std::string line; std::getline(in, line);) {
    const size_t arrow = line.find(" -> ");
    if (arrow == std::string::npos) continue;
    const size_t space = line.rfind(' ', arrow - 1);
    fds[std::stoi(line.substr(space + 1, arrow - space - 1))] = line.substr(arrow + 4);
  }
  return fds;
}

TEST_F(ContainmentTest, NoDescriptorOfSplitcheckReachesTheEngine) {
  // Inheritable descriptors of splitcheck: a file (another case's dump) and a pipe.
  const fs::path secret = path("other-case.h5");
  write_text(secret, "dump");
  const int file_fd = open(secret.c_str(), O_RDONLY);
  ASSERT_GE(file_fd, 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  struct stat pipe_stat {};
  ASSERT_EQ(fstat(pipe_fds[0], &pipe_stat), 0);
  const auto pipe_inode = static_cast<uintmax_t>(pipe_stat.st_ino);
  EngineProcess p = process("/bin/ls");
  p.argv = {"/bin/ls", "-l", "/proc/self/fd/"};
  Result<ProcessOutcome> o = run_engine_process(p);
  close(file_fd);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  ASSERT_TRUE(o.is_ok()) << o.status().message();
  EXPECT_TRUE(o->ok()) << o->describe(30) << file_text(path("run.stderr"));
  const std::string listing = file_text(path("run.stdout"));
  const std::map<int, std::string> fds = listed_descriptors(listing);
  // 0, 1 and 2, and the one ls opened to list the directory.
  ASSERT_EQ(fds.size(), 4u) << listing;
  // Its stdout and stderr are pipes of their own, which splitcheck reads into the files.
  EXPECT_EQ(fds.at(0), "/dev/null");
  EXPECT_EQ(fds.at(1).rfind("pipe:[", 0), 0u) << listing;
  EXPECT_EQ(fds.at(2).rfind("pipe:[", 0), 0u) << listing;
  EXPECT_NE(fds.at(1), fds.at(2));
  EXPECT_NE(fds.at(3).find("/proc/"), std::string::npos) << listing;
  EXPECT_EQ(listing.find(secret.string()), std::string::npos) << listing;
  EXPECT_EQ(listing.find("pipe:[" + std::to_string(pipe_inode) + "]"), std::string::npos)
      << listing;
}

TEST_F(ContainmentTest, ConcurrentRunsSeeNoneOfEachOthersFilesAndAllEnd) {
  // Each run's output files are open in splitcheck while the others start theirs.
  constexpr int kRuns = 6;
  const fs::path s = script("engine.sh", "setsid " + sleep_cmd() + " 300 &\nls -l /proc/$$/fd/\n");
  std::vector<Result<ProcessOutcome>> outcomes(kRuns, internal_error("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kRuns; ++i)
    threads.emplace_back(
        [&, i] { outcomes[i] = run_engine_process(process(s, "run" + std::to_string(i))); });
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kRuns; ++i) {
    ASSERT_TRUE(outcomes[i].is_ok()) << outcomes[i].status().message();
    EXPECT_TRUE(outcomes[i]->ok()) << outcomes[i]->describe(30);
    const std::string listing = file_text(path("run" + std::to_string(i) + ".stdout"));
    for (const auto& [fd, target] : listed_descriptors(listing)) {
      // The shell keeps its script open on a descriptor of its own (above 9).
      if (fd > 2 && target == s.string()) continue;
      EXPECT_LE(fd, 2) << "run " << i << ": " << fd << " -> " << target;
    }
  }
  expect_nothing_left();
}

TEST_F(ContainmentTest, TheCommandIsLookedUpOnThePathOfItsOwnEnvironment) {
  fs::create_directories(path("bin"));
  fs::create_directories(path("other"));
  script("bin/myengine", "echo from-bin\n");
  script("other/myengine", "echo from-other\n");
  const char* old = std::getenv("PATH");
  const std::string saved = old != nullptr ? old : "";
  setenv("PATH", (path("other").string() + ":" + saved).c_str(), 1);

  EngineProcess p = process("myengine");
  p.env = {{"PATH", path("bin").string()}};
  Result<ProcessOutcome> given = run_engine_process(p);
  const std::string given_out = file_text(path("run.stdout"));
  // Without PATH in its environment, the engine inherits splitcheck's and is found there.
  p.env = {};
  Result<ProcessOutcome> inherited = run_engine_process(p);
  const std::string inherited_out = file_text(path("run.stdout"));
  setenv("PATH", saved.c_str(), 1);
  ASSERT_TRUE(given.is_ok()) << given.status().message();
  ASSERT_TRUE(inherited.is_ok()) << inherited.status().message();
  EXPECT_TRUE(given->ok()) << given->describe(30);
  EXPECT_EQ(given_out, "from-bin\n");
  EXPECT_TRUE(inherited->ok()) << inherited->describe(30);
  EXPECT_EQ(inherited_out, "from-other\n");

  // A relative entry is taken from the engine's cwd.
  p.env = {{"PATH", "/nonexistent:bin"}};
  Result<ProcessOutcome> relative = run_engine_process(p);
  ASSERT_TRUE(relative.is_ok()) << relative.status().message();
  EXPECT_TRUE(relative->ok()) << relative->describe(30);
  EXPECT_EQ(file_text(path("run.stdout")), "from-bin\n");

  const std::string nowhere = path("a").string() + ":" + path("b").string();
  p.env = {{"PATH", nowhere}};
  Result<ProcessOutcome> missing = run_engine_process(p);
  ASSERT_TRUE(missing.is_ok()) << missing.status().message();
  EXPECT_EQ(missing->end, ProcessOutcome::End::kNotStarted);
  EXPECT_EQ(missing->describe(30), "could not start: myengine: not found on PATH=" + nowhere);
}

TEST_F(ContainmentTest, WhenSplitcheckIsKilledItsEnginesEndToo) {
  // A stand-in for splitcheck, forked while this process has one thread, runs an engine
  // and is SIGKILLed (no handler, no destructor runs); its supervisor notices
  // (PR_SET_PDEATHSIG) and ends the run.
  const fs::path s =
      script("engine.sh", escaping_grandchildren("gc") + "exec " + sleep_cmd() + " 299\n");
  const EngineProcess p = process(s);
  const pid_t stand_in = fork();
  ASSERT_GE(stand_in, 0);
  if (stand_in == 0) {
    (void)run_engine_process(p);
    _exit(0);
  }
  const bool started = wait_for_files({path("gc-1.pid"), path("gc-2.pid"), path("gc-3.pid")}, 5);
  kill(stand_in, SIGKILL);
  int status = 0;
  waitpid(stand_in, &status, 0);
  EXPECT_TRUE(started);
  // The supervisor was a child of the stand-in: wait (at most 3 s) for it to finish.
  const auto t0 = Clock::now();
  while (!processes_with(marker()).empty() && seconds_since(t0) < 3)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  expect_nothing_left();
}

// Whether every thread of this process blocks `sig`, so that kill(getpid(), sig) reaches
// only the InterruptWatch.
bool every_thread_blocks(int sig) {
  for (const auto& task : fs::directory_iterator("/proc/self/task")) {
    std::ifstream status(task.path() / "status");
    bool blocked = false;
    for (std::string line; std::getline(status, line);)
      if (line.rfind("SigBlk:", 0) == 0)
        blocked = (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1)) & 1;
    if (!blocked) return false;
  }
  return true;
}

TEST_F(ContainmentTest, SigtermStopsEveryRunningEngineAndEveryLaterRun) {
  InterruptWatch watch;
  ASSERT_TRUE(every_thread_blocks(SIGTERM)) << "a thread started before the watch";
  std::vector<Result<ProcessOutcome>> outcomes(2, internal_error("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    const std::string tag = "gc" + std::to_string(i);
    const fs::path s =
        script("engine" + std::to_string(i) + ".sh",
               "setsid sh -c 'echo $$ > " + path(tag + "-1.pid").string() + "; exec " +
                   sleep_cmd() + " 300' &\nexec " + sleep_cmd() + " 300\n");
    EngineProcess p = process(s, "run" + std::to_string(i));
    p.timeout_s = 60;
    threads.emplace_back([&outcomes, i, p] { outcomes[i] = run_engine_process(p); });
  }
  const bool started = wait_for_files({path("gc0-1.pid"), path("gc1-1.pid")}, 5);
  const auto t0 = Clock::now();
  kill(getpid(), SIGTERM);
  for (std::thread& t : threads) t.join();
  const double took = seconds_since(t0);
  EXPECT_TRUE(started);
  EXPECT_LT(took, 3) << "the runs took " << took << " s to stop";
  EXPECT_EQ(interrupt_signal(), SIGTERM);
  EXPECT_EQ(exit_status_for_signal(interrupt_signal()), 143);
  for (const Result<ProcessOutcome>& o : outcomes) {
    ASSERT_TRUE(o.is_ok()) << o.status().message();
    EXPECT_EQ(o->end, ProcessOutcome::End::kInterrupted) << o->describe(60);
    EXPECT_EQ(o->describe(60), "interrupted by SIGTERM (engine processes killed)");
  }
  expect_nothing_left();

  // Nothing starts after an interrupt.
  const fs::path s = script("later.sh", "touch " + path("later-ran").string() + "\n");
  const auto t1 = Clock::now();
  Result<ProcessOutcome> later = run_engine_process(process(s, "later"));
  ASSERT_TRUE(later.is_ok()) << later.status().message();
  EXPECT_EQ(later->end, ProcessOutcome::End::kInterrupted);
  EXPECT_LT(seconds_since(t1), 0.1);
  EXPECT_FALSE(fs::exists(path("later-ran")));
  EXPECT_FALSE(fs::exists(path("later.stdout")));
}

TEST(ContainmentInterrupt, ExitStatusesFollowTheShell) {
  EXPECT_EQ(exit_status_for_signal(SIGINT), 130);
  EXPECT_EQ(exit_status_for_signal(SIGTERM), 143);
  EXPECT_EQ(exit_status_for_signal(SIGHUP), 129);
  ProcessOutcome o;
  o.end = ProcessOutcome::End::kInterrupted;
  o.signal = SIGINT;
  EXPECT_EQ(o.describe(1), "interrupted by SIGINT (engine processes killed)");
}

TEST(ContainmentInterrupt, AWatchRestoresTheSignalMaskAndRecordsNothingWithoutASignal) {
  sigset_t before, during, after;
  pthread_sigmask(SIG_BLOCK, nullptr, &before);
  {
    InterruptWatch watch;
    pthread_sigmask(SIG_BLOCK, nullptr, &during);
    EXPECT_TRUE(sigismember(&during, SIGINT));
    EXPECT_TRUE(sigismember(&during, SIGTERM));
    EXPECT_TRUE(sigismember(&during, SIGHUP));
  }
  pthread_sigmask(SIG_BLOCK, nullptr, &after);
  EXPECT_EQ(sigismember(&after, SIGTERM), sigismember(&before, SIGTERM));
  EXPECT_EQ(sigismember(&after, SIGINT), sigismember(&before, SIGINT));
  EXPECT_EQ(interrupt_signal(), 0);
}

}  // namespace
}  // namespace splitcheck
