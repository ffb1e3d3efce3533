"""Command-line options shared by several commands (one declaration each)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, get_type_hints

import typer

from railplan.errors import RailplanError
from railplan.names import ARCHITECTURES, price_book_names

if TYPE_CHECKING:
    from railplan.specs import Network, System

R = TypeVar("R")

ModelOpt = Annotated[str, typer.Option(help="catalog name or YAML file")]
GpusOpt = Annotated[int, typer.Option(help="GPUs in the job (tp·cp·pp·dp)")]
GlobalBatchOpt = Annotated[int, typer.Option(help="sequences per iteration")]
SystemOpt = Annotated[str, typer.Option(help="catalog name or YAML file")]
NetworkOpt = Annotated[str, typer.Option(help=" | ".join(ARCHITECTURES))]
OversubscriptionOpt = Annotated[
    float | None, typer.Option(help="ratio 1-100, with --network oversubscribed")
]
HbDomainOpt = Annotated[int | None, typer.Option(help="override K, GPUs per HB domain")]
HbTbpsOpt = Annotated[
    float | None, typer.Option(help="override HB Tbps per GPU per direction (0.01-1000)")
]
NicGbpsOpt = Annotated[float | None, typer.Option(help="override NIC Gbps per direction (1-1e5)")]
NvlsOpt = Annotated[
    bool | None,
    typer.Option(
        "--nvls/--no-nvls",
        help="all-reduces inside the HB domain use NVLink SHARP (NVSwitch 3 and later), or "
        "not; default: the system's own setting",
        show_default=False,
    ),
]
SharpOpt = Annotated[
    bool, typer.Option("--sharp", help="the rail switches aggregate all-reduces (SHARP)")
]
NicsPerGpuOpt = Annotated[
    float | None, typer.Option(help="override NICs per GPU (0.125-16; 0.125 = a NIC per 8 GPUs)")
]
# the report counts switches and transceivers, so it takes whole NICs only
ReportNicsPerGpuOpt = Annotated[
    float | None,
    typer.Option("--nics-per-gpu", help="override NICs per GPU (a whole number, 1-16)"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]

# the network commands' cluster (cost, topology, faults, tile, cost-plot, flowsim)
ClusterGpusOpt = Annotated[int, typer.Option(help="GPUs N")]
HbDomainSizeOpt = Annotated[int, typer.Option(help="HB-domain size K")]
RadixOpt = Annotated[int, typer.Option(help="switch radix")]
FabricRadixOpt = Annotated[
    int | None,
    typer.Option(
        "--radix",
        help="with --network oversubscribed: ports per switch of the NIC fabric, which "
        "decides whether the job reaches its oversubscribed uplinks [64]",
    ),
]
NicSpeedOpt = Annotated[int, typer.Option(help="NIC speed (Gbps)")]
NicPortsOpt = Annotated[int, typer.Option(help="NIC ports per GPU")]

DpOpt = Annotated[int | None, typer.Option(help="default: gpus / (tp·pp)")]
InterleaveOpt = Annotated[int, typer.Option(help="virtual stages per pipeline stage")]
RecomputeOpt = Annotated[str, typer.Option(help="none | selective | full")]
SequenceParallelOpt = Annotated[bool, typer.Option("--sequence-parallel/--no-sequence-parallel")]
ZeroOpt = Annotated[int, typer.Option(help="ZeRO stage 0-3")]
EpOpt = Annotated[
    int,
    typer.Option(
        help="expert-parallel degree (MoE); ep·expert_tp divides tp·cp·dp (with the default "
        "expert_tp = tp: ep divides dp·cp)"
    ),
]
ExpertTpOpt = Annotated[
    int,
    typer.Option(
        help="tensor-parallel degree of the routed experts (Megatron-Core "
        "--expert-tensor-parallel-size; divides tp; 1: each expert whole on one GPU, no "
        "all-gather of the dispatched tokens); 0 = tp",
    ),
]
ZeroShardOpt = Annotated[
    int,
    typer.Option(
        help="hybrid sharding (HSDP): ZeRO shards over groups of N consecutive dp·cp ranks and "
        "keeps dp·cp/N replicas (FSDP HYBRID_SHARD; torchtitan data_parallel_shard_degree; "
        "Megatron-Core --num-distributed-optimizer-instances dp·cp/N); 0 = over all of them",
    ),
]
OverlapDpOpt = Annotated[
    bool,
    typer.Option(
        "--overlap-dp/--no-overlap-dp",
        help="gradient reduction behind the last backward pass, weight all-gather behind the "
        "next forward (Megatron-Core --overlap-grad-reduce/--overlap-param-gather)",
    ),
]
OverlapTpOpt = Annotated[
    bool,
    typer.Option(
        "--overlap-tp/--no-overlap-tp",
        help="backward TP collectives behind the weight/input-gradient GEMMs (off: exposed)",
    ),
]
TpCommOverlapOpt = Annotated[
    bool,
    typer.Option(
        "--tp-comm-overlap/--no-tp-comm-overlap",
        help="forward TP all-gather/reduce-scatter pipelined with their GEMMs (TE userbuffers, "
        "with sequence parallelism; NeMo ub_tp_comm_overlap)",
    ),
]
OverlapP2pOpt = Annotated[
    bool,
    typer.Option(
        "--overlap-p2p/--no-overlap-p2p",
        help="pipeline sends behind compute (off: blocking, as Megatron-LM of 2021-22)",
    ),
]
DeferEmbeddingWgradOpt = Annotated[
    bool,
    typer.Option(
        "--defer-embedding-wgrad/--no-defer-embedding-wgrad",
        help="the last stage's LM-head weight-gradient GEMMs run in the pipeline flush "
        "(Megatron-Core defer_embedding_wgrad_compute; needs pp > 1)",
    ),
]
WgradDeferralLimitOpt = Annotated[
    int,
    typer.Option(
        help="micro-batches whose LM-head wgrad is deferred, 0 = all (Megatron-Core "
        "wgrad_deferral_limit)"
    ),
]
GradAccFusionOpt = Annotated[
    bool,
    typer.Option(
        "--grad-accumulation-fusion/--no-grad-accumulation-fusion",
        help="weight-gradient GEMMs accumulate into the main grad (off: an extra pass per "
        "micro-batch, as Megatron-LM of 2021)",
    ),
]
P2pScatterGatherOpt = Annotated[
    bool,
    typer.Option(
        "--p2p-scatter-gather/--no-p2p-scatter-gather",
        help="without sequence parallelism, pipeline sends carry 1/tp of the activation each "
        "(Megatron-LM 2021-22); off: the whole of it (Megatron-Core)",
    ),
]
CpOpt = Annotated[
    int, typer.Option(help="context-parallel degree (ring attention); gpus = tp·cp·pp·dp")
]


def modules_of(text: str | None, recompute: str = "selective") -> tuple[str, ...]:
    """--recompute-modules as `Strategy.recompute_modules`: Megatron-Core's default (core_attn)
    when not given; given beside a --recompute other than selective, a one-line error (it
    would have no effect)."""
    if text is None:
        return ("core_attn",)
    if recompute != "selective":
        raise RailplanError(
            "recompute_modules",
            "takes effect only with --recompute selective (Megatron-Core "
            "--recompute-granularity selective)",
        )
    return tuple(m.strip() for m in text.split(",") if m.strip())


def _stage_layers_option(which: str) -> Any:
    """`--first-stage-layers` / `--last-stage-layers`, named after Megatron's flag."""
    return typer.Option(
        help=f"layers of the {which} pipeline stage (0 = spread evenly; Megatron "
        f"--decoder-{which}-pipeline-num-layers)"
    )


