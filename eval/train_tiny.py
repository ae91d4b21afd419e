"""Train the tiny tiny-shakespeare checkpoints: a Qwen3.5-architecture GDN hybrid, a Kimi-Linear-architecture KDA
hybrid and flash-linear-attention's RWKV6.

Every model has real linear-attention head sizes (K = V = 128): GDN with 2 key heads and 4 value heads (HV != Hk)
in 3 of 4 layers, KDA with 2 heads in 3 of 4 layers (the 4th layer is softmax attention in both), RWKV6 with 2
heads in all 4 layers; hidden size 256, a 2,048-token byte-level BPE vocabulary trained on the training split
(`eval/shakespeare.py`), tied embeddings. Training samples random 256-token windows of the training split, AdamW with
a warmup and a cosine decay over `--max-steps` or `--time-budget` (whichever ends first), bf16 autocast on CUDA and
fp32 on the CPU, and keeps the weights of the best validation loss. It then measures the test-split perplexity
(sliding windows of 512 tokens, stride 256) against unigram models of the same tokens and writes a normal
`from_pretrained` directory: config, bf16 safetensors, tokenizer, `training_log.json` (loss curve, perplexities,
device, time) and `loss_curve.png` (when matplotlib is installed; otherwise draw it later with `plot`).

    python eval/train_tiny.py train --model gdn [--out eval/checkpoints/gdn-shakespeare] [--time-budget 120]
    python eval/train_tiny.py train --model kda --smoke --out /tmp/kda-smoke      # a few CPU steps (tests)
    python eval/train_tiny.py plot eval/checkpoints/gdn-shakespeare                # PNG from training_log.json

An output folder that already holds a checkpoint (the committed ones under eval/checkpoints/ included) is refused
unless `--force` is given; `--smoke` without `--out` writes to a new temporary folder. `--smoke` sets the defaults of
the size options (`SMOKE`); those given explicitly win (`--smoke --max-steps 8`: 8 steps).

The RWKV6 model is flash-linear-attention's (`fla.models.RWKV6ForCausalLM`; the package must be installed). By
default (`--rwkv6-kernels torch`) it trains and is scored through FLA's own PyTorch references of its Triton ops (the
recurrence `naive_recurrent_rwkv6`, `token_shift_ref`, `layer_norm_ref`, `group_norm_ref`, torch's activations: see
`rwkv6_kernels`), on
the CPU and on a GPU alike: FLA's Triton kernels cannot run on a CPU outside the interpreter (minutes per step there),
and on the H200's Triton 3.6 their first training step, mostly compilation, did not end within 180 s.
`--rwkv6-kernels fla` keeps FLA's kernels. The checkpoint is the same model class either way, and decodes through
FLA's kernels once loaded normally.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # hf_deltalog from this checkout when it is not installed
import shakespeare  # noqa: E402
from cli_types import non_negative_float, positive_float, positive_int  # noqa: E402

from hf_deltalog.interpreter import collapse_autotuners, fused_recurrent_under_interpreter  # noqa: E402
from hf_deltalog.lm_eval_cli import device_problem, output_problem  # noqa: E402

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
CHECKPOINT_FILES = ("config.json", "model.safetensors", "training_log.json")  # what a written checkpoint holds
MODELS = ("gdn", "kda", "rwkv6")
VOCAB = 2048
HIDDEN = 256
LAYERS = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]
# --smoke's defaults (options given explicitly win)
SMOKE = {"max_steps": 4, "batch_size": 2, "seq_len": 64, "eval_every": 2, "log_every": 1, "warmup": 2, "val_windows": 2,
         "test_tokens": 256}


def model_config(name: str, tokenizer) -> transformers.PretrainedConfig:
    """The architecture of checkpoint `name` (see the module docstring)."""
    special = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                   eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True)
    if name == "gdn":
        return transformers.Qwen3_5TextConfig(
            **special, hidden_size=HIDDEN, intermediate_size=512, num_hidden_layers=4, layer_types=LAYERS,
            num_attention_heads=2, num_key_value_heads=1, head_dim=128, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
            max_position_embeddings=2048)
    if name == "kda":
        return transformers.KimiLinearConfig(
            **special, hidden_size=HIDDEN, intermediate_size=512, num_hidden_layers=4, layer_types=LAYERS,
            mlp_layer_types=["dense"] * 4, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=None,
            kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=128, linear_num_heads=2,
            linear_head_dim=128, linear_conv_kernel_dim=4, max_position_embeddings=2048)
    if name == "rwkv6":
        try:
            from fla.models import RWKV6Config
        except ImportError as e:
            raise SystemExit(f"--model rwkv6 needs flash-linear-attention (fla.models.RWKV6Config): {e}") from e
        return RWKV6Config(**special, hidden_size=HIDDEN, num_hidden_layers=4, num_heads=2, expand_k=1.0,
                           expand_v=1.0, hidden_ratio=3.0, max_position_embeddings=2048, fuse_cross_entropy=False)
    raise ValueError(f"unknown model {name!r}; expected one of {MODELS}")


def _rwkv6_torch(r, k, v, w, u, scale=1.0, initial_state=None, output_final_state=False, cu_seqlens=None, **kw):
    """FLA's `fused_recurrent_rwkv6` / `chunk_rwkv6` signature (`[B, T, H, K]` inputs, `w` the log decay) computed by
    FLA's PyTorch recurrence `naive_recurrent_rwkv6` (`[B, H, T, K]` inputs, fp32 inside, output in `r`'s dtype)."""
    from fla.ops.rwkv6.recurrent_naive import naive_recurrent_rwkv6

    if cu_seqlens is not None or kw.get("reverse"):
        raise NotImplementedError("the PyTorch RWKV6 recurrence takes neither cu_seqlens nor reverse")
    o, state = naive_recurrent_rwkv6(*(x.transpose(1, 2) for x in (r, k, v, w)), u, scale=scale,
                                     initial_state=initial_state, output_final_state=output_final_state)
    return o.transpose(1, 2), state


def _norm_torch(ref):
    """FLA's fused `layer_norm` / `group_norm` signature computed by its PyTorch reference `ref`."""
    def norm(x, weight, bias, residual=None, eps=1e-5, prenorm=False, residual_in_fp32=False, is_rms_norm=False,
             num_groups=None):
        if residual_in_fp32:
            raise NotImplementedError("the PyTorch norm reference keeps the residual in x's dtype")
        if num_groups is None:
            if is_rms_norm:
                raise NotImplementedError("layer_norm(is_rms_norm=True)")
            return ref(x, weight, bias, residual=residual, eps=eps, prenorm=prenorm)
        return ref(x, weight, bias, num_groups, residual=residual, eps=eps, is_rms_norm=is_rms_norm, prenorm=prenorm)
    return norm


