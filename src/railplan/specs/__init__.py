"""Specs: immutable, validated descriptions of models, hardware, networks and strategies."""

from railplan.specs.catalog import load_gpu, load_model, load_network, load_system, names
from railplan.specs.hardware import GPU, System
from railplan.specs.job import Job
from railplan.specs.model import Model
from railplan.specs.network import ARCHITECTURES, Network
from railplan.specs.strategy import (
    ATTENTION_CODES,
    CROSS_ENTROPY_CODES,
    EP_DISPATCH_CODES,
    OPTIMIZER_STATE_CODES,
    PIPELINE_SCHEDULE_CODES,
    PRECISION_CODES,
    RECOMPUTE_CODES,
    ROUTER_DTYPE_CODES,
    ZERO_SCHEDULE_CODES,
    Strategy,
)

__all__ = [
    "ARCHITECTURES",
    "ATTENTION_CODES",
    "CROSS_ENTROPY_CODES",
    "EP_DISPATCH_CODES",
    "GPU",
    "OPTIMIZER_STATE_CODES",
    "PIPELINE_SCHEDULE_CODES",
    "PRECISION_CODES",
    "RECOMPUTE_CODES",
    "ROUTER_DTYPE_CODES",
    "ZERO_SCHEDULE_CODES",
    "Job",
    "Model",
    "Network",
    "Strategy",
    "System",
    "load_gpu",
    "load_model",
    "load_network",
    "load_system",
    "names",
]
