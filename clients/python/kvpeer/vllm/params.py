"""A request's P2P role, read from vLLM's `kv_transfer_params` the way
vLLM's own P2P tier reads them (tiering/p2p/manager.py at the commit named
in docs/vllm.md), so a router written for that tier drives this one
unchanged:

  * `remote_prefiller` {kv_request_id, remote_host, remote_port}: this
    engine is a decoder; it loads the request's blocks from that prefiller
    without probing (every lookup is a HIT);
  * otherwise `remote_kv_source` {same fields}: symmetric sharing; probe the
    source first, then load only its hits;
  * `remote_decoder` {kv_request_id}: this engine is a prefiller; the
    blocks it stores for the request are supply for that decoder. The block
    being present marks the request even without an id (its stores then
    fail instead of silently serving no one).

A source missing its host, port or id is no source (the request just
recomputes), as in vLLM. `remote_prefiller` wins over `remote_kv_source`;
the destination is read independently of either.

Our `peer` is the daemon's `host:port`, built from remote_host and
remote_port exactly as vLLM builds its peer id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

__all__ = ["Source", "Dest", "parse_source", "parse_dest"]


@dataclass(frozen=True)
class Source:
    """This request loads from `peer` under `kv_request_id`."""

    kv_request_id: str
    peer: str
    probe: bool  # True for remote_kv_source, False for remote_prefiller


@dataclass(frozen=True)
class Dest:
    """A remote decoder fetches this request's stored blocks; `kv_request_id`
    is None when the `remote_decoder` block carries no usable id."""

    kv_request_id: Optional[str]


def _role(params: Optional[Mapping[str, Any]], name: str) -> Optional[Mapping[str, Any]]:
    if not params or not isinstance(params, Mapping):
        return None
    role = params.get(name)
    if role is None:
        return None
    return role if isinstance(role, Mapping) else {}


def _peer(role: Mapping[str, Any]) -> Optional[str]:
    host = role.get("remote_host")
    port = role.get("remote_port")
    if not host or not port:
        return None
    host = str(host)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 literal, as the daemon's `peer` spells it
    return f"{host}:{port}"


def _request_id(role: Mapping[str, Any]) -> Optional[str]:
    kv_request_id = role.get("kv_request_id")
    if not kv_request_id or not isinstance(kv_request_id, str):
        return None
    return kv_request_id


def parse_source(params: Optional[Mapping[str, Any]]) -> Optional[Source]:
    """The request's load source, or None (no role, or an incomplete one)."""
    role = _role(params, "remote_prefiller")
    probe = False
    if role is None:
        role = _role(params, "remote_kv_source")
        probe = True
    if not role:
        return None
    peer = _peer(role)
    kv_request_id = _request_id(role)
    if peer is None or kv_request_id is None:
        return None
    return Source(kv_request_id=kv_request_id, peer=peer, probe=probe)


def parse_dest(params: Optional[Mapping[str, Any]]) -> Optional[Dest]:
    """The request's remote decoder, or None when it has none."""
    role = _role(params, "remote_decoder")
    if role is None:
        return None
    return Dest(kv_request_id=_request_id(role))
