"""What two engines must agree on before they may exchange blocks, as the
`hello` fields the daemon compares with every peer (wire-protocol.md,
`connect`): `hash_seed` and `config_fingerprint`.

* hash_seed. vLLM chains block hashes from NONE_HASH, derived from a seed
  (vllm/v1/core/kv_cache_utils.py): PYTHONHASHSEED if set; otherwise a fixed
  default for cryptographic hashes (sha256, sha256_cbor) and a random
  per-process seed for xxhash. Engines with different seeds compute
  different keys for the same tokens, so sharing would only ever miss; a
  mismatch must be refused loudly instead. We read the seed vLLM actually
  used (`get_none_hash_seed`, only known once `init_none_hash` has run,
  hence asked lazily) and send a SHA-256 digest of it, not the seed itself:
  the daemon puts hash_seed on the wire, and for xxhash the seed is a
  secret (a known seed lets an attacker precompute colliding blocks).
  Equal seeds give equal digests, so the check is unchanged.

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

import hashlib
import json
import os
from typing import Any, Dict, List

__all__ = ["DEFAULT_NONE_HASH_SEED", "vllm_hash_seed", "hash_seed_digest", "config_fields",
           "config_fingerprint"]

# vLLM's seed for cryptographic hashes when PYTHONHASHSEED is unset.
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"

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


def hash_seed_digest(seed: str) -> str:
    """What `hello` carries for `seed`: equal for equal seeds, revealing
    nothing of a secret one."""
    return "sha256:" + hashlib.sha256(b"kvpeer-vllm-hash-seed\0" + seed.encode()).hexdigest()


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
