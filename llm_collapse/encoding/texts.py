"""The arguments every encoding call checks first: the texts, and counts such as ``batch_size``."""

from __future__ import annotations

from collections.abc import Iterable


def check_count(name: str, value) -> int:
    """A positive integer argument (``batch_size``...); bools, floats and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def as_text_list(texts: Iterable[str]) -> list[str]:
    """Accepts any iterable of strings except a bare string; names the index of a non-string or of a text that is
    not valid Unicode (a lone surrogate)."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise TypeError(
            f"texts must be a list of strings, got {type(texts).__name__}; wrap a single text in a list"
        )
    texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{index}] is {type(text).__name__}, expected str")
        try:
            text.encode("utf-8")
        except (
            UnicodeEncodeError
        ) as err:  # a lone surrogate: no tokenizer can read it (it fails deep in Rust)
            raise ValueError(
                f"texts[{index}] holds a lone surrogate {text[err.start]!r} at position {err.start}, which is not "
                "valid Unicode; decode its bytes with errors='replace' or drop the character"
            ) from None
    return texts
