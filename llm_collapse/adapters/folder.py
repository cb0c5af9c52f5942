"""Embedders read from a model folder with no spec file: ``st:PATH`` (sentence-transformers) and ``hf:PATH``
(plain transformers).

Both return spec-file keys (`llm_collapse.adapters.spec_file`), so a folder model is validated and built like a
spec file, and a spec file whose ``path:`` is a sentence-transformers folder takes its defaults from here.

``st:PATH`` reads the files `SentenceTransformer(PATH)` reads:
    - ``modules.json``: one ``Transformer`` (``path`` ``""`` is the folder itself; older models use
      ``0_Transformer``), one ``Pooling``, optionally ``Normalize``. Any other module (``Dense``, ``LayerNorm``,
      ``Router``, static embeddings...) changes the vector in a way the package does not reproduce: refused.
    - the pooling folder's ``config.json``: ``pooling_mode`` (or the older ``pooling_mode_*`` flags) ``mean`` ->
      mean pooling, ``lasttoken`` -> last-token pooling, ``cls`` -> the first token (``pool_span: first``);
      ``max``, ``weightedmean``, ``mean_sqrt_len_tokens`` and concatenated modes are refused, and so is
      ``include_prompt: false`` when the folder has prompts (sentence-transformers then drops a token count from the
      pool that no template reproduces).
    - ``sentence_bert_config.json`` (or an older ``sentence_<arch>_config.json``) beside the transformer:
      ``max_seq_length`` -> ``max_length``; ``do_lower_case: true`` is refused (texts are never lower-cased here).
    - ``config_sentence_transformers.json``: ``prompts`` -> the query template (``prompts["query"]``) and the
      document template (``prompts["document"]``, else ``prompts["passage"]``), each falling back to the
      ``default_prompt_name`` prompt, as `SentenceTransformer.encode` does when no prompt is named.
    - ``Normalize`` needs nothing: every llm_collapse vector is unit length, with or without it. A folder whose
      ``similarity_fn_name`` is not cosine is therefore compared by cosine here (logged).

``hf:PATH`` follows what sentence-transformers 6 builds for a folder without ``modules.json``: the transformer,
then last-token pooling when ``config.json``'s first architecture ends in ``ForCausalLM`` (and ``is_causal`` is not
false), else mean pooling; every real token pooled, special tokens included.

Either way ``max_length`` falls back to the tokenizer's ``model_max_length`` (capped at ``max_position_embeddings``),
which is sentence-transformers' ``max_seq_length`` then, else the model's positions (decided at load).

Decisions
    - Strict: a missing or malformed file is one `ModelFolderError` line naming the file and how to fix it, rather
      than a silent default that would embed differently from sentence-transformers.
    - Prompts are fixed text, so their braces are escaped and the templates take no ``{instruction}``: the model
      receives exactly the prompt sentence-transformers prepends.
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

from llm_collapse.errors import UserError

logger = logging.getLogger(__name__)

ST_PREFIX = "st:"
HF_PREFIX = "hf:"
FOLDER_PREFIXES: tuple[str, ...] = (ST_PREFIX, HF_PREFIX)

_MODES = {"mean": ("mean", "all"), "lasttoken": ("last", "all"), "cls": ("mean", "first")}
"""sentence-transformers pooling mode -> (pooling, pool_span); mean over the first token alone is that token."""
_LEGACY_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_MODULE_CONFIGS = ("sentence_bert_config.json", "sentence_roberta_config.json", "sentence_distilbert_config.json",
                   "sentence_camembert_config.json", "sentence_albert_config.json",
                   "sentence_xlm-roberta_config.json", "sentence_xlnet_config.json")  # fmt: skip
"""The transformer module's config names sentence-transformers tries, in its order."""
_UNSET_MAX_LENGTH = 10**9
"""transformers writes int(1e30) as ``model_max_length`` when a tokenizer has none; anything this large is unset."""


class ModelFolderError(UserError, ValueError):
    """A folder named by ``st:``/``hf:`` (or a spec file's ``path:``) that cannot be used as it is (one line)."""