@contextlib.contextmanager
def rwkv6_kernels(kind: str):
    """Within the block FLA's RWKV6 model runs `kind`: "fla" (its Triton kernels, unchanged) or "torch": FLA's own
    PyTorch references in place of every Triton op the model calls (the recurrence: `naive_recurrent_rwkv6`; the token
    shift: `token_shift_ref`; the fused layer and group norms: `layer_norm_ref`, `group_norm_ref`; the swish and
    squared-ReLU activations: torch's), bound in the namespaces that call them (the activations in `ACT2FN`, for
    the layers built inside the block) and put back on exit. Same math, other kernels; the weights are the same model's."""
    if kind not in ("torch", "fla"):
        raise ValueError(f"rwkv6 kernels {kind!r}: expected 'torch' or 'fla'")
    if kind == "fla":
        yield
        return
    import fla.layers.rwkv6 as layer
    import fla.models.rwkv6.modeling_rwkv6 as modeling
    import fla.modules.norm.layernorm as norms
    from fla.modules.token_shift import token_shift_ref

    from fla.modules.activations import ACT2FN

    swaps = [(layer, "fused_recurrent_rwkv6", _rwkv6_torch), (layer, "chunk_rwkv6", _rwkv6_torch),
             (layer, "token_shift", token_shift_ref), (modeling, "token_shift", token_shift_ref),
             (norms, "layer_norm", _norm_torch(norms.layer_norm_ref)),
             (norms, "group_norm", _norm_torch(norms.group_norm_ref))]
    # The activations are looked up when a layer is built (FLA's Triton swish and squared ReLU)
    acts = {"swish": F.silu, "sqrelu": lambda x: F.relu(x).square()}
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in swaps]
    saved_acts = {name: ACT2FN[name] for name in acts}
    for mod, name, fn in swaps:
        setattr(mod, name, fn)
    ACT2FN.update(acts)
    try:
        yield
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
        ACT2FN.update(saved_acts)


