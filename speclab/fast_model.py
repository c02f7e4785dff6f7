"""A Llama on a static KV cache written by position: the fast path's model (gpt-fast's design).

For a small model decoding one token, transformers' framework work (a DynamicCache grown by concatenation,
masks and positions built per call, several modules a layer) costs more than the matrix products. This
is the same network written flat on the same weights: the cache is preallocated per layer and a pass
writes its keys and values at the positions given (index_copy_, in place under torch.compile); attention
reads up to the last position in use under a boolean mask, so rolling back is forgetting a length; q/k/v
and the MLP's gate/up are one product each. RoPE's tables come from the model's own rotary module, so its
scaling is honoured. Only Llama is taken (the bundled pair, SmolLM2); anything else is refused.
decoder_layer is the one decoder layer of speclab's own passes: FastLlama's and the drafting heads'
(speclab.methods.layer_step.LayerStep), each with its own cache, mask and matrix product.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F

from speclab.devices import linear, wide_half_on_cpu

FAST_ARCHITECTURES = ("llama",)  # config.model_type values this file reproduces exactly


def check_fast_architecture(model: torch.nn.Module) -> None:
    """Refuse models this file does not reproduce, naming what to change."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    name = type(model).__name__
    if kind not in FAST_ARCHITECTURES:
        raise TypeError(f"the fast path takes Llama-architecture models (model_type 'llama': the bundled pair, "
                        f"SmolLM2); {name} has model_type {kind!r}: run it on the eager path (fast=False)")
    unsupported = [f for f in ("attention_bias", "mlp_bias") if getattr(config, f, False)]
    if getattr(config, "hidden_act", "silu") != "silu":
        unsupported.append(f"hidden_act={config.hidden_act!r}")
    if getattr(config, "pretraining_tp", 1) not in (None, 1):
        unsupported.append(f"pretraining_tp={config.pretraining_tp}")
    if unsupported:
        raise TypeError(f"the fast path's Llama has no {', '.join(unsupported)}; {name} needs them: run it on the "
                        "eager path (fast=False)")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm: normalise in float32, scale in the model's dtype. In float32 that is torch's one
    fused operator (the same arithmetic, bit for bit here), not five."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def frozen(t: torch.Tensor) -> torch.nn.Parameter:
    return torch.nn.Parameter(t.detach().contiguous(), requires_grad=False)


def looped_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, sees: torch.Tensor,
                     scale: float | None = None) -> torch.Tensor:
    """Attention of a few rows, q (..., heads, n, d), over the cache's keys and values (..., kv_heads, end, d),
    sees (..., n, end) bool (the leading dims: a batch of sequences, or none), written as multiplies and sums
    (in float32) that inductor turns into one loop each, as `FastLlama.linear` does for products: at these
    sizes torch's CPU attention kernel costs more than the arithmetic (chapter 10). Query heads
    are grouped under the key/value head they share (grouped-query attention), so nothing is repeated."""
    *batch, heads, n, d = q.shape
    kv_heads, end = keys.shape[-3], keys.shape[-2]
    group = heads // kv_heads
    q = q.reshape(*batch, kv_heads, group * n, 1, d).float()
    scale = d ** -0.5 if scale is None else scale
    scores = (q * keys.unsqueeze(-3).float()).sum(-1) * scale  # (..., kv_heads, group * n, end)
    visible = sees.reshape(*batch, 1, 1, n, end)
    scores = scores.view(*batch, kv_heads, group, n, end).masked_fill(~visible, float("-inf"))
    weights = torch.softmax(scores, dim=-1).view(*batch, kv_heads, group * n, end, 1)
    o = (weights * values.unsqueeze(-3).float()).sum(-2)  # (..., kv_heads, group * n, d)
    return o.view(*batch, heads, n, d).to(values.dtype)


