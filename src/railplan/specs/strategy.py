"""Strategy spec: how one training job is parallelized and scheduled."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveInt, field_validator

from railplan.specs.base import Spec

Recompute = Literal["none", "selective", "full"]
RECOMPUTE_CODES: dict[str, int] = {"none": 0, "selective": 1, "full": 2}
ZeroSchedule = Literal["micro_batch", "step"]
ZERO_SCHEDULE_CODES: dict[str, int] = {"micro_batch": 0, "step": 1}
Attention = Literal["flash", "unfused", "flash2", "flash1"]
ATTENTION_CODES: dict[str, int] = {"flash": 0, "unfused": 1, "flash2": 2, "flash1": 3}
Precision = Literal["bf16", "fp8"]
PRECISION_CODES: dict[str, int] = {"bf16": 0, "fp8": 1}
OptimizerState = Literal["fp32", "fp32-remainder", "bf16", "bf16-moments"]
OPTIMIZER_STATE_CODES: dict[str, int] = {
    "fp32": 0,
    "fp32-remainder": 1,
    "bf16": 2,
    "bf16-moments": 3,
}
PipelineSchedule = Literal["1f1b", "dualpipev"]
PIPELINE_SCHEDULE_CODES: dict[str, int] = {"1f1b": 0, "dualpipev": 1}
EpDispatch = Literal["alltoall", "deepep"]
EP_DISPATCH_CODES: dict[str, int] = {"alltoall": 0, "deepep": 1}
RouterDtype = Literal["bf16", "fp32"]
ROUTER_DTYPE_CODES: dict[str, int] = {"bf16": 0, "fp32": 1}
RecomputeModule = Literal[
    "core_attn", "layernorm", "moe_act", "mla_up_proj", "mlp", "moe", "shared_experts"
]
#: Megatron-Core's `--recompute-modules`, as the bits of one integer column of the arrays.
RECOMPUTE_MODULE_BITS: dict[str, int] = {
    "core_attn": 1,
    "layernorm": 2,
    "moe_act": 4,
    "mla_up_proj": 8,
    "mlp": 16,
    "moe": 32,
    "shared_experts": 64,
}
CrossEntropy = Literal["fused", "unfused", "xentropy", "te"]
CROSS_ENTROPY_CODES: dict[str, int] = {"fused": 0, "unfused": 1, "xentropy": 2, "te": 3}
#: The strategy's named choices, field → name → code (numpy arrays hold the codes).
CODED_FIELDS: dict[str, dict[str, int]] = {
    "recompute": RECOMPUTE_CODES,
    "zero_schedule": ZERO_SCHEDULE_CODES,
    "attention": ATTENTION_CODES,
    "precision": PRECISION_CODES,
    "optimizer_state": OPTIMIZER_STATE_CODES,
    "cross_entropy": CROSS_ENTROPY_CODES,
    "pipeline_schedule": PIPELINE_SCHEDULE_CODES,
    "ep_dispatch": EP_DISPATCH_CODES,
    "router_dtype": ROUTER_DTYPE_CODES,
}


class Strategy(Spec):
    """tp·cp·pp·dp GPUs; `interleave` virtual stages per pipeline stage (1 = plain 1F1B).

    `overlap_dp` overlaps the data-parallel gradient reduction with the backward pass (modern
    Megatron/FSDP); Megatron-LM of 2021-22 reduced after the backward pass (False).
    `overlap_tp` hides the backward tensor-parallel collectives behind the weight- and
    input-gradient GEMMs (Megatron's asynchronous TP all-reduce, late 2021 on).
    `tp_comm_overlap`: with sequence parallelism, the forward all-gathers and reduce-scatters
    are split into chunks pipelined with the GEMM they feed or consume (Transformer Engine's
    userbuffers: Megatron-Core `--tp-comm-overlap`, NeMo `ub_tp_comm_overlap`, 2023 on); off,
    they are exposed (no effect without sequence parallelism: TE requires it).
    `overlap_p2p` runs pipeline sends behind compute (Megatron `--overlap-p2p-communication`,
    2023); before that sends were blocking.
    `p2p_scatter_gather`: without sequence parallelism each tp rank sends a 1/tp slice of the
    stage's activation and the next stage all-gathers it over the HB domain (Megatron-LM of
    2021-22, `scatter_gather_tensors_in_pipeline`; Narayanan et al. 2021 §4.1; that all-gather
    is not counted, in time or traffic: 0.1-1.3 % of the Narayanan rows' iterations); off, as
    in Megatron-Core, every tp rank sends the whole [s/cp, b, h]. With sequence parallelism the
    activation is already split over tp either way.
    `grad_accumulation_fusion`: the weight-gradient GEMMs accumulate straight into the
    main-grad buffer (Megatron `--gradient-accumulation-fusion`, on by default since 2022);
    without it (Megatron-LM of 2021, many other stacks) every micro-batch's backward pass ends
    with a separate read-modify-write of the whole gradient buffer (`main_grad.add_(grad)`).
    `grad_reduce_bytes` is the width of a reduced gradient element (4: fp32, Megatron's default
    for bf16; 2: bf16/fp16 reduction). `ep` experts-parallel ranks are taken from the dp·cp
    ranks (DeepSpeed-MoE; Megatron-Core's expert grid, which folds them over cp and dp):
    experts are sharded over ep, and expert weights are data-parallel over dp·cp/ep.
    `cp` context-parallel ranks split every sequence (Megatron-Core ring attention); the GPUs
    are tp·cp·pp·dp and gradients are reduced over the dp·cp ranks.
    `first_stage_layers` / `last_stage_layers` (0 = spread evenly) fix the layers of the first
    and last pipeline stage (Megatron `--decoder-first/last-pipeline-num-layers`); with
    DualPipeV, whose rank 0 runs both ends, `first_stage_layers` fixes rank 0's layers (both of
    its chunks) and `last_stage_layers` is refused.
    `zero_schedule` says when ZeRO-2/3 communicate: `micro_batch` (FSDP and DeepSpeed's default:
    weights gathered before, gradients reduce-scattered after every micro-batch's pass) or
    `step` (once per step, weights and gradients kept whole across the micro-batches).
    `overlap_backward_gather`: ZeRO-3 gathers a unit's weights for its backward pass while the
    unit before it computes gradients (PyTorch FSDP `BackwardPrefetch.BACKWARD_PRE`, DeepSpeed's
    prefetch); off, FSDP's `BACKWARD_POST`: the gather starts after the previous unit's gradient
    computation, so it is exposed, and only the reduce-scatter overlaps compute.
    `attention`: `flash` is a fused attention kernel (FlashAttention-2/3, cuDNN/TE fused
    attention: no s×s score matrix in HBM, causal blocks skipped); `unfused` is the 2021-22
    Megatron path (score matrix written, softmax and dropout as separate kernels, kept for
    backward); `flash2` is a fused kernel of FlashAttention-2's generation (FA2, the 2023
    stacks), which on Hopper runs well below today's kernels; `flash1` is one of the first
    generation (FlashAttention-1, or the 2022 Triton kernel `flash_attn_triton` that MPT's
    `attn_impl: triton` ran), slower again on A100. `precision`:
    `fp8` runs the linear-layer GEMMs in FP8 (Transformer Engine), `bf16` everything in BF16.
    `cross_entropy`: the loss kernels over the vocabulary (`workload/elementwise.py`): `unfused`
    is Megatron's `vocab_parallel_cross_entropy` (fp32 copy of the logits, then max, subtract,
    exp, sum, divide and the backward's multiply and cast as separate kernels; Megatron-LM's
    default, 2021-22 and Megatron-Core without `--cross-entropy-loss-fusion`); `fused` is
    Megatron-Core's `cross_entropy_loss_fusion` (the same steps in four fused kernels);
    `xentropy` is one kernel per pass on the bf16 logits (flash-attn's / Apex's xentropy, which
    llm-foundry's MPT runs as `fused_crossentropy`); `te` is Transformer Engine's Triton loss
    (Megatron-Core `cross_entropy_fusion_impl="te"`, which NeMo's 2025 performance scripts set):
    an online-softmax pass, a pass that writes the gradient into the bf16 logits, and the
    backward's scaling in place.
    `optimizer_state` is what the (sharded) Adam optimizer keeps per parameter: `fp32` an FP32
    master weight and FP32 moments (12 bytes: Megatron's distributed optimizer, DeepSpeed,
    FSDP mixed precision); `fp32-remainder` FP32 moments and only the 16 low bits of the FP32
    master beside the BF16 weight (10 bytes: Apex DistributedFusedAdam with
    `store_param_remainders`, NeMo's choice for a BF16 model with an FP32 optimizer);
    `bf16` BF16 moments and no master copy (4 bytes: NeMo's `distributed_fused_adam` with
    `optim.dtype: bf16`); `bf16-moments` an FP32 master and BF16 moments (8 bytes:
    Megatron-Core's `--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype
    bf16`; DeepSeek-V3's AdamW, report §3.3.3).
    `defer_embedding_wgrad`: the last pipeline stage postpones the output layer's (LM head's)
    weight-gradient GEMM of its first `wgrad_deferral_limit` micro-batches (0 = all of them) to
    the pipeline flush, where it fills the stage's cooldown idle (Megatron-Core
    `defer_embedding_wgrad_compute` / `wgrad_deferral_limit`, default off; NeMo sets it in its
    pipelined Llama 3.1 and Nemotron-4 340B configs). No effect with pp = 1 or without
    gradient-accumulation fusion, the cases Megatron-Core refuses.
    `overlap_ep`: the MoE layers' expert-parallel all-to-alls (token dispatch and combine, and
    their gradients) of one micro-batch run while the GPU computes the adjacent micro-batch,
    whose forward is merged layer by layer with the other's backward (Megatron-Core
    `--overlap-moe-expert-parallel-comm`, "EP A2A overlap"; DeepSeek-V3's DualPipe pairs the
    chunks the same way). Off (Megatron-Core's default), every all-to-all is exposed. It needs
    ep > 1, interleaving when pp > 1 and no full recompute, as Megatron-Core asserts.
    `recompute_modules`: what selective recompute reruns in the backward pass (Megatron-Core
    `--recompute-granularity selective --recompute-modules`, default `core_attn`): `core_attn`
    the attention core; `layernorm` the two norms (their outputs, the next GEMMs' BF16 inputs,
    are dropped); `moe_act` the experts' activation function (its BF16 output dropped);
    `mla_up_proj` MLA's up-projections and RoPE (Q, K, V dropped); `mlp` the dense MLP,
    `moe` the whole MoE block (its two all-to-alls again), `shared_experts` the shared experts,
    each keeping only its input. Only with `recompute` selective.
    `microbatch_group` (N, 0 = pp): the interleaved schedule runs each virtual stage on N
    micro-batches in a row before the next (Megatron-Core
    `--microbatch-group-size-per-virtual-pipeline-stage`, default pp; the tunable N of the
    Llama 3 paper §3.3.2). pp ≤ N ≤ m, and the last group, m mod N, is 0 or at least pp: with a
    larger N, micro-batch counts that are not a multiple of pp can interleave, at the cost of
    (v − 1)·(N − pp) more warm-up forwards held in memory.
    `zero_shard` (N, 0 = every rank): ZeRO shards its states over groups of N consecutive ranks
    of the dp·cp data-parallel group and keeps dp·cp/N replicas of them (hybrid sharding:
    PyTorch FSDP `HYBRID_SHARD`, the FSDP paper's sharding factor F, Zhao et al. 2023 §3.2.2;
    torchtitan `data_parallel_shard_degree`; Megatron-Core `--num-distributed-optimizer-instances`
    dp·cp/N). Weights are gathered within the shard group; gradients are reduce-scattered
    within it and each shard is then all-reduced across the replicas. Expert states shard over
    the dp·cp/ep expert-data-parallel ranks ÷ the same number of replicas. Needs ZeRO ≥ 1.
    `ep_dispatch`: how MoE tokens reach their experts. `alltoall` (default; Megatron-Core
    `--moe-token-dispatcher-type alltoall`): every token slot is sent to its expert's rank
    directly, NVLink inside an HB domain, the NIC across. `deepep` (DeepEP's internode kernels;
    Megatron-Core `--moe-token-dispatcher-type flex --moe-enable-deepep`; DeepSeek-V3 report
    §3.2.2): a token crosses to each HB domain holding one of its experts once, over its own
    rail to the GPU of the same local rank, and is forwarded over NVLink to its experts there,
    the two overlapped; the combine mirrors it.
    `expert_tp` (Megatron-Core `--expert-tensor-parallel-size`, default tp; 0 here means tp):
    the routed experts' weights are split over expert_tp ranks instead of tp. The stage's
    tp·cp·dp ranks form the expert grid expert_tp × ep × expert-data-parallel, expert_tp
    fastest (`RankGenerator(tp=expert_tp, ep=ep, dp=…, cp=1)` in `parallel_state.py`): ep ranks
    are expert_tp apart and expert weights are data-parallel over tp·cp·dp/(expert_tp·ep)
    ranks. After the all-to-all, the alltoall dispatcher all-gathers the routed token slots
    over the expert_tp ranks and reduce-scatters the experts' output (`token_dispatcher.py`
    `dispatch_postprocess` / `combine_preprocess`), so expert_tp = 1 removes those collectives
    and runs each expert at full width; attention, dense MLPs and shared experts keep tp.
    `fp8_param_gather` (with `precision` fp8): the GEMM weights are kept only in FP8 (the FP8
    weight and the transpose Transformer Engine caches, no BF16 copy) and the data-parallel
    weight gathers move them in FP8, 1 B per parameter (Megatron-Core `--fp8-param-gather`,
    NeMo `fp8_params`; torchtitan/torchao `enable_fsdp_float8_all_gather`).
    `fp8_dispatch` (with `precision` fp8 and `ep_dispatch` deepep): the all-to-alls that carry
    tokens to the experts (the forward dispatch, its recompute, and the backward combine's
    gradient for the down-projection) move FP8 with one fp32 scale per 128 values, the other
    half (the combine and the dispatch's gradient) BF16: DeepSeek-V3's training setting
    (report §3.3.2; DeepEP's normal kernels are benchmarked in it). Megatron-Core's
    `moe_dispatch_fwd_dtype` / `moe_combine_bwd_dtype` `mxfp8` moves the same bytes (one
    8-bit scale per 32) with its `ncclep` dispatcher, also in BF16 training; railplan models
    the DeepSeek setting only (FP8 GEMMs, DeepEP's dispatch).
    `router_dtype` (MoE models): `bf16` routes in the activations' precision (Megatron-Core's
    default, `moe_router_dtype` None); `fp32` casts the router's input and weight to FP32 for
    the gating GEMM (`--moe-router-dtype fp32`, `router.py` `gating`; NeMo's DeepSeek-V3
    performance recipe sets it), which then runs in TF32 and keeps both FP32 copies for its
    backward pass.
    `shared_expert_overlap` (MoE models with shared experts, `ep_dispatch` alltoall): the
    shared experts' forward runs on a side stream while the dispatch and combine all-to-alls
    are in flight, their first GEMM and activation beside the dispatch, their second beside the
    combine (Megatron-Core `--moe-shared-expert-overlap`, `token_dispatcher.py`
    `MoEAlltoAllTokenDispatcher`, core_v0.12.1; NeMo's DeepSeek-V3 config sets it); with
    sequence parallelism their first GEMM then keeps its all-gathered input (the whole
    sequence) for the backward pass. Off (Megatron-Core's default), the shared experts run after
    the routed ones. Megatron-Core refuses it with `overlap_ep` and with the `shared_experts`
    recompute module.
    `recompute_num_layers` (N, 0 = every layer): with `recompute` full, only the first N layers
    of each model chunk (virtual stage) are recomputed and the others keep all their
    activations (Megatron `--recompute-granularity full --recompute-method block
    --recompute-num-layers N`; NeMo `activations_checkpoint_method: block`).
    `pipeline_schedule`: `1f1b` is Megatron's 1F1B, interleaved when `interleave` > 1;
    `dualpipev` is DualPipeV (deepseek-ai/DualPipe `dualpipev.py`, Sea AI Lab's "cut-in-half"
    DualPipe; PyTorch `ScheduleDualPipeV`): two chunks per rank in a V (rank r holds stages r
    and 2·pp − 1 − r, so rank 0 runs both the embedding and the LM head), each chunk's
    backward split into input and weight gradients, a micro-batch's forward merged with
    another's backward. It needs `interleave` 2, pp > 1 and m ≥ 2·pp micro-batches; with
    `overlap_ep` the merged pairs hide the MoE all-to-alls (DeepSeek-V3's DualPipe).
    """

    tp: PositiveInt = 1
    pp: PositiveInt = 1
    dp: PositiveInt = 1
    interleave: PositiveInt = 1
    micro_batch: PositiveInt = 1
    global_batch: PositiveInt
    recompute: Recompute = "none"
    sequence_parallel: bool = False
    zero: Literal[0, 1, 2, 3] = 0
    overlap_dp: bool = True
    grad_reduce_bytes: Literal[2, 4] = 4
    overlap_tp: bool = Field(
        default=True,
        description="backward TP collectives hidden behind weight/input-gradient GEMMs",
    )
    tp_comm_overlap: bool = Field(
        default=True,
        description="forward TP all-gather/reduce-scatter pipelined with their GEMMs (TE "
        "userbuffers; needs sequence parallelism)",
    )
    overlap_p2p: bool = Field(
        default=True,
        description="pipeline sends overlap the next micro-batch's compute",
    )
    p2p_scatter_gather: bool = Field(
        default=False,
        description="without sequence parallelism, pipeline sends carry 1/tp of the activation "
        "each (Megatron-LM 2021-22); off: the whole of it (Megatron-Core)",
    )
    ep: PositiveInt = Field(
        default=1, description="expert-parallel degree (MoE), taken from the dp·cp ranks"
    )
    grad_accumulation_fusion: bool = Field(
        default=True,
        description="weight-gradient GEMMs accumulate into the main-grad buffer (no extra pass)",
    )
    cp: PositiveInt = Field(default=1, description="context-parallel degree (ring attention)")
    first_stage_layers: int = Field(default=0, ge=0, description="0 = spread layers evenly")
    last_stage_layers: int = Field(default=0, ge=0, description="0 = spread layers evenly")
    zero_schedule: ZeroSchedule = "micro_batch"
    overlap_backward_gather: bool = Field(
        default=True,
        description="ZeRO-3: the backward weight gather overlaps the previous unit's gradient "
        "compute (FSDP BACKWARD_PRE); off: BACKWARD_POST, the gather is exposed",
    )
    attention: Attention = Field(
        default="flash", description="fused (flash) or unfused attention kernels"
    )
    precision: Precision = Field(default="bf16", description="GEMM precision of the linear layers")
    cross_entropy: CrossEntropy = Field(
        default="fused",
        description="loss kernels: fused | unfused (Megatron's) | xentropy | te (TE's Triton loss)",
    )
    optimizer_state: OptimizerState = Field(
        default="fp32",
        description="Adam state per parameter: fp32 | fp32-remainder | bf16 | bf16-moments",
    )
    defer_embedding_wgrad: bool = Field(
        default=False,
        description="the LM head's weight-gradient GEMMs run in the pipeline flush "
        "(Megatron-Core defer_embedding_wgrad_compute)",
    )
    wgrad_deferral_limit: int = Field(
        default=0, ge=0, description="micro-batches whose LM-head wgrad is deferred (0 = all)"
    )
    microbatch_group: int = Field(
        default=0, ge=0, description="interleaved micro-batch group N (0 = pp)"
    )
    recompute_modules: tuple[RecomputeModule, ...] = Field(
        default=("core_attn",),
        min_length=1,
        description="what selective recompute reruns (Megatron-Core --recompute-modules)",
    )
    overlap_ep: bool = Field(
        default=False,
        description="MoE all-to-alls hidden behind the adjacent micro-batch's compute "
        "(Megatron-Core --overlap-moe-expert-parallel-comm)",
    )
    pipeline_schedule: PipelineSchedule = Field(
        default="1f1b", description="1f1b (interleaved when interleave > 1) | dualpipev"
    )
    recompute_num_layers: int = Field(
        default=0,
        ge=0,
        description="with recompute full: recompute only the first N layers of each model "
        "chunk (Megatron --recompute-method block --recompute-num-layers N); 0 = every layer",
    )
    zero_shard: int = Field(
        default=0,
        ge=0,
        description="ZeRO shards over groups of N of the dp·cp ranks, replicated across the "
        "dp·cp/N groups (HSDP: FSDP HYBRID_SHARD; Megatron-Core "
        "--num-distributed-optimizer-instances dp·cp/N); 0 = over every rank",
    )
    ep_dispatch: EpDispatch = Field(
        default="alltoall",
        description="MoE token dispatch: alltoall (every slot directly) | deepep (once per "
        "HB domain over the rail, then NVLink)",
    )
    expert_tp: int = Field(
        default=0,
        ge=0,
        description="expert tensor-parallel degree of the routed experts (Megatron-Core "
        "--expert-tensor-parallel-size); 0 = tp",
    )
    fp8_param_gather: bool = Field(
        default=False,
        description="with precision fp8: GEMM weights kept and gathered in FP8 (Megatron-Core "
        "--fp8-param-gather, NeMo fp8_params)",
    )
    fp8_dispatch: bool = Field(
        default=False,
        description="with precision fp8 and ep_dispatch deepep: the MoE dispatch and the "
        "gradient sent back to the experts in FP8, the combines in BF16 (DeepSeek-V3 §3.3.2)",
    )
    shared_expert_overlap: bool = Field(
        default=False,
        description="MoE with shared experts: their forward runs beside the dispatch and combine "
        "all-to-alls (Megatron-Core --moe-shared-expert-overlap)",
    )
    router_dtype: RouterDtype = Field(
        default="bf16",
        description="MoE gating GEMM: bf16 | fp32 (Megatron-Core --moe-router-dtype fp32: FP32 "
        "copies of the router's input and weight, the GEMM in TF32)",
    )

    @field_validator("zero", mode="before")
    @classmethod
    def _zero_from_text(cls, v: Any) -> Any:
        """A stage written as text in a file ("1") is the number."""
        if isinstance(v, str) and v.strip().isdigit():
            return int(v)
        return v

    @field_validator("recompute_modules")
    @classmethod
    def _canonical_modules(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        """Each module once, in Megatron-Core's documented order."""
        return tuple(m for m in RECOMPUTE_MODULE_BITS if m in v)

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    def label(self) -> str:
        """The strategy as one line, the one form every table, report and sweep prints:
        degrees, micro-batch and recompute, then what differs from the plain case
        (`tp=8 pp=16 dp=128 mb=1 rc=none v=8 SP ZeRO-1`; DualPipeV names its schedule instead
        of its two chunks)."""
        dims = "".join(f" {k}={getattr(self, k)}" for k in ("cp", "ep") if getattr(self, k) > 1)
        if self.expert_tp not in (0, self.tp):
            dims += f" etp={self.expert_tp}"
        extra = [
            "DualPipeV" if self.pipeline_schedule == "dualpipev" else "",
            f"v={self.interleave}"
            if self.interleave > 1 and self.pipeline_schedule == "1f1b"
            else "",
            f"mb-group={self.microbatch_group}" if self.microbatch_group else "",
            f"first={self.first_stage_layers}" if self.first_stage_layers else "",
            f"last={self.last_stage_layers}" if self.last_stage_layers else "",
            "SP" if self.sequence_parallel else "",
            f"ZeRO-{self.zero}" if self.zero else "",
            f"shard={self.zero_shard}" if self.zero and self.zero_shard else "",
            self.precision.upper() if self.precision != "bf16" else "",
            "FP8-params" if self.fp8_param_gather and self.precision == "fp8" else "",
            "FP8-dispatch" if self.fp8_dispatch and self.ep > 1 else "",
            "DeepEP" if self.ep_dispatch == "deepep" and self.ep > 1 else "",
            "FP32-router" if self.router_dtype == "fp32" else "",
            "shared-overlap" if self.shared_expert_overlap else "",
        ]
        head = f"tp={self.tp} pp={self.pp} dp={self.dp}{dims} mb={self.micro_batch}"
        rc: str = self.recompute
        if rc == "selective" and self.recompute_modules != ("core_attn",):
            rc += "[" + "+".join(self.recompute_modules) + "]"
        if rc == "full" and self.recompute_num_layers:
            rc += f"[{self.recompute_num_layers} per chunk]"
        return " ".join([f"{head} rc={rc}", *(e for e in extra if e)])

    def estimate_flags(self) -> list[str]:
        """The `railplan estimate` options that give this strategy: its degrees, micro-batch
        and batch, then every field that differs from its default (a field's option is its name
        with dashes, `--name`/`--no-name` for a switch; recompute modules comma-separated,
        given only with selective recompute, where they take effect)."""
        always = ("tp", "pp", "dp", "cp", "ep", "interleave", "micro_batch", "global_batch")
        default = Strategy(global_batch=self.global_batch)
        flags: list[str] = []
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name not in always and value == getattr(default, name):
                continue
            if name == "recompute_modules" and self.recompute != "selective":
                continue
            option = name.replace("_", "-")
            if isinstance(value, bool):
                flags.append(f"--{option}" if value else f"--no-{option}")
            elif isinstance(value, tuple):
                flags += [f"--{option}", ",".join(value)]
            else:
                flags += [f"--{option}", option_text(value)]
        return flags

    @property
    def micro_batches(self) -> int:
        """Micro-batches per pipeline per iteration."""
        return self.global_batch // (self.dp * self.micro_batch)


def option_text(value: object) -> str:
    """A value as a command-line option takes it back unchanged: a whole number as an integer
    (`--hb-domain 1048576`, not 1.04858e+06), any other number in full (`repr`), text as is."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def strategy_label(data: dict[str, Any] | None, none: str = "no strategy fits") -> str:
    """`Strategy.label` of a strategy as JSON holds it (`none` when there is none)."""
    return none if data is None else Strategy.model_validate(data).label()
