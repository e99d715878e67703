"""Two separate numbers: the dump format this package writes and reads, and the package.

FORMAT_VERSION follows the C++ side (`kDumpFormatVersion` in harness/dump/dump.h; a test
reads that header and the `splitcheck` binary's output). __version__ is the package's own
release number and changes with its API, not with the format.
"""

FORMAT = "splitcheck.dump"
FORMAT_VERSION = 1
SUPPORTED_FORMAT_VERSIONS = (1,)

__version__ = "0.2.0"