def write_slots(cache_keys: torch.Tensor, cache_values: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                slots: torch.Tensor, end: int, rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Write k and v (B, kv_heads, n, d) into a cache's buffers (rows, kv_heads, capacity, d) at `slots`
    (B, n) of each sequence's row, and return those rows' keys and values up to slot `end`. rows None:
    sequences 0 .. B - 1, read as views (one sequence: row 0, written in place by index_copy_, what
    torch.compile keeps in place); else those rows, gathered. FastLlama's cache and the drafting heads'
    (speclab.methods.layer_step.RowCache) are written and read by this one rule."""
    batch = k.shape[0]
    if rows is None and batch == 1:
        own_keys, own_values = (cache_keys, cache_values) if cache_keys.shape[0] == 1 else \
            (cache_keys[:1], cache_values[:1])
        own_keys.index_copy_(2, slots[0], k)
        own_values.index_copy_(2, slots[0], v)
        return own_keys[:, :, :end], own_values[:, :, :end]
    row = (torch.arange(batch, device=k.device) if rows is None else rows).view(batch, 1)
    cache_keys[row, :, slots] = k.transpose(1, 2)
    cache_values[row, :, slots] = v.transpose(1, 2)
    if rows is None:  # the first B rows: a view
        return cache_keys[:batch, :, :end], cache_values[:batch, :, :end]
    # some rows (a batch's finished sequences left out): gathered, up to `end` only
    return cache_keys[:, :, :end].index_select(0, rows), cache_values[:, :, :end].index_select(0, rows)


class LayerWeights(NamedTuple):
    """What decoder_layer reads of one Llama-family layer: q/k/v and gate/up stacked (one product
    each), biases None where the layer has none, norm weights (attn_norm None: no input norm, as
    EAGLE-1's layer), Qwen3's per-head q/k norms or None, the norms' eps and the head counts."""

    attn_norm: torch.Tensor | None
    qkv: torch.Tensor
    out: torch.Tensor
    mlp_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    eps: float
    heads: int
    kv_heads: int
    head_dim: int
    qkv_bias: torch.Tensor | None = None
    out_bias: torch.Tensor | None = None
    gate_up_bias: torch.Tensor | None = None
    down_bias: torch.Tensor | None = None
    q_norm: torch.Tensor | None = None
    k_norm: torch.Tensor | None = None


Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
Product = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def attention_block(h: torch.Tensor, w: LayerWeights, cos: torch.Tensor, sin: torch.Tensor, attend: Attend,
                    product: Product) -> torch.Tensor:
    """The attention half of a decoder layer on its normed input h (B, n, H'): q, k, v in one product,
    q and k rotated together (cos, sin broadcast to (B, heads, n, d)), then attend(q, k, v) (the
    caller's cache and mask: (B, heads, n, d) and (B, kv_heads, n, d) in, (B, heads, n, d) out) and
    the output projection. product(x, weight, bias) is the caller's matrix product."""
    batch, n, d = h.shape[0], h.shape[1], w.head_dim
    qk, v = product(h, w.qkv, w.qkv_bias).split([(w.heads + w.kv_heads) * d, w.kv_heads * d], dim=-1)
    qk = qk.view(batch, n, -1, d).transpose(1, 2)  # (B, heads + kv_heads, n, d): q's heads, then k's
    if w.q_norm is not None:  # Qwen3 norms each head's query and key before the rotation
        qk = torch.cat([rms_norm(qk[:, :w.heads], w.q_norm, w.eps), rms_norm(qk[:, w.heads:], w.k_norm, w.eps)], 1)
    qk = qk * cos + rotate_half(qk) * sin  # rotated together: half the operators of two calls
    q, k = qk.split([w.heads, w.kv_heads], dim=1)
    o = attend(q, k, v.view(batch, n, -1, d).transpose(1, 2))
    return product(o.transpose(1, 2).reshape(batch, n, -1), w.out, w.out_bias)


def decoder_layer(x: torch.Tensor, w: LayerWeights, cos: torch.Tensor, sin: torch.Tensor, attend: Attend,
                  product: Product, attn_input: torch.Tensor | None = None) -> torch.Tensor:
    """One Llama-family decoder layer on the residual stream x (B, n, H): attention (attention_block)
    on the input norm of x, or on `attn_input` where the layer projects something else (EAGLE-3's
    [norm(embedding); norm(feature)]), then the SiLU MLP on the post-attention norm. The fast path's
    FastLlama and the drafting heads' LayerStep both run their layers through it."""
    if attn_input is None:
        attn_input = x if w.attn_norm is None else rms_norm(x, w.attn_norm, w.eps)
    x = x + attention_block(attn_input, w, cos, sin, attend, product)
    gate, up = product(rms_norm(x, w.mlp_norm, w.eps), w.gate_up, w.gate_up_bias).chunk(2, dim=-1)
    return x + product(F.silu(gate) * up, w.down, w.down_bias)


class FastLayer(torch.nn.Module):
    """One decoder layer: fused weights and the layer's slice of the static cache, one row per sequence."""

    def __init__(self, layer: torch.nn.Module, shape: tuple[float, int, int, int], max_len: int, rows: int = 1):
        super().__init__()
        attn, mlp = layer.self_attn, layer.mlp
        self.shape = shape  # eps, heads, kv_heads, head_dim
        self.attn_norm = frozen(layer.input_layernorm.weight)
        self.qkv = frozen(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
        self.out = frozen(attn.o_proj.weight)
        self.mlp_norm = frozen(layer.post_attention_layernorm.weight)
        self.gate_up = frozen(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
        self.down = frozen(mlp.down_proj.weight)
        dtype, device, kv_heads, head_dim = self.qkv.dtype, self.qkv.device, shape[2], shape[3]
        self.register_buffer("keys", torch.zeros(rows, kv_heads, max_len, head_dim, dtype=dtype, device=device))
        self.register_buffer("values", torch.zeros(rows, kv_heads, max_len, head_dim, dtype=dtype, device=device))

    @property
    def weights(self) -> LayerWeights:
        return LayerWeights(self.attn_norm, self.qkv, self.out, self.mlp_norm, self.gate_up, self.down, *self.shape)


class FastLlama(torch.nn.Module):
    """The target (or draft) network on a static cache of `max_len` positions for up to `max_batch`
    sequences. `forward` feeds each sequence of a batch n tokens at the positions given and returns their
    logits; which cached slots each token sees is the caller's mask (speclab.runner.StaticRunner builds it),
    and `end` is how many slots attention reads. The cache holds one row more than max_batch: a scratch
    row for the padding sequences a compiled pass adds to reach a batch size it has a graph for."""

    def __init__(self, model: torch.nn.Module, max_len: int, max_batch: int = 1):
        super().__init__()
        check_fast_architecture(model)
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch (sequences the static cache holds) must be an integer >= 1, got {max_batch!r}")
        config, body = model.config, model.model
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps, self.max_len, self.max_batch = config.rms_norm_eps, max_len, max_batch
        self.gemv_rows = 0  # passes of at most this many rows multiply as generated loops (see linear)
        self.embed = frozen(body.embed_tokens.weight)
        cache_rows = 1 if max_batch == 1 else max_batch + 1  # + the scratch row
        shape = (self.eps, self.heads, self.kv_heads, self.head_dim)
        self.layers = torch.nn.ModuleList(FastLayer(layer, shape, max_len, cache_rows) for layer in body.layers)
        # the final norm, or the module a model puts there (layer skipping's exit adapter before the norm:
        # speclab.methods.layer_skip), called as it is
        plain_norm = hasattr(body.norm, "weight") and not list(body.norm.children())
        self.norm = frozen(body.norm.weight) if plain_norm else None
        self.final = None if plain_norm else body.norm
        # the model's own output layer (a Linear, or a shared draft's reduced-vocabulary head): same weights
        self.lm_head = model.get_output_embeddings()
        with torch.no_grad():  # the model's own rotary module: every rope variant transformers knows
            positions = torch.arange(max_len, device=self.embed.device).view(1, -1)
            cos, sin = body.rotary_emb(self.embed[:1].view(1, 1, -1), positions)
        self.register_buffer("cos", cos[0].to(self.embed.dtype))
        self.register_buffer("sin", sin[0].to(self.embed.dtype))

    @property
    def scratch_row(self) -> int:
        """The cache row padding sequences write to (never one a sequence owns)."""
        return self.layers[0].keys.shape[0] - 1

    def forward(self, ids: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor, sees: torch.Tensor,
                end: int, feature_layers: tuple[int, ...] = (), last_only: bool = False,
                rows: torch.Tensor | None = None, last: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """ids, slots, positions (B, n): sequence b's token i is written to its cache slot slots[b, i] and
        rotated as position positions[b, i] (a chain's are equal; a tree's siblings share a position, never a
        slot). sees (B, n, end) bool: that token attends to slot j where sees[b, i, j] (its own slot
        included). rows (B,): the cache row of each sequence (None: rows 0 .. B - 1). Returns logits
        (B, n, V), with last_only (B, 1, V) of the last token, or with `last` (B,) of token last[b] of each
        sequence; and with feature_layers, the hidden states transformers' output_hidden_states would give at
        those indices, concatenated (0: the embeddings, i: after layer i, -1 or L: after the final norm).
        1-D ids, slots, positions and 2-D sees are one sequence in row 0, and the outputs lose the batch dim."""
        if ids.dim() == 1:
            logits, features = self.forward(ids[None], slots[None], positions[None], sees[None], end,
                                            feature_layers, last_only)
            return logits[0], (features[0] if features is not None else None)
        batch, n = ids.shape
        x = F.embedding(ids, self.embed)
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)  # (B, 1, n, d)
        mask = sees.view(batch, 1, n, end)
        hidden = [x]
        for layer in self.layers:
            x = decoder_layer(x, layer.weights, cos, sin, partial(self.attend, layer, slots, mask, end, rows),
                              self.product)
            hidden.append(x)
        x = rms_norm(x, self.norm, self.eps) if self.final is None else self.final(x)
        hidden[-1] = x  # what transformers reports as the last hidden state: after the final norm
        features = torch.cat([hidden[i] for i in feature_layers], dim=-1) if feature_layers else None
        if last is not None:
            x = x[torch.arange(batch, device=x.device), last].unsqueeze(1)
        elif last_only:
            x = x[:, -1:]
        head = self.lm_head
        plain = isinstance(head, torch.nn.Linear) and head.bias is None
        return self.linear(x, head.weight) if plain else head(x), features

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """x @ weight.T. Compiled on a CPU (gemv_rows > 0), a product over a few rows is written as one
        multiply-and-sum per row, which inductor fuses into one vectorized loop that streams each weight
        row once for all rows. A library call on a matrix this small runs far below the bandwidth a large
        one reaches, and a decode step makes 4 a layer (chapter 10 times both).
        Uncompiled, the same expression would be n * 2 operators a product: eager keeps the library call."""
        rows = x.reshape(-1, x.shape[-1])  # every token of every sequence is a row of the product
        if rows.shape[0] <= self.gemv_rows:
            out = torch.stack([(rows[i] * weight).sum(-1) for i in range(rows.shape[0])])
            return out.view(*x.shape[:-1], weight.shape[0])
        if wide_half_on_cpu(x):  # a 16-bit draft's prefill on a CPU: in float32 (speclab.devices.linear)
            return linear(x, weight)
        return x @ weight.t()

    def product(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """decoder_layer's product: `linear` (the fast path takes no biases: check_fast_architecture)."""
        return self.linear(x, weight)

    def attention(self, layer: FastLayer, h: torch.Tensor, slots: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor, mask: torch.Tensor, end: int, rows: torch.Tensor | None) -> torch.Tensor:
        """The attention half of `layer` on its normed input h (B, n, H), as forward runs it."""
        return attention_block(h, layer.weights, cos, sin, partial(self.attend, layer, slots, mask, end, rows),
                               self.product)

    def attend(self, layer: FastLayer, slots: torch.Tensor, mask: torch.Tensor, end: int,
               rows: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Write k and v (B, kv_heads, n, d) to the layer's cache at `slots` of each sequence's row, and
        attend q (B, heads, n, d) over the slots up to `end` that `mask` lets each row see."""
        batch, n = q.shape[0], q.shape[2]
        keys, values = write_slots(layer.keys, layer.values, k, v, slots, end, rows)
        if batch * n <= self.gemv_rows:
            return looped_attention(q, keys, values, mask[:, 0])
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=self.heads != self.kv_heads)

    @torch.no_grad()
    def move_rows(self, sources: Sequence[int], start: int, row: int = 0) -> None:
        """Copy cache slots `sources` (in order) to slots start, start + 1, ... of cache row `row` in every
        layer (a tree's accepted path, moved up behind the pending token)."""
        src = torch.tensor(list(sources), dtype=torch.long, device=self.embed.device)
        dst = torch.arange(start, start + len(src), device=self.embed.device)
        for layer in self.layers:  # index_select copies first, so overlapping slots are safe
            for cache in (layer.keys, layer.values):
                cache[row].index_copy_(1, dst, cache[row].index_select(1, src))
