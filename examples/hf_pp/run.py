#!/usr/bin/env python3
"""Run a tiny transformers model (Llama or DeepSeek-V3) pipeline-parallel; write one dump.

    python3 examples/hf_pp/run.py --family llama --pp 2 --cuts 3 --out run.h5 --seed 7 \
        --scenario scenarios/x.json [--device auto|cpu|cuda] [bug flags]

The engine of splitcheck's runner protocol (docs/external-engines.md) over
python/splitcheck_dump/hf.py: each stage is a process holding its decoder layers (plus
the embedding on stage 0, norm and lm_head on the last) and its own KV cache; the hidden
states cross each cut through torch.distributed (gloo). A seeded 16-token prompt is
prefilled, then 4 tokens are decoded greedily (5 forwards). The dump holds every layer's
tensors in execution order, in the model's dtype (float32; `--record-dtype bfloat16`
narrows them, on request), the attention implementation of each layer as dispatch
events, /stages and the generated tokens. On the GPU when there is one, else the CPU.

Pipeline bugs, behind flags; each changes only the stages after the first, so PP=1 is
the clean reference and every cut shows the bug:
  --bug-attn-impl            stages > 0 load the model with eager attention (PP=1: sdpa);
  --bug-buffer-not-restored  stages > 0 leave the MoE gate's e_score_correction_bias at
                             its initial zeros (deepseek_v3 only);
  --bug-restart-positions    stages > 0 number their tokens from 0 in every forward;
  --bug-bf16-handoff         the float32 hidden states cross each cut as bfloat16.
Exit 0 with the dump written; 1 when a stage failed; 2 for invalid arguments.
"""

import argparse
import hashlib
import json
import os
import sys

# Stages are forked from this process and pick their device after the fork: a CUDA
# availability check here must not initialise CUDA (NVML answers instead).
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

PROMPT_TOKENS = 16
NEW_TOKENS = 5  # the prefill's token and 4 decoded ones: 5 forwards
BUGS = ("bug_attn_impl", "bug_buffer_not_restored", "bug_restart_positions",
        "bug_bf16_handoff")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=("llama", "deepseek_v3"), required=True)
    ap.add_argument("--pp", type=int, required=True)
    ap.add_argument("--cuts", default="", help='"" at PP=1, else cut layers: "3" or "2,5"')
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scenario", default="", help="a JSON file; recorded, not interpreted")
    ap.add_argument("--device", default="auto", help="auto (the GPU if any), cpu, cuda")
    ap.add_argument("--record-dtype", choices=("bfloat16", "float16"), default=None,
                    help="narrow layer sites and output to this dtype (default: the model's "
                         "own, float32; narrowed datasets carry source_dtype and every "
                         "report says they were compared after rounding)")
    for bug in BUGS:
        ap.add_argument("--" + bug.replace("_", "-"), action="store_true")
    return ap.parse_args(argv)


def make_plan(args, bounds):
    import models
    import torch
    from splitcheck_dump import __version__, hf

    def build_model(stage):
        later = stage > 0
        return models.build_model(
            args.family, args.seed,
            attn_implementation="eager" if args.bug_attn_impl and later else "sdpa",
            restore_buffers=not (args.bug_buffer_not_restored and later))

    def stage_options(stage):
        return hf.StageOptions(
            restart_positions=args.bug_restart_positions and stage > 0,
            handoff_dtype=torch.bfloat16 if args.bug_bf16_handoff else None,
            record_dtype=args.record_dtype)

    scenario_text = ""
    if args.scenario and os.path.isfile(args.scenario):
        with open(args.scenario, encoding="utf-8") as f:
            scenario_text = f.read()
    run_identity = {"example": "hf_pp", "family": args.family, "seed": args.seed,
                    "prompt_tokens": PROMPT_TOKENS, "new_tokens": NEW_TOKENS}
    return hf.Plan(
        bounds=bounds, out=args.out, build_model=build_model, stage_options=stage_options,
        prompt=models.prompt_ids(args.family, args.seed, PROMPT_TOKENS),
        new_tokens=NEW_TOKENS, device=args.device,
        scenario_sha256=hashlib.sha256(
            json.dumps(run_identity, sort_keys=True).encode()).hexdigest(),
        model_sha256=models.identity(args.family, args.seed),
        producer={"name": "examples/hf_pp", "version": __version__, "family": args.family,
                  "flags": [b for b in BUGS if getattr(args, b)]},
        scenario_text=scenario_text)


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    from splitcheck_dump import hf
    import models
    try:
        bounds = hf.stage_bounds(models.NUM_LAYERS, args.pp, args.cuts)
        if args.bug_buffer_not_restored and args.family != "deepseek_v3":
            raise ValueError("--bug-buffer-not-restored needs --family deepseek_v3 (the "
                             "llama model holds no restored buffer)")
        if args.device not in ("auto", "cpu") and not args.device.startswith("cuda"):
            raise ValueError(f"--device {args.device!r}: auto, cpu or cuda[:N]")
        hf.check_transformers()
    except (ValueError, ImportError) as e:
        print(f"run.py: {e}", file=sys.stderr)
        return 2
    return hf.launch(make_plan(args, bounds))


if __name__ == "__main__":
    sys.exit(main())
