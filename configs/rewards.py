"""Example user reward function for configs/trl-grpo.yaml (imported as `rewards.length_penalty`)."""


def length_penalty(completions, **kwargs):
    """Prefer completions near 200 characters."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [-abs(len(text) - 200) / 200 for text in texts]
