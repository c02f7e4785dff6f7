"""EAGLE (Li et al. 2024): draft in the target's feature space with one decoder layer.

The target's feature f_t (its last hidden state after the final norm: what its lm_head reads) holds
most of what it knows about the next token. EAGLE-1 predicts the *next feature* from the current
one and the token that follows it: an input projection of [embedding(x_{t+1}); f_t] (2H -> H) into
one decoder layer of the target's own architecture, whose output f^_{t+1} goes through the target's
frozen lm_head to give the draft distribution of x_{t+2}. Embeddings and lm_head are the target's
(frozen, not stored with the head), so the head is one layer and one H x 2H matrix.

Drafting runs autoregressively on the head's own predicted features, with its own KV cache: each
round the head first catches up on the true features the verification pass handed over (the same
hand-over Medusa uses: Drafter.take_features), then drafts from there; the rows it computed from its
own guesses are rolled back at the next round, like a draft model's.

This module holds the head and the chain drafter (EAGLE-1); training is in speclab.train.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoConfig, AutoModel, DynamicCache

from speclab.drafters import Draft, Drafter
from speclab.heads import _close, fingerprint
from speclab.sampling import SamplingParams, check_finite, sample

CONFIG_FILE, WEIGHTS_FILE = "eagle_config.json", "eagle_head.safetensors"


def one_layer_config(config):
    """The target's config cut to one decoder layer (per-layer lists cut alike)."""
    config = copy.deepcopy(config)
    config.num_hidden_layers = 1
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types[-1:])
    return config


def check_mirrorable(target: nn.Module) -> None:
    """A TypeError saying what to do unless the head can copy the target's decoder layer: a transformers
    causal LM whose base model (target.model) has `layers`, `norm` and `rotary_emb`, as the Llama
    family (Llama, Qwen2, Qwen3, Mistral, ...) does."""
    base = getattr(target, "model", None)
    if not all(hasattr(base, name) for name in ("layers", "norm", "rotary_emb")) or not hasattr(target, "config"):
        raise TypeError(f"an EAGLE head mirrors one decoder layer of a Llama-family model (a .model with layers, "
                        f"norm and rotary_emb); {type(target).__name__} has no such layers: use another drafter "
                        "(draft_model, ngram, medusa) for it")


class EagleHead(nn.Module):
    """fc([embedding; feature]) -> one decoder layer of the target's architecture -> predicted feature.

    forward(embeds (n, H), features (n, H), cache) -> (n, H): row j predicts the feature of the position
    after the token whose embedding is embeds[j]. No final norm: it regresses the target's features,
    which are already normed, so the target's lm_head reads its output directly (as in EAGLE-1)."""

    def __init__(self, target_config: dict, target_fingerprint: dict | None = None):
        super().__init__()
        config = AutoConfig.for_model(**target_config)
        self.config = dict(target_config=target_config, target_fingerprint=target_fingerprint)
        self.layer_config = one_layer_config(config)
        hidden = config.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden, bias=True)
        self.model = AutoModel.from_config(self.layer_config)
        self.model.embed_tokens = None       # tokens are embedded with the target's own embeddings
        self.model.norm = nn.Identity()      # the output is a (normed) feature already

    @classmethod
    def for_target(cls, target: nn.Module) -> EagleHead:
        """A fresh head for `target`; its decoder layer starts as a copy of the target's last layer."""
        check_mirrorable(target)
        config = target.config.to_dict()
        head = cls(config, {**fingerprint(target), "layers": int(target.config.num_hidden_layers),
                            "model_type": target.config.model_type})
        head.model.layers[0].load_state_dict(target.model.layers[-1].state_dict())
        return head.to(device=target.device, dtype=torch.float32)

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.layer_config)

    def forward(self, embeds: torch.Tensor, features: torch.Tensor, cache: DynamicCache | None = None,
                **extra) -> torch.Tensor:
        x = self.fc(torch.cat([embeds, features], dim=-1).to(self.dtype))
        out = self.model(inputs_embeds=x.unsqueeze(0), past_key_values=cache, use_cache=cache is not None, **extra)
        return out.last_hidden_state[0]

    def check_fits(self, target: nn.Module) -> None:
        """A ValueError, saying how to get a fitting head, unless this head was trained for `target`."""
        check_mirrorable(target)
        mine = self.config["target_fingerprint"] or {}
        theirs = {**fingerprint(target), "layers": int(target.config.num_hidden_layers),
                  "model_type": target.config.model_type}
        how = "train one for it: python -m speclab train eagle --target DIR --out DIR"
        for key in ("model_type", "hidden", "vocab", "layers"):
            if mine.get(key) is not None and mine.get(key) != theirs[key]:
                raise ValueError(f"this EAGLE head was trained for a target with {key} {mine.get(key)!r}; this "
                                 f"{type(target).__name__} has {theirs[key]!r}; {how}")
        if mine.get("lm_head_checksum") is not None and not _close(mine["lm_head_checksum"], theirs["lm_head_checksum"]):
            raise ValueError(f"this EAGLE head was trained for another target of the same shape (lm_head checksums "
                             f"differ); {how}")

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CONFIG_FILE).write_text(json.dumps(self.config, indent=1))
        state = {k: v.detach().to(torch.float16).contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(directory / WEIGHTS_FILE))

    @classmethod
    def load(cls, directory: str | Path, device: torch.device | str = "cpu",
             dtype: torch.dtype = torch.float32) -> EagleHead:
        directory = Path(directory)
        if not (directory / CONFIG_FILE).exists():
            raise FileNotFoundError(f"no EAGLE head in {directory} ({CONFIG_FILE} missing); train one with "
                                    "python -m speclab train eagle --target DIR --out DIR")
        config = json.loads((directory / CONFIG_FILE).read_text())
        head = cls(**config)
        head.load_state_dict({k: v for k, v in load_file(str(directory / WEIGHTS_FILE)).items()}, strict=False)
        return head.to(device=device, dtype=dtype).eval()


