#include "harness/runner/engine_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

extern char** environ;

namespace splitcheck {
namespace {

using Clock = std::chrono::steady_clock;

// The inherited environment with `extra` added, a name in `extra` replacing the inherited.
std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    const bool replaced =
        std::any_of(extra.begin(), extra.end(), [&](const auto& kv) { return kv.first == name; });
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Waits until `pid` has exited (leaving it a zombie, so its process group id stays taken)
// or `deadline` passes; true when it exited.
bool wait_exited(pid_t pid, Clock::time_point deadline) {
  auto nap = std::chrono::microseconds(500);
  for (;;) {
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid)
      return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(std::min<Clock::duration>(nap, deadline - now));
    nap = std::min(nap * 2, std::chrono::microseconds(20000));
  }
}

}  // namespace

std::string ProcessOutcome::describe(double timeout_s) const {
  switch (end) {
    case End::kExited:
      return fmt::format("exited with status {}", exit_code);
    case End::kSignaled:
      return fmt::format("killed by signal {} ({})", signal, strsignal(signal));
    case End::kTimedOut:
      return fmt::format("timed out after {:g} s (process group killed)", timeout_s);
    case End::kNotStarted:
      return "could not start: " + not_started;
  }
  return "?";
}

Result<ProcessOutcome> run_engine_process(const EngineProcess& p) {
  ProcessOutcome out;
  if (p.argv.empty() || p.argv[0].empty()) {
    out.not_started = "empty command";
    return out;
  }
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, p.stdout_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, p.stderr_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!p.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, p.cwd.c_str());
  // Its own process group (pgid = its pid), default signal dispositions and mask.
  sigset_t defaults, empty;
  sigemptyset(&empty);
  sigfillset(&defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::vector<std::string> argv_s = p.argv;
  std::vector<std::string> env_s = environment_with(p.env);
  std::vector<char*> argv = c_strings(argv_s);
  std::vector<char*> envp = c_strings(env_s);
  pid_t pid = -1;
  const auto t0 = Clock::now();
  const int rc = posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    // The output files may be what failed: say so rather than blame the command.
    if (std::ofstream probe(p.stderr_path, std::ios::app); !probe)
      return internal_error(p.stderr_path + ": cannot create the engine's stderr file");
    out.not_started = fmt::format("{}: {}{}", p.argv[0], std::strerror(rc),
                                  p.cwd.empty() ? "" : fmt::format(" (cwd {})", p.cwd));
    return out;
  }
  const auto deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(p.timeout_s));
  if (!wait_exited(pid, deadline)) {
    out.end = ProcessOutcome::End::kTimedOut;
    kill(-pid, SIGTERM);
    const auto grace = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(p.kill_grace_s));
    wait_exited(pid, grace);
  }
  // The leader is a zombie (or still running after a timeout): its group id cannot be
  // reused yet, so this reaches exactly what the command left behind.
  kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (out.end == ProcessOutcome::End::kTimedOut) return out;
  if (WIFEXITED(status)) {
    out.end = ProcessOutcome::End::kExited;
    out.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    out.end = ProcessOutcome::End::kSignaled;
    out.signal = WTERMSIG(status);
  }
  return out;
}

std::string file_tail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff start =
      std::max<std::streamoff>(0, size - static_cast<std::streamoff>(max_bytes));
  in.seekg(start);
  std::string text(static_cast<size_t>(size - start), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (start > 0) {
    const size_t nl = text.find('\n');
    if (nl != std::string::npos && nl + 1 < text.size()) text = text.substr(nl + 1);
    text = "..." + text;
  }
  return text;
}

}  // namespace splitcheck
