"""Stand-in for the seed half of vllm/v1/core/kv_cache_utils.py (7cfb97e:88-156):
the seed NONE_HASH is derived from. vLLM's rule: PYTHONHASHSEED if set;
otherwise the fixed DEFAULT_NONE_HASH_SEED for cryptographic hashes and a
random per-process seed for xxhash (resolve_none_hash_seed); init_none_hash
records it (vLLM calls it from EngineCore.__init__ after the scheduler, and
so the tiers, are built: vllm/v1/engine/core.py:161-228); get_none_hash_seed
returns it, or the default before init_none_hash ran."""

import os
from typing import Any, Callable, Optional

from vllm.utils.hashing import xxhash, xxhash_cbor

DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
_NON_CRYPTO_HASH_FUNCTIONS = frozenset({xxhash, xxhash_cbor})
_NONE_HASH_SEED: Optional[str] = None
NONE_HASH: bytes = b""


def resolve_none_hash_seed(hash_fn: Callable[[Any], bytes]) -> str:
    hash_seed = os.getenv("PYTHONHASHSEED")
    if hash_seed is not None:
        return hash_seed
    if hash_fn in _NON_CRYPTO_HASH_FUNCTIONS:
        return os.urandom(32).hex()
    return DEFAULT_NONE_HASH_SEED


def get_none_hash_seed() -> str:
    return DEFAULT_NONE_HASH_SEED if _NONE_HASH_SEED is None else _NONE_HASH_SEED


def init_none_hash(hash_fn: Callable[[Any], bytes]) -> None:
    global NONE_HASH, _NONE_HASH_SEED
    _NONE_HASH_SEED = resolve_none_hash_seed(hash_fn)
    NONE_HASH = hash_fn(_NONE_HASH_SEED)
