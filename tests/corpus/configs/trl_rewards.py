"""Companion reward module for trl-grpo-custom-reward-module.yaml.

`trl grpo` resolves `trl_rewards.length_penalty_reward` by importing `trl_rewards`
from the current working directory (trl/scripts/grpo.py).
"""


def length_penalty_reward(completions, **kwargs):
    """Small penalty for long completions (TRL reward signature)."""
    rewards = []
    for completion in completions:
        text = completion[0]["content"] if isinstance(completion, list) else completion
        rewards.append(-min(len(text), 4000) / 4000.0)
    return rewards
