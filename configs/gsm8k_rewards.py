"""Example reward functions for configs/axolotl-grpo.yaml (shipped with `files:`, importable in the pods)."""

import re


def oai_gsm8k_transform(cfg, *args, **kwargs):
    """Turn a GSM8K row into a prompt plus the reference answer."""

    def transform(example, tokenizer=None):
        answer = example["answer"].split("####")[-1].strip()
        prompt = [{"role": "user", "content": example["question"]}]
        return {"prompt": prompt, "answer": answer}

    return transform, {"remove_columns": ["question"]}


def oai_gsm8k_reward(completions, answer, **kwargs):
    """1.0 when the last number in a completion equals the reference answer."""
    rewards = []
    for completion, expected in zip(completions, answer):
        text = completion if isinstance(completion, str) else completion[-1]["content"]
        numbers = re.findall(r"-?\d[\d,]*\.?\d*", text)
        rewards.append(1.0 if numbers and numbers[-1].replace(",", "") == expected.replace(",", "") else 0.0)
    return rewards
