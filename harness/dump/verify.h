// The integrity check of one dump (`splitcheck verify-dump FILE`): what a reader must be
// able to trust before it compares anything.
//
//   ASSIGN_OR_RETURN(DumpIntegrity ok, verify_dump("run.h5"));
//
// It checks `format` and `format_version`, every dataset's type and shape (the checks of
// DumpReader::open), that `order` numbers the datasets 0..n-1 once each, that every
// dataset carries a digest and that its bytes (read once, in blocks) hash to it, and that
// every attribute of every object can be read within the reader's bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/status.h"

namespace splitcheck {

class DumpReader;

// What verify_dump() read from a sound file.
struct DumpIntegrity {
  int64_t datasets = 0;
  int64_t bytes = 0;       // dataset bytes read and hashed
  int64_t objects = 0;     // groups and datasets, the root included
  int64_t attributes = 0;  // attributes read, over every object
};

// Checks dump `path` as the header says. Any failure is kInvalidInput naming the file and
// the place (the dataset, attribute or `order` value). At most `chunk_bytes` of a
// dataset are held at a time.
Result<DumpIntegrity> verify_dump(const std::string& path, size_t chunk_bytes = size_t{4} << 20);
// Every check above but the dataset bytes, on a dump already open: for a caller that goes
// on to read every dataset through DumpReader::read(), which checks each digest as it reads
// (the runner: each dump is opened once and its bytes read once). `bytes` stays 0.
Result<DumpIntegrity> verify_dump_layout(DumpReader& reader);

}  // namespace splitcheck
