"""Stand-in for the seed half of vllm/v1/core/kv_cache_utils.py."""

import os
from typing import Optional

DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
_NONE_HASH_SEED: Optional[str] = None


def init_none_hash_seed(cryptographic: bool = True) -> None:
    """vLLM's rule, without the hashing: PYTHONHASHSEED, else the fixed
    default (sha256) or a random seed (xxhash)."""
    global _NONE_HASH_SEED
    seed = os.getenv("PYTHONHASHSEED")
    if seed is None:
        seed = DEFAULT_NONE_HASH_SEED if cryptographic else os.urandom(32).hex()
    _NONE_HASH_SEED = seed


def get_none_hash_seed() -> str:
    return DEFAULT_NONE_HASH_SEED if _NONE_HASH_SEED is None else _NONE_HASH_SEED
