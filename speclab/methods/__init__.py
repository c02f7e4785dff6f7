"""Every drafting method, registered once (REGISTRY): its name (vLLM's), how to load it and its options,
the names other engines give those options, the weights it ships with, how to train them, and its bench
rows. Each method is a module of this package behind speclab.drafting's one interface, and none of them
imports this registry; the command line, the bench, the model card and the trainers read it, so a new
method is a new module and an entry here (plus its tests and its chapter).
"""
from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
import importlib
from pathlib import Path

import torch

from speclab.drafting import Drafter
from speclab.methods import (checkpoints, draft_model, eagle, layer_skip, lookahead, lookup_first, medusa, mtp,
                             ngram, parallel_draft, shipped, suffix)
from speclab.methods.engines import Options, no
from speclab.methods.flags import Flag, Sweep
from speclab.models import BUNDLED_DIR, load_pair


@dataclass(frozen=True)
class CardSection:
    """A method's section of the bundled pair's model card (`python -m speclab card`): `writer(pair_dir,
    num_prompts, max_new_tokens, method=...)` measures it and returns its markdown, a heading line first;
    `marker`, the file in the method's folder of the pair whose presence says its weights are trained.
    A writer given as "module:function" is imported when the card is written: the card's module imports
    this registry, which cannot import it back."""

    writer: str | Callable[..., str]
    marker: str = "record.json"

    def write(self, method: Method, pair_dir, num_prompts: int = 4, max_new_tokens: int = 128) -> str:
        writer = self.writer
        if isinstance(writer, str):
            module, _, name = writer.partition(":")
            writer = getattr(importlib.import_module(module), name)
        return writer(pair_dir, num_prompts, max_new_tokens, method=method)

    def writes_with(self, writer: Callable) -> bool:
        """Whether `writer` is this section's writer (named or given)."""
        return self.writer is writer or self.writer == f"{writer.__module__}:{writer.__name__}"


@dataclass(frozen=True)
class BenchRow:
    """One bench row of a method, "speclab <name>[ <variant>]", all of it in one place: its load_drafter options,
    its speculative_generate options (another schedule or acceptance rule), whether the lesson (bench's
    default) runs it, the sweep its method's module declares for it (a bench flag, a row per value), and the
    labels records wrote for it before a rename (current_row reads them)."""

    variant: str = ""
    load: Mapping = field(default_factory=dict)
    decode: Mapping = field(default_factory=dict)
    lesson: bool = False
    sweep: Sweep | None = None
    older: tuple[str, ...] = ()


