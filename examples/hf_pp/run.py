#!/usr/bin/env python3
"""Run a tiny transformers model of one decoder family pipeline-parallel; write one dump.

    python3 examples/hf_pp/run.py --family gemma2 --pp 2 --cuts 3 --out run.h5 --seed 7 \
        --scenario scenarios/x.json [--layers 8] [--dtype float32|bfloat16] \
        [--device auto|cpu|cuda] [bug flags]

Families (models.py): llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, gemma2, gemma3,
phi3, gpt_neox, olmo2, deepseek_v3; gpt2 is refused (exit 2, naming what it lacks).

The engine of splitcheck's runner protocol (docs/external-engines.md) over
python/splitcheck_dump/hf.py: each stage is a process holding its decoder layers (plus
the embedding on stage 0, norm and lm_head on the last) and its own KV cache; the hidden
states cross each cut through torch.distributed (gloo). A seeded 16-token prompt is
prefilled, then 4 tokens are decoded greedily (5 forwards). The dump holds every layer's
tensors in execution order, in the model's dtype (`--dtype`, float32 by default;
`--record-dtype bfloat16` narrows a float32 model's, on request), the attention
implementation of each layer as dispatch events, /stages and the generated tokens. On
the GPU when there is one, else the CPU.

Pipeline bugs, behind flags; each changes only the stages after the first (the soft-cap
one: a last stage that is not the first), so PP=1 is the clean reference:
  --bug-attn-impl            stages > 0 load the model with eager attention (PP=1: sdpa);
  --bug-buffer-not-restored  stages > 0 leave the MoE gate's e_score_correction_bias at
                             its initial zeros (deepseek_v3 only);
  --bug-restart-positions    stages > 0 number their tokens from 0 in every forward;
  --bug-bf16-handoff         the float32 hidden states cross each cut as bfloat16;
  --bug-local-layer-types    stages > 0 look their layers' types (sliding or full) up by
                             the index inside the stage (needs config.layer_types: gemma2,
                             gemma3, qwen2);
  --bug-embed-scale-again    stages > 0 multiply the hidden states they receive by the
                             embedding's scale (its embed_scale: Gemma's sqrt(hidden)), as
                             if they were token embeddings (gemma2, gemma3);
  --bug-rotary-first-layer-type  stages > 0 give every layer the rotary table of their
                             first layer's type (gemma3: local and global tables);
  --bug-softcap-dropped      a last stage after the first leaves out the final logit
                             soft-cap (gemma2);
  --bug-dense-prefix-per-stage  stages > 0 count first_k_dense_replace from their own
                             first layer (deepseek_v3): their first layer is built dense.
Exit 0 with the dump written; 1 when a stage failed; 2 for invalid arguments.
"""

import os
import time

os.environ.setdefault("SPLITCHECK_PHASES_T0", str(time.time()))  # SPLITCHECK_PHASES=1: timings

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

# Stages are forked from this process and pick their device after the fork: a CUDA
# availability check here must not initialise CUDA (NVML answers instead).
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

PROMPT_TOKENS = 16
NEW_TOKENS = 5  # the prefill's token and 4 decoded ones: 5 forwards
BUGS = ("bug_attn_impl", "bug_buffer_not_restored", "bug_restart_positions",
        "bug_bf16_handoff", "bug_local_layer_types", "bug_embed_scale_again",
        "bug_rotary_first_layer_type", "bug_softcap_dropped", "bug_dense_prefix_per_stage")
