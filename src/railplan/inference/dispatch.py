"""Serving with the requests dispatched to the least busy replica, all replicas simulated.

`serving.simulate` runs one replica on its share of a Poisson stream split at random. NVIDIA's
MLPerf v4.1 LLM harness does not split at random: in the Server scenario, with one IssueQuery
thread (`server_num_issue_query_threads` 0, which configs/llama2-70b/Server leaves unset), each
query goes to the inference group with the fewest transactions in flight, issued and not yet
completed (`--traffic_distribution_policy` default 2, load balancing, in
code/harness/harness_llm/main_llm.cc; `LLMServerLoadGen::getLeastBusyIdx` in llm_server.cc takes
the first of the least busy; the count drops when the group's final response reaches loadgen).

Every replica runs the engine's step loop of `serving`'s docstring on the requests dispatched to
it; the loop lives here (`admit`, the step load and token accounting, the `Run` it returns), and
with one replica it is `serving.simulate`'s single engine (simulate calls `least_busy` for any
count). The replicas advance in time order: the one whose clock is earliest first
dispatches every arrival up to its clock, each to the replica with the fewest requests in
flight at that arrival (dispatched minus finished by then: every other replica's clock is
later, so its finishes up to then are known), then takes its next step. A replica with
nothing to do waits for the next arrival.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right, insort
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from railplan.inference.engine import StepLoad
from railplan.specs.arrays import FloatArray, IntArray

StepFn = Callable[[StepLoad], float]
#: a step load to the time from the step's start until each of its prompts' first tokens, in
#: admission order (`serving.first_token_fn`)
FirstFn = Callable[[StepLoad], FloatArray]
#: output tokens still to come below which a sequence is done (speculative decoding's mean gains
#: are fractional, and their running sum rounds)
LEFT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding as the step loop sees it: each running sequence puts `verified`
    tokens through a step (its token and its drafts, counted against the step's token budget)
    and gains `gain` output tokens on average (`Deployment.tokens_per_step`; the mean, not a
    draw per sequence). The default is plain decoding."""

    verified: int = 1
    gain: float = 1.0


@dataclass(frozen=True)
class _Pending:
    """A step a replica has admitted and loaded, not yet run: `run(took)` runs it for `took`
    seconds (its own step time, or with lockstep ep ranks the instance's)."""

    load: StepLoad
    #: run(took, stretch): the step lasts `took`; its prompts' first tokens come `stretch` times
    #: as long after its start as the replica's own step would give them (the slowest rank sets
    #: a lockstep instance's pace, every layer of the others waiting for it)
    run: Callable[[float, float], None]


