"""How far bf16 alone moves lm-eval log-likelihoods: the same requests scored three ways on one checkpoint.

    A  cached decoding with the default cache   (the parity baseline: `CachedHFLM(cache="default")`)
    B  cached decoding with DeltaLogCache       (`CachedHFLM(cache="deltalog")`, the family's M forced)
    C  HFLM's own scoring: one full forward     (upstream lm-eval, no cache)

A and C compute the same numbers with the same model and the default kernels; they differ only in how the
sequence is split into forwards, i.e. in rounding. max |A − C| is the resolution of bf16 scoring itself, the scale
against which max |A − B| (what eval/lm_eval_parity.py reports) should be read.

    python eval/bf16_loglikelihood_control.py --docs 30 --out eval/results/lm_eval_parity/bf16_control_cpu.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from cli_types import positive_int
from lm_eval.models.huggingface import HFLM  # noqa: E402

from hf_deltalog.harness import CachedHFLM  # noqa: E402
from hf_deltalog.interpreter import hide_fla_on_cpu  # noqa: E402
from hf_deltalog.lm_eval_cli import device_problem, output_problem  # noqa: E402

CHECKPOINTS = {"gdn-shakespeare": 8, "kda-shakespeare": 4}


def requests(lm, docs):
    out = []
    for d in docs:
        ctx = lm.tok_encode(d["context"])
        for choice in d["choices"]:
            out.append((("", choice), ctx, lm.tok_encode(choice)))
    return out


def median_abs(x: torch.Tensor) -> float:
    """The median of ``|x|``: for an even count the mean of the two middle values (``statistics.median``;
    ``torch.Tensor.median`` returns the lower of the two)."""
    return float(statistics.median(x.abs().tolist()))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=positive_int, default=30,
                   help="score the first N documents of the test split (at least 1; more than there are: all)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu or cuda (cuda:N)")
    p.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    a = p.parse_args(argv)
    problem = device_problem(a.device)
    if problem:
        p.error(f"--device {problem}")
    problem = output_problem(a.out, folder=False)  # written after both checkpoints were scored
    if problem:
        p.error(f"--out {problem}")
    hide_fla_on_cpu(a.device)  # both checkpoints are transformers models (see hf_deltalog.interpreter)
    docs = [json.loads(line) for line in (HERE / "tasks" / "shakespeare" / "shakespeare_test.jsonl").open()][:a.docs]
    rows = {}
    for name, M in CHECKPOINTS.items():
        t0 = time.perf_counter()
        lm = CachedHFLM(pretrained=str(HERE / "checkpoints" / name), device=a.device, dtype=a.dtype, batch_size=8,
                        cache="deltalog", merge_interval=M)
        reqs = requests(lm, docs)
        lm.cache = "default"
        A = torch.tensor([s for s, _ in lm._loglikelihood_tokens(reqs, disable_tqdm=True)], dtype=torch.float64)
        lm.cache = "deltalog"
        B = torch.tensor([s for s, _ in lm._loglikelihood_tokens(reqs, disable_tqdm=True)], dtype=torch.float64)
        C = torch.tensor([s for s, _ in HFLM._loglikelihood_tokens(lm, reqs, disable_tqdm=True)], dtype=torch.float64)
        rows[name] = dict(requests=len(reqs), merge_interval=M, max_abs_A_minus_B=float((A - B).abs().max()),
                          max_abs_A_minus_C=float((A - C).abs().max()), max_abs_B_minus_C=float((B - C).abs().max()),
                          median_abs_A_minus_B=median_abs(A - B), median_abs_A_minus_C=median_abs(A - C),
                          seconds=round(time.perf_counter() - t0, 1))
        print(name, rows[name], flush=True)
    meta = dict(dtype=a.dtype, device=a.device, docs=a.docs, torch=torch.__version__)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(dict(meta=meta, checkpoints=rows), indent=1) + "\n")


if __name__ == "__main__":
    main()
