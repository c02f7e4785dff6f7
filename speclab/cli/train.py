"""`python -m speclab train`: the command line of speclab.train (HELP is what --help prints first)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from speclab.cli.main import PROG
from speclab.cli.main import main as speclab_main
from speclab.methods import Method, draft_model_method
from speclab.methods.eagle import describe_tree
from speclab.models import CONVERTED_PAIRS
from speclab.packaged import ensure_converted
from speclab.train.answers import self_answers
from speclab.train.data import scaled_steps
from speclab.train.eagle import EAGLE_INPUTS, EAGLE_PRESETS, train_eagle
from speclab.train.eagle import METHODS as EAGLE
from speclab.train.exit import EXIT_PRESETS, train_exit
from speclab.train.exit import METHOD as LAYER_SKIP
from speclab.train.install import install
from speclab.train.medusa import MEDUSA_PRESETS, choose_medusa_tree, train_medusa
from speclab.train.medusa import METHOD as MEDUSA
from speclab.train.mtp import METHOD as MTP
from speclab.train.mtp import train_mtp
from speclab.train.pair import PRESETS, install_pair, train_draft, train_pair
from speclab.train.parallel_draft import METHOD as PARD
from speclab.train.parallel_draft import PRESETS as PARD_PRESETS
from speclab.train.parallel_draft import train_parallel_draft
from speclab.train.shared_draft import PRESETS as SHARED_PRESETS
from speclab.train.scaling import POINTS as SCALE_POINTS
from speclab.train.scaling import STREAM_FILES, bench_argv, scale
from speclab.train.shared_draft import train_shared_draft
from speclab.train.tuning import CANDIDATES, PROMPTS, choose_eagle_tree

TARGET_HELP = ("target model: a local directory (the bundled one is speclab/pairs/stdlib/target), a hub id, or a "
               "converted pair's name (smollm2)")
DRAFT = draft_model_method()  # the draft command's registry entry
CONVERSATIONS_HELP = ("chat presets: how many of out/chat_conversations.pt's conversations to train on (the "
                      "target answers any missing, continuing the same stream); without --steps, the preset's steps "
                      "scale with them, so every data point trains the same steps per conversation")


HELP = """Train the course's bundled pair (a tokenizer, a target, and a draft distilled from the target), and
drafters for a frozen target: drafts, Medusa heads, EAGLE heads, an MTP module, exit adapters.

    python -m speclab train pair --out runs/stdlib          # target and drafts (resumable)
    python -m speclab train pair --out /tmp/micro --preset micro   # a few-second smoke run
    python -m speclab train draft --target DIR --out runs/draft   # a new draft for an existing target
    python -m speclab train medusa --target DIR --out runs/medusa # Medusa heads for a frozen target
    python -m speclab train eagle --target DIR --out runs/eagle   # an EAGLE-1 head (eagle3, mtp: the others)
    python -m speclab train exit --target DIR --out runs/eagle    # layer-skip exit adapters
    python -m speclab train pard --target DIR --out runs/pard     # a parallel draft (K tokens a pass)
    python -m speclab train shared-draft --target smollm2 --out runs/smollm2 --preset smollm2
                                        # a draft reading SmolLM2's embeddings, over a draft vocabulary
    python -m speclab train answers --target smollm2 --out runs/smollm2-scale --conversations 14000
                                        # the target's own chat answers, batched on the fast path (resumable;
                                        # --requests varied goes on in more forms)
    python -m speclab train scale --target smollm2 --stream runs/smollm2-scale --points 1400,4000,14000
                                        # EAGLE-3 head and draft on the first N of those answers, each N
    python -m speclab train eagle-tree --target smollm2 --head speclab/pairs/smollm2/eagle3 --prompts chat
                                        # EAGLE-2's settings for a trained head, timed on this machine

--target takes a directory, a hub id, or the name of a converted pair (smollm2: its cached conversion);
--install then copies into that pair's folder (speclab/pairs/smollm2), where load_drafter finds it.

