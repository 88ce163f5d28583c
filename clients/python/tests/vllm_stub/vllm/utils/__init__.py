"""Stand-in package (see tests/vllm_stub/README.md)."""
