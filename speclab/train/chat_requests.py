"""Everyday chat requests for distilling a chat target's drafter: word lists written here for speclab, and
passages the target writes itself.

Why not only templates over the standard library (speclab.train.chat_data.instructions): a draft trained on
the target's answers to those fits those requests, not a user's, and more of them did not move its bench
acceptance. These requests are about everyday matters, as users' are (Spec-Bench's categories, Xia et al.
2024), in forms no bench prompt uses. What the target writes is material, not answers: short passages on a
topic (news, emails, notices; greedy) to summarise or answer a question from, and its translations of their
sentences, to translate back. SmolLM2-135M cannot write good requests itself (asked for a question it often
answers one), so the forms are written here. None shares a 60-character stretch with a bench prompt
(chat_data.check_disjoint).

    requests = everyday_requests(target, tokenizer, out, n=2100)   # passages resumable in out/
"""
from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Callable

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from speclab.train.replies import answer, reply_text
from speclab.train.loop import save_whole

CATEGORIES = ("conversation", "translation", "summarization", "qa", "math", "rag", "code")
LANGUAGES = ("French", "Spanish", "German", "Italian", "Portuguese")

TOPICS = (
    "growing tomatoes", "a weekend trip to the mountains", "learning to play the piano", "saving for a holiday",
    "a child's birthday party", "adopting a cat", "a rainy autumn day", "preparing for a job interview",
    "a new bus route", "a neighbourhood clean-up day", "a local football club", "a farmers' market",
    "a museum's new exhibition", "a school science fair", "a broken washing machine", "moving to a new flat",
    "a power cut in the city", "a charity bake sale", "a bicycle repair workshop", "a summer music festival",
    "a company's new office", "a hospital's visiting hours", "a library's reading club", "a swimming course",
    "a camping trip", "a cooking class", "a delayed flight", "a lost dog found in a park", "a new coffee shop",
    "an online shop's return policy", "a team's project deadline", "a yoga studio", "a winter storm",
    "a village fair", "a train strike", "a recycling programme", "a dentist appointment", "a wedding plan",
    "a hiking trail", "a language exchange meeting", "a home office setup", "a city marathon",
    "a vegetable soup recipe", "a second-hand bookshop", "a flu season", "a phone that stops charging",
    "a community garden", "a zoo's baby elephant", "a science museum", "a school trip to the coast",
    "a new smartphone app", "a hotel booking", "a car-sharing service", "a photography course",
    "a budget for a student", "a book fair", "a family reunion", "a kitchen renovation", "a heat wave",
    "an apartment building's rules", "a gym membership", "an art class for adults", "a bakery's opening",
    "a cycling lane", "a picnic in the park", "a noisy neighbour", "a volunteer fire brigade",
    "a new school timetable", "a chess tournament", "a farm open day", "a city's water supply",
    "a beach clean-up", "a running club", "a sleep routine", "a team-building day", "an old cinema",
    "a theatre play", "a board game night", "a pet shop", "a bike theft", "a flower show",
)
PASSAGE_KINDS = ("a short news report", "a short email to colleagues", "a notice for visitors",
                 "a product description", "a short encyclopedia paragraph", "a short blog post",
                 "notes from a meeting", "a letter to a neighbour", "a restaurant review",
                 "an advertisement", "a report for a club newsletter")
GOALS = ("learn to swim", "bake my own bread", "learn Spanish", "keep a vegetable garden", "cycle to work",
         "learn to draw", "cook healthier meals", "read more books", "get up earlier", "learn to code",
         "meditate every day", "play chess well", "save money each month", "learn the guitar",
         "take better photos", "go camping", "build a bookshelf", "train for a 10 km race")
BUSINESSES = ("flower shop", "bicycle repair shop", "cafe", "bookshop", "pet grooming service", "yoga studio",
              "ice cream van", "pizza place", "tea room", "second-hand clothing store", "barber shop")
PLACES = ("near a university", "in a mountain village", "by a busy train station", "in an old market hall",
          "on a quiet island", "in the city centre", "next to a park")
EVENTS = ("a picnic for eight people", "a surprise party for my sister", "a weekend in Rome",
          "a barbecue for my neighbours", "a study group", "a small wedding", "a day at the zoo with children",
          "a board game evening", "a charity run", "a trip to the seaside")
CONSTRAINTS = ("Two of them do not eat meat.", "We have a small budget.", "It might rain.",
               "Some guests are children.", "I only have one free afternoon.", "One guest uses a wheelchair.")
