"""Chat requests in more forms than chat_requests writes: what a stream of the target's answers continues
with once more of the same stopped paying where it was measured.

Why: SmolLM2's scaling curve (book 9.7) trained its drafters on more and more of chat_requests' everyday
requests, a few forms over small pools, whose qa and code requests a few thousand conversations use up.
More data of other forms is the lever left to test. These requests keep the seven categories (Spec-Bench's
six and code, Xia et al. 2024) and change what varies: new pools and phrasings in each; documents of one
to three of the target's passages, some as emails; translation both ways and between languages; code to
explain, fix, test or trace, not only to write; word problems of several steps; and a second turn that
follows from the first request (follow_ups), as a user's does. None shares a 60-character stretch with a bench prompt
(chat_data.check_disjoint refuses the stream otherwise).

    requests = varied_requests(target, tokenizer, out, n=9200)   # the target's passages resumable in out/
"""
from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from speclab.train import chat_requests
from speclab.train.chat_requests import CATEGORIES, LANGUAGES, NAMES, first_sentence

GOALS = ("start rock climbing", "learn to sew", "grow herbs on a balcony", "run a half marathon", "learn Japanese",
         "make pottery", "start a podcast", "learn to juggle", "brew kombucha", "learn to ice skate",
         "keep a journal", "repair my own bike", "start bird watching", "learn sign language", "bake sourdough")
LIMITS = ("only ten minutes a day", "no money to spend", "two small children at home", "a bad knee",
          "only weekends free", "a tiny flat", "no car")
GIFTS = ("my grandfather, who loves gardening", "a colleague who is retiring", "my ten-year-old nephew",
         "a friend who just moved abroad", "my sister, who is learning to cook", "a neighbour who helped me move")
RECOMMEND = ("a board game for four adults", "a first novel for a teenager who dislikes reading",
             "a houseplant that survives neglect", "a podcast about history", "a warm-up before running",
             "a weekend hobby that gets me outdoors", "a simple dinner for a first date")
DILEMMAS = (("rent a flat in the centre", "a house in the suburbs"), ("buy an e-bike", "buy a used car"),
            ("study in the morning", "study at night"), ("take a gap year", "start university now"),
            ("adopt a puppy", "adopt an older dog"), ("repair my old laptop", "buy a new one"))
TECH_PAIRS = ("a function and a method", "HTTP and HTTPS", "a compiler and an interpreter",
              "git merge and git rebase", "a CPU and a GPU", "a process and a thread", "SQL and NoSQL databases",
              "a stack and a queue", "an API and a library", "RAM and a hard drive")
CITIES = ("Lisbon", "Edinburgh", "Kyoto", "Vienna", "Montreal", "Seville", "Prague", "Copenhagen")
VISITORS = ("two teenagers", "my parents, who walk slowly", "a group of students on a budget",
            "a couple who love food", "someone travelling alone")
WORRIES = ("giving a toast at a wedding", "my first day in a new job", "a driving test next week",
           "speaking up in meetings", "meeting my partner's family", "a long flight with a baby")
TRIPS = ("three days of hiking in autumn", "a week at the beach with kids", "a business trip in winter",
         "a music festival", "a sailing weekend")
CONVERSATION_FORMS = (
    "I'd like to {goal}, but I have {limit}. How should I start?",
    "What could I give {gift}? Something under thirty euros.",
    "Can you recommend {recommend}?",
    "I can't decide whether to {a} or {b}. What should I weigh?",
    "Explain the difference between {tech} to a beginner.",
    "Plan a two-day visit to {city} for {visitors}.",
    "I am nervous about {worry}. Any advice?",
    "What should I pack for {trip}?",
)
CONVERSATION_FOLLOW_UPS = (
    "Can you turn that into a plan for the first week?", "Which of those matters most, and why?",
    "What mistakes do people usually make with this?", "And if I had twice the time?",
    "Could you shorten it to three points?", "Give me an example of the first one.",
    "What would you do differently on a tight budget?", "Thanks! Anything I should avoid?",
)

