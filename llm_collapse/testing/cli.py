"""Command lines for tests: keyword flags -> argv, so a test states the flags that matter and nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def flag_argv(**flags: object) -> list[str]:
    """``--flag value`` words of keyword flags, in the order given.

    ``max_per_bin=4`` -> ``--max-per-bin 4``; ``True`` -> the bare flag; ``None`` or ``False`` -> left out;
    a list or tuple -> its items joined by commas (``lengths=[32, 64]`` -> ``--lengths 32,64``); a mapping ->
    the flag once per item as ``key=value`` (``model_path={"mistral": dir}`` -> ``--model-path mistral=dir``).
    """
    argv: list[str] = []
    for key, value in flags.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, Mapping):
            for name, item in value.items():
                argv += [flag, f"{name}={item}"]
        elif isinstance(value, (list, tuple)):
            argv += [flag, ",".join(map(str, value))]
        else:
            argv += [flag, str(value)]
    return argv


def compare_argv(out: Path | str | None = None, **flags: object) -> list[str]:
    """The argv of ``llm-collapse compare`` with ``--out out`` last (`flag_argv` spells the flags)."""
    return [*flag_argv(**flags), *([] if out is None else ["--out", str(out)])]
