#!/usr/bin/env python3
"""The seeded transformers model run by PyTorch's own pipeline engine; write one dump.

    python3 examples/hf_pp/pipelining.py --family llama --pp 2 --cuts 3 --out run.h5 \
        --seed 7 --scenario scenarios/x.json [--schedule gpipe|1f1b] [--microbatches 2] \
        [--reference-microbatches N] [--batch 4] [--steps 3] [--device auto|cpu|cuda]

A runner-protocol engine (docs/external-engines.md) over `torch.distributed.pipelining`
(PyTorch >= 2.4): one process per stage (forked by this script, gloo between them), each
building the model of examples/hf_pp/models.py from the seed and keeping only its decoder
layers (plus the embedding on the first stage, the final norm and lm_head on the last, a
rotary embedding each) in a module wrapped as a manual `PipelineStage`, driven by
`ScheduleGPipe` or `Schedule1F1B` with no loss (forward only). A batch of seeded prompts
(--batch rows of 16 tokens) is split by the schedule into --microbatches micro-batches.
Step 0 runs the prompts; each further step appends every row's greedy token and runs the
whole sequence again (no KV cache: the schedules run full forwards): --steps schedule
steps in all.

PP=1 (`--cuts ""`) is the same code with one stage: the same schedule class, one process,
the same micro-batches (unless --reference-microbatches says otherwise: at PP=1 only, the
batch is split into that many micro-batches instead; 1 runs the whole batch as one).

Placement: the stages compute on the GPU when there is one, but each `PipelineStage` is
declared on the CPU: its receive buffers and the activations it sends are host tensors,
which gloo moves (gloo's send/recv take CPU tensors only, and NCCL needs a GPU per rank);
the stage's module copies its input to the GPU and its output back, which is exact.

The dump: each row of each step is its own forward (f = step * batch + row), recorded
as the same forward of that row alone would be: `input_ids` [T], per layer `pre_attn`,
`attn_out`, `pre_mlp`, `mlp_out`, `prefix` [T, H] (forward hooks, in the model's dtype:
float32 stays float32), `output`,
`logits` [T, V] (float32, from the schedule's merged output), `next_tokens` [T] (argmax),
`dispatch` (the micro-batch's kernel choices on every stage); then `/generation/<row>`
and `/stages/<s>` (layer range, measured parameter bytes, embedding storage identity).
Exit 0 with the dump written; 1 when a stage failed; 2 for invalid arguments.
"""

import argparse
import dataclasses
import functools
import hashlib
import json
import os
import sys

# Stages are forked from this process and start CUDA after the fork: a CUDA availability
# check here must not initialise CUDA (NVML answers instead).
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

PROMPT_TOKENS = 16
SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}
_SITES = (("pre_attn", "input_layernorm"), ("attn_out", "self_attn"),
          ("pre_mlp", "post_attention_layernorm"), ("mlp_out", "mlp"))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=("llama", "deepseek_v3"), required=True)
    ap.add_argument("--pp", type=int, required=True)
    ap.add_argument("--cuts", default="", help='"" at PP=1, else cut layers: "3" or "2,5"')
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scenario", default="", help="a JSON file; recorded, not interpreted")
    ap.add_argument("--schedule", choices=sorted(SCHEDULES), default="gpipe")
    ap.add_argument("--microbatches", type=int, default=2)
    ap.add_argument("--reference-microbatches", type=int, default=None,
                    help="at PP=1 only: micro-batches instead of --microbatches")
    ap.add_argument("--batch", type=int, default=4, help="seeded prompts, one a row")
    ap.add_argument("--steps", type=int, default=3,
                    help="schedule steps: the prompts, then one per greedy token")
    ap.add_argument("--device", default="auto", help="auto (the GPU if any), cpu, cuda")
    return ap.parse_args(argv)