TRANSLATE_IN = ("Could you translate this from {lang}?\n\n{text}", "{lang} to English, please:\n{text}",
                "Here is a message I got in {lang}. What does it say?\n\n{text}",
                "Give me a natural English version of this {lang} sentence: {text}")
TRANSLATE_OUT = ("Translate into {lang}, keeping it friendly:\n{text}", "I need this in {lang} for a sign: {text}",
                 "How do I say this in {lang}? \"{text}\"", "Put the following into {lang}.\n\n{text}")
TRANSLATION_FOLLOW_UPS = ("Can you make it more formal?", "Is there a more natural way to say it?",
                          "Now into Spanish, please.", "And in German?", "Which word was hardest to translate, and why?",
                          "Explain the grammar of the first few words.")

SUMMARY_ASKS = ("TL;DR this for me:", "Write a headline and a one-sentence summary for this.",
                "In at most {k} sentences, what does this say?", "What is this about? One paragraph.",
                "Pull out the key facts (who, what, when) from this text.", "Give me the gist in two lines:",
                "Summarize this for a ten-year-old.", "Boil this down to a short list of points.")
SUMMARY_FOLLOW_UPS = ("Now make it one line.", "What did you leave out that matters most?",
                      "Turn the summary into a short list.", "Who would care most about this, and why?",
                      "Rewrite the summary in a neutral tone.")

WHY = ("we need sleep", "the sea has tides", "bread goes stale", "some people are left-handed",
       "birds migrate", "we see lightning before we hear thunder", "dogs pant", "glass is transparent",
       "the days are longer in summer", "soap removes grease", "a fever helps fight infection")
HISTORY = ("the printing press", "the first vaccine", "the steam engine", "the Olympic Games",
           "the metric system", "the World Wide Web", "paper money", "the bicycle")
PHENOMENA = ("earthquakes", "rainbows", "the northern lights", "jet lag", "rust", "muscle cramps", "fog",
             "static electricity", "echoes")
MYTHS = ("we only use ten percent of our brains", "goldfish remember for only three seconds",
         "lightning never strikes the same place twice", "cracking your knuckles causes arthritis",
         "bats are blind", "the Great Wall of China is visible from space")
THINGS = ("renewable energy sources", "ancient wonders of the world", "ways to save water at home",
          "planets with rings", "instruments in an orchestra", "parts of a cell")
IDEAS = ("opportunity cost", "natural selection", "the placebo effect", "a budget deficit", "plate tectonics",
         "herd immunity", "the greenhouse effect", "interest rates", "entropy", "a food desert", "DNA",
         "the water table", "a black hole", "machine learning", "an ecosystem", "the speed of light",
         "a trade surplus", "the scientific method", "antibiotic resistance", "a time zone", "encryption",
         "a symphony", "the Renaissance", "a haiku", "the tide tables", "a credit score", "osmosis")
DEBATES = ("working from home", "electric scooters in cities", "homework for young children", "nuclear power",
           "school uniforms", "a four-day working week", "buying local food", "self-checkout tills",
           "learning Latin at school", "daylight saving time", "paper books over e-readers", "cashless shops")
MADE = ("chocolate", "glass", "paper", "cheese", "a pencil", "steel", "yoghurt", "bricks", "olive oil", "soap",
        "a vinyl record", "tofu", "cotton cloth", "maple syrup")
QA_FORMS = ("Why is it that {why}?", "How did {history} change everyday life?", "What causes {phenomenon}?",
            "Is it true that {myth}?", "Name three {things} and say one thing about each.",
            "Who came up with {history}, and when?", "In simple words, what causes {phenomenon}?",
            "Explain {idea} to a curious teenager.", "What is {idea}, and why does it matter?",
            "What are the main arguments for and against {debate}?", "How is {made} made?",
            "Briefly, how do people make {made}?")
QA_FOLLOW_UPS = ("How do we know that?", "Can you give an everyday example?",
                 "What is a common misconception about it?", "Explain it again in two sentences.",
                 "Where could I read more about it?")

