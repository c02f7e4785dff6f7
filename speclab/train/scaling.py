"""How a chat target's drafters grow with data: the EAGLE-3 head and the shared-embedding draft trained on
the first N conversations of one stream of the target's own answers (speclab.train.answers), at several
N, with the same recipe and the same steps per conversation at every N (data.scaled_steps).

    python -m speclab train scale --target smollm2 --stream runs/smollm2-scale --points 1400,4000,14000

Each point is frozen into stream/cN/ (its first N conversations and passage material, copied) and trained
there. Its held-out rows, its own last twentieth, are scored at every position and at the answers' alone
(chat_data.answer_next). Every point decodes the same prompts, requests in the stream's forms that none of
its conversations holds and the chat workloads' hand-written prompts (same_prompts), for tokens a round that
need no quiet machine; the sets are drawn once, and a request that a later, larger point trained on is left
out at every point. The speeds come from `bench` on
the workloads' hand-written chat prompts, which no training request shares, and so do the rounds in the loop
(in_loop_acceptance); beside them, the head's EAGLE-2 timing on held-out requests (request_speeds).
"""
from __future__ import annotations

import hashlib
import json
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from speclab import shared_draft
from speclab.decoding import speculative_generate
from speclab.devices import pick_device
from speclab.measure.bench import FAST
from speclab.measure.workloads import CHAT, CHAT_CATEGORIES, encode_chat, load_chats
from speclab.methods import draft_model_method, load_drafter
from speclab.methods.eagle import FeatureHead, describe_tree
from speclab.models import CONVERTED_PAIRS, load_model, load_pair, load_tokenizer
from speclab.packaged import ensure_converted
from speclab.train.answers import median_batch_rate, rates_by_host
from speclab.train import chat_requests
from speclab.train.chat_data import answer_next, check_disjoint, stream_kinds
from speclab.train.chat_requests import TUNING_CATEGORIES
from speclab.train.data import hardware, scaled_steps
from speclab.train.eagle import EAGLE_PRESETS, train_eagle, unrolled_accuracy
from speclab.train.eagle import METHODS as EAGLE
from speclab.train.shared_draft import PRESETS as SHARED_PRESETS
from speclab.train.shared_draft import draft_loss, train_shared_draft
from speclab.train.varied_requests import held_out_requests
from speclab.train.loop import deadline_after, minutes_left, save_whole

POINTS = (1400, 4000, 14000)  # 0.35M, 1M and 3.5M tokens of SmolLM2's answers (issue 67)
STREAM_FILES = ("chat_conversations.pt", "everyday_material.pt")


def freeze_point(stream: Path, n: int) -> Path:
    """stream/cN/ holding the stream's first n conversations (and its passage material); a ValueError
    naming the command that answers more when the stream holds fewer."""
    path = stream / STREAM_FILES[0]
    state = torch.load(path) if path.exists() else {"conversations": []}
    have = len(state["conversations"])
    if have < n:
        raise ValueError(f"{stream} holds {have} conversations, not {n}: let `python -m speclab train answers "
                         f"--out {stream} --conversations {n}` answer the rest first (with `--packed DIR` it "
                         "first restores a packed stream, such as SmolLM2's in speclab/pairs/smollm2/answers)")
    point = stream / f"c{n}"
    point.mkdir(exist_ok=True)
    frozen = point / STREAM_FILES[0]
    if not frozen.exists():
        kept = {**state, "conversations": state["conversations"][:n],
                "continued": [c for c in state.get("continued", []) if c[1] < n]}  # the kinds these n hold
        # the counts of the whole stream do not describe the first n: a point's tokens are counted from its rows
        kept.pop("answer_tokens", None), kept.pop("answer_seconds", None)
        kept["seconds"] = state["seconds"] * n / have
        save_whole(kept, frozen)
    if (stream / STREAM_FILES[1]).exists() and not (point / STREAM_FILES[1]).exists():
        shutil.copy(stream / STREAM_FILES[1], point / STREAM_FILES[1])
    return point


def _trained(record: Path, steps: int | None, answers_only: bool) -> bool:
    """Whether `record` (written when a trainer ends) holds a drafter trained for `steps` steps on the positions
    the preset asks for (every one, or the answers' alone)."""
    if not record.exists():
        return False
    preset = json.loads(record.read_text())["preset"]
    return preset["steps"] == steps and preset.get("answers_only", False) == answers_only


