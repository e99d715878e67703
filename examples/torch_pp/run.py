#!/usr/bin/env python3
"""Run the K3-style AttnRes decoder (model.py) pipeline-parallel and write one dump.

    python3 examples/torch_pp/run.py --pp 2 --cuts 5 --out run.h5 --seed 7 \
        --scenario scenarios/x.json [--bug-no-zero-delta] [--bug-prefix-tap] \
        [--per-stage-write] [--device cpu|cuda]

Each stage is its own process; stages exchange the handoff of SPEC 2.7 (hidden, bank
rows, taps) through torch.distributed (gloo, CPU, a free local port per run). The work:
a seeded prompt is prefilled, then a greedy speculative loop (a bigram drafter on the
last stage reading the target's embedding, gamma 3) runs a few verify forwards. The last
stage gathers every stage's records and writes the dump through splitcheck_dump:
per-layer tensors in execution order, taps, the dispatch trace, /spec and /stages.
With --per-stage-write nothing is gathered: each stage writes its own part file
(splitcheck_dump.PartWriter) and the parent process assembles the parts into the same
dump (splitcheck_dump.assemble), then removes them.

The two historical bugs, behind flags:
  --bug-no-zero-delta  the receiver folds the delta into the prefix and passes no delta,
                       so its first layer (unless block-aligned) takes attn_res.fallback;
  --bug-prefix-tap     a tap at a stage end exports bf16(P + D), not the attn_res read.
With --device cuda every stage computes on the GPU (the handoff still crosses gloo as
bf16 bits on the host, which is exact) and records through splitcheck_dump's
TensorRecorder: each forward's tensors are converted on the device and copied to the host
in one asynchronous batch.
Exit 0 with the dump written; 1 when a stage failed; 2 for invalid arguments.
"""

import argparse
import hashlib
import json
import os
import shutil
import socket
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import model as k3  # noqa: E402
import splitcheck_dump as sd  # noqa: E402

CAPTURE_IDS = (0, 3, 8, 13, 16)  # on and off block boundaries; 16 reads the output weights
PROMPT_TOKENS = 48
GAMMA = 3
VERIFY_STEPS = 4


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pp", type=int, required=True)
    ap.add_argument("--cuts", default="", help='"" at PP=1, else cut layers: "5" or "4,9"')
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scenario", default="", help="a JSON file; recorded, not interpreted")
    ap.add_argument("--bug-no-zero-delta", action="store_true")
    ap.add_argument("--bug-prefix-tap", action="store_true")
    ap.add_argument("--per-stage-write", action="store_true",
                    help="each stage writes its own part; the parent assembles them")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where every stage computes (default: cpu)")
    return ap.parse_args(argv)


def stage_bounds(cfg, pp, cuts_text):
    """[0, cut_1, ..., L] from --pp and --cuts, or raises ValueError."""
    L = cfg.num_hidden_layers
    try:
        cuts = [int(c) for c in cuts_text.split(",") if c.strip()]
    except ValueError:
        raise ValueError(f"--cuts {cuts_text!r}: not comma-separated integers") from None
    if pp < 1 or len(cuts) != pp - 1:
        raise ValueError(f"--pp {pp} needs {max(pp - 1, 0)} cuts, got {len(cuts)}")
    bounds = [0] + cuts + [L]
    if any(b >= c for b, c in zip(bounds, bounds[1:])):
        raise ValueError(f"--cuts {cuts_text!r}: cuts must increase strictly inside (0, {L})")
    return bounds


