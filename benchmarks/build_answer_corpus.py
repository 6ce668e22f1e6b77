"""Build tests/data/answer_corpus.jsonl: model replies with the final answer each one states.

    .venv/bin/python benchmarks/build_answer_corpus.py [--data ../shared/data] [--out tests/data/answer_corpus.jsonl]
    .venv/bin/python benchmarks/build_answer_corpus.py --review    # print every row's tail and label, write nothing

Deterministic: the same data folder gives the same file, byte for byte (fixed seeds, sorted inputs).

Real texts are small excerpts of the pools in the shared data folder (see tests/data/README.md for sources and
licences), chosen under the data rules: ZeroEval problems with id % 4 == 1 only; Faithful-CoT and the GPT-3 GSM8K
solutions on problems with id % 5 != 0 only; no Python-program completions (noNL, NL+SL). Every expected answer comes
from evidence that does not depend on the project's answer reader:

- a sample the pool grades correct states the gold answer (GPT-3 `is_correct`, Qwen2.5-Math `score`);
- the pool's own extraction where its format is unambiguous (the text after GPT-3's last "A:", the `answer` field of
  a ZeroEval JSON reply, re-read from the raw text and required to agree with the pool's field);
- "The answer is N." read with a strict pattern (Faithful-CoT), or a final sentence with one number that equals the
  gold answer; every selected row was also read by eye (`--review`);
- constructed texts (gold solutions of GSM8K / MATH-500 put in the answer formats of evaluation harnesses, and
  hand-written replies) carry the answer they were written with.

The SmolLM2-135M-Instruct replies were produced once with `aggregate-graph ask QUESTION --n 4 --max-tokens 64
--seed 7 --json` (the embedded model, CPU) and are stored below with labels read by hand.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data"
DEFAULT_OUT = ROOT / "tests" / "data" / "answer_corpus.jsonl"
MAX_CHARS = 3000

Row = dict[str, object]


# ---------------------------------------------------------------------------------------------------------------
# helpers


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


_NUM = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?|-?\$?\.\d+")
_ANNOTATION = re.compile(r"<<[^<>]*>>")


def plain_number(s: str) -> str:
    """ "$1,250.00" -> "1250", "18." -> "18", "-3.50" -> "-3.5"."""
    s = s.strip().rstrip(".").replace("$", "").replace(",", "")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def numbers(s: str) -> list[str]:
    return [plain_number(m) for m in _NUM.findall(s)]


def gsm8k_gold(answer: str) -> str:
    return plain_number(answer.split("####")[-1])


def strip_annotations(s: str) -> str:
    return _ANNOTATION.sub("", s)


def unbox(s: str) -> str:
    """`\\boxed{X}` -> X everywhere (balanced braces), as a solution written without boxes would read."""
    out, i = [], 0
    while (j := s.find("\\boxed{", i)) >= 0:
        out.append(s[i:j])
        depth, k = 0, j + len("\\boxed")
        while k < len(s):
            depth += (s[k] == "{") - (s[k] == "}")
            if depth == 0:
                break
            k += 1
        out.append(s[j + len("\\boxed{") : k])
        i = k + 1
    out.append(s[i:])
    return "".join(out)


def row(family: str, source: str, question: str, text: str, expected: str | None, **extra: object) -> Row:
    r: Row = {"family": family, "source": source, "question": question, "text": text}
    r.update({k: v for k, v in extra.items() if v is not None})
    r["expected"] = expected
    return r


def shuffled(items: list, seed: str) -> list:
    items = list(items)
    random.Random(seed).shuffle(items)
    return items


# ---------------------------------------------------------------------------------------------------------------
# 1. Faithful-CoT natural-language completions (COT, LtM, standard)

FCOT_LMS = ("code001", "code002", "text002", "text003", "gpt-3.5-turbo", "gpt4")
FCOT_PROMPTS = ("COT", "LtM", "standard")
_ANSWER_IS = re.compile(r"The answer is\s+(.*?)(?:\.\s|\.$|\n|$)")


def label_faithful_cot(text: str, gold: str) -> str | None:
    """The answer a Faithful-CoT completion states, when it can be read with confidence; else None (skipped)."""
    text = text.strip()
    stated = list(_ANSWER_IS.finditer(text))
    if stated:
        tail = stated[-1].group(1)
        found = numbers(tail)
        if len(found) == 1 and re.fullmatch(r"\$?-?[\d,.]+\s*(?:[a-z]+\s*){0,3}", tail.strip()):
            return found[0]
        return None
    last_sentence = re.split(r"(?<=[.!?])\s+|\n+", text)[-1]
    found = numbers(last_sentence)
    if (
        len(found) == 1
        and found[0] == gold
        and re.search(r"[\w$%]\.$", last_sentence)
        and not re.search(r"[=+]", last_sentence)
    ):
        return found[0]  # a final sentence with one number, the gold: e.g. "Josh made a profit of $65,000."
    return None


def faithful_cot(data: Path) -> list[Row]:
    questions = read_jsonl(data / "gsm8k" / "test.jsonl")
    golds = [gsm8k_gold(q["answer"]) for q in questions]
    rows: list[Row] = []
    for lm in FCOT_LMS:
        for prompt in FCOT_PROMPTS:
            path = data / "samples" / "faithful_cot_gsm8k" / f"{lm}_{prompt}" / "predictions.jsonl"
            preds = [p for p in read_jsonl(path) if p["id"] % 5 != 0 and len(p["completion"]) < MAX_CHARS]
            with_phrase, without = [], []
            for p in shuffled(preds, f"fcot/{lm}/{prompt}"):
                expected = label_faithful_cot(p["completion"], golds[p["id"]])
                if expected is None:
                    continue
                (with_phrase if "The answer is" in p["completion"] else without).append((p, expected))
            picks = with_phrase[:1] + (without[:1] or with_phrase[1:2])
            for p, expected in picks:
                source = f"faithful_cot_gsm8k/{lm}_{prompt}/predictions.jsonl id={p['id']}"
                rows.append(row("faithful_cot_cot", source, questions[p["id"]]["question"], p["completion"], expected))
    return rows


# ---------------------------------------------------------------------------------------------------------------
# 2. GPT-3 GSM8K solutions ("... A: 26")

GPT3_SYSTEMS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")


def gpt3_solutions(data: Path) -> list[Row]:
    path = data / "samples" / "gsm8k_example_model_solutions" / "example_model_solutions.jsonl"
    problems = list(enumerate(read_jsonl(path)))
    rows: list[Row] = []
    for system in GPT3_SYSTEMS:
        correct = wrong = 0
        for i, p in shuffled([x for x in problems if x[0] % 5 != 0], f"gpt3/{system}"):
            sol = p[system]
            text = sol["solution"]
            after = text.rsplit("A:", 1)[-1].strip() if "A:" in text else ""
            if not re.fullmatch(r"-?\$?\d[\d,]*(?:\.\d+)?", after) or len(text) > MAX_CHARS:
                continue
            expected = plain_number(after)
            if sol["is_correct"]:
                if correct >= 5 or expected != gsm8k_gold(p["ground_truth"].replace("A:", "####")):
                    continue
                correct += 1
            else:
                if wrong >= 3:
                    continue
                wrong += 1
            source = f"gsm8k_example_model_solutions line={i} {system}"
            rows.append(row("gpt3_solutions", source, p["question"], text, expected))
            if correct + wrong == 8:
                break
    return rows


# ---------------------------------------------------------------------------------------------------------------
# 3. Qwen2.5-Math responses with \boxed{}

_LATEXY = re.compile(r"\\|[(\[]|\^")


def qwen_math(data: Path) -> list[Row]:
    problems = read_jsonl(data / "samples" / "qwen25math_math_cot_100" / "math_cot_100.jsonl")
    latex, plain = [], []
    for p in problems:
        for j, (text, score) in enumerate(zip(p["response"], p["score"], strict=True)):
            if score and len(text) < MAX_CHARS and "\\boxed" in text:
                (latex if _LATEXY.search(p["gt"]) else plain).append((p, j, text))
                break  # one response per problem
    picks = shuffled(latex, "qwen/latex")[:20] + shuffled(plain, "qwen/plain")[:12]
    rows = []
    for p, j, text in sorted(picks, key=lambda x: x[0]["idx"]):
        source = f"qwen25math_math_cot_100 idx={p['idx']} response={j} (score true: the gold)"
        rows.append(row("qwen_math_boxed", source, p["question"], text, p["gt"]))
    return rows


# ---------------------------------------------------------------------------------------------------------------
# 4-5. ZeroEval MATH level 5 (id % 4 == 1 only)

_JSON_ANSWER = re.compile(r'"answer"\s*:\s*"((?:[^"\\]|\\.)*)"')
_WORDY = re.compile(r"(?<!\\)\b[A-Za-z]{3,}\b")
_NOT_BARE = re.compile(r"(?<!\\)\b[A-Za-z]{3,}\b|=|\\pm|sqrt\(")  # words, equations, "±", "sqrt(2)"


def _decode_json_string(raw: str) -> str:
    """A JSON string body as the model meant it: `\\\\` is one backslash; a lone `\\f` in `\\frac` stays LaTeX."""
    return raw.replace("\\\\", "\\").replace('\\"', '"')


def _clean_math(s: str) -> str:
    s = s.strip().strip("$").strip()
    return s


def zeroeval_problems(data: Path) -> list[dict]:
    problems = read_jsonl(data / "samples" / "zeroeval_math_l5" / "pools_odd.jsonl")
    return [p for p in problems if p["id"] % 4 == 1]  # the rule: never id % 4 == 3


def _zeroeval_shape(output: str) -> str:
    o = output.strip()
    if o.startswith("{"):
        return "bare"
    if o.startswith("```"):
        return "fence"
    if "```json" in o:
        return "prose+fence"
    return "prose+json"


def zeroeval_json(data: Path) -> list[Row]:
    buckets: dict[str, list[tuple[dict, dict, str]]] = {}
    for p in zeroeval_problems(data):
        for s in p["samples"]:
            out = s["output"]
            found = _JSON_ANSWER.findall(out)
            if len(out) >= MAX_CHARS or len(found) != 1 or s["answer"] is None:
                continue
            answer = _clean_math(_decode_json_string(found[0]))
            if not answer or answer != _clean_math(_decode_json_string(s["answer"])) or _NOT_BARE.search(answer):
                continue  # the raw text and the pool's field must agree, and be a bare math answer
            kind = "latex" if "\\sqrt" in answer or "\\frac" in answer or "\\pi" in answer else "plain"
            buckets.setdefault(f"{_zeroeval_shape(out)}/{kind}", []).append((p, s, answer))
    quota = {"bare/latex": 4, "fence/latex": 5, "prose+fence/latex": 2, "prose+json/latex": 2, "bare/plain": 6,
             "fence/plain": 8, "prose+fence/plain": 6, "prose+json/plain": 5}  # fmt: skip
    rows = []
    for key in sorted(quota):
        for p, s, answer in shuffled(buckets.get(key, []), f"zeroeval/{key}")[: quota[key]]:
            source = f"zeroeval_math_l5/pools_odd.jsonl id={p['id']} model={s['model']} ({key})"
            rows.append(row("zeroeval_json", source, p["problem"], s["output"], answer))
    return rows


_FINAL_ANSWER_IS = re.compile(r"final answer is:?\s*\$*\\boxed\{", re.IGNORECASE)
# A last line "Answer: 3", "Answer: \"955\"", "**answer**: \"-5\"" (the pool found no answer in these: null)
_ANSWER_LINE = re.compile(r'^\**answer\**:\s*"?(-?\d+)"?\s*$', re.IGNORECASE)
# Replies that give no answer at all (read by eye): the model says the problem is wrong or needs more analysis.
ZEROEVAL_NO_ANSWER = (13, 41, 45)


def zeroeval_other(data: Path) -> list[Row]:
    picks: dict[str, list[tuple[dict, dict, str | None]]] = {}
    for p in zeroeval_problems(data):
        for s in p["samples"]:
            out = s["output"]
            if '"answer"' in out or len(out) >= MAX_CHARS:
                continue
            if s["answer"] is None:
                lines = [line for line in out.strip().strip("`}\n ,").splitlines() if line.strip()]
                if lines and (m := _ANSWER_LINE.match(lines[-1].strip().rstrip(","))):
                    picks.setdefault("answer_line", []).append((p, s, m.group(1)))
                elif s["model"].startswith("reka") and p["id"] in ZEROEVAL_NO_ANSWER:
                    picks.setdefault("no_answer", []).append((p, s, None))
                continue
            answer = _clean_math(s["answer"])
            if not answer or _NOT_BARE.search(answer) or "\\boxed{" + answer not in out.replace("$", ""):
                continue  # the pool's answer must be the text's boxed content, read by eye too
            kind = "final_answer_is" if _FINAL_ANSWER_IS.search(out) else "boxed"
            picks.setdefault(kind, []).append((p, s, answer))
    rows = []
    for kind, count in (("boxed", 10), ("final_answer_is", 12), ("answer_line", 10), ("no_answer", 3)):
        for p, s, answer in shuffled(picks.get(kind, []), f"zeroeval_other/{kind}")[:count]:
            source = f"zeroeval_math_l5/pools_odd.jsonl id={p['id']} model={s['model']} ({kind})"
            rows.append(row("zeroeval_other", source, p["problem"], s["output"], answer))
    return rows


# ---------------------------------------------------------------------------------------------------------------
# GSM8K train and MATH-500 gold solutions, put in answer formats


def gsm8k_train(data: Path, seed: str, count: int, max_chars: int = 500) -> list[tuple[int, str, str, str]]:
    """`count` short GSM8K train problems: (id, question, reasoning without annotations nor "####", gold)."""
    problems = list(enumerate(read_jsonl(data / "gsm8k" / "train.jsonl")))
    out = []
    for i, p in shuffled(problems, seed):
        body, _, gold = p["answer"].rpartition("####")
        body = strip_annotations(body).strip()
        gold = plain_number(gold)
        if len(body) <= max_chars and re.fullmatch(r"-?\d+", gold):
            out.append((i, p["question"], body, gold))
        if len(out) == count:
            break
    return out


def math500(data: Path, seed: str, count: int, max_chars: int = 1200) -> list[tuple[str, str, str, str]]:
    """`count` MATH-500 problems with short solutions: (unique_id, problem, solution without boxes, answer)."""
    problems = read_jsonl(data / "math500" / "test.jsonl")
    out = []
    for p in shuffled(problems, seed):
        if len(p["solution"]) <= max_chars and len(p["answer"]) <= 40 and "\\text" not in p["answer"]:
            out.append((p["unique_id"], p["problem"], unbox(p["solution"]).strip(), p["answer"]))
        if len(out) == count:
            break
    return out


# 6. Answer first, then the reasoning, then a final statement
ANSWER_FIRST_ENDINGS = (
    "ans = {n}",
    "So the answer is {n}.",
    "Therefore, {n}.",
    "#### {n}",
    "**Final answer:** {n}",
)


def answer_first(data: Path) -> list[Row]:
    rows = []
    for k, (i, question, body, gold) in enumerate(gsm8k_train(data, "answer_first", 35)):
        ending = ANSWER_FIRST_ENDINGS[k % len(ANSWER_FIRST_ENDINGS)].format(n=gold)
        joined = " ".join(body.split("\n")) if k % 2 else body
        text = f"Answer: {joined}\n{ending}"
        source = f"constructed from gsm8k/train.jsonl id={i} (gold solution, annotations removed)"
        rows.append(row("answer_first_reasoning", source, question, text, gold))
    return rows


# 7. Minerva / lm-eval-harness minerva_math
def minerva(data: Path) -> list[Row]:
    rows = []
    for k, (uid, problem, solution, answer) in enumerate(math500(data, "minerva", 30)):
        tail = "Final Answer: The final answer is ${a}$. I hope it is correct."
        if k % 5 == 3:
            tail = "Final Answer: The final answer is {a}. I hope it is correct."
        text = f"{solution}\n{tail.format(a=answer)}"
        source = f"harness:minerva_math on math500/test.jsonl {uid} (gold solution)"
        rows.append(row("minerva", source, problem, text, answer))
    return rows


# Multiple-choice bank: (question, options, correct letter, a short reason). Options are given in order from A.
MC_BANK: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    ("Which planet is known as the Red Planet?", ("Venus", "Mars", "Jupiter", "Saturn"), "B",
     "iron oxide on its surface gives Mars its reddish colour"),
    ("What is the powerhouse of the cell?", ("Nucleus", "Ribosome", "Mitochondria", "Golgi apparatus"), "C",
     "mitochondria produce most of the cell's ATP"),
    ("What is the chemical symbol for gold?", ("Ag", "Au", "Gd", "Go"), "B",
     "the symbol comes from the Latin aurum"),
    ("Which gas do plants absorb from the atmosphere for photosynthesis?",
     ("Oxygen", "Nitrogen", "Carbon dioxide", "Hydrogen"), "C",
     "plants fix carbon dioxide into sugars"),
    ("What is 6 x 7?", ("36", "42", "48", "54"), "B", "6 x 7 = 42"),
    ("Who wrote 'Pride and Prejudice'?", ("Charlotte Brontë", "Jane Austen", "Mary Shelley", "George Eliot"), "B",
     "Jane Austen published it in 1813"),
    ("What is the capital of France?", ("Berlin", "Madrid", "Paris", "Rome"), "C",
     "Paris has been the capital for centuries"),
    ("At sea level, water boils at how many degrees Celsius?", ("90", "100", "110", "120"), "B",
     "at 1 atm water boils at 100 °C"),
    ("Which organ pumps blood through the body?", ("Liver", "Lungs", "Kidney", "Heart"), "D",
     "the heart is the muscular pump of the circulatory system"),
    ("What is the largest ocean on Earth?", ("Atlantic Ocean", "Indian Ocean", "Arctic Ocean", "Pacific Ocean"), "D",
     "the Pacific covers about a third of the Earth's surface"),
    ("What is the derivative of x^2 with respect to x?", ("x", "2x", "x^2", "2"), "B",
     "by the power rule d/dx x^n = n x^(n-1)"),
    ("Which of the following is a prime number?", ("21", "27", "29", "33"), "C",
     "21 = 3*7, 27 = 3^3 and 33 = 3*11, while 29 has no divisors other than 1 and itself"),
    ("In which year did World War II end?", ("1943", "1944", "1945", "1946"), "C",
     "Japan surrendered in September 1945"),
    ("Which element has atomic number 1?", ("Helium", "Hydrogen", "Lithium", "Oxygen"), "B",
     "hydrogen has a single proton"),
    ("What is the SI unit of force?", ("Joule", "Watt", "Newton", "Pascal"), "C",
     "1 N = 1 kg·m/s^2"),
    ("What is the square root of 144?", ("10", "11", "12", "14"), "C", "12 x 12 = 144"),
    ("A train travels 60 km in 1.5 hours. What is its average speed?",
     ("30 km/h", "40 km/h", "45 km/h", "90 km/h"), "B", "60 / 1.5 = 40"),
    ("Which quantum number describes the shape of an orbital?", ("Principal", "Azimuthal", "Magnetic", "Spin"), "B",
     "the azimuthal quantum number l sets the orbital shape (s, p, d, f)"),
    ("Which of these animals is a mammal?", ("Shark", "Dolphin", "Trout", "Octopus"), "B",
     "dolphins breathe air and nurse their young"),
    ("Which is the smallest unit of life?",
     ("Organ", "Tissue", "Organelle", "Molecule", "Atom", "Organism", "Cell", "Population", "Ecosystem", "Biome"),
     "G", "the cell is the smallest unit that can live on its own"),
    ("Which number is the largest?", ("3", "5", "2", "8", "1", "7", "4", "9", "6", "12"), "J",
     "12 is larger than every other option"),
    ("Which data structure works first-in, first-out?", ("Stack", "Queue", "Heap", "Tree"), "B",
     "a queue removes items in the order they were added"),
)  # fmt: skip

LETTERS = "ABCDEFGHIJ"


def mc_question(k: int, style: int) -> tuple[str, tuple[str, ...], str, str, str]:
    """Question k of the bank with its options listed in one of three styles: (question, options, letter,
    option text, reason)."""
    question, options, letter, reason = MC_BANK[k % len(MC_BANK)]
    if style == 0:
        listed = "\n".join(f"{LETTERS[i]}) {o}" for i, o in enumerate(options))
    elif style == 1:
        listed = " ".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(options))
    else:
        listed = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
    sep = "\n" if style != 1 else " "
    text = options[LETTERS.index(letter)]
    return f"{question}{sep}{listed}", options, letter, text, reason


# 8. OpenAI simple-evals: math "Answer: $ANSWER" (math_eval.py), MMLU/GPQA "Answer: $LETTER" (common.py)
SIMPLE_EVALS_MC_TAILS = ("Answer: {L}", "Answer: **{L}**", "Answer: ({L})", "Answer: ${L}$", "**Answer: {L}**",
                         "ANSWER: {L}")  # fmt: skip
SIMPLE_EVALS_MATH_PROMPT = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "ANSWER: $ANSWER (without quotes) where $ANSWER is the answer to the problem.\n\n{q}\n\n"
    'Remember to put your answer on its own line after "ANSWER:", and you do not need to use a \\boxed command.'
)
SIMPLE_EVALS_MC_PROMPT = (
    "Answer the following multiple choice question. The last line of your response should be of the following "
    "format: 'Answer: $LETTER' (without quotes) where LETTER is one of ABCD. Think step by step before answering."
    "\n\n{q}"
)


def simple_evals(data: Path) -> list[Row]:
    rows = []
    for k, (uid, problem, solution, answer) in enumerate(math500(data, "simple_evals", 14)):
        tail = ("Answer: {a}", "ANSWER: {a}", "Answer: ${a}$")[k % 3].format(a=answer)
        text = f"{solution}\n\n{tail}"
        source = f"harness:simple-evals math_eval on math500/test.jsonl {uid} (gold solution)"
        rows.append(row("simple_evals", source, SIMPLE_EVALS_MATH_PROMPT.format(q=problem), text, answer))
    for k in range(18):
        question, options, letter, option_text, reason = mc_question(k * 5 + 1, 0)
        if len(options) > 4:
            continue
        tail = SIMPLE_EVALS_MC_TAILS[k % len(SIMPLE_EVALS_MC_TAILS)].format(L=letter)
        wrong = LETTERS[(LETTERS.index(letter) + 1) % len(options)]
        text = (
            f"Let's think step by step. We need the option that fits: {reason}. Option {wrong} "
            f"({options[LETTERS.index(wrong)]}) does not fit, so the answer is {option_text}.\n\n{tail}"
        )
        rows.append(row("simple_evals", "harness:simple-evals mmlu/gpqa (constructed reply)",
                        SIMPLE_EVALS_MC_PROMPT.format(q=question), text, letter))  # fmt: skip
    return rows


# 9. lighteval / lm-eval-harness shapes
def lighteval_lm_eval(data: Path) -> list[Row]:
    rows = []
    mc_tails = (
        ("{r}. The final answer is ({L})", "lighteval extractive match: 'final answer is'"),
        ("Let's think step by step. {R}. So the answer is ({L}).", "lm-eval mmlu_flan_cot / bbh cot: 'answer is (X)'"),
        ("{R}.\nTherefore, the final answer is: $\\boxed{{{L}}}$", "lighteval instruct template, boxed letter"),
        ("{R}, so the answer is {L}.", "lm-eval bbh cot: 'the answer is X.'"),
        ("{R}. The final answer is {L}. I hope it is correct.", "lighteval: 'final answer is X. I hope'"),
    )
    for k in range(15):
        question, _options, letter, _text, reason = mc_question(k * 3 + 2, k % 3)
        tail, source = mc_tails[k % len(mc_tails)]
        text = tail.format(r=reason[0].upper() + reason[1:], R=reason[0].upper() + reason[1:], L=letter)
        rows.append(row("lighteval_lm_eval", f"harness:{source}", question, text, letter))
    for k, (i, question, body, gold) in enumerate(gsm8k_train(data, "lm_eval_gsm8k", 15)):
        shape = k % 3
        if shape == 0:  # lm-eval gsm8k (5-shot): the solution then "#### N", strict-match "#### (\-?[0-9\.\,]+)"
            text, source = f"{body}\n#### {gold}", "lm-eval gsm8k strict-match '#### N'"
        elif shape == 1:  # lm-eval gsm8k-cot: "The answer is N."
            text, source = (
                f"{' '.join(body.splitlines())} The answer is {gold}.",
                "lm-eval gsm8k-cot 'The answer is N.'",
            )
        else:
            text, source = f"{' '.join(body.splitlines())} The answer is ${gold}.", "lm-eval gsm8k-cot, with '$'"
        rows.append(row("lighteval_lm_eval", f"harness:{source} on gsm8k/train.jsonl id={i}", question, text, gold))
    return rows


# 10. Multiple choice answered by letter
CHOICE_LETTER_REPLIES = (
    "{L}", "({L})", "{L})", "{L}.", "option {L}", "I choose option {L}.", "\\boxed{{{L}}}", "Answer: {L}",
    "Answer: {L}) {T}", "The correct answer is {L} because {r}.", "**{L}**", "The correct answer is **{L}) {T}**.",
    "{L}. {T}", "My answer: ({L})", "I'd go with {L}.", "Correct option: {L}",
    "{R}.\n\nSo the answer is {L}.", "The answer is ({L}) {T}.", "**Answer: {L}**", "{L} — {T}",
    "Option {W} is tempting, but {r}. The correct answer is {L}.", " {L}\n", "The best answer is {L}: {T}.",
    "Looking at the options, {r}, so I pick {L}.",
)  # fmt: skip


def choice_letters() -> list[Row]:
    rows = []
    for k in range(36):
        question, options, letter, text, reason = mc_question(k, k % 3)
        wrong = LETTERS[(LETTERS.index(letter) + 2) % len(options)]
        reply = CHOICE_LETTER_REPLIES[k % len(CHOICE_LETTER_REPLIES)].format(
            L=letter, T=text, r=reason, R=reason[0].upper() + reason[1:], W=wrong
        )
        extra = {"answer_type": "choice"} if k % 6 == 5 else {}
        rows.append(row("choice_letters", "constructed", question, reply, letter, **extra))
    return rows


# 11. Multiple choice answered by the option's text
CHOICE_TEXT_REPLIES = (
    "{T}", "{T}.", "The answer is {T}.", "It's {T}.", "It is {T}", "**{T}**", "I believe the answer is {T}.",
    "{T} is the correct answer.", "That would be {T}.", "{R}. So, {T}.", "The correct option is {T}.",
    "Answer: {T}", "{T}, since {r}.", "Definitely {T}!", "I think it's {T}.",
)  # fmt: skip


def choice_option_text() -> list[Row]:
    rows = []
    for k in range(30):
        question, _options, letter, text, reason = mc_question(k + 4, (k + 1) % 3)
        reply = CHOICE_TEXT_REPLIES[k % len(CHOICE_TEXT_REPLIES)].format(
            T=text, r=reason, R=reason[0].upper() + reason[1:]
        )
        rows.append(row("choice_option_text", "constructed", question, reply, letter))
    return rows


# 12. Yes/no and true/false
BOOLEAN: tuple[tuple[str, str, str], ...] = (
    ("Is 17 a prime number?", "Yes.", "yes"),
    ("Is 17 a prime number?", "Yes — 17 is prime: it has no divisors other than 1 and itself.", "yes"),
    ("Is 21 a prime number?", "No, because 21 = 3 × 7.", "no"),
    ("Is 21 a prime number?", "no", "no"),
    ("Can penguins fly?", "No. Penguins are flightless birds; their wings evolved into flippers for swimming.", "no"),
    ("Is the Pacific the largest ocean on Earth?", "yes", "yes"),
    ("Is the Pacific the largest ocean on Earth?", "**Yes**, the Pacific Ocean is the largest and deepest.", "yes"),
    ("Does the Sun orbit the Earth?", "**No**", "no"),
    ("Does the Sun orbit the Earth?", "The answer is no. The Earth orbits the Sun.", "no"),
    ("Is water a compound?", "The answer is yes.", "yes"),
    ("Is a tomato a fruit?", "Yes, botanically a tomato is a fruit (a berry), although it is cooked as a vegetable.",
     "yes"),
    ("Is 0.1 + 0.2 exactly equal to 0.3 in IEEE 754 double precision?",
     "No. In binary floating point 0.1 + 0.2 = 0.30000000000000004, which is not exactly 0.3.", "no"),
    ("Is Canberra the capital of Australia?", "That is correct.", "yes"),
    ("Is Sydney the capital of Australia?", "Incorrect: the capital of Australia is Canberra.", "no"),
    ("Is the square root of 2 a rational number?",
     "No — √2 is irrational, since assuming √2 = p/q in lowest terms leads to both p and q being even.", "no"),
    ("Would a sphere of radius 2 have a larger volume than a cube of side 3?",
     "The sphere has volume (4/3)π(2^3) ≈ 33.5 and the cube 3^3 = 27, so yes.", "yes"),
    ("Is 2^10 greater than 1000?", "2^10 = 1024, which is greater than 1000. Yes.", "yes"),
    ("Is 91 divisible by 7?", "Yes! 91 = 7 × 13.", "yes"),
    ("Do all mammals lay eggs?", "Nope. Only monotremes such as the platypus and echidnas lay eggs.", "no"),
    ("Is the statement '5 > 3 and 2 > 4' true?",
     "Answer: No\n\n5 > 3 holds but 2 > 4 does not, so the conjunction is false.", "no"),
    ("True or false: the Great Wall of China is visible from the Moon with the naked eye.", "False.", "false"),
    ("True or false: the Great Wall of China is visible from the Moon with the naked eye.",
     "False — it is far too narrow to be seen from that distance.", "false"),
    ("True or false: water boils at 100 degrees Celsius at sea level.", "True", "true"),
    ("True or false: water boils at 100 degrees Celsius at sea level.", "**True.** At 1 atm, water boils at 100 °C.",
     "true"),
    ("True or false: 1 is a prime number.", "false", "false"),
    ("True or false: 1 is a prime number.",
     "By definition a prime has exactly two positive divisors, and 1 has only one. The statement is false.", "false"),
    ("True or false: the sum of the angles of a triangle in Euclidean geometry is 180 degrees.",
     "The answer is true.", "true"),
    ("Is the following statement true or false? Light travels faster than sound.",
     "True. Light travels at about 300,000 km/s, sound at about 343 m/s in air.", "true"),
    ("Is the following statement true or false? Bats are blind.",
     "Answer: False. Most bats can see, and many also use echolocation.", "false"),
    ("True or false: every square is a rectangle.", "TRUE", "true"),
    ("Is 1,000,001 an even number?", "No, it ends in 1 so it is odd.", "no"),
    ("Is Mount Everest the highest mountain above sea level?", "Yes, at 8,849 m.", "yes"),
)  # fmt: skip


def boolean() -> list[Row]:
    return [row("boolean", "constructed", q, t, e) for q, t, e in BOOLEAN]


# 13. Short spans; `others` are the other replies of the same set where a sentence needs backing.
SPANS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("What is the capital of France?", "Paris", (), "Paris"),
    ("What is the capital of Australia?", "Canberra.", (), "Canberra"),
    ("What is the capital of Australia?", "The capital of Australia is Canberra.", ("Canberra", "Sydney"), "Canberra"),
    ("What is the capital of Australia?", "Sydney", ("Canberra", "The capital of Australia is Canberra."), "Sydney"),
    ("Which planet is the largest in our solar system?", "It's Jupiter!", (), "Jupiter"),
    ("Which planet is the largest in our solar system?",
     "The largest planet in our solar system is Jupiter.", ("Jupiter", "Saturn"), "Jupiter"),
    ("Who painted the Mona Lisa?", "**Leonardo da Vinci**", (), "Leonardo da Vinci"),
    ("Who painted the Mona Lisa?", "The Mona Lisa was painted by Leonardo da Vinci.",
     ("Leonardo da Vinci", "Leonardo da Vinci", "Michelangelo"), "Leonardo da Vinci"),
    ("Who wrote 'Romeo and Juliet'?", '"William Shakespeare"', (), "William Shakespeare"),
    ("Who wrote 'Romeo and Juliet'?", "William Shakespeare wrote it.", ("William Shakespeare", "Christopher Marlowe"),
     "William Shakespeare"),
    ("What is the chemical symbol for sodium?", "Na", (), "Na"),
    ("What is the largest desert in the world?", "The Antarctic Desert.", (), "Antarctic Desert"),
    ("What is the longest river in Africa?", "The Nile", (), "Nile"),
    # in its set, the fragment backs the set's short answer "Nile"
    ("What is the longest river in Africa?", "The Nile River, at about 6,650 km.", ("Nile", "Congo"), "Nile"),
    ("What language is spoken in Brazil?", "Portuguese.", (), "Portuguese"),
    ("What language is spoken in Brazil?", "In Brazil, people speak Portuguese.", ("Portuguese", "Spanish"),
     "Portuguese"),
    ("Which gas makes up most of Earth's atmosphere?", "Nitrogen (about 78%).", (), "Nitrogen"),
    ("What is the hardest natural substance?", "Answer: diamond", (), "diamond"),
    ("Who developed the theory of general relativity?", "Albert Einstein", (), "Albert Einstein"),
    ("Who developed the theory of general relativity?", "It was Albert Einstein, in 1915.",
     ("Albert Einstein", "Isaac Newton"), "Albert Einstein"),
    ("In which city is the Colosseum?", "Rome, Italy.", (), "Rome"),
    ("What is the smallest planet in the solar system?", "Mercury is the smallest planet.", ("Mercury", "Pluto"),
     "Mercury"),
    ("What is the currency of Japan?", "The Japanese yen (JPY).", (), "Japanese yen"),
    ("What is the opposite of 'ancient'?", "'modern'", (), "modern"),
    ("Name the author of '1984'.", "George Orwell", (), "George Orwell"),
    ("Name the author of '1984'.", "**Answer:** George Orwell", (), "George Orwell"),
    ("What is the capital of Canada?", "Ottawa!", (), "Ottawa"),
    ("What is the capital of Canada?", "I believe it's Toronto.", ("Ottawa", "Toronto"), "Toronto"),
    ("Which element has the symbol Fe?", "Iron", (), "Iron"),
    ("Which element has the symbol Fe?", "Fe is the symbol for iron.", ("Iron", "iron"), "iron"),
    ("What is the capital of Germany?", "Berlin — it has been the capital since reunification in 1990.", (),
     "Berlin"),
    ("What is the national animal of Scotland?", "The unicorn.", (), "unicorn"),
    ("Which city hosted the 2012 Summer Olympics?", "London", (), "London"),
    ("What is the capital of Iceland?", "Reykjavík", ("Reykjavik", "Reykjavík"), "Reykjavík"),
)  # fmt: skip


def short_span() -> list[Row]:
    return [
        row(
            "short_span",
            "constructed",
            q,
            t,
            e,
            others=list(o) if o else None,
            answer_type="span" if i % 5 == 4 else None,
        )
        for i, (q, t, o, e) in enumerate(SPANS)
    ]


# 14. Classification labels
_REVIEW = "Classify the sentiment of this review as positive, negative or neutral: "
_TOPIC = "Which category does this headline belong to: sports, politics, business or technology? "
_SPAM = "Is this message spam or ham? "
LABELS: tuple[tuple[str, str, str], ...] = (
    (_REVIEW + '"The battery lasts all day and the screen is gorgeous."', "Sentiment: positive", "positive"),
    (_REVIEW + '"The battery lasts all day and the screen is gorgeous."', "positive", "positive"),
    (_REVIEW + '"Broke after two days. Never again."', "Label: NEGATIVE", "negative"),
    (_REVIEW + '"Broke after two days. Never again."', "Negative.", "negative"),
    (_REVIEW + '"Broke after two days. Never again."',
     "The reviewer reports the product broke quickly and will not buy again.\n\nSentiment: negative", "negative"),
    (_REVIEW + '"It arrived on Tuesday."', "The sentiment is neutral.", "neutral"),
    (_REVIEW + '"It arrived on Tuesday."', "neutral — the review only states a fact.", "neutral"),
    (_REVIEW + '"Not bad at all, I would buy it again."',
     "Despite the word \"bad\", the phrase \"not bad at all\" and the intent to buy again are positive. "
     "Sentiment: Positive", "positive"),
    (_REVIEW + '"Not bad at all, I would buy it again."', "**Positive**", "positive"),
    (_REVIEW + '"The food was cold and the waiter ignored us."', "I'd classify this as negative.", "negative"),
    (_REVIEW + '"The food was cold and the waiter ignored us."', '{"sentiment": "negative"}', "negative"),
    (_REVIEW + '"Great value for the price!"', "POSITIVE", "positive"),
    (_TOPIC + '"Local team wins the championship in overtime"', "Category: sports", "sports"),
    (_TOPIC + '"Local team wins the championship in overtime"', "sports", "sports"),
    (_TOPIC + '"Parliament passes new budget bill"', "politics", "politics"),
    (_TOPIC + '"Parliament passes new budget bill"', "This headline is about politics.", "politics"),
    (_TOPIC + '"Chipmaker unveils faster AI accelerator"', "Technology", "technology"),
    (_TOPIC + '"Chipmaker unveils faster AI accelerator"', "Category: **technology**", "technology"),
    (_TOPIC + '"Shares of the retailer jump 12% after earnings"', "Business.", "business"),
    (_TOPIC + '"Shares of the retailer jump 12% after earnings"',
     "The headline reports a stock move after earnings, so the category is business.", "business"),
    (_SPAM + '"WIN a FREE iPhone!!! Click here now"', "spam", "spam"),
    (_SPAM + '"WIN a FREE iPhone!!! Click here now"', "This is spam.", "spam"),
    (_SPAM + '"Hi Sam, are we still on for lunch tomorrow?"', "ham", "ham"),
    (_SPAM + '"Hi Sam, are we still on for lunch tomorrow?"', "Label: ham (a personal message).", "ham"),
    ("Classify the emotion of the sentence as joy, anger, sadness or fear: \"I can't believe they cancelled "
     "my flight again!\"", "anger", "anger"),
    ("Classify the emotion of the sentence as joy, anger, sadness or fear: \"We finally got the keys to our new "
     "home!\"", "Emotion: joy", "joy"),
    ("Classify the emotion of the sentence as joy, anger, sadness or fear: \"There's someone outside the window.\"",
     "The speaker seems afraid. Label: fear", "fear"),
    ("Does the premise entail the hypothesis? Answer entailment, neutral or contradiction.\nPremise: A man is "
     "playing a guitar on stage.\nHypothesis: A man is performing music.", "entailment", "entailment"),
    ("Does the premise entail the hypothesis? Answer entailment, neutral or contradiction.\nPremise: A dog sleeps "
     "on the couch.\nHypothesis: The dog is running in the park.", "Contradiction.", "contradiction"),
    ("Does the premise entail the hypothesis? Answer entailment, neutral or contradiction.\nPremise: A woman reads "
     "a book.\nHypothesis: The woman is a teacher.", "Answer: neutral", "neutral"),
)  # fmt: skip


def labels() -> list[Row]:
    return [row("labels", "constructed", q, t, e) for q, t, e in LABELS]


# 15. Markdown final lines after reasoning
MARKDOWN_TAILS = (
    "**Final answer:** {a}",
    "**Answer: {a}**",
    "### Final Answer\n\n$\\boxed{{{a}}}$",
    "The final answer is $\\boxed{{{a}}}$.",
    "## Answer\n**{a}**",
    "---\n**Final Answer:** $\\boxed{{{a}}}$",
    "Final answer: **{a}**",
    "**Therefore, the answer is {a}.**",
)


def markdown_last_line(data: Path) -> list[Row]:
    rows = []
    for k, (i, question, body, gold) in enumerate(gsm8k_train(data, "markdown", 18)):
        steps = "\n".join(f"{j + 1}. {line}" for j, line in enumerate(body.splitlines()))
        tail = MARKDOWN_TAILS[k % len(MARKDOWN_TAILS)].format(a=gold)
        text = f"Let's solve this step by step.\n\n{steps}\n\n{tail}"
        source = f"constructed from gsm8k/train.jsonl id={i} (gold solution, annotations removed)"
        rows.append(row("markdown_last_line", source, question, text, gold))
    for k, (uid, problem, solution, answer) in enumerate(math500(data, "markdown", 12)):
        tail = MARKDOWN_TAILS[(k + 2) % len(MARKDOWN_TAILS)].format(a=answer)
        text = f"## Solution\n\n{solution}\n\n{tail}"
        source = f"constructed from math500/test.jsonl {uid} (gold solution)"
        rows.append(row("markdown_last_line", source, problem, text, answer))
    return rows


# 16. SmolLM2-135M-Instruct's own replies (embedded model, `aggregate-graph ask ... --n 4 --max-tokens 64 --seed 7`)
SMOLLM2: tuple[tuple[str, tuple[tuple[str, str | None], ...]], ...] = (
    (
        "What is 15 + 27? Reply with just the number.",
        (
            (
                ("15 + 27 = 39\n\nYou are correct, I have done that."),
                "39",
            ),
            (
                ("15 + 27 = 42"),
                "42",
            ),
            (
                ("15 + 27 = 34"),
                "34",
            ),
            (
                ("15 + 27 = 42"),
                "42",
            ),
        ),
    ),
    (
        "Is 17 a prime number? Answer yes or no.",
        (
            (
                (
                    "No. In mathematics, a prime number is a positive integer greater than 1 that cannot be "
                    "divided evenly by any other positive integer except for 1. This definition is often "
                    "expressed as 2^n + 1, where n is a positive integer."
                ),
                "no",
            ),
            (
                (
                    "No, 17 is not a prime number. In mathematics, a prime number is a positive integer that "
                    "is divisible only by 1 and itself."
                ),
                "no",
            ),
            (
                ("No."),
                "no",
            ),
            (
                ("Yes."),
                "yes",
            ),
        ),
    ),
    (
        "What is the capital of France?",
        (
            (
                ("Bien sûr, the capital of France is Paris."),
                "Paris",
            ),
            (
                (
                    "Elle-Légère, la femme, elle-légère: l'Arc de Tripoli, le Ciel. Un je ne saris pas, le "
                    "français, les Français. Aujour d'hébécomber, le Châtelet,"
                ),
                None,
            ),
            (
                ("Estélé, estélé is the capital of France."),
                "skip",
            ),
            (
                (
                    "La femme, the capital of France, it's a question with multiple answers. France is a "
                    "country with a rich history, culture, and a diverse population. The capital is Paris, a "
                    "city known for its iconic landmarks and cultural events. However, Paris is also a vibrant "
                    "and cosmopolitan city with a wide range of"
                ),
                "Paris",
            ),
        ),
    ),
    (
        "Which planet is the largest in our solar system?",
        (
            (
                (
                    "The largest exoplanet is Kepler-10b, which orbits a star called Kepler-10. However, this "
                    "planet is also a terrestrial planet, meaning it's a planet similar to Earth but with a "
                    "rocky surface. The planet is approximately 20% larger than Earth, making it the largest "
                    "exoplanet to"
                ),
                "skip",
            ),
            (
                (
                    "The largest exoplanet in our solar system is Kepler-452b, which is located in the "
                    "habitable planet theorem (H2P) system."
                ),
                "skip",
            ),
            (
                ("The largest planet in our solar system is Jupiter, which is approximately 149,597,780.000."),
                "Jupiter",
            ),
            (
                (
                    "The largest planet in our solar system is Neptune, which is approximately "
                    "178,882,500,000,000,000,000,000,000,000,000,000,00"
                ),
                "Neptune",
            ),
        ),
    ),
    (
        "Which of these is a mammal? (A) shark (B) dolphin (C) trout (D) octopus. Answer with the letter.",
        (
            (
                ("A) shark\n- The answer is D) octopus"),
                "D",
            ),
            (
                (
                    "A) shark (D)\n\nShelter has no specific order or classification, but it's possible to "
                    "classify the animal based on its morphology. A shark is a fish with a body shape similar "
                    "to a human being. In terms of anatomy, sharks are mammals."
                ),
                "skip",
            ),
            (
                ("A: cat (C)"),
                "skip",
            ),
            (
                ("DOLLAR"),
                None,
            ),
        ),
    ),
    (
        "True or false: water boils at 100 degrees Celsius at sea level.",
        (
            (
                (
                    "False: The boiling point of water is a measure of its heat capacity and is not a physical "
                    "property of water. It is primarily a thermodynamic property that determines the rate of "
                    "evaporation, but it is not a physical property of water that is directly observed at the "
                    "surface of the Earth."
                ),
                "false",
            ),
            (
                (
                    "False: Water does not boil at sea level at a temperature of 100 degrees Celsius. This is "
                    "a fundamental principle of thermodynamics that states that a system at a specific "
                    "temperature cannot maintain its state at a temperature higher than the surroundings."
                ),
                "false",
            ),
            (
                (
                    "True: Water does not boil at sea level at 100 degrees Celsius. However, there are "
                    "exceptions, and the boiling point of water can vary depending on the type of water, but "
                    "for most purposes, the boiling point of water at sea level is 100 degrees Celsius."
                ),
                "true",
            ),
            (
                (
                    "True. Water, being a liquid, does not have a temperature threshold at sea level, but it "
                    "can rise to extremely high temperatures (over 100 degrees Celsius) when exposed to heat, "
                    "typically caused by the Sun's rays, but also in other environments where it can heat up, "
                    "such as in space."
                ),
                "true",
            ),
        ),
    ),
    (
        "Tom has 3 apples and buys 5 more. How many apples does he have now?",
        (
            (
                (
                    "Tom has 3 + 5 = 8 apples and he bought 3 apples. Since there are 2 apples in a group, Tom "
                    "has 8 - 3 = 5 apples left. He now has 8 - 5 = 1."
                ),
                "1",
            ),
            (
                (
                    "To solve this problem, we need to calculate the total number of apples Tom has left and "
                    "find out how many apples he now has.\n\nThere are 3 apples left, and Tom has 5 apples.\n\nThe "
                    "total number of apples Tom has left is 3 + 5 = 8 apples."
                ),
                "8",
            ),
            (
                (
                    "Tom has 3 apples and 5 more apples = 20 apples\nTom has now 20 - 5 = 15 apples\nTom has now "
                    "20 - 15 = 10 apples\nTom has now 2 apples\nTom has now 10 apples\nTom has"
                ),
                "skip",
            ),
            (
                (
                    "Tom has 3 apples and 5 additional apples. To find out how many apples he has now, you can "
                    "divide the total number of apples by the number of apples he has.\n\nThe answer is 3 x 5 = "
                    "15 apples. Tom has 15 apples left, which is the"
                ),
                "15",
            ),
        ),
    ),
    (
        "Who painted the Mona Lisa?",
        (
            (
                (
                    "The painting of the Mona Lisa is currently owned by the Louvre Museum in Paris, France. "
                    "However, it's also available for public viewing and can be rented to visitors, but it's "
                    "not available for private consumption. The painting is considered to be a masterpiece of "
                    "human art, and it has become a cultural icon"
                ),
                None,
            ),
            (
                (
                    "The painting of the Mona Lisa is believed to be by da Vinci's wife, Lisa del Carmè, but "
                    "there are conflicting accounts of her own identity and where she was when she painted. "
                    "However, there are a few theories that have been proposed. Some believe that Lisa del "
                    "Carmè was born in Florence, Italy"
                ),
                "skip",
            ),
            (
                (
                    "The Mona Lisa's creator, Lisa Bonaparte, was a French artist. Her painting, titled \"The "
                    'Mona Lisa," was created in the early 20th century and is a masterpiece of Italian art.'
                ),
                "Lisa Bonaparte",
            ),
            (
                (
                    "The painting of the Mona Lisa, by Michelangelo Buonanauta, is attributed to the artist of "
                    "the same name. However, it is not explicitly mentioned in any of the famous paintings "
                    "attributed to the Renaissance."
                ),
                "Michelangelo Buonanauta",
            ),
        ),
    ),
    (
        "What is 9 times 8?",
        (
            (
                (
                    "To calculate 9 times 8, we can divide the number by itself until we reach 1. So, 9 times "
                    "8 equals 64."
                ),
                "64",
            ),
            (
                ("To find 9 times 8, we need to multiply 9 by itself, which is 9. So, the answer is 9."),
                "9",
            ),
            (
                (
                    "To find 9 times 8, we can think of it as multiplying 9 by itself 8 times. In number "
                    'theory, when multiplying numbers by integers, the process is called "multiplication by a '
                    'number" or "addition by a number" in mathematics.\n\nTo do this, we need to'
                ),
                None,
            ),
            (
                (
                    "9 times 8 is 64, which is a fundamental operation in mathematics and can be expressed as "
                    "9 x 8 = 64. This calculation is an example of inverse operations combined with "
                    "multiplication."
                ),
                "64",
            ),
        ),
    ),
    (
        "Is the Earth flat? Answer yes or no.",
        (
            (
                (
                    "No, the Earth is not flat. This concept is rooted in mathematics and geography, but it is "
                    "not supported by empirical evidence. The Earth's shape is determined by the geometry of "
                    "the Earth's curvature, not by a flat plane."
                ),
                "no",
            ),
            (
                (
                    "No, the Earth is not flat. It's a heliocentric model where the Earth is the center of the "
                    "solar system, but it's also a helioperocensial model that describes the Earth as a planet "
                    "orbiting the Sun."
                ),
                "no",
            ),
            (
                ("No."),
                "no",
            ),
            (
                (
                    "I'm sorry for your pain, but as a chatbot designed to assist, I don't have the ability to "
                    "provide personal opinions or opinions about opinions. My purpose is to assist users with "
                    "a wide range of information, including answering questions, providing advice, and "
                    "providing a helpful way to assist users in their inquiries. My"
                ),
                None,
            ),
        ),
    ),
    (
        "What is the capital of Japan? Answer in one word.",
        (
            (
                (
                    "The capital of Japan is not explicitly stated in the prompt, so I'll offer a default "
                    "answer. The capital of Japan is Tokyo."
                ),
                "Tokyo",
            ),
            (
                ("The capital of Japan is Tokyo."),
                "Tokyo",
            ),
            (
                (
                    "The capital of Japan is not a place, it's a concept. A capital is a geographical "
                    "location, but the capital of Japan is actually the capital of Japan."
                ),
                "skip",
            ),
            (
                ("You're a new user, welcome to my chat. What can I help you with today?"),
                None,
            ),
        ),
    ),
)


def smollm2_replies() -> list[Row]:
    rows = []
    for question, replies in SMOLLM2:
        texts = [t for t, _ in replies]
        for j, (text, expected) in enumerate(replies):
            if expected == "skip":
                continue
            others = texts[:j] + texts[j + 1 :]
            source = f"SmolLM2-135M-Instruct via aggregate-graph ask --seed 7, candidate {j}"
            rows.append(row("smollm2_replies", source, question, text, expected, others=others))
    return rows


# ---------------------------------------------------------------------------------------------------------------


def build(data: Path) -> Iterator[Row]:
    yield from faithful_cot(data)
    yield from gpt3_solutions(data)
    yield from qwen_math(data)
    yield from zeroeval_json(data)
    yield from zeroeval_other(data)
    yield from answer_first(data)
    yield from minerva(data)
    yield from simple_evals(data)
    yield from lighteval_lm_eval(data)
    yield from choice_letters()
    yield from choice_option_text()
    yield from boolean()
    yield from short_span()
    yield from labels()
    yield from markdown_last_line(data)
    yield from smollm2_replies()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--review", action="store_true", help="print each row's tail and label; write nothing")
    args = parser.parse_args()
    rows = list(build(args.data))
    if args.review:
        for r in rows:
            tail = str(r["text"])[-240:].replace("\n", "\\n")
            print(f"[{r['family']}] {r['source']}\n   ...{tail}\n   => {r['expected']!r}")
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for r in rows:
        counts[str(r["family"])] = counts.get(str(r["family"]), 0) + 1
    print(f"{len(rows)} rows in {len(counts)} families -> {args.out}")
    for family, n in counts.items():
        print(f"  {family}: {n}")


if __name__ == "__main__":
    main()