def st_keys(folder: str | Path) -> dict:
    """Spec-file keys for a sentence-transformers folder (see the module docstring).

    Returns:
        ``path`` (the transformer folder, absolute), ``pooling``, ``pool_span``, ``max_length``,
        ``query_template`` and ``document_template``.

    Raises:
        ModelFolderError: The folder is missing, is not a sentence-transformers folder, or uses a module or option
            that is not reproduced.
    """
    root = _existing_folder(folder, ST_PREFIX)
    modules = _read_json(root / "modules.json", fix=f"use hf:{folder} for a plain transformers folder")
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ModelFolderError(
            f"{root / 'modules.json'} must hold a list of modules (as sentence-transformers saves)"
        )
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    others = [k or "?" for k in kinds if k not in ("Transformer", "Pooling", "Normalize")]
    if others or kinds[:2] != ["Transformer", "Pooling"] or kinds.count("Normalize") > 1 or len(kinds) > 3:
        raise ModelFolderError(
            f"{root / 'modules.json'} lists {kinds}; st: reproduces Transformer, Pooling and an optional Normalize "
            f"only{f' (not {others[0]})' if others else ''}: use hf:<its transformer folder> to embed with the "
            "transformer alone"
        )
    transformer = (root / str(modules[0].get("path") or "")).resolve()
    pooling_file = root / str(modules[1].get("path") or "") / "config.json"
    model_config = model_folder_config(
        transformer / "config.json", fix="point st: at a complete sentence-transformers folder"
    )
    module_config = next(
        (_optional_json(transformer / name) for name in _MODULE_CONFIGS if (transformer / name).is_file()), {}
    )
    check_tokenizer(transformer)
    st_config = _optional_json(root / "config_sentence_transformers.json")
    query, document = _prompts(st_config, root)
    pooling, span = _pooling(_read_json(pooling_file, fix="point st: at a complete sentence-transformers folder"),
                             pooling_file, prompted=bool(query or document))  # fmt: skip
    if module_config.get("do_lower_case") is True:
        raise ModelFolderError(
            f"{transformer} sets do_lower_case: true in its sentence-transformers config; llm_collapse does not "
            "lower-case texts, so this folder is not reproduced (lower-case your texts and use hf: instead)"
        )
    similarity = st_config.get("similarity_fn_name")
    if similarity not in (None, "cosine"):
        logger.warning(
            "%s: similarity %r; llm_collapse vectors are unit length and compared by cosine", root, similarity
        )
    max_length = module_config.get("max_seq_length")
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int)):
        raise ModelFolderError(
            f"{transformer}: max_seq_length {max_length!r} must be an integer; fix the file"
        )
    positions = model_config.get("max_position_embeddings")
    if max_length is not None and positions is not None and max_length > positions:
        raise ModelFolderError(
            f"{transformer}: max_seq_length {max_length} is beyond the model's {positions} positions "
            "(config.json max_position_embeddings); set max_seq_length <= "
            f"{positions} in its sentence-transformers config"
        )
    return {
        "path": str(transformer),
        "pooling": pooling,
        "pool_span": span,
        "max_length": max_length if max_length is not None else _tokenizer_limit(transformer, model_config),
        "query_template": _escape(query) + "{text}",
        "document_template": _escape(document) + "{text}",
    }


def hf_keys(folder: str | Path) -> dict:
    """Spec-file keys for a plain transformers folder: ``path``, ``pooling`` and ``max_length`` (module docstring).

    Raises:
        ModelFolderError: The folder is missing or has no ``config.json``.
    """
    root = _existing_folder(folder, HF_PREFIX).resolve()
    config = model_folder_config(root / "config.json", fix="point hf: at a transformers model folder")
    check_tokenizer(root)
    architectures = config.get("architectures") or [""]
    causal_lm = str(architectures[0]).endswith("ForCausalLM") and config.get("is_causal", True) is not False
    return {
        "path": str(root),
        "pooling": "last" if causal_lm else "mean",
        "max_length": _tokenizer_limit(root, config),
    }


MIN_VOCABULARY = 32
"""Fewer vocabulary entries than this (beyond the added special tokens) is no real tokenizer: transformers builds
one of its five special tokens from a folder without tokenizer files, and every word becomes [UNK]."""
_VOCAB_TEXTS = ("vocab.txt", "vocab.json")
_SENTENCEPIECE = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "sentencepiece.model")


