"""PyTorch helpers: forward hooks that record layers in the dtype they ran in, and tensors
as bf16 bits."""

import numpy as np

from . import _encoding


def bf16_bits(tensor):
    """A torch tensor as bf16 bit patterns (uint16) [rows, last axis], leading axes flattened.

    float32 and float16 are rounded as kernels/bf16.h does (`to_bf16_bits`: to nearest even,
    NaN keeps its sign and payload), on the tensor's device, and cross to the host once as
    2-byte patterns; bfloat16 tensors give their bits; other dtypes go through torch's cast.
    """
    import torch

    t = tensor.detach()
    if t.dtype == torch.bfloat16:
        bits = _encoding.tensor_to_host(t.view(torch.int16))
    elif t.dtype in (torch.float32, torch.float16):
        bits = _encoding.to_bf16_bits(t)
    else:
        bits = _encoding.tensor_to_host(t.to(torch.bfloat16).view(torch.int16))
    bits = np.ascontiguousarray(bits).view(np.uint16)
    if bits.ndim > 2:
        bits = bits.reshape(-1, bits.shape[-1])
    return bits


def rows(tensor):
    """A torch tensor [rows, last axis], leading axes flattened, in its own dtype."""
    t = tensor.detach()
    return t.reshape(-1, t.shape[-1]) if t.dim() > 2 else t


def record_forward_hooks(model, writer, forward_index, modules=None, dtype=None):
    """Registers forward hooks that record each submodule's input and output in the dtype
    the module computed them in (float32 stays float32); `dtype` ("bfloat16", say)
    narrows them, and the writer records their source dtype.

    `modules` is a list of (name, module) pairs (default: model.named_children() that
    have parameters, i.e. the layers). Each call of a hooked module writes
    /forward/<forward_index>/layers/<i>/pre_attn (its first input) and .../mlp_out (its
    output) in call order. Returns the hook handles; call .remove() on each when done.
    """
    if modules is None:
        modules = [(n, m) for n, m in model.named_children()
                   if any(True for _ in m.parameters())]
    handles = []
    for i, (_, module) in enumerate(modules):
        def hook(mod, inputs, output, i=i):
            prefix = f"/forward/{forward_index}/layers/{i}/"
            x = inputs[0] if isinstance(inputs, tuple) else inputs
            y = output[0] if isinstance(output, tuple) else output
            writer.write(prefix + "pre_attn", rows(x), dtype=dtype)
            writer.write(prefix + "mlp_out", rows(y), dtype=dtype)
        handles.append(module.register_forward_hook(hook))
    return handles