MATH_ENDINGS = ("Explain how you got the answer.", "Walk me through it.", "Show each step and the final answer.",
                "Reason it out before giving the answer.", "Please explain your steps.")
MATH_FOLLOW_UPS = ("How can I check that answer?", "What if all the numbers were doubled?",
                   "Can you solve it another way?", "Write the calculation as one expression.",
                   "Make up a similar problem for me to try.")

CODE_TASKS = (
    ("weekday", "date_text", "takes a date like '24/12/2025' and returns its weekday name"),
    ("top_words", "text, n", "returns the n most frequent words, using collections.Counter"),
    ("group_by_city", "people", "groups a list of (name, city) pairs into a dict from city to names"),
    ("moving_average", "values, window", "returns the moving averages of a list over a window"),
    ("balanced", "text", "checks that the brackets (), [] and {} in a string are balanced"),
    ("binary_search", "items, target", "finds a value's index in a sorted list by binary search, or -1"),
    ("roman_to_int", "numeral", "converts a Roman numeral to an integer"),
    ("caesar", "text, shift", "encodes a message with a Caesar cipher, leaving non-letters alone"),
    ("transpose", "matrix", "transposes a matrix given as a list of lists"),
    ("merge_sorted", "a, b", "merges two sorted lists into one sorted list without calling sort"),
    ("slugify", "title", "turns a title into a lowercase URL slug with hyphens"),
    ("to_csv", "rows", "turns a list of dicts with the same keys into CSV text with a header"),
    ("valid_password", "password", "checks a password has 8+ characters, a digit and an uppercase letter"),
    ("seconds_to_clock", "seconds", "formats a number of seconds as H:MM:SS"),
    ("pairs_summing_to", "numbers, total", "returns every pair of numbers in a list that adds up to total"),
    ("word_lengths", "sentence", "maps each word of a sentence to its length"),
)
CODE_WRITE = ("Write a Python function `{name}({args})` that {task}. Add type hints.",
              "I need a Python function that {task}. Please include a couple of doctests.",
              "Using only the standard library, write `{name}({args})`: it {task}.",
              "Show me a clean Python implementation of a function that {task}.")
CODE_FOLLOW_UPS = ("Can you add type hints?", "How would you test it?", "What is its time complexity?",
                   "What happens with an empty input? Make it handle that.", "Can you make it shorter?",
                   "Explain the trickiest line.")
# how users open and close a request; around conversation and question requests, whose pools are smallest
OPENINGS = ("", "", "Hi! ", "Quick question: ", "Hello. ", "I hope you can help. ", "Hey. ")
CLOSINGS = ("", "", " Keep it brief.", " Please be specific.", " A short answer is fine.", " Thanks!",
            " Use plain words.")
FOLLOW_UPS = {"conversation": CONVERSATION_FOLLOW_UPS, "translation": TRANSLATION_FOLLOW_UPS,
              "summarization": SUMMARY_FOLLOW_UPS, "qa": QA_FOLLOW_UPS, "math": MATH_FOLLOW_UPS,
              "rag": ("Quote the sentence that supports your answer.", "Answer again in one sentence.",
                      "What does the text leave unclear?", "Is anything in the text contradictory?"),
              "code": CODE_FOLLOW_UPS}


def snippet(rng: random.Random) -> tuple[str, str]:
    """(a short Python snippet, what to do with it): explain and rewrite, find a bug, trace, or test."""
    name, lo, hi, k = rng.choice(("values", "scores", "sizes", "ages")), rng.randint(0, 5), rng.randint(10, 40), \
        rng.randint(2, 7)
    loop = f"{name} = []\nfor x in range({lo}, {hi}):\n    if x % {k} == 1:\n        {name}.append(x * x)"
    counting = ("counts = {}\nfor word in text.split():\n    if word in counts:\n        counts[word] += 1\n"
                "    else:\n        counts[word] = 1")
    buggy = (f"def last_{k}(items):\n    # the last {k} items\n    return items[len(items) - {k} - 1:]")
    trace = f"x = {lo + 1}\nfor i in range({k}):\n    x = x * 2 - i\nprint(x)"
    return rng.choice(((loop, "Explain this code, then rewrite it as a list comprehension."),
                       (counting, "What does this do? Rewrite it with collections.Counter."),
                       (buggy, "This function has a bug. Find it and fix it."),
                       (trace, "What does this print? Trace it step by step."),
                       (loop, "Explain what this loop builds, line by line.")))