WRITING = ("a thank-you note to a neighbour who watered my plants", "a short message to cancel a meeting",
           "an invitation to a house-warming party", "a polite complaint about a late delivery",
           "a birthday message for a colleague", "a note asking my landlord to fix the heating",
           "a short speech for a friend's farewell", "a reminder for the team about Friday's deadline")
PROBLEMS = ("trouble falling asleep", "a dripping kitchen tap", "too many emails every day",
            "a plant whose leaves turn yellow", "a bike chain that keeps slipping", "a slow laptop",
            "no time to cook on weekdays", "a cat that scratches the sofa", "a noisy fridge")
FOLLOW_UPS = ("Thanks. Can you make that shorter?", "Can you give me two more examples?", "Why does that work?",
              "What if I only have twenty minutes a day?", "Can you put that into a short list?",
              "Which of those would you choose, and why?", "I tried that and it did not help. What else can I do?",
              "Now write a one-sentence version for a poster.", "Can you explain that more simply?",
              "Is there anything I should avoid?", "How long will that take?", "What would that cost, roughly?")
PAIRS = ("a virus and a bacterium", "baking soda and baking powder", "a lake and a pond", "speed and velocity",
         "a crocodile and an alligator", "a comet and an asteroid", "renting and buying a home", "a loan and a grant",
         "RAM and storage", "a simile and a metaphor", "an ocean and a sea", "a cold and the flu",
         "a democracy and a monarchy", "a moth and a butterfly", "a tablet and a laptop", "frost and snow")
WHY = ("ice floats on water", "bread rises in the oven", "the Moon seems to change shape", "we yawn",
       "leaves change colour in autumn", "metal feels colder than wood", "onions make us cry",
       "cats purr", "the sea is salty", "planes leave white trails in the sky", "we get hiccups",
       "a bicycle stays upright when it moves", "sound travels faster in water", "cheese has holes")
WHO = ("invented the telephone", "painted the Mona Lisa", "first reached the South Pole", "discovered penicillin",
       "wrote the play Hamlet", "built the first practical light bulb", "composed The Four Seasons",
       "first flew a powered aeroplane", "developed the theory of relativity", "founded the Red Cross")
HOW = ("a microwave oven", "a solar panel", "a vaccine", "satellite navigation", "a thermostat", "a bicycle gear",
       "a compass", "an electric kettle", "a washing machine", "noise-cancelling headphones", "a smoke alarm",
       "a credit card payment", "a heat pump", "a touch screen")
CONCEPTS = ("inflation", "photosynthesis", "a food chain", "compound interest", "gravity", "the immune system",
            "recycling", "erosion", "supply and demand", "an election", "a carbon footprint", "evaporation")
QA_FORMS = ("Why do {why}?", "Can you explain why {why}?", "What is the difference between {pair}?",
            "Who {who}, and when?", "How does {how} work? Keep it simple.", "How does {how} work?",
            "What is {concept}? Give an everyday example.", "Explain {concept} in a few sentences.")
NAMES = ("Maya", "Tom", "Aisha", "Lucas", "Ines", "Kenji", "Sara", "Pablo", "Nora", "Ravi", "Zoe", "Felix")
ITEMS = ("pencils", "apples", "stickers", "marbles", "postcards", "cookies", "tickets", "shells", "coins")
MATH_ENDINGS = ("Think step by step.", "Show your working.", "Explain each step.", "Work it out step by step.",
                "Give the answer and your reasoning.")
CODE_TASKS = (
    ("count_vowels", "text", "counts the vowels in a string"),
    ("largest", "numbers", "returns the largest number in a list without using max()"),
    ("is_leap_year", "year", "tells whether a year is a leap year"),
    ("reverse_words", "sentence", "reverses the order of the words in a sentence"),
    ("average", "numbers", "returns the average of a list of numbers, or None for an empty list"),
    ("celsius_to_fahrenheit", "c", "converts a temperature from Celsius to Fahrenheit"),
    ("remove_duplicates", "items", "removes duplicates from a list while keeping the order"),
    ("factorial", "n", "computes the factorial of n"),
    ("fizzbuzz", "n", "prints the numbers from 1 to n, with Fizz for multiples of 3 and Buzz for multiples of 5"),
    ("is_prime", "n", "checks whether a number is prime"),
    ("merge_dicts", "a, b", "merges two dictionaries, adding the values of keys found in both"),
    ("longest_word", "sentence", "returns the longest word in a sentence"),
    ("count_lines", "path", "counts the lines of a text file"),
    ("flatten", "nested", "flattens a list of lists into one list"),
    ("second_smallest", "numbers", "returns the second smallest number in a list"),
    ("capitalize_words", "text", "capitalizes the first letter of every word"),
    ("sum_digits", "n", "returns the sum of the digits of an integer"),
    ("chunk", "items, size", "splits a list into chunks of a given size"),
    ("days_between", "start, end", "returns the number of days between two dates given as YYYY-MM-DD strings"),
    ("read_json", "path", "reads a JSON file and returns the value stored under the key 'name'"),
    ("most_common_letter", "text", "returns the most common letter in a string"),
    ("is_anagram", "a, b", "checks whether two words are anagrams of each other"),
    ("running_total", "numbers", "returns the running totals of a list of numbers"),
    ("grade", "score", "turns a score from 0 to 100 into a letter grade from A to F"),
)
CODE_FORMS = ("Write a Python function that {task}.", "Write a Python function `{name}({args})` that {task}.",
              "Could you write a Python function that {task}? Add a docstring.",
              "How do I write a function in Python that {task}?", "Write a short Python program that {task}.")
