// What this build can run: one row per backend and transport a scenario may name.
//
// A scenario may name any row (the file format knows them all), but a run is refused
// (invalid input, exit 2) when the row says this build or machine cannot provide it:
// nothing may silently run on the CPU in-process instead. Adding a backend or transport
// is one row here plus its code; its `unavailable` function says, at run time, why it
// cannot be used here (not built, no device), or nothing when it can.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace splitcheck {

// One backend or transport.
struct Capability {
  std::string_view kind;  // "backend" or "transport"
  std::string_view name;  // the scenario's value, e.g. "cuda"
  // Empty when this build and machine provide it; otherwise why not, in one phrase.
  std::string (*unavailable)();
};

// Every backend and transport a scenario may name, backends first.
std::span<const Capability> capability_table();

// The row of `kind` named `name`, or nullptr.
const Capability* find_capability(std::string_view kind, std::string_view name);

// The names of `kind` that this build provides, comma-separated ("cpu").
std::string provided_names(std::string_view kind);

}  // namespace splitcheck
