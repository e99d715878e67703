"""`pip install ./python` works offline in a virtual environment that sees the system's
numpy, h5py and xxhash."""

import shutil
import subprocess
import sys

import pytest

import splitcheck_dump as sd
from conftest import REPO


def test_pip_install_offline_in_a_venv(tmp_path):
    venv = tmp_path / "venv"
    r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot create a virtual environment here: {r.stderr.strip()[-200:]}")
    source = tmp_path / "src"  # a copy: the build writes nothing into the checkout
    shutil.copytree(REPO / "python", source, ignore=shutil.ignore_patterns(
        "__pycache__", "tests", "*.egg-info", "build"))
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index",
                          "--disable-pip-version-check", str(source)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    check = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import splitcheck_dump as s, importlib.metadata as m; "
         "print(s.__version__, s.FORMAT_VERSION, m.version('splitcheck-dump'), s.__file__)"],
        capture_output=True, text=True, cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    version, fmt, dist_version, location = check.stdout.split()
    assert (version, int(fmt), dist_version) == (sd.__version__, sd.FORMAT_VERSION, sd.__version__)
    assert str(venv) in location
