"""Stand-in for the hash functions of vllm/utils/hashing.py (7cfb97e:26-79)
that vllm/v1/core/kv_cache_utils.py tells apart: which are cryptographic
decides the NONE_HASH seed. Only their identity matters to the tier; the
bodies here are plain hashlib stand-ins (the real xxhash is xxh3_128)."""

import hashlib
import pickle
from typing import Any, Callable


def sha256(input: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(input, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def sha256_cbor(input: Any) -> bytes:
    return hashlib.sha256(repr(input).encode()).digest()


def xxhash(input: Any) -> bytes:
    return hashlib.blake2b(pickle.dumps(input, protocol=pickle.HIGHEST_PROTOCOL), digest_size=16).digest()


def xxhash_cbor(input: Any) -> bytes:
    return hashlib.blake2b(repr(input).encode(), digest_size=16).digest()


def get_hash_fn_by_name(name: str) -> Callable[[Any], bytes]:
    fns = {"sha256": sha256, "sha256_cbor": sha256_cbor, "xxhash": xxhash, "xxhash_cbor": xxhash_cbor}
    if name not in fns:
        raise ValueError(f"Unsupported hash function: {name}")
    return fns[name]
