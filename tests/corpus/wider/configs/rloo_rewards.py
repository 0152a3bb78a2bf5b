# mirrors: huggingface/trl/docs/source/rloo_trainer.md @f2cd57710 (train_rloo.py: the inline dummy reward, moved to module level)


# Dummy reward function: count the number of unique characters in the completions
def reward_num_unique_chars(completions, **kwargs):
    return [len(set(c)) for c in completions]
