"""lm-evaluation-harness parity: every task twice, with transformers' default cache and with DeltaLogCache.

One `hf_deltalog.harness.CachedHFLM` per checkpoint runs each task with `cache="default"` and then `cache="deltalog"`
(the same object: the runs differ in the cache only). Generation and log-likelihood requests both go through cached
decoding (see the harness module). For each task it reports every metric of both runs and their difference, the
fraction of generations that are identical, the largest per-request log-likelihood difference, and, for each
generation that differs, the first step where the tokens part and both runs' top-2 logits there (a near tie of the
two best tokens, within 4 units in the last place of the run's dtype, explains a difference). A NaN score on either
side counts as an infinite difference. Writes `parity.json` and `parity.md` (a side-by-side table) to `--out`.

Tasks: the local ones under `eval/tasks/` (`shakespeare_next_line_gen`, `shakespeare_next_line_mc`), any standard
lm-eval task name whose data is available (cached or downloadable), and the tasks of `--include-path` folders (task
YAMLs of your own, as lm-eval's `--include_path` takes them; a task or group name two folders define is refused); a
task that cannot load is reported as skipped.

    python eval/lm_eval_parity.py --pretrained eval/checkpoints/gdn-shakespeare eval/checkpoints/kda-shakespeare \\
        --dtype float32 --device cpu --batch-size 16 --out eval/results/lm_eval_parity/cpu_fp32
    python eval/lm_eval_parity.py --pretrained eval/checkpoints/gdn-shakespeare --limit 4   # a quick check
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import platform
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from cli_types import deltalog_merge_interval, positive_int  # noqa: E402

LOCAL_TASKS = HERE / "tasks"
DEFAULT_TASKS = ("shakespeare_next_line_gen", "shakespeare_next_line_mc")
# every task and group the project ships (their YAML names): a failure to load one is an error, not a skipped task
LOCAL_TASK_NAMES = frozenset(p.stem for p in LOCAL_TASKS.rglob("*.yaml"))
SKIP_KEYS = ("alias", "name", "sample_len", "samples")


def _metrics(result: dict) -> dict[str, float]:
    return {k: float(v) for k, v in result.items() if k not in SKIP_KEYS and "_stderr" not in k and
            isinstance(v, (int, float))}


def _loglikelihoods(sample: dict) -> list[float]:
    """Per-request log-likelihoods of one document (loglikelihood / multiple-choice / rolling outputs)."""
    out = []
    for resp in sample["resps"]:
        for r in resp:
            if isinstance(r, (tuple, list)) and r and isinstance(r[0], (int, float)):
                out.append(float(r[0]))
            elif isinstance(r, (int, float)) and not isinstance(r, bool):
                out.append(float(r))
    return out


def _generations(sample: dict) -> list[str]:
    return [r for resp in sample["resps"] for r in resp if isinstance(r, str)]


SIGNIFICANT_BITS = {"bfloat16": 8, "float16": 11, "float32": 24}


def _near_tie_tolerance(logit: float, dtype: str = "bfloat16") -> float:
    """Four units in the last place of `logit` in the run's `dtype` (bf16 keeps 8 significant bits, fp16 11, fp32
    24): two logits of a model in that dtype closer than this are a near tie."""
    return 4 * 2.0 ** (math.floor(math.log2(max(abs(logit), 1e-30))) + 1 - SIGNIFICANT_BITS.get(dtype, 8))


def _ll_diff(p: float, q: float) -> float:
    """|p − q| for two log-likelihoods of one request; inf when either is NaN (`max` and sorting skip NaN, which would
    hide a broken score; a NaN on both sides is no agreement either)."""
    return math.inf if math.isnan(p) or math.isnan(q) else abs(p - q)


def _record_of(ids: list[int], records: list[dict]) -> dict | None:
    """The generation record of the context `ids`: the one with exactly these ids, else one as long as the longest
    record whose ids end them (HFLM's `generate_until` keeps only a context's last `max_length − max_gen_toks`
    tokens, and the records hold what the model was given); None if no record fits."""
    exact = next((r for r in records if r["context"] == ids), None)
    if exact is not None or not records:
        return exact
    # A truncated context is as long as the longest record (every truncated one has that length); a shorter record
    # whose ids end these is another context's (66th review)
    longest = max(len(r["context"]) for r in records)
    return next((r for r in records if 0 < len(r["context"]) == longest < len(ids)
                 and ids[-longest:] == r["context"]), None)


def explain_difference(lm, context: str, default_records: list[dict], deltalog_records: list[dict],
                       dtype: str = "bfloat16") -> dict:
    """Where the generations of one context part, and both runs' top-2 tokens and logits at that step; a near tie is
    judged in the runs' `dtype` (:func:`_near_tie_tolerance`)."""
    ids = lm.tok_batch_encode([context])[0][0].tolist()
    a, b = _record_of(ids, default_records), _record_of(ids, deltalog_records)
    if a is None or b is None:
        return dict(found=False)
    step = next((i for i, (x, y) in enumerate(zip(a["tokens"], b["tokens"])) if x != y), None)
    if step is None:  # one generation stopped earlier
        return dict(found=True, first_differing_step=min(len(a["tokens"]), len(b["tokens"])), explained=False,
                    reason="same tokens, different length")
    if step >= len(a["top2_ids"]) or step >= len(b["top2_ids"]):
        return dict(found=True, first_differing_step=step, explained=False, reason="no logits recorded at that step")
    ta, tb = a["top2_ids"][step], b["top2_ids"][step]
    la, lb = a["top2_logits"][step], b["top2_logits"][step]
    # The same two best tokens in both runs; their order is not compared: a run whose margin is 0 holds an exact tie,
    # which topk may list in either order whatever argmax picked.
    same_pair = set(ta) == set(tb)
    margin_a, margin_b = la[0] - la[1], lb[0] - lb[1]
    tol = _near_tie_tolerance(la[0], dtype)
    return dict(found=True, first_differing_step=step, default_top2=[lm.tok_decode([t]) for t in ta],
                default_top2_logits=la, deltalog_top2=[lm.tok_decode([t]) for t in tb], deltalog_top2_logits=lb,
                default_margin=margin_a, deltalog_margin=margin_b, near_tie_tolerance=tol,
                explained=bool(same_pair and margin_a <= tol and margin_b <= tol),
                reason=("different top-2 tokens" if not same_pair
                        else "a NaN logit among the two best tokens: not a near tie"
                        if math.isnan(margin_a) or math.isnan(margin_b)
                        else f"the same two best tokens, both margins within 4 {dtype} ulps"
                        if margin_a <= tol and margin_b <= tol
                        else f"the same two best tokens, but a margin above 4 {dtype} ulps ({tol:.3g}): not a near tie"))


