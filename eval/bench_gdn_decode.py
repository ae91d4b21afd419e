"""One-token GDN / KDA decode benchmark: DeltaLog kernels vs FLA fused_recurrent vs a torch.compile'd dense step.

``--operator kda`` benchmarks Kimi Delta Attention (H = 32 heads, K = V = 128, decay per key channel) against FLA's
``fused_recurrent_kda``, ``--operator rwkv6`` RWKV6 (same heads) against ``fused_recurrent_rwkv6`` (only its
``[K, V]`` layout exists); outputs are then named ``bench_<operator>_decode.*``.

Spec (H200 run): HV = 32 value heads, Hk = 16 key heads, K = V = 128, fp32 state, bf16 activations,
B in {1, 8, 32, 64, 128, 256, 512}, DeltaLog M in {2, 4, 8, 16, 32} (log capacity C = M - 1), both base layouts.

Timing method
-------------
* DeltaLog is timed over whole cycles with the live length really advancing: every state set starts at length 0 and a
  CUDA graph of one full cycle (M - 1 appends then 1 merge, per set) is replayed; µs/token = graph time / (M · sets).
  M per-phase graphs (phase c = every set at length c) are replayed in order too, with CUDA events between them, so
  the append steps (c < M - 1) and the merge step (c = M - 1) are reported separately.
* Cache residency: each variant rotates over R independent state/input sets, R = ceil(4 · L2 / state bytes) (at most
  --max-sets), so the sets touched between two visits of one set exceed the L2 several times (B = 1..32 would
  otherwise stay cache-resident). ``--min-sets N`` rotates over at least N sets: with one set (B >= 128) the log
  written at one step may stay in the L2 until the next step when the base loads carry an evict-first hint, which a
  model, with other layers between two steps of one layer, does not allow (eval/results/h200/NOTES.md, rounds 12-13).
* Each measurement: warm-up, a GPU sleep so that the queue fills, n replays between two events; the median of several
  trials is reported.
* Copy bandwidth is measured in the same run (1 GiB device-to-device copy; bytes read + written / time).
  Floors: dense = 2·S/BW; DeltaLog = (S + S/M + log bytes read and written per step, averaged over a cycle)/BW, with S
  the fp32 state bytes; per-phase floors likewise.
* Numerics: 128-step rollouts (B in {64, 128, 256}, bf16 activations, zero initial state) against
  ``naive_recurrent_gated_delta_rule`` in float64; relative L2 error of all outputs and of the final state, for ours
  (each numerics M, both layouts) and FLA; ratio ours / FLA.

Outputs (all under --out): ``bench_gdn_decode.json`` (everything, incl. environment), ``bench_gdn_decode.csv`` (one
row per B x variant), ``bench_gdn_decode.png`` (µs vs B with the floors; needs matplotlib), and a table on stdout.

``--cpu-smoke`` runs the same code paths on the CPU under the Triton interpreter with tiny shapes, no CUDA graphs and
wall-clock timings only (numbers are meaningless; it checks the script end to end). ``--quick`` runs a small subset on
the GPU.
"""

from __future__ import annotations

import argparse
import csv
import faulthandler
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


WATCHDOG_S = 0.0  # --watchdog-s: a stall this long without a progress() line dumps every thread's stack to stderr


def progress(msg: str) -> None:
    """A progress line before each measurement; re-arms the watchdog, so a stall shows where it is."""
    log(msg)
    if WATCHDOG_S > 0:
        faulthandler.dump_traceback_later(WATCHDOG_S, repeat=True)


def start_watchdog(seconds: float) -> None:
    """Stack dumps on a stall (no progress() for ``seconds``, repeated) and on SIGTERM (what ``timeout`` sends), so a
    killed or hung run shows the Python line it was on; the default SIGTERM action (exit) still follows."""
    global WATCHDOG_S
    WATCHDOG_S = seconds
    if seconds > 0:
        faulthandler.dump_traceback_later(seconds, repeat=True)
        faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)


def stop_watchdog() -> None:
    global WATCHDOG_S
    if WATCHDOG_S > 0:
        faulthandler.cancel_dump_traceback_later()
        faulthandler.unregister(signal.SIGTERM)
    WATCHDOG_S = 0.0


class Operator:
    """What differs between the recurrences benchmarked here: GDN (scalar decay per value head) and KDA (a decay per
    key channel). Selected by ``--operator``; every function below goes through ``OP``."""

    def __init__(self, name: str):
        self.name = name
        self.per_key = name in ("kda", "rwkv6")

    def kernels(self):
        if self.name == "rwkv6":
            from hf_deltalog.kernels.rwkv6.fused_deltalog import deltalog_rwkv6_workspace, fused_deltalog_rwkv6_decode

            return fused_deltalog_rwkv6_decode, lambda B, Hk, HV, K, C, device: deltalog_rwkv6_workspace(B, HV, K, C,
                                                                                                          device)
        if self.name == "kda":
            from hf_deltalog.kernels.kda.fused_deltalog import deltalog_kda_workspace, fused_deltalog_kda_decode

            return fused_deltalog_kda_decode, deltalog_kda_workspace
        from hf_deltalog.kernels.gdn.fused_deltalog import deltalog_gdn_workspace, fused_deltalog_gdn_decode

        return fused_deltalog_gdn_decode, deltalog_gdn_workspace

    def decode(self, *args, state_v_first=False, launch=None):
        """One step of our kernel; ``launch``: launch-option overrides (None values keep the kernel's default)."""
        kernel = self.kernels()[0]
        kw = dict(state_v_first=state_v_first)
        kw.update({k: v for k, v in (launch or {}).items() if v is not None})
        if self.name == "gdn":
            kw["use_custom_op"] = False
        return kernel(*args, **kw)

    def fla(self, fla, x, state, v_first, scale):
        """One dense step of FLA's kernel on inputs ``x`` (as make_inputs builds them); returns ``(o, new state)``."""
        self.check_fla_layout(v_first)
        if self.name == "rwkv6":
            return fla(*x, scale=scale, initial_state=state, output_final_state=True)
        q, k, v, g, beta = x
        return fla(q, k, v, g=g, beta=beta, scale=scale, initial_state=state, output_final_state=True,
                   use_qk_l2norm_in_kernel=True, state_v_first=v_first)

    def check_fla_layout(self, v_first):
        """Raise NotImplementedError where FLA's kernel lacks the state layout (before any state is allocated)."""
        if self.name == "rwkv6" and v_first:
            raise NotImplementedError("FLA's fused_recurrent_rwkv6 has only the [K, V] state layout")

    def recurrence(self, *x, initial_state=None):
        """The float64-capable naive recurrence on inputs ``x``: ``(o, final state)``."""
        naive = self.references()[0]
        if self.name == "rwkv6":
            return naive(*x, initial_state=initial_state, output_final_state=True)
        return naive(*x, initial_state=initial_state, output_final_state=True, use_qk_l2norm_in_kernel=True)

    def references(self):
        """(naive recurrence, materialize(base, ..., state_v_first))."""
        if self.name == "rwkv6":
            from hf_deltalog.kernels.rwkv6.naive import naive_deltalog_rwkv6_materialize, naive_recurrent_rwkv6

            def materialize_rwkv6(base, *log, state_v_first=False):
                return naive_deltalog_rwkv6_materialize(base.transpose(-1, -2) if state_v_first else base, *log)

            return naive_recurrent_rwkv6, materialize_rwkv6
        if self.name == "kda":
            from hf_deltalog.kernels.kda.naive import naive_deltalog_kda_materialize, naive_recurrent_kda

            def materialize(base, *log, state_v_first=False):
                return naive_deltalog_kda_materialize(base.transpose(-1, -2) if state_v_first else base, *log)

            return naive_recurrent_kda, materialize
        from hf_deltalog.kernels.gdn.naive import naive_deltalog_gdn_materialize, naive_recurrent_gated_delta_rule

        return naive_recurrent_gated_delta_rule, naive_deltalog_gdn_materialize


