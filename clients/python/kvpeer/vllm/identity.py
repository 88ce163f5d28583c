"""What two engines must agree on before they may exchange blocks, as the
`hello` fields the daemon compares with every peer (wire-protocol.md,
`connect`): `hash_seed` and `config_fingerprint`.

* hash_seed. vLLM chains block hashes from NONE_HASH, derived from a seed
  (vllm/v1/core/kv_cache_utils.py:88-156 at 7cfb97e): PYTHONHASHSEED if
  set; otherwise the fixed DEFAULT_NONE_HASH_SEED for cryptographic hashes
  (sha256, sha256_cbor, vLLM's default) and a random per-process seed for
  xxhash. vLLM resolves it in init_none_hash, after the tiers are built
  (vllm/v1/engine/core.py:161 builds the scheduler, :228 calls
  init_none_hash), so at construction the tier derives the same value by
  vLLM's rule where it is determined (PYTHONHASHSEED set, or a
  cryptographic algorithm: `seed_at_construction`), and checks it against
  vLLM's own answer (`get_none_hash_seed`) at the first request. With
  xxhash and no PYTHONHASHSEED the seed is random per process: it is only
  known after init_none_hash, and no two nodes could share blocks anyway.

  The daemon puts hash_seed on the wire, and an xxhash seed must stay
  secret (a known seed lets an attacker precompute colliding blocks), so
  `hello` carries a digest, not the seed: a slow salted KDF (scrypt from
  the standard library, `hash_seed_digest`), so that a small seed such as
  a 32-bit PYTHONHASHSEED cannot be walked back from the digest by trying
  every value cheaply. Equal seeds give equal digests on every node.

* config_fingerprint. The model and layout settings vLLM's P2P tier hashes
  into its fingerprint (its FileMapper run config: model name, dtype,
  tokens per hash, blocks per chunk, KV-cache groups with their block sizes
  and layer names, parallel sizes unless the layout is
  parallelism-agnostic, replicated and canonical layouts), as canonical
  JSON, hashed. Two engines whose blocks are not interchangeable byte for
  byte get different fingerprints, and their daemons refuse each other.
  The row stride is checked separately (hello's block_len).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Any, Dict, List, Optional

__all__ = ["DEFAULT_NONE_HASH_SEED", "HASH_ALGOS", "vllm_hash_seed", "seed_at_construction", "hash_seed_digest",
           "config_fields", "config_fingerprint"]

# vLLM's seed for cryptographic hashes when PYTHONHASHSEED is unset.
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
# vLLM's prefix-caching hash algorithms (--prefix-caching-hash-algo), and
# whether each is cryptographic (kv_cache_utils.py:108-109 at 7cfb97e).
HASH_ALGOS = {"sha256": True, "sha256_cbor": True, "xxhash": False, "xxhash_cbor": False}
_DEFAULT_HASH_ALGO = "sha256"  # vllm/config/cache.py:109 at 7cfb97e

# The KDF of hash_seed_digest: scrypt with a fixed salt (the same on every
# node, so equal seeds give equal digests), N = 2**15, r = 8: 32 MiB and
# about 0.1 s on the CI machines (>= 50 ms asked by issue 25 item 4),
# once per process per seed.
KDF_SALT = b"kvpeer-hash-seed-v2"
_KDF_N = 1 << 15
_KDF_R = 8
_KDF_P = 1
_KDF_MAXMEM = 64 << 20

# Bumped when the fields below change meaning, so old and new adapters never
# share blocks by accident.
_FINGERPRINT_VERSION = "kvpeer-vllm-1"


def vllm_hash_seed() -> str:
    """The seed vLLM derived NONE_HASH from: vLLM's own answer when its
    module is importable, else the same rule applied here (for a vLLM
    version without get_none_hash_seed)."""
    try:
        from vllm.v1.core.kv_cache_utils import get_none_hash_seed  # type: ignore[import-not-found]
    except ImportError:
        return os.environ.get("PYTHONHASHSEED", DEFAULT_NONE_HASH_SEED)
    return str(get_none_hash_seed())


def _configured_hash_algo() -> Optional[str]:
    """vLLM's --prefix-caching-hash-algo when vLLM's current config is
    reachable while the tier is built (it usually is not), else None."""
    try:
        from vllm.config import get_current_vllm_config_or_none  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        config = get_current_vllm_config_or_none()
        algo = config.cache_config.prefix_caching_hash_algo if config is not None else None
    except AttributeError:
        return None
    return str(algo) if algo else None


def seed_at_construction(hash_algo: Optional[str] = None) -> Optional[str]:
    """The seed vLLM will derive NONE_HASH from, by vLLM's rule, when it is
    determined before init_none_hash runs; None when it will be random
    (xxhash without PYTHONHASHSEED). `hash_algo` is the tier's setting;
    without it, vLLM's current config if reachable, else vLLM's default
    (sha256). The tier checks the answer against vLLM's at the first request."""
    env = os.environ.get("PYTHONHASHSEED")
    if env is not None:
        return env
    algo = hash_algo or _configured_hash_algo() or _DEFAULT_HASH_ALGO
    if algo not in HASH_ALGOS:
        raise ValueError(f"kvpeer tier: 'hash_algo' must be one of {sorted(HASH_ALGOS)} (vLLM's "
                         f"--prefix-caching-hash-algo), got {algo!r}")
    return DEFAULT_NONE_HASH_SEED if HASH_ALGOS[algo] else None


