#include "harness/runner/engine_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>

#include "harness/runner/interrupt.h"

extern char** environ;

namespace splitcheck {
namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------
// Before the fork: everything the supervisor and the engine need, prepared in the parent.

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

// The PATH in environment `env`, or the system's default search path when it sets none.
std::string search_path(const std::vector<std::string>& env) {
  for (const std::string& e : env)
    if (e.rfind("PATH=", 0) == 0) return e.substr(5);
  std::string path(confstr(_CS_PATH, nullptr, 0), '\0');
  if (path.empty()) return "/bin:/usr/bin";
  confstr(_CS_PATH, path.data(), path.size());
  path.pop_back();  // the terminating NUL
  return path;
}

// Where execvp would find `name` on `path` (a relative entry, or an empty one meaning ".",
// taken from `cwd`): the first executable regular file, else the first regular file (its
// exec then says why not), else nothing.
std::optional<std::string> find_on_path(const std::string& name, const std::string& path,
                                        const std::string& cwd) {
  std::optional<std::string> not_executable;
  size_t from = 0;
  for (;;) {
    const size_t colon = path.find(':', from);
    std::string dir = path.substr(from, colon == std::string::npos ? colon : colon - from);
    if (dir.empty()) dir = ".";
    if (dir[0] != '/' && !cwd.empty()) dir = cwd + "/" + dir;
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
      if (!not_executable) not_executable = candidate;
    }
    if (colon == std::string::npos) return not_executable;
    from = colon + 1;
  }
}