@dataclass(frozen=True)
class Method:
    """One drafting method as the rest of speclab sees it (load_drafter builds it from this entry).

    Its name is its one name: load_drafter's, generate's --method, its drafter's `name`, its bench rows'. A
    drafter that runs one of several variants adds it after a space ("eagle tree", "eagle3 chain", "mtp x3",
    "layer_skip E=4+adapter", "lookup_first draft_model"); a bench row is "speclab <name>[ <variant>]" (bench_row),
    transformers' and the reference rows under their own engine's prefix ("hf assisted")."""

    name: str  # vLLM's name where vLLM has the method: load_drafter's first argument
    load: Callable[..., Drafter]  # load(target, **options) -> Drafter
    options: str = ""  # what load_drafter's options mean for this method, in a sentence or two
    aliases: Mapping[str, tuple[str, int]] = field(default_factory=dict)  # other engines' option -> (ours, offset)
    weights: str | None = None  # the option naming its trained weights (a directory; default: those shipped)
    bundled: str | None = None  # the folder its weights ship in, in each pair's folder (speclab/pairs/<pair>/)
    on_target: bool = False  # built on the target itself: the bundled target is loaded when none is passed
    train: str | None = None  # `python -m speclab train <train>` makes its weights (None: nothing to train)
    rows: tuple[BenchRow, ...] = ()  # its bench rows, each whole (bench --all runs every one)
    # the command line (generate, bench): the flag naming its weights directory, generate's other flags it
    # declares, and its load_drafter options from them (argparse's namespace -> options)
    weights_flag: str | None = None
    flags: tuple[Flag, ...] = ()
    flag_options: Callable[[Namespace], Mapping] | None = None
    # its settings as each serving engine takes them: engine_settings(engine, Options) -> dict, raising
    # engines.Unsupported where an engine cannot express them (speclab.serving.settings reads it)
    engine_settings: Callable[[str, Options], dict] | None = None
    one_hot_drafts: bool = False  # its drafts carry no probabilities (block verification gains nothing)
    drafts_by_lookup: bool = False  # its drafts are lookups in the text, nearly free: the bench's --lookup-k is its K
    card: CardSection | None = None  # its section of the model card, for weights shipped with the bundled target
    older_names: tuple[str, ...] = ()  # names generate's --method also takes for it
    # the load option naming another registered method it drafts in front of (generate's --then)
    in_front_of: str | None = None
    weights_help: str = ""  # what its weights flag names, for --help ("Medusa heads")
    # older labels of its own that are no bench row's: "prompt lookup" -> "ngram" (chapter 11's batch sweep)
    older_labels: Mapping[str, str] = field(default_factory=dict)
    # vLLM serves it on the bundled pair beside speclab (chapter 12, speclab.serving.vllm_engine): the load_drafter
    # options that draft as vLLM does with its export's settings (serving.json's), the weights left out
    vllm_drafts: Callable[[Mapping], Mapping] | None = None
    # chapter 12's load test serves it (speclab.serving.load_test): its configurations there, "" the method's
    # own settings, "fallback" the same with K 0 above a batch size
    load_test: tuple[str, ...] = ()
    export_check: Callable[[str], None] | None = None  # export_check(engine) refuses an export it would mis-serve

    @property
    def flag_names(self) -> tuple[str, ...]:
        """argparse's names of the flags it declares (what flag_options reads, beside weights_flag)."""
        return tuple(f.dest for f in self.flags)

    def row(self, variant: str = "") -> str:
        """Its bench row of `variant` ("" : its own row): "speclab eagle tree"."""
        return bench_row(self.name, variant)

    # Its rows read by what each reader asks (label -> ...), all made from `rows`:
    @property
    def bench_rows(self) -> dict[str, Mapping]:
        """Each row's label -> its load_drafter options."""
        return {self.row(r.variant): r.load for r in self.rows}

    @property
    def decode_options(self) -> dict[str, Mapping]:
        """The rows that decode with other speculative_generate options -> those options."""
        return {self.row(r.variant): r.decode for r in self.rows if r.decode}

    @property
    def lesson_rows(self) -> tuple[str, ...]:
        """The rows `bench` runs by default (the course's lesson)."""
        return tuple(self.row(r.variant) for r in self.rows if r.lesson)

    @property
    def bench_sweeps(self) -> dict[str, Sweep]:
        """The rows a bench setting sweeps -> that sweep (draft_model.K_SWEEP for "speclab draft_model")."""
        return {self.row(r.variant): r.sweep for r in self.rows if r.sweep}

    @property
    def older_rows(self) -> dict[str, str]:
        """Older labels -> labels now: records written before a rename read with them (current_row; what follows
        the old label is kept: "speclab speculative K=2")."""
        return {**dict(self.older_labels), **{old: self.row(r.variant) for r in self.rows for old in r.older}}

    def uses_draft_model(self, row: str | None = None) -> bool:
        """Whether the method (or its bench row `row`) drafts with a draft model: the bench hands those
        rows the pair's draft."""
        return self.weights == "draft" or (row is not None and
                                           self.bench_rows.get(row, {}).get("drafter") == draft_model.NAME)


def bench_row(name: str, variant: str = "") -> str:
    """The bench row of a registered method `name` and one of its variants: "speclab <name>[ <variant>]"."""
    return f"speclab {name}" + (f" {variant}" if variant else "")


def _load_draft_model(target, draft=None, **rest) -> Drafter:
    if rest:
        raise ValueError(f"draft_model takes draft= only; got {sorted(rest)}")
    return draft_model.load_draft_model(target, draft)


def _load_parallel_draft(target, model=None, **rest) -> Drafter:
    if rest:
        raise ValueError(f"pard takes model= only (a parallel draft, or its directory); got {sorted(rest)}")
    return parallel_draft.load_parallel_draft(target, model)


def _load_layer_skip(target, **options) -> Drafter:
    if "exit_layer" not in options:
        raise ValueError(f"layer_skip needs exit_layer=E, the last layer that drafts (1 to "
                         f"{target.config.num_hidden_layers - 1})")
    return layer_skip.load_layer_skip(target, bundled=shipped_weights(layer_skip.NAME, target), **options)