Every stage saves a checkpoint and is skipped or resumed when the command is run again, so a long
run can be stopped (Ctrl-C, or --stop-after-minutes) and continued later, on CPU or CUDA.
Batches are drawn from a generator seeded by (seed, step), so a resumed run sees the same data as an
uninterrupted one.
"""


def install_help(what: str, method: Method, pronoun: str = "them", options: str = "") -> str:
    """--install's help: where the trained `what` is copied, beside the bundled target, and what loads it."""
    return (f"when done, copy the {what} into the package, into the target's pair folder (speclab/pairs/stdlib/"
            f"{method.bundled} for the bundled target, speclab/pairs/smollm2/... for --target smollm2), where "
            f"load_drafter({method.name!r}{options}) finds {pronoun}")


def add_pair_commands(sub) -> None:
    pair = sub.add_parser("pair", help="train tokenizer, target and drafts (resumable)")
    draft = sub.add_parser(DRAFT.train, help="train drafts for an existing target (resumable)")
    draft.add_argument("--target", required=True, help=TARGET_HELP)
    for cmd in (pair, draft):
        cmd.add_argument("--out", type=Path, required=True, help="output folder (checkpoints and exported models)")
        cmd.add_argument("--preset", choices=sorted(PRESETS), default="stdlib")
        cmd.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
        cmd.add_argument("--seed", type=int, default=0)
        cmd.add_argument("--draft-steps", type=int, help="override the preset's draft steps")
        cmd.add_argument("--draft-layers", type=int, help="override the preset's draft depth")
        cmd.add_argument("--stop-after-minutes", type=float,
                         help="checkpoint and stop after this long; rerun to resume")
        cmd.add_argument("--no-amp", action="store_true", help="train in fp32 even where bf16 autocast is supported")
        cmd.add_argument("--no-plain-draft", action="store_true", help="skip the plainly trained comparison draft")
        cmd.add_argument("--install", action="store_true", help="when done, copy the result into the package "
                         "(speclab/pairs/stdlib), where load_pair() finds it")
        cmd.set_defaults(run=run_pair)
    pair.add_argument("--target-steps", type=int, help="override the preset's target steps")


def add_medusa_command(sub) -> None:
    m = MEDUSA
    cmd = sub.add_parser(m.train, help="train Medusa heads for a frozen target (resumable)")
    cmd.add_argument("--target", required=True, help=TARGET_HELP)
    cmd.add_argument("--out", type=Path, required=True, help="output folder (features, checkpoint, heads)")
    cmd.add_argument("--preset", choices=sorted(MEDUSA_PRESETS), default="stdlib")
    cmd.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    cmd.add_argument("--seed", type=int, default=0)
    cmd.add_argument("--heads", type=int, help="number of heads (default 4)")
    cmd.add_argument("--steps", type=int, help="override the preset's training steps")
    cmd.add_argument("--stop-after-minutes", type=float, help="checkpoint and stop after this long; rerun to resume")
    cmd.add_argument("--install", action="store_true", help=install_help("heads", m))
    cmd.set_defaults(run=run_medusa)


def add_head_commands(sub) -> None:
    """eagle, eagle3 and mtp: a head on the target's features, trained with the same options."""
    heads = ((EAGLE[1], 1, "an EAGLE-1 head (feature regression)"),
             (EAGLE[3], 3, "an EAGLE-3 head (fused low/middle/high layers, training-time test)"),
             (MTP, None, "a DeepSeek-V3-style MTP module (one step deep, on the last features)"))
    for method, version, what in heads:
        then = "" if version is None else "; then time EAGLE-2's settings with it and write the fastest to tree.json"
        cmd = sub.add_parser(method.train, help=f"train {what} for a frozen Llama-family target (resumable){then}")
        cmd.add_argument("--target", required=True, help=TARGET_HELP)
        cmd.add_argument("--out", type=Path, required=True, help="output folder (features, checkpoint, head); "
                         f"the folder of train {MEDUSA.train} reuses its cached features")
        cmd.add_argument("--preset", choices=sorted(EAGLE_PRESETS), default="stdlib")
        cmd.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
        cmd.add_argument("--seed", type=int, default=0)
        cmd.add_argument("--steps", type=int, help="override the preset's training steps")
        cmd.add_argument("--generated", type=int, help="how many of the target's own continuations to train on "
                         f"besides the corpus rows (default {EAGLE_PRESETS['stdlib'].generated}; each shipped "
                         "head's record says what it was trained with)")
        if version == 3:
            cmd.add_argument("--ttt-steps", type=int, help="steps unrolled in training (default 4)")
            cmd.add_argument("--draft-vocab", type=int, help="the head's draft vocabulary: the N tokens most "
                             "frequent in the training rows (default: "
                             f"{EAGLE_PRESETS['stdlib'].draft_vocab or 'the whole vocabulary'})")
        else:
            cmd.add_argument("--inputs", choices=EAGLE_INPUTS, default="feature+token", help="what the head "
                             "reads (the EAGLE paper's ablation; chapter 8): feature+token (EAGLE), or a head "
                             "that is only measured: feature (no token) or token (no feature)")
        cmd.add_argument("--conversations", type=int, help=CONVERSATIONS_HELP)
        cmd.add_argument("--stop-after-minutes", type=float, help="checkpoint and stop after this long; rerun to "
                         "resume")
        cmd.add_argument("--install", action="store_true", help=install_help("head", method, "it"))
        cmd.set_defaults(run=run_head, method=method, version=version)