FirstStageLayersOpt = Annotated[int, _stage_layers_option("first")]
LastStageLayersOpt = Annotated[int, _stage_layers_option("last")]
ZeroScheduleOpt = Annotated[
    str,
    typer.Option(
        help="when ZeRO-2/3 gather and reduce-scatter: micro_batch (FSDP/DeepSpeed default) "
        "| step (once per step)"
    ),
]
OverlapBackwardGatherOpt = Annotated[
    bool,
    typer.Option(
        "--overlap-backward-gather/--no-overlap-backward-gather",
        help="ZeRO-3: the backward weight gather overlaps the previous unit's gradient compute "
        "(FSDP BACKWARD_PRE, DeepSpeed); off: FSDP BACKWARD_POST, the gather is exposed",
    ),
]
RecomputeModulesOpt = Annotated[
    str | None,
    typer.Option(
        help="with --recompute selective, what is rerun, comma-separated (Megatron-Core "
        "--recompute-modules): core_attn (default) | layernorm | moe_act | mla_up_proj | mlp | "
        "moe | shared_experts",
    ),
]
RecomputeNumLayersOpt = Annotated[
    int,
    typer.Option(
        help="with --recompute full: recompute only the first N layers of each model chunk, the "
        "others keep their activations (Megatron --recompute-method block "
        "--recompute-num-layers N); 0 = every layer",
    ),
]
MicrobatchGroupOpt = Annotated[
    int,
    typer.Option(
        help="interleaved schedule: micro-batches N run per virtual stage in a row (0 = pp; "
        "Megatron-Core --microbatch-group-size-per-virtual-pipeline-stage): pp ≤ N ≤ m with "
        "m mod N 0 or ≥ pp lets m that are not a multiple of pp interleave",
    ),
]
OverlapEpOpt = Annotated[
    bool,
    typer.Option(
        "--overlap-ep/--no-overlap-ep",
        help="MoE: the expert-parallel all-to-alls run behind the adjacent micro-batch's compute "
        "(Megatron-Core --overlap-moe-expert-parallel-comm; needs ep > 1, interleave > 1 when "
        "pp > 1, no full recompute); off: exposed",
    ),
]
AttentionOpt = Annotated[
    str,
    typer.Option(help="flash (fused, no s×s scores in HBM; default) | unfused (2021-22 Megatron)"),
]
CrossEntropyOpt = Annotated[
    str,
    typer.Option(
        help="loss kernels: fused (Megatron-Core cross_entropy_loss_fusion; default) | unfused "
        "(Megatron's vocab_parallel_cross_entropy, 2021-22 and Megatron-LM's default) | "
        "xentropy (one kernel per pass, flash-attn/Apex) | te (Transformer Engine's Triton "
        "loss, Megatron-Core cross_entropy_fusion_impl te)"
    ),
]
PrecisionOpt = Annotated[
    str, typer.Option(help="bf16 | fp8 (linear GEMMs at the GPU's fp8 peak, Transformer Engine)")
]
EpDispatchOpt = Annotated[
    str,
    typer.Option(
        help="MoE token dispatch: alltoall (every token slot to its expert directly; "
        "Megatron-Core's alltoall dispatcher) | deepep (once per HB domain over the rail, then "
        "NVLink; DeepEP, Megatron-Core flex dispatcher)",
    ),
]
Fp8ParamGatherOpt = Annotated[
    bool,
    typer.Option(
        "--fp8-param-gather/--no-fp8-param-gather",
        help="with --precision fp8: GEMM weights kept only in FP8 and gathered in FP8 by ZeRO "
        "(Megatron-Core --fp8-param-gather, NeMo fp8_params, torchao "
        "enable_fsdp_float8_all_gather)",
    ),
]
Fp8DispatchOpt = Annotated[
    bool,
    typer.Option(
        "--fp8-dispatch/--no-fp8-dispatch",
        help="with --precision fp8 and --ep-dispatch deepep: tokens dispatched to the experts "
        "(and the gradient sent back to them) in FP8, the combines in BF16 (DeepSeek-V3)",
    ),
]
SharedExpertOverlapOpt = Annotated[
    bool,
    typer.Option(
        "--shared-expert-overlap/--no-shared-expert-overlap",
        help="MoE with shared experts: their forward runs beside the dispatch and combine "
        "all-to-alls, and keeps its all-gathered input under sequence parallelism (Megatron-Core "
        "--moe-shared-expert-overlap; needs --ep-dispatch alltoall, not with --overlap-ep)",
    ),
]
RouterDtypeOpt = Annotated[
    str,
    typer.Option(
        help="MoE gating GEMM: bf16 (Megatron-Core's default) | fp32 (--moe-router-dtype fp32: "
        "FP32 copies of the router's input and weight kept for backward, the GEMM in TF32; "
        "NeMo's DeepSeek-V3 recipe)"
    ),
]
OptimizerStateOpt = Annotated[
    str,
    typer.Option(
        help="Adam state per parameter: fp32 (12 B: fp32 master + moments; Megatron, DeepSpeed, "
        "FSDP) | fp32-remainder (10 B: Apex/NeMo distributed_fused_adam) | bf16 (4 B: bf16 "
        "moments, no master) | bf16-moments (8 B: fp32 master, bf16 moments; Megatron-Core "
        "precision-aware optimizer, DeepSeek-V3)"
    ),
]
PipelineScheduleOpt = Annotated[
    str,
    typer.Option(
        help="1f1b (Megatron's; interleaved when --interleave > 1) | dualpipev (DeepSeek's "
        "DualPipeV: two chunks per rank in a V, needs --interleave 2 and ≥ 2·pp micro-batches; "
        "with --overlap-ep its merged forward-backward pairs hide the all-to-alls)"
    ),
]
GradReduceBytesOpt = Annotated[
    int, typer.Option(help="bytes per gradient element kept and reduced: 4 (fp32) | 2 (bf16)")
]
GpuMemoryGibOpt = Annotated[
    float | None, typer.Option(help="override the GPU's memory, GiB (1-65536), for what-ifs")
]
PriceBookOpt = Annotated[
    str | None,
    typer.Option(
        help="a YAML price book file or a shipped one: "
        + ", ".join(price_book_names())
        + " (default rail-only-hoti2024; public-web-estimates also has 800 Gbps)"
    ),
]


