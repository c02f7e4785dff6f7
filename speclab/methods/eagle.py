"""EAGLE (Li et al. 2024, 2024b, 2025): drafting in the target's feature space with one decoder layer.

EagleHead (EAGLE-1; SafeAILab/EAGLE eagle/model/cnets1.py) predicts the next feature from the current
one and the next token's embedding (fc: 2H -> H, then one decoder layer without an input norm), read out
by the target's frozen lm_head. Eagle3Head (EAGLE-3; eagle/model/cnets.py, the layout vLLM and SGLang
load) fuses three of the target's layers (fc: 3H -> H), norms embedding and feature apart, and reads out
through its own lm_head over a draft vocabulary (d2t maps it back); it is trained on tokens with the
training-time test (speclab.train.eagle). EagleDrafter drafts with either on its own KV cache, catching
up each round on the true features the verify pass hands over (Drafter.take_features), as a chain or as
EAGLE-2's dynamic tree (expand_level, rerank). Training is in speclab.train.eagle.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from speclab.adaptive import stops_here
from speclab.drafting import ChainDrafter, Draft
from speclab.artifacts import check_fits, fingerprint, load_weights, save_weights
from speclab.devices import draft_dtype, linear
from speclab.methods.layer_step import FastHeadStep, LayerStep, RowCache
from speclab.sampling import SamplingParams, check_finite, pick, sample
from speclab.runner import fast_path_of
from speclab.methods.engines import Options, by_batch, no, tree_is

NAME, NAME3 = "eagle", "eagle3"  # the methods' names in the registry (vLLM's): an EAGLE-1 head, an EAGLE-3 head
CONFIG_FILE, WEIGHTS_FILE = "eagle_config.json", "eagle_head.safetensors"
SETTINGS_FILE = "tree.json"  # EAGLE-2's top_k, depth, total_tokens and min_confidence measured fastest with this head
TREE_SETTINGS = ("top_k", "depth", "total_tokens", "min_confidence")
VERSIONS = (1, 3)


def one_layer_config(config):
    """The target's config cut to one decoder layer (per-layer lists cut alike)."""
    config = copy.deepcopy(config)
    config.num_hidden_layers = 1
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types[-1:])
    return config