class Stage:
    """What stage `index` holds and runs: layers [begin, end), taps, head on the last."""

    def __init__(self, cfg, seed, index, bounds, flags, device="cpu"):
        self.cfg, self.index, self.flags, self.device = cfg, index, flags, torch.device(device)
        self.begin, self.end = bounds[index], bounds[index + 1]
        self.first, self.last = index == 0, index == len(bounds) - 2
        L = cfg.num_hidden_layers
        self.weights = {}
        for layer in range(self.begin, self.end):
            for name in k3.layer_weight_names(layer):
                self.weights[name] = k3.make_weight(cfg, seed, name)
        # Layer `end`'s two AttnRes vectors, for a tap at this stage's end (SPEC 2.6).
        self.boundary = None
        if not self.last and self.end in CAPTURE_IDS:
            self.boundary = tuple(
                k3.make_weight(cfg, seed, f"layers.{self.end}.self_attention_res_{v}.weight")
                for v in ("norm", "proj"))
        self.embed = k3.make_weight(cfg, seed, "embed_tokens.weight") \
            if self.first or self.last else None  # the last stage's copy is the drafter's
        if self.last:
            for name in k3.HEAD_NAMES:
                self.weights[name] = k3.make_weight(cfg, seed, name)
        self.weights = {n: t.to(self.device) for n, t in self.weights.items()}
        if self.boundary is not None:
            self.boundary = tuple(t.to(self.device) for t in self.boundary)
        if self.embed is not None:
            self.embed = self.embed.to(self.device)
        self.drafter_embed = self.embed if self.last else None  # shared, never copied
        self.recorder = sd.TensorRecorder()
        # The stage's layers as modules, recorded by forward hooks: layers/<l>/<site> for
        # each held layer, numbered from the stage's first (splitcheck_dump.record_stage).
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList(
            k3.DecoderLayer(cfg, self.layer_weights(layer), layer)
            for layer in range(self.begin, self.end))
        self.recording = sd.record_stage(self.model, self.keep, layers="layers",
                                         first_layer=self.begin, dtype="bfloat16")
        self.owned_taps = [k for k in CAPTURE_IDS
                           if (k == 0 and self.first) or self.begin < k <= self.end]
        self.incoming_taps = [k for k in CAPTURE_IDS if k <= self.begin and not self.first]
        assert L == bounds[-1]

    def keep(self, path, t, dtype):
        """Keeps a record of the current forward. K3-mini's activations are bf16 values
        held in float32 (SPEC's dtype is bf16): a bf16 record is the engine's own dtype,
        converted exactly, so no record is narrowed (the recorder would name float32 as
        its source)."""
        if dtype == "bfloat16" and torch.is_tensor(t) and t.dtype == torch.float32:
            t = t.to(torch.bfloat16)
        self.recorder.keep(path, t, dtype)

    def layer_weights(self, layer):
        p = f"layers.{layer}."
        return {n[len(p):].split(".")[-2]: t for n, t in self.weights.items()
                if n.startswith(p)}

    def placement(self):
        p = sd.StagePlacement(self.index, self.begin, self.end, self.owned_taps)
        for name, t in self.weights.items():
            p.hold(name, t)
        if self.boundary is not None:
            p.hold("boundary_attn_res_norm", self.boundary[0])
            p.hold("boundary_attn_res_proj", self.boundary[1])
        p.set_embedding(self.embed)
        if self.last:
            p.set_drafter_embedding(self.drafter_embed)
        return p

    # -- the handoff (SPEC 2.7) -----------------------------------------------------------

    def send(self, state, taps):
        cfg = self.cfg
        rows = k3.cdiv(self.end, cfg.attn_res_block_size)
        parts = [state.hidden(), state.bank[:, :rows].reshape(state.P.shape[0], -1)]
        parts += [taps[k] for k in sorted(taps)]
        body = np.concatenate([sd.to_bf16_bits(t).ravel() for t in parts])
        header = torch.tensor([state.P.shape[0], rows, len(taps)], dtype=torch.int64)
        dist.send(header, dst=self.index + 1)
        dist.send(torch.from_numpy(body.view(np.uint8).copy()), dst=self.index + 1)

    def receive(self, T):
        cfg = self.cfg
        H = cfg.hidden_size
        rows = k3.cdiv(self.begin, cfg.attn_res_block_size)
        header = torch.zeros(3, dtype=torch.int64)
        dist.recv(header, src=self.index - 1)
        expect = [T, rows, len(self.incoming_taps)]
        if header.tolist() != expect:
            raise RuntimeError(f"stage {self.index}: payload header {header.tolist()}, "
                               f"expected [tokens, bank rows, taps] = {expect}")
        body = torch.zeros(2 * T * H * (1 + rows + len(self.incoming_taps)), dtype=torch.uint8)
        dist.recv(body, src=self.index - 1)
        values = torch.from_numpy(sd.from_bf16_bits(body.numpy().view(np.uint16)).copy())
        values = values.to(self.device)
        hidden, rest = values[:T * H].view(T, H), values[T * H:]
        bank = torch.zeros(T, cfg.num_blocks, H, device=self.device)
        bank[:, :rows] = rest[:T * rows * H].view(T, rows, H)
        aux = rest[T * rows * H:].view(len(self.incoming_taps), T, H)
        taps = {k: aux[i] for i, k in enumerate(self.incoming_taps)}
        # P = hidden and an explicit zero delta, unless the first layer writes a block.
        delta = None
        if not cfg.is_block_write(self.begin) and not self.flags["bug_no_zero_delta"]:
            delta = torch.zeros(T, H, device=self.device)
        return k3.Residual(hidden, delta, bank), taps

    # -- one forward ----------------------------------------------------------------------

    def forward(self, f, ids):
        """Runs this stage's part of forward f, recording its tensors (`records()`);
        returns (events, next_tokens)."""
        cfg = self.cfg
        T = len(ids)
        base = f"/forward/{f}/"
        keep = self.keep
        with sd.recording(sd.DispatchTrace(stage=self.index)) as trace:
            if self.first:
                keep(base + "input_ids", np.array(ids, np.int32), "int32")
                P = k3.embed(cfg, self.embed,
                             torch.tensor(ids, dtype=torch.long, device=self.device))
                state = k3.Residual(P, None, torch.zeros(T, cfg.num_blocks, cfg.hidden_size,
                                                         device=self.device))
                taps = {0: P} if 0 in CAPTURE_IDS else {}
            else:
                state, taps = self.receive(T)
            with self.recording.forward(f):
                for layer in self.model.layers:
                    layer(state)
                    k = layer.index + 1
                    if k in CAPTURE_IDS:
                        taps[k] = self.read_tap(state, k)
            next_tokens = None
            if not self.last:
                self.send(state, taps)
            else:
                w = self.weights
                o = k3.attn_res(cfg, state, w["output_attn_res_norm.weight"],
                                w["output_attn_res_proj.weight"], None, cfg.num_blocks, -1,
                                -1, "output")
                h = k3.rms_norm(cfg, o, w["norm.weight"], "final_norm")
                logits = k3.lm_head(cfg, h, w["lm_head.weight"])
                next_tokens = k3.argmax_lowest(logits)
                keep(base + "output", o, "bfloat16")
                keep(base + "bank", state.bank, "bfloat16")
                keep(base + "logits", logits, "float32")
                for k in sorted(taps):
                    keep(f"{base}taps/{k}", taps[k], "bfloat16")
                keep(base + "next_tokens", next_tokens.to(torch.int32), "int32")
        self.recorder.flush()
        return list(trace.events), next_tokens

    def records(self):
        """{forward: [(path, numpy array, dtype)]}, in the order recorded."""
        return self.recorder.take_by_forward()

    def read_tap(self, state, k):
        cfg = self.cfg
        if k < self.end:
            lw = self.layer_weights(k)
            return k3.read_tap(cfg, state, k, lw["self_attention_res_norm"],
                               lw["self_attention_res_proj"])
        if k == cfg.num_hidden_layers:
            w = self.weights
            return k3.read_tap(cfg, state, k, w["output_attn_res_norm.weight"],
                               w["output_attn_res_proj.weight"])
        if self.flags["bug_prefix_tap"]:
            return state.hidden()  # the historical bug: the running prefix, not the read
        return k3.read_tap(cfg, state, k, *self.boundary)

    def draft(self, anchor):
        """A bigram drafter: x_k = argmax(rmsnorm(E[x_{k-1}]) lm_head^T), E the target's."""
        cfg = self.cfg
        out, x = [], anchor
        for _ in range(GAMMA):
            e = self.drafter_embed[x][None]
            h = k3.bf16(e * torch.rsqrt((e * e).mean(-1, keepdim=True) + cfg.rms_norm_eps))
            logits = h @ self.weights["lm_head.weight"].t()
            x = int(np.argmax(logits[0].cpu().numpy()))
            out.append(x)
        return out