@dataclasses.dataclass
class Plan:
    family: str
    seed: int
    bounds: list
    out: str
    schedule: str
    microbatches: int
    prompts: list  # [batch][PROMPT_TOKENS]
    steps: int
    device: str
    scenario_text: str
    scenario_sha256: str
    model_sha256: str
    producer: dict
    port: int = 0
    threads: int = 1


# -- one stage's module --------------------------------------------------------------------

def call_layer(layer, hidden, mask, position_ids, cache_position, position_embeddings):
    """One decoder layer as the model's own forward calls it without a cache."""
    from splitcheck_dump import hf
    names = hf._parameters(type(layer).forward)
    kw = {"attention_mask": mask, "position_ids": position_ids,
          "position_embeddings": position_embeddings}
    kw["past_key_value" if "past_key_value" in names and "past_key_values" not in names
       else "past_key_values"] = None
    if "cache_position" in names:
        kw["cache_position"] = cache_position
    if "use_cache" in names:
        kw["use_cache"] = False
    out = layer(hidden, **kw)
    return out[0] if isinstance(out, tuple) else out


def make_stage_module(model, index, bounds, compute_device):
    """The nn.Module a PipelineStage wraps: layers [bounds[index], bounds[index+1]) of
    `model` (plus embedding / norm + lm_head at the ends) on `compute_device`; it takes
    and returns CPU tensors. Records what it computes while `chunk` is set."""
    import torch
    from splitcheck_dump import hf
    from splitcheck_dump.writer import as_array

    decoder = hf.decoder_of(model)

    class StageModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.index, self.begin, self.end = index, bounds[index], bounds[index + 1]
            self.first, self.last = index == 0, index == len(bounds) - 2
            if not 0 <= self.begin < self.end <= len(decoder.layers):
                raise ValueError(f"stage {index}: layers [{self.begin}, {self.end}) outside "
                                 f"the model's {len(decoder.layers)}")
            self.config = model.config
            self.device_ = torch.device(compute_device)
            self.embed = decoder.embed_tokens if self.first else None
            self.layers = torch.nn.ModuleList(
                decoder.layers[i] for i in range(self.begin, self.end))
            self.rotary = decoder.rotary_emb
            self.norm = decoder.norm if self.last else None
            self.lm_head = model.lm_head if self.last else None
            self.chunk = None  # the micro-batch being run by the schedule, else None
            self.records = {}  # chunk -> [(path, values [mb, ...] in the model's dtype, dtype)]
            self.events = {}  # chunk -> [(op, variant, layer, site)]
            for local, layer in enumerate(self.layers):
                l = self.begin + local
                for site, name in _SITES:
                    getattr(layer, name).register_forward_hook(
                        functools.partial(self._on_output, f"layers/{l}/{site}"))
                layer.register_forward_hook(functools.partial(self._on_output,
                                                              f"layers/{l}/prefix"))
                layer.self_attn.register_forward_pre_hook(
                    functools.partial(self._on_attention, l))
                layer.mlp.register_forward_pre_hook(functools.partial(self._on_mlp, l))

        def held(self):
            return [m for m in (self.embed, *self.layers, self.rotary, self.norm,
                                self.lm_head) if m is not None]

        def placement(self):
            from splitcheck_dump import StagePlacement
            p = StagePlacement(self.index, self.begin, self.end)
            for i, m in enumerate(self.held()):
                p.hold_module(m, prefix=f"{i}.")
            p.set_embedding(self.embed.weight if self.embed is not None else None)
            return p

        def _keep(self, path, value):
            if self.chunk is not None:
                self.records.setdefault(self.chunk, []).append(
                    (path, *as_array(value, None)))

        def _event(self, op, variant, layer, site):
            if self.chunk is not None:
                self.events.setdefault(self.chunk, []).append(
                    (op, str(variant), int(layer), site))

        def _on_output(self, path, module, inputs, output):
            self._keep(path, output[0] if isinstance(output, tuple) else output)

        def _on_attention(self, layer, module, inputs):
            self._event("hf_attention", module.config._attn_implementation, layer, "attn")

        def _on_mlp(self, layer, module, inputs):
            if hasattr(module, "experts"):
                impl = getattr(self.config, "_experts_implementation", None) or "eager"
                self._event("hf_moe", impl, layer, "mlp")
            else:
                self._event("hf_mlp", "dense", layer, "mlp")

        def forward(self, x):
            x = x.to(self.device_)
            if self.first:
                self._event("hf_embedding", "lookup", -1, "embed")
                h = self.embed(x)
            else:
                h = x
            T = h.shape[1]
            cache_position = torch.arange(T, device=self.device_)
            position_ids = cache_position.unsqueeze(0)
            mask = hf.causal_mask(self.config, h, None, position_ids, cache_position)
            position_embeddings = self.rotary(h, position_ids)
            for layer in self.layers:
                h = call_layer(layer, h, mask, position_ids, cache_position,
                               position_embeddings)
            if not self.last:
                return h.contiguous().cpu()
            self._keep("output", h)
            self._event("hf_rms_norm", "final", -1, "final_norm")
            hn = self.norm(h)
            self._event("hf_lm_head", "linear", -1, "lm_head")
            return self.lm_head(hn).float().contiguous().cpu()

    module = StageModule()
    for m in module.held():
        m.to(module.device_).eval()
    return module


