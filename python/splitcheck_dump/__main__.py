"""`python3 -m splitcheck_dump assemble PART... --out DUMP`: join per-stage part files
(PartWriter) into one dump. Exit 0 written, 2 refused or misused."""

import sys

from .parts import main as _assemble_main

_COMMANDS = {"assemble": _assemble_main}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in _COMMANDS:
        print("usage: python3 -m splitcheck_dump assemble PART... --out DUMP", file=sys.stderr)
        return 2
    return _COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