def _load_lookup_first(target, drafter: str = draft_model.NAME, max_ngram: int = 3,
                       min_ngram: int = lookup_first.MIN_NGRAM,
                       **options) -> Drafter:
    """Prompt lookup in front of `drafter` (a registered method's name, loaded with `options`)."""
    if drafter in (*lookup_first.DRAFTLESS, lookup_first.NAME):
        raise ValueError(f"lookup_first's drafter= is the trained drafter lookup goes in front of (e.g. "
                         f"{draft_model.NAME!r} or {eagle.NAME3!r}), not {drafter!r}")
    return lookup_first.LookupFirstDrafter(load_drafter(drafter, target, **options), max_ngram, min_ngram)


def _lookup_first_settings(engine: str, o: Options) -> dict:
    """Prompt lookup in front of o.then (None: the draft model). llama.cpp has this very precedence for a comma-separated
    --spec-type (a draftless type before a drafter); TensorRT-LLM's nearest puts another matcher in front."""
    then = o.then or draft_model.NAME
    o = replace(o, min_ngram=lookup_first.MIN_NGRAM) if o.min_ngram is None else o  # the loader's default
    if o.min_ngram > o.max_ngram:
        raise ValueError(f"lookup_first needs min_ngram <= max_ngram (min_ngram is {lookup_first.MIN_NGRAM} unless "
                         f"set); got {o.min_ngram}..{o.max_ngram}")
    if then in (*lookup_first.DRAFTLESS, lookup_first.NAME) or then not in REGISTRY or not REGISTRY[then].engine_settings:
        raise ValueError(f"lookup_first puts prompt lookup in front of a trained drafter; then={then!r} is not one")
    behind = REGISTRY[then].engine_settings(engine, o) if engine in ("speclab", "llama.cpp") else None
    if engine == "speclab":
        return {"method": lookup_first.NAME, "drafter": then, "max_ngram": o.max_ngram, "min_ngram": o.min_ngram,
                **{key: value for key, value in behind.items() if key != "method"}}
    if engine == "llama.cpp":
        if o.min_ngram != o.max_ngram:
            raise no(engine, "ngram-simple looks up one n-gram size (--spec-ngram-simple-size-n); set "
                             f"min_ngram = max_ngram (got {o.min_ngram}..{o.max_ngram})")
        return {**behind, "--spec-type": f"ngram-simple,{behind['--spec-type']}",
                "--spec-ngram-simple-size-n": o.max_ngram, "--spec-ngram-simple-size-m": o.k}
    raise no(engine, {
        "vllm": "one method per speculative_config: no prompt lookup in front of a drafter",
        "sglang": "one --speculative-algorithm: no prompt lookup in front of a drafter",
        "tensorrt-llm": "no prompt lookup in front of a drafter; the nearest: use_sa_spec=True with "
                        "sa_spec_threshold=N on an Eagle3, MTP or PARD config puts its suffix automaton (the "
                        "longest match in the request, no max_ngram) in front once a match is N tokens long",
        "transformers": "generate() takes an assistant model or prompt lookup, not both"}[engine])


# SGLang's server flags (--speculative-num-steps, --speculative-eagle-topk, --speculative-num-draft-tokens)
# and vLLM's num_speculative_tokens (the draft depth) name the same knobs as speclab's EAGLE options.
# SGLang's tree size counts the root (the pending token) and speclab's does not: hence the offset of -1.
EAGLE_OPTIONS = ("head= a directory; tree=\"dynamic\" (EAGLE-2's tree) or \"chain\"; top_k, depth, total_tokens, "
                 "min_confidence; settings=\"fastest\" (tree.json's) or \"fastest-tree\"")
EAGLE_ALIASES = {"speculative_num_steps": ("depth", 0), "speculative_eagle_topk": ("top_k", 0),
                 "speculative_num_draft_tokens": ("total_tokens", -1), "num_speculative_tokens": ("depth", 0)}

EAGLE_TREE = Flag("--eagle-tree", dict(
    type=eagle.eagle_tree_setting, default={}, metavar="dynamic|chain|TOP_K,DEPTH,TOTAL[,STOP]",
    help="eagle and eagle3: EAGLE-2's dynamic tree with the settings measured for the head (tree.json; the default), "
         "EAGLE-1's chain of --k tokens, or a tree of your own: children per node, depth, nodes, and optionally the "
         "stop (min_confidence)"))
VLLM_CHAIN = {"tree": "chain"}  # how vLLM drafts with a head (its Medusa: top-1 only), whatever its settings
CARD = "speclab.train.card"  # the model card's module, which writes each method's section

B = BenchRow

