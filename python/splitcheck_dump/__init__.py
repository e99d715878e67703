"""Write and read splitcheck dumps (docs/dump-format.md) from Python.

A dump is one HDF5 file: root attributes that identify the run, datasets under
/forward/<f>/... each in the dtype the engine computed it in (float32, float16, bfloat16
bits, int32; `source_dtype` names what a narrowed one was computed in), carrying `dtype`, `order` (its place in execution order) and
`digest` ("xxh3:%016x" of its raw little-endian bytes; "xxh64:" in format 1), and the evidence the checks
read: taps, dispatch traces, /stages (placement), /spec (speculative figures).
A pipeline whose stages are processes may write one part per stage (`PartWriter`) and
join them with `assemble` (`python3 -m splitcheck_dump assemble PART... --out DUMP`).
`splitcheck compare A B` compares two such files bit for bit; `splitcheck sweep` runs an
engine that writes them once per split point.

Needs numpy, h5py and xxhash; PyTorch only for the torch helpers (`record_stage`: hooks
that record a pipeline stage of any PyTorch model; bf16 tensors,
storage identity of torch tensors).
"""

from ._encoding import from_bf16_bits, to_bf16_bits, xxh3_64, xxh64
from .compare import differing_datasets
from .dispatch import KERNELS, SITES, DispatchEvent, DispatchTrace, dispatch, recording
from .hooks import Site, StageRecording, bf16_bits, record_forward_hooks, record_stage
from .parts import PART_FORMAT, PART_FORMAT_VERSION, AssembleError, PartWriter, assemble
from .placement import StagePlacement, storage_of
from .processes import run_stage_processes
from .recorder import TensorRecorder
from .reader import CorruptDump, DatasetInfo, DumpReader, FormatError, UnsupportedFormatVersion
from .spec import SpecRecord
from .version import FORMAT, FORMAT_VERSION, SUPPORTED_FORMAT_VERSIONS, __version__
from .writer import DEFAULT_VOLATILE, LAYER_SITES, DumpWriter, as_array, source_dtype

__all__ = [
    "AssembleError", "PART_FORMAT", "PART_FORMAT_VERSION", "PartWriter", "assemble",
    "CorruptDump", "DEFAULT_VOLATILE", "DatasetInfo", "DispatchEvent", "DispatchTrace",
    "DumpReader", "DumpWriter", "FORMAT", "FORMAT_VERSION", "FormatError", "KERNELS",
    "LAYER_SITES", "SITES", "SUPPORTED_FORMAT_VERSIONS", "Site", "SpecRecord", "StagePlacement",
    "StageRecording", "TensorRecorder",
    "UnsupportedFormatVersion", "__version__", "as_array", "bf16_bits", "differing_datasets",
    "dispatch",
    "from_bf16_bits", "record_forward_hooks", "record_stage", "recording", "run_stage_processes",
    "source_dtype", "storage_of",
    "to_bf16_bits",
    "xxh64", "xxh3_64",
]
