"""Deterministic long-context tasks: passkey, single needle, multi-key with distractors, variable tracking.

Every sample is a pure function of (seed, task, length, depth, index) and the tokenizer: the same
arguments give byte-identical prompts. Lengths are prompt tokens as the model's tokenizer counts them,
chat template included; each sample's haystack starts at its own offset so samples share no prefix.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import asdict, dataclass, field

TASKS = ("passkey", "niah_single", "niah_multikey", "niah_multivalue", "vt")

# a fixed vocabulary for needle keys (no external word list needed)
_ADJ = ("amber", "brave", "calm", "dusty", "eager", "faint", "gentle", "hollow", "icy", "jolly", "keen", "lucky",
        "misty", "noble", "odd", "proud", "quiet", "rusty", "silver", "tidy", "upper", "vivid", "wild", "young")
_NOUN = ("anchor", "badger", "candle", "dragon", "falcon", "garden", "harbor", "island", "jacket", "kettle", "lantern",
         "meadow", "needle", "orchard", "pepper", "quartz", "river", "saddle", "tunnel", "violin", "walnut", "zebra")

INTRO = {
    "passkey": "There is an important piece of information hidden inside a lot of irrelevant text. Find it and "
               "memorize it. I will quiz you about the important information there.",
    "niah_single": "Some special magic numbers are hidden within the following text. Make sure to memorize them. "
                   "I will quiz you about the numbers afterwards.",
    "niah_multikey": "Some special magic numbers are hidden within the following text. Make sure to memorize them. "
                     "I will quiz you about the numbers afterwards.",
    "niah_multivalue": "Some special magic numbers are hidden within the following text. Make sure to memorize them. "
                       "I will quiz you about the numbers afterwards.",
    "vt": "Memorize and track the chain(s) of variable assignment hidden in the following text.",
}


@dataclass
class Question:
    text: str            # the question (after the context)
    answer_prefix: str   # the start of the assistant's answer (completions API)
    answers: list[str]   # all must appear in the output


@dataclass
class Sample:
    id: str
    task: str
    target_length: int
    depth: float | None  # fraction of the haystack before the (queried) needle; None for spread needles
    seed: int
    index: int
    context: str
    questions: list[Question]   # questions[0] is the primary one; more share the context (prefix-cache runs)
    max_new_tokens: int
    n_tokens: int = 0            # chat-templated prompt tokens of questions[0] (without the answer prefix)
    haystack_source: str = ""
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> "Sample":
        d = dict(d)
        d["questions"] = [Question(**q) for q in d["questions"]]
        return Sample(**d)


def _rng(*parts) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "little"))


def _key(rng: random.Random, taken: set) -> str:
    while True:
        k = f"{rng.choice(_ADJ)}-{rng.choice(_NOUN)}"
        if k not in taken:
            taken.add(k)
            return k


def _number(rng: random.Random, digits: int, taken: set) -> str:
    while True:
        n = str(rng.randrange(10 ** (digits - 1), 10 ** digits))
        if n not in taken:
            taken.add(n)
            return n


def split_sentences(text: str) -> list[str]:
    text = re.sub(r"\s+", " ", text)
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


SOURCE_PASSKEY_FILLER = "repeated passkey filler (grass/sky/sun)"
PASSKEY_FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ")


class Builder:
    """Fits haystack sentences + needles to a token budget with the model's tokenizer."""

    def __init__(self, tokenizer, haystack: str, haystack_source: str):
        self.tok = tokenizer
        self.source = haystack_source
        self.sentences = split_sentences(haystack)
        if len(self.sentences) < 50:
            raise ValueError("haystack text has fewer than 50 sentences")
        # token counts per sentence (with a leading space, as they appear joined)
        self.lens = [len(ids) for ids in tokenizer([" " + s for s in self.sentences], add_special_tokens=False)["input_ids"]]
        self.filler = split_sentences(PASSKEY_FILLER * 2)[:5]
        self.filler_lens = [len(ids) for ids in tokenizer([" " + s for s in self.filler], add_special_tokens=False)["input_ids"]]

    def render(self, intro: str, context: str, question: Question) -> list[dict]:
        return [{"role": "user", "content": f"{intro}\n\n{context}\n\n{question.text}"}]

    def prompt_ids(self, task: str, context: str, question: Question, with_prefix: bool = True) -> list[int]:
        ids = self.tok.apply_chat_template(self.render(INTRO[task], context, question), add_generation_prompt=True,
                                           tokenize=True)
        if hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        ids = list(ids)
        if with_prefix and question.answer_prefix:
            ids += self.tok(question.answer_prefix, add_special_tokens=False)["input_ids"]
        return ids

    def build(self, task: str, length: int, rng: random.Random, needles: list[tuple[float, str]],
              questions: list[Question]) -> tuple[str, int]:
        """Context with ``needles`` (depth fraction, sentence) inserted, and the prompt tokens of
        ``questions[0]`` without its answer prefix; every question's prompt as sent, answer prefix
        included, is at most ``length`` tokens."""
        overhead = self._longest(task, " ".join(n for _, n in needles), questions)
        budget = length - overhead
        if budget < 32:
            raise ValueError(f"length {length} is too short for task {task} (needs more than {overhead + 32} tokens)")
        if task == "passkey":  # the classic passkey haystack: one repeated paragraph, as in the passkey literature
            sentences, lens = self.filler, self.filler_lens
            # a distinct opening line per sample, so samples share no cached prefix
            opening = f"This is document {rng.choice(_ADJ)} {rng.choice(_NOUN)} {rng.choice(_ADJ)} {rng.choice(_NOUN)}."
            picked, total, i = [opening], len(self.tok(" " + opening, add_special_tokens=False)["input_ids"]), 0
        else:
            sentences, lens = self.sentences, self.lens
            i = rng.randrange(len(sentences))
            picked, total = [], 0
        n = len(sentences)
        while total < budget:
            picked.append(sentences[i % n])
            total += lens[i % n]
            i += 1
            if task != "passkey" and len(picked) > n:
                raise ValueError("haystack text is too short for this length")
        while True:
            context = self._insert(picked, needles)
            longest = self._longest(task, context, questions)
            if longest <= length or len(picked) <= 1:
                return context, len(self.prompt_ids(task, context, questions[0], with_prefix=False))
            drop = max(1, (longest - length) // 40)  # ~20-40 tokens per sentence; converge in a few passes
            picked = picked[:-drop]

    def _longest(self, task: str, context: str, questions: list[Question]) -> int:
        return max(len(self.prompt_ids(task, context, q)) for q in questions)

    @staticmethod
    def _insert(picked: list[str], needles: list[tuple[float, str]]) -> str:
        out = list(picked)
        # insert from the deepest down so earlier positions stay valid
        for depth, needle in sorted(needles, key=lambda x: -x[0]):
            out.insert(round(depth * len(picked)), needle)
        return " ".join(out)


def make_sample(builder: Builder, task: str, length: int, depth: float | None, index: int, seed: int = 0,
                n_questions: int = 1) -> Sample:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    rng = _rng(seed, task, length, depth, index)
    keys, nums = set(), set()
    extra = {}
    if task == "passkey":
        kq = [_number(rng, 5, nums) for _ in range(max(1, n_questions))]
        # one passkey per question, each its own needle; question j asks for the j-th
        names = ["first", "second", "third", "fourth"]
        if n_questions == 1:
            needles = [(depth, f"The pass key is {kq[0]}. Remember it. {kq[0]} is the pass key.")]
            questions = [Question("What is the pass key?", "The pass key is", [kq[0]])]
        else:
            pos = [depth] + [rng.random() for _ in kq[1:]]
            needles = [(p, f"The {names[j]} pass key is {k}. Remember it. {k} is the {names[j]} pass key.")
                       for j, (p, k) in enumerate(zip(pos, kq))]
            questions = [Question(f"What is the {names[j]} pass key?", f"The {names[j]} pass key is", [k]) for j, k in enumerate(kq)]
        max_new = 8
    elif task in ("niah_single", "niah_multikey"):
        n_needles = 1 if task == "niah_single" else 4
        n_needles = max(n_needles, n_questions)
        ks = [_key(rng, keys) for _ in range(n_needles)]
        vs = [_number(rng, 7, nums) for _ in range(n_needles)]
        pos = [depth] + [rng.random() for _ in range(n_needles - 1)]  # needle 0 is queried at ``depth``
        needles = [(p, f"One of the special magic numbers for {k} is: {v}.") for p, k, v in zip(pos, ks, vs)]
        questions = [Question(f"What is the special magic number for {k} mentioned in the provided text?",
                              f"The special magic number for {k} mentioned in the provided text is", [v])
                     for k, v in zip(ks[:max(1, n_questions)], vs)]
        max_new = 10
        extra["distractors"] = n_needles - 1
    elif task == "niah_multivalue":  # a key with four values (the first at the queried depth); all four asked
        needles, questions = [], []
        for j in range(max(1, n_questions)):  # more questions: more keys, four values each
            k = _key(rng, keys)
            vs = [_number(rng, 7, nums) for _ in range(4)]
            pos = ([depth] if j == 0 else [rng.random()]) + [rng.random() for _ in range(3)]
            needles += [(p, f"One of the special magic numbers for {k} is: {v}.") for p, v in zip(pos, vs)]
            questions.append(Question(f"What are all the special magic numbers for {k} mentioned in the provided text?",
                                      f"The special magic numbers for {k} mentioned in the provided text are", vs))
        max_new = 48
    else:  # vt: one chain of 4 hops spread over the context, one question per chain
        n_chains = max(1, n_questions)
        needles, questions = [], []
        for c in range(n_chains):
            value = _number(rng, 5, nums)
            names = ["".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5)) for _ in range(5)]
            chain = [f"VAR {names[0]} = {value}."] + [f"VAR {names[j]} = VAR {names[j - 1]}." for j in range(1, 5)]
            base = (depth if depth is not None else 0.1) if c == 0 else rng.random() * 0.5
            span = min(0.8, 1.0 - base)
            needles += [(base + span * j / 5, s) for j, s in enumerate(chain)]
            questions.append(Question(f"Find all variables that are assigned the value {value} in the text above.",
                                      f"Answer: According to the chain of variable assignment in the text above, 5 "
                                      f"variables are assigned the value {value}, they are:", names))
        max_new = 30
    context, n_tokens = builder.build(task, length, rng, needles, questions)
    sid = f"{task}-L{length}-d{'spread' if depth is None else f'{depth:.2f}'}-s{seed}-i{index}"
    source = SOURCE_PASSKEY_FILLER if task == "passkey" else builder.source
    return Sample(sid, task, length, depth, seed, index, context, questions, max_new, n_tokens, source, extra)


def generate(builder: Builder, tasks: list[str], lengths: list[int], depths: list[float], samples: int,
             seed: int = 0, n_questions: int = 1) -> list[Sample]:
    """``samples`` per (task, length), cycling through ``depths`` (so depths are balanced)."""
    out = []
    for task in tasks:
        for length in lengths:
            for i in range(samples):
                out.append(make_sample(builder, task, length, depths[i % len(depths)], i, seed, n_questions))
    return out


def fingerprint(samples: list[Sample]) -> str:
    """sha256 of the task set, to tell runs on identical tasks apart from runs on different ones."""
    h = hashlib.sha256()
    for s in samples:
        h.update(json.dumps(s.to_json(), sort_keys=True).encode())
    return h.hexdigest()[:16]