def broadcast_ints(values, n, src):
    t = torch.tensor(values if values is not None else [0] * n, dtype=torch.int64)
    if dist.get_world_size() > 1:
        dist.broadcast(t, src=src)
    return t.tolist()


def prompt_ids(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (PROMPT_TOKENS,), generator=g).tolist()


def stage_main(rank, bounds, port, args):
    torch.set_num_threads(1)
    pp = len(bounds) - 1
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=pp)
    cfg = k3.Config()
    flags = {"bug_no_zero_delta": args.bug_no_zero_delta,
             "bug_prefix_tap": args.bug_prefix_tap}
    stage = Stage(cfg, args.seed, rank, bounds, flags, args.device)
    last = pp - 1
    forwards = []  # (f, kind, first_position, tokens)
    events = {}
    spec = sd.SpecRecord(GAMMA)

    def run_forward(ids, kind):
        f = len(forwards)
        forwards.append((f, kind, 0, len(ids)))
        events[f], nt = stage.forward(f, ids)
        return nt

    seq = prompt_ids(cfg, args.seed)
    nt = run_forward(seq, "prefill")
    t = broadcast_ints([int(nt[-1])] if stage.last else None, 1, last)[0]
    emitted = [t]
    for _ in range(VERIFY_STEPS):
        proposals = broadcast_ints(stage.draft(t) if stage.last else None, GAMMA, last)
        nt = run_forward(seq + [t] + proposals, "verify")
        verdict = None
        if stage.last:
            y = [int(v) for v in nt[-(GAMMA + 1):]]
            a = 0
            while a < GAMMA and proposals[a] == y[a]:
                a += 1
            verdict = [a, y[a]]
        a, bonus = broadcast_ints(verdict, 2, last)
        spec.add_step(0, proposals, a)
        seq = seq + [t] + proposals[:a]
        t = bonus
        emitted += proposals[:a] + [bonus]
    spec.set_emitted(0, emitted)

    records = stage.records()
    if args.per_stage_write:
        write_part(args, cfg, bounds, stage, forwards, records, events, spec)
        dist.destroy_process_group()
        return
    mine = {"records": records, "events": events,
            "placement": stage.placement().attributes()}
    gathered = [None] * pp if rank == last else None
    dist.gather_object(mine, gathered, dst=last)
    if rank == last:
        write_dump(args, cfg, bounds, forwards, gathered, spec)
    dist.destroy_process_group()


