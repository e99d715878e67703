"""How fast the Python writer lays down bf16: the float32 -> bf16 conversion before and
after its rewrite, and a whole DumpWriter.write of a float32 tensor as bf16.

    /usr/bin/python3 python/bench_writer.py [--mib 500] [--dir /tmp]

Prints MiB/s of float32 input (median of 5 conversions, of 3 writes) and new/old.
`_to_bf16_bits_reference` is the conversion as it was; python/tests/test_bf16.py checks
the new one against it bit for bit.
"""

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import splitcheck_dump as sd  # noqa: E402  (after the path above)


def _to_bf16_bits_reference(array):
    """The conversion before issue 53: uint64 and several full passes (kept to compare)."""
    f = np.ascontiguousarray(array, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def median_seconds(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=500, help="float32 input size (MiB)")
    parser.add_argument("--dir", default="/tmp", help="where the written dump goes")
    args = parser.parse_args()

    n = args.mib * 2 ** 20 // 4
    x = np.random.default_rng(53).standard_normal(n, dtype=np.float32)
    try:
        import torch
        tensor, torch_text = torch.from_numpy(x), f"torch {torch.__version__}"
    except ImportError:
        tensor, torch_text = x, "no torch (a numpy array instead)"
    print(f"splitcheck_dump {sd.__version__}, numpy {np.__version__}, {torch_text}, "
          f"Python {platform.python_version()}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs; {args.mib} MiB of random float32 ({n} values)")

    if not np.array_equal(sd.to_bf16_bits(x), _to_bf16_bits_reference(x)):
        sys.exit("to_bf16_bits differs from the reference on the benchmark input")

    old = median_seconds(lambda: _to_bf16_bits_reference(x), 5)
    new = median_seconds(lambda: sd.to_bf16_bits(x), 5)
    for name, seconds in (("old (reference)", old), ("new", new)):
        print(f"to_bf16_bits, {name:18s}{args.mib / seconds:8.0f} MiB/s  "
              f"({seconds:.3f} s, median of 5)")
    print(f"new/old                         {old / new:8.1f}x")

    fd, path = tempfile.mkstemp(suffix=".h5", dir=args.dir)
    os.close(fd)

    def write():
        with sd.DumpWriter(path) as w:
            w.write("/forward/0/layers/0/pre_attn", tensor, dtype="bfloat16")

    try:
        whole = median_seconds(write, 3)
    finally:
        os.remove(path)
    print(f"DumpWriter.write as bf16        {args.mib / whole:8.0f} MiB/s  ({whole:.3f} s, "
          f"median of 3; {args.mib // 2} MiB to {args.dir}, digest included)")


if __name__ == "__main__":
    main()