def math_problem(rng: random.Random) -> str:
    """A word problem of two or more steps, one of eight forms."""
    a, b = rng.sample(NAMES, 2)
    n, k, price, pct = rng.randint(4, 24), rng.randint(2, 5), rng.randint(2, 9), rng.choice((10, 20, 25, 40))
    h1, m1, h2, m2 = rng.randint(6, 11), rng.choice((5, 20, 35, 50)), rng.randint(12, 20), rng.choice((0, 25, 40))
    return rng.choice((
        f"Pens cost ${price} each, or ${price * k - 1} for a pack of {k}. {a} needs {n} pens. What is the lowest cost?",
        f"{a} leaves home at {h1}:{m1:02d} and arrives at {h2}:{m2:02d}. How many minutes did the trip take?",
        f"In {k} years, {a} will be twice as old as {b} is now. {b} is {n} now. How old is {a} today?",
        f"A price of ${price * 20} goes up {pct}% and then down {pct}%. What is the final price?",
        f"{a} scored {n + 60}, {n + 70} and {n + 65} on three tests. What score on a fourth gives a mean of {n + 70}?",
        f"A cyclist rides {k * 12} km at {k * 4} km/h, then {n} km at {n} km/h. How long does it take in all?",
        f"A bill of ${n * 10} is shared by {k} friends with a {pct}% tip added. What does each pay?",
        f"A tank holds {n * 20} litres and fills at {k * 5} litres a minute while leaking {k} a minute. "
        "How long until it is full?"))


def document(rng: random.Random, passages: list[str]) -> str:
    """One to three of the target's passages as one text, now and then an email around them."""
    text = " ".join(rng.sample(passages, min(len(passages), rng.choice((1, 2, 2, 3)))))
    if rng.random() < 0.3:
        return f"Hi all,\n\n{text}\n\nBest wishes,\n{rng.choice(NAMES)}"
    return text


def varied_question(category: str, rng: random.Random) -> str:
    """A conversation opener or a general-knowledge question, before its opening and closing words."""
    if category == "conversation":
        a, b = rng.choice(DILEMMAS)
        return rng.choice(CONVERSATION_FORMS).format(
            goal=rng.choice(GOALS), limit=rng.choice(LIMITS), gift=rng.choice(GIFTS), recommend=rng.choice(RECOMMEND),
            a=a, b=b, tech=rng.choice(TECH_PAIRS), city=rng.choice(CITIES), visitors=rng.choice(VISITORS),
            worry=rng.choice(WORRIES), trip=rng.choice(TRIPS))
    return rng.choice(QA_FORMS).format(why=rng.choice(WHY), history=rng.choice(HISTORY), myth=rng.choice(MYTHS),
                                       phenomenon=rng.choice(PHENOMENA), things=rng.choice(THINGS),
                                       idea=rng.choice(IDEAS), debate=rng.choice(DEBATES), made=rng.choice(MADE))


