"""Native re-implementations of embedding models whose published remote code does not run on transformers 5.

Each module here builds on transformers' own classes (so ``from_pretrained`` keeps sharding, dtype, device maps and
quantisation) and never executes code from a checkpoint folder. ``nv_embed`` holds nvidia/NV-Embed-v2.
"""

from __future__ import annotations