# Bug flags that need something of the family's config: (flag, config attribute).
NEEDS = {"bug_buffer_not_restored": "n_routed_experts",
         "bug_local_layer_types": "layer_types",
         "bug_softcap_dropped": "final_logit_softcapping",
         "bug_dense_prefix_per_stage": "first_k_dense_replace"}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    import models
    ap.add_argument("--family", choices=models.FAMILIES, required=True)
    ap.add_argument("--layers", type=int, default=models.NUM_LAYERS,
                    help=f"decoder layers (default {models.NUM_LAYERS})")
    ap.add_argument("--dtype", choices=tuple(models.DTYPES), default="float32",
                    help="the dtype the model is built and run in (its own bits are recorded)")
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
            attn_implementation="eager" if args.bug_attn_impl and later else None,
            restore_buffers=not (args.bug_buffer_not_restored and later),
            num_layers=args.layers, dtype=args.dtype,
            dense_prefix_offset=bounds[stage] if args.bug_dense_prefix_per_stage else 0)

    def stage_options(stage):
        later = stage > 0
        return hf.StageOptions(
            restart_positions=args.bug_restart_positions and later,
            handoff_dtype=torch.bfloat16 if args.bug_bf16_handoff else None,
            record_dtype=args.record_dtype,
            local_layer_types=args.bug_local_layer_types and later,
            scale_received=args.bug_embed_scale_again and later,
            rotary_of_first_layer=args.bug_rotary_first_layer_type and later,
            drop_final_softcap=args.bug_softcap_dropped and later)

    scenario_text = ""
    if args.scenario and os.path.isfile(args.scenario):
        with open(args.scenario, encoding="utf-8") as f:
            scenario_text = f.read()
    run_identity = {"example": "hf_pp", "family": args.family, "seed": args.seed,
                    "prompt_tokens": PROMPT_TOKENS, "new_tokens": NEW_TOKENS}
    if (args.layers, args.dtype) != (models.NUM_LAYERS, "float32"):
        run_identity.update(layers=args.layers, dtype=args.dtype)
    return hf.Plan(
        bounds=bounds, out=args.out, build_model=build_model, stage_options=stage_options,
        prompt=models.prompt_ids(args.family, args.seed, PROMPT_TOKENS),
        new_tokens=NEW_TOKENS, device=args.device,
        scenario_sha256=hashlib.sha256(
            json.dumps(run_identity, sort_keys=True).encode()).hexdigest(),
        model_sha256=models.identity(args.family, args.seed, args.layers, args.dtype),
        producer={"name": "examples/hf_pp", "version": __version__, "family": args.family,
                  "dtype": args.dtype,
                  "flags": [b for b in BUGS if getattr(args, b)]},
        scenario_text=scenario_text)


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    from splitcheck_dump import hf
    try:
        bounds = hf.stage_bounds(args.layers, args.pp, args.cuts)
        if args.device not in ("auto", "cpu") and not args.device.startswith("cuda"):
            raise ValueError(f"--device {args.device!r}: auto, cpu or cuda[:N]")
        hf.check_transformers()
        config, model = preload(args.family, args.layers)
        hf.phase("launcher", "transformers imported and the model checked stageable")
        for bug, needed in NEEDS.items():
            if getattr(args, bug) and getattr(config, needed, None) is None:
                raise ValueError(f"--{bug.replace('_', '-')} needs a family whose config has "
                                 f"{needed} ({args.family}'s has none)")
        if args.bug_embed_scale_again and not hasattr(model.get_input_embeddings(),
                                                      "embed_scale"):
            raise ValueError(f"--bug-embed-scale-again needs a family whose embedding has an "
                             f"embed_scale ({args.family}'s has none)")
    except (ValueError, ImportError) as e:
        print(f"run.py: {e}", file=sys.stderr)
        return 2
    return hf.launch(make_plan(args, bounds))


def preload(family, layers):
    """(config, model) of the family, after its model class is imported and a model of it
    (tiny, on the CPU) is checked stageable (hf.NotStageable, a ValueError, names what it lacks):
    the stages, forked from this process, inherit what is imported here instead of each
    importing transformers again. Nothing here starts CUDA (hf.launch checks)."""
    import models
    import torch
    from splitcheck_dump import hf
    torch.set_num_threads(1)  # no thread pool for the forked stages to inherit
    model = models.build_model(family, 0, num_layers=layers)
    hf.staged_model(model)
    return model.config, model


if __name__ == "__main__":
    sys.exit(main())
