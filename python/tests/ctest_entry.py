"""What ctest runs: pytest on the given paths, or exit 77 (skipped) with the reason when
pytest is not installed for this interpreter."""

import sys

try:
    import pytest
except ImportError:
    print(f"SKIPPED: pytest is not installed for {sys.executable} "
          "(Debian: apt-get install python3-pytest)")
    sys.exit(77)

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