PASSAGE_PROMPT = "Write {kind} about {topic}. Use four or five sentences."
# Further forms, asked only once every kind and topic has been asked in the first (a run of 1,400
# conversations never reaches them, so its passages stay what they were): more conversations need more
# passages than the 891 of the first form give, and more varied ones.
MORE_PASSAGE_PROMPTS = ("Write {kind} about {topic} for readers who know nothing about it. Keep it short.",
                        "Write {kind} about {topic}, with at least one number or date in it.",
                        "Write {kind} about {topic} in a friendly tone. Five sentences at most.",
                        "Write {kind} about {topic} that ends with a question for the reader.")


# ---------------------------------------------------------------- the target's passages
def target_replies(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[str],
                   max_new_tokens: int, batch: int) -> list[str]:
    """The target's greedy replies to single-turn prompts, as text."""
    texts = []
    for start in range(0, len(prompts), batch):
        convs = [[{"role": "user", "content": p}] for p in prompts[start:start + batch]]
        for conv, row in zip(convs, answer(target, tokenizer, convs, max_new_tokens, sampled=False, seed=0)):
            texts.append(reply_text(tokenizer, conv, row))
    return texts


def tidy_passage(text: str, max_chars: int = 700) -> str:
    """A reply made into a passage: no preamble line ("Here's a short notice:"), no markdown emphasis,
    whole sentences up to max_chars, none cut off by the reply's token limit ('' when what is left is
    shorter than 120 characters)."""
    lines = [ln.strip() for ln in text.replace("**", "").splitlines() if ln.strip()]
    if lines and lines[0].endswith(":") and len(lines) > 1:
        lines = lines[1:]
    body = " ".join(lines)
    sentences = re.split(r"(?<=[.!?])\s+", body)
    kept = ""
    for s in sentences:
        if len(kept) + len(s) + 1 > max_chars or not s.endswith((".", "!", "?")):  # (a reply cut mid-sentence)
            break
        kept = f"{kept} {s}".strip()
    return kept if len(kept) >= 120 else ""


def first_sentence(passage: str) -> str:
    return re.split(r"(?<=[.!?])\s+", passage)[0][:240]


def material(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out: Path, passages: int,
             translations: int, batch: int = 64) -> dict:
    """{"passages": [...], "foreign": [(language, text), ...]}: the target's passages (PASSAGE_PROMPT, then
    MORE_PASSAGE_PROMPTS, over kinds and topics, greedy) and its translations of their first sentences,
    saved after each batch in out/everyday_material.pt so an interrupted run resumes. Once every prompt has
    been asked, fewer passages than asked for come back, and the requests reuse them in turn."""
    path = out / "everyday_material.pt"
    state = torch.load(path) if path.exists() else {"passages": [], "foreign": [], "asked": 0}
    prompts = []
    for form in (PASSAGE_PROMPT, *MORE_PASSAGE_PROMPTS):
        asked = [form.format(kind=k, topic=t) for t in TOPICS for k in PASSAGE_KINDS]
        random.Random(1).shuffle(asked)
        prompts += asked
    bar = tqdm(total=passages, initial=len(state["passages"]), desc="target's passages", mininterval=10)
    while len(state["passages"]) < passages and state["asked"] < len(prompts):
        chunk = prompts[state["asked"]:state["asked"] + batch]
        kept = [p for p in map(tidy_passage, target_replies(target, tokenizer, chunk, 160, batch)) if p]
        state["passages"] += kept
        state["asked"] += len(chunk)
        save_whole(state, path)
        bar.update(len(kept))
    bar.close()
    while len(state["foreign"]) < translations:
        start = len(state["foreign"])
        chunk = [(LANGUAGES[i % len(LANGUAGES)], first_sentence(state["passages"][i % len(state["passages"])]))
                 for i in range(start, min(translations, start + batch))]
        replies = target_replies(target, tokenizer, [f"Translate this sentence into {lang}:\n{s}" for lang, s in chunk],
                                 80, batch)
        state["foreign"] += [(lang, (r.strip().splitlines() or [""])[0][:240]) for (lang, _), r in zip(chunk, replies)]
        save_whole(state, path)
    return state


