"""A known three-stage run written two ways: by one writer (what a process that gathers
every stage writes) and by one PartWriter per stage. Fixed values, no randomness.

    /usr/bin/python3 python/tests/pp_run.py DIR [--interleaved-taps]

writes DIR/one.h5 and DIR/part-0.h5 .. part-2.h5 (tests/harness/assemble_test.cc uses it).
With --interleaved-taps every stage exports its own taps, written after the last stage's
logits as the C++ engine orders them (the parts say so with `rank=`).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

import splitcheck_dump as sd  # noqa: E402

BOUNDS = (0, 2, 4, 6)  # three stages of two layers
T, H, V = 3, 8, 5
TAPS = (0, 2, 4, 6)
FORWARDS = (("prefill", 0, 3), ("verify", 3, 3))  # kind, first position, tokens
RUN_ID = "pp-run-1"
TAPS_RANK, TOKENS_RANK = 1, 2  # --interleaved-taps: taps after logits, then next_tokens


def values(n, scale, shift=0.0):
    x = (np.arange(n, dtype=np.float32) - n / 2 + shift) * np.float32(scale)
    x[0] = np.float32(1.0 + 2.0 ** -8)  # a bf16 tie: rounds to even
    x[1] = np.float32(-0.0)
    return x


def stage_of_tap(k):
    return next(s for s in range(len(BOUNDS) - 1) if k == 0 and s == 0 or
                BOUNDS[s] < k <= BOUNDS[s + 1])


def stage_records(s, f, interleaved):
    """(path, value, dtype, rank) of stage s in forward f, in its write order."""
    base = f"/forward/{f}/"
    out = []
    if s == 0:
        out.append((base + "input_ids", np.array([4, 0, 2], np.int32) + f, "int32", 0))
    for layer in range(BOUNDS[s], BOUNDS[s + 1]):
        for i, site in enumerate(sd.LAYER_SITES):
            x = values(T * H, 0.125 * (i + 1) + f, shift=layer).reshape(T, H)
            out.append((f"{base}layers/{layer}/{site}", x, "bfloat16", 0))
    last = s == len(BOUNDS) - 2
    if last:
        out.append((base + "output", values(T * H, 0.3 + f).reshape(T, H), "bfloat16", 0))
        out.append((base + "bank", values(T * 2 * H, 0.05).reshape(T, 2, H), "bfloat16", 0))
        out.append((base + "logits", values(T * V, 0.7 + f).reshape(T, V), "float32", 0))
    taps = [k for k in TAPS if (stage_of_tap(k) == s if interleaved else last)]
    for k in taps:
        out.append((f"{base}taps/{k}", values(T * H, 0.1 * (k + 1)).reshape(T, H), "bfloat16",
                    TAPS_RANK if interleaved else 0))
    if last:
        out.append((base + "next_tokens", np.array([1, 1, 3], np.int32) + f, "int32",
                    TOKENS_RANK if interleaved else 0))
    return out


def stage_trace(s, f):
    trace = sd.DispatchTrace(stage=s)
    if s == 0:
        trace.record("embed", "gather", layer=-1, site="embed")
    for layer in range(BOUNDS[s], BOUNDS[s + 1]):
        first = layer == BOUNDS[s] and s > 0 and f == 1
        trace.record("attn_res", "fallback" if first else "native", layer=layer,
                     site="pre_attn")
        trace.record("attn_res", "native", layer=layer, site="pre_mlp")
    if s == len(BOUNDS) - 2:
        trace.record("rms_norm", "rows", layer=-1, site="final_norm")
        trace.record("lm_head", "matmul_nt", layer=-1, site="lm_head")
    return trace


def placement(s):
    p = sd.StagePlacement(s, BOUNDS[s], BOUNDS[s + 1],
                          owned_taps=[k for k in TAPS if stage_of_tap(k) == s])
    p.hold(f"layers.{BOUNDS[s]}.w", values(H * (s + 1), 0.5))
    if s in (0, len(BOUNDS) - 2):
        embed = values(V * H, 0.25).reshape(V, H)
        p.set_embedding(embed)
        if s == len(BOUNDS) - 2:
            p.set_drafter_embedding(embed)
    return p


def spec():
    r = sd.SpecRecord(gamma=2)
    r.add_step(0, [1, 2], 2)
    r.set_emitted(0, [1, 2, 0])
    return r


HEADER = dict(scenario='{"name": "pp-run"}', scenario_sha256="0" * 64, model_sha256="1" * 64,
              partition="0-2|2-4|4-6", backend="numpy",
              producer={"name": "pp_run", "version": "0"}, env={"device": "cpu"},
              created="2024-01-01T00:00:00Z")


def write_one(path, interleaved=False):
    """The single-process writer: every stage's records gathered, in execution order."""
    stages = range(len(BOUNDS) - 1)
    with sd.DumpWriter(path, **HEADER) as w:
        for f, (kind, first, tokens) in enumerate(FORWARDS):
            w.begin_forward(f, kind=kind, first_position=first, tokens=tokens)
            records = [(rank, s, i, r) for s in stages
                       for i, r in enumerate(stage_records(s, f, interleaved))
                       for rank in [r[3]]]
            for _, _, _, (path_, value, dtype, _) in sorted(records, key=lambda x: x[:3]):
                w.write(path_, value, dtype=dtype)
            trace = sd.DispatchTrace()
            for s in stages:
                trace.extend(stage_trace(s, f).events)
            w.write_dispatch(f, trace)
        w.write("/generation/0/prompt_ids", np.array([4, 0, 2], np.int32))
        w.write("/generation/0/emitted", np.array([1, 2, 0], np.int32))
        w.write_spec(spec())
        for s in stages:
            w.write_stage(placement(s))


def write_part(path, s, interleaved=False, run_id=RUN_ID, **overrides):
    """Stage s's part, written as the stage process would: only what it computed."""
    header = dict(HEADER, **overrides)
    last = s == len(BOUNDS) - 2
    with sd.PartWriter(path, run_id=run_id, stage=s, stages=len(BOUNDS) - 1,
                       layer_begin=BOUNDS[s], layer_end=BOUNDS[s + 1], **header) as w:
        for f, (kind, first, tokens) in enumerate(FORWARDS):
            w.begin_forward(f, kind=kind, first_position=first, tokens=tokens)
            for path_, value, dtype, rank in stage_records(s, f, interleaved):
                w.write(path_, value, dtype=dtype, rank=rank)
            w.write_dispatch(f, stage_trace(s, f))
        if last:
            w.write("/generation/0/prompt_ids", np.array([4, 0, 2], np.int32))
            w.write("/generation/0/emitted", np.array([1, 2, 0], np.int32))
            w.write_spec(spec())
        w.write_stage(placement(s))


def write_all(directory, interleaved=False):
    one = os.path.join(directory, "one.h5")
    write_one(one, interleaved)
    parts = [os.path.join(directory, f"part-{s}.h5") for s in range(len(BOUNDS) - 1)]
    for s, p in enumerate(parts):
        write_part(p, s, interleaved)
    return one, parts


if __name__ == "__main__":
    write_all(sys.argv[1], interleaved="--interleaved-taps" in sys.argv[2:])