def train_point(target: str, stream: Path, n: int, preset: str = "smollm2-everyday", device: str | None = None,
                stop_after_minutes: float | None = None, pair: str | None = None,
                bench: Callable[[Path], object] | None = None) -> dict:
    """Both drafters trained on the first n conversations (resumable: each trainer checkpoints in cN/; a
    drafter whose record says it ran this point's steps is done), then timed by `bench(point)` (the command
    line's: it times the head's tree settings where it has none, then runs bench_argv) unless cN/bench.json
    holds the timing of these drafters; returns the point's summary (point_summary). `stop_after_minutes` is
    the two trainers' together: the draft gets what the head left."""
    deadline = deadline_after(stop_after_minutes)
    point = freeze_point(stream, n)
    eagle, draft = EAGLE_PRESETS[preset], SHARED_PRESETS[preset]
    head_steps = scaled_steps(eagle, n, None, eagle.eagle3_steps)
    draft_steps = scaled_steps(draft, n, None, draft.steps)
    if not _trained(point / EAGLE[3].bundled / "record.json", head_steps, eagle.answers_only):
        for timed in (point / "bench.json", point / EAGLE[3].bundled / "tree.json", point / "answers.json"):
            timed.unlink(missing_ok=True)  # they timed or scored another head
        train_eagle(target, point, preset, device=device, version=3, conversations=n, steps=head_steps,
                    stop_after_minutes=minutes_left(deadline))
    if not _trained(point / "draft" / "record.json", draft_steps, draft.answers_only):
        for timed in (point / "bench.json", point / "answers.json"):
            timed.unlink(missing_ok=True)
        train_shared_draft(target, point, preset, device=device, conversations=n, steps=draft_steps,
                           stop_after_minutes=minutes_left(deadline))
    if not _answers_scored(point):
        score_answers(target, point, eagle.eval_depth, device)
    if bench is not None and not (point / "bench.json").exists():
        bench(point)
    return point_summary(point, pair or target)


def _answers_scored(point: Path) -> bool:
    """Whether both drafters' records (or point/answers.json, for records from before) hold top-1 on answers."""
    if (point / "answers.json").exists():
        return True
    head = json.loads((point / EAGLE[3].bundled / "record.json").read_text())["log"]["evals"][-1]
    draft = json.loads((point / "draft" / "record.json").read_text())["log"]["evals"][-1]
    return "heldout_answer_top1_by_step" in head and "heldout_answer_top1" in draft


@torch.no_grad()
def score_answers(target: str, point: Path, depth: int, device: str | None = None) -> dict:
    """Held-out top-1 on the answers' positions (chat_data.answer_next) of a point's EAGLE-3 head (by draft
    position, `depth` deep) and draft, for records written before their trainers kept it: scored from the saved
    drafters and the point's cached features, and kept in point/answers.json."""
    dev = pick_device(device)
    target_model = load_model(target, dev, torch.float32)
    features = torch.load(point / "features.pt", mmap=True)
    layered = torch.load(point / "features_layers.pt", mmap=True)
    rows, final = features["heldout_rows"].long().to(dev), features["heldout"].to(dev, torch.float32)
    answers = answer_next(features["heldout_rows"], load_tokenizer(target)).to(dev)
    embed, lm_head = target_model.get_input_embeddings(), target_model.get_output_embeddings()
    head = FeatureHead.load(point / EAGLE[3].bundled, dev)
    draft = shared_draft.load(point / "draft", target_model, torch.float32)
    scored = {"head": unrolled_accuracy(head, embed, lm_head, rows, layered["heldout"].to(dev, torch.float32), final,
                                        depth, answers),
              "draft": round(draft_loss(draft, rows, final, features["heldout_next"].long().to(dev), lm_head,
                                        answers)[2], 4)}
    (point / "answers.json").write_text(json.dumps(scored) + "\n")
    return scored