// A descriptor closed when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// One of the engine's output streams, read from a pipe and kept in a file capped at the
// first and the last `keep` bytes; what lies between is counted and named in the file.
class CappedOutput {
 public:
  CappedOutput(int pipe_read, int file, size_t keep) : pipe_(pipe_read), file_(file), keep_(keep) {}
  int fd() const { return open_ ? pipe_.get() : -1; }
  // Reads what the pipe holds now (it is non-blocking), at most `max_reads` times 64 KiB so
  // that an engine writing without pause still lets the caller see its deadline; false once
  // its writers are gone.
  bool take(int max_reads = 16) {
    char buf[65536];
    for (int i = 0; i < max_reads && open_; ++i) {
      const ssize_t n = read(pipe_.get(), buf, sizeof buf);
      if (n > 0) {
        keep(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) open_ = false;
      break;
    }
    return open_;
  }
  // Writes the kept tail after the omitted count; false (with errno) when the file fails.
  bool finish() {
    take(1 << 30);  // every writer has ended: up to the pipe's end or its last byte
    if (omitted_ > 0 && !write_all(fmt::format("\n... {} bytes omitted ...\n", omitted_)))
      return false;
    const size_t n = tail_.size();
    return write_all(tail_.substr(tail_at_ % std::max<size_t>(n, 1))) &&
           write_all(tail_.substr(0, tail_at_ % std::max<size_t>(n, 1))) && !failed_;
  }

 private:
  void keep(const char* p, size_t n) {
    const size_t head = std::min(n, keep_ - std::min(keep_, written_));
    if (head > 0) failed_ |= !write_all(std::string_view(p, head));
    written_ += head;
    p += head;
    n -= head;
    // The tail: a ring of `keep_` bytes; tail_at_ is where the next byte goes.
    for (; n > 0 && keep_ > 0;) {
      if (tail_.size() < keep_) {
        const size_t take = std::min(n, keep_ - tail_.size());
        tail_.append(p, take);
        tail_at_ = tail_.size() % keep_;
        p += take;
        n -= take;
        continue;
      }
      const size_t take = std::min(n, keep_ - tail_at_);
      tail_.replace(tail_at_, take, p, take);
      omitted_ += take;
      tail_at_ = (tail_at_ + take) % keep_;
      p += take;
      n -= take;
    }
    if (keep_ == 0) omitted_ += n;
  }
  bool write_all(std::string_view s) {
    while (!s.empty()) {
      const ssize_t n = write(file_.get(), s.data(), s.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      s.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  Fd pipe_;
  Fd file_;
  size_t keep_;
  bool open_ = true, failed_ = false;
  size_t written_ = 0, omitted_ = 0, tail_at_ = 0;
  std::string tail_;
};

// Why the engine did not start, sent by the engine's child over a close-on-exec pipe.
enum class StartStep : int32_t { kDescriptors = 1, kChdir, kExec };
struct StartFailure {
  StartStep step;
  int32_t err;
};

// How the engine ended, the one record a supervisor writes to its report pipe. Fixed size
// (atomic on a pipe), since the pipe's write end may also sit, briefly, in a supervisor
// that another thread forked at the same moment: its end is the record, never EOF.
struct SupervisorReport {
  enum How : int32_t { kExited = 1, kKilled, kNotStarted, kSupervisorFailed };
  How how;
  int32_t code;         // kExited: the exit status; kKilled: the signal
  int32_t step;         // kNotStarted: a StartStep; kSupervisorFailed: 1 pipe, 2 fork
  int32_t err;          // kNotStarted, kSupervisorFailed: errno
  int32_t stop_signal;  // the signal that told the supervisor to stop before the engine
                        // ended (SIGTERM from splitcheck, or a terminal's SIGINT), or 0
};

// What the supervisor (a child of splitcheck) reads after fork: only async-signal-safe
// calls may follow a fork in a threaded process, so no allocation happens there.
struct SupervisorPlan {
  const char* program;  // resolved before the fork
  char* const* argv;
  char* const* envp;
  const char* cwd;  // nullptr: splitcheck's
  int report_fd;
  int stdin_fd;
  int stdout_fd;
  int stderr_fd;
  std::array<int, 4> keep;  // the four above, ascending
  pid_t parent;
  timespec grace;
  unsigned max_fd;  // where closing stops when close_range is missing
};

// The signals a supervisor waits for: its children, and being told to stop.
sigset_t supervisor_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

// ---------------------------------------------------------------------------------------
// After the fork: the supervisor and the engine's child. Async-signal-safe calls only.

void close_from_to(unsigned lo, unsigned hi, unsigned max_fd) {
  if (lo > hi) return;
  if (close_range(lo, hi, 0) == 0) return;
  for (unsigned fd = lo; fd <= hi && fd < max_fd; ++fd) close(static_cast<int>(fd));
}

[[noreturn]] void start_engine(const SupervisorPlan& plan, pid_t supervisor, int failure_fd) {
  StartFailure failure{StartStep::kDescriptors, 0};
  auto fail = [&](StartStep step) {
    failure = {step, errno};
    ssize_t ignored = write(failure_fd, &failure, sizeof failure);
    (void)ignored;
    _exit(127);
  };
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // should the supervisor itself be killed
  if (getppid() != supervisor) _exit(127);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
  // Above 2 first, so that no dup2 onto 0, 1 or 2 overwrites a descriptor still needed.
  const int in = fcntl(plan.stdin_fd, F_DUPFD_CLOEXEC, 10);
  const int out = fcntl(plan.stdout_fd, F_DUPFD_CLOEXEC, 10);
  const int err = fcntl(plan.stderr_fd, F_DUPFD_CLOEXEC, 10);
  const int report = fcntl(failure_fd, F_DUPFD_CLOEXEC, 10);
  if (in < 0 || out < 0 || err < 0 || report < 0) fail(StartStep::kDescriptors);
  failure_fd = report;
  if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) fail(StartStep::kDescriptors);
  // No descriptor of splitcheck reaches the engine; `report` closes on exec.
  close_from_to(3, static_cast<unsigned>(report) - 1, plan.max_fd);
  close_from_to(static_cast<unsigned>(report) + 1, ~0U, plan.max_fd);
  if (plan.cwd != nullptr && chdir(plan.cwd) != 0) fail(StartStep::kChdir);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(plan.program, plan.argv, plan.envp);
  fail(StartStep::kExec);
  _exit(127);
}

// Calls `fn(pid)` for every child of the calling (single-threaded) process: from
// /proc/thread-self/children, or, where the kernel lacks that file, from a scan of /proc.
template <typename Fn>
void for_each_child(Fn fn) {
  char buf[1024];
  if (const int fd = open("/proc/thread-self/children", O_RDONLY | O_CLOEXEC); fd >= 0) {
    pid_t pid = 0;
    bool digits = false;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] >= '0' && buf[i] <= '9') {
          pid = pid * 10 + (buf[i] - '0');
          digits = true;
        } else if (digits) {
          fn(pid);
          pid = 0;
          digits = false;
        }
      }
    }
    if (digits) fn(pid);
    close(fd);
    return;
  }
  const pid_t self = getpid();
  const int proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (proc < 0) return;
  alignas(dirent64) char entries[4096];
  ssize_t n;
  while ((n = getdents64(proc, entries, sizeof entries)) > 0) {
    for (ssize_t off = 0; off < n;) {
      const auto* d = reinterpret_cast<const dirent64*>(entries + off);
      off += d->d_reclen;
      if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
      char path[64] = "/proc/";
      size_t len = 6;
      for (const char* c = d->d_name; *c != '\0' && len < 50; ++c) path[len++] = *c;
      const char stat_name[] = "/stat";
      for (const char c : stat_name) path[len++] = c;
      const int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      const ssize_t got = read(fd, buf, sizeof buf - 1);
      close(fd);
      if (got <= 0) continue;
      // "pid (comm) state ppid ...": the comm may hold spaces or parentheses.
      ssize_t i = got - 1;
      while (i > 0 && buf[i] != ')') --i;
      i += 4;  // past ") S "
      pid_t ppid = 0;
      for (; i < got && buf[i] >= '0' && buf[i] <= '9'; ++i) ppid = ppid * 10 + (buf[i] - '0');
      if (ppid != self) continue;
      pid_t pid = 0;
      for (const char* c = d->d_name; *c >= '0' && *c <= '9'; ++c) pid = pid * 10 + (*c - '0');
      fn(pid);
    }
  }
  close(proc);
}