OP = Operator("gdn")


@dataclass(frozen=True)
class Shape:
    B: int
    Hk: int
    HV: int
    K: int
    V: int

    @property
    def state_bytes(self) -> int:
        return self.B * self.HV * self.K * self.V * 4

    def log_entry_bytes(self) -> int:
        """Bytes of one log entry over all rows: k (per key head) + u (per value head) + Λ (per value head: one
        scalar for GDN, K for KDA), fp32."""
        return self.B * (self.Hk * self.K + self.HV * self.V + self.HV * (self.K if OP.per_key else 1)) * 4

    def act_bytes(self, elt: int = 2) -> int:
        """q, k, v read and o written (activations), g and beta read (fp32)."""
        gate = self.HV * ((self.K if OP.per_key else 1) + 1) * 4
        return self.B * (2 * self.Hk * self.K + 2 * self.HV * self.V) * elt + self.B * gate


def deltalog_phase_bytes(s: Shape, M: int, c: int) -> int:
    """DRAM bytes of the DeltaLog step at phase c (c live entries): base read, c entries read, then append (one entry
    written) or, at c = M - 1, merge (base written)."""
    C = M - 1
    b = s.state_bytes + c * s.log_entry_bytes() + s.act_bytes()
    b += s.state_bytes if c == C else s.log_entry_bytes()
    return b


def deltalog_cycle_bytes(s: Shape, M: int) -> float:
    return sum(deltalog_phase_bytes(s, M, c) for c in range(M)) / M


def dense_bytes(s: Shape) -> int:
    return 2 * s.state_bytes + s.act_bytes()


# --------------------------------------------------------------------------------------------------------------------
# Timing back ends


class GpuTimer:
    """CUDA-graph timing with events: median over trials of n replays, after a GPU sleep that fills the queue."""

    def __init__(self, trials: int = 5, target_ms: float = 3.0):
        import torch

        self.torch = torch
        self.trials = trials
        self.target_ms = target_ms
        self.stream = torch.cuda.Stream()

    def capture(self, fns):
        """One graph that calls every fn in order (after a warm-up on a side stream); None if capture fails."""
        torch = self.torch
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(self.stream):
            with torch.cuda.graph(graph, stream=self.stream):
                for fn in fns:
                    fn()
        torch.cuda.synchronize()
        return graph

    def warm(self, fns):
        torch = self.torch
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            for fn in fns:
                fn()
        torch.cuda.current_stream().wait_stream(self.stream)
        torch.cuda.synchronize()

    def time_graphs(self, graphs, steps_per_graph):
        """Replays ``graphs`` in order, n times per trial; returns (µs per step of each graph, µs per step overall)."""
        torch = self.torch
        for gr in graphs:
            gr.replay()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for gr in graphs:
            gr.replay()
        torch.cuda.synchronize()
        est_ms = max((time.perf_counter() - t0) * 1e3, 1e-3)
        reps = max(2, min(200, int(math.ceil(self.target_ms / est_ms))))
        per_graph = [[] for _ in graphs]
        totals = []
        for _ in range(self.trials):
            sums = [0.0] * len(graphs)
            torch.cuda._sleep(2_000_000)
            evs = []
            for _ in range(reps):
                e = [torch.cuda.Event(enable_timing=True) for _ in range(len(graphs) + 1)]
                e[0].record()
                for i, gr in enumerate(graphs):
                    gr.replay()
                    e[i + 1].record()
                evs.append(e)
            torch.cuda.synchronize()
            for e in evs:
                for i in range(len(graphs)):
                    sums[i] += e[i].elapsed_time(e[i + 1])
            for i in range(len(graphs)):
                per_graph[i].append(sums[i] * 1e3 / reps / steps_per_graph[i])
            totals.append(sum(sums) * 1e3 / reps / sum(steps_per_graph))
        return [statistics.median(p) for p in per_graph], statistics.median(totals)

    def time_single_graph(self, graph, steps):
        """Whole-graph timing without per-replay events (the headline number)."""
        torch = self.torch
        graph.replay()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        est_ms = max((time.perf_counter() - t0) * 1e3, 1e-3)
        reps = max(2, min(500, int(math.ceil(self.target_ms / est_ms))))
        out = []
        for _ in range(self.trials):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(2_000_000)
            s.record()
            for _ in range(reps):
                graph.replay()
            e.record()
            torch.cuda.synchronize()
            out.append(s.elapsed_time(e) * 1e3 / reps / steps)
        return statistics.median(out)


class CpuTimer:
    """Wall-clock timing for --cpu-smoke (no graphs): a 'graph' is just the list of callables."""

    def __init__(self):
        self.trials = 1

    def warm(self, fns):
        for fn in fns:
            fn()

    def capture(self, fns):
        return list(fns)

    def _run(self, graph):
        for fn in graph:
            fn()

    def time_graphs(self, graphs, steps_per_graph):
        per = []
        for gr, n in zip(graphs, steps_per_graph):
            t0 = time.perf_counter()
            self._run(gr)
            per.append((time.perf_counter() - t0) * 1e6 / n)
        return per, sum(p * n for p, n in zip(per, steps_per_graph)) / sum(steps_per_graph)

    def time_single_graph(self, graph, steps):
        t0 = time.perf_counter()
        self._run(graph)
        return (time.perf_counter() - t0) * 1e6 / steps


# --------------------------------------------------------------------------------------------------------------------
# Variants


def make_inputs(torch, s: Shape, dtype, device, gen):
    if OP.name == "rwkv6":  # r, k, v, w (log-decay per key channel), u (bonus)
        r = torch.randn(s.B, 1, s.HV, s.K, generator=gen).to(device=device, dtype=dtype)
        k = (torch.randn(s.B, 1, s.HV, s.K, generator=gen) * 0.1).to(device=device, dtype=dtype)
        v = torch.randn(s.B, 1, s.HV, s.V, generator=gen).to(device=device, dtype=dtype)
        w = (-torch.nn.functional.softplus(torch.randn(s.B, 1, s.HV, s.K, generator=gen) - 2.0) * 0.5)
        u = torch.randn(s.HV, s.K, generator=gen) * 0.1
        return r, k, v, w.to(device=device, dtype=dtype), u.to(device=device, dtype=dtype)
    q = torch.randn(s.B, 1, s.Hk, s.K, generator=gen).to(device=device, dtype=dtype)
    k = torch.randn(s.B, 1, s.Hk, s.K, generator=gen).to(device=device, dtype=dtype)
    v = torch.randn(s.B, 1, s.HV, s.V, generator=gen).to(device=device, dtype=dtype)
    gate_shape = (s.B, 1, s.HV, s.K) if OP.per_key else (s.B, 1, s.HV)
    g = (-torch.nn.functional.softplus(torch.randn(*gate_shape, generator=gen) - 2.0) * 0.5).to(device)
    beta = torch.sigmoid(torch.randn(s.B, 1, s.HV, generator=gen)).to(device)
    return q, k, v, g, beta


