// Runs one engine command (harness/runner/engine_spec.h) as a child process: argv without
// a shell, in its own process group, with extra environment, a working directory and a
// deadline. On the deadline the whole group gets SIGTERM, then SIGKILL after a grace
// period; once the command exits, whatever it left in its group is killed too, so no run
// leaves a process behind.
//
//   EngineProcess p{argv, cwd, env, 120.0, "run.stdout", "run.stderr"};
//   ASSIGN_OR_RETURN(ProcessOutcome o, run_engine_process(p));
//   if (!o.ok()) puts(o.describe().c_str());   // "timed out after 120 s (process group killed)"
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernels/status.h"

namespace splitcheck {

struct EngineProcess {
  std::vector<std::string> argv;  // argv[0] is looked up on PATH when it has no '/'
  std::string cwd;
  std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing) the inherited
  double timeout_s = 600;
  std::string stdout_path;  // the command's stdout and stderr are written here
  std::string stderr_path;
  double kill_grace_s = 2;  // between SIGTERM and SIGKILL on a timeout
};

// How one run ended.
struct ProcessOutcome {
  enum class End { kExited, kSignaled, kTimedOut, kNotStarted };
  End end = End::kNotStarted;
  int exit_code = -1;       // kExited
  int signal = 0;           // kSignaled
  std::string not_started;  // kNotStarted: why (e.g. "python4: No such file or directory")
  double seconds = 0;
  bool ok() const { return end == End::kExited && exit_code == 0; }
  // "exited with status 1", "killed by signal 11 (Segmentation fault)", "timed out after
  // 120 s (process group killed)", "could not start: ...".
  std::string describe(double timeout_s) const;
};

// Runs `p` to its end. A Status error only when the harness itself cannot (the output
// files cannot be created); a command that cannot start is an outcome (kNotStarted).
Result<ProcessOutcome> run_engine_process(const EngineProcess& p);

// The last `max_bytes` of file `path` (from a line start where one falls inside), or "".
std::string file_tail(const std::string& path, size_t max_bytes = 2000);

}  // namespace splitcheck