@functools.lru_cache(maxsize=8)
def hash_seed_digest(seed: str) -> str:
    """What `hello` carries for `seed`: scrypt(seed, salt KDF_SALT), equal
    for equal seeds on every node, and costly to invert by trying seeds
    (about 0.1 s per try). Derived once per process per seed (cached)."""
    if not isinstance(seed, str):
        raise TypeError(f"hash seed must be a string, got {type(seed).__name__}")
    key = hashlib.scrypt(seed.encode(), salt=KDF_SALT, n=_KDF_N, r=_KDF_R, p=_KDF_P, maxmem=_KDF_MAXMEM,
                         dklen=32)
    return "scrypt-v2:" + key.hex()


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return getattr(obj, name, default) if obj is not None else default


def config_fields(offloading_spec: Any) -> Dict[str, Any]:
    """The settings that decide whether blocks are interchangeable, from
    vLLM's OffloadingSpec (`spec.config` is an OffloadingConfig)."""
    config = _get(offloading_spec, "config")
    if config is None:
        raise ValueError("offloading_spec has no config: cannot tell which engines may share blocks")
    model = _get(config, "model")
    cache = _get(config, "cache")
    parallel = _get(config, "parallel")
    groups: List[Dict[str, Any]] = [
        {"tokens_per_block": int(_get(g, "tokens_per_block", 0)),
         "layer_names": [str(n) for n in (_get(g, "layer_names", ()) or ())]}
        for g in (_get(config, "groups", ()) or ())
    ]
    replicated = bool(_get(config, "replicated_layout", False))
    agnostic = bool(_get(parallel, "is_parallelism_agnostic", False)) or replicated
    fields: Dict[str, Any] = {
        "version": _FINGERPRINT_VERSION,
        "model_name": str(_get(model, "name", "")),
        "dtype": str(_get(model, "dtype", "")),
        "tokens_per_hash": _get(cache, "tokens_per_hash"),
        "blocks_per_chunk": _get(cache, "blocks_per_chunk"),
        "kv_cache_groups": groups,
        "replicated_layout": replicated,
        "canonical_layout": bool(_get(config, "canonical_layout", False)),
    }
    if not agnostic:
        for name in ("tp_size", "pp_size", "pcp_size", "dcp_size"):
            fields[name] = _get(parallel, name)
    return fields


def config_fingerprint(offloading_spec: Any) -> str:
    """SHA-256 of the canonical JSON of `config_fields` (first 32 hex
    digits)."""
    canonical = json.dumps(config_fields(offloading_spec), sort_keys=True, separators=(",", ":"))
    return "vllm-" + hashlib.sha256(canonical.encode()).hexdigest()[:32]