def bench_argv(point: Path, pair: str = "smollm2", device: str | None = None) -> list[str]:
    """`python -m speclab bench`'s arguments that time a point on the workloads' chat prompts (held out from
    every training request): target-only, the draft at its own K and at K = 1..4, the EAGLE-3 head's tree and
    chain, eagerly and on the fast path, side by side in one run; writes point/bench.json."""
    methods = ["speclab target-only", draft_model_method().row(), EAGLE[3].row(), EAGLE[3].row("chain")]
    return ["bench", "--pair", pair, "--workload", "chat", "--num-prompts", "2", "--max-new-tokens", "64",
            "--methods", ",".join(methods), "--k-sweep", "1,2,3,4",
            f"--{EAGLE[3].weights_flag}", str(point / EAGLE[3].bundled), "--draft", str(point / "draft"),
            "--fast", "static", "--json", str(point / "bench.json")] + (["--device", device] if device else [])


def point_speeds(bench: dict) -> dict:
    """A point's bench.json summed up: for the draft and the EAGLE-3 head ("head"), on each path (eager, fast),
    the setting that decoded fastest over every workload (the chat categories' prompts together: their tokens
    over their seconds), its speed over target-only's on the same path, and its tokens a round; "host":
    where it was timed (bench_host); "exact":
    whether every row compared with target-only decoded its tokens (None where none was compared). Rows that
    decoded alike (the same rounds and accepted lengths on every prompt set) are one setting timed twice, and
    count once, at their pooled speed: the faster of two timings of one setting would flatter it."""
    totals: dict[str, list] = {}  # method: new tokens, seconds, rounds, how it decoded
    compared = []
    for workload in bench["workloads"]:
        for row in workload["rows"]:
            total = totals.setdefault(row["method"], [0, 0.0, 0, []])
            total[0] += row["new_tokens"]
            total[1] += row["seconds"]
            total[2] += row["stats"]["rounds"]
            total[3].append((row["stats"]["rounds"], tuple(row["stats"].get("accepted_lengths", ()))))
            if row["matches_target_only"] is not None:
                compared.append(row["matches_target_only"])
    drafters = {"draft": draft_model_method().row(), "head": EAGLE[3].row()}
    speeds: dict = {"exact": all(compared) if compared else None, "host": bench_host(bench)}
    for path, suffix in (("eager", ""), ("fast", FAST)):
        on_path = {method.removesuffix(suffix): total for method, total in totals.items()
                   if method.endswith(FAST) == (path == "fast")}
        if "speclab target-only" not in on_path:
            continue
        base = on_path["speclab target-only"][0] / on_path["speclab target-only"][1]
        for name, prefix in drafters.items():
            settings: dict[tuple, list[str]] = {}  # how it decoded: the rows that decoded so
            for m, total in on_path.items():
                if m == prefix or m.startswith(prefix + " "):
                    settings.setdefault(tuple(total[3]), []).append(m)
            if not settings:
                continue
            pooled = {tuple(rows): [sum(on_path[m][i] for m in rows) for i in range(3)] for rows in settings.values()}
            rows = max(pooled, key=lambda r: pooled[r][0] / pooled[r][1])
            tokens, seconds, rounds = pooled[rows]
            alike = {} if len(rows) == 1 else {  # and how far apart two timings of one setting fell
                "same_as": list(rows[:-1]), "each": [round(on_path[m][0] / on_path[m][1] / base, 3) for m in rows]}
            speeds.setdefault(name, {})[path] = {"row": rows[-1], "speedup": round(tokens / seconds / base, 3),
                                                 "tokens_per_round": round(tokens / rounds, 3), **alike}
    return speeds


def bench_host(bench: dict) -> str | None:
    """The machine a bench.json was timed on, as its first workload names it: the GPU, or the CPU and its
    threads (a curve's points may be timed on different hosts, and speeds compare only on one)."""
    first = bench["workloads"][0]
    if first.get("gpu"):
        return first["gpu"]
    return f"{first['cpu']}, {first['threads']} CPU threads" if first.get("cpu") else None