class OptionGroup:
    """Base of a frozen dataclass of options that several commands take together, in the same
    order: a command names the group once as a parameter, and `with_option_groups` lists the
    group's fields in its place on the command line."""


def with_option_groups(command: Callable[..., R]) -> Callable[..., R]:
    """`command` with each parameter annotated by an `OptionGroup` dataclass replaced, in the
    signature typer reads, by that dataclass's fields (same names, types, help and defaults);
    the command is called with the group built from them."""
    signature = inspect.signature(command, eval_str=True)
    groups: dict[str, type[OptionGroup]] = {}
    params: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        group = param.annotation
        if not (isinstance(group, type) and issubclass(group, OptionGroup)):
            params.append(param)
            continue
        groups[param.name] = group
        hints = get_type_hints(group, include_extras=True)
        params += [
            param.replace(name=f.name, annotation=hints[f.name], default=_default(f))
            for f in dataclasses.fields(group)  # type: ignore[arg-type]
        ]

    @functools.wraps(command)
    def run(**kwargs: Any) -> R:
        for name, group in groups.items():
            names = [f.name for f in dataclasses.fields(group)]  # type: ignore[arg-type]
            kwargs[name] = group(**{n: kwargs.pop(n) for n in names})
        return command(**kwargs)

    run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    return run


