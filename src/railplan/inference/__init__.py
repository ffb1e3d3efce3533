"""Distributed inference on HB domains: KV cache, prefill and decode step times, serving under
load (continuous batching, Poisson arrivals) and the configuration search (docs/inference.md).

The pieces of the training model are reused: GEMM shapes (`workload.gemms`), GEMM efficiency and
HBM time (`compute`), collectives and the network's links (`collectives`, `comm_time.links`,
`layout`)."""