def windows(ids: torch.Tensor, length: int) -> torch.Tensor:
    """Non-overlapping windows `[N, length]` of a 1-D token tensor (the tail that does not fill one is dropped)."""
    n = (ids.numel() // length) * length
    return ids[:n].view(-1, length)


def lm_loss(model, batch: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (fp32) of a `[B, T]` batch."""
    logits = model(input_ids=batch[:, :-1]).logits
    return F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())


@torch.no_grad()
def mean_loss(model, data: torch.Tensor, batch_size: int, autocast: bool) -> float:
    model.eval()
    total, count = 0.0, 0
    for i in range(0, data.shape[0], batch_size):
        chunk = data[i:i + batch_size]
        with torch.autocast(chunk.device.type, dtype=torch.bfloat16, enabled=autocast):
            total += lm_loss(model, chunk).item() * chunk.shape[0]
        count += chunk.shape[0]
    model.train()
    return total / count


@torch.no_grad()
def perplexity(model, ids: torch.Tensor, window: int = 512, stride: int = 256, batch_size: int = 16) -> float:
    """exp(mean NLL) of every token of `ids` after the first, each scored once with at least `window - stride` tokens
    of context (or all before it): sliding windows of `window` tokens moved by `stride`, fp32 log-softmax."""
    model.eval()
    starts = list(range(0, max(ids.numel() - window, 0) + stride, stride))
    nll, count = 0.0, 0
    for i in range(0, len(starts), batch_size):
        group = starts[i:i + batch_size]
        rows = [ids[s:s + window] for s in group]
        width = max(r.numel() for r in rows)
        batch = torch.stack([F.pad(r, (0, width - r.numel())) for r in rows])
        logp = model(input_ids=batch).logits.float().log_softmax(-1)
        for row, (s, r) in enumerate(zip(group, rows)):
            first = 1 if s == 0 else window - stride  # positions scored by this window (targets r[first:])
            if first >= r.numel():
                continue
            target = r[first:]
            nll -= logp[row, first - 1:r.numel() - 1].gather(-1, target[:, None]).sum().item()
            count += target.numel()
    return math.exp(nll / count)


def train(args) -> Path:
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    parts = shakespeare.split()
    tokenizer = shakespeare.train_tokenizer(parts["train"], VOCAB)
    ids = {k: torch.tensor(tokenizer(v)["input_ids"]) for k, v in parts.items()}
    config = model_config(args.model, tokenizer)  # (for rwkv6 this imports fla.models, registering it with Auto*)
    log = dict(model=args.model, steps=[], train_loss=[], lr=[], val=[])
    offset_steps, offset_seconds = 0, 0.0
    if args.init:  # continue from a checkpoint this script wrote (same model, same tokenizer)
        prev = json.loads((args.init / "training_log.json").read_text())
        saved_tok = json.loads((args.init / "tokenizer.json").read_text())["model"]
        if prev["model"] != args.model or saved_tok != json.loads(tokenizer.backend_tokenizer.to_str())["model"]:
            raise SystemExit(f"--init {args.init}: not a {args.model} checkpoint with this tokenizer")
        model = transformers.AutoModelForCausalLM.from_pretrained(args.init, dtype=torch.float32).to(device).train()
        log.update({k: prev[k] for k in ("steps", "train_loss", "lr", "val")})
        log["resumed"] = prev.get("resumed", []) + [dict(at_step=prev["steps_run"], previous_args=prev["args"])]
        offset_steps, offset_seconds = prev["steps_run"], prev["train_seconds"]
    else:
        model = transformers.AutoModelForCausalLM.from_config(config).to(device).train()
    fused_recurrent_under_interpreter(model)  # CPU runs of FLA's RWKV6 only (see hf_deltalog.interpreter)
    n_params = sum(p.numel() for p in model.parameters())
    autocast = device.type == "cuda"
    train_ids = ids["train"].to(device)
    val = windows(ids["validation"], args.seq_len + 1)[:args.val_windows].to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay)
    g = torch.Generator(device="cpu").manual_seed(args.seed + offset_steps)  # new windows after a resume

    best = (math.inf, 0, None)
    if args.init:
        best = (mean_loss(model, val, args.batch_size, autocast), offset_steps, copy.deepcopy(model.state_dict()))
    t0 = time.perf_counter()
    clock = t0  # the schedule's clock: restarted after the first step, whose time is mostly kernel compilation
    first_step_seconds = None
    stalls = 0
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm comes with transformers; this only guards a stripped environment
        tqdm = None
    bar = tqdm(total=args.max_steps, desc=f"train {args.model}", dynamic_ncols=True) if tqdm else None
    step = 0
    while step < args.max_steps:
        elapsed = time.perf_counter() - clock
        progress = max(step / args.max_steps, elapsed / args.time_budget)
        if progress >= 1:
            break
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in opt.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, train_ids.numel() - args.seq_len - 1, (args.batch_size,), generator=g)
        batch = torch.stack([train_ids[s:s + args.seq_len + 1] for s in starts.tolist()])
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss = lm_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step == 1:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            clock = time.perf_counter()
            first_step_seconds = clock - t0
        if step % args.log_every == 0 or step == 1:
            log["steps"].append(offset_steps + step)
            log["train_loss"].append(loss.item())
            log["lr"].append(lr)
        if step % args.eval_every == 0:
            v = mean_loss(model, val, args.batch_size, autocast)
            log["val"].append([offset_steps + step, v, offset_seconds + time.perf_counter() - t0])
            if v < best[0]:
                best, stalls = (v, offset_steps + step, copy.deepcopy(model.state_dict())), 0
            else:
                stalls += 1
            if bar:
                bar.set_postfix(loss=f"{loss.item():.3f}", val=f"{v:.3f}", best=f"{best[0]:.3f}@{best[1]}")
            if stalls >= args.patience:
                break
        if bar:
            bar.update(1)
    if bar:
        bar.close()
    train_seconds = offset_seconds + time.perf_counter() - t0
    step += offset_steps
    if not log["val"] or log["val"][-1][0] != step:  # a final evaluation at the last step
        v = mean_loss(model, val, args.batch_size, autocast)
        log["val"].append([step, v, train_seconds])
        if v < best[0]:
            best = (v, step, copy.deepcopy(model.state_dict()))
    model.load_state_dict(best[2])

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    # The test perplexity of the checkpoint as saved (bf16 weights), computed in fp32.
    saved = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).to(device)
    fused_recurrent_under_interpreter(saved)
    with torch.autocast(device.type, enabled=False):
        test_ids = ids["test"][:args.test_tokens] if args.test_tokens else ids["test"]
        test_ppl = perplexity(saved, test_ids.to(device))
    unigram = shakespeare.unigram_perplexities(ids["train"].tolist(), test_ids.tolist(), len(tokenizer))
    log.update(
        architecture=config.model_type, parameters=n_params, device=str(device),
        device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        precision="bf16 autocast, fp32 master weights" if autocast else "fp32", saved_dtype="bfloat16",
        train_seconds=train_seconds, first_step_seconds=first_step_seconds, steps_run=step, best_step=best[1],
        best_val_loss=best[0],
        test_tokens=int(test_ids.numel()), test_perplexity=test_ppl, unigram_perplexity=unigram,
        test_ppl_over_unigram=test_ppl / unigram["test_fit"], meets_half_unigram=test_ppl <= unigram["test_fit"] / 2,
        args={k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        versions=dict(torch=torch.__version__, transformers=transformers.__version__, python=platform.python_version()),
        split=dict(fractions=list(shakespeare.FRACTIONS), corpus_sha256=shakespeare.TEXT_SHA256,
                   tokens={k: int(v.numel()) for k, v in ids.items()}),
    )
    (out / "training_log.json").write_text(json.dumps(log, indent=1) + "\n")
    plot(out)
    print(f"{args.model}: {n_params / 1e6:.2f} M parameters, {step} steps in {train_seconds:.0f} s on {device}, "
          f"best validation loss {best[0]:.3f} at step {best[1]}")
    print(f"{args.model}: test perplexity {test_ppl:.1f}; unigram {unigram['test_fit']:.1f} (fit on the test tokens), "
          f"{unigram['train_add_one']:.1f} (training counts, add-one); ratio {test_ppl / unigram['test_fit']:.3f}")
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"wrote {out} ({size / 2**20:.1f} MiB)")
    return out


def plot(out: Path) -> Path | None:
    """`loss_curve.png` from `training_log.json` in `out`; None (with a note) when matplotlib is not installed."""
    log = json.loads((Path(out) / "training_log.json").read_text())
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no loss_curve.png (run `python eval/train_tiny.py plot DIR` later)")
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    ax.plot(log["steps"], log["train_loss"], lw=1, label="train (one batch)")
    if log["val"]:
        steps, losses = zip(*[(s, v) for s, v, *_ in log["val"]])
        ax.plot(steps, losses, "o-", ms=3, label="validation")
    if "best_step" in log:
        ax.axvline(log["best_step"], color="gray", ls=":", lw=1, label=f"kept (step {log['best_step']})")
    title = f"{log['model']} ({log.get('architecture', '')}, {log.get('parameters', 0) / 1e6:.1f} M params)"
    if "test_perplexity" in log:
        title += (f"\ntest ppl {log['test_perplexity']:.1f} vs unigram {log['unigram_perplexity']['test_fit']:.1f}"
                  f"; {log['device']}, {log['train_seconds']:.0f} s")
    ax.set(xlabel="step", ylabel="cross-entropy (nats / token)", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(out) / "loss_curve.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def hide_fla() -> None:
    """Make transformers build its GDN / KDA layers without flash-linear-attention (its PyTorch chunked recurrences):
    transformers binds FLA's kernels when a modeling module is first imported, so this runs before any model class
    is touched. The weights are the same either way; only the kernels that train them differ."""
    if "fla" in sys.modules and sys.modules["fla"] is None:
        return  # hidden already (the test suite hides it the same way)
    if any(name == "fla" or name.startswith("fla.") for name in sys.modules):
        raise RuntimeError("flash-linear-attention was imported before hide_fla(); call it first")
    sys.modules["fla"] = None  # `import fla` raises ImportError; transformers' availability check says False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train one checkpoint")
    t.add_argument("--model", choices=MODELS, required=True)
    t.add_argument("--out", type=Path,
                   help="output directory (default: eval/checkpoints/<model>-shakespeare; with --smoke a new "
                        "temporary folder)")
    t.add_argument("--force", action="store_true",
                   help="overwrite a checkpoint already in the output folder (refused without it)")
    t.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    t.add_argument("--max-steps", type=positive_int, default=20000)
    t.add_argument("--time-budget", type=positive_float, default=240.0,
                   help="seconds of training after the first step (the schedule follows it; the first step, mostly "
                        "Triton compilation on a GPU, is timed apart as first_step_seconds)")
    t.add_argument("--batch-size", type=positive_int, default=None, help="default: 64 on CUDA, 16 on the CPU")
    t.add_argument("--seq-len", type=positive_int, default=256)
    t.add_argument("--lr", type=positive_float, default=3e-3)
    t.add_argument("--weight-decay", type=non_negative_float, default=0.1)
    t.add_argument("--warmup", type=positive_int, default=100, help="steps of linear warmup (1: none)")
    t.add_argument("--eval-every", type=positive_int, default=100)
    t.add_argument("--log-every", type=positive_int, default=10)
    t.add_argument("--val-windows", type=positive_int, default=64)
    t.add_argument("--patience", type=positive_int, default=5,
                   help="stop after this many evaluations without improvement")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--test-tokens", type=positive_int, default=None,
                   help="score only the first N test tokens (default: all)")
    t.add_argument("--init", type=Path, default=None,
                   help="continue from a checkpoint this script wrote (its curve is kept; a new warmup and decay)")
    t.add_argument("--smoke", action="store_true",
                   help="a few tiny steps (CPU tests): the defaults become " + " ".join(
                       f"--{k.replace('_', '-')} {v}" for k, v in SMOKE.items()) + " (4 steps of batch 2 x 64); "
                   "options given explicitly win")
    t.add_argument("--rwkv6-kernels", choices=("torch", "fla"), default="torch",
                   help="rwkv6 only: FLA's PyTorch references (torch, the default) or its Triton kernels (fla); "
                        "see the module docstring")
    t.add_argument("--fla", choices=("auto", "yes", "no"), default="auto",
                   help="build the GDN / KDA layers with flash-linear-attention's kernels (yes) or with transformers' "
                        "own PyTorch recurrences (no). auto: no for gdn and kda (FLA 0.6.0 refuses its gated chunked "
                        "backward on Hopper GPUs under Triton < 3.7.1, the H200 machine's 3.6.0: "
                        "eval/results/h200/lm_eval_parity/train_logs/), yes for rwkv6 (an FLA model)")
    p = sub.add_parser("plot", help="draw loss_curve.png from a checkpoint's training_log.json")
    p.add_argument("dir", type=Path)
    if getattr(parser.parse_known_args(argv)[0], "smoke", False):  # smoke defaults; explicit options still win
        t.set_defaults(**SMOKE)
    args = parser.parse_args(argv)
    if args.command == "plot" and not (args.dir / "training_log.json").is_file():
        p.error(f"{args.dir}: no training_log.json there; plot takes a checkpoint folder written by `train` (e.g. "
                "eval/checkpoints/gdn-shakespeare)")
    if args.command == "train":
        problem = device_problem(args.device)
        if problem:
            t.error(f"--device {problem}")
        missing = [n for n in ("config.json", "training_log.json", "tokenizer.json")
                   if args.init is not None and not (args.init / n).is_file()]
        if missing:
            t.error(f"--init {args.init}: not a checkpoint folder this script wrote (no {', '.join(missing)} there)")
    if args.command == "train" and (args.fla == "no" or (args.fla == "auto" and args.model != "rwkv6")):
        if args.model == "rwkv6":
            raise SystemExit("--model rwkv6 is flash-linear-attention's model: it cannot train with --fla no")
        hide_fla()
    transformers.logging.set_verbosity_error()  # not the "reference implementation" notes of every CPU layer
    collapse_autotuners()  # only under TRITON_INTERPRET=1 (a CPU run of FLA's kernels); nothing on a GPU
    if args.command == "plot":
        print(plot(args.dir))
        return
    if args.batch_size is None:
        args.batch_size = 64 if args.device.startswith("cuda") else 16
    if args.out is None and args.smoke:  # never the committed checkpoint: a smoke run's weights are not a checkpoint
        import tempfile

        args.out = Path(tempfile.mkdtemp(prefix=f"train_tiny_{args.model}_smoke_"))
        print(f"--smoke without --out: writing to a new temporary folder, {args.out}")
    elif args.out is None:
        args.out = CHECKPOINTS / f"{args.model}-shakespeare"
    if args.out.exists() and not args.out.is_dir():
        t.error(f"--out {args.out} is a file; it takes a folder (a new one, or one holding a checkpoint to replace "
                "with --force)")
    existing = [name for name in CHECKPOINT_FILES if (args.out / name).exists()]
    if existing and not args.force:
        t.error(f"{args.out} already holds a checkpoint ({', '.join(existing)}); refusing to overwrite it: pass "
                "--force to replace it, or --out a new folder")
    problem = output_problem(args.out)  # the checkpoint is written after the training: find out now
    if problem:
        t.error(f"--out {problem}")
    with rwkv6_kernels(args.rwkv6_kernels if args.model == "rwkv6" else "fla"):
        train(args)


if __name__ == "__main__":
    main()
