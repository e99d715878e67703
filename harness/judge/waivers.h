// Waivers: known divergences a team has decided to live with for a while, each with its
// reason, a link to the bug, and an expiry date (VK-GL-CTS keeps such a list). A waiver
// file is JSON:
//
//   {"waivers": [{"scenario": "fault-handoff-no-zero-delta", "split": "split-12",
//                 "check": "tensors", "reason": "...", "link": "https://...",
//                 "expires": "2027-03-31"}]}
//
// `split` (a case key) or `check` (a check registry name), or both, say what is waived;
// the one left out matches any. A diverged split point whose every failed check is
// covered by unexpired waivers of its scenario is `waived`: reported apart from passes,
// and not failing the gate. A waiver that has expired waives nothing and fails the gate
// (exit 1) until it is renewed or removed; a waiver that matches nothing waives nothing.
#pragma once

#include <string>
#include <vector>

#include "kernels/status.h"

namespace splitcheck {

struct SweepResult;

struct Waiver {
  std::string scenario;  // the scenario's name
  std::string split;     // case key ("split-12"); empty: every split point
  std::string check;     // check registry name; empty: every check
  std::string reason;
  std::string link;
  std::string expires;  // "YYYY-MM-DD", the last day it holds (UTC)
  std::string where;    // "<file>: /waivers/<i>", for messages
};

// Reads and validates a waiver file; every error names the file and the JSON pointer.
Result<std::vector<Waiver>> load_waivers(const std::string& path);

// Today's date in UTC, "YYYY-MM-DD".
std::string utc_today();

// Applies `waivers` to a finished sweep as of `today`: marks waived cases and records
// expired waivers of the sweep's scenario in result.waiver_failures.
void apply_waivers(const std::vector<Waiver>& waivers, const std::string& today,
                   SweepResult& result);

}  // namespace splitcheck