// Reaps the children that ended other than `leader` (the engine's orphans, reparented to
// the supervisor); true, with `info` set, once `leader` has ended (left unreaped, so that
// its pid stays its process group's id).
bool reap_until_leader(pid_t leader, siginfo_t& info) {
  for (;;) {
    siginfo_t i{};
    if (waitid(P_ALL, 0, &i, WEXITED | WNOHANG | WNOWAIT) != 0 || i.si_pid == 0) return false;
    if (i.si_pid == leader) {
      info = i;
      return true;
    }
    waitpid(i.si_pid, nullptr, WNOHANG);
  }
}

// Kills the engine's group (`leader` is unreaped) and then every descendant left, which the
// subreaper has inherited, and reaps them all.
void kill_everything(pid_t leader) {
  kill(-leader, SIGKILL);
  for (;;) {
    for_each_child([](pid_t pid) { kill(pid, SIGKILL); });
    bool reaped = false;
    pid_t r;
    while ((r = waitpid(-1, nullptr, WNOHANG)) > 0) reaped = true;
    if (r < 0 && errno == ECHILD) return;
    if (!reaped) {
      const timespec nap{0, 1000000};
      nanosleep(&nap, nullptr);
    }
  }
}

timespec monotonic_now() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t;
}

timespec plus(timespec a, timespec b) {
  a.tv_sec += b.tv_sec;
  a.tv_nsec += b.tv_nsec;
  if (a.tv_nsec >= 1000000000) {
    a.tv_nsec -= 1000000000;
    ++a.tv_sec;
  }
  return a;
}

// `a - b`, or nothing when `a` is not later.
bool later_by(timespec a, timespec b, timespec& diff) {
  if (a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec <= b.tv_nsec)) return false;
  diff.tv_sec = a.tv_sec - b.tv_sec;
  diff.tv_nsec = a.tv_nsec - b.tv_nsec;
  if (diff.tv_nsec < 0) {
    diff.tv_nsec += 1000000000;
    --diff.tv_sec;
  }
  return true;
}