def recording_stage_class():
    """PipelineStage that tells its module which micro-batch the schedule runs, so that
    a forward the stage runs for itself (shape inference) is never recorded."""
    from torch.distributed.pipelining import PipelineStage

    class RecordingStage(PipelineStage):
        def forward_one_chunk(self, fwd_chunk_id, *args, **kwargs):
            if int(fwd_chunk_id) in self.submod.records:
                raise RuntimeError(f"stage {self.stage_index}: micro-batch {fwd_chunk_id} "
                                   "run twice in one step")
            self.submod.chunk = int(fwd_chunk_id)
            try:
                return super().forward_one_chunk(fwd_chunk_id, *args, **kwargs)
            finally:
                self.submod.chunk = None

    return RecordingStage


# -- the run: one process per stage -------------------------------------------------------

def resolve_device(name):
    import torch
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def stage_main(rank, plan):
    """What the process of stage `rank` runs: every schedule step, then (last stage) the
    dump."""
    import datetime

    import torch
    import torch.distributed as dist
    import torch.distributed.pipelining as pipelining

    import models

    torch.set_num_threads(plan.threads)
    pp = len(plan.bounds) - 1
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{plan.port}", rank=rank,
                            world_size=pp, timeout=datetime.timedelta(seconds=120))
    device = resolve_device(plan.device)
    model = models.build_model(plan.family, plan.seed)
    module = make_stage_module(model, rank, plan.bounds, device)
    del model  # the stage keeps only its own modules
    placement = module.placement().attributes()
    Stage = recording_stage_class()
    Schedule = getattr(pipelining, SCHEDULES[plan.schedule])
    B, n = len(plan.prompts), plan.microbatches
    mb = B // n
    H = module.config.hidden_size
    V = module.config.vocab_size
    ids = torch.tensor(plan.prompts, dtype=torch.int64)  # [B, T], on the host
    steps = []  # per step: {"ids", "records", "events"}; the last stage adds logits
    for s in range(plan.steps):
        T = ids.shape[1]
        # Shapes are given, so no stage runs a forward of its own to infer them (a
        # recorded forward is the schedule's anyway: RecordingStage).
        inp = torch.zeros(mb, T, dtype=torch.int64) if module.first else \
            torch.zeros(mb, T, H, dtype=torch.float32)
        outp = torch.zeros(mb, T, V, dtype=torch.float32) if module.last else \
            torch.zeros(mb, T, H, dtype=torch.float32)
        stage = Stage(module, rank, pp, torch.device("cpu"), input_args=(inp,),
                      output_args=(outp,))
        schedule = Schedule(stage, n)
        module.records, module.events = {}, {}
        with torch.no_grad():
            out = schedule.step(ids) if module.first else schedule.step()
        if sorted(module.records) != list(range(n)):
            raise RuntimeError(f"stage {rank}, step {s}: recorded micro-batches "
                               f"{sorted(module.records)}, expected 0..{n - 1}")
        step = {"ids": ids.clone(), "records": module.records, "events": module.events}
        tokens = torch.zeros(B, dtype=torch.int64)
        if module.last:
            logits = out.float()  # [B, T, V], the micro-batches' logits joined
            if tuple(logits.shape) != (B, T, V):
                raise RuntimeError(f"step {s}: merged logits {tuple(logits.shape)}, "
                                   f"expected {(B, T, V)}")
            step["logits"] = logits
            step["next_tokens"] = logits.argmax(-1)  # [B, T], first index among maxima
            tokens = step["next_tokens"][:, -1].contiguous()
        if pp > 1:
            dist.broadcast(tokens, src=pp - 1)
        step["emitted"] = tokens.clone()
        steps.append(step)
        ids = torch.cat([ids, tokens.unsqueeze(1)], dim=1)
        del stage, schedule
    mine = {"steps": [{"records": st["records"], "events": st["events"]} for st in steps],
            "placement": placement, "env": environment(device)}
    gathered = [None] * pp if rank == pp - 1 else None
    dist.gather_object(mine, gathered, dst=pp - 1)
    if rank == pp - 1:
        write_dump(plan, steps, gathered, device)
    dist.destroy_process_group()


