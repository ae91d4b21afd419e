"""Shared by eval/gpu_generate_check.py (transformers' models) and eval/gpu_generate_check_fla.py (FLA's models): the
--runs syntax, the comparison of two greedy generations, progress lines, stack dumps on SIGTERM, and the collapse of
Triton autotuners for CPU smoke runs."""

from __future__ import annotations

import contextlib
import faulthandler
import signal
import time


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def parse_runs(values, default: list[tuple[int, int | None]]) -> list[tuple[int, int | None]]:
    """``["4", "64:2"]`` -> ``[(4, None), (64, 2)]`` (batch, merge interval; None = the cache's default policy);
    empty or None -> ``default``. Raises ValueError unless every entry is ``B`` or ``B:M`` with integers >= 1."""
    if not values:
        return list(default)
    runs = []
    for v in values:
        b, sep, m = str(v).partition(":")
        try:
            run = (int(b), int(m) if sep else None)
        except ValueError:
            run = None
        if run is None or run[0] < 1 or (run[1] is not None and run[1] < 1):
            raise ValueError(f"a run is B or B:M with integers B >= 1 and M >= 1; got {v!r}")
        runs.append(run)
    return runs


def compare(out, ref, prompt: int, new_tokens: int) -> dict:
    """Greedy generations ``out`` (ours) and ``ref`` (the reference; both ``generate`` outputs with logits) of
    ``new_tokens`` tokens after a ``prompt``-token prompt: the share of identical tokens, the largest |Δlogit| while the
    tokens agree (logits are comparable only while both runs have fed the same tokens: up to the first differing step),
    the first differing step and the reference's top-1 minus top-2 logit there (largest over the rows that differ).
    ``token_agreement`` is the share of the generated tokens (not the prompt's) that are identical: positions past
    the shorter output's end (a run that stopped at EOS earlier) count as differing, padding after an EOS in both
    runs as identical."""
    import torch

    a, b = out.sequences[:, prompt:], ref.sequences[:, prompt:]
    common = min(a.shape[1], b.shape[1], new_tokens)
    first = next((i for i in range(common) if not torch.equal(a[:, i], b[:, i])), None)
    if first is None and a.shape[1] != b.shape[1]:
        first = common  # one run stopped earlier: its outputs end here
    upto = common if first is None else min(first + 1, common)
    dlogit = max((x.float() - y.float()).abs().max().item() for x, y in zip(out.logits[:upto], ref.logits[:upto]))
    margin = None
    if first is not None and first < common:
        rows = (a[:, first] != b[:, first]).nonzero()[:, 0]
        top2 = ref.logits[first][rows].float().topk(2, dim=-1).values
        margin = (top2[:, 0] - top2[:, 1]).max().item()
    agreement = (a[:, :common] == b[:, :common]).sum().item() / (a.shape[0] * max(a.shape[1], b.shape[1], 1))
    return dict(token_agreement=agreement, identical=bool(torch.equal(out.sequences, ref.sequences)),
                max_abs_logit_diff_while_tokens_agree=dlogit, first_differing_step=first,
                top2_margin_at_first_difference=margin)


@contextlib.contextmanager
def stacks_on_sigterm(enabled: bool = True):
    """While active, SIGTERM (what ``timeout`` sends) first dumps every thread's Python stack to stderr, then ends
    the process as before: a run stopped by its time limit shows where it was."""
    enabled = enabled and hasattr(signal, "SIGTERM")
    if enabled:
        faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    try:
        yield
    finally:
        if enabled:
            faulthandler.unregister(signal.SIGTERM)


def select_device(cpu_smoke: bool):
    """The device of a check: the CPU for ``--cpu-smoke`` (``TRITON_INTERPRET=1`` set by the caller; FLA's autotuners
    collapsed to one config, since the interpreter cannot time them), else CUDA; exits when neither applies."""
    import sys

    import torch

    from hf_deltalog.interpreter import collapse_autotuners

    if cpu_smoke:
        collapse_autotuners()
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    sys.exit("no CUDA device: run with --cpu-smoke on a CPU")


if __name__ == "__main__":  # a library module: say so instead of exiting silently
    import sys

    print(__doc__.strip() + "\n\nNothing to run here: run eval/gpu_generate_check.py or eval/gpu_generate_check_fla.py.",
          file=sys.stderr)
    sys.exit(0 if set(sys.argv[1:]) <= {"-h", "--help"} else 2)