// The supervisor: a child subreaper that starts the engine, waits for it to end or for
// SIGTERM (SIGINT, SIGHUP) telling it to stop, kills whatever is left of the run, and only
// then reports. SIGCHLD and the stop signals arrive blocked (the parent blocked them around
// the fork) and are taken with sigtimedwait.
[[noreturn]] void supervise(const SupervisorPlan& plan) {
  SupervisorReport report{};
  auto finish = [&]() {
    ssize_t ignored = write(plan.report_fd, &report, sizeof report);
    (void)ignored;
    _exit(0);
  };
  struct sigaction act {};
  act.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &act, nullptr);  // not SIG_IGN, which would reap the engine unseen
  act.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &act, nullptr);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != plan.parent) _exit(1);  // splitcheck died before PDEATHSIG was set
  unsigned next = 0;
  for (const int fd : plan.keep) {
    if (static_cast<unsigned>(fd) > next) close_from_to(next, fd - 1, plan.max_fd);
    next = fd + 1;
  }
  close_from_to(next, ~0U, plan.max_fd);

  int start_pipe[2];
  if (pipe2(start_pipe, O_CLOEXEC) != 0) {
    report = {SupervisorReport::kSupervisorFailed, 0, 1, errno, 0};
    finish();
  }
  const pid_t self = getpid();
  const pid_t leader = _Fork();
  if (leader < 0) {
    report = {SupervisorReport::kSupervisorFailed, 0, 2, errno, 0};
    finish();
  }
  if (leader == 0) start_engine(plan, self, start_pipe[1]);
  close(start_pipe[1]);

  const sigset_t waits = supervisor_signals();
  siginfo_t leader_info{};
  bool leader_ended = false, ended_on_its_own = false;
  timespec kill_at{};
  for (;;) {
    if (reap_until_leader(leader, leader_info)) {
      leader_ended = true;
      ended_on_its_own = report.stop_signal == 0;
      break;
    }
    timespec left{};
    if (report.stop_signal != 0 && !later_by(kill_at, monotonic_now(), left)) break;
    siginfo_t info{};
    const int sig = sigtimedwait(&waits, &info, report.stop_signal != 0 ? &left : nullptr);
    if (sig > 0 && sig != SIGCHLD && report.stop_signal == 0) {
      report.stop_signal = sig;
      kill(-leader, SIGTERM);
      for_each_child([](pid_t pid) { kill(pid, SIGTERM); });
      kill_at = plus(monotonic_now(), plan.grace);
    }
  }
  kill(-leader, SIGKILL);
  if (!leader_ended) {
    while (waitid(P_PID, static_cast<id_t>(leader), &leader_info, WEXITED | WNOWAIT) != 0 &&
           errno == EINTR) {
    }
  }
  kill_everything(leader);

  StartFailure failure{};
  if (read(start_pipe[0], &failure, sizeof failure) == static_cast<ssize_t>(sizeof failure)) {
    report = {SupervisorReport::kNotStarted, 0, static_cast<int32_t>(failure.step), failure.err,
              report.stop_signal};
  } else if (leader_info.si_code == CLD_EXITED) {
    report.how = SupervisorReport::kExited;
    report.code = leader_info.si_status;
  } else {
    report.how = SupervisorReport::kKilled;
    report.code = leader_info.si_status;
  }
  // A stop that came after the engine had ended on its own changes nothing.
  if (ended_on_its_own) report.stop_signal = 0;
  finish();
  _exit(0);
}

// ---------------------------------------------------------------------------------------
// The parent's side.

