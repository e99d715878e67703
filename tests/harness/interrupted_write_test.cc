// Interrupted writes: a real `splitcheck` child process gets a real SIGINT, SIGTERM or
// SIGKILL while it writes a report (sweep --report), a dump (run --out), a checkpoint
// or a golden (golden update). No file ever appears at a final path half-written; after
// SIGINT and SIGTERM no temporary is left either; after SIGKILL (which no handler sees)
// only the `.partial` temporary is, and a rerun writes the finished file over it.
// The child holds each write half-done through the test hook
// SPLITCHECK_TEST_WRITE_PAUSE_MS (reference/partial_files.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::file_text;
using cli_test::quote;
using cli_test::write_text;

class InterruptedWriteTest : public cli_test::CliFixture {
 protected:
  InterruptedWriteTest() : CliFixture("splitcheck-interrupted-write-test-") {}

  void SetUp() override {
    CliFixture::SetUp();
    const nlohmann::json j = {
        {"model", {{"preset", "k3-tiny"}, {"overrides", {{"num_hidden_layers", 2}}}}},
        {"workload", {{"prompts", 1}, {"max_new_tokens", 2}, {"max_prompt_tokens", 8}}},
        {"partitions", {{"pp", 2}}}};
    write_text(path("s.json"), j.dump(2));
  }

  // Starts `splitcheck args...` with every write paused half-done; waits until `partial`
  // exists (the write is in progress), sends `sig` and returns the child's wait status.
  int interrupt_during_write(const std::vector<std::string>& args, const fs::path& partial,
                             int sig) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("SPLITCHECK_TEST_WRITE_PAUSE_MS", "600000", 1);
      const std::string out = path("child.log").string();
      FILE* log = std::freopen(out.c_str(), "w", stdout);
      if (log == nullptr || ::dup2(::fileno(stdout), STDERR_FILENO) < 0) ::_exit(120);
      std::vector<char*> argv{const_cast<char*>(SPLITCHECK_BINARY)};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(SPLITCHECK_BINARY, argv.data());
      ::_exit(127);
    }
    EXPECT_GT(pid, 0);
    // The write begins once the run before it is done; the child never ends on its own
    // while its write is paused, so waiting for the temporary cannot pass by accident.
    int status = 0;
    bool seen = false;
    for (;;) {
      if (fs::exists(partial)) {
        seen = true;
        break;
      }
      if (::waitpid(pid, &status, WNOHANG) == pid) break;  // ended without writing
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(seen) << partial << " never appeared: " << file_text(path("child.log"));
    if (!seen) return status;
    EXPECT_EQ(::kill(pid, sig), 0);
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig)
        << "status " << status << ": " << file_text(path("child.log"));
    return status;
  }

  // After the signal: nothing at `final`; the temporary gone unless the signal was SIGKILL.
  void expect_nothing_half_written(const fs::path& final_path, const fs::path& partial, int sig) {
    EXPECT_FALSE(fs::exists(final_path)) << final_path;
    if (sig == SIGKILL)
      EXPECT_TRUE(fs::exists(partial)) << "SIGKILL cannot be handled; the temporary stays";
    else
      EXPECT_FALSE(fs::exists(partial)) << partial << " left after signal " << sig;
  }
};

TEST_F(InterruptedWriteTest, ASweepKilledDuringItsReportLeavesNoPartialReportAndRerunsClean) {
  for (const int sig : {SIGINT, SIGTERM, SIGKILL}) {
    SCOPED_TRACE(sig);
    const fs::path report = path("report-" + std::to_string(sig));
    const fs::path json = report / "report.json";
    const fs::path partial = report / "report.json.partial";
    interrupt_during_write({"sweep", path("s.json").string(), "--report", report.string()}, partial,
                           sig);
    expect_nothing_half_written(json, partial, sig);
    for (const char* form : {"report.html", "junit.xml", "summary.md"})
      EXPECT_FALSE(fs::exists(report / form)) << form;
    // A rerun writes every form whole and leaves no temporary.
    const auto r =
        cli("sweep " + quote(path("s.json").string()) + " --report " + quote(report.string()));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(nlohmann::json::parse(file_text(json))["exit_code"], 0);
    for (const auto& e : fs::directory_iterator(report))
      EXPECT_NE(e.path().extension(), ".partial") << e.path() << " left by the rerun";
  }
}

TEST_F(InterruptedWriteTest, ADumpACheckpointAndAGoldenInterruptedLeaveNothingHalfWritten) {
  const std::string s = path("s.json").string();
  const struct {
    const char* name;
    std::vector<std::string> args;
    fs::path final_path;
    int sig;
  } cases[] = {
      {"dump", {"run", s, "--out", path("d.h5").string()}, path("d.h5"), SIGINT},
      {"checkpoint", {"checkpoint", s, "--out", path("c.h5").string()}, path("c.h5"), SIGTERM},
      {"golden",
       {"golden", "--dir", path("golden").string(), "update", "--reason", "interrupted", s},
       path("golden") / "s.h5",
       SIGKILL},
      {"golden-term",
       {"golden", "--dir", path("golden-t").string(), "update", "--reason", "interrupted", s},
       path("golden-t") / "s.h5",
       SIGTERM},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path partial = c.final_path.string() + ".partial";
    interrupt_during_write(c.args, partial, c.sig);
    expect_nothing_half_written(c.final_path, partial, c.sig);
    if (c.final_path.parent_path().filename().string().rfind("golden", 0) == 0) {
      EXPECT_FALSE(fs::exists(c.final_path.parent_path() / "MANIFEST.json"));
    }
    // The rerun writes the finished file (over a stale temporary after SIGKILL).
    std::string cmd;
    for (const std::string& a : c.args) cmd += quote(a) + " ";
    const auto r = cli(cmd);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_TRUE(fs::exists(c.final_path));
    EXPECT_FALSE(fs::exists(partial));
  }
  // The rerun's dump is sound.
  const auto v = cli("verify-dump " + quote(path("d.h5").string()));
  EXPECT_EQ(v.code, 0) << v.out << v.err;
}

}  // namespace
}  // namespace splitcheck
