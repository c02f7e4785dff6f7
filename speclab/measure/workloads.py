"""The prompt sets the bench runs on (`python -m speclab workloads` lists them): held-out code and prose
(the control), the copying sets where drafting from the context pays (edit, a series of edits of one
file, quote), and chat prompts by task for an instruction-tuned target (speclab/data/chat_prompts.json:
Spec-Bench's six categories and code, four each with source and licence; `chat` for all seven).

The copying sets are built from the standard-library corpus' held-out files (speclab.corpus), which no
shipped model or head was trained on, and shipped as JSON, since each Python version's library differs
and measurements should repeat on the same prompts everywhere (`workloads --build` rewrites them). A
chat prompt is rendered with the tokenizer's chat template, or as plain "User:"/"Assistant:" lines where
the tokenizer has none (chat_text).
"""
from __future__ import annotations

import ast
import json
import random
import re
import sys
from pathlib import Path

import torch

from speclab.corpus import heldout_prompts, is_heldout, read_source, stdlib_files, stdlib_root

SHIPPED = Path(__file__).parents[1] / "data" / "workloads.json"
CHAT_SHIPPED = Path(__file__).parents[1] / "data" / "chat_prompts.json"
COPYING = ("edit", "quote")
SERIES = ("edits",)  # a series of requests, for drafters that learn across them (chapter 13)
SHIPPED_SETS = (*COPYING, *SERIES)  # the prompt sets shipped in workloads.json
CHAT_CATEGORIES = ("conversation", "translation", "summarization", "qa", "math", "rag", "code")
CHAT = tuple(f"chat-{c}" for c in CHAT_CATEGORIES)
WORKLOADS = ("code", "prose", "edit", "quote", "edits", *CHAT)
GROUPS = {"chat": CHAT}  # a name that stands for several workloads
MAX_CHARS = 1600  # with 128 new tokens this stays well inside the bundled target's 1024 positions


# Held-out code prompts 5-12 (in heldout_prompts' order) are the tuning set: EAGLE-2's settings are chosen
# by timing them (speclab.train.choose_eagle_tree). The timed code prompts go around them: 1-4, then 13 on.
TUNING = slice(4, 12)


def check_request(workload: str, n: int) -> None:
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose from {WORKLOADS}")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n (number of prompts) must be an integer >= 1, got {n!r}")


def expand_workloads(names: str) -> list[str]:
    """'code,chat' -> ['code', 'chat-conversation', ..., 'chat-code']: comma-separated workloads, a
    group name (GROUPS) standing for its members; an unknown name is a ValueError listing the choices."""
    out: list[str] = []
    for name in (n.strip() for n in names.split(",")):
        if name not in WORKLOADS and name not in GROUPS:
            raise ValueError(f"unknown workload {name!r}; choose from {', '.join((*WORKLOADS, *GROUPS))}")
        out.extend(GROUPS.get(name, (name,)))
    return out


def load_prompts(workload: str = "code", n: int = 4) -> list[str]:
    """n prompt texts of a workload: the shipped copying sets ('edit', 'quote'), held-out windows of
    this interpreter's library ('code', 'prose'; code prompts skip the tuning set: tuning_prompts), or
    the chat prompts of a category ('chat-qa', ...) as plain text (chat_text; prompt_ids applies a
    tokenizer's chat template instead)."""
    check_request(workload, n)
    if workload in CHAT:
        return [chat_text(messages) for messages in load_chats(workload, n)]
    if workload == "code":
        if n <= TUNING.start:
            return heldout_prompts("code", n)
        pool = heldout_prompts("code", n + TUNING.stop - TUNING.start)
        return pool[:TUNING.start] + pool[TUNING.stop:]
    if workload == "prose":
        return heldout_prompts(workload, n)
    records = [r for r in json.loads(SHIPPED.read_text())["prompts"] if r["workload"] == workload]
    if n > len(records):
        raise ValueError(f"the {workload!r} workload ships {len(records)} prompts; ask for at most that many")
    return [r["text"] for r in records[:n]]


# ================================================================ chat prompts by task
def chat_records() -> list[dict]:
    """Every shipped chat prompt: category, id, messages, source, licence."""
    return json.loads(CHAT_SHIPPED.read_text())["prompts"]


def load_chats(workload: str, n: int = 4) -> list[list[dict]]:
    """The first n chat prompts (each a list of {'role', 'content'} messages) of a chat workload."""
    check_request(workload, n)
    if workload not in CHAT:
        raise ValueError(f"{workload!r} is not a chat workload; choose from {CHAT}")
    category = workload.removeprefix("chat-")
    records = [r for r in chat_records() if r["category"] == category]
    if n > len(records):
        raise ValueError(f"the {workload!r} workload ships {len(records)} prompts; ask for at most that many")
    return [r["messages"] for r in records[:n]]


def chat_text(messages: list[dict]) -> str:
    """A conversation as plain text, for a tokenizer without a chat template: a line per turn, labelled
    by role, ending with the assistant's label for the model to continue."""
    turns = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages)
    return turns + "Assistant:"


def encode_chat(tokenizer, messages: list[dict]) -> torch.Tensor:
    """A conversation's token ids (1-D): the tokenizer's chat template with the assistant's turn opened
    (add_generation_prompt), or chat_text's plain rendering where the tokenizer has no template."""
    if getattr(tokenizer, "chat_template", None):
        encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True,
                                                return_tensors="pt")
        return encoded["input_ids"][0]
    return tokenizer(chat_text(messages), return_tensors="pt").input_ids[0]