// Reads the supervisor's report, and the engine's output meanwhile; on the deadline (or an
// interrupt) it stops the supervisor. False when the supervisor ended without a report (it
// was killed).
bool await_report(pid_t supervisor, int report_fd, std::array<CappedOutput*, 2> outputs,
                  Clock::time_point deadline, double grace_s, bool& timed_out, bool& stopped,
                  SupervisorReport& report) {
  size_t got = 0;
  bool killed = false;
  Clock::time_point stop_at{};
  const auto note_stop = [&](Clock::time_point now) {
    if (stopped) return;
    stopped = true;
    stop_at = now;
  };
  for (;;) {
    const auto now = Clock::now();
    if (!stopped && now >= deadline) {
      timed_out = true;
      kill(supervisor, SIGTERM);
      note_stop(now);
    }
    if (interrupt_signal() != 0) note_stop(now);  // the watch has told it to stop
    // A supervisor that does not report long after its grace is itself stuck (a process
    // it waits for hangs in the kernel): kill it; the engine's leader dies with it
    // (PR_SET_PDEATHSIG).
    if (stopped && !killed && now - stop_at > std::chrono::duration<double>(grace_s + 10)) {
      kill(supervisor, SIGKILL);
      killed = true;
    }
    int wait_ms = 100;
    if (!stopped)
      wait_ms = static_cast<int>(std::clamp<int64_t>(
          std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count(), 0, 100));
    std::array<pollfd, 3> pfds{pollfd{report_fd, POLLIN, 0}, pollfd{outputs[0]->fd(), POLLIN, 0},
                               pollfd{outputs[1]->fd(), POLLIN, 0}};
    const int ready = poll(pfds.data(), pfds.size(), wait_ms);
    for (int i = 0; i < 2 && ready > 0; ++i)
      if (pfds[i + 1].revents != 0) outputs[i]->take();
    pollfd& pfd = pfds[0];
    if (ready > 0 && pfd.revents == 0) continue;
    if (ready > 0) {
      const ssize_t n =
          read(report_fd, reinterpret_cast<char*>(&report) + got, sizeof report - got);
      if (n > 0) got += static_cast<size_t>(n);
      if (got == sizeof report) return true;
      if (n == 0) return false;  // every write end closed without a report
    } else if (ready == 0) {
      siginfo_t info{};
      if (waitid(P_PID, static_cast<id_t>(supervisor), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == supervisor) {
        // Ended: whatever it wrote before is in the pipe already.
        pfd.revents = 0;
        if (poll(&pfd, 1, 0) > 0) continue;
        return false;
      }
    }
  }
}

// The file `path` for the engine's `what` (stdout, stderr) and the pipe it reaches it
// through: `write_end` for the engine, `kept` reading the other end into the file.
Status open_output(const std::string& path, const char* what, size_t keep, Fd& write_end,
                   std::optional<CappedOutput>& kept) {
  const int file = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (file < 0)
    return internal_error(fmt::format("{}: cannot create the engine's {} file: {}", path, what,
                                      std::strerror(errno)));
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    close(file);
    return internal_error(fmt::format("pipe: {}", std::strerror(errno)));
  }
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  kept.emplace(fds[0], file, keep);
  write_end.reset(fds[1]);
  return Status::ok();
}

// The program that runs argv[0]: itself when it names a path, else the first match on the
// environment's PATH; false, with why not, when there is none.
bool resolve_program(const EngineProcess& p, const std::vector<std::string>& env,
                     std::string& program, std::string& why_not) {
  if (program.find('/') != std::string::npos) return true;
  const std::string path = search_path(env);
  std::optional<std::string> found = find_on_path(program, path, p.cwd);
  if (!found) {
    why_not = fmt::format("{}: not found on PATH={}", program, path);
    return false;
  }
  program = *found;
  return true;
}

// How the supervisor of a run ended, as run_engine_process saw it.
struct SupervisorEnd {
  bool reported;  // it wrote its report
  SupervisorReport report;
  bool stopped;    // it was told to stop (an interrupt, the timeout)
  bool timed_out;  // by the timeout
  int status;      // its wait status
};

// The run's outcome, `out` with its time, from how its supervisor ended.
Result<ProcessOutcome> outcome_of(const EngineProcess& p, ProcessOutcome out,
                                  const SupervisorEnd& e) {
  const SupervisorReport& report = e.report;
  const int interrupted_by = interrupt_signal();
  const bool stopped_early = e.reported ? report.stop_signal != 0 : e.stopped;
  if (!e.reported && !e.stopped)
    return internal_error(
        fmt::format("{}: the engine's supervisor ended without a report ({})", p.argv[0],
                    WIFSIGNALED(e.status) ? fmt::format("killed by signal {}", WTERMSIG(e.status))
                                          : fmt::format("status {}", WEXITSTATUS(e.status))));
  if (e.reported && report.how == SupervisorReport::kNotStarted) {
    const std::string why = std::strerror(report.err);
    out.not_started = static_cast<StartStep>(report.step) == StartStep::kChdir
                          ? fmt::format("{}: cannot enter cwd {}: {}", p.argv[0], p.cwd, why)
                          : fmt::format("{}: {}{}", p.argv[0], why,
                                        p.cwd.empty() ? "" : fmt::format(" (cwd {})", p.cwd));
    return out;
  }
  if (e.reported && report.how == SupervisorReport::kSupervisorFailed) {
    out.not_started = fmt::format("engine supervisor: {}: {}", report.step == 1 ? "pipe" : "fork",
                                  std::strerror(report.err));
    return out;
  }
  if (stopped_early) {
    if (e.timed_out) {
      out.end = ProcessOutcome::End::kTimedOut;
    } else {
      out.end = ProcessOutcome::End::kInterrupted;
      out.signal = interrupted_by != 0 ? interrupted_by : report.stop_signal;
    }
    return out;
  }
  if (report.how == SupervisorReport::kExited) {
    out.end = ProcessOutcome::End::kExited;
    out.exit_code = report.code;
  } else {
    out.end = ProcessOutcome::End::kSignaled;
    out.signal = report.code;
  }
  return out;
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
    case End::kInterrupted: {
      const char* name = sigabbrev_np(signal);
      return fmt::format(
          "interrupted by {} (engine processes killed)",
          name != nullptr ? fmt::format("SIG{}", name) : fmt::format("signal {}", signal));
    }
  }
  return "?";
}

