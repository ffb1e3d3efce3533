"""Search the fastest parallelization of a model on each network (every valid strategy).

python examples/search_best.py
"""

from __future__ import annotations

from railplan import Network, load_model, load_system
from railplan.explore.search import MEGATRON_SPACE, search
from railplan.specs import Job


def main(model_name: str = "gpt-22b", gpus: int = 512, global_batch: int = 1024) -> None:
    model = load_model(model_name)
    system = load_system("dgx-h100")
    for arch in ("rail-optimized", "rail-only", "ideal"):
        job = Job(model, system, Network(architecture=arch), gpus, global_batch)
        r = search(job, MEGATRON_SPACE)
        if r.best is None:
            print(f"{arch}: no strategy fits")
            continue
        s = r.best.strategy
        print(
            f"{arch:15s} {r.best.iteration_s:7.3f} s  MFU {r.best.mfu:5.1%}  "
            f"tp={s.tp} pp={s.pp} dp={s.dp} v={s.interleave} mb={s.micro_batch} "
            f"recompute={s.recompute} SP={s.sequence_parallel} ZeRO={s.zero}  "
            f"({r.configurations_evaluated:,} strategies in {r.elapsed_s:.2f} s)"
        )


if __name__ == "__main__":
    main()