def add_shared_draft_command(sub) -> None:
    cmd = sub.add_parser("shared-draft", help="train a draft that reads the target's embeddings and drafts over a "
                         "reduced vocabulary, for a target without a small sibling (resumable)")
    cmd.add_argument("--target", required=True, help=TARGET_HELP)
    cmd.add_argument("--out", type=Path, required=True, help="output folder (conversations, features, checkpoint, "
                     "draft); the EAGLE-3 head of the same preset reuses its cached features")
    cmd.add_argument("--preset", choices=sorted(SHARED_PRESETS), default="smollm2")
    cmd.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    cmd.add_argument("--seed", type=int, default=0)
    cmd.add_argument("--layers", type=int, help="decoder layers, from the target's first (default 2)")
    cmd.add_argument("--draft-vocab", type=int, help="output rows: the N tokens most frequent in the training rows")
    cmd.add_argument("--steps", type=int, help="override the preset's training steps")
    cmd.add_argument("--conversations", type=int, help=CONVERSATIONS_HELP)
    cmd.add_argument("--stop-after-minutes", type=float, help="checkpoint and stop after this long; rerun to resume")
    cmd.add_argument("--install", action="store_true", help="when done, copy the draft into the target's pair "
                     "folder (speclab/pairs/<pair>/draft), where load_pair finds it")
    cmd.set_defaults(run=run_shared_draft)


def add_exit_command(sub) -> None:
    m = LAYER_SKIP
    cmd = sub.add_parser(m.train, help="train layer-skip exit adapters (a tuned lens per exit layer) for a frozen "
                         "Llama-family target (resumable)")
    cmd.add_argument("--target", required=True, help=TARGET_HELP)
    cmd.add_argument("--out", type=Path, required=True, help="output folder (features, checkpoint, adapters); the "
                     f"folder of train {MEDUSA.train} / {EAGLE[1].train} reuses its cached rows")
    cmd.add_argument("--exit-layers", default=None, help="comma-separated exit layers (default: every second "
                     "layer, 2 to L-2)")
    cmd.add_argument("--preset", choices=sorted(EXIT_PRESETS), default="stdlib")
    cmd.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    cmd.add_argument("--seed", type=int, default=0)
    cmd.add_argument("--steps", type=int, help="override the preset's steps per adapter")
    cmd.add_argument("--install", action="store_true", help=install_help("adapters", m, options=", adapter=True"))
    cmd.set_defaults(run=run_exit)


def add_parallel_draft_command(sub) -> None:
    m = PARD
    cmd = sub.add_parser(m.train, help="adapt a draft model into a parallel draft (PARD: K tokens from one pass "
                         "over mask tokens) for a frozen target (resumable)")
    cmd.add_argument("--target", required=True, help=TARGET_HELP)
    cmd.add_argument("--out", type=Path, required=True, help="output folder (features, checkpoint, the draft)")
    cmd.add_argument("--draft", help="the draft model adapted (default: the bundled draft)")
    cmd.add_argument("--k", type=int, help="tokens drafted per pass it is trained for (default 4)")
    cmd.add_argument("--preset", choices=sorted(PARD_PRESETS), default="stdlib")
    cmd.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    cmd.add_argument("--seed", type=int, default=0)
    cmd.add_argument("--steps", type=int, help="override the preset's training steps")
    cmd.add_argument("--stop-after-minutes", type=float, help="checkpoint and stop after this long; rerun to resume")
    cmd.add_argument("--install", action="store_true", help=install_help("parallel draft", m, "it"))
    cmd.set_defaults(run=run_parallel_draft)