def environment(device):
    import torch
    import transformers
    env = {"device": device, "torch": torch.__version__,
           "transformers": transformers.__version__, "stage_device": "cpu",
           "p2p": "gloo"}
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return env


def write_dump(plan, steps, stages, device):
    """Each row of each step as its own forward, stage by stage (execution order)."""
    import numpy as np
    from splitcheck_dump import DispatchEvent, DispatchTrace, DumpWriter, hf

    partition = "|".join(f"{b}-{e}" for b, e in zip(plan.bounds, plan.bounds[1:]))
    kernels = hf.kernel_table(ev for s in stages for st in s["steps"]
                              for ev in st["events"].values())
    extra = kernels[len(hf.HF_KERNELS):]
    B, n = len(plan.prompts), plan.microbatches
    mb = B // n
    emitted = [[] for _ in range(B)]
    with DumpWriter(plan.out, scenario=plan.scenario_text,
                    scenario_sha256=plan.scenario_sha256, model_sha256=plan.model_sha256,
                    partition=partition, backend=f"torch-pipelining-{device.split(':')[0]}",
                    producer=plan.producer, env=stages[-1]["env"], level="layer") as w:
        for s, step in enumerate(steps):
            T = step["ids"].shape[1]
            for row in range(B):
                f = s * B + row
                chunk, i = divmod(row, mb)
                w.begin_forward(f, kind="prefill", first_position=0, tokens=T)
                w.write(f"/forward/{f}/input_ids", step["ids"][row].numpy().astype(np.int32),
                        dtype="int32")
                for st in stages:
                    for path, data, dtype in st["steps"][s]["records"][chunk]:
                        w.write(f"/forward/{f}/{path}", data[i], dtype=dtype)
                w.write(f"/forward/{f}/logits", step["logits"][row].numpy(), dtype="float32")
                w.write(f"/forward/{f}/next_tokens",
                        step["next_tokens"][row].numpy().astype(np.int32), dtype="int32")
                trace = DispatchTrace(extra_kernels=list(hf.HF_KERNELS) + extra)
                for k, st in enumerate(stages):
                    trace.extend(DispatchEvent(op, variant, layer, site, -1, k)
                                 for op, variant, layer, site in st["steps"][s]["events"][chunk])
                trace.extend([DispatchEvent("torch_argmax", "first_index", -1, "sample", -1,
                                            len(stages) - 1)])
                w.write_dispatch(f, trace)
                emitted[row].append(int(step["emitted"][row]))
        for row in range(B):
            w.write(f"/generation/{row}/prompt_ids", np.asarray(plan.prompts[row], np.int32),
                    dtype="int32")
            w.write(f"/generation/{row}/emitted", np.asarray(emitted[row], np.int32),
                    dtype="int32")
        for k, st in enumerate(stages):
            for name, value in st["placement"].items():
                w.set_attr(f"/stages/{k}", name, value)


