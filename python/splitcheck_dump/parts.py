"""Per-stage writers: each stage process writes its own part file, and `assemble` joins
the parts into the one dump a single writer would have written for the same run.

A part is a dump (docs/dump-format.md) restricted to what one stage computed: its
layers' tensors, the records it produced (taps, logits, tokens, /spec on the stage that
owns them), its dispatch events and its `/stages/<s>`. Its root carries the run's
attributes, as every part does, and a part header:

    part_format = "splitcheck.dump-part", part_format_version = 1,
    part_run (the run id every stage of one run shares), part_stage, part_stages,
    part_layer_begin, part_layer_end.

Every dataset carries its position in execution order, `part_segment` and `part_rank`,
and `part_joined`. The segment is the forward it belongs to (`/forward/<f>/...` and
`/stage_trace/<f>`), else the forward begun last (-1 before the first): records outside
the forwards (`generation/`, `spec/`) follow the forward after which they were written.
Within a segment records go by rank, then by stage, then in each part's write order: the
forward's tensors (rank 0: stage 0's, then stage 1's...), then the joined records
(`dispatch` and `/stage_trace/<f>`: one dataset, every stage's rows in stage order), then
what follows the forward. A writer whose single-process order interleaves stages more
finely (a stage-0 tap written after the last stage's logits) passes `rank=` to `write`.

    with PartWriter(f"part-{s}.h5", run_id=run, stage=s, stages=pp, layer_begin=b,
                    layer_end=e, partition="0-5|5-16", backend="torch") as w:
        w.begin_forward(0, kind="prefill", first_position=0, tokens=T)
        w.write_layer(0, 5, "pre_attn", x)
        w.write_dispatch(0, trace)            # this stage's events
        w.write_stage(placement)              # /stages/<s>, s == stage only

    assemble(["part-0.h5", "part-1.h5"], "run.h5")

`assemble` refuses (AssembleError, naming the file and what) files that are not parts,
parts of different runs or formats, a stage given twice or missing, layer ranges that
overlap or leave a gap, a dataset two stages both wrote, attributes the parts disagree
on, and any dataset whose bytes do not match its digest. It checks everything before it
writes; the dump is built at `out + ".partial"` and renamed, so a refusal or a failure
leaves nothing at `out`. `python3 -m splitcheck_dump assemble PART... --out DUMP` runs it
from the shell; `splitcheck assemble` does the same in C++.
"""

import os
import re

import h5py
import numpy as np

from . import _encoding
from .reader import DumpReader, FormatError
from .writer import DumpWriter

PART_FORMAT = "splitcheck.dump-part"
PART_FORMAT_VERSION = 1

RANK_BODY = 0  # a forward's tensors
RANK_JOINED = 1 << 20  # dispatch and stage_trace, joined over the stages
RANK_AFTER = 2 << 20  # records outside the forwards (generation/, spec/)

PART_ROOT_ATTRS = ("part_format", "part_format_version", "part_run", "part_stage",
                   "part_stages", "part_layer_begin", "part_layer_end")
PART_DATASET_ATTRS = ("part_segment", "part_rank", "part_joined")
# Not carried from a part's dataset: its position, and what the writer writes anew.
_SKIPPED_DATASET_ATTRS = PART_DATASET_ATTRS + ("order", "digest", "dtype")

_JOINED = re.compile(r"^/(?:forward/(\d+)/dispatch|stage_trace/(\d+))$")
_FORWARD = re.compile(r"^/forward/(\d+)(?:/|$)")
_LAYER = re.compile(r"^/forward/\d+/(?:layers|cache)/(\d+)(?:/|$)")
_STAGE_GROUP = re.compile(r"^/stages/(\d+)$")


class AssembleError(FormatError):
    """The parts cannot make one dump: the message names the file and what."""


def _slash(path):
    return "/" + str(path).strip("/")