def in_loop_acceptance(bench: dict, categories: tuple[str, ...] | None = None) -> dict:
    """From a point's bench.json, each drafter's greedy chain as decoding met it on the held-out chat prompts (every
    category's rounds together, or those of `categories`' workloads, chat-CATEGORY): at draft position j, the
    share of rounds that reached j whose draft j was accepted (from the rounds' accepted lengths), tokens a
    round, and rounds. The head's chain row and the draft's K=4 row, eager (the fast path's decisions are the same)."""
    rows = {"head": EAGLE[3].row("chain"), "draft": f"{draft_model_method().row()} K=4"}
    found: dict = {}
    for workload in bench["workloads"]:
        if workload.get("temperature", 0.0) != 0.0:
            continue
        if categories is not None and workload.get("workload", "").removeprefix("chat-") not in categories:
            continue
        for name, method in rows.items():
            for row in workload["rows"]:
                if row["method"] != method:
                    continue
                lengths, rounds = row["stats"]["accepted_lengths"], row["stats"]["rounds"]
                mine = found.setdefault(name, {"lengths": [0] * len(lengths), "tokens": 0, "rounds": 0})
                mine["lengths"] = [a + b for a, b in zip(mine["lengths"], lengths)] + lengths[len(mine["lengths"]):]
                mine["tokens"] += row["new_tokens"]
                mine["rounds"] += rounds
    summary = {}
    for name, mine in found.items():
        reached = [sum(mine["lengths"][j:]) for j in range(len(mine["lengths"]))]
        summary[name] = {"row": rows[name], "by_position": [round(reached[j + 1] / reached[j], 4)
                                                            for j in range(len(reached) - 1) if reached[j]],
                         "tokens_per_round": round(mine["tokens"] / mine["rounds"], 3), "rounds": mine["rounds"]}
    return summary


def point_summary(point: Path, pair: str = "smollm2") -> dict:
    """What a trained point measured on its held-out rows (at every position and, where recorded, at the
    answers' alone), its speeds and in-loop acceptance where point/bench.json holds them (point_speeds,
    in_loop_acceptance), and the bench command that times it (bench_argv)."""
    head_dir = point / EAGLE[3].bundled
    head = json.loads((head_dir / "record.json").read_text())
    draft = json.loads((point / "draft" / "record.json").read_text())
    last_head, last_draft = head["log"]["evals"][-1], draft["log"]["evals"][-1]
    summary = {"conversations": head["chat"]["conversations"], "tokens": head["chat"]["tokens"],
               "answers_only": head["preset"].get("answers_only", False),
               "head": {"steps": last_head["step"], "heldout_top1_by_step": last_head["heldout_top1_by_step"],
                        "train_minutes": round(head["log"]["seconds"] / 60, 1)},
               "draft": {"steps": last_draft["step"], "heldout_top1": last_draft["heldout_top1"],
                         "train_minutes": round(draft["log"]["seconds"] / 60, 1)},
               "heldout": {"rows": head["preset"]["heldout_rows"], "seq_len": head["preset"]["seq_len"]},
               "bench": "python -m speclab " + shlex.join(bench_argv(point, pair))}
    scored = json.loads((point / "answers.json").read_text()) if (point / "answers.json").exists() else {}
    summary["head"]["heldout_answer_top1_by_step"] = last_head.get("heldout_answer_top1_by_step", scored.get("head"))
    summary["draft"]["heldout_answer_top1"] = last_draft.get("heldout_answer_top1", scored.get("draft"))
    if (point / "bench.json").exists():
        timed = json.loads((point / "bench.json").read_text())
        summary["speeds"], summary["in_loop"] = point_speeds(timed), in_loop_acceptance(timed)
        # the categories of the prompts every point decodes (same_prompts), for a like-for-like comparison
        summary["in_loop_request_categories"] = in_loop_acceptance(timed, TUNING_CATEGORIES)
    requests = request_speeds(head_dir)
    if requests is not None:
        summary["requests"] = requests
    return summary


CHAIN = {"top_k": 1, "depth": 4, "total_tokens": 4, "min_confidence": None}  # as the bench's chain row, K = 4


def request_speeds(head_dir: Path) -> dict | None:
    """The head on held-out requests of its training's own kind: its greedy EAGLE-2 timing (tree.json, eager,
    side by side with target-only), the chain four deep (CHAIN, every point's same setting) and the fastest
    setting, each as speed over target-only and tokens a pass; None where tree.json is missing or was timed
    on requests the head trained on."""
    path = head_dir / "tree.json"
    if not path.exists():
        return None
    tree = json.loads(path.read_text())
    if not tree.get("held_out"):
        return None
    chain = next((r for r in tree["table"] if all(r[k] == v for k, v in CHAIN.items())), None)
    best = max(tree["table"], key=lambda r: r["speedup"])
    def speed(row: dict) -> dict:
        return {"speedup": row["speedup"], "tokens_per_pass": row["tokens_per_pass"]}
    return {"prompts": tree["prompts"], "hardware": tree["hardware"],
            "chain": None if chain is None else speed(chain), "best": {"setting": describe_tree(best), **speed(best)}}


