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
// relative to `source_dir`. A golden made on a backend this machine cannot run (a GPU
// golden where no CUDA device is usable) is not run: it is not judged, and its
// environment differences say what differs (never a divergence). A Status error means the manifest
// or a file is unusable, or that it lists no golden (nothing verified is never a pass).
Result<std::vector<GoldenCheck>> verify_goldens(const std::string& source_dir,
                                                const std::string& golden_dir);

// Regenerates the golden of each named scenario file (all manifest entries when empty)
// and records `reason` (required, non-empty) and this build's environment fingerprint in
// the manifest. `backend` ("cpu", "cuda"; empty: the scenario's own) runs the scenario on
// that backend and is recorded in the entry ("backend"), so that verify runs it there
// too: a GPU golden is the committed scenario run on "cuda", fingerprinted with the GPU
// model, SM count, driver, CUDA runtime and cuBLASLt versions (environment.h). A model
// with hidden size kGoldenSummaryHiddenSize or more gets a summary-level golden (logits,
// taps, tokens, dispatch; "level": "summary" in the entry).
Status update_goldens(const std::string& source_dir, const std::string& golden_dir,
                      const std::vector<std::string>& scenario_paths, const std::string& reason,
                      const std::string& backend = "");

// From this hidden size up, goldens are written at summary level: k3-shape's per-layer
// tensors of one prefill are hundreds of MB; k3-tiny's and k3-small's stay a few MB.
inline constexpr int kGoldenSummaryHiddenSize = 4096;

}  // namespace splitcheck