def _choice_gap(scores: list[float]) -> float | None:
    """Gap between the best and the second-best score of one document's choices (None with fewer than 2)."""
    top = sorted(scores, reverse=True)[:2]
    return top[0] - top[1] if len(top) == 2 else None


def explain_metric_flip(x: dict, y: dict, metric_keys: list[str], target_delimiter: str = " ") -> dict:
    """A document whose per-document metric differs between the runs (a multiple-choice pick that changed): both runs'
    per-choice log-likelihoods, the gap between the two best choices in each run, for ``acc`` on the raw
    log-likelihoods and for ``acc_norm`` on the log-likelihoods divided by each choice's length in characters (as
    lm-eval 0.4 normalises: the length of the choice itself, i.e. the scored continuation without the task's
    ``target_delimiter``), and whether the flip is a near tie: both gaps no larger than twice the document's largest
    per-choice |ΔLL| (so normalised) - a pick can only change when the two best choices are closer than the two runs'
    scores can differ. A NaN score is never a near tie."""
    la, lb = _loglikelihoods(x), _loglikelihoods(y)
    conts = [a[1] if isinstance(a, (list, tuple)) and len(a) > 1 else "" for a in x["arguments"]]
    conts = [c[len(target_delimiter):] if target_delimiter and c.startswith(target_delimiter) else c for c in conts]
    d = max((_ll_diff(p, q) for p, q in zip(la, lb)), default=0.0)
    flips = {k: dict(default=x.get(k), deltalog=y.get(k)) for k in metric_keys if x.get(k) != y.get(k)}
    gaps = {}
    for k in flips:
        if k == "acc_norm" and len(conts) == len(la) and all(conts):
            na = [v / len(c) for v, c in zip(la, conts)]
            nb = [v / len(c) for v, c in zip(lb, conts)]
            bound = 2 * d / min(len(c) for c in conts)
        else:
            na, nb, bound = la, lb, 2 * d
        ga, gb = _choice_gap(na), _choice_gap(nb)
        # a NaN score makes d (and the bound) infinite: that is a broken score, never a near tie
        gaps[k] = dict(default_gap=ga, deltalog_gap=gb, bound=bound,
                       near_tie=math.isfinite(bound) and all(g is not None and g <= bound for g in (ga, gb)))
    return dict(doc_id=x["doc_id"], metrics=flips, default_loglikelihoods=la, deltalog_loglikelihoods=lb,
                max_abs_loglikelihood_diff=d, gaps=gaps, explained=all(g["near_tie"] for g in gaps.values()))


