"""Training rows for a chat target (SmolLM2-135M-Instruct): instructions in the chat workloads' seven
categories, answered by the target itself.

Why the target's own answers: a drafter is judged on the contexts the target writes, so its training
text should be the target's (self-distillation: Medusa-2, Cai et al. 2024, sec. 3.3; EAGLE-3 regenerates
its training responses with the target, Li et al. 2025). Only the instructions come from elsewhere, and
offline: templates filled with this Python's standard library (function docstrings and code, the
language reference's prose in pydoc_data) and small word lists written here. None of them is a bench
prompt (speclab/data/chat_prompts.json): check_disjoint refuses any overlap, so every speed measured on
the chat workloads is on prompts the drafters never saw.

    conversations = chat_conversations(target, tokenizer, out, n=800)   # resumable
    rows = pack(conversations, seq_len=256, eos=tokenizer.eos_token_id)
"""
from __future__ import annotations

import ast
import random
import re
import time
from pathlib import Path
from pydoc_data.topics import topics

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from speclab import corpus
from speclab.measure.workloads import chat_records
from speclab.train import chat_requests, varied_requests
from speclab.train.replies import answer, reply_length, reply_text
from speclab.train.loop import save_whole, stopped

CATEGORIES = ("conversation", "translation", "summarization", "qa", "math", "rag", "code")
LANGUAGES = ("French", "Spanish", "German", "Italian", "Portuguese")
TOPICS = ("photosynthesis", "the water cycle", "volcanoes", "the Roman Empire", "vaccines", "black holes",
          "compound interest", "the printing press", "tides", "earthquakes", "bread baking", "honey bees",
          "the stock market", "rainbows", "the human heart", "glaciers", "electric cars", "coffee",
          "the Silk Road", "recycling", "solar panels", "sleep", "the Moon landing", "democracy",
          "antibiotics", "coral reefs", "jazz", "chess", "the internet", "inflation", "migration of birds",
          "batteries", "the Renaissance", "deserts", "tea", "wind power", "memory", "friction", "maps")
QUESTIONS = ("What is {t}?", "Explain {t} to a ten-year-old.", "Give three facts about {t}.",
             "Why does {t} matter?", "Write a short paragraph about {t}.", "What are common myths about {t}?")
FOLLOW_UPS = ("Can you make that shorter?", "Give me an example.", "Why is that?", "Can you explain the "
              "second point in more detail?", "Summarize that in one sentence.", "What should I do next?")
ITEMS = ("apples", "notebooks", "tickets", "bottles of water", "pencils", "plants", "books", "cupcakes")


# ---------------------------------------------------------------- instructions from the library
def library_texts(rng: random.Random) -> tuple[list[str], list[str], list[str]]:
    """(paragraphs, sentences, functions) from the training half of the standard library: the language
    reference's prose (pydoc_data.topics) and docstrings, and short functions with a docstring."""
    paragraphs = [p for text in topics.values() for p in re.split(r"\n\s*\n", text)
                  if 200 < len(p) < 900 and not p.lstrip().startswith(("::=", ">>>")) and "::=" not in p]
    functions: list[str] = []
    train, _ = corpus.split_texts()
    for source in rng.sample(train, min(400, len(train))):
        paragraphs += [d for d in corpus.docstrings(source) if len(d) < 900]
        functions += [f for f in short_functions(source) if 150 < len(f) < 900]
    sentences = [s.strip() for p in paragraphs for s in re.split(r"(?<=[.!?])\s+", p.replace("\n", " "))
                 if 40 < len(s.strip()) < 200]
    return paragraphs, sentences, functions


