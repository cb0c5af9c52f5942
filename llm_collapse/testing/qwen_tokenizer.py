"""A small, locally trained tokenizer in the Qwen2/Qwen3 convention (byte-level BPE, ``<|endoftext|>``).

Nothing here downloads: a byte-level BPE is trained on `llm_collapse.testing.tokenizers.training_corpus` and
wrapped in transformers' ``Qwen2Tokenizer`` (the class both Qwen3-Embedding and gte-Qwen2 name in
``tokenizer_config.json``).

Decisions and gotchas (transformers 5.x):

* Layout like the real vocabulary: learned pieces first, then the special tokens ``<|endoftext|>``,
  ``<|im_start|>``, ``<|im_end|>`` as added tokens (151643-151645 in the real one). No BOS, no unk.
* ``Qwen2Tokenizer.__init__`` rebuilds normalizer (NFC), pre-tokenizer (Qwen's split regex + byte level) and decoder;
  only vocab, merges and the **post-processor** come from ``tokenizer.json``. The backend here is built with exactly
  that pipeline, so the in-memory tokenizer and the one read back agree.
* ``append_eos``: the post-processor appends ``<|endoftext|>`` after every text (Qwen3-Embedding's updated
  ``tokenizer.json``); without it nothing is appended, which is what transformers' stock class does for gte-Qwen2
  (its EOS comes from the repository's own ``tokenization_qwen.py``, remote code never run here).
"""

from __future__ import annotations

import functools
import json

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer
from transformers import Qwen2Tokenizer

from llm_collapse.testing.tokenizers import training_corpus

__all__ = ["QWEN_SPECIAL_TOKENS", "build_qwen_tokenizer"]

QWEN_SPECIAL_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Appended after the learned pieces, in this order (as in the real vocabulary)."""

# Qwen2's pre-tokenisation regex (transformers' PRETOKENIZE_REGEX for Qwen2Tokenizer).
_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
_LEARNED_VOCAB_SIZE = 1400


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


@functools.cache
def _qwen_backend_json() -> str:
    """Serialized byte-level backend with the special tokens, trained once per process."""
    scratch = Tokenizer(BPE())
    scratch.normalizer = normalizers.NFC()
    scratch.pre_tokenizer = _pre_tokenizer()
    trainer = BpeTrainer(
        vocab_size=_LEARNED_VOCAB_SIZE,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    scratch.train_from_iterator(training_corpus(), trainer=trainer)
    model = json.loads(scratch.to_str())["model"]
    backend = Tokenizer(BPE(vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]], fuse_unk=False))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = _pre_tokenizer()
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in QWEN_SPECIAL_TOKENS])
    return backend.to_str()


def build_qwen_tokenizer(
    *,
    append_eos: bool,
    eos_token: str = "<|endoftext|>",
    padding_side: str = "right",
    model_max_length: int = 32768,
) -> Qwen2Tokenizer:
    """Build a Qwen-convention tokenizer.

    Args:
        append_eos: Whether the post-processor appends ``<|endoftext|>`` to every text.
        eos_token: The tokenizer's ``eos_token`` (``<|im_end|>`` or ``<|endoftext|>``); pad is ``<|endoftext|>``.
        padding_side: Saved padding side.
        model_max_length: Saved ``model_max_length``.

    Returns:
        A fresh ``Qwen2Tokenizer``; save it with `llm_collapse.testing.tokenizers.save_tokenizer`.
    """
    backend = Tokenizer.from_str(_qwen_backend_json())
    eod = "<|endoftext|>"
    if append_eos:
        eod_id = backend.token_to_id(eod)
        backend.post_processor = processors.TemplateProcessing(
            single=f"$A:0 {eod}:0", pair=f"$A:0 {eod}:0 $B:1 {eod}:1", special_tokens=[(eod, eod_id)]
        )
    else:
        backend.post_processor = processors.ByteLevel(
            trim_offsets=False, add_prefix_space=False, use_regex=False
        )
    return Qwen2Tokenizer(
        tokenizer_object=backend,
        bos_token=None,
        eos_token=eos_token,
        pad_token=eod,
        unk_token=None,
        padding_side=padding_side,
        model_max_length=model_max_length,
        extra_special_tokens=[t for t in QWEN_SPECIAL_TOKENS if t not in (eod, eos_token)],
    )