Result<ProcessOutcome> run_engine_process(const EngineProcess& p) {
  ProcessOutcome out;
  if (const int sig = interrupt_signal(); sig != 0) {
    out.end = ProcessOutcome::End::kInterrupted;
    out.signal = sig;
    return out;
  }
  if (p.argv.empty() || p.argv[0].empty()) {
    out.not_started = "empty command";
    return out;
  }
  std::vector<std::string> env_s = environment_with(p.env);
  std::string program = p.argv[0];
  if (!resolve_program(p, env_s, program, out.not_started)) return out;
  const Fd null_fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null_fd.get() < 0) return internal_error(fmt::format("/dev/null: {}", std::strerror(errno)));
  Fd stdout_fd, stderr_fd;
  std::optional<CappedOutput> stdout_kept, stderr_kept;
  RETURN_IF_ERROR(
      open_output(p.stdout_path, "stdout", p.output_keep_bytes, stdout_fd, stdout_kept));
  RETURN_IF_ERROR(
      open_output(p.stderr_path, "stderr", p.output_keep_bytes, stderr_fd, stderr_kept));
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0)
    return internal_error(fmt::format("pipe: {}", std::strerror(errno)));
  const Fd report_read(pipe_fds[0]);
  Fd report_write(pipe_fds[1]);

  std::vector<std::string> argv_s = p.argv;
  std::vector<char*> argv = c_strings(argv_s);
  std::vector<char*> envp = c_strings(env_s);
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  const double grace = std::max(0.0, p.kill_grace_s);
  SupervisorPlan plan{
      program.c_str(),
      argv.data(),
      envp.data(),
      p.cwd.empty() ? nullptr : p.cwd.c_str(),
      report_write.get(),
      null_fd.get(),
      stdout_fd.get(),
      stderr_fd.get(),
      {report_write.get(), null_fd.get(), stdout_fd.get(), stderr_fd.get()},
      getpid(),
      {static_cast<time_t>(grace), static_cast<long>((grace - std::floor(grace)) * 1e9)},
      static_cast<unsigned>(std::min<rlim_t>(files.rlim_cur, 1 << 20))};
  std::sort(plan.keep.begin(), plan.keep.end());

  const auto t0 = Clock::now();
  const auto deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(p.timeout_s));
  // The supervisor starts with its signals blocked; it takes them with sigtimedwait.
  const sigset_t blocked = supervisor_signals();
  sigset_t previous;
  pthread_sigmask(SIG_BLOCK, &blocked, &previous);
  const pid_t supervisor = _Fork();
  if (supervisor == 0) supervise(plan);
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (supervisor < 0) {
    out.not_started = fmt::format("fork: {}", std::strerror(fork_errno));
    return out;
  }
  report_write.reset();
  stdout_fd.reset();
  stderr_fd.reset();

  bool stopped = false, timed_out = false;
  if (!register_engine_supervisor(supervisor)) {
    kill(supervisor, SIGTERM);  // an interrupt came while it started
    stopped = true;
  }
  SupervisorReport report{};
  const bool reported = await_report(supervisor, report_read.get(), {&*stdout_kept, &*stderr_kept},
                                     deadline, grace, timed_out, stopped, report);
  unregister_engine_supervisor(supervisor);
  int status = 0;
  while (waitpid(supervisor, &status, 0) < 0 && errno == EINTR) {
  }
  // Every process of the run has ended: what the pipes hold is all there is.
  if (!stdout_kept->finish() || !stderr_kept->finish())
    return internal_error(fmt::format("{}, {}: cannot write the engine's output: {}", p.stdout_path,
                                      p.stderr_path, std::strerror(errno)));
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return outcome_of(p, std::move(out), SupervisorEnd{reported, report, stopped, timed_out, status});
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