def _default(f: dataclasses.Field[Any]) -> Any:
    return inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default


@dataclass(frozen=True)
class HardwareOptions(OptionGroup):
    """The network and the overrides of the catalog system (`estimate`, `search`, `infer`)."""

    network: NetworkOpt = "rail-optimized"
    oversubscription: OversubscriptionOpt = None
    hb_domain: HbDomainOpt = None
    hb_tbps: HbTbpsOpt = None
    nic_gbps: NicGbpsOpt = None
    nics_per_gpu: NicsPerGpuOpt = None
    nvls: NvlsOpt = None
    sharp: SharpOpt = False
    radix: FabricRadixOpt = None

    def system(self, name: str, gpu_memory_gib: float | None = None) -> System:
        """The catalog system `name` with these overrides (`--nvls`/`--no-nvls` turn NVLink
        SHARP on or off; neither, the system's own setting holds)."""
        from railplan.specs.build import build_system

        return build_system(
            name,
            self.hb_domain,
            self.hb_tbps,
            self.nic_gbps,
            self.nics_per_gpu,
            gpu_memory_gib,
            nvls=self.nvls,
        )

    def check_fabric(self, system: System, gpus: int) -> None:
        """With `oversubscribed`, a one-line error where the job's NIC ports fit one switch
        of the radix (`--radix`, 64 as the fabric builders take it): a 1-tier Clos has no
        uplinks to oversubscribe (the rule `network.topology.folded_clos` applies for
        `topology` and `flowsim`; the timing model takes any ratio, not only the ones that
        split the radix into whole ports); `--radix` is refused with any other network (it
        changes nothing)."""
        from railplan.network.topology import DEFAULT_RADIX, check_oversubscribable

        if self.network != "oversubscribed":
            if self.radix is not None:
                raise RailplanError(
                    "radix", "changes nothing here: it applies to --network oversubscribed"
                )
            return
        check_oversubscribable(
            gpus,
            system.nics_per_gpu,
            self.network_spec().oversubscription,
            DEFAULT_RADIX if self.radix is None else self.radix,
        )

    def network_spec(self) -> Network:
        """The network these options name; `ideal` refuses the overrides it has no use for
        (every GPU in one HB domain: no NIC, no rail switches)."""
        from railplan.specs.build import build_network

        if self.network == "ideal":
            # (--hb-domain stays: the search draws its candidates with the system's K on
            # every network, so that the networks compare over one space)
            unused = [
                flag
                for flag, given in (
                    ("--nic-gbps", self.nic_gbps is not None),
                    ("--nics-per-gpu", self.nics_per_gpu is not None),
                    ("--sharp", self.sharp),
                )
                if given
            ]
            if unused:
                raise RailplanError(
                    "network",
                    f"ideal puts every GPU in one HB domain, so {', '.join(unused)} "
                    f"{'changes' if len(unused) == 1 else 'change'} nothing there; drop "
                    f"{'it' if len(unused) == 1 else 'them'} or choose rail-optimized, "
                    "rail-only or oversubscribed",
                )

        return build_network(self.network, self.oversubscription, True if self.sharp else None)


