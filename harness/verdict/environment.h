// The environment fingerprint a golden carries (DESIGN.md "Goldens"): what can change a
// computed bit without any change to the code under test. For the CPU backend: the
// compiler and its version, the flags the numeric code is compiled with, and the CPU ISA
// it is compiled for (architecture and the vector extensions the compiler may use).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace splitcheck {

// This build's fingerprint: {"compiler", "flags", "isa", "device"}, e.g. {"GNU 12.2.0",
// "-O3 -fno-fast-math -ffp-contract=off", "x86-64 sse sse2", "cpu"}.
nlohmann::json environment_fingerprint();

// How a golden's recorded fingerprint differs from this build's.
struct FingerprintDiff {
  // One line per differing field: "flags: golden '-O3 ...', this build '-O1 ...'".
  std::vector<std::string> differences;
  // Fields this build records that the golden does not (made before they were recorded):
  // not compared, and said so.
  std::vector<std::string> unrecorded;
  bool same() const { return differences.empty(); }
};

// Compares `golden` (a MANIFEST entry's "env"; not an object: nothing recorded) with `here`.
FingerprintDiff diff_fingerprints(const nlohmann::json& golden, const nlohmann::json& here);

}  // namespace splitcheck
