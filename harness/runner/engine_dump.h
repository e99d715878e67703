// An external engine's dump, read and checked: its datasets in execution order (layout,
// every digest, the dispatch trace's shape), what its stages say they hold, its speculative
// figures and its own word on itself (harness/dump/loaded_dump.h); and whether the file is
// its own run, which rests on splitcheck alone (the file's identity against PP=1's). What
// the dump shows of its partition and which checks it can judge are the judge's rules
// (harness/judge/partition_evidence.h). Each figure is read from the file; but the file is
// the engine's own record of its run, and an engine that fabricates every record
// consistently is beyond any check of its dump.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "harness/dump/loaded_dump.h"
#include "kernels/status.h"
#include "reference/record.h"

namespace splitcheck {

// Reads and verifies `path` (layout, every digest, the dispatch trace's shape).
// `reference`: PP=1's dump, whose file and content digests the runner keeps.
Result<LoadedDump> load_dump(const std::string& path, bool reference = false);

// What shows that the case's dump file is not its own run: a symbolic link, the PP=1 dump's
// file itself (a hard link), or a byte-for-byte copy of it under another partition.
std::vector<std::string> file_identity_problems(const std::string& dump, const LoadedDump& d,
                                                const std::string& pp1_dump, const LoadedDump& pp1,
                                                int stages);

}  // namespace splitcheck