def add_answers_command(sub) -> None:
    cmd = sub.add_parser("answers", help="the target's own answers to everyday chat requests, the rows its chat "
                         "drafters train on, batched on the fast path (resumable); train shared-draft and eagle3 "
                         "with the same --out read the first --conversations of them")
    cmd.add_argument("--target", required=True, help=TARGET_HELP)
    cmd.add_argument("--out", type=Path, required=True, help="output folder (out/chat_conversations.pt and "
                     "out/answers.json, the run's tokens and tokens per second)")
    cmd.add_argument("--conversations", type=int, default=14000, help="how many (14,000: about 3.5M tokens)")
    cmd.add_argument("--batch", type=int, default=64, help="requests answered at once")
    cmd.add_argument("--requests", choices=("everyday", "varied"), default="everyday",
                     help="everyday: chat_requests' forms; varied: more forms with follow-ups of their category "
                     "(speclab.train.varied_requests); a stream of everyday requests goes on with varied ones")
    cmd.add_argument("--seed", type=int, default=0)
    cmd.add_argument("--threads", type=int, help="CPU threads (default: torch's)")
    cmd.add_argument("--stop-after-minutes", type=float, help="save and stop after this long; rerun to resume")
    cmd.add_argument("--packed", type=Path, help="restore the stream from this folder first and pack it there "
                     "after every 512 conversations (uint16 parts written once each, small enough to commit): "
                     "SmolLM2's is speclab/pairs/smollm2/answers")
    cmd.set_defaults(run=run_answers)


def add_scale_command(sub) -> None:
    cmd = sub.add_parser("scale", help="the EAGLE-3 head and the shared-embedding draft trained on the first N "
                         "conversations of `train answers`' stream, at several N (a data-scaling curve; resumable)")
    cmd.add_argument("--target", required=True, help=TARGET_HELP)
    cmd.add_argument("--stream", type=Path, required=True, help="the --out of `train answers`; each point trains "
                     "in STREAM/cN/, the curve goes to STREAM/curve.json")
    cmd.add_argument("--points", default=",".join(map(str, SCALE_POINTS)),
                     type=lambda text: [int(n) for n in text.split(",")], help="conversations at each point "
                     f"(default {','.join(map(str, SCALE_POINTS))}: about 0.35M, 1M and 3.5M tokens)")
    cmd.add_argument("--preset", choices=sorted(set(EAGLE_PRESETS) & set(SHARED_PRESETS)), default="smollm2-everyday")
    cmd.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    cmd.add_argument("--stop-after-minutes", type=float, help="checkpoint and stop after this long; rerun to resume")
    cmd.add_argument("--bench", action="store_true", help="time each trained point: its head's EAGLE-2 settings chosen "
                     "on the chat tuning requests (where it has none), then its bench command (held-out chat "
                     "prompts, target-only beside both drafters, eager and fast) into STREAM/cN/bench.json; run it "
                     "with nothing else on the machine")
    cmd.add_argument("--train-only", action="store_true", help="train each point's drafters and stop: neither the "
                     "same prompts scored nor STREAM/curve.json written (for a GPU lent for minutes; the same "
                     "command without it then scores and writes the curve)")
    cmd.set_defaults(run=run_scale)


