"""Which vLLM interface the stand-in imitates (not a vLLM module).

KVPEER_VLLM_SHAPE selects it, read once at import:

  * "7cfb97e" (default): vllm-project/vllm 7cfb97e33791a348cd5d7b622cca521d82d8399f,
    the commit docs/vllm.md names: TransferJob.block_ids
    (vllm/v1/kv_offload/tiering/base.py:59-67), OffloadPolicy.BLOCK_LEVEL
    (vllm/v1/kv_offload/base.py:116-122), SecondaryTierManager.__init__
    (offloading_spec, primary_kv_view, tier_type) (tiering/base.py:135-153);
  * "chunk": after #52615 (TransferJob.chunk_ids, OffloadPolicy.CHUNK_LEVEL,
    no aliases) and #50045 (__init__ gains backpressure_detector=None, kept
    as the bp_detector property; the factory always passes it, issue #58087).

Every tier test runs under both (tests/CMakeLists.txt registers
python_vllm_tier and python_vllm_tier_chunk).
"""

import os

SHAPES = ("7cfb97e", "chunk")
SHAPE = os.environ.get("KVPEER_VLLM_SHAPE", "7cfb97e")
if SHAPE not in SHAPES:
    raise ImportError(f"KVPEER_VLLM_SHAPE={SHAPE!r}: the stand-in knows {SHAPES}")
CHUNK = SHAPE == "chunk"
