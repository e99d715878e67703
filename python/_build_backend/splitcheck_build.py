"""A PEP 517 build backend for this one pure-Python package, on the standard library only.

pip builds in an isolated environment and would fetch setuptools from an index for the
usual backends; with `requires = []` and this backend in the tree, `pip install ./python`
works with no index at all. It writes a py3-none-any wheel (the package's .py files and
a dist-info with METADATA, WHEEL, RECORD), an sdist, and an editable wheel (a .pth file
naming this folder). Metadata comes from pyproject.toml; the version from
splitcheck_dump/version.py. Timestamps are fixed, so a build is reproducible.
"""

import base64
import hashlib
import importlib.metadata
import io
import os
import re
import site
import sys
import tarfile
import tomllib
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        data = tomllib.load(f)
    project = data["project"]
    packages = data.get("tool", {}).get("splitcheck-build", {}).get("packages", [])
    with open(os.path.join(ROOT, packages[0], "version.py"), encoding="utf-8") as f:
        match = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    return project, packages, match.group(1)


def _dist_name(project):
    return re.sub(r"[-_.]+", "_", project["name"]).lower()


def _canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed_names():
    """Canonical names of the distributions of the interpreter running the build (its
    own site directories and, for a venv with system site packages, the base ones)."""
    paths = site.getsitepackages() + site.getsitepackages([sys.base_prefix])
    return {_canonical(d.metadata["Name"] or "")
            for d in importlib.metadata.distributions(path=[p for p in paths
                                                            if os.path.isdir(p)])}


def _requirement(dep, installed):
    """Debian ships h5py as the distribution `h5py.-debian-h5py-serial` (or -mpi), which
    pip does not take for `h5py`; where that is what is installed, name it instead."""
    if _canonical(dep) == "h5py" and "h5py" not in installed:
        for flavour in ("serial", "mpi"):
            if f"h5py-debian-h5py-{flavour}" in installed:
                return f"h5py-debian-h5py-{flavour}"
    return dep


def _metadata(project, version):
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {version}",
             f"Summary: {project.get('description', '')}"]
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    installed = _installed_names()
    lines += [f"Requires-Dist: {_requirement(d, installed)}"
              for d in project.get("dependencies", [])]
    body = ""
    readme = project.get("readme")
    if readme and os.path.exists(os.path.join(ROOT, readme)):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def _package_files(packages):
    for package in packages:
        for folder, dirs, files in os.walk(os.path.join(ROOT, package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    full = os.path.join(folder, name)
                    yield os.path.relpath(full, ROOT).replace(os.sep, "/"), full


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory, entries):
    project, _, version = _project()
    dist = _dist_name(project)
    info = f"{dist}-{version}.dist-info"
    entries = list(entries) + [
        (f"{info}/METADATA", _metadata(project, version).encode()),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: splitcheck_build\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = [_record_line(a, d) for a, d in entries] + [f"{info}/RECORD,,"]
    entries.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    filename = f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for arcname, data in entries:
            zi = zipfile.ZipInfo(arcname, _EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return filename


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _, packages, _ = _project()
    entries = []
    for arcname, full in _package_files(packages):
        with open(full, "rb") as f:
            entries.append((arcname, f.read()))
    return _write_wheel(wheel_directory, entries)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    project, _, _ = _project()
    pth = f"{_dist_name(project)}.pth"
    return _write_wheel(wheel_directory, [(pth, (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    project, packages, version = _project()
    base = f"{_dist_name(project)}-{version}"
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")),
             ("_build_backend/splitcheck_build.py", os.path.abspath(__file__))]
    if os.path.exists(os.path.join(ROOT, "README.md")):
        files.append(("README.md", os.path.join(ROOT, "README.md")))
    files += list(_package_files(packages))
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        pkg_info = _metadata(project, version).encode()
        for arcname, data in [("PKG-INFO", pkg_info)] + [
                (a, open(f, "rb").read()) for a, f in files]:
            ti = tarfile.TarInfo(f"{base}/{arcname}")
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            tar.addfile(ti, io.BytesIO(data))
    return filename