def make_deltalog_set(torch, s: Shape, M: int, v_first: bool, device, gen):
    workspace = OP.kernels()[1]
    per_key = (s.K,) if OP.per_key else ()
    C = M - 1
    shape = (s.B, s.HV, s.V, s.K) if v_first else (s.B, s.HV, s.K, s.V)
    base = (torch.randn(shape, generator=gen) * 0.05).to(device)
    return dict(
        base=base,
        log_decay=torch.zeros(s.B, s.HV, *per_key, device=device),
        k_log=torch.zeros(s.B, s.Hk, C, s.K, device=device),
        u_log=torch.zeros(s.B, s.HV, C, s.V, device=device),
        decay_log=torch.zeros(s.B, s.HV, C, *per_key, device=device),
        length=torch.zeros(s.B, dtype=torch.int32, device=device),
        workspace=workspace(s.B, s.Hk, s.HV, s.K, C, device),
    )


def n_sets(s: Shape, l2_bytes: int, max_sets: int, min_sets: int = 1) -> int:
    return max(1, min_sets, min(max_sets, math.ceil(4 * l2_bytes / s.state_bytes)))


def dense_step_fn(torch):
    from hf_deltalog.kernels.gdn.naive import l2norm
    from hf_deltalog.kernels.kda.naive import kda_l2norm

    norm = kda_l2norm if OP.per_key else l2norm

    def dense_step_rwkv6(r, k, v, w, u, S, scale: float):
        """Dense RWKV6 step: o = r̃ᵀ(S + diag(u) k vᵀ), then S ← diag(exp(w)) S + k vᵀ (in place)."""
        kv = k[:, 0].float()[..., None] * v[:, 0].float()[..., None, :]
        o = ((S + u.float()[None, :, :, None] * kv) * (r[:, 0].float() * scale)[..., None]).sum(-2)
        S.mul_(w[:, 0].float().exp()[..., None]).add_(kv)
        return o.to(r.dtype)[:, None]

    if OP.name == "rwkv6":
        return dense_step_rwkv6

    def dense_step(q, k, v, g, beta, S, scale: float):
        """Dense decode step, state [B, HV, K, V] fp32 updated in place (transformers' recurrence, T = 1)."""
        G = S.shape[1] // q.shape[2]
        qf = (norm(q[:, 0].float()) * scale).repeat_interleave(G, 1)
        kf = norm(k[:, 0].float()).repeat_interleave(G, 1)
        S.mul_(g[:, 0].float().exp()[..., None] if OP.per_key else g[:, 0].float().exp()[..., None, None])
        u = beta[:, 0].float()[..., None] * (v[:, 0].float() - (S * kf[..., None]).sum(-2))
        S.add_(kf[..., None] * u[..., None, :])
        return (S * qf[..., None]).sum(-2).to(q.dtype)[:, None]

    return dense_step


def load_fla():
    try:
        if OP.name == "rwkv6":
            from fla.ops.rwkv6 import fused_recurrent_rwkv6

            return fused_recurrent_rwkv6, None
        if OP.per_key:
            from fla.ops.kda import fused_recurrent_kda

            return fused_recurrent_kda, None
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

        return fused_recurrent_gated_delta_rule, None
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        return None, f"{type(e).__name__}: {e}"


def pkg_version(name: str):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return None


# --------------------------------------------------------------------------------------------------------------------
# Benchmarks


def bench_deltalog(ctx, s: Shape, M: int, v_first: bool, R: int, launch=None):
    """Whole cycles of our kernel. ``launch``: launch-option overrides; its optional ``"merge"`` entry holds
    overrides for the merge step only (the cycle's last launch: every row merges there), so a merge-specific tile
    can be timed against the one the appends use."""
    from hf_deltalog.cache import restart_log

    torch, timer, dev = ctx["torch"], ctx["timer"], ctx["device"]
    launch = dict(launch or {})
    merge_overrides = launch.pop("merge", {})
    # "_stagger": every cycle starts as DeltaLogCache(stagger_merges=True) restarts a log after a prefill: row r at
    # r mod M zero entries (exact no-ops), so each launch holds rows of every phase and 1/M of the rows merge at each
    # step; without it all rows start empty, append together and merge together.
    stagger = bool(launch.pop("_stagger", False))
    merge_launch = {**launch, **merge_overrides}
    gen = torch.Generator().manual_seed(100 + M)
    sets = [make_deltalog_set(torch, s, M, v_first, dev, gen) for _ in range(R)]
    inputs = [make_inputs(torch, s, ctx["act_dtype"], dev, gen) for _ in range(R)]

    def start(st):
        restart_log(st["log_decay"], st["k_log"], st["u_log"], st["decay_log"], st["length"], stagger)

    def step(r, opts):
        st = sets[r]
        return lambda: OP.decode(
            *inputs[r], st["base"], st["log_decay"], st["k_log"], st["u_log"], st["decay_log"], st["length"],
            st["workspace"], state_v_first=v_first, launch=opts,
        )

    steps = [step(r, launch) for r in range(R)]
    merges = [step(r, merge_launch) for r in range(R)]
    per_phase_steps = [merges if c == M - 1 else steps for c in range(M)]
    timer.warm([fn for ph in per_phase_steps for fn in ph])  # one full cycle (compiles the kernels, both phases)
    for st in sets:
        start(st)
    start_length = [st["length"].clone() for st in sets]
    cycle = timer.capture([fn for ph in per_phase_steps for fn in ph])
    phases = [timer.capture(ph) for ph in per_phase_steps]
    amort = timer.time_single_graph(cycle, M * R)
    # Sets are back at their start lengths after whole cycles: the phase graphs start in phase.
    assert all(torch.equal(st["length"], L0) for st, L0 in zip(sets, start_length)), \
        "cycle did not return every row to its start length"
    per_phase, amort_phases = timer.time_graphs(phases, [R] * M)
    del cycle, phases, sets, inputs
    return dict(amortized_us=amort, amortized_from_phases_us=amort_phases, phase_us=per_phase,
                append_us=per_phase[:-1], merge_us=per_phase[-1])


def bench_fla(ctx, s: Shape, v_first: bool, R: int):
    torch, timer, dev, fla = ctx["torch"], ctx["timer"], ctx["device"], ctx["fla"]
    OP.check_fla_layout(v_first)
    gen = torch.Generator().manual_seed(7)
    shape = (s.B, s.HV, s.V, s.K) if v_first else (s.B, s.HV, s.K, s.V)
    states = [(torch.randn(shape, generator=gen) * 0.05).to(dev) for _ in range(R)]
    inputs = [make_inputs(torch, s, ctx["act_dtype"], dev, gen) for _ in range(R)]

    def step(r):
        return lambda: OP.fla(fla, inputs[r], states[r], v_first, s.K**-0.5)

    steps = [step(r) for r in range(R)]
    timer.warm(steps)
    return time_steps(timer, steps, R)


def time_steps(timer, steps, R):
    """Graph of the R rotated steps; if capture fails (a baseline that syncs), time eager launches instead."""
    try:
        graph = timer.capture(steps)
        return dict(amortized_us=timer.time_single_graph(graph, R))
    except Exception as e:  # noqa: BLE001
        return dict(amortized_us=timer.time_single_graph(list(steps), R) if isinstance(timer, CpuTimer)
                    else eager_time(timer, steps), note=f"eager launches (graph capture failed: {e!r})"[:300])