class PartWriter(DumpWriter):
    """Writes stage `stage`'s part (of `stages`) of run `run_id`: a DumpWriter whose
    datasets also record their position in execution order (module docstring). The
    header keywords (scenario, partition, backend, producer, env, level...) are the run's
    and must be the same on every stage; `created` may differ (stage 0's is kept)."""

    def __init__(self, path, run_id, stage, stages, layer_begin, layer_end, **header):
        run_id, stage, stages = str(run_id), int(stage), int(stages)
        layer_begin, layer_end = int(layer_begin), int(layer_end)
        if not run_id:
            raise ValueError("PartWriter: run_id is empty: give every stage of a run one id")
        if not 0 <= stage < stages:
            raise ValueError(f"PartWriter: stage {stage} outside 0..{stages - 1}")
        if not 0 <= layer_begin <= layer_end:
            raise ValueError(f"PartWriter: layer range {layer_begin}-{layer_end} is invalid")
        super().__init__(path, **header)
        self.stage, self.stages = stage, stages
        self.layer_begin, self.layer_end = layer_begin, layer_end
        self._segment = -1
        for name, value in (("part_format", PART_FORMAT),
                            ("part_format_version", np.int64(PART_FORMAT_VERSION)),
                            ("part_run", run_id), ("part_stage", np.int64(stage)),
                            ("part_stages", np.int64(stages)),
                            ("part_layer_begin", np.int64(layer_begin)),
                            ("part_layer_end", np.int64(layer_end))):
            self.set_attr("/", name, value)

    def begin_forward(self, forward, *args, **kwargs):
        """As DumpWriter's; records written outside the forwards from now on follow this
        forward."""
        super().begin_forward(forward, *args, **kwargs)
        self._segment = int(forward)

    def write(self, dataset_path, array, dtype=None, rank=None, source_dtype=None):
        """As DumpWriter.write, recording the dataset's position; `rank` overrides the
        default (RANK_BODY in a forward, RANK_JOINED for dispatch and stage_trace,
        RANK_AFTER outside the forwards). A layer outside the stage's range is refused."""
        path = _slash(dataset_path)
        joined = _JOINED.match(path)
        forward = _FORWARD.match(path)
        layer = _LAYER.match(path)
        if layer and not self.layer_begin <= int(layer[1]) < self.layer_end:
            raise ValueError(f"{path}: layer {layer[1]} is not stage {self.stage}'s "
                             f"(layers {self.layer_begin}-{self.layer_end})")
        if joined:
            segment = int(joined[1] if joined[1] is not None else joined[2])
            default = RANK_JOINED
        elif forward:
            segment, default = int(forward[1]), RANK_BODY
        else:
            segment, default = self._segment, RANK_AFTER
        ds = super().write(dataset_path, array, dtype=dtype, source_dtype=source_dtype)
        ds.attrs["part_segment"] = np.int64(segment)
        ds.attrs["part_rank"] = np.int64(default if rank is None else int(rank))
        ds.attrs["part_joined"] = np.int64(1 if joined else 0)
        return ds

    def write_stage(self, placement):
        """/stages/<s> for this part's own stage only."""
        if placement.index != self.stage:
            raise ValueError(f"write_stage: placement of stage {placement.index} in stage "
                             f"{self.stage}'s part")
        super().write_stage(placement)


# -- assembling ---------------------------------------------------------------------------


class _Part:
    """One opened part: its header and its datasets with their positions."""

    def __init__(self, path):
        self.path = str(path)
        try:
            self.reader = DumpReader(self.path)
        except FormatError as e:
            raise AssembleError(str(e)) from None
        try:
            self._read_header()
        except BaseException:
            self.reader.close()
            raise

    def _read_header(self):
        a = self.reader.attrs
        if "part_format" not in a:
            raise AssembleError(f"{self.path}: not a part file (no root attribute part_format): "
                                "a whole dump, or a file no PartWriter wrote")
        if a["part_format"] != PART_FORMAT:
            raise AssembleError(f"{self.path}: root attribute part_format is "
                                f"{a['part_format']!r}, not {PART_FORMAT!r}")
        for name in PART_ROOT_ATTRS[1:]:
            want = str if name == "part_run" else int
            if not isinstance(a.get(name), want) or isinstance(a.get(name), bool):
                raise AssembleError(f"{self.path}: root attribute {name} missing or not "
                                    f"{'a string' if want is str else 'an integer'}")
        if a["part_format_version"] != PART_FORMAT_VERSION:
            raise AssembleError(f"{self.path}: part_format_version {a['part_format_version']} "
                                f"(this assembler knows {PART_FORMAT_VERSION})")
        self.run = a["part_run"]
        self.stage, self.stages = a["part_stage"], a["part_stages"]
        self.begin, self.end = a["part_layer_begin"], a["part_layer_end"]
        if not 0 <= self.stage < self.stages:
            raise AssembleError(f"{self.path}: part_stage {self.stage} outside "
                                f"0..{self.stages - 1}")
        self.records = []  # (segment, rank, joined, order, path)
        for d in self.reader.datasets:
            attrs = self.reader.object_attrs(d.path)
            pos = [attrs.get(n) for n in PART_DATASET_ATTRS]
            if not all(isinstance(v, int) for v in pos):
                raise AssembleError(f"{self.path}: {d.path}: no position (part_segment, "
                                    "part_rank, part_joined integers)")
            layer = _LAYER.match(d.path)
            if layer and not self.begin <= int(layer[1]) < self.end:
                raise AssembleError(f"{self.path}: {d.path}: layer {layer[1]} outside stage "
                                    f"{self.stage}'s layers {self.begin}-{self.end}")
            self.records.append((pos[0], pos[1], bool(pos[2]), d.order, d.path))

    @property
    def file(self):
        return self.reader._file

    def close(self):
        self.reader.close()


