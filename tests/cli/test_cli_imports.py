"""``llm-collapse --help``, every ``COMMAND --help``, ``list`` and ``--version`` import neither torch nor
transformers (issue 45: help in about a second, not 8.7 s of imports), and the lazy package API still works."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest

from llm_collapse.cli import COMMANDS
from llm_collapse.cli.catalog import WHAT

HEAVY = ("torch", "transformers")
# runs one command as the console script does (`llm_collapse.cli:main`), then names the heavy modules loaded
PROBE = """
import sys
from llm_collapse.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit_:
    code = exit_.code
print("LOADED", [m for m in {heavy!r} if m in sys.modules], "EXIT", code, file=sys.stderr)
"""


def _loaded(*argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *argv], capture_output=True, text=True, timeout=120
    )
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "argv",
    [("--help",), ("--version",), *((c, "--help") for c in COMMANDS), *(("list", w) for w in WHAT)],
    ids=" ".join,
)
def test_help_list_and_version_load_no_torch(argv):
    assert _loaded(*argv) == "LOADED [] EXIT 0"


def test_a_command_that_needs_torch_is_seen_loading_it():
    """The probe can fail: importing the library's model code does load torch in the same kind of process."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, llm_collapse as lc; lc.Embedder; print(sorted(m for m in "
         f"{HEAVY!r} if m in sys.modules))"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.stdout.strip() == str(sorted(HEAVY))


def test_the_package_api_loads_on_first_use():
    import llm_collapse as lc
    from llm_collapse.embedder import Embedder
    from llm_collapse.load import load_embedder

    assert lc.load_embedder is load_embedder and lc.Embedder is Embedder
    assert set(lc.__all__) <= set(dir(lc))
    assert all(getattr(lc, name) is not None for name in lc.__all__)
    assert lc.__version__ == version("llm-collapse")
    with pytest.raises(AttributeError, match="nosuch"):
        lc.nosuch  # noqa: B018