def eager_time(timer, steps):
    torch = timer.torch
    torch.cuda.synchronize()
    out = []
    for _ in range(timer.trials):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)
        a.record()
        for _ in range(5):
            for fn in steps:
                fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / (5 * len(steps)))
    return statistics.median(out)


def load_replayssm(wheel: str):
    """The public ReplaySSM decode launcher (``fused_recurrent_linear_replayssm_decode``: GDN and, with ``is_kda``,
    KDA) from SGLang's published wheel: the one module (it imports only torch and triton) is extracted from the wheel
    into a temporary folder and imported from there, so nothing of it enters this project and none of SGLang's
    dependencies is needed. Returns ``(launcher, description)`` or ``(None, reason)``."""
    import importlib.util
    import tempfile
    import zipfile

    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n.endswith("/fused_recurrent_linear_replayssm.py")]
            if not names:
                return None, f"{Path(wheel).name} has no fused_recurrent_linear_replayssm.py"
            folder = Path(tempfile.mkdtemp(prefix="replayssm_"))
            path = folder / "replayssm_decode.py"
            path.write_bytes(zf.read(names[0]))  # Triton's @jit needs the source on disk
        spec = importlib.util.spec_from_file_location("replayssm_decode", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.fused_recurrent_linear_replayssm_decode, f"{Path(wheel).name}:{names[0]}"
    except Exception as e:  # noqa: BLE001 - any failure means "not available"
        return None, f"{type(e).__name__}: {e}"


def bench_replayssm(ctx, s: Shape, L: int, R: int):
    """ReplaySSM's decode over whole cycles of its ring (L - 1 appends, then a flush), like ours: each phase c has its
    own constant cursor tensor (value c), so no cursor-advance kernel is charged to the layer (in a model one cursor
    per request serves every layer). Its gating is fused (it takes the raw gate inputs ``a``, ``b`` and the layer's
    ``A_log``, ``dt_bias``); state ``[B, HV, V, K]`` fp32, fp32 rings (SGLang allocates decode rings in the state
    dtype), bf16 activations, l2-normalised q and k, default launch options."""
    torch, timer, dev, fn = ctx["torch"], ctx["timer"], ctx["device"], ctx["replayssm"]
    gen = torch.Generator().manual_seed(300 + L)
    kda = OP.name == "kda"
    gate = (s.B, s.HV, s.K) if kda else (s.B, s.HV)
    A_log = (torch.rand(s.HV, generator=gen) * 2 - 4).to(dev)
    dt_bias = (torch.randn(*(gate[1:]), generator=gen) * 0.1).to(dev)
    idx = torch.arange(s.B, dtype=torch.int32, device=dev)
    cursors = [torch.full((s.B,), c, dtype=torch.int32, device=dev) for c in range(L)]
    sets = []
    for _ in range(R):
        sets.append(dict(
            qkv=torch.randn(s.B, 2 * s.Hk * s.K + s.HV * s.V, generator=gen).to(dev, ctx["act_dtype"]),
            a=torch.randn(*gate, generator=gen).to(dev, ctx["act_dtype"]),
            b=torch.randn(s.B, s.HV, generator=gen).to(dev, ctx["act_dtype"]),
            state=(torch.randn(s.B, s.HV, s.V, s.K, generator=gen) * 0.05).to(dev),
            d=torch.zeros(s.B, s.HV, L, s.V, device=dev),
            k=torch.zeros(s.B, s.Hk, L, s.K, device=dev),
            g=torch.zeros(s.B, s.HV, L, *((s.K,) if kda else ()), device=dev),
            out=torch.empty(s.B, 1, s.HV, s.V, device=dev, dtype=ctx["act_dtype"]),
        ))

    def step(r, c):
        st = sets[r]
        return lambda: fn(st["qkv"], st["a"], st["b"], A_log, dt_bias, s.K**-0.5, st["state"], st["d"], st["k"],
                          st["g"], st["out"], idx, cursors[c], use_qk_l2norm_in_kernel=True, is_kda=kda)

    phases = [[step(r, c) for r in range(R)] for c in range(L)]
    timer.warm([fn_ for ph in phases for fn_ in ph])
    cycle = timer.capture([fn_ for ph in phases for fn_ in ph])
    amort = timer.time_single_graph(cycle, L * R)
    per_phase, amort_phases = timer.time_graphs([timer.capture(ph) for ph in phases], [R] * L)
    return dict(amortized_us=amort, amortized_from_phases_us=amort_phases, phase_us=per_phase,
                append_us=per_phase[:-1], merge_us=per_phase[-1])


def bench_dense_compiled(ctx, s: Shape, R: int):
    torch, timer, dev = ctx["torch"], ctx["timer"], ctx["device"]
    gen = torch.Generator().manual_seed(8)
    states = [(torch.randn(s.B, s.HV, s.K, s.V, generator=gen) * 0.05).to(dev) for _ in range(R)]
    inputs = [make_inputs(torch, s, ctx["act_dtype"], dev, gen) for _ in range(R)]
    fn = ctx["dense_compiled"]
    steps = [(lambda r=r: fn(*inputs[r], states[r], s.K**-0.5)) for r in range(R)]
    timer.warm(steps)
    timer.warm(steps)
    return time_steps(timer, steps, R)


def measure_bandwidth(ctx, nbytes: int):
    torch, dev = ctx["torch"], ctx["device"]
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    src.fill_(1)
    if dev.type == "cuda":
        times = []
        for _ in range(3):
            dst.copy_(src)
        torch.cuda.synchronize()
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1e-3)
        t = statistics.median(times)
    else:
        dst.copy_(src)
        t0 = time.perf_counter()
        dst.copy_(src)
        t = time.perf_counter() - t0
    return 2 * nbytes / t  # bytes read + written per second


def rollout_numerics(ctx, B: int, steps: int, Ms, shape_kw):
    """Relative errors vs float64 of ours (each M, both layouts) and FLA over a ``steps``-token rollout."""
    from hf_deltalog.cache import restart_log

    torch, dev = ctx["torch"], ctx["device"]
    naive_recurrent, materialize = OP.references()

    s = Shape(B=B, **shape_kw)
    gen = torch.Generator().manual_seed(1234 + B)
    xs = [make_inputs(torch, s, ctx["act_dtype"], dev, gen) for _ in range(steps)]
    if OP.name == "rwkv6":  # the bonus u is a parameter: one for the whole rollout
        xs = [(*x[:4], xs[0][4]) for x in xs]
    q, k, v, g, beta = ((torch.cat([x[i] for x in xs], dim=1) if OP.name != "rwkv6" or i < 4 else xs[0][4])
                        for i in range(5))
    o_ref, S_ref = OP.recurrence(q.double(), k.double(), v.double(), g.double(), beta.double())

    def rel(a, b):
        return float((a.double() - b).norm() / b.norm())

    rec = dict(B=B, steps=steps, results=[])
    for M in Ms:
        for v_first in (False, True):
            st = make_deltalog_set(torch, s, M, v_first, dev, gen)
            st["base"].zero_()
            launch = dict(ctx.get("launch") or {})
            restart_log(st["log_decay"], st["k_log"], st["u_log"], st["decay_log"], st["length"],
                        bool(launch.pop("_stagger", False)))
            outs = []
            for t in range(steps):
                outs.append(OP.decode(*xs[t], st["base"], st["log_decay"], st["k_log"], st["u_log"],
                                      st["decay_log"], st["length"], st["workspace"], state_v_first=v_first,
                                      launch=launch))
            S = materialize(st["base"], st["log_decay"], st["k_log"], st["u_log"], st["decay_log"],
                            st["length"], state_v_first=v_first)
            rec["results"].append(dict(variant="ours", M=M, layout="VK" if v_first else "KV",
                                       out_rel=rel(torch.cat(outs, 1), o_ref), state_rel=rel(S, S_ref)))
    if ctx["fla"] is not None:
        for v_first in (False, True):
            shape = (B, s.HV, s.V, s.K) if v_first else (B, s.HV, s.K, s.V)
            S = torch.zeros(shape, device=dev)
            outs = []
            try:
                for t in range(steps):
                    o, S = OP.fla(ctx["fla"], xs[t], S, v_first, s.K**-0.5)
                    outs.append(o)
                S_kv = S.transpose(-1, -2) if v_first else S
                rec["results"].append(dict(variant="fla", M=None, layout="VK" if v_first else "KV",
                                           out_rel=rel(torch.cat(outs, 1), o_ref), state_rel=rel(S_kv, S_ref)))
            except Exception as e:  # noqa: BLE001
                rec["results"].append(dict(variant="fla", layout="VK" if v_first else "KV", error=repr(e)))
    fla_vk = [r for r in rec["results"] if r["variant"] == "fla" and "out_rel" in r]
    if fla_vk:
        ref = min(fla_vk, key=lambda r: r["out_rel"])
        for r in rec["results"]:
            if r["variant"] == "ours":
                r["out_ratio_vs_fla"] = r["out_rel"] / ref["out_rel"] if ref["out_rel"] else None
                r["state_ratio_vs_fla"] = r["state_rel"] / ref["state_rel"] if ref["state_rel"] else None
    return rec