def add_eagle_tree_command(sub) -> None:
    cmd = sub.add_parser("eagle-tree", help="time EAGLE-2's settings for a trained EAGLE head on this machine and "
                         "write the fastest, greedy and sampled, to its tree.json (what train eagle and eagle3 run "
                         "when training ends; load_drafter reads it)")
    cmd.add_argument("--target", required=True, help=TARGET_HELP)
    cmd.add_argument("--head", type=Path, required=True,
                     help="the head's directory (e.g. speclab/pairs/smollm2/eagle3)")
    cmd.add_argument("--prompts", choices=PROMPTS, default="code", help="what the settings are timed on: held-out "
                     "library code, or chat requests (a chat target's; none is a bench prompt) in the everyday "
                     "forms (chat) or the varied ones (varied: for a head whose training used up the everyday "
                     "forms' requests)")
    cmd.add_argument("--trained-on", type=Path, default=None, help="with --prompts chat or varied: the "
                     "chat_conversations.pt "
                     "the head learnt from; every request it holds is skipped (default: the one beside the head, "
                     "if any)")
    cmd.add_argument("--candidates", choices=sorted(CANDIDATES), default="deep", help="the settings tried: deep "
                     "chains and trees (a head accepted often), or short ones (a head accepted under half the time)")
    cmd.add_argument("--num-prompts", type=int, default=8)
    cmd.add_argument("--max-new-tokens", type=int, default=128)
    cmd.add_argument("--repeats", type=int, default=3, help="timed runs of each setting (the median counts)")
    cmd.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    cmd.set_defaults(run=run_eagle_tree)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"{PROG} train", description=HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    add_pair_commands(sub)
    add_medusa_command(sub)
    add_head_commands(sub)
    add_exit_command(sub)
    add_shared_draft_command(sub)
    add_parallel_draft_command(sub)
    add_answers_command(sub)
    add_scale_command(sub)
    add_eagle_tree_command(sub)
    return parser


# ---------------------------------------------------------------- what each command runs
def run_pair(args) -> None:
    common = dict(preset=args.preset, device=args.device, seed=args.seed, stop_after_minutes=args.stop_after_minutes,
                  plain_draft=not args.no_plain_draft, amp=False if args.no_amp else None,
                  draft_steps=args.draft_steps, draft_layers=args.draft_layers)
    if args.command == "pair":
        report = train_pair(args.out, target_steps=args.target_steps, **common)
    else:
        report = train_draft(args.target, args.out, **common)
    for stage in ("target", "draft", "draft_plain"):
        if stage in report:
            last = report[stage]["evals"][-1]
            print(f"{stage}: held-out loss {last['heldout_loss']:.3f} after {last['step']} steps, "
                  f"{report[stage]['seconds'] / 60:.1f} min, {report[stage]['tokens_per_s']:.0f} tokens/s")
    if args.install:
        print(f"installed into {install_pair(args.out)}")


def run_medusa(args) -> None:
    folder = MEDUSA.bundled
    report = train_medusa(args.target, args.out, preset=args.preset, device=args.device, seed=args.seed,
                          stop_after_minutes=args.stop_after_minutes, num_heads=args.heads, steps=args.steps)
    last = report["log"]["evals"][-1]
    print(f"{args.command}: held-out loss {last['heldout_loss']:.3f}, top-1 accuracy by head {last['heldout_top1']}, "
          f"{report['log']['seconds'] / 60:.1f} min")
    choice = choose_medusa_tree(args.target, args.out / folder, args.device)
    print("tree by node budget (verify pass cost in one-token decode steps, measured here):")
    for row in choice["table"]:
        print(f"  {row['budget']:3d} nodes, depth {row['depth']}: {row['tokens_per_pass']:.2f} tokens/pass "
              f"modelled, pass cost {row['pass_cost']:.2f} -> {row['modelled_speedup']:.2f}x")
    print(f"chosen: {choice['budget']} nodes (written to {args.out / folder / 'tree.json'})")
    if args.install:
        print(f"installed into {install(args.out, folder, pair_folder(args))}")


def run_head(args) -> None:
    preset = EAGLE_PRESETS[args.preset]
    base_steps = {1: preset.steps, 3: preset.eagle3_steps, None: preset.mtp_steps}[args.version]
    steps = scaled_steps(preset, args.conversations, args.steps, base_steps)
    common = dict(preset=args.preset, device=args.device, seed=args.seed, stop_after_minutes=args.stop_after_minutes,
                  steps=steps, generated=args.generated, conversations=args.conversations)
    if args.version is None:
        if args.inputs != "feature+token":
            raise ValueError(f"inputs must be one of {EAGLE_INPUTS} (EAGLE-1 only), got {args.inputs!r}")
        report = train_mtp(args.target, args.out, **common)
    else:
        report = train_eagle(args.target, args.out, version=args.version, ttt_steps=getattr(args, "ttt_steps", None),
                             draft_vocab=getattr(args, "draft_vocab", None),
                             inputs=getattr(args, "inputs", "feature+token"), **common)
    last = report["log"]["evals"][-1]
    print(f"{args.command}: held-out loss {last['heldout_loss']:.4f}, top-1 by draft position "
          f"{last['heldout_top1_by_step']}, {report['log']['seconds'] / 60:.1f} min")
    folder = args.method.bundled
    if args.version is not None and report["inputs"] == "feature+token":
        choose_preset_tree(args.target, args.out / folder, args.device, args.preset)
    if args.install:
        if report["inputs"] != "feature+token":
            raise SystemExit("an ablation head (--inputs feature or token) is measured, not installed")
        print(f"installed into {install(args.out, folder, pair_folder(args))}")


