"""`RunInputs`: what every task of a run reads, the same for every model and method (built once under the
first model's tokenizer by `llm_collapse.run.inputs.build_inputs`): texts per length bin, the generated
retrieval tasks per length and the placed passages per length and depth."""

from __future__ import annotations

from dataclasses import dataclass, field

from llm_collapse.data.bins import BinnedText
from llm_collapse.data.placed import PlacedPassage
from llm_collapse.data.prefixes import documents_joined
from llm_collapse.data.synthetic import RetrievalTask
from llm_collapse.tasks.registry import TASKS


def start_tasks() -> list[str]:
    """Retrieval tasks whose documents are token prefixes of the same documents at every length."""
    return [name for name, spec in TASKS.items() if spec.nested_lengths and spec.texts == "retrieval"]


@dataclass
class RunInputs:
    """Texts per length bin (collapse, knn, layerwise), retrieval tasks per length (passkey, needle, their
    ``-start`` variants; position: early and late per length) and labelled passages in filler per length and
    depth (placed)."""

    tokenizer: str
    binned: list[BinnedText] = field(default_factory=list)
    design: str = "bins"
    retrieval: dict[str, list[RetrievalTask]] = field(default_factory=dict)
    retrieval_pool: int | None = None
    """Candidates per query (`CompareConfig.retrieval_pool`); None: all documents of a length."""
    placed: list[PlacedPassage] = field(default_factory=list)
    placed_filler: str = ""
    """The corpus the placed passages sit in."""

    def by_length(self) -> dict[int, list[BinnedText]]:
        groups: dict[int, list[BinnedText]] = {}
        for text in self.binned:
            groups.setdefault(text.target_tokens, []).append(text)
        return groups

    def texts(self) -> list[str]:
        """Every distinct text a model embeds for this run (queries included), in first-use order."""
        texts = [t.text for t in self.binned]
        for tasks in self.retrieval.values():
            for task in tasks:
                texts += [*task.documents, *task.queries]
        texts += [p.text for p in self.placed]
        return list(dict.fromkeys(texts))  # -start queries repeat at every length

    def n_texts(self) -> int:
        """Distinct texts a model embeds for this run (queries included)."""
        return len(self.texts())

    def chars_per_token(self, default: float = 4.0) -> float:
        """Characters per reference-tokenizer token over the texts whose tokens were counted (binned and
        placed texts; a retrieval document at its target length); ``default`` where there are none."""
        counted = [(t.text, t.n_tokens) for t in self.binned] + [(p.text, p.n_tokens) for p in self.placed]
        counted += [
            (d, task.length) for tasks in self.retrieval.values() for task in tasks for d in task.documents
        ]
        tokens = sum(n for _, n in counted)
        return sum(len(text) for text, _ in counted) / tokens if tokens else default

    def prefix_sweep(self) -> tuple[set[str], list[str]]:
        """(every text of a prefix sweep, the longest text of each swept document).

        The prefix design's texts and the ``-start`` tasks' documents: where prefix sharing is exact, one
        forward of each longest text embeds all the others.
        """
        texts: set[str] = set()
        longest: list[str] = []
        if self.design == "prefix" and self.binned:
            top = max(t.target_tokens for t in self.binned)
            texts.update(t.text for t in self.binned)
            longest += [t.text for t in self.binned if t.target_tokens == top]
        for name in start_tasks():
            tasks = self.retrieval.get(name, [])
            if tasks:
                texts.update(d for task in tasks for d in task.documents)
                longest += list(max(tasks, key=lambda task: task.length).documents)
        return texts, longest

    def describe(self) -> dict:
        """What was sampled; for the prefix design also its N and how many texts joined corpus documents."""
        design: dict = {"design": self.design}
        if self.design == "prefix":
            design["prefix_docs"] = len(next(iter(self.by_length().values()), []))
            design["prefix_docs_concatenated"] = documents_joined(self.binned)
        return {
            "reference_tokenizer": self.tokenizer,
            **design,
            "texts_per_length": {str(k): len(v) for k, v in sorted(self.by_length().items())},
            "retrieval": {  # candidates per query at each length (1 / this is chance Acc@1)
                name: {
                    str(t.length): min(len(t.documents), self.retrieval_pool or len(t.documents))
                    for t in tasks
                }
                for name, tasks in self.retrieval.items()
            },
            **({"placed": self._describe_placed()} if self.placed else {}),
        }

    def _describe_placed(self) -> dict:
        """Passages per label, the depths, and the filler corpus."""
        items = {p.item_id: p.label for p in self.placed}
        labels = sorted(set(items.values()))
        return {
            "passages_per_label": {label: sum(v == label for v in items.values()) for label in labels},
            "depths": sorted({p.depth for p in self.placed}),
            "filler": self.placed_filler,
        }