def dump_header(args, cfg, bounds):
    """The run's root attributes, the same from every process of the run."""
    scenario_text = ""
    if args.scenario and os.path.isfile(args.scenario):
        with open(args.scenario, encoding="utf-8") as f:
            scenario_text = f.read()
    identity = {"example": "torch_pp", "config": k3.dataclasses.asdict(cfg), "seed": args.seed,
                "capture_ids": CAPTURE_IDS, "prompt_tokens": PROMPT_TOKENS, "gamma": GAMMA,
                "verify_steps": VERIFY_STEPS}
    scenario_sha = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    partition = "|".join(f"{b}-{e}" for b, e in zip(bounds, bounds[1:]))
    producer = {"name": "examples/torch_pp", "version": sd.__version__,
                "flags": [f for f in ("bug_no_zero_delta", "bug_prefix_tap")
                          if getattr(args, f)]}
    env = {"device": args.device, "torch": torch.__version__, "threads": 1}
    if args.device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
    return dict(scenario=scenario_text, scenario_sha256=scenario_sha,
                model_sha256=cfg.identity(args.seed), partition=partition,
                backend=f"torch-{args.device}",
                producer=producer, env=env, level="layer")


def write_dump(args, cfg, bounds, forwards, stages, spec):
    with sd.DumpWriter(args.out, **dump_header(args, cfg, bounds)) as w:
        for f, kind, first, tokens in forwards:
            w.begin_forward(f, kind=kind, first_position=first, tokens=tokens)
            for s in stages:
                for path, data, dtype, source in s["records"][f]:
                    w.write(path, data, dtype=dtype, source_dtype=source)
            trace = sd.DispatchTrace()
            for s in stages:
                trace.extend(s["events"][f])
            w.write_dispatch(f, trace)
        w.write_spec(spec)
        for i, s in enumerate(stages):
            for name, value in s["placement"].items():
                w.set_attr(f"/stages/{i}", name, value)


def part_path(args, rank):
    return os.path.join(args.part_dir, f"stage-{rank}.part.h5")


def write_part(args, cfg, bounds, stage, forwards, records, events, spec):
    """This stage's part: its own records and dispatch events, /spec on the last stage,
    its /stages/<s>; splitcheck_dump.assemble puts the parts in execution order."""
    with sd.PartWriter(part_path(args, stage.index), run_id=args.run_id, stage=stage.index,
                       stages=len(bounds) - 1, layer_begin=stage.begin, layer_end=stage.end,
                       **dump_header(args, cfg, bounds)) as w:
        for f, kind, first, tokens in forwards:
            w.begin_forward(f, kind=kind, first_position=first, tokens=tokens)
            for path, data, dtype, source in records[f]:
                w.write(path, data, dtype=dtype, source_dtype=source)
            trace = sd.DispatchTrace(stage=stage.index)
            trace.extend(events[f])
            w.write_dispatch(f, trace)
        if stage.last:
            w.write_spec(spec)
        w.write_stage(stage.placement())


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    try:
        bounds = stage_bounds(k3.Config(), args.pp, args.cuts)
    except ValueError as e:
        print(f"run.py: {e}", file=sys.stderr)
        return 2
    if args.per_stage_write:  # the parts lie beside the dump until they are assembled
        args.run_id = uuid.uuid4().hex
        args.part_dir = tempfile.mkdtemp(prefix=".parts-",
                                         dir=os.path.dirname(os.path.abspath(args.out)))
        try:
            return run_stages(args, bounds, assemble=True)
        finally:
            shutil.rmtree(args.part_dir, ignore_errors=True)
    return run_stages(args, bounds)


def _stage_entry(rank, payload):
    stage_main(rank, *payload)


def run_stages(args, bounds, assemble=False):
    port = free_port()
    if sd.run_stage_processes(_stage_entry, (bounds, port, args), len(bounds) - 1, "run.py"):
        return 1
    if assemble:
        try:
            sd.assemble([part_path(args, r) for r in range(len(bounds) - 1)], args.out)
        except sd.AssembleError as e:
            print(f"run.py: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