def compare(lm, task: str, default: dict, deltalog: dict, records: dict[str, list[dict]],
            dtype: str = "bfloat16") -> dict:
    """Side-by-side metrics and per-request agreement of one task's two runs (lm-eval result dicts) in `dtype`.
    lm-eval logs one sample per document and filter; generations and log-likelihood requests are counted once per
    document (the filters post-process the same responses), per-document metric flips per filter."""
    ma, mb = _metrics(default["results"][task]), _metrics(deltalog["results"][task])
    metrics = {k: dict(default=ma[k], deltalog=mb.get(k), diff=None if mb.get(k) is None else mb[k] - ma[k],
                       identical=ma[k] == mb.get(k)) for k in ma}
    sa = {(s["doc_id"], s.get("filter")): s for s in default["samples"][task]}
    sb = {(s["doc_id"], s.get("filter")): s for s in deltalog["samples"][task]}
    if sa.keys() != sb.keys():
        raise RuntimeError(f"{task}: the two runs scored different documents")
    n_gen = n_same = 0
    ll_pairs, differing, flipped = [], [], []
    first = next(iter(sa.values()), {})  # per-document metrics are sample keys without the filter ("acc,none" → "acc")
    delimiter = (default.get("configs", {}).get(task) or {}).get("target_delimiter", " ")  # lm-eval's default: " "
    doc_metric_keys = sorted({k.split(",")[0] for k in ma if isinstance(first.get(k.split(",")[0]), (int, float))})
    counted = set()
    for key, x in sa.items():
        y = sb[key]
        la, lb = _loglikelihoods(x), _loglikelihoods(y)
        if la and any(x.get(k) != y.get(k) for k in doc_metric_keys):
            flipped.append(explain_metric_flip(x, y, doc_metric_keys, delimiter))
        if x["doc_id"] in counted:
            continue  # the same responses under another filter
        counted.add(x["doc_id"])
        ga, gb = _generations(x), _generations(y)
        if ga:
            n_gen += len(ga)
            same = sum(p == q for p, q in zip(ga, gb))
            n_same += same
            if same < len(ga):
                context = x["arguments"][0][0]
                differing.append(dict(doc_id=x["doc_id"], default=ga, deltalog=gb,
                                      **explain_difference(lm, context, records["default"], records["deltalog"],
                                                           dtype)))
        ll_pairs += [(_ll_diff(p, q), x["doc_id"], i, p, q) for i, (p, q) in enumerate(zip(la, lb))]
    return dict(
        task=task, documents=len(counted), metrics=metrics, metrics_identical=all(m["identical"] for m in metrics.values()),
        generations=n_gen, generations_identical=n_same, generations_identical_fraction=n_same / n_gen if n_gen else None,
        loglikelihood_requests=len(ll_pairs), max_abs_loglikelihood_diff=max(ll_pairs)[0] if ll_pairs else None,
        largest_loglikelihood_diffs=[dict(doc_id=d, request=i, default=p, deltalog=q, abs_diff=a)
                                     for a, d, i, p, q in sorted(ll_pairs, key=lambda t: -t[0])[:5]],
        differing_generations=differing, differing_scored_documents=flipped,
        all_differences_explained=all(d.get("explained") for d in differing + flipped),
    )


