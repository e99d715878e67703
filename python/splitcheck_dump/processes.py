"""One process per pipeline stage: started together, the first to fail stops the rest.

What an engine whose stages are processes needs around them, whatever the stages compute
(examples/torch_pp, splitcheck_dump.hf, examples/hf_pp/pipelining.py): a stage that
raises prints its traceback and exits 1, and the run reports the first stage that failed
instead of waiting for peers that will never hear from it.
"""

import multiprocessing
import multiprocessing.connection
import os
import sys
import traceback


def _guarded(entry, rank, payload):
    try:
        entry(rank, payload)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


def run_stage_processes(entry, payload, stages, name, method="fork"):
    """Runs entry(rank, payload) for every rank in [0, stages), one process each (`method`:
    "fork", or "spawn" once this process has started CUDA). Returns 0 when every process
    exited 0; else stops the others and returns 1, printing "<name>: stage <r> failed"."""
    ctx = multiprocessing.get_context(method)
    procs = [ctx.Process(target=_guarded, args=(entry, r, payload)) for r in range(stages)]
    for p in procs:
        p.start()
    failed = None
    waiting = {p.sentinel: r for r, p in enumerate(procs)}
    while waiting and failed is None:  # the first stage to fail stops the others
        for sentinel in multiprocessing.connection.wait(list(waiting)):
            r = waiting.pop(sentinel)
            procs[r].join()
            if procs[r].exitcode != 0 and failed is None:
                failed = r
    for p in procs:
        if failed is not None and p.is_alive():
            p.terminate()
        p.join()
    if failed is not None:
        print(f"{name}: stage {failed} failed (exit {procs[failed].exitcode})", file=sys.stderr)
        return 1
    return 0
