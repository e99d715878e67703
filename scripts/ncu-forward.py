#!/usr/bin/env python3
"""Sums an ncu CSV (--csv --page raw --metrics gpu__time_duration.sum) by kernel name:
count, total and mean device microseconds, largest first, and the total over all kernels.
  ncu-forward.py FILE.csv"""
import csv
import re
import sys
from collections import defaultdict


def main(path):
    rows = list(csv.reader(open(path)))
    head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    names = rows[head]
    k_name, k_time = names.index("Kernel Name"), names.index("gpu__time_duration.sum")
    unit = rows[head + 1][k_time] if rows[head + 1][k_time] in ("ns", "usecond", "msecond", "nsecond") else None
    scale = {"ns": 1e-3, "nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, 1e-3)
    total = defaultdict(float)
    count = defaultdict(int)
    for r in rows[head + 1:]:
        if len(r) <= k_time:
            continue
        try:
            t = float(r[k_time].replace(",", ""))
        except ValueError:
            continue
        name = re.sub(r"\(.*", "", r[k_name])[:70]
        total[name] += t * scale
        count[name] += 1
    all_us = sum(total.values())
    print(f"kernels {sum(count.values())}, device time {all_us / 1e3:.2f} ms")
    for name, us in sorted(total.items(), key=lambda x: -x[1])[:25]:
        print(f"  {us / 1e3:8.3f} ms  {count[name]:5d} x {us / count[name]:8.1f} us  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
