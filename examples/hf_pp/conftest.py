"""Says, at the end of every pytest run of examples/hf_pp (ctest's -q run included), when
its transformers tests were skipped and why, so that a green run that tested nothing of
the adapter is never mistaken for one that did."""

import importlib.util
import sys


def pytest_terminal_summary(terminalreporter):
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if "hf_pp" in getattr(r, "nodeid", "")]
    if skipped and importlib.util.find_spec("transformers") is None:
        terminalreporter.write_line(
            f"examples/hf_pp: {len(skipped)} tests SKIPPED: transformers is not installed for "
            f"{sys.executable} (they run on the GPU machine: examples/hf_pp/device-check.sh)",
            yellow=True, bold=True)