def environment(ctx):
    torch = ctx["torch"]
    env = dict(
        python=platform.python_version(),
        torch=torch.__version__,
        triton=pkg_version("triton"),
        fla=pkg_version("fla-core") or pkg_version("flash-linear-attention"),
        fla_import_error=ctx.get("fla_error"),
        cuda=torch.version.cuda,
        device=str(ctx["device"]),
        time=time.strftime("%Y-%m-%d %H:%M:%S"),
    )
    if ctx["device"].type == "cuda":
        p = torch.cuda.get_device_properties(ctx["device"])
        env.update(gpu=p.name, sm_count=p.multi_processor_count, gpu_mem_gib=p.total_memory / 2**30,
                   l2_bytes=getattr(p, "L2_cache_size", None))
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            env["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
        except Exception:  # noqa: BLE001
            env["driver"] = None
    else:
        env.update(gpu=None, driver=None, cpu=platform.processor() or platform.machine())
    return env


# --------------------------------------------------------------------------------------------------------------------
# Reporting


def policy(rows, Bs):
    out = []
    for B in Bs:
        rb = [r for r in rows if r["B"] == B and r.get("amortized_us") is not None]
        ours = [r for r in rb if r["variant"] == "deltalog" and r["M"] > 1]
        m1 = [r for r in rb if r["variant"] == "deltalog" and r["M"] == 1]
        fla = [r for r in rb if r["variant"].startswith("fla")]
        dense = [r for r in rb if r["variant"] == "dense_compiled"]
        if not ours:
            continue
        best = min(ours, key=lambda r: r["amortized_us"])
        rec = dict(B=B, best_M=best["M"], best_layout=best["layout"], best_us=best["amortized_us"])
        for name, grp in (("ours_M1", m1), ("fla", fla), ("dense_compiled", dense)):
            b = min(grp, key=lambda r: r["amortized_us"]) if grp else None
            rec[f"{name}_us"] = b["amortized_us"] if b else None
            rec[f"{name}_layout"] = b["layout"] if b else None
        cands = [("deltalog", best["amortized_us"])] + [
            (n, rec[f"{n}_us"]) for n in ("ours_M1", "fla", "dense_compiled") if rec[f"{n}_us"] is not None
        ]
        rec["fastest"] = min(cands, key=lambda c: c[1])[0]
        rec["dense_beats_deltalog"] = rec["fastest"] in ("ours_M1", "fla", "dense_compiled")
        out.append(rec)
    return out


def add_speedups(rows):
    by_b = {}
    for r in rows:
        by_b.setdefault(r["B"], []).append(r)
    for B, rb in by_b.items():
        base = {}
        for r in rb:
            if r.get("amortized_us") is None:
                continue
            if r["variant"] == "fla_vfirst":
                base["fla_vfirst"] = r["amortized_us"]
            elif r["variant"] == "fla_kfirst":
                base["fla_kfirst"] = r["amortized_us"]
            elif r["variant"] == "dense_compiled":
                base["dense_compiled"] = r["amortized_us"]
            elif r["variant"] == "deltalog" and r["M"] == 1:
                base["ours_M1_" + r["layout"]] = r["amortized_us"]
        for r in rb:
            if r.get("amortized_us") is None:
                continue
            for k_, t in base.items():
                r[f"speedup_vs_{k_}"] = t / r["amortized_us"]


CSV_FIELDS = [
    "B", "variant", "layout", "M", "sets", "amortized_us", "amortized_from_phases_us", "append_first_us",
    "append_last_us", "append_mean_us", "merge_us", "floor_us", "floor_fraction", "speedup_vs_fla_vfirst",
    "speedup_vs_fla_kfirst", "speedup_vs_dense_compiled", "speedup_vs_ours_M1_KV", "speedup_vs_ours_M1_VK", "note",
]


def write_outputs(out_dir: Path, result, final: bool):
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"bench_{OP.name}_decode.json").write_text(json.dumps(result, indent=1, default=str))
    with open(out_dir / f"bench_{OP.name}_decode.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in result["rows"]:
            w.writerow(r)
    if final:
        plot(out_dir / f"bench_{OP.name}_decode.png", result)


def plot(path: Path, result):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        log(f"plot skipped (matplotlib not available: {e})")
        result["plot"] = None
        return
    rows = result["rows"]
    if not any(r.get("amortized_us") for r in rows):  # e.g. --skip-main: nothing to draw
        result["plot"] = None
        return
    fig, ax = plt.subplots(figsize=(9, 6))
    series = {}
    for r in rows:
        if r.get("amortized_us") is None:
            continue
        name = r["variant"] if r["variant"] != "deltalog" else f"ours M={r['M']} {r['layout']}"
        series.setdefault(name, []).append((r["B"], r["amortized_us"]))
    for name, pts in sorted(series.items()):
        pts.sort()
        style = "-o" if name.startswith("ours") else "-s"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=name, markersize=3, linewidth=1)
    floors = {}
    for r in rows:
        if r.get("floor_us") is None:
            continue
        key = "dense floor" if r["variant"] != "deltalog" or r["M"] == 1 else f"DeltaLog floor M={r['M']}"
        floors.setdefault(key, {})[r["B"]] = r["floor_us"]
    for name, pts in sorted(floors.items()):
        bs = sorted(pts)
        ax.plot(bs, [pts[b] for b in bs], "--", label=name, linewidth=0.8, color="k" if name == "dense floor" else None)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch B")
    ax.set_ylabel("µs per decode token (amortized)")
    env = result["env"]
    ax.set_title(f"{OP.name.upper()} decode, HV={result['shape']['HV']} Hk={result['shape']['Hk']} K=V={result['shape']['K']}, "
                 f"{env.get('gpu') or 'CPU smoke'}")
    ax.legend(fontsize=6, ncol=2)
    ax.grid(True, which="both", linewidth=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    result["plot"] = str(path)


def print_table(result):
    rows = [r for r in result["rows"] if r.get("amortized_us") is not None]
    missing = sorted({(r["variant"], r.get("note")) for r in result["rows"] if r.get("amortized_us") is None})
    print("\n== amortized µs per token (fraction of floor) ==")
    for variant, note in missing:
        print(f"  {variant}: {note}")
    print(f"{'B':>5} {'variant':<16} {'lay':<3} {'M':>3} {'µs':>9} {'append':>9} {'merge':>9} {'floor':>8} {'%fl':>5} "
          f"{'xFLA-VK':>7} {'xFLA-KV':>7} {'xdense':>7}")
    for r in sorted(rows, key=lambda r: (r["B"], r["variant"], r.get("M") or 0, r.get("layout") or "")):
        f = lambda k, fmt: (fmt % r[k]) if r.get(k) is not None else "-"  # noqa: E731
        print(f"{r['B']:>5} {r['variant']:<16} {r.get('layout') or '':<3} {r.get('M') or '':>3} {f('amortized_us', '%9.2f')} "
              f"{f('append_mean_us', '%9.2f'):>9} {f('merge_us', '%9.2f'):>9} {f('floor_us', '%8.2f')} "
              f"{('%5.2f' % r['floor_fraction']) if r.get('floor_fraction') else '-':>5} "
              f"{f('speedup_vs_fla_vfirst', '%7.2f'):>7} {f('speedup_vs_fla_kfirst', '%7.2f'):>7} "
              f"{f('speedup_vs_dense_compiled', '%7.2f'):>7}")
    if result.get("policy"):
        print("\n== policy: fastest DeltaLog M per B vs dense alternatives ==")
        for p in result["policy"]:
            print(f"B={p['B']:>4}: best M={p['best_M']:>2} {p['best_layout']} {p['best_us']:.2f} µs | ours M=1 "
                  f"{p['ours_M1_us'] if p['ours_M1_us'] is None else round(p['ours_M1_us'], 2)} | FLA "
                  f"{p['fla_us'] if p['fla_us'] is None else round(p['fla_us'], 2)} | fastest: {p['fastest']}")
    if result.get("numerics"):
        print("\n== numerics: relative L2 error vs float64 ==")
        for rec in result["numerics"]:
            for r in rec["results"]:
                if "out_rel" not in r:
                    print(f"B={rec['B']:>4} {r['variant']} {r['layout']}: error {r.get('error')}")
                    continue
                ratio = r.get("out_ratio_vs_fla")
                print(f"B={rec['B']:>4} {r['variant']:<5} M={r.get('M') or '-':>2} {r['layout']}: out {r['out_rel']:.2e} "
                      f"state {r['state_rel']:.2e}" + (f"  ours/FLA out {ratio:.2f}" if ratio else ""))
    print(f"\ncopy bandwidth {result['bandwidth_GBps']:.1f} GB/s; outputs in {result['out_dir']}")


# --------------------------------------------------------------------------------------------------------------------


def resolved_launch(s: Shape, M: int, launch) -> dict:
    """The launch options our kernel runs with at this shape (defaults with ``launch``'s overrides), for the record;
    a ``"merge"`` entry (merge-step overrides) is resolved the same way."""
    if "_stagger" in launch:
        return dict(resolved_launch(s, M, {k: v for k, v in launch.items() if k != "_stagger"}),
                    _stagger=launch["_stagger"])
    if "merge" in launch:
        base = {k: v for k, v in launch.items() if k != "merge"}
        return dict(resolved_launch(s, M, base), merge=resolved_launch(s, M, {**base, **launch["merge"]}))
    if OP.name != "gdn":
        return {k: v for k, v in launch.items() if v is not None}
    from hf_deltalog.kernels.gdn.fused_deltalog import _resolve_launch

    g = lambda k, none=0: none if launch.get(k) is None else int(launch[k])  # noqa: E731
    return _resolve_launch(s.B, s.Hk, s.HV, s.K, s.V, M - 1, g("block_v"), g("num_warps"), g("heads_per_program"),
                           g("raw_qk", -1), g("prepare_warps"))._asdict()


def tune_grid(shape_kw):
    """Launch-option combinations the sweep tries (None = the kernel's default)."""
    if OP.name != "gdn":
        return [{}] + [dict(block_v=bv, num_warps=nw) for bv in (8, 16, 32) for nw in (1, 2, 4)]
    G = shape_kw["HV"] // shape_kw["Hk"]
    grid = [{}]  # the defaults: the reference of --tune-select
    for bv, nw in ((8, 1), (16, 2), (8, 2)):
        for hpp in (1, 2) if G % 2 == 0 else (1,):
            for raw in (False, True):
                for prep in (None, 4):
                    if (bv, nw, hpp, raw, prep) == (8, 1, 1, False, None):
                        continue  # that is the default set (first entry) on the GPU shapes
                    grid.append(dict(block_v=bv, num_warps=nw, heads_per_program=hpp, raw_qk=raw, prepare_warps=prep))
    # experimental: programmatic dependent launch of the decode kernel (GPU only; its base loads overlap the prepare)
    grid += [dict(_pdl=True), dict(_pdl=True, prepare_warps=4)]
    return grid


def run_tune(ctx, args, shape_kw, l2, out_dir, result):
    """Our kernel (V-first base) under every :func:`tune_grid` option set, at --tune-batches x --tune-ms."""
    out = []
    Bs = [b for b in args.tune_batches] if not ctx["device"].type == "cpu" else [2]
    Ms = args.tune_ms if not ctx["device"].type == "cpu" else [4]
    grid = [json.loads(g) for g in args.tune_only] if args.tune_only else tune_grid(shape_kw)
    if ctx["device"].type == "cpu":
        grid = [g for g in grid if not g.get("_pdl")]
        grid = grid[:2] + grid[-1:] if len(grid) > 3 else grid  # exercise the code path only
    for B in Bs:
        s = Shape(B=B, **shape_kw)
        R = n_sets(s, l2, args.max_sets, args.min_sets)
        for M in Ms:
            for opts in grid:
                rec = dict(B=B, M=M, layout="VK", options=opts, launch=resolved_launch(s, M, opts))
                progress(f"tune B={B} M={M} {opts} ...")
                try:
                    r = bench_deltalog(ctx, s, M, True, R, opts)
                    rec.update(amortized_us=r["amortized_us"], append_mean_us=statistics.mean(r["append_us"]),
                               merge_us=r["merge_us"])
                except Exception as e:  # noqa: BLE001
                    rec.update(amortized_us=None, error=repr(e)[:300])
                out.append(rec)
            done = [r for r in out if r["B"] == B and r["M"] == M and r.get("amortized_us")]
            best = min(done, key=lambda r: r["amortized_us"], default=None)
            log(f"tune B={B} M={M}: best " + (f"{best['amortized_us']:.1f} µs {best['options']}" if best else "-"))
            result["tune"] = out
            write_outputs(out_dir, result, final=False)
    return out


def select_tuned(tune):
    """The option set with the lowest geometric mean of (its time / the default options' time) over the tuned
    (B, M) points where both ran; None if nothing ran."""
    by_opts = {}
    for r in tune:
        key = json.dumps(r["options"], sort_keys=True)
        by_opts.setdefault(key, {})[(r["B"], r["M"])] = r.get("amortized_us")
    ref = by_opts.get("{}") or next(iter(by_opts.values()))  # the default options (tune_grid's first entry)
    scores = {}
    for key, pts in by_opts.items():
        ratios = [pts[p] / ref[p] for p in pts if pts.get(p) and ref.get(p)]
        if ratios and len(ratios) == len([p for p in ref if ref.get(p)]):
            scores[key] = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    if not scores:
        return None
    return json.loads(min(scores, key=scores.get))


def parse_args(argv=None):
    # allow_abbrev=False: full option names only (an abbreviation such as --cpu for --cpu-smoke is refused), as in
    # eval/tpot.py, whose smoke defaults depend on the exact flag
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument("--out", default=None,
                   help="output folder (default eval/results/; a temporary folder with --cpu-smoke)")
    p.add_argument("--operator", choices=["gdn", "kda", "rwkv6"], default="gdn", help="the recurrence (default gdn)")
    p.add_argument("--quick", action="store_true", help="small GPU subset: B in {1, 64, 256}, M in {4, 16}")
    p.add_argument("--cpu-smoke", action="store_true", help="CPU + Triton interpreter, tiny shapes, wall-clock only")
    p.add_argument("--batches", type=int, nargs="*", default=None)
    p.add_argument("--ms", type=int, nargs="*", default=None, help="DeltaLog M values (M = 1 is always added)")
    p.add_argument("--numerics-batches", type=int, nargs="*", default=None)
    p.add_argument("--numerics-ms", type=int, nargs="*", default=None)
    p.add_argument("--rollout-steps", type=int, default=None)
    p.add_argument("--max-sets", type=int, default=128, help="cap on rotated state sets (L2 eviction)")
    p.add_argument("--min-sets", type=int, default=1,
                   help="at least this many rotated sets: with more sets, a set's log written at one step is evicted "
                        "from the L2 by the other sets' logs before its next step, as other layers do in a model "
                        "(the default count rotates by state bytes only)")
    p.add_argument("--block-v", type=int, default=None, help="override the kernel's BV")
    p.add_argument("--num-warps", type=int, default=None, help="override the kernel's num_warps")
    p.add_argument("--heads-per-program", type=int, default=None, help="GDN: override value heads per program")
    p.add_argument("--raw-qk", type=int, choices=[0, 1], default=None, help="GDN: override raw_qk")
    p.add_argument("--prepare-warps", type=int, default=None, help="GDN: override the prepare kernel's warps")
    p.add_argument("--layouts", nargs="*", default=["KV", "VK"], choices=["KV", "VK"],
                   help="base layouts of ours for M > 1 (M = 1 always runs both)")
    p.add_argument("--replayssm-wheel", default=None,
                   help="SGLang wheel holding the public ReplaySSM kernel; adds it as a baseline (GDN and KDA)")
    p.add_argument("--replayssm-ls", type=int, nargs="*", default=[8, 16], help="ReplaySSM ring lengths L")
    p.add_argument("--tune", action="store_true",
                   help="sweep launch options of ours (V-first) before the main run: GDN: BV x warps x heads per "
                        "program x raw_qk x prepare warps; KDA/RWKV6: BV x warps")
    p.add_argument("--tune-select", action="store_true",
                   help="with --tune: run the main benchmark with the sweep's best options (lowest geometric mean of "
                        "time relative to the defaults over the tuned B and M)")
    p.add_argument("--tune-batches", type=int, nargs="*", default=[64, 256])
    p.add_argument("--tune-ms", type=int, nargs="*", default=[8, 16])
    p.add_argument("--tune-only", nargs="*", default=None, metavar="JSON",
                   help="sweep only these option sets (JSON objects, e.g. '{}' '{\"_pdl\": true}') instead of the grid")
    p.add_argument("--skip-main", action="store_true",
                   help="no main benchmark (e.g. with --tune: the launch-option sweep only)")
    p.add_argument("--watchdog-s", type=float, default=0.0,
                   help="dump every thread's Python stack to stderr when no progress line came for this many seconds "
                        "(repeated), and on SIGTERM; 0 (default) = off")
    p.add_argument("--stagger", action="store_true",
                   help="start every cycle with staggered row phases, as DeltaLogCache(stagger_merges=True) does "
                        "(row r at r mod M zero entries); without it all rows start empty, as with the cache's "
                        "default (stagger_merges=False: aligned phases)")
    p.add_argument("--no-numerics", action="store_true")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile'd dense baseline")
    args = p.parse_args(argv)
    if args.min_sets < 1:
        p.error(f"--min-sets takes an integer >= 1; got {args.min_sets}")
    for name in ("batches", "ms", "numerics_batches", "numerics_ms", "tune_batches", "tune_ms", "replayssm_ls"):
        values = getattr(args, name) or []
        if any(v < 1 for v in values):
            p.error(f"--{name.replace('_', '-')} takes integers >= 1; got {values}")
    return args


def main(argv=None):
    global OP
    args = parse_args(argv)
    OP = Operator(args.operator)
    if args.cpu_smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (hf_deltalog.kernels.gdn imports it)
    start_watchdog(args.watchdog_s)
    try:
        return run(args)
    finally:
        stop_watchdog()


def run(args):
    """The benchmark (``main`` after argument parsing and the watchdog)."""
    import torch

    if args.out is None:
        import tempfile

        args.out = tempfile.mkdtemp(prefix="bench_smoke_") if args.cpu_smoke else str(REPO_ROOT / "eval" / "results")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    if args.cpu_smoke:
        device = torch.device("cpu")
        from hf_deltalog.interpreter import collapse_autotuners

        collapse_autotuners()  # FLA's baselines are autotuned: one config under the interpreter
        shape_kw = dict(Hk=4, HV=4, K=16, V=16) if OP.per_key else dict(Hk=2, HV=4, K=16, V=16)
        Bs, Ms = args.batches or [1, 2], args.ms or [2, 4]
        num_Bs, num_Ms, steps = args.numerics_batches or [2], args.numerics_ms or [2, 4], args.rollout_steps or 8
        timer, bw_bytes, l2 = CpuTimer(), 1 << 24, 1 << 20
        args.max_sets = min(args.max_sets, 2)  # exercise the rotation, keep the interpreter fast
        act_dtype = torch.bfloat16
    else:
        if not torch.cuda.is_available():
            sys.exit("no CUDA device: run on a GPU, or use --cpu-smoke")
        device = torch.device("cuda", torch.cuda.current_device())
        # GDN: Qwen3.5/3.6 heads (16 key heads, 32 value heads); KDA: Kimi-Linear's 32 heads (no GQA).
        shape_kw = dict(Hk=32, HV=32, K=128, V=128) if OP.per_key else dict(Hk=16, HV=32, K=128, V=128)
        if args.quick:
            Bs, Ms, num_Bs, steps = [1, 64, 256], [4, 16], [64], 32
        else:
            Bs, Ms, num_Bs, steps = [1, 8, 32, 64, 128, 256, 512], [2, 4, 8, 16, 32], [64, 128, 256], 128
        Bs, Ms = args.batches or Bs, args.ms or Ms
        num_Bs, steps = args.numerics_batches or num_Bs, args.rollout_steps or steps
        num_Ms = args.numerics_ms or ([8] if args.quick else [2, 8, 32])
        timer, bw_bytes = GpuTimer(), 1 << 30
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or (60 << 20)
        act_dtype = torch.bfloat16

    if args.skip_main:
        Bs = []
    import hf_deltalog.kernels.gdn as gdn

    if not gdn.HAS_TRITON:
        sys.exit(f"triton is not available: {gdn.TRITON_IMPORT_ERROR}")
    fla, fla_err = load_fla()
    ctx = dict(torch=torch, device=device, timer=timer, act_dtype=act_dtype, fla=fla, fla_error=fla_err)
    dense = dense_step_fn(torch)
    if args.no_compile:
        ctx["dense_compiled"] = None
    elif args.cpu_smoke:
        ctx["dense_compiled"] = torch.compile(dense, backend="eager")  # no C++ toolchain assumed on the CPU box
    else:
        ctx["dense_compiled"] = torch.compile(dense)

    launch = dict(block_v=args.block_v, num_warps=args.num_warps)
    if args.stagger:
        launch["_stagger"] = True
    if OP.name == "gdn":
        launch.update(heads_per_program=args.heads_per_program,
                      raw_qk=None if args.raw_qk is None else bool(args.raw_qk), prepare_warps=args.prepare_warps)
    elif any(v is not None for v in (args.heads_per_program, args.raw_qk, args.prepare_warps)):
        sys.exit("--heads-per-program, --raw-qk and --prepare-warps exist for --operator gdn only")
    if args.replayssm_wheel and OP.name != "rwkv6" and device.type == "cuda":
        ctx["replayssm"], replayssm_info = load_replayssm(args.replayssm_wheel)
    else:
        ctx["replayssm"], replayssm_info = None, ("not requested" if not args.replayssm_wheel else
                                                  "GPU only, GDN/KDA only")
    result = dict(
        env=environment(ctx), mode="cpu-smoke" if args.cpu_smoke else ("quick" if args.quick else "full"),
        shape=dict(shape_kw, state_dtype="float32", act_dtype=str(act_dtype)), batches=Bs, Ms=Ms, rows=[],
        out_dir=str(out_dir), fla_available=fla is not None, replayssm=replayssm_info,
        kernel_overrides=dict(launch),
    )
    if fla is None:
        log(f"FLA: not available ({fla_err})")
    log(f"ReplaySSM: {replayssm_info}")
    bw = measure_bandwidth(ctx, bw_bytes)
    result["bandwidth_GBps"] = bw / 1e9
    log(f"copy bandwidth {bw / 1e9:.1f} GB/s ({bw_bytes} B copy, read + write)")

    if args.tune:
        result["tune"] = run_tune(ctx, args, shape_kw, l2, out_dir, result)
        if args.tune_select:
            best = select_tuned(result["tune"])
            if best is not None:
                launch.update(best)
                result["kernel_overrides"] = dict(launch, selected_by_tune=True)
                log(f"tune: selected {best}")

    ctx["launch"] = launch
    rows = result["rows"]
    for B in Bs:
        s = Shape(B=B, **shape_kw)
        R = n_sets(s, l2, args.max_sets, args.min_sets)
        dense_floor = dense_bytes(s) / bw * 1e6
        log(f"B={B}: {R} rotated set(s), state {s.state_bytes / 2**20:.1f} MiB, dense floor {dense_floor:.2f} µs")
        for v_first, name in ((True, "fla_vfirst"), (False, "fla_kfirst")):
            row = dict(B=B, variant=name, layout="VK" if v_first else "KV", M=None, sets=R, floor_us=dense_floor)
            if fla is None:
                row.update(amortized_us=None, note="not available")
            else:
                progress(f"B={B}: {name} ...")
                try:
                    row.update(bench_fla(ctx, s, v_first, R))
                except Exception as e:  # noqa: BLE001
                    row.update(amortized_us=None, note=f"failed: {e!r}"[:300])
            rows.append(row)
        row = dict(B=B, variant="dense_compiled", layout="KV", M=None, sets=R, floor_us=dense_floor)
        if ctx["dense_compiled"] is None:
            row.update(amortized_us=None, note="skipped (--no-compile)")
        else:
            progress(f"B={B}: dense_compiled ...")
            try:
                row.update(bench_dense_compiled(ctx, s, R))
            except Exception as e:  # noqa: BLE001
                row.update(amortized_us=None, note=f"failed: {e!r}"[:300])
        rows.append(row)
        if ctx["replayssm"] is not None:
            for L in args.replayssm_ls:
                row = dict(B=B, variant="replayssm", layout="VK", M=L, sets=R,
                           floor_us=deltalog_cycle_bytes(s, L) / bw * 1e6)
                progress(f"B={B}: replayssm L={L} ...")
                try:
                    r = bench_replayssm(ctx, s, L, R)
                    row.update(r, append_mean_us=statistics.mean(r["append_us"]) if r["append_us"] else None)
                except Exception as e:  # noqa: BLE001
                    row.update(amortized_us=None, note=f"failed: {e!r}"[:300])
                rows.append(row)
        for M in [1] + [m for m in Ms if m != 1]:
            for v_first in (False, True):
                if M > 1 and ("VK" if v_first else "KV") not in args.layouts:
                    continue
                floor = (dense_bytes(s) if M == 1 else deltalog_cycle_bytes(s, M)) / bw * 1e6
                row = dict(B=B, variant="deltalog", layout="VK" if v_first else "KV", M=M, sets=R, floor_us=floor,
                           launch=resolved_launch(s, M, launch),
                           phase_floor_us=[deltalog_phase_bytes(s, M, c) / bw * 1e6 for c in range(M)])
                progress(f"B={B}: deltalog M={M} {row['layout']} ...")
                try:
                    r = bench_deltalog(ctx, s, M, v_first, R, launch)
                    row.update(r, append_first_us=r["append_us"][0] if r["append_us"] else None,
                               append_last_us=r["append_us"][-1] if r["append_us"] else None,
                               append_mean_us=statistics.mean(r["append_us"]) if r["append_us"] else None)
                except Exception as e:  # noqa: BLE001
                    row.update(amortized_us=None, note=f"failed: {e!r}"[:300])
                rows.append(row)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        for r in rows:
            if r["B"] == B and r.get("amortized_us"):
                r["floor_fraction"] = r["floor_us"] / r["amortized_us"]
        brief = ", ".join(
            f"{r['variant']}{'' if r['M'] is None else ' M=%d' % r['M']} {r.get('layout', '')} "
            f"{r['amortized_us']:.1f}" for r in rows if r["B"] == B and r.get("amortized_us") is not None
        )
        log(f"B={B}: {brief}")
        add_speedups(rows)
        result["policy"] = policy(rows, Bs)
        write_outputs(out_dir, result, final=False)

    if not args.no_numerics:
        result["numerics"] = []
        for B in num_Bs:
            progress(f"numerics B={B} ({steps} steps, M in {num_Ms}) ...")
            t0 = time.perf_counter()
            result["numerics"].append(rollout_numerics(ctx, B, steps, num_Ms, shape_kw))
            log(f"numerics B={B} ({steps} steps) in {time.perf_counter() - t0:.1f} s")
            write_outputs(out_dir, result, final=False)

    result["wall_s"] = time.perf_counter() - t_start
    write_outputs(out_dir, result, final=True)
    (out_dir / f"bench_{OP.name}_decode.json").write_text(json.dumps(result, indent=1, default=str))
    print_table(result)
    failed = [r for r in result["rows"] if r["variant"] == "deltalog" and r.get("amortized_us") is None]
    if failed:  # our own kernel must run; a missing baseline (FLA not installed) is only reported
        sys.exit(f"{len(failed)} DeltaLog configuration(s) failed: {failed[0].get('note')}")
    return result


if __name__ == "__main__":
    main()
