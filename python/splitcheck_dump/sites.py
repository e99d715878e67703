"""Where each recorded tensor comes from in a PyTorch model: one convention, read by
`splitcheck_dump.hooks` (any stage) and `splitcheck_dump.hf` (transformers models).

A standard pre-norm decoder layer (Llama, Qwen, Mistral, DeepSeek...) computes

    x = input_layernorm(h);            a = self_attn(x);   h = h + a
    y = post_attention_layernorm(h);   m = mlp(y);         h = h + m

and its five sites are, in execution order, the outputs of the modules below: `pre_attn`
is x, `attn_out` is a, `pre_mlp` is y, `mlp_out` is m, and `prefix` is the layer's own
output, the residual stream h the next layer reads. After the last layer, `output` is what
the final norm reads (the stream before the norm, as the dump format defines it) and
`logits` is the head's output. In AttnRes terms (K3-mini, SPEC 2.3) the same names are the
attn_res read before attention, the attention output, the read before the MLP, the MLP
output (the pending delta) and the running prefix P.
"""

from .writer import LAYER_SITES

# (site, the layer's submodule whose output it is), in execution order: the four
# sublayer sites. The fifth, LAYER_OUTPUT_SITE, is the layer's own output.
SUBLAYER_SITES = (("pre_attn", "input_layernorm"), ("attn_out", "self_attn"),
                  ("pre_mlp", "post_attention_layernorm"), ("mlp_out", "mlp"))
LAYER_OUTPUT_SITE = "prefix"

# Every layer site as (site, module path relative to the layer; "" is the layer itself).
STANDARD_LAYER_SITES = SUBLAYER_SITES + ((LAYER_OUTPUT_SITE, ""),)

# The last stage's sites: `output` is the final norm's input, `final_norm` its output (the
# head's input: with it recorded, logits that differ are told apart as the norm's fault or
# the head's), `logits` the head's output.
OUTPUT_SITE = "output"
FINAL_NORM_SITE = "final_norm"
LOGITS_SITE = "logits"

assert tuple(s for s, _ in STANDARD_LAYER_SITES) == LAYER_SITES