def launch(plan):
    """Runs the stages as processes (forked when this process has not started CUDA, else
    spawned); 0 when every stage finished (the dump is written), 1 when one failed (the
    others are stopped; no dump)."""
    import torch
    from splitcheck_dump import hf
    from splitcheck_dump.processes import run_stage_processes
    plan.port = plan.port or hf._free_port()
    method = "spawn" if torch.cuda.is_initialized() else "fork"
    return run_stage_processes(stage_main, plan, len(plan.bounds) - 1, "pipelining.py", method)


def make_plan(args, bounds):
    import models
    import torch
    from splitcheck_dump import __version__

    pp = len(bounds) - 1
    microbatches = args.microbatches
    if pp == 1 and args.reference_microbatches is not None:
        microbatches = args.reference_microbatches
    vocab = models.config_kwargs(args.family)["vocab_size"]
    g = torch.Generator().manual_seed(args.seed)
    prompts = torch.randint(0, vocab, (args.batch, PROMPT_TOKENS), generator=g).tolist()
    scenario_text = ""
    if args.scenario and os.path.isfile(args.scenario):
        with open(args.scenario, encoding="utf-8") as f:
            scenario_text = f.read()
    # What is computed, not how it is scheduled: PP=1 and every split share it.
    run_identity = {"example": "hf_pp/pipelining", "family": args.family, "seed": args.seed,
                    "batch": args.batch, "prompt_tokens": PROMPT_TOKENS, "steps": args.steps}
    return Plan(
        family=args.family, seed=args.seed, bounds=bounds, out=args.out,
        schedule=args.schedule, microbatches=microbatches, prompts=prompts,
        steps=args.steps, device=args.device, scenario_text=scenario_text,
        scenario_sha256=hashlib.sha256(
            json.dumps(run_identity, sort_keys=True).encode()).hexdigest(),
        model_sha256=models.identity(args.family, args.seed),
        producer={"name": "examples/hf_pp/pipelining", "version": __version__,
                  "family": args.family, "schedule": SCHEDULES[args.schedule],
                  "microbatches": microbatches, "torch": torch.__version__})


def check(args, bounds):
    """ValueError for arguments the run cannot take."""
    pp = len(bounds) - 1
    n = args.microbatches
    if pp == 1 and args.reference_microbatches is not None:
        n = args.reference_microbatches
    if args.batch < 1 or args.steps < 1 or n < 1:
        raise ValueError("--batch, --steps and the micro-batch count must be positive")
    if args.batch % n:
        raise ValueError(f"--batch {args.batch} does not split into {n} equal micro-batches")
    if args.schedule == "1f1b" and n < pp:
        raise ValueError(f"--schedule 1f1b needs at least as many micro-batches as stages "
                         f"({n} < {pp})")
    if args.device not in ("auto", "cpu") and not args.device.startswith("cuda"):
        raise ValueError(f"--device {args.device!r}: auto, cpu or cuda[:N]")


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    from splitcheck_dump import hf
    import models
    try:
        bounds = hf.stage_bounds(models.NUM_LAYERS, args.pp, args.cuts)
        check(args, bounds)
        hf.check_transformers()
        import torch.distributed.pipelining  # noqa: F401  (PyTorch >= 2.4)
    except (ValueError, ImportError) as e:
        print(f"pipelining.py: {e}", file=sys.stderr)
        return 2
    # Imported before the fork, so each stage need not import them again (neither
    # starts CUDA; launch spawns instead if something did).
    import transformers  # noqa: F401
    return launch(make_plan(args, bounds))


if __name__ == "__main__":
    sys.exit(main())