def prompt_ids(tokenizer, workload: str = "code", n: int = 4) -> list[torch.Tensor]:
    """n prompts of a workload as token ids (1-D tensors): chat prompts through encode_chat, the others
    tokenised as they are."""
    if workload in CHAT:
        return [encode_chat(tokenizer, messages) for messages in load_chats(workload, n)]
    return [tokenizer(text, return_tensors="pt").input_ids[0] for text in load_prompts(workload, n)]

def shipped_count(workload: str) -> int | None:
    """How many prompts a shipped set holds ('edit', 'quote', 'edits', each chat category); None for the workloads
    cut from held-out text ('code', 'prose'), which have as many as asked."""
    if workload in CHAT:
        return sum(r["category"] == workload.removeprefix("chat-") for r in chat_records())
    if workload not in SHIPPED_SETS:
        return None
    return sum(r["workload"] == workload for r in json.loads(SHIPPED.read_text())["prompts"])


def tuning_prompts(n: int = TUNING.stop - TUNING.start) -> list[str]:
    """The first n held-out code prompts of the tuning set, which load_prompts never returns: settings
    chosen on the prompts they are then timed on would flatter them."""
    size = TUNING.stop - TUNING.start
    if not isinstance(n, int) or not 1 <= n <= size:
        raise ValueError(f"the tuning set holds {size} code prompts; ask for 1 to {size}, not {n!r}")
    return heldout_prompts("code", TUNING.start + n)[TUNING.start:]


def functions(source: str) -> list[ast.FunctionDef]:
    """Top-level functions and methods of a source file, in order."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]


def segment(source: str, node: ast.FunctionDef) -> str:
    """The function's source, dedented to column 0 (methods included)."""
    lines = source.splitlines(keepends=True)[node.lineno - 1:node.end_lineno]
    indent = len(lines[0]) - len(lines[0].lstrip())
    if indent == 0:  # a top-level function: nothing to take off (every line[:0] is "", never space)
        return "".join(lines)
    return "".join(line[indent:] if line[:indent].isspace() else line.lstrip() for line in lines)


def edit_prompt(source: str, node: ast.FunctionDef) -> str | None:
    """A function, a blank line, and the def line of its revision: renamed, first parameter renamed."""
    text = segment(source, node)
    params = [a.arg for a in node.args.args if a.arg not in ("self", "cls")]
    if not params or not 300 <= len(text) <= MAX_CHARS // 2 or text.count("\n") < 8:
        return None
    old, new = params[0], params[0] + "_value"
    revised = re.sub(rf"\b{re.escape(old)}\b", new, text)
    revised = revised.replace(f"def {node.name}(", f"def {node.name}_revised(", 1)
    head = revised[:revised.index("\n") + 1]
    return f"{text}\n\n# Revised: {old} renamed to {new}.\n{head}"


def quote_prompt(source: str, node: ast.FunctionDef) -> str | None:
    """A docstring as a comment block (the passage), then the signature and the docstring's start."""
    doc = ast.get_docstring(node)
    if not doc or not 250 <= len(doc) <= MAX_CHARS // 2:
        return None
    text = segment(source, node)
    head = text[:text.index("\n") + 1]
    if not head.rstrip().endswith(":"):
        return None  # a signature over several lines: keep the prompt simple
    passage = "".join(f"# {line}".rstrip() + "\n" for line in doc.splitlines())
    opening = " ".join(doc.split()[:5])
    return f"# Documentation of {node.name}:\n{passage}\n{head}    \"\"\"{opening}"


def build(per_workload: int = 8, seed: int = 0) -> dict:
    """The copying prompt sets from this interpreter's held-out files (no test files)."""
    root = stdlib_root()
    rng = random.Random(seed)
    files = [p for p in stdlib_files(root) if is_heldout(p, root) and "test" not in p.as_posix()]
    rng.shuffle(files)
    makers = {"edit": edit_prompt, "quote": quote_prompt}
    prompts: list[dict] = []
    for workload, make in makers.items():
        found = 0
        for path in files:
            source = read_source(path)
            candidates = [(node, text) for node in functions(source or "") if (text := make(source, node))]
            if not candidates:
                continue
            node, text = rng.choice(candidates)
            prompts.append(dict(workload=workload, file=path.relative_to(root).as_posix(), function=node.name,
                                text=text))
            found += 1
            if found == per_workload:
                break
    prompts.extend(dict(workload="edits", file=path, function=name, text=text)
                   for path, name, text in edit_series(files, root, 2 * per_workload))
    return {"python": sys.version.split()[0], "seed": seed, "prompts": prompts}


def edit_series(files: list[Path], root: Path, n: int) -> list[tuple[str, str, str]]:
    """n edit prompts for successive functions of one file (the first of `files` that has n): (file,
    function, prompt) in the file's order."""
    for path in files:
        source = read_source(path) or ""
        series = [(node.name, text) for node in functions(source) if (text := edit_prompt(source, node))]
        if len(series) >= n:
            return [(path.relative_to(root).as_posix(), name, text) for name, text in series[:n]]
    raise ValueError(f"no held-out file has {n} functions that make edit prompts")


def write(path: Path = SHIPPED, per_workload: int = 8, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(build(per_workload, seed), indent=1) + "\n")
    return path
