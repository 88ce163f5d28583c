"""kvpeer for vLLM: `KvpeerSecondaryTier`, a secondary tier of vLLM's
offloading connector whose transfers the node's kvpeerd performs.

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": ...,
        "secondary_tiers": [{"type": "KvpeerSecondaryTier", "module_path": "kvpeer.vllm",
                             "socket": "/run/kvpeer/kvpeerd.sock"}]}}'

The tier class needs vLLM (it subclasses vLLM's SecondaryTierManager), so it
is imported on first use: `import kvpeer.vllm` works without vLLM (the
helpers in its modules are plain Python), `kvpeer.vllm.KvpeerSecondaryTier`
imports vLLM. See docs/vllm.md.
"""

from typing import Any

__all__ = ["KvpeerSecondaryTier"]


def __getattr__(name: str) -> Any:
    if name == "KvpeerSecondaryTier":
        from .tier import KvpeerSecondaryTier

        return KvpeerSecondaryTier
    raise AttributeError(f"module 'kvpeer.vllm' has no attribute {name!r}")
