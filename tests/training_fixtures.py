"""A tiny Qwen2 model and tokenizer built offline from the training tests' own texts, and toy sample sets."""

from __future__ import annotations

from pathlib import Path

from aggregate_graph import Candidate, SampleSet
from aggregate_graph.aggregators import SSAStyle
from aggregate_graph.aggregators.choice import LETTERS, render_choice_prompt
from aggregate_graph.aggregators.gsr import render_gsr_prompt
from aggregate_graph.aggregators.ssa import render_ssa_prompt
from training.targets import gsr_target, ssa_target

# ChatML with `{% generation %}` markers around the assistant turn, its end token included, so TRL's
# assistant-only loss masks exactly what the model must learn to write (and to stop after).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}<|im_start|>assistant\n"
    "{% generation %}{{ message['content'] }}<|im_end|>{% endgeneration %}\n"
    "{% else %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WRONG = ["13", "7", "48", "35"]
CHOICE_STYLE = SSAStyle(max_candidate_tokens=24, tail_only=True, show_answers=True, show_tally=True)
# Questions differ only by a pair of words that all occur in every split, so held-out problems bring no token
# the tiny model never trained on (an untrained embedding would derail it).
COLOURS = ("red", "blue", "green", "grey", "pink", "gold", "black", "white")
ANIMALS = ("fox", "owl", "cat", "eel")


def toy_sample_sets(problems: int = 16) -> list[SampleSet]:
    """Arithmetic problems whose answer is always 42, with 5 candidates of which 1 to 4 are right: a tiny model
    can learn the answer format and the answer within a few dozen steps."""
    sets = []
    for p in range(problems):
        right = 1 + p % 4
        candidates = []
        for i in range(5):
            answer = "42" if i < right else WRONG[(p + i) % len(WRONG)]
            text = f"Working on it: the result is {answer}.\n#### {answer}"
            candidates.append(Candidate(index=i, text=text, answer=answer, model="toy"))
        question = f"The {COLOURS[p % 8]} {ANIMALS[(p // 8) % 4]} asks: what is 6 times 7?"
        sets.append(SampleSet(id=f"toy-{p}", question=question, gold="42", candidates=candidates))
    return sets


def corpus(sets: list[SampleSet]) -> list[str]:
    texts = []
    for s in sets:
        texts.append(render_ssa_prompt(s.question, [c.text for c in s.candidates]))
        texts.append(render_gsr_prompt(s.question, [c.text for c in s.candidates]))
        texts.append(ssa_target(s.gold, [c.answer for c in s.candidates]))
        texts.append(gsr_target(s.gold, [c.answer for c in s.candidates]))
        texts.append(render_choice_prompt(s.question, s.candidates, style=CHOICE_STYLE))
    texts.append("<think>Most answers agree.</think> <answer>42</answer>")
    texts += list(LETTERS)
    return texts


def build_tiny_qwen2(path: Path, texts: list[str], hidden: int = 64) -> Path:
    """A randomly initialised 2-layer Qwen2 and a byte-level BPE tokenizer trained on `texts`, saved to `path`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(texts, trainer)
    bpe.add_tokens(["<think>", "</think>", "<answer>", "</answer>"])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=specials[1:2],
        chat_template=CHAT_TEMPLATE,
    )
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        # LoRA trains neither the (tied) embeddings nor the final norm, so these bound how sharp the logits can get:
        # at the usual 0.02 the trained model stays near-uniform and greedy decoding hangs on tiny margins.
        initializer_range=0.5,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
