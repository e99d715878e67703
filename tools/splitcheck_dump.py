"""Compatibility shim: the dump writer is now the package python/splitcheck_dump.

`PYTHONPATH=tools python3 -c "import splitcheck_dump"` keeps working: this module puts
the repository's python/ first on sys.path and hands the import over to the package.
Prefer `pip install ./python` (or PYTHONPATH=python).
"""

import os
import sys

_PACKAGE_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "python")
if _PACKAGE_ROOT not in sys.path:
    sys.path.insert(0, _PACKAGE_ROOT)
_shim = sys.modules.pop(__name__)
try:
    import splitcheck_dump as _package  # noqa: E402  (the package, found in python/)
except BaseException:
    sys.modules[__name__] = _shim
    raise
sys.modules[__name__] = _package
