"""Two-GPU check: a checkpoint dispatched over two GPUs by accelerate (``device_map="auto"``), decoded with
DeltaLogCache and with transformers' default cache.

For each checkpoint and dtype: load with ``device_map="auto"`` and a ``max_memory`` that leaves GPU 0 room for the
embedding and half of the decoder layers (so accelerate puts the other half on GPU 1; an explicit map of the same split
if it does not), decode a batch of test-split prompts greedily (``model.generate``) with the default cache and with
``DeltaLogCache(model, merge_interval=M)`` (M forced to the family's default so the log and the Triton kernel run:
these layers are small enough that the default policy would decode them densely), and once more through the static
mode (``DeltaLogCache(model, static=True, ...)`` driven by :func:`hf_deltalog.graph.graph_generate` with
``capture=False``: a captured graph covers one device). Reports, per run: the layer → device map, whether every
DeltaLog layer's tensors (base, log, lengths, conv state, workspace) live on the device of the layer that owns them, the share of identical
tokens, the largest |Δlogit| over the decoded steps, and the default cache's top-2 logit margin where tokens part.

    python eval/multi_gpu_check.py --out eval/results/h200/multi_gpu/multi_gpu_check.json
    python eval/multi_gpu_check.py --smoke --out /tmp/mgpu.json    # CPU, one device: checks the script end to end
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import torch
import transformers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from hf_deltalog import DeltaLogCache  # noqa: E402
from hf_deltalog.graph import graph_generate  # noqa: E402
from hf_deltalog.interpreter import hide_fla_on_cpu  # noqa: E402

CHECKPOINTS = {"gdn": (HERE / "checkpoints" / "gdn-shakespeare", 8),
               "kda": (HERE / "checkpoints" / "kda-shakespeare", 4)}


def prompts(tokenizer, batch: int, length: int, seed: int = 0) -> torch.Tensor:
    """``[batch, length]`` int64 windows of the test split (deterministic)."""
    import shakespeare

    ids = tokenizer(shakespeare.split()["test"])["input_ids"]
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(ids) - length, (batch,), generator=g).tolist()
    return torch.tensor([ids[s:s + length] for s in starts], dtype=torch.long)


def load(path: Path, dtype: torch.dtype, smoke: bool):
    if smoke:
        return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval(), "none (CPU smoke)"
    probe = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype)

    def nbytes(module):
        return sum(p.numel() * p.element_size() for p in module.parameters())

    # GPU 0 gets room for the embedding (and the tied output head) plus the first half of the decoder layers, so
    # accelerate's "auto" placement must put the second half on GPU 1.
    layers = probe.model.layers
    budget0 = nbytes(probe.model.embed_tokens) + sum(nbytes(layer) for layer in layers[:len(layers) // 2])
    half, n, tied = len(layers) // 2, len(layers), probe.config.get_text_config().tie_word_embeddings
    del probe
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, device_map="auto", max_memory={0: int(budget0 * 1.05), 1: 64 << 30})
    if len(set(layer_devices(model))) > 1:
        return model.eval(), "auto"
    # accelerate kept every layer together: the same dispatch with the split spelled out.
    explicit = {"model.embed_tokens": 0, "model.norm": 1, "model.rotary_emb": 1, "lm_head": 0 if tied else 1,
                **{f"model.layers.{i}": int(i >= half) for i in range(n)}}
    print(f"  device_map='auto' kept the layers on one GPU ({model.hf_device_map}); explicit map {explicit}")
    del model
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype, device_map=explicit)
    return model.eval(), "explicit"


def layer_devices(model) -> list[str]:
    return [str(next(layer.parameters()).device) for layer in model.model.layers]


def placement_ok(model, cache) -> bool:
    """Every DeltaLog layer's tensors on the device of the decoder layer that owns them."""
    owners = layer_devices(model)
    ok = True
    for layer in cache.deltalog_layers:
        want = owners[layer.layer_idx]
        for name, t in vars(layer).items():  # base, log factors, decay snapshots, lengths, conv state, workspace
            if isinstance(t, torch.Tensor) and str(t.device) != want:
                print(f"  layer {layer.layer_idx}: {name} on {t.device}, layer on {want}")
                ok = False
    return ok


