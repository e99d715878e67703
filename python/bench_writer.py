"""How fast the Python writer lays down a tensor: the float32 -> bf16 conversion before and
after its rewrite, and a whole DumpWriter.write of a float32 tensor, kept as float32 and
narrowed to bf16, each against a raw h5py create_dataset of the bytes it stores.

    /usr/bin/python3 python/bench_writer.py [--mib 128] [--dir /tmp]

Prints MiB/s of float32 input (median of 5) and, per write, both rates and the ratio of
the writer's time to the raw write's (the target: at most 1.5x).
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

import h5py
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
    parser.add_argument("--mib", type=int, default=128, help="float32 input size (MiB)")
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

    bits = sd.to_bf16_bits(x)
    for name, data, dtype, raw_data in (("float32 as float32", tensor, "float32", x),
                                        ("float32 narrowed to bf16", tensor, "bfloat16", bits)):
        ours = median_of_fresh_writes(args.dir, lambda p: write_dump(p, data, dtype), 5)
        raw = median_of_fresh_writes(args.dir, lambda p: write_raw(p, raw_data), 5)
        print(f"{name:25s} DumpWriter.write {args.mib / ours:7.0f} MiB/s, raw h5py "
              f"create_dataset {args.mib / raw:7.0f} MiB/s: {ours / raw:.2f}x the raw time "
              f"(median of 5, {raw_data.nbytes >> 20} MiB to {args.dir}, digest included)")


def write_dump(path, data, dtype):
    with sd.DumpWriter(path) as w:
        w.write("/forward/0/layers/0/pre_attn", data, dtype=dtype)


def write_raw(path, data):
    with h5py.File(path, "w") as f:
        f.create_dataset("/forward/0/layers/0/pre_attn", data=data)


def median_of_fresh_writes(directory, write, repeat):
    """The median seconds of `repeat` calls of write(path), each on a path that does not
    exist yet; files are removed outside the timing, so no write pays for unlinking the
    last one's file."""
    times = []
    for _ in range(repeat):
        fd, path = tempfile.mkstemp(suffix=".h5", dir=directory)
        os.close(fd)
        os.remove(path)
        try:
            start = time.perf_counter()
            write(path)
            times.append(time.perf_counter() - start)
        finally:
            os.remove(path)
    return statistics.median(times)

if __name__ == "__main__":
    main()
