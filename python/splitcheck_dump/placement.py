"""What each pipeline stage holds (SPEC 2.7, 5.4): `/stages/<s>` in a dump.

A stage registers the tensors it owns; the placement measures their bytes (each distinct
storage once, its full size) and names storages by identity, so that "the drafter reads
the target's embedding" is a fact about storage, not about equal values:

    p = StagePlacement(index=1, layer_begin=5, layer_end=16, owned_taps=[8, 13, 16])
    for name, t in stage_module.named_parameters():
        p.hold(name, t)
    p.set_embedding(stage.embed_tokens)          # "real" on stage 0, else "copy-for-drafter"
    p.set_drafter_embedding(drafter.embed_tokens)  # "target" when the same storage
    writer.write_stage(p)

Identity is the address of the storage (`untyped_storage().data_ptr()` in PyTorch, the
base buffer of a numpy array), compared inside the process that holds both; the dump
records the outcome and a label per storage (`storage:<i>`, numbered in the order the
stage registered them), never the address, so two runs write the same bytes.
"""

import numpy as np


def storage_of(tensor):
    """(address, size in bytes) of the storage behind a torch tensor or numpy array."""
    if hasattr(tensor, "untyped_storage"):  # PyTorch >= 2.0
        s = tensor.untyped_storage()
        return int(s.data_ptr()), int(s.nbytes())
    if hasattr(tensor, "storage") and hasattr(tensor, "detach"):  # PyTorch 1.x
        s = tensor.storage()
        return int(s.data_ptr()), int(s.nbytes())
    a = np.asarray(tensor)
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    return int(root.__array_interface__["data"][0]), int(root.nbytes)


class StagePlacement:
    """The layer range, taps, embedding and measured parameter bytes of one stage."""

    def __init__(self, index, layer_begin, layer_end, owned_taps=()):
        self.index = int(index)
        self.layer_begin = int(layer_begin)
        self.layer_end = int(layer_end)
        self.owned_taps = sorted(int(k) for k in owned_taps)
        self._storages = {}  # address -> (label index, bytes)
        self._names = []
        self.embedding = "missing"
        self._embedding_addr = None
        self.drafter_embedding = "none"  # no drafter on this stage
        self._drafter_addr = None
        self._head_addr = None  # the head's storage, on the stage that holds the head
        self.head_tied = None
        self.placed_bytes = None  # the bytes the engine's placement rule gives the stage
        self.placed_embedding = None  # what that rule gives it of the embedding

    def hold(self, name, tensor):
        """Registers a tensor the stage owns (a parameter, a buffer, a copy)."""
        addr, nbytes = storage_of(tensor)
        if addr not in self._storages:
            self._storages[addr] = (len(self._storages), nbytes)
        self._names.append(str(name))
        return self

    def hold_module(self, module, prefix=""):
        """Registers every parameter and buffer of a torch module."""
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            self.hold(prefix + name, t)
        return self

    def set_embedding(self, tensor, kind=None):
        """The target's embedding table as this stage holds it, or None when it holds none.

        kind defaults to "real" on the stage that starts at layer 0 and "copy-for-drafter"
        elsewhere; a tensor given here is registered as held.
        """
        if tensor is None:
            self.embedding, self._embedding_addr = "missing", None
            return self
        self.hold("embed_tokens.weight", tensor)
        self._embedding_addr = storage_of(tensor)[0]
        self.embedding = kind or ("real" if self.layer_begin == 0 else "copy-for-drafter")
        return self

    def set_drafter_embedding(self, tensor):
        """The embedding the stage's drafter reads: `target` when it is the same storage
        as the stage's target embedding, `own` when another one, `missing` when None."""
        if tensor is None:
            self.drafter_embedding, self._drafter_addr = "missing", None
            return self
        self._drafter_addr = storage_of(tensor)[0]
        same = self._embedding_addr is not None and self._drafter_addr == self._embedding_addr
        self.drafter_embedding = "target" if same else "own"
        return self

    def set_head(self, tensor, tied_to=None):
        """The head (lm_head weight) this stage holds, registered as held. `head_tied` is
        measured: 1 when its storage is the embedding table's, `tied_to` (the table the
        model ties it to, as this stage holds it) or else the one given to set_embedding.
        A model that ties its head records it at PP=1; splitcheck's embedding check then
        fails a stage whose head is not tied ("head not tied to the embedding")."""
        self.hold("lm_head.weight", tensor)
        self._head_addr = storage_of(tensor)[0]
        table = storage_of(tied_to)[0] if tied_to is not None else self._embedding_addr
        self.head_tied = table is not None and table == self._head_addr
        return self

    def set_placed(self, parameter_bytes, embedding=None):
        """What the engine's placement rule gives this stage: its bytes (what the stage
        would hold under the rule, computed from the rule, not measured) and, optionally, its
        embedding ("real", "copy-for-drafter" or "missing"). Written as
        `placed_parameter_bytes` / `placed_embedding`; without them splitcheck's memory
        check is not judged (docs/external-engines.md)."""
        self.placed_bytes = int(parameter_bytes)
        self.placed_embedding = embedding
        return self

    @property
    def parameter_bytes(self):
        """Bytes of the distinct storages the stage holds, each counted once."""
        return sum(nbytes for _, nbytes in self._storages.values())

    def _label(self, addr):
        if addr is None:
            return ""
        entry = self._storages.get(addr)
        return f"storage:{entry[0]}" if entry is not None else "unheld"

    def attributes(self):
        """The attributes of `/stages/<index>`, in the order they are written."""
        attrs = {
            "layer_begin": np.int64(self.layer_begin),
            "layer_end": np.int64(self.layer_end),
            "embedding": self.embedding,
            "parameter_bytes": np.int64(self.parameter_bytes),
            "owned_taps": ",".join(str(k) for k in self.owned_taps),
            "held_tensors": np.int64(len(self._names)),
            "held_storages": np.int64(len(self._storages)),
            "embedding_storage": self._label(self._embedding_addr),
            "drafter_embedding": self.drafter_embedding,
            "drafter_embedding_storage": self._label(self._drafter_addr),
        }
        if self._head_addr is not None:
            attrs["head_storage"] = self._label(self._head_addr)
            attrs["head_tied"] = np.int64(1 if self.head_tied else 0)
        if self.placed_bytes is not None:
            attrs["placed_parameter_bytes"] = np.int64(self.placed_bytes)
        if self.placed_embedding is not None:
            attrs["placed_embedding"] = str(self.placed_embedding)
        return attrs
