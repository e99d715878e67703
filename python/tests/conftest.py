"""Shared fixtures: the repository root, the package on sys.path, the C++ binary."""

import os
import pathlib
import shutil
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))


def splitcheck_binary():
    """$SPLITCHECK_BINARY (set by ctest), else build/splitcheck, else `splitcheck` on PATH."""
    for candidate in (os.environ.get("SPLITCHECK_BINARY"), str(REPO / "build" / "splitcheck"),
                      shutil.which("splitcheck")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture
def splitcheck():
    binary = splitcheck_binary()
    if binary is None:
        pytest.skip("the splitcheck binary is not built (set SPLITCHECK_BINARY or build "
                    "build/splitcheck): the C++ side of the round trip is absent")
    return binary
