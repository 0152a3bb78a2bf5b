"""The tiny model cw's tests and the test cluster's runtime image train: a 2-layer Llama of random
weights (hidden size 64) with a word-level tokenizer and a chat template, built locally so nothing
ever loads weights from a hub.

Runs as a script with the image's own packages on ``PYTHONPATH`` (``python tiny_model.py OUT``),
so it imports nothing of cw; the training tests import it for the same model.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

WORDS = (
    "the a an is are was be to of and in on for with that this it you i we they he she "
    "what how why when where who which answer question tell me about explain write short "
    "story poem cat dog sun moon sky sea tree bird fish red blue green good bad happy sad "
    "yes no one two three four five six seven eight nine ten plus minus equals number "
    "hello hi thanks please sure okay fine great small big fast slow hot cold up down "
    "summarize text model train data learn reward policy ? . , !"
).split()
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|> ' + message['content'] + ' <|end|> ' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}"
)


def build_tokenizer() -> Any:
    """The word-level tokenizer (a ``PreTrainedTokenizerFast``) with the chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + sorted(set(WORDS)))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<s>",
        eos_token="<|end|>",
        unk_token="<unk>",
        pad_token="<pad>",
        additional_special_tokens=["<|system|>", "<|user|>", "<|assistant|>", "</s>"],
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.model_max_length = 256
    return tok


def llama_config(tok: Any, **extra: Any) -> Any:
    """The tiny Llama's ``LlamaConfig`` for ``tok`` (``extra``: e.g. ``num_labels``)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
        **extra,
    )


def build_policy(out: Any, seed: int = 0) -> None:
    """Save the tiny causal LM and its tokenizer to ``out``."""
    import torch
    from transformers import GenerationConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tok = build_tokenizer()
    model = LlamaForCausalLM(llama_config(tok))
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    model.save_pretrained(out)
    tok.save_pretrained(out)
    # safetensors writes its file 0600; in the runtime image, pods of other users (cw serve's server
    # runs as nobody) load this model too.
    for saved in Path(out).iterdir():
        saved.chmod(0o644)


if __name__ == "__main__":
    build_policy(sys.argv[1])
