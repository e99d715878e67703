#!/usr/bin/env python3
"""A float32 engine for the runner's tests: 6 layers of float32 activations, written through
splitcheck_dump in the engine's own dtype (or narrowed to bf16 with --narrow).

    float32_engine.py --cuts CUTS --out OUT [--narrow]

A stage that starts at layer 3 (a cut after layer 3) computes layer 3's attention output
its own way: token 1, channel 0 is one float32 ULP off PP=1's (0x3d97cf8b, PP=1 0x3d97cf8a).
Both values round to the same bf16 (0x3d98), so with --narrow the dumps are equal and only
the report's "compared after rounding" says what the comparison could not see.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))

import splitcheck_dump as sd  # noqa: E402  (after the path above)

LAYERS, T, H = 6, 4, 8


def site_values(layer, site):
    rng = np.random.default_rng(1000 * layer + sd.LAYER_SITES.index(site))
    x = rng.standard_normal((T, H), dtype=np.float32)
    if (layer, site) == (3, "attn_out"):
        x[1, 0] = np.uint32(0x3D97CF8A).view(np.float32)
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuts", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("--narrow", action="store_true")
    args = ap.parse_args()
    cuts = [int(c) for c in args.cuts.split(",") if c]
    bounds = [0] + cuts + [LAYERS]
    dtype = "bfloat16" if args.narrow else None
    with sd.DumpWriter(args.out, partition="|".join(f"{b}-{e}" for b, e in
                                                    zip(bounds, bounds[1:])),
                       backend="numpy-float32", producer={"name": "float32_engine"}) as w:
        w.begin_forward(0, kind="prefill", first_position=0, tokens=T)
        w.write("/forward/0/input_ids", np.arange(T, dtype=np.int32))
        for layer in range(LAYERS):
            for site in sd.LAYER_SITES:
                x = site_values(layer, site)
                if (layer, site) == (3, "attn_out") and 3 in cuts:  # manual softmax
                    x[1, 0] = np.uint32(0x3D97CF8B).view(np.float32)
                w.write_layer(0, layer, site, x, dtype=dtype)
        for s, (b, e) in enumerate(zip(bounds, bounds[1:])):
            w.write_stage(sd.StagePlacement(s, b, e))


if __name__ == "__main__":
    main()
