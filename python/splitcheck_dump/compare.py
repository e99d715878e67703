"""A quick bitwise diff of two dumps in Python. `splitcheck compare` is the judge (it
also compares attributes and names the first differing element); this is for tests and
notebooks that want the list of differing datasets without the binary."""

import numpy as np

from .reader import DumpReader

IGNORED_PREFIXES = ("/stages", "/stage_trace")  # differ between partitions by design


def differing_datasets(path_a, path_b, ignore_prefixes=IGNORED_PREFIXES):
    """Paths whose bytes, dtype or shape differ, or present in one file only, in A's
    execution order (then B's extras). Both files' digests are verified as they are read."""
    with DumpReader(path_a) as a, DumpReader(path_b) as b:
        def kept(r):
            return [d for d in r.datasets if not d.path.startswith(tuple(ignore_prefixes))]
        da, db = kept(a), kept(b)
        in_b = {d.path: d for d in db}
        out = []
        for d in da:
            other = in_b.get(d.path)
            if other is None or other.dtype != d.dtype or other.shape != d.shape or \
                    not np.array_equal(a.read(d.path).view(np.uint8),
                                       b.read(d.path).view(np.uint8)):
                out.append(d.path)
        in_a = {d.path for d in da}
        out += [d.path for d in db if d.path not in in_a]
        return out