def short_functions(source: str) -> list[str]:
    """Top-level functions of a file (their source), as code to explain or review."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    return [ast.get_source_segment(source, node) or "" for node in tree.body if isinstance(node, ast.FunctionDef)]


def instruction(category: str, rng: random.Random, paragraphs: list[str], sentences: list[str],
                functions: list[str]) -> list[dict]:
    """One user message of a category (a conversation's first turn; its follow-up comes after the
    target's answer: follow_up)."""
    if category in ("conversation", "qa"):
        text = rng.choice(QUESTIONS).format(t=rng.choice(TOPICS))
    elif category == "translation":
        text = f"Translate the following text into {rng.choice(LANGUAGES)}:\n{rng.choice(sentences)}"
    elif category == "summarization":
        text = f"Summarize the following text in two sentences.\n\n{rng.choice(paragraphs)}"
    elif category == "rag":
        doc = rng.choice(paragraphs)
        word = rng.choice([w for w in re.findall(r"[A-Za-z]{6,}", doc)] or ["it"])
        text = f"Use only the document below to answer.\n\nDocument: {doc}\n\nQuestion: What does it say about {word}?"
    elif category == "math":
        n, price, k = rng.randint(3, 40), rng.randint(2, 25), rng.randint(2, 9)
        item = rng.choice(ITEMS)
        text = rng.choice((f"A shop sells {item} for ${price} each. How much do {n} {item} cost? Show your steps.",
                           f"I had {n * k} {item} and shared them equally among {k} friends. How many did each "
                           "friend get? Explain.", f"What is {n} times {price}, plus {k}? Work it out step by step."))
    elif category == "code":
        fn = rng.choice(functions)
        text = rng.choice(("Explain what this Python function does:\n\n", "Review this Python code:\n\n",
                           "Add comments to this function:\n\n")) + fn
    else:
        raise ValueError(f"unknown category {category!r}; choose from {CATEGORIES}")
    return [{"role": "user", "content": text}]


def instructions(n: int, seed: int = 0) -> list[list[dict]]:
    """n first user messages, the categories in turn; refused if any meets a bench prompt."""
    rng = random.Random(seed)
    texts = library_texts(rng)
    out = [instruction(CATEGORIES[i % len(CATEGORIES)], rng, *texts) for i in range(n)]
    check_disjoint(out)
    return out


def check_disjoint(conversations: list[list[dict]], window: int = 60) -> None:
    """No training message may share a 60-character stretch with a bench prompt's (chat_prompts.json): longer
    than any template sentence, so what is refused is shared material, not a shared instruction."""
    def windows(text: str) -> set[str]:  # every stretch of `window` characters, at every offset
        return {text[i:i + window] for i in range(max(1, len(text) - window + 1))}
    bench = set().union(*(windows(m["content"]) for r in chat_records() for m in r["messages"]))
    for conv in conversations:
        for m in conv:
            if windows(m["content"]) & bench:
                raise ValueError(f"a training instruction overlaps a bench prompt: {m['content'][:80]!r}")


def follow_up(messages: list[dict], answer: str, rng: random.Random,
              follow_ups: tuple[str, ...] = FOLLOW_UPS) -> list[dict]:
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": rng.choice(follow_ups)}]


# where the first user messages come from: instructions, chat_requests, or varied_requests
REQUESTS = ("library", "everyday", "varied")
CONTINUES = {"everyday": "varied"}  # a stream of one kind may go on with the other (stream_kinds)


def first_messages(requests: str, target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out: Path, n: int,
                   seed: int, batch: int, start: int = 0) -> list[list[dict]]:
    """n first user messages, the categories in turn: "library", templates over the standard library
    (instructions); "everyday", everyday requests over the target's own passages (chat_requests); "varied",
    the same categories in more forms (varied_requests), for conversations start, start + 1, ... of a stream."""
    if requests == "library":
        return instructions(n, seed)
    if requests == "everyday":
        firsts = chat_requests.everyday_requests(target, tokenizer, out, n, seed, batch)
    elif requests == "varied":
        firsts = varied_requests.varied_requests(target, tokenizer, out, n, seed, batch, start)
    else:
        raise ValueError(f"unknown requests {requests!r}; choose from {REQUESTS}")
    check_disjoint(firsts)
    return firsts


def stream_kinds(state: dict) -> list[tuple[str, int]]:
    """(kind of requests, first conversation) of each stretch of a stream: its first kind from 0, then each
    kind it went on with (state["continued"])."""
    return [(state.get("requests", "library"), 0), *[(kind, start) for kind, start in state.get("continued", [])]]


def continue_stream(state: dict, requests: str, n: int, path: Path) -> None:
    """Check that a stream holding `state` can give n conversations of `requests`: reading the first n
    needs a kind it holds; answering more needs its latest kind, or the one it may go on with (CONTINUES),
    which then starts at the next conversation."""
    kinds, have = stream_kinds(state), len(state["conversations"])
    if n <= have and requests in {kind for kind, _ in kinds} or n > have and requests == kinds[-1][0]:
        return
    if n > have and CONTINUES.get(kinds[-1][0]) == requests:
        state.setdefault("continued", []).append((requests, have))
        return
    raise ValueError(f"{path} holds answers to {kinds[-1][0]} requests, not {requests}: pass another --out"
                     + (f", or go on with --requests {CONTINUES[kinds[-1][0]]}" if kinds[-1][0] in CONTINUES else ""))


def second_turns(requests: str, n_convs: int, start: int, rng: random.Random) -> list[int]:
    """Which of a batch's conversations get a second turn: a quarter of them, and with everyday or varied
    requests also every conversation-category one (the bench's conversations are two turns long)."""
    return [i for i in range(n_convs) if rng.random() < 0.25
            or (requests != "library" and CATEGORIES[(start + i) % len(CATEGORIES)] == "conversation")]


def follow_ups_for(requests: str, category: str) -> tuple[str, ...]:
    """The second turns a conversation of this kind and category draws from: varied requests' follow from
    the request's category, the others' are general."""
    if requests == "varied":
        return varied_requests.FOLLOW_UPS[category]
    return FOLLOW_UPS if requests == "library" else chat_requests.FOLLOW_UPS


# ---------------------------------------------------------------- the target's answers
def chat_conversations(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out: Path, n: int,
                       max_new_tokens: int = 256, seed: int = 0, batch: int = 64,
                       deadline: float | None = None, requests: str = "library",
                       host: str | None = None) -> list[torch.Tensor]:
    """n conversations in the seven categories with the target's replies (alternately greedy and sampled at
    T = 1, batch by batch: 64 at a time, 1.9 s a conversation on 2 CPU cores against 3.0 s at 16; a quarter
    of them get a second turn: second_turns), as token ids through the chat template; the first messages
    from `requests` (first_messages). Saved after each batch in out/chat_conversations.pt, so an
    interrupted run resumes where it stopped. `host`, if given, is kept as the machine the batches of this
    run ran on (note_host)."""
    path = out / "chat_conversations.pt"
    state = torch.load(path) if path.exists() else {"conversations": [], "seconds": 0.0, "requests": requests}
    continue_stream(state, requests, n, path)
    started = time.perf_counter()
    # each stretch's first messages, asked only when there are conversations left to answer (reading a
    # frozen point's answers needs none, nor the target's passages they were drawn over)
    kinds, firsts = stream_kinds(state), []
    if len(state["conversations"]) < n:
        for (kind, begin), (_, end) in zip(kinds, [*kinds[1:], (None, n)]):
            firsts += first_messages(kind, target, tokenizer, out, min(end, n) - begin, seed, batch, begin)
    state["material_seconds"] = state.get("material_seconds", 0.0) + time.perf_counter() - started
    bar = tqdm(total=n, initial=len(state["conversations"]), desc="chat conversations", mininterval=10)
    while len(state["conversations"]) < n:
        if deadline is not None and time.time() > deadline:
            raise stopped("chat conversations", f"{len(state['conversations'])}/{n}")
        start = len(state["conversations"])
        index = start // batch
        convs, rng = firsts[start:start + batch], random.Random(seed * 1_000_003 + index)
        sampled = index % 2 == 1
        started = time.perf_counter()
        rows = answer(target, tokenizer, convs, max_new_tokens, sampled, seed + index)
        written = sum(reply_length(tokenizer, c, r) for c, r in zip(convs, rows))
        kind = [k for k, begin in kinds if begin <= start][-1]
        second = second_turns(kind, len(convs), start, rng)
        if second:  # a second turn: the target's reply, then a follow-up question
            replies = [reply_text(tokenizer, convs[i], rows[i]) for i in second]
            turns = [follow_up(convs[i], r, rng, follow_ups_for(kind, CATEGORIES[(start + i) % len(CATEGORIES)]))
                     for i, r in zip(second, replies)]
            longer = answer(target, tokenizer, turns, max_new_tokens // 2, sampled, seed + index + 7)
            written += sum(reply_length(tokenizer, c, r) for c, r in zip(turns, longer))
            for i, row in zip(second, longer):
                rows[i] = row
        state["conversations"] += [r.to(torch.int32) for r in rows]
        seconds = time.perf_counter() - started
        state["seconds"] += seconds
        # the tokens the target wrote and the time it took, counted together (a file written before they
        # were counted has neither, so the rate is of the batches counted)
        state["answer_tokens"] = state.get("answer_tokens", 0) + written
        state["answer_seconds"] = state.get("answer_seconds", 0.0) + seconds
        if host is not None:
            note_host(state, host)
        # each batch's own tokens and seconds: a run paused mid-batch (SIGSTOP while something is timed)
        # inflates that batch and the sums, not the median batch's rate
        state.setdefault("batches", []).append((written, round(seconds, 2)))
        save_whole(state, path)
        bar.update(len(rows))
    bar.close()
    return state["conversations"][:n]


def note_host(state: dict, host: str) -> None:
    """Record that the stream's batches run on `host` from the next one on: state["hosts"] holds [first batch,
    host] at every change, so a stream answered over several sessions says which machine timed which batch."""
    hosts = state.setdefault("hosts", [])
    if not hosts or hosts[-1][1] != host:
        hosts.append([len(state.get("batches", [])), host])


def pack(conversations: list[torch.Tensor], seq_len: int, eos: int) -> torch.Tensor:
    """Conversations end to end, EOS between them, cut into rows of seq_len tokens (the remainder dropped):
    packing, as pretraining does, so no row is padding. (n_rows, seq_len) int32."""
    stream = torch.cat([torch.cat([c.to(torch.int32), torch.tensor([eos], dtype=torch.int32)])
                        for c in conversations])
    usable = len(stream) // seq_len * seq_len
    if usable == 0:
        raise ValueError(f"{len(conversations)} conversations hold {len(stream)} tokens, fewer than one row of "
                         f"{seq_len}: ask for more conversations")
    return stream[:usable].view(-1, seq_len)


def assistant_header(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The tokens that open the assistant's turn (what encode_chat appends for the model to answer after)."""
    probe = [{"role": "user", "content": "x"}]
    if getattr(tokenizer, "chat_template", None):
        closed, opened = (tokenizer.apply_chat_template(probe, add_generation_prompt=opens, return_dict=True)["input_ids"]
                          for opens in (False, True))
        return list(opened[len(closed):])
    return tokenizer("\nAssistant:", add_special_tokens=False).input_ids[1:]


def answer_next(rows: torch.Tensor, tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """(n, T) bool over packed chat rows (pack, consecutive as packed): whether the token after position t
    belongs to an answer, from just after an assistant header to its end-of-turn token (EOS) included. The
    positions where the target speaks as itself, the only ones a drafter drafts at: the reference trains
    EAGLE-3 on them alone (a loss mask over the assistant's turns, eagle/traineagle3/main.py)."""
    stream, header = rows.flatten().long(), torch.tensor(assistant_header(tokenizer))
    index = torch.arange(len(stream))
    header_ends = torch.zeros(len(stream), dtype=torch.bool)
    if len(header) and len(stream) >= len(header):
        header_ends[len(header) - 1:] = (stream.unfold(0, len(header), 1) == header).all(-1)
    last_header = torch.where(header_ends, index, -1).cummax(0).values
    last_end = torch.where(stream == tokenizer.eos_token_id, index, -1).cummax(0).values
    # token i is an answer's when the latest header ended before it with no end of turn since (its own EOS counts)
    answer = torch.cat([torch.tensor([False]), last_header[:-1] > last_end[:-1]])
    return torch.cat([answer[1:], torch.tensor([False])]).view(rows.shape)


def trained_on(n: int) -> int:
    """How many of n conversations a drafter trains on: all but the last twentieth (chat_rows holds it out)."""
    return n - max(1, n // 20)


def chat_rows(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out: Path, n: int, seq_len: int,
              seed: int = 0, deadline: float | None = None,
              requests: str = "library") -> tuple[torch.Tensor, torch.Tensor]:
    """(train rows, held-out rows) of seq_len tokens from n conversations (chat_conversations): the last
    twentieth of the conversations, packed apart, are held out."""
    conversations = chat_conversations(target, tokenizer, out, n, seed=seed, deadline=deadline, requests=requests)
    held = n - trained_on(n)
    eos = tokenizer.eos_token_id
    return pack(conversations[:-held], seq_len, eos), pack(conversations[-held:], seq_len, eos)


def summary(out: Path) -> dict | None:
    """What a record says about the chat rows a run in `out` trained on (None where it has none)."""
    path = out / "chat_conversations.pt"
    if not path.exists():
        return None
    state = torch.load(path)
    if state.get("requests", "library") == "library":
        instructions_were = ("templates over the standard library's prose and code and word lists "
                             "(speclab.train.chat_data), answered by the target, half the batches greedy and "
                             "half sampled at T = 1, a quarter with a second turn")
    else:
        instructions_were = ("everyday requests written for speclab over passages the target wrote "
                             "(speclab.train.chat_requests), answered by the target, half the batches greedy "
                             "and half sampled at T = 1, every conversation-category one and a quarter of "
                             "the others with a second turn")
        if state.get("continued"):
            instructions_were += ("; from conversation {1:,} on, requests in more forms with follow-ups of their "
                                  "category (speclab.train.varied_requests)").format(*state["continued"][0])
    return {"conversations": len(state["conversations"]), "tokens": sum(len(c) for c in state["conversations"]),
            "answer_seconds": round(state["seconds"], 1), "categories": list(CATEGORIES),
            "requests": state.get("requests", "library"),
            **({"continued": [list(c) for c in state["continued"]]} if state.get("continued") else {}),
            "material_seconds": round(state.get("material_seconds", 0.0), 1), "instructions": instructions_were}