@dataclass(frozen=True)
class TrainingOptions(OptionGroup):
    """The job and the first strategy options of `estimate` and `traffic`."""

    model: ModelOpt
    gpus: GpusOpt
    global_batch: GlobalBatchOpt
    system: SystemOpt = "dgx-a100"
    tp: int = 1
    pp: int = 1
    dp: DpOpt = None
    interleave: InterleaveOpt = 1
    micro_batch: int = 1
    recompute: RecomputeOpt = "none"
    sequence_parallel: SequenceParallelOpt = False
    zero: ZeroOpt = 0
    ep: EpOpt = 1
    zero_shard: ZeroShardOpt = 0
    expert_tp: ExpertTpOpt = 0
    p2p_scatter_gather: P2pScatterGatherOpt = False

    def strategy_fields(self, dp: int) -> dict[str, Any]:
        """These options as `build_strategy` fields, with the data-parallel degree `dp`; an
        option that would change nothing is refused."""
        if self.p2p_scatter_gather and (self.sequence_parallel or self.pp == 1 or self.tp == 1):
            from railplan.errors import RailplanError

            raise RailplanError(
                "p2p_scatter_gather",
                "changes nothing here: it splits pipeline sends over tp > 1 ranks when pp > 1 "
                "and sequence parallelism is off",
            )
        fields = dataclasses.asdict(self) | {"dp": dp}
        for name in ("model", "gpus", "system"):
            del fields[name]
        return fields