def compare(ref_tokens, ref_logits, tokens, logits) -> dict:
    same = (ref_tokens == tokens)
    row = dict(identical_tokens=float(same.float().mean()), identical_rows=float(same.all(-1).float().mean()))
    if logits is not None:
        steps = min(len(ref_logits), len(logits))
        row["max_abs_dlogit"] = max(float((ref_logits[i].float() - logits[i].float()).abs().max())
                                    for i in range(steps))
    parts = (~same).any(-1).nonzero().flatten().tolist()
    margins = []
    for r in parts[:8]:
        t = int((~same[r]).nonzero()[0])
        top = ref_logits[t][r].float().topk(2).values
        margins.append(dict(row=r, step=t, default_cache_top2_margin=float(top[0] - top[1])))
    row["parted"] = margins
    return row


@torch.no_grad()
def run(name: str, dtype: torch.dtype, a) -> list[dict]:
    path, M = CHECKPOINTS[name]
    model, placement = load(path, dtype, a.smoke)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    devices = layer_devices(model)
    print(f"[{name} {dtype}] layers on {devices}; hf_device_map={getattr(model, 'hf_device_map', None)}", flush=True)
    if not a.smoke and len(set(devices)) < 2:
        raise SystemExit(f"{name}: accelerate put every layer on one device ({devices}); the check needs two")
    first = next(model.parameters()).device
    ids = prompts(tok, a.batch, a.prompt_len).to(first)
    gen = dict(max_new_tokens=a.new_tokens, do_sample=False, return_dict_in_generate=True, output_logits=True,
               pad_token_id=tok.pad_token_id)
    rows = []
    t0 = time.perf_counter()
    ref = model.generate(ids, **gen)
    ref_tokens = ref.sequences[:, ids.shape[1]:].cpu()
    ref_logits = [x.cpu() for x in ref.logits]
    for M_run in (M, None):
        cache = DeltaLogCache(model, merge_interval=M_run)
        out = model.generate(ids, past_key_values=cache, **gen)
        row = dict(checkpoint=name, dtype=str(dtype).removeprefix("torch."), mode="generate",
                   merge_interval=M_run or "default", device_map=placement, layer_devices=devices,
                   placement_ok=placement_ok(model, cache),
                   **compare(ref_tokens, ref_logits, out.sequences[:, ids.shape[1]:].cpu(),
                             [x.cpu() for x in out.logits]))
        print(f"  {row['mode']} M={row['merge_interval']}: identical {row['identical_tokens']:.4f}, max|dlogit| "
              f"{row['max_abs_dlogit']:.2e}, placement {'ok' if row['placement_ok'] else 'WRONG'}", flush=True)
        rows.append(row)
    cache = DeltaLogCache(model, merge_interval=M, static=True, max_cache_len=a.prompt_len + a.new_tokens)
    out = graph_generate(model, ids, cache=cache, max_new_tokens=a.new_tokens, capture=False,
                         pad_token_id=tok.pad_token_id)
    row = dict(checkpoint=name, dtype=str(dtype).removeprefix("torch."), mode="static, graph_generate(capture=False)",
               merge_interval=M, device_map=placement, layer_devices=devices,
               placement_ok=placement_ok(model, cache),
               **compare(ref_tokens, ref_logits, out.sequences[:, ids.shape[1]:].cpu(), None))
    print(f"  static M={M}: identical {row['identical_tokens']:.4f}, placement "
          f"{'ok' if row['placement_ok'] else 'WRONG'} ({time.perf_counter() - t0:.1f}s)", flush=True)
    rows.append(row)
    del model
    return rows


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--checkpoints", nargs="+", default=sorted(CHECKPOINTS), choices=sorted(CHECKPOINTS))
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--smoke", action="store_true", help="CPU, one device, tiny batch (checks the script)")
    a = p.parse_args(argv)
    if a.smoke:
        a.batch, a.prompt_len, a.new_tokens = 2, 8, 5
        hide_fla_on_cpu("cpu")  # with the `fla` extra: transformers' PyTorch paths on the CPU (hf_deltalog.interpreter)
    elif torch.cuda.device_count() < 2:
        raise SystemExit(f"needs two CUDA devices; found {torch.cuda.device_count()}")
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    rows = []
    meta = dict(torch=torch.__version__, transformers=transformers.__version__,
                gpus=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
                batch=a.batch, prompt_len=a.prompt_len, new_tokens=a.new_tokens)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    for name in a.checkpoints:
        for dtype in a.dtypes:
            rows += run(name, getattr(torch, dtype), a)
            a.out.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")  # after every run
    return rows


if __name__ == "__main__":
    main()