def varied_request(category: str, rng: random.Random, passages: list[str], foreign: list[tuple[str, str]]) -> str:
    """One first user message of a category, drawn by rng from the forms above over the target's passages and
    (language, sentence) translations."""
    if category in ("conversation", "qa"):
        return f"{rng.choice(OPENINGS)}{varied_question(category, rng)}{rng.choice(CLOSINGS)}"
    if category == "translation":
        lang, text = rng.choice(foreign)
        if rng.random() < 0.5 and text:
            return rng.choice(TRANSLATE_IN).format(lang=lang, text=text)
        english = ". ".join(rng.choice(passages).split(". ")[:rng.choice((1, 2))]).rstrip(".") + "."  # 1-2 sentences
        return rng.choice(TRANSLATE_OUT).format(lang=rng.choice(LANGUAGES), text=english)
    if category == "summarization":
        return f"{rng.choice(SUMMARY_ASKS).format(k=rng.randint(2, 4))}\n\n{document(rng, passages)}"
    if category == "math":
        return f"{math_problem(rng)} {rng.choice(MATH_ENDINGS)}"
    if category == "rag":
        text, label = document(rng, passages), rng.choice(("Document", "Passage", "Notes", "Article", "Notice"))
        question = rng.choice(("Which dates or times are mentioned?", "Who is responsible for what?",
                               "What does the text recommend?", "List every place named in the text.",
                               "What would a newcomer need to know first?", "What problem is described, if any?"))
        ask = rng.choice(("Based only on the {label} below, answer: {question}",
                          "{question} Use the {label} below and nothing else; say if it does not say.",
                          "{here}. {question}"))
        here = {"Notes": "Here are some notes", "Article": "Here is an article"}.get(label,
                                                                                     f"Here is a {label.lower()}")
        return f"{ask.format(label=label.lower(), here=here, question=question)}\n\n{label}: {text}"
    if category == "code":
        if rng.random() < 0.4:
            code, ask = snippet(rng)
            return f"{ask}\n\n{code}"
        name, args, task = rng.choice(CODE_TASKS)
        return rng.choice(CODE_WRITE).format(name=name, args=args, task=task)
    raise ValueError(f"unknown category {category!r}; choose from {CATEGORIES}")


def varied_requests(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out: Path, n: int, seed: int = 0,
                    batch: int = 64, start: int = 0) -> list[list[dict]]:
    """The first user messages of a stream's conversations start to start + n - 1, the categories in turn by
    conversation (as second_turns counts them), over the target's material in out/ (chat_requests.material,
    asked for its full MAX_PASSAGES at once, so that the first m of n are the m a run of m asks)."""
    cap = chat_requests.MAX_PASSAGES
    state = chat_requests.material(target, tokenizer, out, passages=cap, translations=cap // 2, batch=batch)
    passages = state["passages"]
    foreign = [(lang, text) for lang, text in state["foreign"] if text] or [("French", first_sentence(passages[0]))]
    rng = random.Random(f"varied {seed}")
    return [[{"role": "user", "content": varied_request(CATEGORIES[i % len(CATEGORIES)], rng, passages, foreign)}]
            for i in range(start, start + n)]


def held_out_requests(n: int, categories: tuple[str, ...], seen: Callable[[str], bool]) -> list[str]:
    """n different requests in these forms, categories in turn, drawn with a seed no stream uses and none
    that `seen` says a stream holds: requests in the varied forms that no drafter trained on, and forms one
    trained on everyday requests alone never met (chat_requests.unseen_requests, which refuses the categories
    drawn over passages)."""
    return chat_requests.unseen_requests(lambda c, rng: varied_request(c, rng, [], []), n, categories, "held out",
                                         seen)


def tuning_requests(n: int, seen: Callable[[str], bool] | None = None) -> list[list[dict]]:
    """n first user messages in these forms for timing EAGLE-2's settings, chat_requests.TUNING_CATEGORIES in
    turn, drawn with a seed of their own (neither the stream's nor held_out_requests'), none that `seen` says
    the head trained on: for a head whose training used up the everyday forms' tuning requests (by 14,000
    conversations a stream holds nearly every qa and code request those forms make)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"ask for at least one tuning request, not {n!r}")
    texts = chat_requests.unseen_requests(lambda c, rng: varied_request(c, rng, [], []), n,
                                          chat_requests.TUNING_CATEGORIES, f"tuning {chat_requests.TUNING_SEED}",
                                          seen, "tuning requests in the varied forms outside the training data",
                                          "ask for fewer (--num-prompts)")
    return [[{"role": "user", "content": text}] for text in texts]