REGISTRY: dict[str, Method] = {m.name: m for m in (
    Method(draft_model.NAME, _load_draft_model, options="draft= a model or a directory (default: the bundled draft)",
           engine_settings=draft_model.engine_settings, weights="draft", bundled="draft", train="draft",
           vllm_drafts=lambda settings: {},
           rows=(B(lesson=True, sweep=draft_model.K_SWEEP, older=("speclab speculative",)),
                 B("adaptive-heuristic", decode={"k_schedule": "heuristic"}, older=("speclab adaptive-heuristic",)),
                 B("adaptive-confidence", sweep=draft_model.CONFIDENCE_SWEEP, older=("speclab adaptive-confidence",))),
           older_names=("model",),
           # chapter 11's batch sweep named its rows "draft model" and "prompt lookup" (its record still does)
           older_labels={"draft model": draft_model.NAME}),
    Method(ngram.NAME, lambda target, **o: ngram.PromptLookupDrafter(**o),
           options="max_ngram=3, min_ngram=1, num_tokens=None (k), choose=\"frequent\"",
           engine_settings=ngram.engine_settings, one_hot_drafts=True, drafts_by_lookup=True, load_test=("",),
           vllm_drafts=lambda s: {"max_ngram": s["prompt_lookup_max"], "min_ngram": s["prompt_lookup_min"]},
           aliases={"prompt_lookup_max": ("max_ngram", 0), "prompt_lookup_min": ("min_ngram", 0),  # vLLM
                    "num_speculative_tokens": ("num_tokens", 0),
                    "max_matching_ngram_size": ("max_ngram", 0),                                  # transformers
                    "prompt_lookup_num_tokens": ("num_tokens", 0)},
           # chapter 10's vLLM comparison wrote "speclab prompt lookup (compiled)"
           rows=(B(lesson=True, sweep=ngram.SWEEP, older=("speclab prompt-lookup", "speclab prompt lookup")),),
           older_names=("prompt-lookup",), older_labels={"prompt lookup": ngram.NAME}),
    Method(suffix.NAME, lambda target, **o: suffix.SuffixDrafter(**o),
           options="max_tree_depth=24, max_cached_requests=10000, max_spec_factor=1.0, min_token_prob=0.1, "
                   "tree=False (vLLM's chain; True: the paper's tree)",
           engine_settings=suffix.engine_settings, one_hot_drafts=True, drafts_by_lookup=True,
           aliases={f"suffix_decoding_{name}": (name, 0) for name in  # vLLM's speculative_config keys
                    ("max_tree_depth", "max_cached_requests", "max_spec_factor", "min_token_prob")},
           rows=(B(), B("tree", load={"tree": True}, older=("speclab suffix-tree",)))),
    Method(lookahead.NAME, lambda target, **o: lookahead.LookaheadDrafter(**o),
           options="window=W, ngram=N, pool=G, from_context=True, seed=0", rows=(B(sweep=lookahead.SWEEP),),
           engine_settings=lookahead.engine_settings, one_hot_drafts=True,
           flags=(Flag("--lookahead", dict(type=lookahead.lookahead_setting, default="4,4,4", metavar="W,N,G",
                                           help="lookahead decoding's window, n-gram size and pool size per key "
                                                "(default 4,4,4)")),),
           flag_options=lambda a: dict(zip(("window", "ngram", "pool"), a.lookahead))),
    Method(medusa.NAME, medusa.load_medusa,
           options="heads= a directory; tree= \"chain\" or medusa_choices (default: the tree chosen for the heads)",
           weights="heads", bundled="medusa", train="medusa", weights_flag="heads", weights_help="Medusa heads",
           engine_settings=medusa.engine_settings, card=CardSection(f"{CARD}:medusa_card", marker="tree.json"),
           vllm_drafts=lambda settings: VLLM_CHAIN,
           # the tree under the Medusa reference's typical acceptance: lossy at T > 0 (chapter 7.7)
           rows=(B(lesson=True), B("chain", load={"tree": "chain"}, older=("speclab medusa-chain",)),
                 B("typical", decode={"acceptance": "typical-medusa"}, older=("speclab medusa-typical",)))),
    Method(eagle.NAME, lambda target, **o: eagle.load_eagle(target, version=1, **o), options=EAGLE_OPTIONS,
           aliases=EAGLE_ALIASES, weights="head", weights_flag="eagle", weights_help="EAGLE head",
           flags=(EAGLE_TREE,), flag_options=lambda a: a.eagle_tree,
           bundled="eagle", on_target=True, train="eagle", engine_settings=eagle.engine_settings_for(1),
           vllm_drafts=lambda settings: VLLM_CHAIN, export_check=checkpoints.check_eagle_export,
           card=CardSection(f"{CARD}:eagle_card"),
           # the measured settings (a chain, on the CPU that timed them), EAGLE-2's fastest timed tree
           # with two or more children a node, and EAGLE-1's own chain
           rows=(B(lesson=True), B("tree", load={"settings": "fastest-tree"}, older=("speclab eagle-tree",)),
                 B("chain", load={"tree": "chain"}, older=("speclab eagle-chain",)))),
    Method(eagle.NAME3, lambda target, **o: eagle.load_eagle(target, version=3, **o), options=EAGLE_OPTIONS,
           aliases=EAGLE_ALIASES, weights="head", weights_flag="eagle3", weights_help="EAGLE-3 head",
           flags=(EAGLE_TREE,), flag_options=lambda a: a.eagle_tree,
           bundled="eagle3", on_target=True, train="eagle3", engine_settings=eagle.engine_settings_for(3),
           vllm_drafts=lambda settings: VLLM_CHAIN, load_test=("", "fallback"),
           card=CardSection(f"{CARD}:eagle3_card"),
           rows=(B(lesson=True), B("tree", load={"settings": "fastest-tree"}, older=("speclab eagle3-tree",)),
                 B("chain", load={"tree": "chain"}, older=("speclab eagle3-chain",)))),
    Method(mtp.NAME, mtp.load_mtp, options="module= a directory; num_tokens=1 (drafts a round; more chains it)",
           aliases={"num_speculative_tokens": ("num_tokens", 0)}, weights="module", bundled="mtp",
           on_target=True, train="mtp", weights_flag="mtp", weights_help="MTP module",
           engine_settings=mtp.engine_settings, flag_options=lambda a: dict(num_tokens=a.mtp_tokens),
           flags=(Flag("--mtp-tokens", dict(type=int, default=1, help="mtp: drafts per round (more chains the "
                                                                       "module)")),),
           card=CardSection(f"{CARD}:mtp_card"),
           # chained as deep as the round's K
           rows=(B(), B("chain", load={"num_tokens": 64}, older=("speclab mtp-chain",)))),
    Method(layer_skip.NAME, _load_layer_skip,
           options="exit_layer=E (1..L-1); adapter=False (no new weights), True (those shipped) or a directory",
           bundled="exit", on_target=True, train="exit", engine_settings=layer_skip.engine_settings,
           card=CardSection(f"{CARD}:exit_card"),
           flag_options=lambda a: dict(exit_layer=a.exit_layer, adapter=a.exit_adapter),
           flags=(Flag("--exit-layer", dict(type=int, default=20, help="layer_skip: the last layer that drafts "
                                                                       "(default 20)")),
                  Flag("--exit-adapter", dict(action="store_true", help="layer_skip: with the exit adapter shipped "
                                                                        "for the bundled target"))),
           rows=(B(sweep=layer_skip.SWEEP, older=("speclab layer-skip",)),)),
    Method(parallel_draft.NAME, _load_parallel_draft, options="model= a parallel draft or its directory",
           weights="model", bundled="pard", train="pard", engine_settings=parallel_draft.engine_settings,
           card=CardSection(f"{CARD}:pard_card"),
           rows=(B(),)),
    # no weights of its own: the drafter behind lookup loads (or is handed) its own
    Method(lookup_first.NAME, _load_lookup_first,
           options="min_ngram=2, max_ngram=3; drafter= a method's name (default draft_model), loaded with the "
                   "remaining options",
           engine_settings=lambda engine, o: _lookup_first_settings(engine, o), in_front_of="drafter",
           rows=(B(draft_model.NAME, load={"drafter": draft_model.NAME}, older=("speclab lookup-then-draft",)),
                 B(eagle.NAME3, load={"drafter": eagle.NAME3}, older=("speclab lookup-then-eagle3",)))),
)}
METHODS = tuple(REGISTRY)  # vLLM's names where vLLM has the method


