"""One Llama-family decoder layer written out for a drafter's small passes (an EAGLE head, the MTP
module): on a CPU, transformers' general forward costs as much as a small layer's arithmetic.

LayerStep runs the layer through the fast path's decoder_layer (speclab.fast_model: one layer function
for the target's network and the heads'), on stacked weights rebuilt whenever a weight changes, and with
the layer's biases and Qwen3's q/k norms where it has them; LayerStep.supports says
whether a layer is one of the kinds it was checked against (SUPPORTED; tests/methods/test_layer_step.py),
and any other layer keeps the model's forward. RowCache is its KV cache written by position (gpt-fast's
static cache), a row per sequence: rolling back is a change of length, with no copy per step. On the
compiled fast path (chapter 10) FastHeadStep runs the head under torch.compile on a RowCache of fixed
capacity at the target's graph widths; the EAGLE drafter switches to it when its target runs compiled.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from speclab.devices import linear
from speclab.fast_model import LayerWeights, decoder_layer, looped_attention, write_slots
from speclab.graphs import GraphedCall
from speclab.runner import (COMPILED_CPU_BUCKET, COMPILED_CPU_GEMV_ROWS, COMPILED_CPU_OPTIONS, COMPILED_MAX_WIDTH,
                            compile_for_fast_path, graph_width, read_end)

# Decoder layers whose forward LayerStep reproduces (same norms, attention and MLP; Qwen2 adds q/k/v
# biases, Qwen3 per-head q/k norms, both covered).
SUPPORTED = ("LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer")
# Rotary embeddings whose frequencies are fixed at load time, so a table of cos/sin by position is exact
# ("dynamic" and "longrope" rescale with the sequence length).
FIXED_ROPE = ("default", "linear", "llama3", "yarn")


class RowCache:
    """A drafting layer's KV cache (an EAGLE head's, an MTP module's): per layer one (rows, kv_heads,
    capacity, head_dim) buffer pair, a row per sequence with its own length (one sequence: one row),
    written and read by the fast path's rule (speclab.fast_model.write_slots) and rolled back by length.
    Its buffers double when full, or with `fixed` keep their capacity and are read in whole `bucket`s
    (the compiled head's static cache: fixed shapes). Training's unrolled passes and layers LayerStep
    does not cover keep transformers' DynamicCache (FeatureHead.new_cache)."""

    def __init__(self, rows: int = 1, capacity: int = 256, layers: int = 1, fixed: bool = False, bucket: int = 1):
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers
        self.lengths = [0] * rows
        self.capacity, self.fixed, self.bucket = capacity, fixed, bucket
        self.step: tuple[torch.Tensor | None, torch.Tensor, int] | None = None  # (rows, slots, end) being written
        self.end = 0  # the slots the step reads (its last slot rounded up to a bucket)
        self.appending = False

    @property
    def length(self) -> int:
        """Row 0's length: one sequence's."""
        return self.lengths[0]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Row 0's length (DynamicCache's method, for one sequence)."""
        return self.lengths[0]

    def crop(self, drop: int) -> None:
        """Forget row 0's last -drop positions (a negative count, as DynamicCache.crop takes in transformers 5)."""
        if drop > 0:
            raise ValueError(f"crop takes a negative count of rows to drop, got {drop}")
        self.lengths[0] = max(0, self.lengths[0] + drop)

    def rollback(self, row: int, length: int) -> None:
        self.lengths[row] = min(self.lengths[row], length)

    def reset(self) -> None:
        self.lengths = [0] * len(self.lengths)
        self.step, self.appending = None, False

    def begin(self, rows: list[int], width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Start a step feeding each of `rows` `width` tokens (the widest row's; shorter rows padded) at its
        next slots. Returns the slots (B, width), which are the tokens' positions, and what each token sees:
        (B, 1, width, end) bool, causal in each row; None in a cache of one row, where that is the causal
        mask over the whole row (LayerStep builds it)."""
        starts = torch.tensor([self.lengths[r] for r in rows], device=device)
        slots = starts[:, None] + torch.arange(width, device=device)
        end = int(starts.max()) + width
        if self.fixed and end > self.capacity:
            raise ValueError(f"the head's cache holds {self.capacity} positions and this step needs {end}: ask "
                             "for fewer tokens, or a larger max_len on the target's fast path")
        self.end = read_end(end, self.bucket, self.capacity) if self.fixed else end
        if len(self.lengths) == 1:  # one sequence: written in place, read as a view (write_slots)
            self.step = (None, slots, self.end)
            return slots, None
        self.step = (torch.tensor(rows, device=device), slots, self.end)
        visible = torch.arange(self.end, device=device)[None, None, :] <= slots[:, :, None]
        return slots, visible[:, None]

    def advance(self, rows: list[int], widths: list[int]) -> None:
        """End the step: each row's real (unpadded) tokens join its length."""
        for row, width in zip(rows, widths):
            self.lengths[row] += width
        self.step = None

    def allocate(self, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device, size: int) -> None:
        """Buffers of `size` slots for every layer (zeros: a batch reads other rows' unused slots, masked),
        keeping what the old ones held."""
        for layer in range(len(self.keys)):
            for held in (self.keys, self.values):
                grown = torch.zeros(len(self.lengths), kv_heads, size, head_dim, dtype=dtype, device=device)
                if held[layer] is not None:
                    kept = min(size, held[layer].shape[2])
                    grown[:, :, :kept] = held[layer][:, :, :kept]
                held[layer] = grown

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Write a layer's keys and values (B, kv_heads, n, head_dim) at the step's slots and return its
        rows' keys and values up to the step's end. With no step begun (DynamicCache's contract), the n
        rows are appended to row 0."""
        if self.step is None:
            self.begin([0], keys.shape[-2], keys.device)
            self.appending = True
        held = self.keys[layer_idx]
        if held is None or held.shape[2] < self.end or held.dtype != keys.dtype or held.device != keys.device:
            size = self.capacity if self.fixed else max(self.capacity, 2 * self.end)
            self.allocate(keys.shape[1], keys.shape[-1], keys.dtype, keys.device, size)
        rows, slots, end = self.step
        out = write_slots(self.keys[layer_idx], self.values[layer_idx], keys, values, slots, end, rows)
        if self.appending and layer_idx == len(self.keys) - 1:
            self.appending = False
            self.advance([0], [keys.shape[-2]])
        return out


class LayerStep:
    """`step(x, cache, positions, visible)`: the decoder `layer` (index `layer_idx` in `cache`) on new
    rows x (n, H) appended to the cache, at `positions` (n,), each row attending to the cached and new
    rows `visible` (n, cached + n, bool) names; visible None means a causal pass (every cached row,
    and the new rows up to itself). Returns the layer's output (n, H). A batch (B, n, H) of rows that
    share the mask runs alike (training's unrolled passes), with gradients when they are on."""

    def __init__(self, layer: nn.Module, rotary: nn.Module, layer_idx: int = 0):
        if not self.supports(layer, rotary):
            raise ValueError(f"LayerStep covers {SUPPORTED} with full attention and a fixed rotary embedding; "
                             f"{type(layer).__name__} is not one: call the model's forward instead")
        self.layer, self.rotary, self.layer_idx = layer, rotary, layer_idx
        attn = layer.self_attn
        self.head_dim, self.scale = attn.head_dim, attn.scaling
        self.heads = attn.q_proj.out_features // self.head_dim
        self.kv_heads = attn.k_proj.out_features // self.head_dim
        self.grouped = self.heads != self.kv_heads
        self.cos = self.sin = None
        self._fused: dict = {}
        self.frozen = False  # set by freeze(): the compiled fast path's fixed weights and table
        self.looped_rows = 0  # steps of at most this many rows attend as generated loops (FastHeadStep, CPU)

    @staticmethod
    def supports(layer: nn.Module, rotary: nn.Module) -> bool:
        attn = getattr(layer, "self_attn", None)
        config = getattr(attn, "config", None)
        if type(layer).__name__ not in SUPPORTED or config is None:
            return False
        # Mistral keeps its window in the config, Qwen2/3 on the attention module (None when unused); a
        # window longer than the context never cuts anything
        window = attn.sliding_window if hasattr(attn, "sliding_window") else getattr(config, "sliding_window", None)
        full = window is None or window >= getattr(config, "max_position_embeddings", float("inf"))
        return full and config.hidden_act in ("silu", "swish") and \
            getattr(rotary, "rope_type", "default") in FIXED_ROPE

    def freeze(self, positions: int, like: torch.Tensor) -> None:
        """Build the stacked weights and a rope table of `positions` rows for frozen steps: while `frozen`
        is set, a step reads them as they are and does nothing data-dependent (what torch.compile needs;
        FastHeadStep sets it around its steps only). Those steps run the head as it was when built: the
        stacked weights are copies made here."""
        self.rope(torch.tensor([positions - 1], device=like.device), like)
        attn, mlp = self.layer.self_attn, self.layer.mlp
        with torch.no_grad():
            self.fused("qkv", (attn.q_proj, attn.k_proj, attn.v_proj))
            self.fused("gate_up", (mlp.gate_proj, mlp.up_proj))

    def rope(self, positions: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (..., 1, n, head_dim) at `positions` (n,) or (B, n), from a table the rotary
        module fills once."""
        if self.frozen:
            return self.cos[positions].unsqueeze(-3), self.sin[positions].unsqueeze(-3)
        needed = int(positions.max()) + 1
        if self.cos is None or len(self.cos) < needed or self.cos.dtype != like.dtype or self.cos.device != like.device:
            table = torch.arange(max(needed, 2048), device=like.device)[None]
            cos, sin = self.rotary(like, table)
            self.cos, self.sin = cos[0], sin[0]
        return self.cos[positions].unsqueeze(-3), self.sin[positions].unsqueeze(-3)

    def fused(self, name: str, linears: tuple[nn.Linear, ...]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The weights (and biases) of `linears` stacked, so that one matmul computes all their outputs
        (q, k and v; gate and up). Rebuilt whenever one of them changed: a parameter's storage changes
        when the head is moved or cast, and its version counter when it is updated in place (an
        optimizer step, load_state_dict), so a head trained after this was built is the one used.
        While training (gradients on and wanted) the stack is built afresh each call, inside the
        graph, so that the gradients reach the layer's own weights."""
        if self.frozen:
            return self._fused[name][1:]
        training = torch.is_grad_enabled() and any(m.weight.requires_grad for m in linears)
        # with the dtype: a cast frees the old storage and may get the same address for the new one
        key = tuple((m.weight.data_ptr(), m.weight._version, m.weight.dtype) for m in linears)
        if training or self._fused.get(name, (None,))[0] != key:
            weights = [m.weight if training else m.weight.detach() for m in linears]
            weight = torch.cat(weights)
            bias = None
            if any(m.bias is not None for m in linears):
                bias = torch.cat([(m.bias if training else m.bias.detach()) if m.bias is not None
                                  else weight.new_zeros(m.out_features) for m in linears])
            if training:
                return weight, bias
            self._fused[name] = (key, weight, bias)
        return self._fused[name][1:]

    def weights(self) -> LayerWeights:
        """The layer's weights as decoder_layer reads them (q/k/v and gate/up stacked by `fused`)."""
        layer, attn, mlp = self.layer, self.layer.self_attn, self.layer.mlp
        qkv, qkv_bias = self.fused("qkv", (attn.q_proj, attn.k_proj, attn.v_proj))
        gate_up, gate_up_bias = self.fused("gate_up", (mlp.gate_proj, mlp.up_proj))
        norm = layer.input_layernorm  # EAGLE-1's layer has none (an Identity): its input is fc's output
        qwen3 = hasattr(attn, "q_norm")
        return LayerWeights(getattr(norm, "weight", None), qkv, attn.o_proj.weight,
                            layer.post_attention_layernorm.weight, gate_up, mlp.down_proj.weight,
                            layer.post_attention_layernorm.variance_epsilon, self.heads, self.kv_heads,
                            self.head_dim, qkv_bias, attn.o_proj.bias, gate_up_bias, mlp.down_proj.bias,
                            attn.q_norm.weight if qwen3 else None, attn.k_norm.weight if qwen3 else None)

    def __call__(self, x: torch.Tensor, cache, positions: torch.Tensor, visible: torch.Tensor | None = None,
                 attn_input: torch.Tensor | None = None) -> torch.Tensor:
        """x: (n, H) or (B, n, H); positions (n,) or (B, n); visible (n, cached + n) shared by the batch.
        attn_input: what the attention projects, when it is not the layer's input norm of x (EAGLE-3's
        layer projects [norm(embedding); norm(feature)], 2H wide, while x stays the residual stream)."""
        single = x.dim() == 2
        if single:
            x = x[None]
            attn_input = None if attn_input is None else attn_input[None]
        n = x.shape[1]

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            keys, values = cache.update(k, v, self.layer_idx)
            sees = visible
            if sees is None and n > 1:  # causal over the new rows, everything cached before them
                cached = keys.shape[-2] - n
                sees = torch.ones(n, cached + n, dtype=torch.bool, device=x.device).tril_(cached)
            if single and n <= self.looped_rows and sees is not None:  # compiled on a CPU: generated loops
                return looped_attention(q[0], keys[0], values[0], sees, self.scale)[None]
            return F.scaled_dot_product_attention(q, keys, values, attn_mask=sees, scale=self.scale,
                                                  enable_gqa=self.grouped)

        cos, sin = self.rope(positions, x)
        x = decoder_layer(x, self.weights(), cos, sin, attend, linear, attn_input)
        return x[0] if single else x


class FastHeadStep:
    """A drafting head (EAGLE-1, EAGLE-3, MTP) on the compiled fast path: its forward and its logits
    under torch.compile, on a RowCache of fixed capacity. Each step's rows are padded to one of the
    widths the target's passes use (speclab.runner.COMPILED_WIDTHS) and its cache read to a whole bucket,
    so a few graphs serve every chain step, catch-up and tree level; the padding rows see only themselves
    and are written past the length. On a CPU, steps of a few rows attend as generated loops, as the
    target's do (speclab.fast_model.looped_attention). mode "graphs" (the target's): the same fixed shapes,
    each step and its logits replayed from a CUDA graph (speclab.graphs) instead of compiled."""

    def __init__(self, head: nn.Module, max_len: int, mode: str = "compiled"):
        step = head.layer_step
        if step is None:
            raise TypeError(f"the compiled fast path runs a head's layer through LayerStep, which covers {SUPPORTED}; "
                            f"this {head.name} head's layer is {type(head.layer).__name__}: run the target on the "
                            "static fast path or the eager path")
        like = head.fc.weight
        inductor_cpu = like.device.type == "cpu" and mode == "compiled"
        step.freeze(max_len, like)  # frozen only during this class's steps: the eager paths see the head as it is
        self.looped_rows = COMPILED_CPU_GEMV_ROWS if inductor_cpu else 0
        self.layer_step, self.head, self.max_len, self.mode = step, head, max_len, mode
        self.cache = RowCache(capacity=max_len, fixed=True, bucket=COMPILED_CPU_BUCKET if inductor_cpu else max_len)
        self.cache.allocate(step.kv_heads, step.head_dim, like.dtype, like.device, max_len)  # never in a graph
        if mode == "graphs":  # the step's slots are an argument, so the graph reads them from its own buffer
            self.forward = GraphedCall(self._forward_at)
            self.vocab_logits = GraphedCall(head.vocab_logits)
            return
        # on a CPU the target's inductor options (speclab.runner.COMPILED_CPU_OPTIONS)
        options = dict(COMPILED_CPU_OPTIONS) if inductor_cpu else None
        self.forward = compile_for_fast_path(head.forward, options=options)
        self.vocab_logits = compile_for_fast_path(head.vocab_logits, options=options)

    def _forward_at(self, embeds: torch.Tensor, features: torch.Tensor, slots: torch.Tensor,
                    positions: torch.Tensor, sees: torch.Tensor) -> torch.Tensor:
        """head.forward on this step's cache, its rows written at `slots` (what RowCache.begin set)."""
        self.cache.step = (None, slots, self.cache.end)
        return self.head.forward(embeds, features, self.cache, positions, sees)

    def reset(self) -> None:
        self.cache.reset()

    def step(self, embeds: torch.Tensor, features: torch.Tensor, positions: torch.Tensor | None = None,
             visible: torch.Tensor | None = None) -> torch.Tensor:
        """What head(embeds, features, cache, positions, visible) does for one sequence's new rows (n, H), on
        the compiled head's own cache."""
        n, cached = embeds.shape[0], self.cache.length
        width = graph_width(n)
        self.cache.begin([0], width, embeds.device)
        read, device = self.cache.end, embeds.device
        sees = torch.zeros(width, read, dtype=torch.bool, device=device)
        if visible is None:  # causal: every cached row, and the new rows up to itself
            sees[:n, :cached] = True
            sees[:n, cached:cached + n] = torch.ones(n, n, dtype=torch.bool, device=device).tril()
        else:
            sees[:n, :cached + n] = visible
        positions = torch.arange(cached, cached + n, device=device) if positions is None else positions
        if width > n:  # padding rows: zeros that see only themselves, at a position in the table
            pad = torch.arange(n, width, device=device)
            sees[pad, cached + pad] = True
            embeds = torch.cat([embeds, embeds.new_zeros(width - n, embeds.shape[1])])
            features = torch.cat([features, features.new_zeros(width - n, features.shape[1])])
            positions = torch.cat([positions, positions[-1:].expand(width - n)])
        self.layer_step.frozen, self.layer_step.looped_rows = True, self.looped_rows
        try:
            with torch.no_grad():
                if n > COMPILED_MAX_WIDTH:  # the prompt's catch-up: eager
                    h = self.head.forward(embeds, features, self.cache, positions, sees)
                elif self.mode == "graphs":  # its slots as an argument: the graph reads its own copy
                    h = self.forward(embeds, features, self.cache.step[1], positions, sees)
                else:
                    h = self.forward(embeds, features, self.cache, positions, sees)
        finally:
            self.layer_step.frozen, self.layer_step.looped_rows = False, 0
        self.cache.advance([0], [n])
        return h[:n]