@dataclass(frozen=True)
class Run:
    """One simulation: per-request TTFT and TPOT (s), output tokens/s between the middle and
    the last arrival, the requests still waiting when the arrivals stopped, and whether the
    middle arrival came after the typical lifetime of the first half's requests (`settled`:
    the batch had filled up before the throughput window opened)."""

    ttft_s: FloatArray
    tpot_s: FloatArray
    tokens_per_s: float
    offered_tokens_per_s: float
    waiting_at_end: int
    prompts_per_step: int
    settled: bool
    # mean requests in flight (arrived, not finished) and waiting (arrived, no first token yet)
    # over the second quarter of the arrivals (`early`) and the last quarter (`late`)
    in_flight_early: float = 0.0
    in_flight_late: float = 0.0
    waiting_early: float = 0.0
    waiting_late: float = 0.0
    # whether every replica's batch had stopped growing (full, or turning over: `_full_from`)
    # at least FULL_TURNOVERS sequence lifetimes before the throughput window closed, and the
    # output tokens/s from then on (`tokens_per_s` where not): what an overloaded engine
    # serves at its full batch
    filled: bool = True
    full_tokens_per_s: float = 0.0
    # per request, the prompt tokens of the step that admitted it (None: not recorded)
    step_tokens: FloatArray | None = None
    # inter-token latency: the gaps between a sequence's successive tokens, one per step after
    # its first token (each step's time, once per sequence it gave a further token; with
    # speculative decoding a step yields `Speculation.gain` tokens on average; `_itl`)
    itl_mean_s: float = 0.0
    itl_p99_s: float = 0.0

    @property
    def rising(self) -> bool:
        """Whether the requests in flight grew from the second to the last quarter of the
        arrivals (their mean over each, by more than 20 % or 3): the engine had not settled at
        its load (a batch still filling, or a load near capacity)."""
        early = self.in_flight_early
        return bool(self.in_flight_late - early > max(0.2 * early, 3.0))

    @property
    def queue_grew(self) -> bool:
        """More requests still waited when the arrivals stopped than two steps' worth of
        prompts, 5 % of the requests and four times the early mean wait plus 10 (one sample of a
        queue that fluctuates), or the mean number waiting for a first token grew from the
        second to the last quarter of the arrivals by more than the largest of: two steps' worth
        of prompts, 50 %, three times the square root of the early mean (its noise), and 3."""
        early = self.waiting_early
        limit = max(2 * self.prompts_per_step, self.ttft_s.size // 20, 4.0 * early + 10.0)
        growth = self.waiting_late - early
        noise = max(2.0 * self.prompts_per_step, 0.5 * early, 3.0 * max(early, 0.0) ** 0.5, 3.0)
        return bool(self.waiting_at_end > limit or growth > noise)

    @property
    def stable(self) -> bool | None:
        """False when the queue grew (`queue_grew`) and every replica's batch had been full for
        two lifetimes (`filled`); None when the run was too short to tell (a queue that grew
        before that, so what the engine serves at its full batch is unknown; not `settled`, the
        requests in flight still `rising`, or under 90 % of the offered tokens/s came out
        between the middle and the last arrival); else True: what is in flight stayed level
        and nothing queued up, so the engine served what arrived."""
        if self.queue_grew:
            return False if self.filled else None
        if not self.settled or self.rising:
            return None
        # a short run can look level while the engine falls behind: what came out between the
        # middle and the last arrival must be most of what arrived
        if self.tokens_per_s < 0.9 * self.offered_tokens_per_s:
            return None
        return True


def _exits(first_s: FirstFn, load: StepLoad, prompts: int) -> FloatArray:
    """`first_s` of a step's load for its `prompts` prompts, in admission order (one value:
    the same for every prompt)."""
    exits = np.atleast_1d(np.asarray(first_s(load), dtype=np.float64))
    return exits[:prompts] if exits.size > 1 else np.full(prompts, float(exits[0]))


def admit(
    csum: FloatArray,
    arrived: int,
    nxt: int,
    running: int,
    max_batch: int,
    max_num_tokens: int,
    running_tokens: int | None = None,
) -> int:
    """One past the last request a step admits, first come first served: whole prompts in what
    the `running` sequences' decode tokens (`running_tokens`, default one each) leave of the
    budget, while the batch has room; an empty engine takes one prompt however long
    (`csum[k]`: prompt tokens of the first k)."""
    decode_tokens = running if running_tokens is None else running_tokens
    last = min(arrived, nxt + max_batch - running)
    fit = int(np.searchsorted(csum, csum[nxt] + max_num_tokens - decode_tokens, side="right")) - 1
    end = max(nxt, min(last, fit))
    if end == nxt and running == 0 and arrived > nxt:
        end = nxt + 1
    return end


def _tokens_per_s(ends: FloatArray, tokens: FloatArray, lo: float, hi: float) -> float:
    """Tokens of the steps that ended in (lo, hi] over that time; all steps' if hi ≤ lo."""
    if hi > lo:
        inside = (ends > lo) & (ends <= hi)
        return float(tokens[inside].sum() / (hi - lo))
    return float(tokens.sum() / ends[-1])


class _Replica:
    """One replica's queue (the requests dispatched to it, in order) and running batch."""

    def __init__(
        self, capacity: int, prefilled: bool = False, verified: int = 1, chunked: bool = False
    ) -> None:
        self.ids = np.zeros(capacity, dtype=np.int64)  # global request ids dispatched here
        # tokens each dispatched request puts through the step that admits it, summed over the
        # first k: its prompt, or (`prefilled`: a disaggregated decode instance's requests,
        # whose KV cache arrives from a prefill instance) its `verified` decode tokens
        self.csum = np.zeros(capacity + 1)
        self.prefilled, self.verified = prefilled, verified
        self.chunked = chunked  # chunked prefill (`_chunked_step`)
        # chunked prefill: the prompts in progress, first come first served, each as [request,
        # prompt tokens run, when its last chunk has crossed every stage]
        self.partials: list[list[float]] = []
        self.n = 0  # dispatched
        self.nxt = 0  # admitted
        self.t = 0.0  # end of the last step
        self.run_id = np.zeros(0, dtype=np.int64)
        self.run_left = np.zeros(0, dtype=np.float64)  # output tokens still to come
        self.run_ctx = np.zeros(0, dtype=np.float64)
        self.ends: list[float] = []  # step ends
        # finish times of the requests finished here, sorted: a request finishes when its last
        # token comes out, a pipelined prompt's lag (`_Requests.lag`) after its last step's end
        self.done: list[float] = []
        self.tokens: list[float] = []  # tokens each step produced
        self.sizes: list[int] = []  # sequences each step ran (running and newly admitted)
        # each step's time and the sequences it gave a token after an earlier one (the gaps
        # of `Run.itl_mean_s`)
        self.gap_s: list[float] = []
        self.gap_seqs: list[int] = []
        # sequences whose first token came out before their step's end, by how much (`_gaps`)
        self.early: dict[int, float] = {}

    def take(self, gid: int, prompt: int) -> None:
        if self.n == self.ids.size:  # grow by doubling: a replica's share is not known ahead
            self.ids = np.concatenate([self.ids, np.zeros_like(self.ids)])
            self.csum = np.concatenate([self.csum, np.zeros(self.n)])
        self.ids[self.n] = gid
        self.csum[self.n + 1] = self.csum[self.n] + (self.verified if self.prefilled else prompt)
        self.n += 1

    def in_flight(self, at: float) -> int:
        """Requests dispatched here and not finished at `at` (`done`)."""
        return self.n - bisect_right(self.done, at)

    def idle(self) -> bool:
        return self.run_id.size == 0 and self.nxt == self.n and not self.partials

    def step(
        self,
        step_s: StepFn,
        batch: int,
        budget: int,
        reqs: _Requests,
        spec: Speculation,
        first_s: FirstFn | None = None,
        next_arrival: float = math.inf,
    ) -> None:
        """One engine step at `self.t`, as serving.simulate takes it; `first_s`: the time from
        a step's start until its prompts' first tokens (default: the step's end);
        `next_arrival`: the stream's next arrival not yet dispatched (chunked prefill waits at
        most until then when only chunks in flight are left)."""
        pending = self.prepare(batch, budget, reqs, spec, first_s, next_arrival)
        if isinstance(pending, _Pending):
            pending.run(step_s(pending.load), 1.0)
        else:
            self.t = max(self.t, pending)

    def prepare(
        self,
        batch: int,
        budget: int,
        reqs: _Requests,
        spec: Speculation,
        first_s: FirstFn | None = None,
        next_arrival: float = math.inf,
    ) -> _Pending | float:
        """The step at `self.t`: what it admits (done here) and the load it carries, to be run
        for as long as the step takes (`_Pending.run`: with lockstep ep ranks, the slowest
        rank's time); or, when nothing can run (chunked prefill with only chunks in flight, or
        an idle replica), the time to wait until (`self.t` when idle)."""
        if self.chunked:
            return self._chunked_step(batch, budget, reqs, spec, first_s, next_arrival)
        if self.idle():
            return self.t
        csum = self.csum[: self.n + 1]
        running = self.run_id.size
        if self.nxt == self.n:  # nothing waits: the running sequences alone
            end = self.nxt
        else:
            end = admit(csum, self.n, self.nxt, running, batch, budget, running * spec.verified)
        new = self.ids[self.nxt : end]
        if self.prefilled:
            return self._decode_step(end, new, reqs, spec)
        if new.size:
            prompts = reqs.prompt[new].astype(np.float64)
            load = StepLoad(
                decode=float(running),
                context_tokens=float(self.run_ctx.sum()),
                prefill_tokens=float(csum[end] - csum[self.nxt]),
                prefill_seqs=float(new.size),
                prefill_square_tokens=float(np.dot(prompts, prompts)),
            )
        else:
            load = StepLoad(decode=float(running), context_tokens=float(self.run_ctx.sum()))
        self.nxt = end
        return _Pending(
            load,
            lambda took, stretch: self._advance(
                took, load, new, new.size, reqs, spec, first_s, stretch=stretch
            ),
        )

    def _chunked_step(
        self,
        batch: int,
        budget: int,
        reqs: _Requests,
        spec: Speculation,
        first_s: FirstFn | None,
        next_arrival: float = math.inf,
    ) -> _Pending | float:
        """One step with chunked prefill (vLLM's scheduler, TensorRT-LLM's chunked context):
        the running sequences' decode tokens first, then what the budget leaves goes to prompt
        tokens, first come first served: the prompts in progress, then new ones while the
        batch has room, the last of them cut where the budget ends (it goes on in the next
        steps). A prompt's first token comes at the end of the step that runs its last chunk.
        With pipelining a prompt's next chunk waits until its last one has crossed every stage
        (vLLM schedules a request in one micro-batch at a time), while other prompts' chunks
        fill the steps in between; without it every prompt in progress is ready each step, so
        at most one is ever cut."""
        running = self.run_id.size
        room = budget - running * spec.verified
        chunks: list[tuple[int, float]] = []  # (tokens, tokens already cached) of each chunk
        completed: list[int] = []
        cut: list[list[float]] = []  # the prompts in progress that ran a chunk here
        own: dict[int, tuple[int, float]] = {}  # each request's chunk in this step
        for entry in list(self.partials):
            gid, done, ready = int(entry[0]), int(entry[1]), entry[2]
            if room <= 0 or self.t < ready:
                continue
            rest = int(reqs.prompt[gid]) - done
            c = min(rest, room)
            chunks.append((c, float(done)))
            own[gid] = chunks[-1]
            room -= c
            if c == rest:
                completed.append(gid)
                self.partials.remove(entry)
            else:
                entry[1] = done + c
                cut.append(entry)
        took_last = False
        while room > 0 and self.nxt < self.n:
            if running + len(completed) + len(self.partials) >= batch:
                break
            gid = int(self.ids[self.nxt])
            self.nxt += 1
            took_last = took_last or gid == reqs.count - 1
            prompt = int(reqs.prompt[gid])
            c = min(prompt, room)
            chunks.append((c, 0.0))
            own[gid] = chunks[-1]
            room -= c
            if c == prompt:
                completed.append(gid)
            else:
                entry = [float(gid), float(c), 0.0]
                self.partials.append(entry)
                cut.append(entry)
        if not chunks and running == 0:  # only chunks in flight: wait for one, or an arrival
            # (`least_busy` has dispatched every arrival up to `self.t`: the next is later)
            if not self.partials:
                return self.t  # (idle)
            return max(self.t, min(min(e[2] for e in self.partials), next_arrival))
        load = StepLoad(
            decode=float(running),
            context_tokens=float(self.run_ctx.sum()),
            prefill_tokens=float(sum(c for c, _ in chunks)),
            prefill_seqs=float(len(chunks)),
            prefill_cross_tokens=float(sum(c * o for c, o in chunks)),
            prefill_square_tokens=float(sum(c * c for c, _ in chunks)),
        )
        new = np.asarray(completed, dtype=np.int64)
        start = self.t
        crossed: dict[int, float] = {}  # when each chunk is out of the last stage, from `start`
        if first_s is not None and own:
            # each chunk rides in a micro-batch of its own, with its share of the running
            # sequences (`engine.prompt_exits_s` of a load carrying that chunk alone), which
            # enters the first stage when its turn among the step's micro-batches comes (the
            # step's own exits, less the first's)
            exits = _exits(first_s, load, len(own))
            entries = exits - exits[0]
            for i, (gid, (c, o)) in enumerate(own.items()):
                alone = StepLoad(
                    decode=load.decode,
                    context_tokens=load.context_tokens,
                    prefill_tokens=float(c),
                    prefill_seqs=1.0,
                    prefill_cross_tokens=c * o,
                    prefill_square_tokens=float(c * c),
                )
                crossed[gid] = float(_exits(first_s, alone, 1)[0]) + float(entries[i])
        sequences = new.size + len(self.partials)

        def run(took: float, stretch: float) -> None:
            at = {g: start + stretch * c for g, c in crossed.items()}
            first_at = np.asarray([at.get(int(g), 0.0) for g in new]) if at else None
            self._advance(took, load, new, sequences, reqs, spec, first_s, first_at)
            for entry in cut:  # when these chunks are out of the pipeline
                entry[2] = max(self.t, at.get(int(entry[0]), self.t))
            if took_last:
                reqs.last_admitted = self.t  # the step that took the last prompt (first chunk)

        return _Pending(load, run)

    def _advance(
        self,
        took: float,
        load: StepLoad,
        new: IntArray,
        sequences: int,
        reqs: _Requests,
        spec: Speculation,
        first_s: FirstFn | None,
        first_at: FloatArray | None = None,
        stretch: float = 1.0,
    ) -> None:
        """Run the step carrying `load` for `took` seconds: the running sequences gain their
        tokens, and `new`, the requests whose prompts it completes, their first; `sequences`:
        those it runs beside the running ones (counted in `sizes`); `first_at`: when each of
        `new` comes out of the last stage, if known (default: `first_s` of the whole load after
        the step's start, times `stretch`: `_Pending.run`)."""
        running = self.run_id.size
        start = self.t
        self.t += took
        if not self.chunked and new.size and new[-1] == reqs.count - 1:
            reqs.last_admitted = self.t  # the step that took the last prompt
        self.ends.append(self.t)
        self.sizes.append(running + sequences)
        self._gaps(took, running)
        if spec.gain == 1.0:  # (a running sequence has a whole token or more still to come)
            self.tokens.append(float(running + new.size))
            self.run_left -= 1.0
            self.run_ctx += 1.0
        else:
            gained = np.minimum(self.run_left, spec.gain)  # the last step yields what is left
            self.tokens.append(float(gained.sum()) + new.size)
            self.run_left -= gained
            self.run_ctx += gained
        if not new.size:
            self._retire(self.run_id, self.run_left, self.run_ctx, reqs)
            return
        if first_at is not None:
            first: float | FloatArray = first_at
        elif first_s is None:
            first = self.t
        else:  # (in admission order, as `new` is)
            first = start + stretch * _exits(first_s, load, new.size)
        reqs.first[new] = first
        reqs.step_tokens[new] = load.prefill_tokens
        # a prompt whose micro-batch comes out of the pipeline after the step's end is that much
        # behind for the rest of its tokens too; one out before it (a step that started an empty
        # pipeline, which lasts until its last prompt is out) makes its next token with the
        # next step all the same
        reqs.lag[new] = np.maximum(first - self.t, 0.0)
        # a first token out before the step's end waits for the next step for its second: that
        # gap is the next step and this much more
        early = self.t - first
        if np.any(early > 0):
            ahead = np.broadcast_to(early, new.shape)
            for g, e, out in zip(
                new.tolist(), ahead.tolist(), reqs.output[new].tolist(), strict=True
            ):
                if e > 0 and out > 1:
                    self.early[g] = e
        ids = np.concatenate([self.run_id, new])
        left = np.concatenate([self.run_left, reqs.output[new] - 1.0])
        ctx = np.concatenate([self.run_ctx, reqs.prompt[new] + 1.0])
        self._retire(ids, left, ctx, reqs)

    def _gaps(self, took: float, running: int) -> None:
        """Record a step of `took` s that gave `running` sequences a further token: one gap
        each, longer by how early its first token was for a sequence in its first decode step
        (`early`: all of them run in this replica's next step)."""
        if self.early:
            for e in self.early.values():
                self.gap_s.append(took + e)
                self.gap_seqs.append(1)
            running -= len(self.early)
            self.early.clear()
        self.gap_s.append(took)
        self.gap_seqs.append(running)

    def _retire(self, ids: IntArray, left: FloatArray, ctx: FloatArray, reqs: _Requests) -> None:
        """After a step: the sequences `ids` with no tokens `left` finish (at the step's end,
        a pipelined prompt's lag later), the others run on with their contexts `ctx`."""
        over = left <= LEFT_TOLERANCE  # fractional gains sum with rounding errors
        if not over.any():
            self.run_id, self.run_left, self.run_ctx = ids, left, ctx
            return
        gone = ids[over]
        # (a one-token answer is done when its first token is out, which may be before the end
        # of a step that started an empty pipeline)
        done = np.where(reqs.output[gone] == 1, reqs.first[gone], self.t + reqs.lag[gone])
        reqs.finish[gone] = done
        for f in done.tolist():  # later than every earlier finish but those still lagging
            insort(self.done, f)
        self.run_id, self.run_left, self.run_ctx = ids[~over], left[~over], ctx[~over]

    def _decode_step(self, end: int, new: IntArray, reqs: _Requests, spec: Speculation) -> _Pending:
        """A disaggregated decode instance's step: the admitted requests arrived with their
        prompt's KV cache and first token, and join the running sequences at once (no prompt
        runs here); each makes its next tokens from this step on. `reqs.first` of a request
        is when it was admitted (what its wait for a slot is measured by)."""
        self.nxt = end
        reqs.first[new] = self.t
        ids = np.concatenate([self.run_id, new])
        left = np.concatenate([self.run_left, reqs.output[new] - 1.0])
        ctx = np.concatenate([self.run_ctx, reqs.prompt[new] + 1.0])
        load = StepLoad(decode=float(ids.size), context_tokens=float(ctx.sum()))

        def run(took: float, stretch: float) -> None:
            self.t += took
            if new.size and new[-1] == reqs.count - 1:
                reqs.last_admitted = self.t
            self.ends.append(self.t)
            self.sizes.append(ids.size)
            # (every sequence here had its first token before: the admitted ones from prefill)
            self._gaps(took, ids.size)
            gained = np.minimum(left, spec.gain)
            self.tokens.append(float(gained.sum()))
            # (no lag here: no prompt runs on these ranks)
            self._retire(ids, left - gained, ctx + gained, reqs)

        return _Pending(load, run)


class _Requests:
    """Every request's arrival, lengths, first-token and finish times."""

    def __init__(self, arrivals: FloatArray, prompt: IntArray, output: IntArray) -> None:
        self.arrivals, self.prompt, self.output = arrivals, prompt, output
        self.count = arrivals.size
        self.first = np.full(self.count, np.nan)
        self.finish = np.full(self.count, np.nan)
        self.lag = np.zeros(self.count)  # first token after its step's end by this much
        self.step_tokens = np.zeros(self.count)  # prompt tokens of the step that took it
        self.last_admitted = 0.0


def _dispatch_until(
    reps: list[_Replica], reqs: _Requests, nxt: int, until: float, round_robin: bool = False
) -> int:
    """Dispatch arrivals nxt, nxt+1, … up to time `until` to the least busy replica (the first
    of them on a tie), or with `round_robin` to each in turn; returns the first arrival not
    dispatched."""
    while nxt < reqs.count and reqs.arrivals[nxt] <= until:
        if round_robin:
            reps[nxt % len(reps)].take(nxt, int(reqs.prompt[nxt]))
        else:
            at = float(reqs.arrivals[nxt])
            busy = [r.in_flight(at) for r in reps]
            reps[busy.index(min(busy))].take(nxt, int(reqs.prompt[nxt]))
        nxt += 1
    return nxt


#: one step of ranks that step together: their loads (an empty one for a rank with nothing to
#: run) to the step's time (`serving.lockstep_fn`)
LockstepFn = Callable[[list[StepLoad]], float]


def least_busy(
    step_s: StepFn,
    rate_per_s: float,
    arrivals: FloatArray,
    prompt: IntArray,
    output: IntArray,
    replicas: int,
    max_batch: int,
    max_num_tokens: int,
    spec: Speculation = Speculation(),
    first_s: FirstFn | None = None,
    prefilled: bool = False,
    chunked: bool = False,
    lockstep: int = 1,
    lockstep_s: LockstepFn | None = None,
    round_robin: bool = False,
) -> Run:
    """`serving.simulate`'s run for `replicas` engines sharing one stream at `rate_per_s` (the
    arrival times and each request's prompt and output tokens, as `simulate` drew them), each
    arrival dispatched to the replica with the fewest requests in flight (`round_robin`: to
    each in turn). Throughput is that of all replicas; `first_s` as `_Replica.step` takes it.
    `prefilled`: the engines are a disaggregated deployment's decode instances, each arrival a
    request whose prompt's KV cache and first token come from a prefill instance
    (`_Replica._decode_step`); the Run's TTFT is then the wait for a slot, its TPOT from
    admission on. `chunked`: the engines run chunked prefill (`_Replica._chunked_step`).

    `lockstep` > 1: the replicas are the ep ranks of instances of that many, each rank with
    its own batch and queue, every instance's ranks stepping together: each step admits on
    every rank, then lasts `lockstep_s` of their loads (the slowest rank's,
    `engine.lockstep_step_s`); a rank with nothing to run waits the step out. An instance
    waits for an arrival only when all its ranks are idle."""
    requests = int(arrivals.size)
    reqs = _Requests(arrivals, prompt, output)
    # room for an even share each (a replica given more grows): not requests × replicas
    size = -(-requests // replicas)
    reps = [_Replica(size, prefilled, spec.verified, chunked) for _ in range(replicas)]
    width = lockstep if lockstep > 1 else 1
    if replicas % width or (width > 1 and lockstep_s is None):
        raise ValueError("lockstep needs whole instances and their step function")
    heap = [(0.0, i) for i in range(replicas // width)]
    nxt, waiting_at_end = 0, -1
    while heap:
        t, i = heapq.heappop(heap)
        nxt = _dispatch_until(reps, reqs, nxt, t, round_robin)
        ranks = reps[i * width : (i + 1) * width]
        coming = float(arrivals[nxt]) if nxt < requests else math.inf
        if all(r.idle() for r in ranks):
            if nxt < requests:  # wait for the next arrival
                for r in ranks:
                    r.t = max(r.t, coming)
                heapq.heappush(heap, (ranks[0].t, i))
            continue
        if width == 1:
            ranks[0].step(step_s, max_batch, max_num_tokens, reqs, spec, first_s, coming)
        else:
            assert lockstep_s is not None
            _lockstep(
                ranks, step_s, lockstep_s, max_batch, max_num_tokens, reqs, spec, first_s, coming
            )
        heapq.heappush(heap, (ranks[0].t, i))
        if waiting_at_end < 0 and t >= arrivals[-1]:  # arrived, not admitted, as arrivals stop
            waiting_at_end = sum(r.n - r.nxt for r in reps)
    return _run(reqs, reps, rate_per_s, max(waiting_at_end, 0), max_num_tokens, max_batch)


def _lockstep(
    ranks: list[_Replica],
    step_s: StepFn,
    lockstep_s: LockstepFn,
    batch: int,
    budget: int,
    reqs: _Requests,
    spec: Speculation,
    first_s: FirstFn | None,
    coming: float,
) -> None:
    """One step of an instance's ranks together (`least_busy`'s `lockstep`): each admits and
    loads its step, all run for the instance's step time, each rank's first tokens stretched
    as its step is (its own time `step_s` to the instance's); when none can run (chunked
    prefill with only chunks in flight), all wait for the first to be ready, or the next
    arrival."""
    t = ranks[0].t
    steps = [r.prepare(batch, budget, reqs, spec, first_s, coming) for r in ranks]
    loads = [p.load if isinstance(p, _Pending) else StepLoad() for p in steps]
    if not any(isinstance(p, _Pending) for p in steps):
        wake = min((p for p in steps if isinstance(p, float) and p > t), default=coming)
        for r in ranks:
            r.t = wake
        return
    took = lockstep_s(loads)
    for r, p in zip(ranks, steps, strict=True):
        if isinstance(p, _Pending):
            own = step_s(p.load)
            p.run(took, took / own if own > 0 else 1.0)
        else:
            r.t = t + took


#: sequence lifetimes an overloaded run must spend at its full batch to measure what it serves
FULL_TURNOVERS = 2


def _full_from(rep: _Replica, lo: float, hi: float, batch: int) -> float | None:
    """When in (lo, hi) the replica's batch had first stopped growing (lo if before), or None:
    the first step that ran the full batch, or the first completion if sooner (from then on
    what is admitted replaces what finishes, whether the batch limit or the step's token
    budget caps the batch)."""
    full = np.flatnonzero(np.asarray(rep.sizes) >= batch)
    starts = [float(rep.ends[int(full[0])])] if full.size else []
    if rep.done:
        starts.append(rep.done[0])
    if not starts or min(starts) >= hi:
        return None
    return max(lo, min(starts))


def _run(
    reqs: _Requests, reps: list[_Replica], rate: float, waiting: int, budget: int, batch: int
) -> Run:
    """The simulation's Run over all replicas: tokens/s are counted from the middle arrival
    until the last one (or, when a queue built up, until the last prompt was admitted), while
    the engines hold their steady (or full) batch."""
    arrivals, n = reqs.arrivals, reqs.count
    ttft = reqs.first - arrivals
    tpot = (reqs.finish - reqs.first) / np.maximum(reqs.output - 1, 1)
    lo, hi = arrivals[n // 2], max(arrivals[-1], reqs.last_admitted)
    tokens = sum(
        _tokens_per_s(np.asarray(r.ends), np.asarray(r.tokens, dtype=np.float64), lo, hi)
        for r in reps
        if r.ends
    )
    starts = [_full_from(r, lo, hi, batch) for r in reps if r.ends]
    # a full batch turns over once per sequence lifetime; an average over fewer than
    # FULL_TURNOVERS of them is biased by where in a turnover the window falls (sequences
    # admitted together finish together)
    decoding = reqs.finish - reqs.first
    turnover = float(np.nanmedian(decoding)) if np.isfinite(decoding).any() else math.inf
    filled = all(t is not None and hi - t >= FULL_TURNOVERS * turnover for t in starts)
    full_tokens = (
        sum(
            _tokens_per_s(np.asarray(r.ends), np.asarray(r.tokens, dtype=np.float64), t, hi)
            for r, t in zip([r for r in reps if r.ends], starts, strict=True)
            if t is not None
        )
        if filled
        else tokens
    )
    half = max(n // 2, 1)
    lifetime = float(np.median(reqs.finish[:half] - arrivals[:half]))
    settled = bool(arrivals[n // 2] >= lifetime)
    # prompts an empty step may carry (requests, on decode instances): what the token budget
    # and the batch allow
    cost = reps[0].verified if reps[0].prefilled else float(reqs.prompt.mean())
    per_step = max(1, min(batch, int(budget // cost)))

    # the early window opens a request's lifetime after the start at the soonest (the batch
    # fills up before it), in the second quarter of the arrivals
    quarters = (
        min(max(arrivals[n // 4], lifetime), arrivals[n // 2]),
        arrivals[n // 2],
        arrivals[3 * n // 4],
        arrivals[-1],
    )

    def mean_count(lo: float, hi: float, done: FloatArray) -> float:
        """Mean over [lo, hi] of the requests arrived and not yet `done` (sorted times)."""
        at = np.linspace(lo, hi, 64) if hi > lo else np.asarray([hi])
        arrived = np.searchsorted(arrivals, at, side="right")
        return float(np.mean(arrived - np.searchsorted(done, at, side="right")))

    finish, first = np.sort(reqs.finish), np.sort(reqs.first)
    itl_mean, itl_p99 = _itl(reps)
    return Run(
        ttft,
        tpot,
        tokens,
        # (a decode instance makes all but the first token, which its prefill instance made)
        rate * float(reqs.output.mean() - (1.0 if reps[0].prefilled else 0.0)),
        waiting,
        per_step,
        settled,
        mean_count(quarters[0], quarters[1], finish),
        mean_count(quarters[2], quarters[3], finish),
        mean_count(quarters[0], quarters[1], first),
        mean_count(quarters[2], quarters[3], first),
        filled,
        full_tokens,
        reqs.step_tokens,
        itl_mean,
        itl_p99,
    )


def _itl(reps: list[_Replica]) -> tuple[float, float]:
    """Mean and 99th percentile of the gaps between successive tokens of a sequence, over
    every token after a sequence's first: each step's time, counted once per sequence that it
    gave a further token (a step that carries a prompt whole stalls every running sequence for
    its length: what chunked prefill bounds). With speculative decoding a gap is a step, which
    yields `Speculation.gain` tokens on average. (0, 0) when no sequence had a second token."""
    gaps = np.concatenate([np.asarray(r.gap_s, dtype=np.float64) for r in reps])
    seqs = np.concatenate([np.asarray(r.gap_seqs, dtype=np.float64) for r in reps])
    total = float(seqs.sum())
    if total <= 0:
        return 0.0, 0.0
    order = np.argsort(gaps, kind="stable")
    cum = np.cumsum(seqs[order])
    # the smallest gap with at least 99 % of the tokens at or below it (inverted CDF)
    p99 = float(gaps[order][int(np.searchsorted(cum, 0.99 * total, side="left"))])
    return float(np.dot(gaps, seqs) / total), p99
