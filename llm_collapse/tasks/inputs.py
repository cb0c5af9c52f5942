"""`RunInputs`: what the tasks of a run read, built once (`build_inputs`) under the reference tokenizer so that
every model and method sees the same texts: the shared corpus sample (`llm_collapse.tasks.sample`), when a task
reads it, and each task's own inputs (`llm_collapse.tasks.task.Task.build_inputs`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llm_collapse.data import Document, load_corpus
from llm_collapse.tasks.registry import TASKS
from llm_collapse.tasks.sample import CorpusSample, build_sample
from llm_collapse.tasks.task import RunView, Task, TaskInputs


@dataclass
class RunInputs:
    """The sample (None where no task reads it) and each task's own inputs, by task name."""

    tokenizer: str
    sample: CorpusSample | None = None
    own: dict[str, TaskInputs] = field(default_factory=dict)

    @property
    def design(self) -> str:
        """The sample's design (``"bins"`` where there is no sample, as run.json has always said)."""
        return self.sample.design if self.sample is not None else "bins"

    def of(self, task: Task) -> Any:
        """What ``task``'s runner reads: its own inputs, else the sample."""
        return self.own[task.name] if task.name in self.own else self.sample

    def parts(self) -> list[TaskInputs]:
        return ([self.sample] if self.sample is not None else []) + list(self.own.values())

    def documents(self) -> list[str]:
        """Every distinct document a model embeds for this run, in first-use order."""
        return list(dict.fromkeys(text for part in self.parts() for text in part.documents()))

    def queries(self) -> list[str]:
        return list(dict.fromkeys(text for part in self.parts() for text in part.queries()))

    def texts(self) -> list[str]:
        """Every distinct text a model embeds for this run (queries included), in first-use order."""
        texts = []
        for part in self.parts():
            texts += part.documents() + part.queries()
        return list(dict.fromkeys(texts))  # -start queries repeat at every length

    def n_texts(self) -> int:
        """Distinct texts a model embeds for this run (queries included)."""
        return len(self.texts())

    def chars_per_token(self, default: float = 4.0) -> float:
        """Characters per reference-tokenizer token over the texts whose tokens were counted (`TaskInputs.counted`);
        ``default`` where there are none."""
        counted = [pair for part in self.parts() for pair in part.counted()]
        tokens = sum(n for _, n in counted)
        return sum(len(text) for text, _ in counted) / tokens if tokens else default

    def prefix_sweep(self) -> tuple[set[str], list[str]]:
        """(every text of a prefix sweep, the longest text of each swept document), over every part
        (`TaskInputs.sweep`: the prefix design's sample, the ``-start`` tasks' documents)."""
        texts: set[str] = set()
        longest: list[str] = []
        for part in self.parts():
            swept, tops = part.sweep()
            texts.update(swept)
            longest += tops
        return texts, longest

    def describe(self) -> dict:
        """What was built, for run.json's ``inputs`` (`llm_collapse.records.record.InputsRecord`)."""
        sample = (
            self.sample.describe() if self.sample is not None else {"design": "bins", "texts_per_length": {}}
        )
        described: dict = {"reference_tokenizer": self.tokenizer, **sample, "retrieval": {}}
        for part in self.own.values():
            own = dict(part.describe())
            described["retrieval"].update(own.pop("retrieval", {}))
            described.update(own)
        return described


def build_inputs(run: RunView, tokenizer, documents: list[Document] | None = None) -> RunInputs:
    """The sample (where a task reads it) and every selected task's own inputs, in registry order.

    Args:
        run: The run's configuration (its ``tasks`` map each selected task to its options).
        tokenizer: The reference tokenizer (the first model's).
        documents: The corpus, when already loaded (`llm_collapse.run.preflight`); read here otherwise.

    Raises:
        UserError: What the sample (`build_sample`) or a task's builder refuses, in one line.
    """
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    inputs = RunInputs(tokenizer=name)
    selected = [task for task in TASKS.values() if task.name in run.tasks]
    if any(task.reads_corpus for task in selected) and documents is None:
        documents = load_corpus(run.corpus)
    if any(task.sample for task in selected):
        inputs.sample = build_sample(run, tokenizer, documents)
    for task in selected:
        if task.build_inputs is not None:
            corpus = documents if task.corpus else None
            inputs.own[task.name] = task.build_inputs(run, run.tasks[task.name], tokenizer, corpus)
    return inputs