def run_checkpoint(pretrained: str, tasks: list[str], limit: int | None, batch_size: int, dtype: str, device: str,
                   merge_interval: int | None, backend: str, task_manager, on_task=None) -> dict:
    """Both runs of every task on one checkpoint; `on_task(out)` (if given) is called after each task with the
    report so far (the caller writes partial results)."""
    import torch
    from lm_eval import simple_evaluate

    from hf_deltalog.harness import CachedHFLM
    from hf_deltalog.interpreter import fused_recurrent_under_interpreter

    _import_model_library(pretrained)
    try:  # refuses a model DeltaLogCache does not serve before the default cache's run
        lm = CachedHFLM(pretrained=pretrained, device=device, dtype=dtype, batch_size=batch_size,
                        merge_interval=merge_interval, deltalog_backend=backend, record_generations=True)
    except ValueError as e:
        raise SystemExit(f"{pretrained}: {e}") from None
    fused_recurrent_under_interpreter(lm.model)  # CPU runs of FLA's RWKV6 only (see hf_deltalog.interpreter)
    out = dict(checkpoint=str(pretrained), model_type=lm.model.config.model_type, tasks={}, skipped={})
    for task in tasks:
        runs, records, seconds = {}, {}, {}
        try:
            for cache in ("default", "deltalog"):
                lm.cache = cache
                lm.generation_records = []
                t0 = time.perf_counter()
                runs[cache] = simple_evaluate(model=lm, tasks=[task], limit=limit, task_manager=task_manager,
                                             log_samples=True, bootstrap_iters=0, random_seed=0, numpy_random_seed=0,
                                             torch_random_seed=0, fewshot_random_seed=0)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                seconds[cache] = time.perf_counter() - t0
                records[cache] = lm.generation_records
        except Exception as e:  # noqa: BLE001 - a standard task whose data is not available is reported, not fatal
            if task in DEFAULT_TASKS or task in LOCAL_TASK_NAMES:  # the project's own tasks (and group) must load
                raise
            out["skipped"][task] = f"{type(e).__name__}: {e}"
            continue
        # a group or tag name (e.g. mmlu) runs its member tasks: lm-eval logs samples per member, so each is compared
        for name in sorted(runs["default"]["samples"]):
            row = compare(lm, name, runs["default"], runs["deltalog"], records, dtype)
            row.update(seconds=seconds, deltalog_plan=lm.cache_plan())
            if name != task:
                row["requested_as"] = task  # the seconds are the whole group's
            out["tasks"][name] = row
            generations = f"{row['generations_identical']}/{row['generations']}" if row["generations"] else "-"
            print(f"{Path(pretrained).name} {name}: {row['documents']} docs, metrics identical: "
                  f"{row['metrics_identical']}, identical generations: {generations}, max |dLL|: "
                  f"{row['max_abs_loglikelihood_diff']}, seconds: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()), flush=True)
        if on_task is not None:
            on_task(out)
    return out


def _fla_version() -> str | None:
    """The installed flash-linear-attention version (None when it is not installed), read from its package metadata:
    `import fla` is refused in a run that hid FLA from transformers, though FLA is installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("flash-linear-attention")
    except PackageNotFoundError:
        return None


def _import_model_library(pretrained: str) -> None:
    """Import flash-linear-attention when the checkpoint is one of its model types (it registers them with Auto*)."""
    config = Path(pretrained) / "config.json"
    if not config.exists():
        return
    model_type = json.loads(config.read_text()).get("model_type")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if model_type not in CONFIG_MAPPING_NAMES:
        try:
            import fla.models  # noqa: F401
        except ImportError as e:
            raise SystemExit(f"{pretrained}: model_type {model_type!r} is not a transformers model and "
                             f"flash-linear-attention is not importable ({e})") from e


def table(report: dict) -> str:
    """The side-by-side Markdown table of a report."""
    lines = ["| checkpoint | task | metric | default cache | DeltaLogCache | difference | identical generations | "
             "max abs LL diff |", "|---|---|---|---|---|---|---|---|"]
    for ck in report["checkpoints"]:
        name = Path(ck["checkpoint"]).name
        for task, row in ck["tasks"].items():
            gen = ("-" if row["generations_identical_fraction"] is None else
                   f"{100 * row['generations_identical_fraction']:.1f} % ({row['generations_identical']}/"
                   f"{row['generations']})")
            ll = "-" if row["max_abs_loglikelihood_diff"] is None else f"{row['max_abs_loglikelihood_diff']:.2e}"
            for metric, m in row["metrics"].items():
                diff = "-" if m["diff"] is None else f"{m['diff']:+.4g}"
                lines.append(f"| {name} | {task} ({row['documents']} docs) | {metric} | {m['default']:.4f} | "
                             f"{m['deltalog']:.4f} | {diff} | {gen} | {ll} |")
        for task, why in ck["skipped"].items():
            lines.append(f"| {name} | {task} | skipped: {why[:100]} | | | | | |")
    if not report["meta"].get("complete", True):
        lines += ["", "Partial report: the run stopped (or is still running) before every task of every checkpoint was "
                  "scored; the rows above are complete tasks."]
    differing = [(Path(ck["checkpoint"]).name, task, d) for ck in report["checkpoints"]
                 for task, row in ck["tasks"].items() for d in row["differing_generations"]]
    if differing:
        lines += ["", "Differing generations (first differing step; top-2 tokens and logits of each run there):", "",
                  "| checkpoint | task | doc | step | default top-2 | DeltaLog top-2 | margins | explained |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, task, d in differing:
            if "default_top2" in d:
                fmt = lambda toks, lg: ", ".join(f"{t!r} {v:.4f}" for t, v in zip(toks, lg))  # noqa: E731
                lines.append(f"| {name} | {task} | {d['doc_id']} | {d['first_differing_step']} | "
                             f"{fmt(d['default_top2'], d['default_top2_logits'])} | "
                             f"{fmt(d['deltalog_top2'], d['deltalog_top2_logits'])} | "
                             f"{d['default_margin']:.4f} / {d['deltalog_margin']:.4f} | {d['explained']} |")
            else:
                lines.append(f"| {name} | {task} | {d['doc_id']} | {d.get('first_differing_step')} | "
                             f"{d.get('reason', 'no record')} | | | False |")
    flips = [(Path(ck["checkpoint"]).name, task, f) for ck in report["checkpoints"]
             for task, row in ck["tasks"].items() for f in row.get("differing_scored_documents", [])]
    if flips:
        lines += ["", "Scored documents whose per-document metric differs (gap between the two best choices in each "
                  "run, and the largest gap the two runs' |ΔLL| can flip):", "",
                  "| checkpoint | task | doc | metric (default → DeltaLog) | gap default / DeltaLog | bound | max abs LL "
                  "diff | explained |", "|---|---|---|---|---|---|---|---|"]
        for name, task, f in flips:
            for k, m in f["metrics"].items():
                g = f["gaps"][k]
                gap = " / ".join("-" if v is None else f"{v:.2e}" for v in (g["default_gap"], g["deltalog_gap"]))
                lines.append(f"| {name} | {task} | {f['doc_id']} | {k}: {m['default']} → {m['deltalog']} | {gap} | "
                             f"{g['bound']:.2e} | {f['max_abs_loglikelihood_diff']:.2e} | {g['near_tie']} |")
    return "\n".join(lines) + "\n"


def defining_yamls(folders: list[Path], names: list[str]) -> tuple[dict[str, Path | None], set[str]]:
    """Where task folders define the requested task, group or tag ``names`` and the members they run (their YAMLs'
    ``task:`` / ``group:`` / ``tag:`` keys, as lm-eval's ``TaskManager`` indexes each folder on its own).

    Returns:
        ``(defined, unknown)``: every requested name and every member a requested group or tag runs (recursively)
        that the folders define -> the YAML defining it (None for a tag); and the reachable names no folder defines
        (lm-eval's own index is needed for those; a group's inline member counts as unknown, as it may name a
        built-in task whose config it changes). A folder's task overrides a built-in task of the same name, as in
        lm-eval's own ``--include_path``.

    Raises:
        ValueError: a task or group name that YAML files of two folders define, one folder's tag that is another's
            task or group, or a group's inline member that another YAML defines (lm-eval would build that one with
            the group's keys on top); any of these would run one definition without saying so (at a log level this
            script hides). Not a clash: a tag several folders share (tags are shared by design), a folder given twice
            or inside another (the same files). Two YAMLs of one folder defining a name are not seen (lm-eval's index
            of the folder keeps the first).
    """
    from lm_eval.tasks import TaskManager

    found: dict[str, Path | None] = {}  # every name the folders define -> its YAML (None: a tag)
    where: dict[str, Path] = {}  # -> the folder that defined it first
    members: dict[str, list] = {}  # a group's task: list (names or inline configs); a tag's tasks (every folder's)
    for folder in folders:
        index = TaskManager(include_path=str(folder), include_defaults=False).task_index
        for name, entry in index.items():
            yaml = None if entry.kind.name == "TAG" or entry.yaml_path is None else Path(entry.yaml_path).resolve()
            if name in found and found[name] != yaml:
                said = [str(y) if y is not None else f"a tag in {f}" for y, f in ((found[name], where[name]),
                                                                                   (yaml, folder))]
                raise ValueError(f"task name {name!r} is defined twice ({said[0]} and {said[1]}), and only one of "
                                 "the two would run; rename one (the task:, group: or tag: key in its YAML)")
            found[name] = yaml
            where.setdefault(name, folder)
            if entry.kind.name == "TAG":
                members.setdefault(name, []).extend(sorted(entry.tags or ()))
            elif entry.kind.name == "GROUP":
                task = (entry.cfg or {}).get("task", [])
                members[name] = task if isinstance(task, list) else [task]
    defined: dict[str, Path | None] = {}
    unknown: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in defined or name in unknown:
            continue
        if name not in found:
            unknown.add(name)
            continue
        defined[name] = found[name]
        for member in members.get(name, []):
            if isinstance(member, str):
                todo.append(member)
                continue
            inline = member.get("task", member.get("group")) if isinstance(member, dict) else None
            if isinstance(inline, str) and inline in found and found[inline] != found[name]:
                raise ValueError(f"group {name!r} ({found[name]}) defines its member {inline!r} inline, and "
                                 f"{found[inline] or 'a tag in ' + str(where[inline])} defines {inline!r} too: lm-eval "
                                 "would build the latter with the group's keys on top; rename one")
            unknown.add(f"{name}::{inline}")
    return defined, unknown


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", nargs="+", required=True, help="checkpoint directories (or hub ids)")
    parser.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS))
    parser.add_argument("--include-path", type=Path, nargs="+", default=[], metavar="DIR",
                        help="folders of more task YAMLs, searched besides eval/tasks/ (lm-eval's --include_path)")
    parser.add_argument("--limit", type=positive_int, default=None, help="documents per task (default: all)")
    parser.add_argument("--batch-size", type=positive_int, default=16)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    parser.add_argument("--merge-interval", type=deltalog_merge_interval, default=None,
                        help="DeltaLog M, in [1, 1024] (default: the cache's own)")
    parser.add_argument("--backend", default="auto", choices=["auto", "torch", "triton"])
    parser.add_argument("--out", type=Path, default=None, help="folder for parity.json and parity.md")
    parser.add_argument("--quiet", action="store_true", help="do not print the table")
    parser.add_argument("--fla-kernels", default="auto", choices=["auto", "fla", "torch"],
                        help="FLA RWKV6 checkpoints: 'fla' runs FLA's Triton kernels (under TRITON_INTERPRET=1 on a "
                             "CPU: minutes per document); 'torch' runs FLA's own PyTorch references in their place, "
                             "for both runs (eval/train_tiny.py rwkv6_kernels): a CPU parity of many documents. "
                             "'auto' (default): 'torch' on a CPU without TRITON_INTERPRET=1 (where FLA's kernels "
                             "cannot run), else 'fla'. DeltaLogCache's decode is the same either way (its backend: "
                             "--backend)")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out} is a file; --out names the folder for parity.json and parity.md")
    for folder in args.include_path:
        if not folder.is_dir():
            parser.error(f"--include-path {folder}: not a folder (it takes folders of lm-eval task YAMLs)")

    import torch

    from hf_deltalog.interpreter import hide_fla_on_cpu, interpreting
    from hf_deltalog.lm_eval_cli import (
        checkpoint_note, checkpoint_problem, config_problem, device_problem, is_fla_checkpoint, lm_eval_problem,
        output_problem,
    )

    problem = lm_eval_problem()
    if problem:
        parser.error(problem)
    for name in args.pretrained:
        problem = checkpoint_problem(name) or config_problem(name)
        if not problem and Path(name).is_dir() and not (Path(name) / "config.json").is_file():
            problem = f"{name}: a folder without config.json, not a checkpoint folder (save_pretrained's output)"
        if problem:
            parser.error(f"--pretrained {problem}")
        note = checkpoint_note(name)
        if note:
            print(note, file=sys.stderr)

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    problem = device_problem(device)
    if problem:
        parser.error(f"--device {problem}")
    on_cpu = torch.device(device).type == "cpu"
    cpu_only = on_cpu and not interpreting()  # FLA's Triton kernels cannot run at all (they can, slowly, interpreted)
    if args.backend == "triton" and cpu_only:  # CachedHFLM would refuse it only after loading the first checkpoint
        parser.error("--backend triton: DeltaLogCache's Triton kernels need a CUDA device or TRITON_INTERPRET=1; use "
                     "--backend torch or auto on the CPU")
    fla_ckpts = [p for p in args.pretrained if is_fla_checkpoint(p)]
    if on_cpu and fla_ckpts and len(fla_ckpts) < len(args.pretrained):
        raise SystemExit(
            f"on a CPU, run flash-linear-attention checkpoints ({', '.join(fla_ckpts)}) and transformers ones in "
            "separate calls: transformers' GDN / KDA layers need FLA hidden there (its kernels need a GPU, and its "
            "chunked kernels do not run under TRITON_INTERPRET=1 either), while FLA's own models need FLA importable")
    fla_hidden = on_cpu and not fla_ckpts and hide_fla_on_cpu(device)
    if args.fla_kernels == "auto":
        args.fla_kernels = "torch" if cpu_only else "fla"
    problem = args.out is not None and output_problem(args.out)  # results are written after the first task's runs
    if problem:
        parser.error(f"--out {problem}")

    import lm_eval
    import transformers
    from lm_eval.tasks import TaskManager

    import hf_deltalog
    from hf_deltalog.interpreter import collapse_autotuners

    collapse_autotuners()  # only under TRITON_INTERPRET=1 (a CPU run of FLA's kernels); nothing on a GPU
    warnings.filterwarnings("ignore", category=FutureWarning)
    transformers.logging.set_verbosity_error()
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    folders = [LOCAL_TASKS, *args.include_path]
    try:
        _, unknown = defining_yamls(folders, args.tasks)
    except ValueError as e:
        parser.error(str(e))
    manager = TaskManager(include_path=[str(f) for f in folders], include_defaults=bool(unknown))
    t0 = time.perf_counter()
    fla_version = _fla_version()  # installed, whether or not hidden from transformers (fla_hidden_from_transformers)
    meta = dict(device=device, device_name=torch.cuda.get_device_name() if device.startswith("cuda") else
                platform.processor() or platform.machine(), dtype=args.dtype, batch_size=args.batch_size,
                limit=args.limit, merge_interval=args.merge_interval, backend=args.backend,
                torch=torch.__version__, transformers=transformers.__version__, lm_eval=lm_eval.__version__,
                fla=fla_version, fla_hidden_from_transformers=bool(fla_hidden), hf_deltalog=hf_deltalog.__version__,
                python=platform.python_version())
    checkpoints: list[dict] = []

    def write(current: dict | None, complete: bool) -> dict:
        """Write parity.json / parity.md: after every task (`complete` False: a partial report) and at the end."""
        report = dict(meta=dict(meta, seconds=time.perf_counter() - t0, complete=complete),
                      checkpoints=checkpoints + ([current] if current is not None else []))
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "parity.json").write_text(json.dumps(report, indent=1) + "\n")
            (args.out / "parity.md").write_text(table(report))
        return report

    kernels = contextlib.nullcontext()
    if args.fla_kernels == "torch" and fla_ckpts:  # (no FLA model: nothing to swap, and FLA may be hidden)
        sys.path.insert(0, str(HERE))
        from train_tiny import rwkv6_kernels

        kernels = rwkv6_kernels("torch")
    meta["fla_kernels"] = args.fla_kernels if fla_ckpts else None  # FLA checkpoints only: none ran otherwise
    with kernels:  # the model is built inside, so its layers bind the kernels chosen here
        for pretrained in args.pretrained:
            checkpoints.append(run_checkpoint(pretrained, args.tasks, args.limit, args.batch_size, args.dtype, device,
                                              args.merge_interval, args.backend, manager,
                                              on_task=lambda current: write(current, complete=False)))
    report = write(None, complete=True)
    if not args.quiet:
        print(table(report))
    if args.out:
        print(f"wrote {args.out / 'parity.json'} and {args.out / 'parity.md'}")
    skipped = {f"{Path(ck['checkpoint']).name}: {task}" for ck in report["checkpoints"] for task in ck["skipped"]}
    if skipped:
        # the report is written; a task that could not load (a typo, no data offline) must not pass as a success
        raise SystemExit(f"{len(skipped)} task(s) skipped (see the report): {', '.join(sorted(skipped))}")
    return report


if __name__ == "__main__":
    main()