def _attrs_of(obj, skip=()):
    """{name: (stored dtype, value)} of an h5py object's attributes, `skip` left out."""
    out = {}
    for name in obj.attrs:
        if name in skip:
            continue
        out[name] = (obj.attrs.get_id(name).dtype, obj.attrs[name])
    return out


def _same(x, y):
    """Equal stored type and equal bytes (a NaN equals itself)."""
    (dx, vx), (dy, vy) = x, y
    return dx == dy and np.asarray(vx).tobytes() == np.asarray(vy).tobytes()


def _shown(entry):
    return repr(_encoding.attr_value(entry[1]))


def _merge_attrs(into, origin, obj_path, attrs, part):
    """Adds `attrs` of `obj_path` from `part` to `into`, refusing a disagreement."""
    for name, entry in attrs.items():
        if name in into and not _same(into[name], entry):
            raise AssembleError(
                f"{part.path}: attribute {name} of {obj_path} is {_shown(entry)}, "
                f"{origin[name]} has {_shown(into[name])}")
        into.setdefault(name, entry)
        origin.setdefault(name, part.path)


def _check_parts(parts):
    """The run, format, stage set and layer ranges of the parts, or AssembleError."""
    first = parts[0]
    for p in parts[1:]:
        if p.run != first.run:
            raise AssembleError(f"{p.path}: part of run {p.run!r}, but {first.path} is part of "
                                f"run {first.run!r}")
        if p.reader.format_version != first.reader.format_version:
            raise AssembleError(f"{p.path}: format_version {p.reader.format_version}, "
                                f"{first.path} has {first.reader.format_version}")
        if p.stages != first.stages:
            raise AssembleError(f"{p.path}: part of {p.stages} stages, {first.path} of "
                                f"{first.stages}")
    by_stage = {}
    for p in parts:
        if p.stage in by_stage:
            raise AssembleError(f"{p.path}: stage {p.stage} given twice (also "
                                f"{by_stage[p.stage].path})")
        by_stage[p.stage] = p
    missing = [s for s in range(first.stages) if s not in by_stage]
    if missing:
        raise AssembleError(f"missing stage{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(map(str, missing))} of {first.stages} (run "
                            f"{first.run!r}; given: {', '.join(p.path for p in parts)})")
    ordered = [by_stage[s] for s in range(first.stages)]
    for a, b in zip(ordered, ordered[1:]):
        if b.begin != a.end:
            what = "overlap" if b.begin < a.end else "leave a gap between"
            raise AssembleError(f"{b.path}: stage {b.stage}'s layers {b.begin}-{b.end} {what} "
                                f"stage {a.stage}'s {a.begin}-{a.end} ({a.path})")
    root = _attrs_of(ordered[0].file, PART_ROOT_ATTRS)
    for p in ordered[1:]:
        other = _attrs_of(p.file, PART_ROOT_ATTRS)
        for name in sorted(set(root) | set(other)):
            if name == "created":
                continue
            if name not in root or name not in other or not _same(root[name], other[name]):
                shown = lambda attrs: _shown(attrs[name]) if name in attrs else "absent"
                raise AssembleError(f"{p.path}: root attribute {name} is {shown(other)}, "
                                    f"{ordered[0].path} has {shown(root)}: not one run")
    return ordered, root


def _plan(parts):
    """The assembled dump's datasets in execution order: (path, [(part, joined)...])."""
    owner, entries = {}, {}
    for p in parts:
        for segment, rank, joined, order, path in p.records:
            if path in owner:
                q, q_joined, q_pos = owner[path]
                if not (joined and q_joined):
                    raise AssembleError(f"{p.path}: {path} is also in {q.path}: stages "
                                        f"{q.stage} and {p.stage} overlap")
                if q_pos != (segment, rank):
                    raise AssembleError(f"{p.path}: joined {path} at position {segment}/{rank}, "
                                        f"{q.path} puts it at {q_pos[0]}/{q_pos[1]}")
                entries[path][1].append(p)
                continue
            owner[path] = (p, joined, (segment, rank))
            entries[path] = ((segment, rank, p.stage, order, path), [p])
    return [(path, contributors) for (_, _, _, _, path), contributors in
            sorted(entries.values(), key=lambda e: e[0])]


