// Runs one engine command (harness/scenario/engine_spec.h) as a child process: argv without
// a shell, in its own process group, with extra environment, a working directory and a
// deadline, and with no descriptor of splitcheck but stdin (/dev/null), stdout and stderr.
//
// Every process the command starts ends with its run. Each run has a small supervisor
// process between splitcheck and the engine: a child subreaper, so that whatever the
// engine leaves behind, also a process that calls setsid or double-forks out of its group,
// becomes the supervisor's child once its parent dies. When the engine exits, the
// supervisor SIGKILLs its process group and then every descendant left, and reaps them all
// before it reports how the engine ended. On the deadline, or when an InterruptWatch
// (harness/runner/interrupt.h) takes SIGINT, SIGTERM or SIGHUP, the supervisor sends
// SIGTERM to the engine's group, waits `kill_grace_s` for it to exit, then kills
// everything as above. The supervisor dies with the thread that started it
// (PR_SET_PDEATHSIG), killing the engine with it. Runs may happen at once from several
// threads.
//
//   EngineProcess p{argv, cwd, env, 120.0, "run.stdout", "run.stderr"};
//   ASSIGN_OR_RETURN(ProcessOutcome o, run_engine_process(p));
//   if (!o.ok()) puts(o.describe(p.timeout_s).c_str());  // "timed out after 120 s (...)"
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernels/status.h"

namespace splitcheck {

struct EngineProcess {
  // argv[0] without a '/' is looked up on the PATH the engine gets (`env`'s PATH when it
  // sets one, else splitcheck's); one with a '/' is relative to `cwd`.
  std::vector<std::string> argv;
  std::string cwd;
  std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing) the inherited
  double timeout_s = 600;
  // The command's stdout and stderr reach splitcheck through pipes, read as they come (so
  // that a full pipe never stops the engine), and are kept here: the first and the last
  // `output_keep_bytes` of each, with what lies between counted, not kept
  // ("... 8388608 bytes omitted ...").
  std::string stdout_path;
  std::string stderr_path;
  size_t output_keep_bytes = size_t{1} << 20;
  double kill_grace_s = 2;  // between SIGTERM and SIGKILL on a timeout or an interrupt
};

// How one run ended.
struct ProcessOutcome {
  // kInterrupted: splitcheck got SIGINT, SIGTERM or SIGHUP under an InterruptWatch, and
  // the run was stopped (or never started).
  enum class End { kExited, kSignaled, kTimedOut, kNotStarted, kInterrupted };
  End end = End::kNotStarted;
  int exit_code = -1;       // kExited
  int signal = 0;           // kSignaled: the engine's; kInterrupted: the one splitcheck got
  std::string not_started;  // kNotStarted: why (e.g. "python4: No such file or directory")
  double seconds = 0;
  bool ok() const { return end == End::kExited && exit_code == 0; }
  // "exited with status 1", "killed by signal 11 (Segmentation fault)", "timed out after
  // 120 s (process group killed)", "could not start: ...", "interrupted by SIGINT (engine
  // processes killed)".
  std::string describe(double timeout_s) const;
};

// Runs `p` to its end; when it returns, no process of the run is left. A Status error only
// when the harness itself cannot (the output files cannot be created, the supervisor died);
// a command that cannot start is an outcome (kNotStarted: "myengine: not found on
// PATH=/a:/b", "./engine: Permission denied (cwd /w)"). After an interrupt it starts
// nothing and returns kInterrupted.
Result<ProcessOutcome> run_engine_process(const EngineProcess& p);

// The last `max_bytes` of file `path` (from a line start where one falls inside), or "".
std::string file_tail(const std::string& path, size_t max_bytes = 2000);

}  // namespace splitcheck
