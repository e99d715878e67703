#include "harness/transport/rank_launcher.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::atomic<int> g_signal{0};
extern "C" void note_signal(int sig) { g_signal = sig; }

std::string ranks_dir() {
  const char* d = std::getenv(kRanksDirEnv);
  return d != nullptr ? d : "";
}

std::string read_first_line(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}

// Written under a temporary name and renamed, so a reader never sees half of it.
void write_rank_file(const fs::path& p, const std::string& text) {
  const fs::path tmp = p.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << text << "\n";
  }
  std::error_code ec;
  fs::rename(tmp, p, ec);
}

// Whether `pid` runs (a zombie has ended).
bool running(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  return close != std::string::npos && stat.size() > close + 2 && stat[close + 2] != 'Z';
}

pid_t pid_of_rank(const fs::path& dir, int rank) {
  const std::string s = read_first_line(dir / fmt::format("rank{}.pid", rank));
  return s.empty() ? 0 : static_cast<pid_t>(std::atol(s.c_str()));
}

std::string how_it_ended(int status) {
  if (WIFEXITED(status)) return fmt::format("exited {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  return "ended";
}

}  // namespace

bool launched_by_ranks() { return !ranks_dir().empty(); }

void record_rank_started(int rank) {
  if (!launched_by_ranks()) return;
  write_rank_file(fs::path(ranks_dir()) / fmt::format("rank{}.pid", rank),
                   std::to_string(::getpid()));
}

void record_verdict(int exit_code) {
  if (!launched_by_ranks()) return;
  write_rank_file(fs::path(ranks_dir()) / "verdict", std::to_string(exit_code));
}

std::string ranks_not_joined(int size) {
  if (!launched_by_ranks()) return "";
  std::string out;
  for (int r = 1; r < size; ++r) {
    const pid_t pid = pid_of_rank(ranks_dir(), r);
    std::string what;
    if (pid == 0)
      what = fmt::format("rank {} never started", r);
    else if (!running(pid))
      what = fmt::format("rank {} (pid {}) ended before it joined", r, pid);
    else
      what = fmt::format("rank {} (pid {}) runs but did not join", r, pid);
    out += (out.empty() ? "" : ", ") + what;
  }
  return out;
}

int launch_ranks(const std::string& mpiexec, int ranks, const std::vector<std::string>& args,
                 double grace_s) {
  char dir_template[] = "/tmp/splitcheck-ranks-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) {
    fmt::print(stderr, "splitcheck: error: --ranks: cannot create a directory under /tmp\n");
    return 3;
  }
  const fs::path dir = dir_template;
  std::vector<std::string> argv = {mpiexec, "--enable-recovery", "--oversubscribe"};
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {"-np", std::to_string(ranks), fs::read_symlink("/proc/self/exe")});
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  // An interrupt ends the whole MPI job (it is in a process group of its own, so a
  // terminal's ^C does not reach it).
  struct sigaction sa {
  }, old_int{}, old_term{}, old_hup{};
  sa.sa_handler = note_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = ::fork();
  if (child == 0) {
    ::setpgid(0, 0);
    ::setenv(kRanksDirEnv, dir.c_str(), 1);
    ::execv(cargv[0], cargv.data());
    fmt::print(stderr, "splitcheck: error: --ranks: cannot run {}\n", mpiexec);
    ::_exit(127);
  }
  if (child > 0) ::setpgid(child, child);  // also here: no race with the first kill

  int status = 0;
  bool ended = child < 0;
  std::string why_stopped;
  std::optional<Clock::time_point> verdict_at, rank0_gone_at;
  while (!ended) {
    if (::waitpid(child, &status, WNOHANG) == child) {
      ended = true;
      break;
    }
    const auto now = Clock::now();
    if (g_signal != 0) {
      why_stopped = fmt::format("interrupted by signal {}", g_signal.load());
      break;
    }
    if (fs::exists(dir / "verdict")) {
      if (!verdict_at) verdict_at = now;
      if (now - *verdict_at > std::chrono::duration<double>(grace_s)) break;  // mpirun lingers
    } else if (const pid_t rank0 = pid_of_rank(dir, 0); rank0 != 0 && !running(rank0)) {
      // Rank 0 writes its verdict before it ends; give the file system a moment.
      if (!rank0_gone_at) rank0_gone_at = now;
      if (now - *rank0_gone_at > std::chrono::seconds(2) && !fs::exists(dir / "verdict")) {
        why_stopped = fmt::format("rank 0 (pid {}) ended without a verdict", rank0);
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Whatever is left of the job: mpirun, every rank, anything a rank started.
  if (child > 0) {
    ::kill(-child, SIGKILL);
    if (!ended) ::waitpid(child, &status, 0);
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);

  const std::string verdict = read_first_line(dir / "verdict");
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (!verdict.empty() && why_stopped.rfind("interrupted", 0) != 0)
    return std::atoi(verdict.c_str());
  if (why_stopped.empty())
    why_stopped = child < 0
                      ? "mpirun could not be started"
                      : fmt::format("mpirun {} before rank 0 gave a verdict", how_it_ended(status));
  fmt::print(stderr, "splitcheck: error: --ranks {}: {}; the MPI job was ended (exit 3)\n", ranks,
             why_stopped);
  return 3;
}

}  // namespace splitcheck