def choose_preset_tree(target: str, head_dir: Path, device: str, preset: str, forms: str = "chat",
                       training: Path | None = None) -> None:
    """choose_tree with the tuning the head's training preset names (its corpus's prompts, sizes, candidates):
    for a chat corpus, requests in `forms` ("chat", the everyday ones, or "varied") drawn outside `training`
    (default: the conversations it learnt from, beside it in its --out)."""
    m = EAGLE_PRESETS[preset]
    chat = m.corpus == "chat"
    choose_tree(target, head_dir, device, prompts=forms if chat else "code",
                candidate_set=m.tree_candidates, num_prompts=m.tree_prompts, max_new_tokens=m.tree_tokens,
                repeats=m.tree_repeats, training=(training or conversations_beside(head_dir)) if chat else None)


def conversations_beside(head_dir: Path) -> Path | None:
    """The chat_conversations.pt a head learnt from, where train eagle3 and train scale keep it (its --out)."""
    path = head_dir.parent / "chat_conversations.pt"
    return path if path.exists() else None


def choose_tree(target: str, head_dir: Path, device: str, **tuning) -> None:
    """Time EAGLE-2's settings with a trained head, greedy and sampled, and write the fastest to its
    tree.json (speclab.train.tuning.choose_eagle_tree, with `tuning`'s prompts, sizes and candidates)."""
    for temperature in (0.0, 1.0):  # greedy rounds and sampled ones want different trees
        started = time.perf_counter()
        choice = choose_eagle_tree(target, head_dir, device=device, temperature=temperature, **tuning)
        print(f"EAGLE-2 settings timed against target-only at temperature {temperature:g} on "
              f"{choice['prompts']} ({(time.perf_counter() - started) / 60:.1f} min):")
        for row in choice["table"]:
            print(f"  {describe_tree(row)}: {row['tokens_per_pass']:.2f} tokens/pass, {row['speedup']:.2f}x")
        print(f"chosen: {describe_tree(choice)} (written to {head_dir / 'tree.json'})")


