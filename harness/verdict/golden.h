// Goldens: committed PP=1 dumps of the committed CPU scenarios, listed in
// golden/MANIFEST.json (file, sha256, scenario, scenario and model hashes, producer,
// env fingerprint, reason). `verify` recomputes each and compares bit for bit;
// `update` is the only way to change one and records why. A golden keeps every tensor
// of the prefill forwards and the summary (tokens, taps, logits, dispatch, speculative
// figures) of the others.
#pragma once

#include <string>
#include <vector>

#include "kernels/status.h"

namespace splitcheck {

struct GoldenCheck {
  std::string name;
  bool passed = false;
  std::string message;  // one line: what differs, naming the dataset
  // The golden's environment fingerprint differs from this build's (environment.h): one
  // line per field. A golden whose data differ in another environment is not judged
  // (`not_judged`): the difference may be the environment's, so it is never reported as
  // a divergence of the code. Equal data pass whatever the environment.
  std::vector<std::string> environment_differences;
  std::vector<std::string> unrecorded_fields;  // fingerprint fields the golden predates
  bool not_judged = false;
};

// Verifies every golden of `golden_dir`/MANIFEST.json. Scenario paths in the manifest are
// relative to `source_dir`. A Status error means the manifest or a file is unusable, or
// that it lists no golden (nothing verified is never a pass).
Result<std::vector<GoldenCheck>> verify_goldens(const std::string& source_dir,
                                                const std::string& golden_dir);

// Regenerates the golden of each named scenario file (all manifest entries when empty)
// and records `reason` (required, non-empty) and this build's environment fingerprint in
// the manifest.
Status update_goldens(const std::string& source_dir, const std::string& golden_dir,
                      const std::vector<std::string>& scenario_paths, const std::string& reason);

}  // namespace splitcheck