# ---------------------------------------------------------------- the requests
def request(category: str, rng: random.Random, passage: str, foreign: tuple[str, str]) -> str:
    """One first user message of a category; `passage` (the target's) is the material of summaries,
    documents and English sentences to translate, `foreign` a (language, sentence) to translate back."""
    if category == "conversation":
        return rng.choice((
            f"I want to {rng.choice(GOALS)}. I have never tried before. Where should I start?",
            f"Could you think of a good name for a {rng.choice(BUSINESSES)} {rng.choice(PLACES)}?",
            f"I am organising {rng.choice(EVENTS)}. {rng.choice(CONSTRAINTS)} Any ideas?",
            f"Can you help me write {rng.choice(WRITING)}?",
            f"I have {rng.choice(PROBLEMS)}. What can I do about it?",
            f"What is the difference between {rng.choice(PAIRS)}?",
            f"Give me a few tips for {rng.choice(TOPICS)}."))
    if category == "qa":
        return rng.choice(QA_FORMS).format(why=rng.choice(WHY), pair=rng.choice(PAIRS), who=rng.choice(WHO),
                                           how=rng.choice(HOW), concept=rng.choice(CONCEPTS))
    if category == "translation":
        lang, text = foreign
        if rng.random() < 0.5 and text:
            return rng.choice((f"Please translate this {lang} sentence into English:\n{text}",
                               f"What does this mean in English?\n{text}"))
        return rng.choice((f"Translate into {rng.choice(LANGUAGES)}:\n{first_sentence(passage)}",
                           f"How would you say this in {rng.choice(LANGUAGES)}? {first_sentence(passage)}"))
    if category == "summarization":
        ask = rng.choice(("Summarize the text below in two sentences.", "Give a one-sentence summary of this text.",
                          "What are the main points of this passage? Be brief.",
                          "Condense the following into three short bullet points.",
                          "Write a short summary of the following for a busy reader."))
        return f"{ask}\n\n{passage}"
    if category == "rag":
        word = rng.choice(re.findall(r"[A-Za-z]{6,}", passage) or ["this"])
        question = rng.choice(("What is the main point?", "Who is mentioned, and what do they do?",
                               "When and where does it happen?", "Which numbers are given, and what are they for?",
                               "What should a reader do next?", f"What does it say about {word.lower()}?"))
        ask = rng.choice(("Using only the text below, answer the question. Say so if the text does not tell.",
                          "Read the notice and answer the question from it alone.",
                          "Answer from the notes below and nothing else."))
        return f"{ask}\n\nText: {passage}\n\nQuestion: {question}"
    if category == "math":
        return f"{math_problem(rng)} {rng.choice(MATH_ENDINGS)}"
    if category == "code":
        name, args, task = rng.choice(CODE_TASKS)
        return rng.choice(CODE_FORMS).format(name=name, args=args, task=task)
    raise ValueError(f"unknown category {category!r}; choose from {CATEGORIES}")


def math_problem(rng: random.Random) -> str:
    """A word problem with small whole numbers, one of ten forms."""
    a, b = rng.sample(NAMES, 2)
    item, n, k = rng.choice(ITEMS), rng.randint(3, 30), rng.randint(2, 6)
    price, pct = rng.randint(2, 40), rng.choice((10, 15, 20, 25, 30, 50))
    h1, m1 = rng.randint(8, 18), rng.choice((0, 10, 15, 20, 30, 45, 50))
    return rng.choice((
        f"{a} buys {n} {item} at ${price} each and pays with ${(n * price // 50 + 1) * 50}. How much change is left?",
        f"A car drives {k * 45} km in {k} hours. What is its average speed?",
        f"{a} has {k} times as many {item} as {b}. Together they have {n * (k + 1)}. How many does each have?",
        f"A jacket costs ${price * 5}. It is {pct}% off today. What does it cost now?",
        f"A film starts at {h1}:{m1:02d} and lasts {n * 7} minutes. At what time does it end?",
        f"A garden is {n} m long and {k + 2} m wide. What are its area and its perimeter?",
        f"{a} saves ${k * 5} every week. How many weeks until {a} has ${k * 5 * n}?",
        f"A recipe needs {k} eggs for {n} pancakes. How many eggs for {n * 3} pancakes?",
        f"A class has {n * 4} pupils, and {pct}% of them walk to school. How many walk?",
        f"The mean of {k} numbers is {n}. Adding one more number makes the mean {n + 1}. What is that number?"))


