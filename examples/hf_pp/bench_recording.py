#!/usr/bin/env python3
"""What recording costs a decode step on the GPU, measured in one run.

    python3 examples/hf_pp/bench_recording.py [--steps 48] [--rounds 7] [--device cuda]

A transformers Llama runs as one stage (splitcheck_dump.hf.PipelineStage, PP=1): a
32-token prefill, then greedy decode steps, each timed from its start until its next
token is on the host. Three ways, interleaved round by round, on the same model:
  off         the stage's forward with recording off (hooks still fire, nothing kept);
  per-tensor  every tensor converted and copied to the host when it is produced
              (as_array: one wait for the GPU per tensor, the writer's way before);
  batched     splitcheck_dump.TensorRecorder: per forward, one join and one asynchronous
              copy to the host per kind of tensor, no wait; bf16 bits made on the host
              when the run's records are taken.
Three models: the example's tiny Llama (8 layers, H 64), a 1B-class Llama shape (8
layers, H 2048, FFN 5632, vocab 32000), and the family matrix's largest model,
DeepSeek-V3 as models.py builds it (8 layers, MLA, MoE: the most hooked modules and
kernels a step). Prints each way's median step, its cost over `off` (the median over
rounds of the round's ratio; target: batched at most 10%), and the wait for the copies at
the end of the run.
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import torch  # noqa: E402

import splitcheck_dump as sd  # noqa: E402
from splitcheck_dump import hf  # noqa: E402

SHAPES = {
    "tiny (8 layers, H 64)": dict(vocab_size=256, hidden_size=64, intermediate_size=128,
                                  num_attention_heads=4, num_key_value_heads=2),
    "1B-class (8 layers, H 2048)": dict(vocab_size=32000, hidden_size=2048,
                                        intermediate_size=5632, num_attention_heads=16,
                                        num_key_value_heads=8),
}
PROMPT = 32


class PerTensorRecorder:
    """The way before TensorRecorder: as_array on every tensor when it is kept."""

    def __init__(self):
        self._kept = []

    def keep(self, path, value, dtype):
        self._kept.append((path, sd.as_array(value, dtype, path)[0], dtype))

    def flush(self):
        pass

    def take(self):
        kept, self._kept = self._kept, []
        return kept


FAMILY_SHAPES = {"deepseek_v3 (models.py, 8 layers, MLA + MoE)": "deepseek_v3"}


def build_stage(shape, device):
    import transformers
    if shape in FAMILY_SHAPES:
        import models
        model = models.build_model(FAMILY_SHAPES[shape], 7)
        return hf.PipelineStage(model, 0, [0, models.NUM_LAYERS], device), model.config.vocab_size
    config = transformers.LlamaConfig(num_hidden_layers=8, max_position_embeddings=4096,
                                      tie_word_embeddings=False, **SHAPES[shape])
    torch.manual_seed(7)
    with torch.device(device):  # weights initialised where they run
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model = model.float().eval()
    return hf.PipelineStage(model, 0, [0, 8], device), config.vocab_size


def decode_steps(stage, vocab, steps, mode):
    """Median decode step (s) and the wait for the records at the end (s)."""
    stage.cache = hf.new_cache(stage.config)
    stage.seen = 0
    stage.recorder = PerTensorRecorder() if mode == "per-tensor" else sd.TensorRecorder()
    record = mode != "off"
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, vocab, (PROMPT,), generator=g).tolist()
    out, _ = stage.forward(0, ids, record=record)
    times = []
    for f in range(1, steps + 1):
        t0 = time.perf_counter()
        out, _ = stage.forward(f, [out[-1]], record=record)  # returns once the token is here
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    kept = stage.recorder.take()
    wait = time.perf_counter() - t0
    if record and len(kept) < steps * 40:
        raise RuntimeError(f"{mode}: {len(kept)} records for {steps} steps")
    return statistics.median(times), wait


def paired_cost(way, off):
    """The median over rounds of (a way's median step / off's median step, same round) - 1:
    each round's ways ran back to back, so a machine slower in one round than in another
    (shared, or still busy) moves both sides of its ratio."""
    return statistics.median(w / o for w, o in zip(way, off)) - 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    hf.require_transformers()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_recording: no CUDA device", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"device {name}, torch {torch.__version__}, {args.steps} decode steps x "
          f"{args.rounds} rounds per way")
    worst = 0.0
    for shape in list(SHAPES) + list(FAMILY_SHAPES):
        stage, vocab = build_stage(shape, args.device)
        modes = ("off", "per-tensor", "batched")
        decode_steps(stage, vocab, 4, "batched")  # warm-up: kernels, allocator, pinned pool
        step = {m: [] for m in modes}
        wait = {m: [] for m in modes}
        for _ in range(args.rounds):
            for m in modes:
                s, w = decode_steps(stage, vocab, args.steps, m)
                step[m].append(s)
                wait[m].append(w)
        print(f"{shape}:")
        for m in modes:
            s = statistics.median(step[m])
            extra = (f", +{100 * paired_cost(step[m], step['off']):.1f}% over off"
                     if m != "off" else "")
            print(f"   {m:<11} decode step {1e3 * s:7.3f} ms (median of rounds "
                  f"{', '.join(f'{1e3 * x:.3f}' for x in step[m])}){extra}; wait for the "
                  f"records at the end {1e3 * statistics.median(wait[m]):.2f} ms")
        worst = max(worst, paired_cost(step["batched"], step["off"]))
        del stage
        torch.cuda.empty_cache() if args.device.startswith("cuda") else None
    print(f"batched recording's cost over a decode step, worst shape: {100 * worst:.1f}% "
          f"(target at most 10%: {'met' if worst <= 0.10 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
