"""The test rig: a weightless model on disk and a scheduler over it (:mod:`dlfp.vllm.direct`).

The plug-in ships no model and nothing here downloads one: the tests write a Qwen3-shaped config of
their own, tiny (four layers, hidden size 256), once per process. The scheduler reads only
``config.json``; a served model (``vllm serve`` with random weights, ``--load-format dummy``) also
needs a tokenizer, and :func:`write_tokenizer` makes one from nothing: a word-level vocabulary
``w3`` ... ``w31999`` (plus three special tokens) that turns the model's every token id into text
and back unchanged, which ``vllm bench serve``'s random prompts rely on.
"""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path
from typing import Any

TINY_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "head_dim": 64, "hidden_act": "silu", "hidden_size": 256,
    "initializer_range": 0.02, "intermediate_size": 768, "max_position_embeddings": 8192, "max_window_layers": 4,
    "num_attention_heads": 4, "num_hidden_layers": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True,
    "torch_dtype": "float32", "use_cache": True, "use_sliding_window": False, "vocab_size": 32000,
}
"""A Qwen3 of four layers: small enough for a CPU engine to run in tests with random weights."""


def write_tiny_model(folder: Path) -> Path:
    """Write :data:`TINY_CONFIG` as ``folder/config.json``; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG, indent=2) + "\n", encoding="utf-8")
    return folder


def write_tokenizer(folder: Path) -> Path:
    """Write a tokenizer of :data:`TINY_CONFIG`'s vocabulary into ``folder``; returns ``folder``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    special = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab = {**special, **{f"w{i}": i for i in range(len(special), TINY_CONFIG["vocab_size"])}}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    words.decoder = decoders.WordPiece(cleanup=False)  # joins the words with spaces
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(str(folder))
    return folder


@functools.cache
def tiny_model() -> str:
    """A directory holding the tiny config, made once per process."""
    return str(write_tiny_model(Path(tempfile.mkdtemp(prefix="dlfp-vllm-tiny-"))))


def make_scheduler(scheduler_cls: type, **kwargs: Any) -> Any:
    """:func:`dlfp.vllm.direct.make_scheduler` over the tiny config."""
    from dlfp.vllm.direct import make_scheduler as over

    return over(scheduler_cls, model=tiny_model(), **kwargs)