def method(name: str) -> Method:
    """The registered method called `name`, or a ValueError listing them."""
    if name not in REGISTRY:
        raise ValueError(f"unknown drafting method {name!r}; choose from {METHODS}")
    return REGISTRY[name]


def current_row(label: str) -> str:
    """A bench row's label now, for one a record wrote under an older name (Method.older_rows), what follows
    the old label kept: "speclab speculative K=2 (block)" -> "speclab draft_model K=2 (block)"."""
    for m in REGISTRY.values():
        for old, new in m.older_rows.items():
            if label == old or label.startswith(old + " "):
                return new + label[len(old):]
    return label


def by_bench_row(row: str) -> Method | None:
    """The method a bench row drafts with (None for a row of no registered method)."""
    return next((m for m in REGISTRY.values() if row in m.bench_rows), None)


def draft_model_method() -> Method:
    """The method that drafts with the pair's draft model."""
    return next(m for m in REGISTRY.values() if m.uses_draft_model())


def trained_drafters() -> tuple[str, ...]:
    """The methods that draft with trained weights (a draft model, heads, a module, exit adapters): those a
    method drafting in front of another (Method.in_front_of) can go in front of."""
    return tuple(m.name for m in REGISTRY.values() if m.train is not None)


def drafter_for_model(model: torch.nn.Module) -> Drafter:
    """A bare model as a drafter, by the method that drafts with a draft model: what the decode loop does
    with speculative_generate(target, model, ...)."""
    m = draft_model_method()
    return m.load(None, **{m.weights: model})


