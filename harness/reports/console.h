// The console's account of a sweep, rendered from the report model as every other form is
// (one renderer for the built-in engine and an external one): an external engine's opening
// rows, the self-check, one line per split point with what it computed, its waivers, what it
// alone could not judge and its engine's stderr, the checks judged and not judged, the
// datasets compared after rounding, where the stages ran, the counts (from the outcome
// table), the time, the speculative figures, serving, expired waivers, unmet expectations
// and the gate's result. Every string an engine controls goes through console_line.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace splitcheck {

// The console text of a sweep's report model (sweep_report), each line ending in "\n".
std::string render_console(const nlohmann::json& report);

}  // namespace splitcheck