class EagleDrafter(Drafter):
    """EAGLE-1's head drafting a chain (tree="chain": k tokens per round, each from the head's own
    predicted feature, sampled from the served distribution) or EAGLE-2's dynamic tree (tree="dynamic",
    the default: Li et al. 2024b). The dynamic tree grows `depth` levels (at most k): every frontier
    node's top_k children are scored by the cumulative log-probability of their path, the best top_k
    of them become the next frontier, and at the end the best `total_tokens` of every node scored
    form the tree the target verifies. A child never scores above its parent, so that set is closed
    under ancestors. Its nodes are deterministic top-k picks, so the rule sees point masses and stays
    lossless at any temperature. The defaults (top_k 2, depth 6, 12 tokens) were the fastest of the
    settings measured with the bundled target's head on a 2-core CPU, where every head pass costs
    about a tenth of a target step and a wider tree buys little; the reference implementation's
    defaults (top_k 10, depth 7, 60 tokens) are for large targets on GPUs.

    Bookkeeping: pair j is (feature f_j, token x_{j+1}). After the prefill the target has handed over
    f_0..f_{n-2} for a prompt of n tokens, and x_1..x_{n-1} are known, so pairs 0..n-2 are all true.
    Each round the head rolls its cache back to the true pairs, feeds the new ones (the verify pass's
    features of the pending token and the accepted drafts), and drafts on from there."""

    name = "eagle"
    feature_layers = (-1,)

    def __init__(self, head: EagleHead, target: nn.Module, tree: str = "dynamic", top_k: int = 2, depth: int = 6,
                 total_tokens: int = 12):
        head.check_fits(target)
        if tree not in ("dynamic", "chain"):
            raise ValueError(f"tree must be 'dynamic' (EAGLE-2) or 'chain' (EAGLE-1), got {tree!r}")
        for label, value in (("top_k", top_k), ("depth", depth), ("total_tokens", total_tokens)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"EAGLE-2's {label} must be an integer >= 1, got {value!r}")
        self.head, self.tree = head, tree
        self.top_k, self.depth, self.total_tokens = top_k, depth, total_tokens
        self.name = "eagle-2" if tree == "dynamic" else "eagle"
        self.embed = target.get_input_embeddings()
        self.lm_head = target.get_output_embeddings()
        self.forward_calls = 0
        self.start(torch.empty(0, dtype=torch.long))

    def start(self, prompt: torch.Tensor) -> None:
        self.cache = self.head.new_cache()
        self.true_pairs = 0                          # pairs in the head's cache computed from true features
        self.pending: list[torch.Tensor] = []        # true features handed over, not yet in the cache
        self.forward_calls = 0

    def take_features(self, features: torch.Tensor) -> None:
        self.pending.append(features)

    def _head_step(self, tokens: torch.Tensor, features: torch.Tensor, **extra) -> torch.Tensor:
        self.forward_calls += 1
        return self.head(self.embed(tokens).to(self.head.dtype), features.to(self.head.dtype), self.cache, **extra)

    def _logits(self, feature: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(feature.to(self.lm_head.weight.dtype))
        check_finite(logits, "EAGLE head")
        return logits

    def _catch_up(self, ids: torch.Tensor) -> torch.Tensor:
        """Roll back the rows computed from guesses, feed the true pairs handed over since, and return
        the predicted feature of the position after the pending token."""
        crop = self.cache.get_seq_length() - self.true_pairs
        if crop > 0:
            self.cache.crop(-crop)
        features = torch.cat(self.pending)
        tokens = ids[self.true_pairs + 1:self.true_pairs + 1 + len(features)]
        feature = self._head_step(tokens, features)[-1]
        self.true_pairs += len(features)
        self.pending = []
        return feature

    @torch.inference_mode()
    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        if not self.pending:  # a one-token prompt (no feature yet), or a second call without a verify pass
            return Draft(ids.new_empty(0))
        feature = self._catch_up(ids)
        if self.tree == "dynamic":
            return self._dynamic_tree(feature, min(k, self.depth), ids.device)
        drafted, probs = [], []
        for i in range(k):
            q = sampling.probs(self._logits(feature))
            token = sample(q, generator)
            drafted.append(token)
            probs.append(q)
            if i + 1 < k:
                feature = self._head_step(token.view(1), feature.view(1, -1))[-1]
        return Draft(torch.stack(drafted), torch.stack(probs))

    def _dynamic_tree(self, feature: torch.Tensor, depth: int, device: torch.device) -> Draft:
        """EAGLE-2: expand, score by cumulative log-probability, keep the best; one head pass per level."""
        row_of: dict[int, int] = {}                  # node -> its row in the head's cache
        log_probs = torch.log_softmax(self._logits(feature).float(), -1)
        top = log_probs.topk(self.top_k)
        frontier = list(range(self.top_k))
        tokens, parents, scores = top.indices.tolist(), [-1] * self.top_k, top.values.tolist()
        parent_features = feature.view(1, -1).expand(len(frontier), -1)
        for _ in range(depth - 1):
            # one pass over the frontier: each node sees the true prefix, its ancestors and itself
            cached = self.cache.get_seq_length()
            visible = torch.zeros(len(frontier), cached + len(frontier), dtype=torch.bool)
            visible[:, :self.true_pairs] = True
            for i, node in enumerate(frontier):
                ancestor = parents[node]
                while ancestor >= 0:
                    visible[i, row_of[ancestor]] = True
                    ancestor = parents[ancestor]
                visible[i, cached + i] = True
                row_of[node] = cached + i
            blocked = torch.finfo(self.head.dtype).min
            mask = torch.zeros(visible.shape, dtype=self.head.dtype).masked_fill_(~visible, blocked)
            positions = torch.tensor([[self.true_pairs + node_depth(parents, n) - 1 for n in frontier]], device=device)
            frontier_tokens = torch.tensor([tokens[n] for n in frontier], device=device)
            new_features = self._head_step(frontier_tokens, parent_features, attention_mask=mask[None, None].to(device),
                                           position_ids=positions)
            log_probs = torch.log_softmax(self._logits(new_features).float(), -1)
            top = log_probs.topk(self.top_k, dim=-1)
            candidates = []  # (score, parent node, token, parent's row in new_features)
            for i, node in enumerate(frontier):
                for lp, token in zip(top.values[i].tolist(), top.indices[i].tolist()):
                    candidates.append((scores[node] + lp, node, token, i))
            candidates.sort(key=lambda c: -c[0])
            next_frontier, next_rows = [], []
            for rank, (score, parent, token, i) in enumerate(candidates):
                tokens.append(token)
                parents.append(parent)
                scores.append(score)
                if rank < self.top_k:
                    next_frontier.append(len(tokens) - 1)
                    next_rows.append(i)
            frontier, parent_features = next_frontier, new_features[next_rows]
        # the best total_tokens nodes: sorted by score, ties to the earlier node, so parents come first
        keep = sorted(sorted(range(len(tokens)), key=lambda n: (-scores[n], n))[:self.total_tokens])
        renumber = {old: new for new, old in enumerate(keep)}
        return Draft(torch.tensor([tokens[n] for n in keep], dtype=torch.long, device=device), None,
                     [renumber[parents[n]] if parents[n] >= 0 else -1 for n in keep])


def node_depth(parents: list[int], node: int) -> int:
    depth = 1
    while parents[node] >= 0:
        node, depth = parents[node], depth + 1
    return depth


def load_eagle(target: nn.Module, head: str | Path | EagleHead | None = None, **options) -> EagleDrafter:
    """An EAGLE drafter for `target` from a head directory (train eagle), a head, or None: the head
    that ships with the bundled target. options: tree="dynamic" (EAGLE-2, default) or "chain"
    (EAGLE-1), top_k, depth, total_tokens."""
    from speclab.models import BUNDLED_DIR
    if head is None:
        head = BUNDLED_DIR / "eagle"
    if not isinstance(head, EagleHead):
        head = EagleHead.load(head, device=target.device)
    return EagleDrafter(head, target, **options)
