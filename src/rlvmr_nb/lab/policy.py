"""The lab policy: a small Llama with a word-level vocabulary built from the world's own text.

Why not SmolLM2. One RLVMR iteration of SmolLM2-135M on the toy game (96 step samples) takes 88 s of
rollout and 182 s of update here and peaks at 11 GB: a comparison of two algorithms over several seeds
would take days. The lab world speaks a few hundred distinct words, so a transformer with its own
vocabulary of those words reads a lab prompt as ~200 tokens (SmolLM2's tokenizer needs several times
more, and its 49k-row head dominates every step) and has ~1 M parameters instead of 135 M.

What stays the same. The policy is a plain `transformers` `LlamaForCausalLM` with a
`PreTrainedTokenizerFast` (a `tokenizers` WordLevel model) and a chat template, saved as an ordinary
model folder: `models.load_model(folder)` loads it, and the HF generator, the rollout, the fused loss,
the SFT loop and the trainer run it unchanged.

Tokenisation. Text is lower-cased, split on white space, then into tag tokens (``<planning>``,
``</action>``), words and single punctuation marks; decoding joins tokens with spaces, so
``"<action>go to kitchen</action>"`` comes back as ``"<action> go to kitchen </action>"``, which the
tag parser reads the same way (`docs/method.md`, 'Validity rules'). Words outside the vocabulary become
``<unk>``; the vocabulary covers every word the world and the prompts produce on the training layouts
(`world_corpus`), which covers the test levels' text too (tested), though it is never built from it.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from ..coldstart import read_samples
from ..envs.lab_expert import lab_expert_actions
from ..envs.lab_world import ENV_NAME
from ..envs.registry import get_env
from ..rollout.prompts import AgentMemory, PromptConfig
from ..rollout.tags import META_TAGS
from ..runs.policy import write_config

PAD, UNK, USER, ASSISTANT, END = "<pad>", "<unk>", "<|user|>", "<|assistant|>", "<|end|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, UNK, USER, ASSISTANT, END)
WORD_PATTERN = r"</?[a-z_]+>|[a-z0-9_]+|[^\sa-z0-9_]"
"""One token: a tag, a word, or one other character."""
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
"""User turns as ``<|user|>`` … ``<|end|>``; the assistant's turn ends with ``<|end|>`` (the EOS token)."""


@dataclass(frozen=True)
class LabPolicyConfig:
    """Size of the lab transformer (a `LlamaConfig`)."""

    hidden_size: int = 128
    layers: int = 2
    heads: int = 4
    intermediate_size: int = 256
    max_positions: int = 512
    init_std: float = 0.02
    seed: int = 0


def _pre_tokenizer() -> Any:
    return pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                    pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated")])


def words_of(text: str) -> list[str]:
    """The word tokens of `text`, as the lab tokenizer splits it (specials excluded)."""
    for special in SPECIAL_TOKENS:
        text = text.replace(special, " ")
    return [w for w, _ in _pre_tokenizer().pre_tokenize_str(text.lower())]


def build_vocabulary(texts: Iterable[str], min_count: int = 1) -> list[str]:
    """Special tokens, then every word of `texts` seen at least `min_count` times (by count, then
    alphabetically, so the same corpus gives the same ids)."""
    counts = Counter(w for text in texts for w in words_of(text))
    words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    return [*SPECIAL_TOKENS, *words]


def make_tokenizer(vocabulary: Sequence[str]) -> Any:
    """A `PreTrainedTokenizerFast` over a WordLevel model of `vocabulary`, with the lab chat template."""
    if list(vocabulary[: len(SPECIAL_TOKENS)]) != list(SPECIAL_TOKENS):
        raise ValueError(f"a lab vocabulary starts with the special tokens {SPECIAL_TOKENS}")
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocabulary)}, unk_token=UNK))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = _pre_tokenizer()
    core.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token=UNK, pad_token=PAD, eos_token=END,
                                        chat_template=CHAT_TEMPLATE, padding_side="left")
    return tokenizer


def make_policy(tokenizer: Any, config: LabPolicyConfig = LabPolicyConfig()) -> Any:
    """A freshly initialised `LlamaForCausalLM` sized by `config` for `tokenizer` (tied embeddings)."""
    llama = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.layers, num_attention_heads=config.heads, num_key_value_heads=config.heads,
        max_position_embeddings=config.max_positions, tie_word_embeddings=True, initializer_range=config.init_std,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = LlamaForCausalLM(llama)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


def world_corpus(seed: int = 0, random_steps: int = 12, env_name: str = ENV_NAME) -> list[str]:
    """Every kind of text the lab world `env_name` (the small house or the larger one) and its prompts produce, from
    the TRAINING layouts only: for each training task, the task sentence and what the expert and `random_steps`
    random commands see and may send;
    both prompt styles' fixed text. No test layout is built, so the vocabulary never depends on held-out text
    (tests/lab/test_lab.py checks it and that the test levels' text is still covered). Words only matter
    here, not their frequencies in play."""
    rng = random.Random(seed)
    spec = get_env(env_name)
    env = spec.make_env(max_steps=10_000)
    texts: list[str] = ["(none) " + " ".join(f"<{t}> </{t}>" for t in (*META_TAGS, "think", "action"))]
    for task in spec.tasks("train", "L0"):
        reset = env.reset(task)
        texts += [reset.task_text, reset.observation, *reset.admissible_actions]
        for action in lab_expert_actions(task):
            result = env.step(action)
            texts += [result.observation, *result.admissible_actions]
        env.reset(task)  # random play: what a policy that wanders, carries several things and errs is told
        for _ in range(random_steps):
            result = env.step(rng.choice([*env.admissible_actions(), "look around"]))
            texts += [result.observation, *result.admissible_actions]
    for style in ("meta_think", "think"):
        memory = AgentMemory(task="x", config=PromptConfig(env=env_name, style=style, max_prompt_tokens=None))
        texts.append(memory.render("x", ["x"]))
        # every line of the record (`envs.lab_record.LabRecord.lines`) appears once
        memory.record("You are in the x. You see a closed x. Exits: x.", "<think>x</think><action>take x</action>")
        memory.record("Nothing happens. You are in the x.", "<think>x</think><action>take x</action>")
        texts.append(memory.render("You take the x. In the x: a x. You are in the x.", ["x"]))
    return texts


def build_lab_policy(coldstart_dir: str | os.PathLike, out_dir: str | os.PathLike,
                     config: LabPolicyConfig = LabPolicyConfig(), env_name: str = ENV_NAME) -> Path:
    """Vocabulary from the training layouts' text of the world `env_name` and the cold-start set's prompts and
    responses, then a fresh policy saved as a model folder (loadable by `models.load_model`). Returns the folder."""
    samples = read_samples(coldstart_dir)
    vocabulary = build_vocabulary([*world_corpus(env_name=env_name), *(s["prompt"] for s in samples),
                                   *(s["response"] for s in samples)])
    tokenizer = make_tokenizer(vocabulary)
    model = make_policy(tokenizer, config)
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    write_config(out, {**asdict(config), "vocabulary": len(vocabulary)}, "lab_policy.json")
    return out