SAME_PROMPTS = 32  # prompts in each set every point's drafters decode (same_prompts)
SAME_K, SAME_NEW_TOKENS = 4, 64  # each drafter's K there, as the bench's in-loop rows, and the tokens decoded
BENCH_CHATS = 4  # every prompt the chat workloads ship (the bench sends the first two of each)


def same_prompts(tokenizer, stream: Path, n: int | None = None, drawn_against: int | None = None) -> dict[str, dict]:
    """Three sets of prompts that no point trained on, the same for every point, each {"prompts": token ids,
    "categories": each prompt's, "about": what they are; the drawn sets also "requests", their texts, and
    "drawn_against"}, drawn against the stream's first `drawn_against` conversations (all where None, the
    count a curve's sets were first drawn against where it grows): "everyday forms", n of
    chat_requests.held_out_requests (the forms of the stream's everyday stretch, in the categories whose
    requests it has not used up) and "varied forms", n of varied_requests.held_out_requests in
    TUNING_CATEGORIES (the forms of its varied stretch, which a point of everyday requests alone never met),
    none in any of the stream's conversations and none carrying a passage to copy; "hand-written prompts",
    every prompt of the chat workloads, the bench's among them, kept one by one here where the bench sums
    them by category."""
    n = n or SAME_PROMPTS
    conversations = torch.load(stream / STREAM_FILES[0])["conversations"]
    drawn_against = len(conversations) if drawn_against is None else drawn_against
    if drawn_against > len(conversations):
        raise ValueError(f"the prompts were drawn against {drawn_against:,} conversations and {stream} holds "
                         f"{len(conversations):,}: answer more first (python -m speclab train answers)")
    seen = _holds(tokenizer, conversations[:drawn_against])
    drawn = {"everyday forms": (chat_requests.held_out_requests(n, seen), chat_requests.HELD_OUT_CATEGORIES),
             "varied forms": (held_out_requests(n, TUNING_CATEGORIES, seen), TUNING_CATEGORIES)}
    where = (f"none in the stream's {drawn_against:,} conversations" if drawn_against == len(conversations)
             else f"none in the first {drawn_against:,} of the stream's conversations")
    sets = {}
    for kind, (texts, categories) in drawn.items():
        chats = [[{"role": "user", "content": r}] for r in texts]
        check_disjoint(chats)
        sets[kind] = {"prompts": [encode_chat(tokenizer, c) for c in chats],
                      "categories": [categories[i % len(categories)] for i in range(len(texts))],  # in turn
                      "about": f"{n} requests in the {kind} ({', '.join(categories)}), {where}",
                      "requests": texts, "drawn_against": drawn_against}
    bench = [c for workload in CHAT for c in load_chats(workload, BENCH_CHATS)]
    sets["hand-written prompts"] = {
        "prompts": [encode_chat(tokenizer, c) for c in bench],
        "categories": [c for c in CHAT_CATEGORIES for _ in range(BENCH_CHATS)],
        "about": f"the chat workloads' {len(bench)} hand-written prompts ({BENCH_CHATS} in each of "
                 f"{', '.join(CHAT_CATEGORIES)}), the bench's among them"}
    return sets


def _holds(tokenizer, conversations: list[torch.Tensor]) -> Callable[[str], bool]:
    """Whether a text occurs in any of these conversations (decoded)."""
    held = "\n\x00".join(tokenizer.batch_decode([c.tolist() for c in conversations]))
    return lambda text: text in held


def trained_on(tokenizer, stream: Path, requests: list[str], upto: int) -> list[int]:
    """The places of the requests that the stream's first `upto` conversations hold (a point of `upto`
    trained on them): where a curve grows past the conversations its sets were drawn against."""
    seen = _holds(tokenizer, torch.load(stream / STREAM_FILES[0])["conversations"][:upto])
    return [i for i, r in enumerate(requests) if seen(r)]