def eagle3_layers(num_layers: int) -> tuple[int, int, int]:
    """The target hidden states EAGLE-3 fuses: the inputs of layers 2, L/2 and L-3 (the reference
    implementation's low, middle and high layers), as indices into transformers' hidden_states
    (0: the embeddings; i: the output of layer i), kept within 1..L for shallow models."""
    return tuple(min(max(i, 1), num_layers) for i in (2, num_layers // 2, num_layers - 3))


def check_mirrorable(target: nn.Module) -> None:
    """A TypeError saying what to do unless the head can copy the target's decoder layer: a transformers
    causal LM whose base model (target.model) has `layers`, `norm` and `rotary_emb`, as the Llama
    family (Llama, Qwen2, Qwen3, Mistral, ...) does."""
    base = getattr(target, "model", None)
    if not all(hasattr(base, name) for name in ("layers", "norm", "rotary_emb")) or not hasattr(target, "config"):
        raise TypeError(f"an EAGLE head mirrors one decoder layer of a Llama-family model (a .model with layers, "
                        f"norm and rotary_emb); {type(target).__name__} has no such layers: use another drafter "
                        "(draft_model, ngram, medusa) for it")


def draft_vocabulary(rows: torch.Tensor, size: int, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """EAGLE-3's draft vocabulary, as the reference builds it (cnets.py, `scandata`): the `size` most
    frequent tokens of the training rows, in id order. Returns d2t (size,) with target id = draft id +
    d2t[draft id], and t2d (vocab_size,) bool, True for the target ids kept."""
    if not isinstance(size, int) or not 1 <= size <= vocab_size:
        raise ValueError(f"the draft vocabulary size must be an integer from 1 to the target's {vocab_size}, "
                         f"got {size!r}")
    counts = torch.bincount(rows.reshape(-1).long(), minlength=vocab_size)[:vocab_size]
    kept = counts.topk(size, sorted=True).indices.sort().values  # ties: topk's order, then by id
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[kept] = True
    return kept - torch.arange(size), t2d


class FeatureHead(nn.Module):
    """What every head drafting in the target's feature space shares: its config (the target's config
    and fingerprint, which layers it reads), where it is stored, the check that it was trained for a
    target, and its KV caches. Subclasses build the layers: EagleHead (EAGLE-1, and DeepSeek-V3's MTP
    module in speclab.methods.mtp), Eagle3Head.

    forward(embeds, features, cache, positions, visible) -> h, for rows (n, H) or a batch (B, n, H);
    fuse(what the target hands over) -> the first step's feature; vocab_logits(h, the target's
    lm_head) -> (logits, the target ids they score or None for the whole vocabulary)."""

    CONFIG_FILE, WEIGHTS_FILE = CONFIG_FILE, WEIGHTS_FILE
    layer: nn.Module
    rotary: nn.Module

    def __init__(self, target_config: dict, target_fingerprint: dict | None, version, feature_layers: Sequence[int],
                 **extra):
        super().__init__()
        self.version, self.feature_layers = version, tuple(int(i) for i in feature_layers)
        self.config = dict(target_config=target_config, target_fingerprint=target_fingerprint, version=version,
                           feature_layers=list(self.feature_layers), **extra)

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    @property
    def name(self) -> str:
        return f"EAGLE-{self.version}"

    @property
    def train_command(self) -> str:
        return NAME if self.version == 1 else NAME3

    @property
    def layer_step(self) -> LayerStep | None:
        """The head's layer written out (speclab.methods.layer_step), where it covers the layer's kind;
        None where the model's forward must run. Built once."""
        if "_layer_step" not in self.__dict__:
            supported = LayerStep.supports(self.layer, self.rotary)
            self.__dict__["_layer_step"] = LayerStep(self.layer, self.rotary) if supported else None
        return self.__dict__["_layer_step"]

    def new_cache(self) -> DynamicCache:
        """A cache that concatenates: training's unrolled passes (autograd keeps every step's keys, where
        a RowCache would overwrite them in place) and the layers LayerStep does not cover (the model's
        forward takes transformers' caches)."""
        return DynamicCache(config=self.layer_config)

    def drafting_cache(self, rows: int = 1) -> RowCache | DynamicCache:
        """The cache a drafter keeps for the head, a row per sequence: written by position (RowCache) where
        LayerStep runs the layer; transformers' DynamicCache (one sequence) where the model's forward must."""
        return RowCache(rows) if self.layer_step is not None else self.new_cache()

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """The first step's feature from what the target hands over (len(feature_layers) * H wide)."""
        features = features.to(self.dtype)
        fuse = getattr(self, "fuse_fc", None)
        return features if fuse is None else fuse(features)

    def logits(self, h: torch.Tensor, lm_head: nn.Module, vocab_logits: Callable | None = None) -> torch.Tensor:
        """The draft's logits over the target's vocabulary; tokens outside a draft vocabulary get -inf
        (never drafted). A NaN or inf from the head itself is refused first. `vocab_logits`: the same
        method compiled (FastHeadStep's), on the fast path."""
        logits, ids = (vocab_logits or self.vocab_logits)(h, lm_head)
        check_finite(logits, f"{self.name} head")
        if ids is None:
            return logits
        full = logits.new_full((*logits.shape[:-1], lm_head.weight.shape[0]), float("-inf"))
        return full.index_copy_(-1, ids, logits)

    def check_fits(self, target: nn.Module) -> None:
        """A ValueError, saying how to get a fitting head, unless this head was trained for `target`."""
        check_mirrorable(target)
        check_fits(self.config["target_fingerprint"], target, f"this {self.name} head was",
                   f"train one for it: python -m speclab train {self.train_command} --target DIR --out DIR",
                   keys=("model_type", "hidden", "vocab", "layers"))

    def save(self, directory: str | Path) -> None:
        state = {k: v for k, v in self.state_dict().items()}
        save_weights(directory, self.CONFIG_FILE, self.config, self.WEIGHTS_FILE, state)

    @classmethod
    def missing(cls, directory: str | Path) -> str:
        """What to say when `directory` holds no head of this kind."""
        return (f"An EAGLE head is not in {directory}; train one with python -m speclab train eagle (or eagle3) "
                "--target DIR --out DIR")

    @classmethod
    def load(cls, directory: str | Path, device: torch.device | str = "cpu",
             dtype: torch.dtype = torch.float32) -> FeatureHead:
        """The head stored in `directory`: an Eagle3Head for an EAGLE-3 head, else this class (in float32,
        the precision heads train in; load_eagle drafts in a draft's)."""
        config, state = load_weights(directory, cls.CONFIG_FILE, cls.WEIGHTS_FILE, cls.missing(directory))
        kind = cls
        if cls in (FeatureHead, EagleHead):  # the stored version says which head it is
            kind = Eagle3Head if config.get("version") == 3 else EagleHead
        head = kind(**config)
        expected = set(head.state_dict())
        if set(state) != expected:  # a wrong name would load nothing and draft from random weights
            raise ValueError(
                f"{directory} holds an {head.name} head in another layout: missing {sorted(expected - set(state))[:4]}, "
                f"unexpected {sorted(set(state) - expected)[:4]}. Heads saved before speclab followed the reference "
                f"layouts must be retrained: python -m speclab train {head.train_command} --target DIR --out DIR")
        head.load_state_dict({k: v.to(head.state_dict()[k].dtype) for k, v in state.items()})
        return head.to(device=device, dtype=dtype).eval()


class EagleHead(FeatureHead):
    """EAGLE-1's head (SafeAILab/EAGLE eagle/model/cnets1.py): x = fc([embedding; feature]) (2H -> H,
    with a bias) into one decoder layer of the target's architecture whose input norm is dropped (the
    reference's layer 0 has none: fc's output goes straight into the attention); its output h is read
    by the target's lm_head as it is (it regresses the target's normed features) and fed back as the
    next step's feature.

    NORMED_INPUTS (DeepSeek-V3's MTP module, speclab.methods.mtp): embedding and feature are RMS-normed
    before fc, the layer keeps its input norm, and a norm sits before the lm_head."""

    FC_BIAS = True         # EAGLE's input projection has a bias (DeepSeek-V3's MTP projection has none)
    NORMED_INPUTS = False

    def __init__(self, target_config: dict, target_fingerprint: dict | None = None, version: int = 1,
                 feature_layers: Sequence[int] | None = None):
        if version != 1 and not self.NORMED_INPUTS:
            raise ValueError(f"EagleHead is EAGLE-1's head (version 1); EAGLE-3's is Eagle3Head, got version {version!r}")
        super().__init__(target_config, target_fingerprint, version, feature_layers or (-1,))
        config = AutoConfig.for_model(**target_config)
        self.layer_config = one_layer_config(config)
        hidden = config.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden, bias=self.FC_BIAS)
        self.model = AutoModel.from_config(self.layer_config)
        self.model.embed_tokens = None       # tokens are embedded with the target's own embeddings
        self.model.norm = nn.Identity()      # EAGLE-1 regresses normed features; MTP has out_norm
        if self.NORMED_INPUTS:
            norm = type(self.model.layers[0].input_layernorm)
            eps = getattr(config, "rms_norm_eps", 1e-6)
            self.embed_norm, self.feature_norm, self.out_norm = (norm(hidden, eps=eps) for _ in range(3))
        else:
            self.model.layers[0].input_layernorm = nn.Identity()

    @property
    def layer(self) -> nn.Module:
        return self.model.layers[0]

    @property
    def rotary(self) -> nn.Module:
        return self.model.rotary_emb

    @classmethod
    def for_target(cls, target: nn.Module, version: int = 1) -> FeatureHead:
        """A fresh head for `target` (version 3: an Eagle3Head); its decoder layer starts as a copy of
        the target's last layer (and MTP's output norm as a copy of the target's final norm)."""
        if version not in VERSIONS:
            raise ValueError(f"EAGLE version must be 1 or 3, got {version!r}")
        if version == 3 and cls is EagleHead:
            return Eagle3Head.for_target(target)
        check_mirrorable(target)
        head = cls(target.config.to_dict(), fingerprint(target), version)
        head.layer.load_state_dict(target.model.layers[-1].state_dict(), strict=False)  # all but a dropped norm
        if cls.NORMED_INPUTS:
            head.out_norm.load_state_dict(target.model.norm.state_dict())
        return head.to(device=target.device, dtype=torch.float32)

    def vocab_logits(self, h: torch.Tensor, lm_head: nn.Module) -> tuple[torch.Tensor, None]:
        x = self.out_norm(h) if self.NORMED_INPUTS else h
        return lm_head(x.to(lm_head.weight.dtype)), None

    def forward(self, embeds: torch.Tensor, features: torch.Tensor, cache: DynamicCache | RowCache | None = None,
                positions: torch.Tensor | None = None, visible: torch.Tensor | None = None) -> torch.Tensor:
        """The head's output h for new rows appended to `cache` (None: a fresh one, a causal pass
        over the rows). `positions` (n,) or (B, n) default to the next ones; `visible` (n, cached +
        n) bool says which rows each new row attends to (default: causal)."""
        embeds, features = embeds.to(self.dtype), features.to(self.dtype)
        if self.NORMED_INPUTS:
            embeds, features = self.embed_norm(embeds), self.feature_norm(features)
        fused = linear(torch.cat([embeds, features], dim=-1), self.fc.weight, self.fc.bias)
        return run_layer(self, fused, cache, positions, visible)


def run_layer(head: FeatureHead, x: torch.Tensor, cache, positions: torch.Tensor | None,
              visible: torch.Tensor | None, attn_input: torch.Tensor | None = None) -> torch.Tensor:
    """The head's decoder layer on rows x (n, H) or (B, n, H) appended to `cache`: through LayerStep
    where it covers the layer, else through the model's forward (with a float mask)."""
    cache = head.new_cache() if cache is None else cache
    n = x.shape[-2]
    if positions is None:
        start = cache.get_seq_length()
        positions = torch.arange(start, start + n, device=x.device)
    if head.layer_step is not None:
        return head.layer_step(x, cache, positions, visible, attn_input)
    if attn_input is not None:
        raise TypeError("a layer whose attention reads another input than its residual needs LayerStep")
    batched = x.dim() == 3
    extra = {"position_ids": positions if positions.dim() == 2 else positions[None]}
    if visible is not None:  # transformers adds a float mask to the scores
        mask = torch.zeros(visible.shape, dtype=head.dtype, device=x.device)
        extra["attention_mask"] = mask.masked_fill_(~visible, torch.finfo(head.dtype).min)[None, None]
        if batched:
            extra["attention_mask"] = extra["attention_mask"].expand(x.shape[0], -1, -1, -1)
    out = head.model(inputs_embeds=x if batched else x.unsqueeze(0), past_key_values=cache, use_cache=True,
                     **extra)
    return out.last_hidden_state if batched else out.last_hidden_state[0]


def eagle3_layer_config(config) -> LlamaConfig:
    """EAGLE-3's decoder layer is a Llama layer whatever the target (the reference's and vLLM's
    LlamaForCausalLMEagle3), shaped by the target's width, heads, MLP and rotary embedding."""
    heads = config.num_attention_heads
    return LlamaConfig(
        hidden_size=config.hidden_size, intermediate_size=config.intermediate_size, num_hidden_layers=1,
        num_attention_heads=heads, num_key_value_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
        rms_norm_eps=getattr(config, "rms_norm_eps", 1e-6), vocab_size=config.vocab_size,
        max_position_embeddings=config.max_position_embeddings, hidden_act="silu",
        rope_parameters=getattr(config, "rope_parameters", None))


class Eagle3Head(FeatureHead):
    """EAGLE-3's head in the reference's layout (SafeAILab/EAGLE eagle/model/cnets.py: `Model` and
    `LlamaDecoderLayeremb`; the names vLLM's and SGLang's EAGLE-3 checkpoints use):

        fc            Linear(3H -> H, no bias): the low, middle and high hidden states fused
        midlayer      one Llama decoder layer: residual = feature;
                      a = [input_layernorm(embedding); hidden_norm(feature)]  (2H)
                      h = feature + o_proj(attention(q, k, v = q_proj(a), k_proj(a), v_proj(a)))
                      h = h + mlp(post_attention_layernorm(h))
        norm, lm_head the draft's logits over `draft_vocab_size` tokens, the head's own
        d2t, t2d      draft id -> target id (id + d2t[id]); the target ids kept

    `draft_vocab_size` None keeps the whole vocabulary (d2t all zero)."""

    def __init__(self, target_config: dict, target_fingerprint: dict | None = None, version: int = 3,
                 feature_layers: Sequence[int] | None = None, draft_vocab_size: int | None = None):
        if version != 3:
            raise ValueError(f"Eagle3Head is EAGLE-3's head (version 3), got version {version!r}")
        config = AutoConfig.for_model(**target_config)
        vocab = config.vocab_size
        draft_vocab_size = vocab if draft_vocab_size is None else draft_vocab_size
        if not isinstance(draft_vocab_size, int) or not 1 <= draft_vocab_size <= vocab:
            raise ValueError(f"draft_vocab_size must be an integer from 1 to the target's vocabulary ({vocab}), "
                             f"got {draft_vocab_size!r}")
        super().__init__(target_config, target_fingerprint, 3,
                         feature_layers or eagle3_layers(config.num_hidden_layers), draft_vocab_size=draft_vocab_size)
        self.layer_config = eagle3_layer_config(config)
        hidden, eps = config.hidden_size, self.layer_config.rms_norm_eps
        self.fc = nn.Linear(len(self.feature_layers) * hidden, hidden, bias=False)
        self.midlayer = LlamaDecoderLayer(self.layer_config, layer_idx=0)
        attn = self.midlayer.self_attn
        for name in ("q_proj", "k_proj", "v_proj"):  # the attention reads [embedding; feature], 2H wide
            setattr(attn, name, nn.Linear(2 * hidden, getattr(attn, name).out_features, bias=False))
        self.midlayer.hidden_norm = LlamaRMSNorm(hidden, eps=eps)
        self.rotary_emb = LlamaRotaryEmbedding(self.layer_config)
        self.norm = LlamaRMSNorm(hidden, eps=eps)
        self.lm_head = nn.Linear(hidden, draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(vocab, dtype=torch.bool) if draft_vocab_size == vocab
                             else torch.zeros(vocab, dtype=torch.bool))

    @property
    def layer(self) -> nn.Module:
        return self.midlayer

    @property
    def rotary(self) -> nn.Module:
        return self.rotary_emb

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        return linear(features.to(self.dtype), self.fc.weight, self.fc.bias)

    @property
    def draft_ids(self) -> torch.Tensor:
        """The target id of every draft-vocabulary token."""
        return torch.arange(len(self.d2t), device=self.d2t.device) + self.d2t

    def set_vocabulary(self, d2t: torch.Tensor, t2d: torch.Tensor, lm_head: nn.Module | None = None) -> None:
        """Take a draft vocabulary (draft_vocabulary's d2t, t2d); with the target's `lm_head`, start the
        head's own lm_head from its rows for those tokens."""
        if d2t.shape != self.d2t.shape or t2d.shape != self.t2d.shape or int(t2d.sum()) != len(d2t):
            raise ValueError(f"a draft vocabulary of {len(self.d2t)} tokens over {len(self.t2d)} needs d2t "
                             f"{tuple(self.d2t.shape)} and t2d {tuple(self.t2d.shape)} with that many True")
        self.d2t.copy_(d2t)
        self.t2d.copy_(t2d)
        if lm_head is not None:
            with torch.no_grad():
                self.lm_head.weight.copy_(lm_head.weight[self.draft_ids.to(lm_head.weight.device)])

    @classmethod
    def for_target(cls, target: nn.Module, version: int = 3, draft_vocab_size: int | None = None) -> Eagle3Head:
        """A fresh head for `target` (with the whole vocabulary until set_vocabulary gives it a smaller
        one). speclab's start, where the reference starts from random weights: the layer begins as the
        target's last layer reading the feature (the embedding's half of q/k/v at zero, so training
        opens it), the final norm as the target's, the lm_head as the target's rows."""
        check_mirrorable(target)
        head = cls(target.config.to_dict(), fingerprint(target), 3, draft_vocab_size=draft_vocab_size)
        last = target.model.layers[-1]
        with torch.no_grad():
            for name in ("q_proj", "k_proj", "v_proj"):
                source, weight = getattr(last.self_attn, name), getattr(head.midlayer.self_attn, name).weight
                if source.weight.shape == weight[:, :weight.shape[1] // 2].shape:
                    weight.zero_()[:, weight.shape[1] // 2:] = source.weight
            for name in ("o_proj",):
                target_proj, own = getattr(last.self_attn, name), getattr(head.midlayer.self_attn, name)
                if target_proj.weight.shape == own.weight.shape:
                    own.weight.copy_(target_proj.weight)
            if all(getattr(last, n, None) is not None for n in ("mlp", "post_attention_layernorm")):
                head.midlayer.mlp.load_state_dict(last.mlp.state_dict(), strict=False)
                head.midlayer.post_attention_layernorm.load_state_dict(last.post_attention_layernorm.state_dict())
                head.midlayer.hidden_norm.load_state_dict(last.input_layernorm.state_dict())
            head.norm.load_state_dict(target.model.norm.state_dict())
            head.lm_head.weight.copy_(target.get_output_embeddings().weight[head.draft_ids])
        return head.to(device=target.device, dtype=torch.float32)

    def vocab_logits(self, h: torch.Tensor, lm_head: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits = self.lm_head(self.norm(h.to(self.dtype)))
        return logits, None if len(self.d2t) == len(self.t2d) else self.draft_ids

    def forward(self, embeds: torch.Tensor, features: torch.Tensor, cache: DynamicCache | RowCache | None = None,
                positions: torch.Tensor | None = None, visible: torch.Tensor | None = None) -> torch.Tensor:
        """As EagleHead.forward; `features` is the residual stream, fc's fusion at the first step."""
        embeds, features = embeds.to(self.dtype), features.to(self.dtype)
        layer = self.midlayer
        attn_input = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(features)], dim=-1)
        return run_layer(self, features, cache, positions, visible, attn_input)


# ---------------------------------------------------------------- EAGLE-2's dynamic tree, as plain functions
def measured_settings(head_dir: str | Path) -> dict:
    """What choose_eagle_tree wrote into a head directory (tree.json: the settings, the timed table),
    or {} for a head without one."""
    settings = Path(head_dir) / SETTINGS_FILE
    return json.loads(settings.read_text()) if settings.exists() else {}


def describe_tree(settings: dict) -> str:
    """EAGLE-2's settings (a tree.json or a row of its sweep) in words."""
    stop = settings.get("min_confidence")
    return (f"top_k {settings['top_k']}, depth {settings['depth']}, {settings['total_tokens']} tokens, "
            + ("no stop" if stop is None else f"stop below {stop:g}"))


def expand_level(frontier_scores: Sequence[float], log_probs: torch.Tensor, top_k: int
                 ) -> list[tuple[float, int, int]]:
    """One level of EAGLE-2's expansion: frontier node i (its path's score frontier_scores[i]) gets its
    top_k tokens by log_probs[i] (F, V) as children, each scored by the cumulative log-probability of
    its path, frontier_scores[i] + log_probs[i, token]. Returns (score, i, token) for every child, best
    first; ties keep the earlier frontier node, then the higher-ranked token (a stable sort)."""
    if log_probs.dim() != 2 or log_probs.shape[0] != len(frontier_scores):
        raise ValueError(f"log_probs must be (F, V) with F = {len(frontier_scores)} frontier nodes, "
                         f"got {tuple(log_probs.shape)}")
    top = log_probs.float().topk(top_k, dim=-1)
    children = [(float(score) + lp, i, token) for i, score in enumerate(frontier_scores)
                for lp, token in zip(top.values[i].tolist(), top.indices[i].tolist())]
    return sorted(children, key=lambda child: -child[0])


def rerank(scores: Sequence[float], parents: Sequence[int], total_tokens: int) -> tuple[list[int], list[int]]:
    """EAGLE-2's reranking: the best total_tokens of every node scored (ties to the earlier node), in
    node order, and their parents renumbered into that list (-1: a child of the root). Nodes are
    recorded parents first and a child never scores above its parent (log-probabilities are <= 0), so
    the kept set is closed under ancestors: a tree the target can verify."""
    keep = sorted(sorted(range(len(scores)), key=lambda n: (-scores[n], n))[:total_tokens])
    renumber = {old: new for new, old in enumerate(keep)}
    return keep, [renumber[parents[n]] if parents[n] >= 0 else -1 for n in keep]


def check_tree_settings(top_k: int, depth: int, total_tokens: int, min_confidence: float | None
                        ) -> tuple[int, int, int, float | None]:
    """EAGLE-2's settings, or a ValueError that says which one is wrong."""
    for label, value in (("top_k", top_k), ("depth", depth), ("total_tokens", total_tokens)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"EAGLE-2's {label} must be an integer >= 1, got {value!r}")
    if min_confidence is not None:
        number = isinstance(min_confidence, (int, float)) and not isinstance(min_confidence, bool)
        if not number or not 0 < min_confidence < 1:
            raise ValueError(f"EAGLE-2's min_confidence must be a probability strictly between 0 and 1, or None "
                             f"to always grow `depth` levels; got {min_confidence!r}")
        min_confidence = float(min_confidence)
    return top_k, depth, total_tokens, min_confidence


def node_depth(parents: Sequence[int], node: int) -> int:
    depth = 1
    while parents[node] >= 0:
        node, depth = parents[node], depth + 1
    return depth


class EagleDrafter(ChainDrafter):
    """An EAGLE head (EAGLE-1 or EAGLE-3) drafting EAGLE-1's chain (tree="chain": k tokens, each drawn
    from the head's served distribution) or EAGLE-2's dynamic tree (tree="dynamic", Li et al. 2024b):
    `depth` levels of each frontier node's top_k children scored by their path's log-probability, the
    best `total_tokens` verified. Tree nodes are top-k picks, point masses to the rule, so it stays
    lossless at any temperature. The defaults (top_k 2, depth 6, 12 tokens) suit a small target on a
    CPU; a head's tree.json (speclab.train.choose_eagle_tree) holds the settings timed fastest with it.
    speclab's additions: min_confidence stops growing the tree after a level whose best new node is
    below it (it changes what is proposed, never what is emitted); sampled holds other settings for
    sampled rounds. Each round the head rolls its cache back to the true (feature f_j, token x_{j+1})
    pairs, feeds the verify pass's new features, and drafts on from there."""

    def __init__(self, head: FeatureHead, target: nn.Module, tree: str = "dynamic", top_k: int = 2, depth: int = 6,
                 total_tokens: int = 12, min_confidence: float | None = None, sampled: dict | None = None):
        head.check_fits(target)
        if tree not in ("dynamic", "chain"):
            raise ValueError(f"tree must be 'dynamic' (EAGLE-2) or 'chain' (EAGLE-1), got {tree!r}")
        if tree == "chain" and (min_confidence is not None or sampled is not None):
            raise ValueError("min_confidence and sampled are settings of EAGLE-2's dynamic tree; for a chain pass "
                             "confidence_threshold= to speculative_generate instead")
        self.top_k, self.depth, self.total_tokens, self.min_confidence = \
            check_tree_settings(top_k, depth, total_tokens, min_confidence)
        if sampled is not None:
            unknown = set(sampled) - set(TREE_SETTINGS)
            if unknown or not {"top_k", "depth", "total_tokens"} <= set(sampled):
                raise ValueError(f"sampled= takes EAGLE-2's settings for sampled rounds, top_k, depth, total_tokens "
                                 f"and optionally min_confidence; got {sorted(sampled)}")
            sampled = dict(zip(TREE_SETTINGS, check_tree_settings(
                sampled["top_k"], sampled["depth"], sampled["total_tokens"], sampled.get("min_confidence"))))
        self.sampled = sampled
        self.head, self.tree = head, tree
        self.feature_layers = head.feature_layers
        self.name = (NAME if head.version == 1 else NAME3) + (" tree" if tree == "dynamic" else " chain")
        self.target = target
        self.embed = target.get_input_embeddings()
        self.lm_head = target.get_output_embeddings()
        self.forward_calls = 0
        self.chain_limit: int | None = None  # at most this many drafts a round (MTP's num_tokens)
        self.last_expansion: dict | None = None
        self.compiled_head: FastHeadStep | None = None  # built the first time the target runs compiled
        self.start(torch.empty(0, dtype=torch.long))

    def set_confidence_threshold(self, threshold: float | None) -> None:
        if threshold is not None and self.tree != "chain":
            raise ValueError("confidence_threshold stops a chain; EAGLE-2's dynamic tree has its own stop, set when "
                             "the drafter is built: load_drafter('eagle', min_confidence=...); or load the drafter "
                             "with tree='chain'")
        super().set_confidence_threshold(threshold)

    @property
    def batched(self) -> bool:
        """A chain drafts batches (each sequence its row of a RowCache), where LayerStep runs the head's
        layer; EAGLE-2's dynamic tree drafts one sequence at a time."""
        return self.tree == "chain" and self.head.layer_step is not None and \
            all(getattr(type(self), hook) is getattr(EagleDrafter, hook) for hook in ("start", "propose"))

    # Every sequence keeps, by cache row, how many (feature, token) pairs its cache holds from true
    # features (`pairs`) and the true features handed over since (`pending`). The head's cache (`cache`)
    # holds a row a sequence: one for one sequence (compiled beside a compiled target, where the dynamic
    # tree's passes also run), a row each for a batch (chapter 11), each step one head pass over the
    # sequences still drafting, padded to the longest. The chain and its catch-up are one code path.
    def start(self, prompt: torch.Tensor) -> None:
        self.fast = self._fast_head()
        self.cache = self.head.drafting_cache() if self.fast is None else self.fast.cache
        self.pairs: dict[int, int] = {0: 0}
        self.pending: dict[int, list[torch.Tensor]] = {0: []}
        self.forward_calls = 0

    def start_rows(self, rows: list[int], prompts: list[torch.Tensor]) -> None:
        self.start(prompts[0])
        if len(rows) > 1:  # the head runs as it is (LayerStep), uncompiled, on either path of the target
            self.fast, self.cache = None, self.head.drafting_cache(max(rows) + 1)
        self.pairs = {row: 0 for row in rows}
        self.pending = {row: [] for row in rows}

    def take_features(self, features: torch.Tensor) -> None:
        self.pending[0].append(features)

    def take_features_rows(self, rows: list[int], features: list[torch.Tensor]) -> None:
        for row, f in zip(rows, features):
            self.pending[row].append(f)

    def propose_rows(self, rows: list[int], ids: list[torch.Tensor], ks: list[int], sampling: SamplingParams,
                     generator: torch.Generator | None = None) -> list[Draft]:
        if self.tree == "dynamic":  # one sequence (check_batch refuses more)
            return super().propose_rows(rows, ids, ks, sampling, generator)
        return self._chain(rows, ids, ks, sampling, generator)

    @torch.inference_mode()
    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        if self.tree == "chain":
            return self._chain([0], [ids], [k], sampling, generator)[0]
        if not self.pending[0]:  # a one-token prompt (no feature yet), or a second call without a verify pass
            return Draft(ids.new_empty(0))
        return self._dynamic_tree(self._catch_up([0], [ids]), k, ids.device, sampling, generator)

    def _fast_head(self) -> FastHeadStep | None:
        """On the target's compiled fast path, the head compiled beside it on a static cache (built once,
        reset for each sequence); None on the other paths, where the head runs as it is on a RowCache
        (already a cache written by position)."""
        path = fast_path_of(self.target)
        if path is None or not path.compiled:
            return None
        if self.compiled_head is None or (self.compiled_head.max_len, self.compiled_head.mode) != \
                (path.network.max_len, path.mode):
            self.compiled_head = FastHeadStep(self.head, path.network.max_len, path.mode)
        self.compiled_head.reset()
        return self.compiled_head

    def _head_step(self, rows: list[int], tokens: torch.Tensor, features: torch.Tensor, widths: list[int] | None = None,
                   positions: torch.Tensor | None = None, visible: torch.Tensor | None = None) -> torch.Tensor:
        """The head over new tokens (B, n) of cache `rows` and their features (B, n, F), each row after its
        cached pairs, its first widths[b] tokens real (default all): (B, n, H). positions (n,) and visible
        (n, cached + n): a tree level's, one sequence's."""
        self.forward_calls += 1
        embeds = self.embed(tokens)
        if self.fast is not None:  # compiled beside a compiled target: one sequence
            return self.fast.step(embeds[0], features[0], positions, visible)[None]
        if not isinstance(self.cache, RowCache):  # the model's own layer, on a DynamicCache: appended
            return self.head(embeds, features, self.cache, positions, visible)
        slots, sees = self.cache.begin(rows, tokens.shape[1], tokens.device)
        h = self.head(embeds, features, self.cache, slots if positions is None else positions,
                      sees if visible is None else visible)
        self.cache.advance(rows, widths or [tokens.shape[1]] * len(rows))
        return h

    def _step(self, rows: list[int], tokens: list[torch.Tensor], features: list[torch.Tensor]) -> torch.Tensor:
        """The head over each row's new tokens (1-D) and their features, after that row's cached pairs,
        padded to the widest: each row's output at its last token (B, H)."""
        widths = [len(t) for t in tokens]
        padded = torch.zeros(len(rows), max(widths), dtype=torch.long, device=tokens[0].device)
        feats = features[0].new_zeros(len(rows), max(widths), features[0].shape[-1])
        for b, (t, f) in enumerate(zip(tokens, features)):
            padded[b, :len(t)], feats[b, :len(f)] = t, f
        h = self._head_step(rows, padded, feats, widths)
        return h[torch.arange(len(rows)), torch.tensor(widths) - 1]

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        """The draft's logits over the target's vocabulary (refused if the head gives NaN or inf)."""
        return self.head.logits(h, self.lm_head, None if self.fast is None else self.fast.vocab_logits)

    def _catch_up(self, rows: list[int], ids: list[torch.Tensor]) -> torch.Tensor:
        """Roll each row's cache back to its true pairs (dropping the rows computed from guesses), feed
        the true pairs handed over since, and return the head's output at each row's pending token, its
        prediction of the position after it (B, H)."""
        tokens, features = [], []
        for row, seq in zip(rows, ids):
            if isinstance(self.cache, RowCache):
                self.cache.rollback(row, self.pairs[row])
            elif self.cache.get_seq_length() > self.pairs[row]:  # a DynamicCache (one sequence)
                self.cache.crop(self.pairs[row] - self.cache.get_seq_length())
            fused = self.head.fuse(torch.cat(self.pending[row]))
            tokens.append(seq[self.pairs[row] + 1:self.pairs[row] + 1 + len(fused)])
            features.append(fused)
            self.pairs[row] += len(fused)
            self.pending[row] = []
        return self._step(rows, tokens, features)

    @torch.inference_mode()
    def _chain(self, rows: list[int], ids: list[torch.Tensor], ks: list[int], sampling: SamplingParams,
               generator: torch.Generator | None) -> list[Draft]:
        """EAGLE-1's chain for each sequence: up to ks[i] tokens (at most chain_limit), each drawn from the
        head's served distribution and fed back with the head's own output as the next feature."""
        ks = [min(k, self.chain_limit or k) for k in ks]
        drafts = [Draft(seq.new_empty(0)) for seq in ids]
        active = [i for i, row in enumerate(rows) if self.pending[row] and ks[i] > 0]
        if not active:  # a one-token prompt (no feature yet), or a second call without a verify pass
            return drafts
        h = self._catch_up([rows[i] for i in active], [ids[i] for i in active])
        drafted: list[list[torch.Tensor]] = [[] for _ in active]
        probs: list[list[torch.Tensor]] = [[] for _ in active]
        live = list(range(len(active)))
        while live:
            logits = self._logits(h[live])
            for j, b in enumerate(live):
                token, q = pick(logits[j], sampling, generator)
                drafted[b].append(token)
                probs[b].append(q)
                if stops_here(logits[j], self.confidence_threshold):
                    ks[active[b]] = len(drafted[b])
            live = [b for b in live if len(drafted[b]) < ks[active[b]]]
            if live:  # the next step for the sequences still drafting: their own outputs as features
                h[live] = self._step([rows[active[b]] for b in live], [drafted[b][-1].view(1) for b in live],
                                     [h[b:b + 1] for b in live])
        for b, i in enumerate(active):
            drafts[i] = Draft(torch.stack(drafted[b]), None if sampling.greedy else torch.stack(probs[b]))
        return drafts

    @property
    def max_depth(self) -> int:
        """The deepest tree this drafter grows, greedy or sampled: the k that never cuts it."""
        return max(self.depth, self.sampled["depth"] if self.sampled else 0)

    @property
    def own_depth(self) -> int | None:
        return self.max_depth if self.tree == "dynamic" else None

    @property
    def true_pairs(self) -> int:
        """How many (feature, token) pairs one sequence's cache holds from true features (chapter 8)."""
        return self.pairs[0]

    def round_settings(self, sampling: SamplingParams) -> dict:
        """The tree settings of a round: `sampled`'s when the round samples and they are set, else the
        drafter's own (top_k, depth, total_tokens, min_confidence)."""
        if self.sampled is not None and not sampling.greedy:
            return self.sampled
        return dict(top_k=self.top_k, depth=self.depth, total_tokens=self.total_tokens,
                    min_confidence=self.min_confidence)

    def _dynamic_tree(self, h: torch.Tensor, k: int, device: torch.device, sampling: SamplingParams,
                      generator: torch.Generator | None = None) -> Draft:
        """EAGLE-2: expand, score by cumulative log-probability, keep the best; one head pass per level,
        at most k levels, with the round's settings. A sampled one-child tree draws its tokens (`drawn`:
        see the class docstring)."""
        settings = self.round_settings(sampling)
        top_k, depth = settings["top_k"], min(k, settings["depth"])
        tokens: list[int] = []
        parents: list[int] = []
        scores: list[float] = []
        drawn_from: list[torch.Tensor] = []         # each node's q, when drawn
        drawn = top_k == 1 and not sampling.greedy
        row_of: dict[int, int] = {}                 # node -> its row in the head's cache
        frontier, frontier_h = [-1], h.view(1, -1)  # the root: the pending token
        for level in range(depth):
            logits = self._logits(frontier_h)
            log_probs = torch.log_softmax(logits.float(), -1)
            frontier_scores = [scores[n] if n >= 0 else 0.0 for n in frontier]
            if drawn:
                q = sampling.probs(logits)[0]
                token = int(sample(q, generator))
                drawn_from.append(q)
                children = [(frontier_scores[0] + float(log_probs[0, token]), 0, token)]
            else:
                children = expand_level(frontier_scores, log_probs, top_k)
            chosen = []                             # (child node, its parent's row in frontier_h)
            for score, i, token in children:
                tokens.append(token)
                parents.append(frontier[i])
                scores.append(score)
                chosen.append((len(tokens) - 1, i))
            if level + 1 == depth or self._unsure(log_probs, settings["min_confidence"]):
                break
            chosen = chosen[:top_k]
            frontier = [node for node, _ in chosen]
            frontier_h = self._tree_pass(frontier, tokens, parents, row_of, frontier_h[[i for _, i in chosen]],
                                         device)
        keep, kept_parents = rerank(scores, parents, settings["total_tokens"])
        # every node expanded, for drawing and for the chapter: the draft is the `kept` part of it
        self.last_expansion = {"tokens": tokens, "parents": parents, "scores": scores, "kept": keep}
        probs = torch.stack([drawn_from[n] for n in keep]) if drawn and keep else None
        return Draft(torch.tensor([tokens[n] for n in keep], dtype=torch.long, device=device), probs, kept_parents)

    @staticmethod
    def _unsure(log_probs: torch.Tensor, min_confidence: float | None) -> bool:
        """Whether the tree stops growing here: the level's most probable node, given its parent, is
        below min_confidence (log_probs: the level's (F, V) log-probabilities)."""
        return min_confidence is not None and float(log_probs.max()) < math.log(min_confidence)

    def _tree_pass(self, frontier: list[int], tokens: list[int], parents: list[int], row_of: dict[int, int],
                   parent_h: torch.Tensor, device: torch.device) -> torch.Tensor:
        """One head pass over the frontier nodes, appended to the head's cache: each sees the true
        prefix, its ancestors' rows and itself, at position pairs[0] + depth - 1."""
        cached = self.cache.get_seq_length()
        if len(frontier) == 1 and cached - self.pairs[0] == node_depth(parents, frontier[0]) - 1:
            # one node whose ancestors are every row drafted so far (top_k = 1): it sees the whole
            # cache at the next position, a plain step
            row_of[frontier[0]] = cached
            return self._head_step([0], torch.tensor([[tokens[frontier[0]]]], device=device), parent_h[None])[0]
        visible = torch.zeros(len(frontier), cached + len(frontier), dtype=torch.bool)
        visible[:, :self.pairs[0]] = True
        for i, node in enumerate(frontier):
            ancestor = parents[node]
            while ancestor >= 0:
                visible[i, row_of[ancestor]] = True
                ancestor = parents[ancestor]
            visible[i, cached + i] = True
            row_of[node] = cached + i
        positions = torch.tensor([self.pairs[0] + node_depth(parents, n) - 1 for n in frontier], device=device)
        frontier_tokens = torch.tensor([tokens[n] for n in frontier], device=device)
        return self._head_step([0], frontier_tokens[None], parent_h[None], positions=positions,
                               visible=visible.to(device))[0]


def fastest_tree(measured: dict) -> dict:
    """Of the settings a tree.json timed (its "table", and its "sampled" table), the fastest with more
    than one child per node: EAGLE-2's dynamic tree proper, for a head whose fastest setting is a
    chain. A ValueError when none was timed."""
    def best(table: list[dict], what: str) -> dict:
        trees = [row for row in table if row["top_k"] > 1]
        if not trees:
            raise ValueError(f"this head's tree.json timed no {what} setting with top_k > 1; pass top_k=, depth= and "
                             "total_tokens= instead of settings='fastest-tree'")
        row = max(trees, key=lambda r: r["speedup"])
        return {k: row[k] for k in TREE_SETTINGS if k in row}
    settings = best(measured.get("table", []), "greedy")
    if "sampled" in measured:
        settings["sampled"] = best(measured["sampled"].get("table", []), "sampled")
    return settings


SETTINGS_CHOICES = ("fastest", "fastest-tree")


def head_dtype(target: nn.Module) -> torch.dtype:
    """A drafting head's precision: a draft's (speclab.devices.draft_dtype), float16 on a CPU as a draft
    model and Medusa's heads run, the target's elsewhere. A head only proposes, so its rounding moves
    acceptance, never the output; its steps read half the bytes of float32."""
    return draft_dtype(target.device, target.dtype)


def load_eagle(target: nn.Module, head: str | Path | FeatureHead, version: int | None = None,
               settings: str = "fastest", **options) -> EagleDrafter:
    """An EAGLE drafter for `target` from a head directory (train eagle / train eagle3) or a head.
    `version` (1 or 3), when given, must match the head's. options: tree="dynamic" (EAGLE-2's tree,
    the default) or "chain", top_k, depth, total_tokens, min_confidence (defaults: the head
    directory's tree.json, where the settings measured fastest with that head are kept, else
    EagleDrafter's; a chain takes none of them), sampled (the settings of sampled rounds: tree.json's
    "sampled" entry, timed at temperature 1, unless any tree setting is passed here, which then
    applies to every round). settings="fastest-tree" takes instead tree.json's fastest timed setting
    with top_k > 1 (fastest_tree): the dynamic tree itself, for a head whose fastest is a chain."""
    if settings not in SETTINGS_CHOICES:
        raise ValueError(f"settings must be one of {SETTINGS_CHOICES}, got {settings!r}")
    if not isinstance(head, FeatureHead):
        if options.get("tree", "dynamic") == "dynamic":  # EAGLE-2's settings measured fastest for this head
            measured = measured_settings(head)
            if settings == "fastest-tree":
                measured = fastest_tree(measured)
            # settings passed here apply to every round; without them, sampled rounds take the settings
            # timed at temperature 1 where tree.json has them
            if "sampled" in measured and not any(k in options for k in (*TREE_SETTINGS, "sampled")):
                options["sampled"] = {k: measured["sampled"][k] for k in TREE_SETTINGS if k in measured["sampled"]}
            options = {**{k: measured[k] for k in TREE_SETTINGS if k in measured}, **options}
        head = FeatureHead.load(head, device=target.device, dtype=head_dtype(target))
    elif settings != "fastest":
        raise ValueError("settings= reads a head directory's tree.json: pass the directory, not a loaded head")
    else:  # a loaded head (one read from an engine's layout too) drafts as a shipped one does
        head = head.to(device=target.device, dtype=head_dtype(target))
    if version is not None and head.version != version:
        raise ValueError(f"this is an {head.name} head, not an EAGLE-{version} head: load it with "
                         f"load_drafter({head.train_command!r}, head=...)")
    return EagleDrafter(head, target, **options)


# ---------------------------------------------------------------- engine settings
def engine_settings_for(version: int):
    """EAGLE-1's (version 1) or EAGLE-3's settings writer (speclab.serving.settings.engine_settings)."""
    name = NAME if version == 1 else NAME3

    def write(engine: str, o: Options) -> dict:
        path = o.path or "HEAD_DIR"
        dynamic, static = tree_is(o, "dynamic"), tree_is(o, "static")
        total = o.total_tokens if o.total_tokens is not None else o.k * o.top_k
        if dynamic and not o.top_k * o.k >= total >= o.k:
            raise ValueError(f"a dynamic tree of depth {o.k} and top_k {o.top_k} holds {o.k} to "
                             f"{o.k * o.top_k} tokens; total_tokens {total} is outside that")
        if engine == "speclab":
            tree = {"tree": "chain"} if tree_is(o, "chain") else {"tree": o.tree} if static else {
                "tree": "dynamic", "top_k": o.top_k, "depth": o.k, "total_tokens": total}
            return {"method": name, "head": path, **({"depth": o.k} if tree_is(o, "chain") else {}), **tree,
                    **by_batch(engine, o)}
        if engine == "vllm":
            if not tree_is(o, "chain"):
                # some vLLM versions take a static tree (speculative_token_tree, TREE_ATTN); 0.32, pinned
                # here, has no tree setting at all (vllm/config/speculative.py)
                raise no(engine, "drafts EAGLE chains only in 0.32 (no dynamic EAGLE-2 tree; a static tree "
                                 "through speculative_token_tree in the versions that have it)")
            return {"method": name, "model": path, "num_speculative_tokens": o.k, **by_batch(engine, o)}
        if engine == "sglang":
            by_batch(engine, o)
            if static:
                raise no(engine, "no static tree: SGLang grows EAGLE-2's dynamic tree from topk and steps")
            top_k, budget = (1, o.k + 1) if not dynamic else (o.top_k, total + 1)
            return {"--speculative-algorithm": "EAGLE" if version == 1 else "EAGLE3",
                    "--speculative-draft-model-path": path, "--speculative-num-steps": o.k,
                    "--speculative-eagle-topk": top_k, "--speculative-num-draft-tokens": budget}
        if engine == "tensorrt-llm":
            if version == 1:
                raise no(engine, "the PyTorch backend runs EAGLE-3 heads only; EAGLE-1 and -2 checkpoints "
                                 "are incompatible")
            tree = ({} if tree_is(o, "chain") else {"eagle_choices": [list(p) for p in o.tree]} if static else
                    {"use_dynamic_tree": True, "dynamic_tree_max_topK": o.top_k, "max_total_draft_tokens": total})
            return {"decoding_type": "Eagle3", "max_draft_len": o.k, "speculative_model": path, **tree,
                    **by_batch(engine, o)}
        if engine == "llama.cpp":
            by_batch(engine, o)
            if version == 1 or not tree_is(o, "chain"):
                raise no(engine, "draft-eagle3 drafts an EAGLE-3 chain (a GGUF converted with "
                                 "--target-model-dir); no EAGLE-1, no tree")
            return {"--spec-type": "draft-eagle3", "--spec-draft-model": path, "--spec-draft-n-max": o.k}
        raise no(engine, "generate() has no EAGLE drafter (assistant models, prompt lookup and early exit only)")
    return write


# ================================================================ its setting on the command line
def eagle_tree_setting(text: str) -> dict:
    """'dynamic', 'chain' or 'TOP_K,DEPTH,TOTAL[,STOP]' -> load_drafter's EAGLE options, for --eagle-tree."""
    if text in ("dynamic", "chain"):
        return {"tree": text}
    parts = text.split(",")
    try:
        top_k, depth, total = (int(v) for v in parts[:3])
        stop = float(parts[3]) if len(parts) == 4 else None
    except ValueError:
        parts = []
    if len(parts) not in (3, 4):
        raise argparse.ArgumentTypeError(f"--eagle-tree takes dynamic, chain or TOP_K,DEPTH,TOTAL[,STOP] (e.g. 1,12,12 "
                                         f"or 1,20,20,0.1), got {text!r}")
    return dict(tree="dynamic", top_k=top_k, depth=depth, total_tokens=total, min_confidence=stop)