def rename_aliases(options: dict, aliases: Mapping[str, tuple[str, int]]) -> dict:
    """options with other engines' names replaced by speclab's (and their values offset)."""
    options = dict(options)
    for alias, (name, offset) in aliases.items():
        if alias in options:
            if name in options:
                raise ValueError(f"pass {name}= or {alias}=, not both")
            options[name] = options.pop(alias) + offset
    return options


def bundled_weights(name: str) -> Path | None:
    """Where the method's weights for the bundled target ship (None: it has none)."""
    m = method(name)
    return BUNDLED_DIR / m.bundled if m.bundled else None


def shipped_weights(name: str, target: torch.nn.Module | None) -> Path | None:
    """Where the method's weights for `target` ship (any pair's folder, found by the target fingerprint
    the weights record: speclab.methods.shipped; target None: the bundled target's), or None."""
    m = method(name)
    return shipped.find_shipped(m.bundled, target) if m.bundled else None


def _engine_head(m: Method, directory: Path, target: torch.nn.Module | None, engine: str | None):
    """A head exported for (or published in the layout of) vLLM or SGLang, read into speclab's head."""
    held = checkpoints.engine_method(directory)
    if held != m.name:
        raise ValueError(f"{directory} holds a {held} head in an engine's layout; load it with "
                         f"load_drafter({held!r}, target, {m.weights}=...)")
    if target is None:
        raise ValueError(f"a head in an engine's layout is read for a target: pass the target model "
                         f"(load_drafter({m.name!r}, target, {m.weights}=...))")
    return checkpoints.read_head(directory, target, engine)


def load_drafter(method_name: str, target: torch.nn.Module | None = None, **options) -> Drafter:
    """A drafter by method name (vLLM's names), for `target` (None: the bundled target), with the method's
    options (REGISTRY[name].options; other engines' names for them are accepted too: Method.aliases).

    Trained weights not given are those shipped for `target`, found by the target fingerprint they record
    (speclab.methods.shipped); where none ship, the error names the train command. A weights directory in
    vLLM's or SGLang's layout (speclab.methods.checkpoints) is read into speclab's head; engine="vllm" or
    "sglang" says how to read its EAGLE-3 layer ids where the layout leaves them open.
    """
    m = method(method_name)
    options = rename_aliases(options, m.aliases)
    if m.on_target and target is None:
        target = load_pair(device="cpu").target
    engine = options.pop("engine", None)
    if m.weights and isinstance(options.get(m.weights), (str, Path)) and checkpoints.engine_method(options[m.weights]):
        options[m.weights] = _engine_head(m, Path(options[m.weights]), target, engine)
    elif engine is not None:
        raise ValueError(f"engine= says how to read a head in an engine's layout (vllm or sglang); "
                         f"{options.get(m.weights)!r} is not one")
    if m.weights and options.get(m.weights) is None:
        options[m.weights] = shipped_weights(m.name, target)
        if options[m.weights] is None:
            raise shipped.not_shipped(m.name, m.weights, m.train, m.bundled, target)
    return m.load(target, **options)


__all__ = ["METHODS", "REGISTRY", "CardSection", "Method", "bench_row", "by_bench_row", "bundled_weights",
           "current_row", "draft_model_method", "drafter_for_model", "load_drafter", "method", "rename_aliases",
           "shipped_weights", "trained_drafters"]