# Requests for timing a chat drafter's settings (speclab.train.tuning): the categories whose requests need
# none of the target's material, drawn from the training forms with a seed training runs do not take (they
# default to 0). One may repeat a training request (there are only 120 code requests); what matters is that
# none is a bench prompt, since settings chosen on the prompts they are timed on would flatter them.
TUNING_CATEGORIES = ("conversation", "qa", "math", "code")
TUNING_SEED = 7919


def tuning_requests(n: int, seen: Callable[[str], bool] | None = None) -> list[list[dict]]:
    """n different first user messages for timing EAGLE-2's settings on a chat target: TUNING_CATEGORIES in
    turn, drawn with TUNING_SEED (reproducible, and needing no target). `seen(text)`: whether a request is in the
    head's training data; such a request is skipped (the templates' pools are finite, so a training stream
    of thousands of conversations holds many of them, and settings timed on trained-on requests flatter
    deep trees)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"ask for at least one tuning request, not {n!r}")
    texts = unseen_requests(lambda c, rng: request(c, rng, "", ("", "")), n, TUNING_CATEGORIES, TUNING_SEED, seen,
                            "tuning requests outside the training data",
                            "ask for fewer (--num-prompts), or time on held-out code (--prompts code)")
    return [[{"role": "user", "content": text}] for text in texts]


def unseen_requests(draw: Callable[[str, random.Random], str], n: int, categories: tuple[str, ...], seed,
                    seen: Callable[[str], bool] | None, what: str = "requests outside the stream",
                    advice: str = "ask for fewer") -> list[str]:
    """n different requests draw(category, rng) makes, the categories in turn, rng seeded with `seed`, none
    that `seen(text)` says a stream holds; a clear error after 100 draws a request without enough of them.
    The draws have no passages, so categories drawn over the target's passages are refused (those passages
    are in the training data)."""
    if set(categories) & {"translation", "summarization", "rag"}:
        raise ValueError(f"{categories} include categories drawn over the target's passages; choose among "
                         "conversation, qa, math and code")
    rng, found = random.Random(seed), []
    for _ in range(100 * n):
        text = draw(categories[len(found) % len(categories)], rng)
        if text not in found and (seen is None or not seen(text)):
            found.append(text)
            if len(found) == n:
                return found
    raise ValueError(f"found only {len(found)} of {n} {what} in {100 * n} draws: {advice}")


# The everyday forms' categories whose requests a long stream has not used up: by 4,800 conversations nearly every
# qa and code request these forms can make is in the stream (about a hundred each), while conversation
# requests combine larger pools and word problems draw their numbers.
HELD_OUT_CATEGORIES = ("conversation", "math")


def held_out_requests(n: int, seen: Callable[[str], bool], categories: tuple[str, ...] = HELD_OUT_CATEGORIES
                      ) -> list[str]:
    """n different requests in these forms, categories in turn, drawn with a seed no stream uses and none
    that `seen` says a stream holds: requests of the everyday forms that no drafter trained on (unseen_requests,
    which refuses the categories drawn over passages)."""
    return unseen_requests(lambda c, rng: request(c, rng, "", ("", "")), n, categories, "everyday held out", seen,
                           advice=f"ask for fewer, or draw from {HELD_OUT_CATEGORIES}, whose pools last longest")


# Past this many passages (7,000 conversations) the requests reuse them in turn, each time with another form
# and question: the target's passages cost about a tenth of the answering, and reused ones still vary.
MAX_PASSAGES = 2000


def everyday_requests(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out: Path, n: int, seed: int = 0,
                      batch: int = 64) -> list[list[dict]]:
    """n first user messages, the categories in turn (CATEGORIES), reproducible for a seed once the
    target's material (material) is in out/; the first m of n are the m a run of m asks
    (chat_data.first_messages refuses any that meets a bench prompt)."""
    per = -(-n // len(CATEGORIES))
    state = material(target, tokenizer, out, passages=min(2 * per, MAX_PASSAGES),
                     translations=min(per, MAX_PASSAGES // 2), batch=batch)
    passages, foreign = state["passages"], state["foreign"]
    rng = random.Random(seed)
    convs = []
    for i in range(n):
        turn = i // len(CATEGORIES)
        category = CATEGORIES[i % len(CATEGORIES)]
        passage = passages[(2 * turn + (category == "rag")) % len(passages)]
        convs.append([{"role": "user", "content": request(category, rng, passage, foreign[turn % len(foreign)])}])
    return convs
