"""Example verifiers environment for configs/verifiers-grpo.yaml: reverse a short phrase.

cw ships this file in the run's ConfigMap (``files:``), mounted at /etc/cw, which is on the pod's
PYTHONPATH; verifiers' ``load_environment(env_id="cw-reverse-text")`` imports it as
``cw_reverse_text`` and calls ``load_environment(**env.args)``. The dataset is built in memory, so
the run needs no dataset download.
"""

from __future__ import annotations

import random
from difflib import SequenceMatcher

import verifiers as vf
from datasets import Dataset

WORDS = (
    "river stone lamp orbit maple cloud ember violet harbor quiet signal copper garden falcon "
    "winter thread candle marble meadow silver anchor lantern pepper rocket"
).split()
SYSTEM_PROMPT = "Reverse the text character by character. Reply as <answer>reversed text</answer>."


def reversal_rows(num_examples: int, words_per_example: int, seed: int) -> list[dict[str, str]]:
    """Question/answer rows: a phrase of random words and the same phrase reversed."""
    rng = random.Random(seed)
    rows = []
    for _ in range(num_examples):
        phrase = " ".join(rng.choice(WORDS) for _ in range(words_per_example))
        rows.append({"question": phrase, "answer": phrase[::-1]})
    return rows


def load_environment(num_examples: int = 512, words_per_example: int = 3, seed: int = 0) -> vf.Environment:
    """A single-turn environment scored by closeness to the exact reversal, plus a format bonus.

    Args:
        num_examples: Rows in the training dataset.
        words_per_example: Words in each phrase to reverse.
        seed: Seed of the phrase generator.

    Returns:
        The verifiers environment the trainer samples rollouts from.
    """
    parser = vf.XMLParser(["answer"], answer_field="answer")

    def reversal_similarity(completion, answer, **kwargs) -> float:
        """1.0 for the exact reversal, partial credit for near misses."""
        guess = parser.parse_answer(completion) or ""
        return SequenceMatcher(None, guess.strip(), answer).ratio()

    rubric = vf.Rubric(
        funcs=[reversal_similarity, parser.get_format_reward_func()], weights=[1.0, 0.2], parser=parser
    )
    dataset = Dataset.from_list(reversal_rows(num_examples, words_per_example, seed))
    return vf.SingleTurnEnv(dataset=dataset, system_prompt=SYSTEM_PROMPT, parser=parser, rubric=rubric)
