"""Companion reward/transform module for the axolotl GRPO corpus configs.

Axolotl imports `rewards.<fn>` (trl.reward_funcs and dataset `type:`) with importlib,
so this file must be importable from the working directory of `axolotl train`.
Shapes follow axolotl docs/grpo.qmd and docs/rlhf.qmd.
"""

import random
import re


def rand_reward_func(completions, **kwargs) -> list[float]:
    return [random.uniform(0, 1) for _ in completions]


def accuracy_reward(completions, answer, **kwargs) -> list[float]:
    rewards = []
    for completion, expected in zip(completions, answer):
        text = completion[0]["content"]
        match = re.search(r"<answer>(.*?)</answer>", text, re.DOTALL)
        got = match.group(1).strip().replace(",", "") if match else ""
        rewards.append(1.0 if got == str(expected).strip() else 0.0)
    return rewards


def format_reward(completions, **kwargs) -> list[float]:
    rewards = []
    for completion in completions:
        text = completion[0]["content"]
        ok = "<think>" in text and "</think>" in text and "<answer>" in text
        rewards.append(1.0 if ok else 0.0)
    return rewards


def oai_gsm8k_transform(cfg, *args, **kwargs):
    def transform_fn(example, tokenizer=None):
        label = example["answer"].split("####")[-1].strip().replace(",", "")
        return {
            "prompt": [{"role": "user", "content": example["question"]}],
            "answer": label,
        }

    return transform_fn, {"remove_columns": ["question"]}


def prompt_transform(cfg, *args, **kwargs):
    def transform_fn(example, tokenizer=None):
        label = example["answer"].split("####")[-1].strip().replace(",", "")
        return {
            "prompt": [
                {
                    "role": "system",
                    "content": "Reason inside <think> tags, then give the number inside <answer> tags.",
                },
                {"role": "user", "content": example["question"]},
            ],
            "answer": label,
        }

    return transform_fn, {"remove_columns": ["question"]}