def restrict(scores: dict, keep: list[int]) -> dict:
    """A drafter's scores on a set (request_acceptance's) over the prompts at the places `keep` alone."""
    by_prompt = [scores["by_prompt"][i] for i in keep]
    return {"tokens_per_round": round(sum(t for t, _ in by_prompt) / sum(r for _, r in by_prompt), 3),
            "by_prompt": by_prompt}


@torch.no_grad()
def request_acceptance(target: str, point: Path, prompts: list[torch.Tensor], max_new_tokens: int = SAME_NEW_TOKENS,
                       device: str | None = None) -> dict:
    """Tokens a round of a point's drafters on `prompts` (token ids), greedy, over all and by prompt: the
    head's chain and the draft, each K = SAME_K (the bench's in-loop rows). Greedy rounds follow the
    drafters' guesses, not the clock, so this needs no quiet machine, and every point can be scored on the
    same prompts whenever the curve grows."""
    pair = load_pair(target, draft=str(point / "draft"), device=device)  # as the bench loads them
    drafters = {"head": load_drafter(EAGLE[3].name, pair.target, head=str(point / EAGLE[3].bundled), tree="chain"),
                "draft": pair.draft}
    scored = {}
    for name, drafter in drafters.items():
        runs = [speculative_generate(pair.target, drafter, ids.to(pair.device), k=SAME_K,
                                     max_new_tokens=max_new_tokens).stats for ids in prompts]
        scored[name] = {"tokens_per_round": round(sum(r.new_tokens for r in runs) / sum(r.rounds for r in runs), 3),
                        "by_prompt": [[r.new_tokens, r.rounds] for r in runs]}  # (new tokens, rounds) each
    return scored


def prompts_fingerprint(ids: list[list[int]]) -> str:
    """A short hash of a set's prompts (token ids), kept in a curve's record beside the scores on them."""
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


def score_same_prompts(target: str, stream: Path, points: list[int], device: str | None = None,
                       earlier: dict | None = None) -> dict:
    """Every trained point among `points` decoding the same prompts (same_prompts, request_acceptance):
    {set: {"about", "prompts" (how many), "categories" (each prompt's), "fingerprint" (prompts_fingerprint),
    "k", "new_tokens", "points": {N: scores}}}; each point's scores kept in cN/same_prompts.json with the
    prompts they were scored on, and scored again only when those change. A point whose drafters are gone (a
    machine not kept) keeps its scores from `earlier` (a curve's "same_prompts") where the set's fingerprint
    says they were scored on these very prompts; elsewhere it is left out.

    The sets are drawn against as many conversations as `earlier`'s were ("drawn_against"), so a curve that
    grows keeps its prompts; a request that the largest point's conversations hold is then "dropped", and
    every point is scored on the others alone (the fingerprint stays the drawn set's)."""
    named = CONVERTED_PAIRS.get(target)  # a converted pair's name (smollm2): its cached directory
    tokenizer = load_tokenizer(ensure_converted(named.packaged) if named else target)
    drawn = next((s["drawn_against"] for s in (earlier or {}).values() if s.get("drawn_against")), None)
    sets = same_prompts(tokenizer, stream, drawn_against=drawn)
    scored, keeps = {}, {}
    for kind, s in sets.items():
        dropped = trained_on(tokenizer, stream, s["requests"], max(points)) if "requests" in s else []
        keeps[kind] = [i for i in range(len(s["prompts"])) if i not in dropped]
        about = s["about"] + (f"; {len(dropped)} dropped, which the first {max(points):,} conversations hold"
                              if dropped else "")
        scored[kind] = {"about": about, "prompts": len(keeps[kind]),
                        "categories": [s["categories"][i] for i in keeps[kind]],
                        "fingerprint": prompts_fingerprint([p.tolist() for p in s["prompts"]]),
                        **({"drawn_against": s["drawn_against"], "dropped": dropped} if "requests" in s else {}),
                        "k": SAME_K, "new_tokens": SAME_NEW_TOKENS, "points": {}}
    for n in sorted(points):
        point = stream / f"c{n}"
        if not (point / "draft" / "record.json").exists() or not (point / EAGLE[3].bundled / "record.json").exists():
            for kind, s in scored.items():
                was = (earlier or {}).get(kind, {})
                carried = (_carried(was, keeps[kind], was["points"][str(n)])
                           if was.get("fingerprint") == s["fingerprint"] and str(n) in was.get("points", {}) else None)
                if carried is not None:
                    s["points"][str(n)] = carried
            continue
        path = point / "same_prompts.json"
        kept = json.loads(path.read_text()) if path.exists() else {}
        kept = {kind: kept[kind] for kind in sets if kind in kept}  # (sets of earlier curves dropped)
        for kind, s in sets.items():
            ids = [p.tolist() for p in s["prompts"]]
            if kept.get(kind, {}).get("prompts") != ids:
                kept[kind] = {"prompts": ids, **request_acceptance(target, point, s["prompts"], device=device)}
                path.write_text(json.dumps(kept) + "\n")
            whole = keeps[kind] == list(range(len(ids)))
            scored[kind]["points"][str(n)] = {d: kept[kind][d] if whole else restrict(kept[kind][d], keeps[kind])
                                              for d in ("head", "draft")}
    return scored


