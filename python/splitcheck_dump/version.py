"""Two separate numbers: the dump format this package writes and reads, and the package.

FORMAT_VERSION follows the C++ side (`kDumpFormatVersion` in harness/dump/dump.h; a test
reads that header and the `splitcheck` binary's output). __version__ is the package's own
release number and changes with its API, not with the format.
"""

FORMAT = "splitcheck.dump"
FORMAT_VERSION = 2  # dataset digests in XXH3-64; version 1 (XXH64) is still read
SUPPORTED_FORMAT_VERSIONS = (1, 2)

__version__ = "0.2.0"