def _joined_data(path, contributors):
    """One dataset from every contributing stage's rows, in stage order."""
    infos = [p.reader.info(path) for p in contributors]
    for p, info in zip(contributors[1:], infos[1:]):
        if info.dtype != infos[0].dtype or info.shape[1:] != infos[0].shape[1:] or \
                len(info.shape) != len(infos[0].shape) or not info.shape:
            raise AssembleError(f"{p.path}: joined {path} is {info.dtype} {list(info.shape)}, "
                                f"{contributors[0].path} has {infos[0].dtype} "
                                f"{list(infos[0].shape)}: rows cannot be joined")
    first = _attrs_of(contributors[0].file[path], _SKIPPED_DATASET_ATTRS)
    for p in contributors[1:]:
        other = _attrs_of(p.file[path], _SKIPPED_DATASET_ATTRS)
        for name in sorted(set(first) | set(other)):
            if name not in first or name not in other or not _same(first[name], other[name]):
                shown = lambda attrs: _shown(attrs[name]) if name in attrs else "absent"
                raise AssembleError(f"{p.path}: attribute {name} of joined {path} is "
                                    f"{shown(other)}, {contributors[0].path} has {shown(first)}")
    return np.concatenate([_read(p, path) for p in contributors], axis=0), infos[0].dtype


def _read(part, path):
    try:
        return part.reader.read(path)
    except FormatError as e:
        raise AssembleError(str(e)) from None


def assemble(parts, out):
    """Joins the part files `parts` (paths) into one dump at `out`, in execution order.

    Returns {"datasets": n, "stages": s, "run": run id}. Raises AssembleError (naming the
    file and what) when the parts cannot make one dump; the header, stages, layer ranges,
    overlaps and attributes are checked before the output is begun, digests as each
    dataset is read, and nothing appears at `out` unless every check passed.
    """
    paths = [str(p) for p in parts]
    if not paths:
        raise AssembleError("assemble: no part files given")
    out = os.fspath(out)
    for p in paths:
        if os.path.exists(out) and os.path.exists(p) and os.path.samefile(p, out):
            raise AssembleError(f"{out}: the output is one of the parts")
    opened = []
    try:
        for p in paths:
            opened.append(_Part(p))
        ordered, root = _check_parts(opened)
        plan = _plan(ordered)
        # Attributes of groups and datasets, merged over the parts.
        attrs, origin = {}, {}
        datasets = {path for path, _ in plan}
        for p in ordered:
            objects = []
            p.file.visititems(lambda name, obj: objects.append(("/" + name, obj)))
            for obj_path, obj in objects:
                stage = _STAGE_GROUP.match(obj_path)
                if stage and int(stage[1]) != p.stage:
                    raise AssembleError(f"{p.path}: {obj_path} recorded by stage {p.stage}")
                skip = _SKIPPED_DATASET_ATTRS if obj_path in datasets else ()
                _merge_attrs(attrs.setdefault(obj_path, {}), origin.setdefault(obj_path, {}),
                             obj_path, _attrs_of(obj, skip), p)
        # Every dataset is read (digest-checked) as it is written: a refusal midway
        # abandons the partial file, so nothing appears at `out`.
        with DumpWriter(out) as w:
            for name, (dtype, value) in root.items():
                if name not in ("format", "format_version"):
                    w._file.attrs.create(name, data=value, dtype=dtype)
            for path, contributors in plan:
                if len(contributors) > 1:
                    array, dtype = _joined_data(path, contributors)
                else:
                    array = _read(contributors[0], path)
                    dtype = contributors[0].reader.info(path).dtype
                w.write(path, array, dtype=dtype)
            for obj_path in sorted(attrs):
                target = w._file.require_group(obj_path) if obj_path not in w._file \
                    else w._file[obj_path]
                for name, (dtype, value) in attrs[obj_path].items():
                    target.attrs.create(name, data=value, dtype=dtype)
        return {"datasets": len(plan), "stages": len(ordered), "run": ordered[0].run}
    finally:
        for p in opened:
            p.close()


def main(argv):
    """`python3 -m splitcheck_dump assemble PART... --out DUMP`: exit 0 written, 2 refused."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(
        prog="python3 -m splitcheck_dump assemble",
        description="Join per-stage part files (PartWriter) into one dump, in execution order. "
                    "Exit 0 written, 2 refused (nothing written).")
    ap.add_argument("parts", nargs="+", help="part files, one per stage, any order")
    ap.add_argument("--out", required=True, help="the dump to write")
    args = ap.parse_args(argv)
    try:
        summary = assemble(args.parts, args.out)
    except (AssembleError, OSError) as e:
        print(f"splitcheck_dump: error: {e}", file=sys.stderr)
        return 2
    print(f"assembled {args.out}: {summary['stages']} stages of run {summary['run']}, "
          f"{summary['datasets']} datasets")
    return 0
