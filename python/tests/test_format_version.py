"""The package and the C++ side agree on the format: version, kernel codes, site codes;
the package's own version is a separate number; unknown format versions are refused."""

import re
import subprocess

import h5py
import numpy as np
import pytest

import splitcheck_dump as sd
from conftest import REPO


def test_format_version_equals_the_cpp_header():
    header = (REPO / "harness" / "dump" / "dump.h").read_text()
    m = re.search(r"kDumpFormatVersion\s*=\s*(\d+)\s*;", header)
    assert m, "kDumpFormatVersion not found in harness/dump/dump.h"
    assert sd.FORMAT_VERSION == int(m.group(1))
    assert sd.FORMAT == re.search(r'kDumpFormat\s*=\s*"([^"]+)"', header).group(1)
    assert sd.FORMAT_VERSION in sd.SUPPORTED_FORMAT_VERSIONS


def test_package_version_is_its_own_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", sd.__version__)
    assert sd.__version__ != str(sd.FORMAT_VERSION)
    pyproject = (REPO / "python" / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject  # one source: splitcheck_dump/version.py


def test_kernel_and_site_codes_match_the_cpp_registry():
    source = (REPO / "kernels" / "dispatch.cc").read_text()
    body = source[source.index("kRegistry"):]
    rows = re.findall(r'\{\s*"([a-z_]+)",\s*"([a-z_0-9]+)",', body)
    assert tuple(rows) == sd.KERNELS
    sites = re.search(r"kSiteNames = \{(.*?)\};", source, re.S).group(1)
    assert tuple(re.findall(r'"([a-z_]+)"', sites)) == sd.SITES


def _tiny(path):
    with sd.DumpWriter(path, partition="0-2") as w:
        w.write("/forward/0/input_ids", np.arange(3, dtype=np.int32))


def test_reader_refuses_an_unknown_format_version(tmp_path):
    path = tmp_path / "v3.h5"
    _tiny(path)
    with h5py.File(path, "r+") as f:
        f.attrs["format_version"] = np.int64(sd.FORMAT_VERSION + 1)
    with pytest.raises(sd.UnsupportedFormatVersion, match="unsupported format_version 3"):
        sd.DumpReader(path)


def test_reader_refuses_another_format(tmp_path):
    path = tmp_path / "other.h5"
    _tiny(path)
    with h5py.File(path, "r+") as f:
        f.attrs["format"] = np.bytes_(b"something.else")
    with pytest.raises(sd.FormatError, match="not 'splitcheck.dump'"):
        sd.DumpReader(path)
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(sd.FormatError, match="not an HDF5 file"):
        sd.DumpReader(tmp_path / "text.h5")


def test_cpp_refuses_the_same_unknown_version(tmp_path, splitcheck):
    path = tmp_path / "v3.h5"
    _tiny(path)
    with h5py.File(path, "r+") as f:
        f.attrs["format_version"] = np.int64(sd.FORMAT_VERSION + 1)
    r = subprocess.run([splitcheck, "verify-dump", str(path)], capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "format_version" in r.stdout + r.stderr