def _carried(was: dict, keep: list[int], scores: dict) -> dict | None:
    """A point's recorded scores on a set (`was`, a curve's, which dropped was["dropped"]) over the places
    `keep` of the drawn set; as recorded where it scored those very prompts, None where it never scored some."""
    had = [i for i in range(was["prompts"] + len(was.get("dropped", []))) if i not in was.get("dropped", [])]
    if had == keep:
        return scores
    if not set(keep) <= set(had):
        return None
    return {d: restrict(scores[d], [had.index(i) for i in keep]) for d in ("head", "draft")}


def answering(stream: Path) -> dict:
    """How the stream's conversations were answered: how many, the answer tokens the target wrote and the
    wall seconds of their batches (summed over every run that added to it, pauses included), the median
    batch's tokens per second over the batches timed one by one, its kinds of request with the conversation
    each starts at (chat_data.stream_kinds), and the median batch's rate on each host that answered part of it
    (answers.rates_by_host: a stream restored from packed parts was answered over several sessions)."""
    state = torch.load(stream / STREAM_FILES[0])
    return {"conversations": len(state["conversations"]),
            "kinds": [[kind, start] for kind, start in stream_kinds(state)],  # each kind of request, from where
            "answer_tokens": int(state.get("answer_tokens", 0)),
            "answer_seconds": round(float(state.get("answer_seconds", 0.0)), 1),
            "batches_timed": len(state.get("batches", [])), "median_batch_tokens_per_s": median_batch_rate(state),
            "hosts": rates_by_host(state)}


def scale(target: str, stream: Path, points=POINTS, preset: str = "smollm2-everyday", device: str | None = None,
          stop_after_minutes: float | None = None, pair: str | None = None,
          bench: Callable[[Path], object] | None = None, train_only: bool = False) -> dict:
    """Every point trained in turn, and timed by `bench` where given (train_point); the points the stream
    cannot yet supply are said aloud and skipped. Writes and returns stream/curve.json, which keeps the points
    of earlier runs that this one did not name. `stop_after_minutes` covers all the training, point after
    point. `pair`: the target's pair name, for the bench commands. `train_only`: return after training, with
    neither the same prompts scored nor the curve written (a GPU lent for minutes trains; the same call
    without it scores, and keeps the earlier points' scores, where they run)."""
    deadline = deadline_after(stop_after_minutes)  # one budget for every point's training, in turn
    curve = {"preset": preset, "target": pair or target, "host": hardware(pick_device(device)),
             "answers": answering(stream), "points": []}
    for n in sorted(points):
        try:
            curve["points"].append(train_point(target, stream, n, preset, device, minutes_left(deadline), pair,
                                               bench))
        except ValueError as err:
            print(f"point {n}: {err}")
    if train_only:
        return curve
    trained, kept = bool(curve["points"]), None
    if (stream / "curve.json").exists():
        earlier = json.loads((stream / "curve.json").read_text())
        if earlier["preset"] == preset:
            named = {p["conversations"] for p in curve["points"]}
            curve["points"] += [p for p in earlier["points"] if p["conversations"] not in named]
            curve["points"].sort(key=lambda p: p["conversations"])
            kept = earlier.get("same_prompts")
    if trained:  # every point, earlier ones too, scored on the same held-out requests
        curve["same_prompts"] = score_same_prompts(target, stream, [p["conversations"] for p in curve["points"]],
                                                   device, kept)
    (stream / "curve.json").write_text(json.dumps(curve, indent=1) + "\n")
    return curve