def run_answers(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    report = self_answers(args.target, args.out, args.conversations, batch=args.batch, seed=args.seed,
                          stop_after_minutes=args.stop_after_minutes, requests=args.requests, packed=args.packed)
    print(f"{report['conversations']} conversations, {report['tokens']:,} tokens ({report['answer_tokens']:,} "
          f"written by the target) at {report['answer_tokens_per_s']:.0f} tokens/s over the batches' wall time "
          f"(pauses included); the median batch: {report['median_batch_tokens_per_s']} tokens/s; record: "
          f"{args.out / 'answers.json'}")
    for each in report["hosts"]:  # a stream restored from packed parts was answered on earlier machines
        print(f"  {each['batches']} batches on {each['host'] or 'a machine not recorded'}: the median batch "
              f"{each['median_batch_tokens_per_s']} tokens/s")


def run_scale(args) -> None:
    curve = scale(args.target, args.stream, args.points, args.preset, args.device, args.stop_after_minutes, args.pair,
                  (lambda point: time_point(args, point)) if args.bench else None, args.train_only)
    for p in curve["points"]:
        print(f"{p['conversations']:>6} conversations, {p['tokens']:>9,} tokens: EAGLE-3 top-1 by position "
              f"{p['head']['heldout_top1_by_step']}, draft top-1 {p['draft']['heldout_top1']}")
        for name in ("head", "draft"):
            for path, best in p.get("speeds", {}).get(name, {}).items():
                print(f"    {name} {path}: {best['speedup']:.2f}x target-only ({best['row']}, "
                      f"{best['tokens_per_round']:.2f} tokens a round)")
    if args.train_only:
        print(f"trained; {args.stream / 'curve.json'} not written: the same command without --train-only scores the "
              "points on the same prompts and writes it")
        return
    print(f"curve: {args.stream / 'curve.json'}" + ("" if args.bench else "; time each point with --bench (or its "
                                                     "'bench' command)"))


def time_point(args, point: Path) -> None:
    """A trained point of `train scale` timed as `train eagle3` and `bench` time a head: its EAGLE-2 settings
    chosen as its preset's training would choose them (where it has none), then the point's bench run
    (scaling.bench_argv)."""
    head = point / EAGLE[3].bundled
    if not (head / "tree.json").exists():
        # every point of a curve tuned alike, on requests none of the stream's conversations holds: in the varied
        # forms, since by 14,000 conversations the everyday forms' qa and code requests are used up
        choose_preset_tree(args.target, head, args.device, args.preset, forms="varied",
                           training=args.stream / STREAM_FILES[0])
    speclab_main(bench_argv(point, args.pair or args.target, args.device))


def run_eagle_tree(args) -> None:
    chat = args.prompts in ("chat", "varied")
    trained_on = args.trained_on or (conversations_beside(args.head) if chat else None)
    if trained_on is not None and not chat:
        raise SystemExit("--trained-on applies to --prompts chat or varied: code prompts are held out by "
                         "construction")
    choose_tree(args.target, args.head, args.device, prompts=args.prompts, candidate_set=args.candidates,
                num_prompts=args.num_prompts, max_new_tokens=args.max_new_tokens, repeats=args.repeats,
                training=trained_on)


def run_exit(args) -> None:
    layers = [int(x) for x in args.exit_layers.split(",")] if args.exit_layers else None
    report = train_exit(args.target, args.out, layers, preset=args.preset, device=args.device, seed=args.seed,
                        steps=args.steps)
    for layer, entry in report["layers"].items():
        print(f"exit after layer {layer}: held-out top-1 agreement with the target {entry['top1_plain']:.3f} "
              f"without the adapter, {entry['top1_adapter']:.3f} with it")
    if args.install:
        print(f"installed into {install(args.out, LAYER_SKIP.bundled, pair_folder(args))}")


def run_shared_draft(args) -> None:
    report = train_shared_draft(args.target, args.out, preset=args.preset, device=args.device, seed=args.seed,
                                stop_after_minutes=args.stop_after_minutes, layers=args.layers,
                                draft_vocab=args.draft_vocab, conversations=args.conversations,
                                steps=scaled_steps(SHARED_PRESETS[args.preset], args.conversations, args.steps,
                                                SHARED_PRESETS[args.preset].steps))
    last = report["log"]["evals"][-1]
    print(f"shared-draft: held-out loss {last['heldout_loss']:.4f}, top-1 agreement with the target "
          f"{last['heldout_top1']:.3f}; the draft vocabulary holds {report['draft_vocab']['heldout_coverage']:.1%} "
          f"of the target's held-out tokens; {report['log']['seconds'] / 60:.1f} min")
    if args.install:
        print(f"installed into {install(args.out, 'draft', pair_folder(args))}")


def run_parallel_draft(args) -> None:
    report = train_parallel_draft(args.target, args.out, preset=args.preset, device=args.device, seed=args.seed,
                                  stop_after_minutes=args.stop_after_minutes, steps=args.steps, k=args.k,
                                  draft=args.draft)
    last = report["log"]["evals"][-1]
    print(f"{args.command}: held-out loss {last['heldout_loss']:.4f}, top-1 agreement with the target by depth "
          f"{last['heldout_top1_by_depth']}, {report['log']['seconds'] / 60:.1f} min")
    if args.install:
        print(f"installed into {install(args.out, PARD.bundled, pair_folder(args))}")


def resolve_target(args) -> None:
    """A converted pair's name as --target becomes its cached directory (converted on first use); the
    name is kept in args.pair for --install."""
    args.pair = args.target if args.target in CONVERTED_PAIRS else None
    if args.pair:
        args.target = str(ensure_converted(CONVERTED_PAIRS[args.pair].packaged))


def pair_folder(args) -> Path | None:
    """Where --install copies: the named pair's folder, else (None) beside the bundled target."""
    return CONVERTED_PAIRS[args.pair].folder if args.pair else None


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if hasattr(args, "target"):
        resolve_target(args)
    args.run(args)


if __name__ == "__main__":
    main()