@functools.lru_cache(maxsize=32)
def _fast_vocabulary(path: str, mtime_ns: int, file_size: int, fix: str) -> tuple[int, int]:
    """(model vocabulary entries, added tokens) of a ``tokenizer.json``, parsed once per version of the file: an
    ``st:``/``hf:`` name is resolved several times a run, and the file holds 10-30 MB for a decoder."""
    data = _read_json(Path(path), fix=fix)
    model = data.get("model") if isinstance(data, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    added = data.get("added_tokens") if isinstance(data, dict) else None
    return (len(vocab) if isinstance(vocab, dict | list) else 0), (
        len(added) if isinstance(added, list) else 0
    )


def check_tokenizer(folder: Path) -> None:
    """Refuses a model folder whose tokenizer has no real vocabulary (`MIN_VOCABULARY`), in one line, before any
    work: ``tokenizer.json``'s model vocabulary, else ``vocab.txt``/``vocab.json`` entries, else a sentencepiece
    model file."""
    fix = f"copy the model's tokenizer files (tokenizer.json, or vocab.txt / vocab.json / a sentencepiece model) into {folder}"
    fast = folder / "tokenizer.json"
    if fast.is_file():
        stat = fast.stat()
        size, added = _fast_vocabulary(str(fast), stat.st_mtime_ns, stat.st_size, fix)
        if size - added >= MIN_VOCABULARY:
            return
        raise ModelFolderError(f"{fast}: its vocabulary holds {size} entries, no real tokenizer; {fix}")
    for name in _VOCAB_TEXTS:
        if (folder / name).is_file():
            try:
                text = (folder / name).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                raise ModelFolderError(f"{folder / name} is not readable ({err}); {fix}") from None
            try:
                entries = json.loads(text) if name.endswith(".json") else text.splitlines()
            except json.JSONDecodeError as err:
                raise ModelFolderError(f"{folder / name} is not readable JSON ({err}); {fix}") from None
            size = len(entries) if isinstance(entries, dict | list) else 0
            if size >= MIN_VOCABULARY:
                return
            raise ModelFolderError(f"{folder / name}: {size} entries, no real vocabulary; {fix}")
    if any((folder / name).is_file() and (folder / name).stat().st_size > 0 for name in _SENTENCEPIECE):
        return
    raise ModelFolderError(f"{folder} has no tokenizer vocabulary, so every word would become [UNK]; {fix}")


def model_folder_config(file: Path, fix: str) -> dict:
    """A folder model's config.json, checked for what a folder resolves from it: a JSON object with a
    ``model_type`` transformers knows, ``architectures`` a list of names and ``max_position_embeddings`` a
    positive integer where given (one `ModelFolderError` line otherwise, never a TypeError later)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    config = _read_json(file, fix=fix)
    if not isinstance(config, dict):
        raise ModelFolderError(f"{file} must hold a JSON object (as save_pretrained writes); {fix}")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING_NAMES:
        raise ModelFolderError(
            f"{file}: model_type {str(model_type)[:60]!r} is not one transformers "
            f"{_transformers_version()} knows; upgrade transformers or point at a supported checkpoint"
        )
    architectures = config.get("architectures")
    if architectures is not None and not (
        isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)
    ):
        raise ModelFolderError(f'{file}: architectures must be a list of class names, e.g. ["BertModel"]')
    positions = config.get("max_position_embeddings")
    if positions is not None and (
        isinstance(positions, bool) or not isinstance(positions, int) or positions < 1
    ):
        raise ModelFolderError(
            f"{file}: max_position_embeddings {str(positions)[:40]!r} must be a positive integer"
        )
    return config


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def _existing_folder(folder: str | Path, prefix: str) -> Path:
    path = Path(folder).expanduser()
    if not str(folder).strip() or not path.is_dir():
        raise ModelFolderError(
            f"{prefix}{folder} is not a folder; {prefix} takes a local model folder (no hub id), e.g. "
            f"{prefix}/models/all-MiniLM-L6-v2 (hf download <id> --local-dir <folder> fetches one)"
        )
    return path


def _read_json(file: Path, fix: str = "fix or replace the file"):
    if not file.is_file():
        raise ModelFolderError(f"{file} is missing; {fix}")
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelFolderError(f"{file} is not readable JSON ({err}); {fix}") from None


def _optional_json(file: Path) -> dict:
    data = _read_json(file) if file.is_file() else {}
    if not isinstance(data, dict):
        raise ModelFolderError(f"{file} must hold a JSON object; fix or remove it")
    return data


def _pooling(config: object, file: Path, *, prompted: bool) -> tuple[str, str]:
    if not isinstance(config, dict):
        raise ModelFolderError(f"{file} must hold a JSON object (sentence-transformers' pooling config)")
    mode = config.get("pooling_mode")
    if mode is None:
        mode = [name for key, name in _LEGACY_MODES.items() if config.get(key)] or ["mean"]
    modes = [mode] if isinstance(mode, str) else mode
    if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
        raise ModelFolderError(f'{file}: pooling_mode {str(mode)[:60]} must be a mode name, e.g. "mean"')
    if len(modes) != 1 or modes[0] not in _MODES:
        raise ModelFolderError(
            f"{file}: pooling {modes} is not reproduced; llm_collapse pools one of {', '.join(_MODES)}"
        )
    if prompted and config.get("include_prompt", True) is False:
        raise ModelFolderError(
            f"{file}: include_prompt: false leaves the prompt's tokens out of the pool, which llm_collapse does not "
            "reproduce; use a spec file (pool_span: skip-instruction is NV-Embed's rule, not this one)"
        )
    return _MODES[modes[0]]


def _prompts(st_config: dict, root: Path) -> tuple[str, str]:
    prompts = st_config.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise ModelFolderError(
            f"{root / 'config_sentence_transformers.json'}: prompts must map names to strings"
        )
    default_name = st_config.get("default_prompt_name")
    if default_name is not None and not isinstance(default_name, str):
        raise ModelFolderError(
            f"{root / 'config_sentence_transformers.json'}: default_prompt_name must be a prompt's name or null"
        )
    default = prompts.get(default_name or "", "")
    query = prompts.get("query", default)
    document = prompts.get("document", prompts.get("passage", default))
    return query, document


def _tokenizer_limit(folder: Path, model_config: dict) -> int | None:
    """The tokenizer's ``model_max_length`` capped at the model's positions; None when the tokenizer sets none."""
    tokenizer = _optional_json(folder / "tokenizer_config.json")
    limit = tokenizer.get("model_max_length")
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 2 <= limit < _UNSET_MAX_LENGTH:
        return None
    positions = model_config.get("max_position_embeddings")
    return min(int(limit), positions) if isinstance(positions, int) and positions >= 2 else int(limit)


def _escape(prompt: str) -> str:
    return prompt.replace("{", "{{").replace("}", "}}")
