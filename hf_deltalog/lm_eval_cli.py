"""lm-evaluation-harness's own command line with the model ``hf-cached`` (:class:`hf_deltalog.harness.CachedHFLM`).

``lm_eval --model hf-cached`` alone cannot find the model: lm-eval registers it only when ``hf_deltalog.harness`` is
imported in the same process. This entry imports it, then hands the arguments to lm-eval's CLI unchanged::

    python -m hf_deltalog.lm_eval_cli --model hf-cached \\
        --model_args pretrained=eval/checkpoints/gdn-shakespeare,cache=deltalog,deltalog_backend=torch,dtype=float32 \\
        --tasks shakespeare_next_line_mc --include_path eval/tasks --device cpu --batch_size 4 --limit 8

On a CPU it first hides flash-linear-attention from transformers for a transformers checkpoint
(:func:`hf_deltalog.interpreter.hide_fla_on_cpu`: FLA's kernels need a GPU, and its chunked kernels do not run under
``TRITON_INTERPRET=1`` either), as ``eval/lm_eval_parity.py`` does. For flash-linear-attention's own checkpoints (RWKV6, ...) it imports ``fla`` so that their model types load;
on a CPU those need ``TRITON_INTERPRET=1`` (FLA's kernels then run interpreted, with each autotuner cut to one
config: slow, about a minute per multiple-choice document of the bundled RWKV6 checkpoint); without it the entry
exits with a message. ``eval/lm_eval_parity.py`` runs both caches side by side and compares them (on a CPU it swaps in
FLA's PyTorch references, which is much faster); this entry runs one lm-eval evaluation.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from pathlib import Path

__all__ = [
    "checkpoint_note", "checkpoint_problem", "config_problem", "device_problem", "is_fla_checkpoint", "lm_eval_problem",
    "main", "output_problem",
]


def checkpoint_problem(pretrained: str) -> str | None:
    """Why ``pretrained`` names no checkpoint, or None. A name written as a local path (absolute, starting with ``.``
    or ``~``, or with more than one ``/``) must be an existing folder; any existing folder passes (a ``subfolder=`` or
    ``gguf_file=`` checkpoint has no ``config.json`` at its top), and anything else is a hub id, which transformers
    resolves (and reports on) itself. ``~`` is not expanded, as transformers does not expand it. Without this check
    a missing folder surfaced as transformers' "Repo id must be in the form ..." traceback after the imports."""
    if Path(pretrained).is_dir():
        return None
    if Path(pretrained).is_absolute() or pretrained.startswith((".", "~")) or pretrained.count("/") > 1:
        return f"{pretrained}: no such checkpoint folder (a local folder, or a hub id org/name)"
    return None


def checkpoint_note(pretrained: str) -> str | None:
    """A warning for a name that passes :func:`checkpoint_problem` as a hub id ``org/name`` while ``org`` is a local
    folder here and ``org/name`` is no folder (a mistyped local path such as ``eval/gdn-shakespeare`` is otherwise
    only known as such after the hub lookup's retries and network error); None otherwise. A warning, not a refusal:
    the hub id may be meant."""
    org = pretrained.split("/")[0]
    if pretrained.count("/") == 1 and Path(org).is_dir() and not Path(pretrained).is_dir():
        what = "is a file, not a checkpoint folder," if Path(pretrained).exists() else "does not exist"
        return (f"warning: {pretrained} {what} in the local folder {org}/; loading it as a hub id (if you meant a "
                "local checkpoint, check the path)")
    return None


def lm_eval_problem() -> str | None:
    """Why lm-eval cannot run here, or None: not installed (the entry points failed with a bare
    ModuleNotFoundError)."""
    import importlib.util

    if importlib.util.find_spec("lm_eval") is None:
        return ("lm-evaluation-harness is not installed: pip install -e \".[eval]\" in a checkout, or pip install "
                "\"hf-deltalog[eval]\" (lm_eval==0.4.13)")
    return None


def device_problem(device: str) -> str | None:
    """Why ``device`` cannot run a model here, or None: not a torch device string, the meta device, CUDA on a machine
    without it, or any device torch cannot allocate on here (``mps`` on Linux, ``cuda:3`` on a one-GPU machine; torch's
    own errors, "Torch not compiled with CUDA enabled" and the like, came after the model had loaded)."""
    import torch

    try:
        kind = torch.device(device).type
    except RuntimeError:
        return f"{device}: not a torch device; use cpu or cuda (cuda:N)"
    if kind == "meta":
        return f"{device}: the meta device holds shapes without data, it cannot run a model; use cpu or cuda (cuda:N)"
    if kind == "cuda" and not torch.cuda.is_available():
        return f"{device}: no CUDA device here (torch.cuda.is_available() is False); use --device cpu"
    module = getattr(torch, kind, None)  # torch.mps, torch.xpu, ...: torch's error came after the model loaded
    if kind != "cpu" and callable(getattr(module, "is_available", None)) and not module.is_available():
        return f"{device}: no {kind} device here (torch.{kind}.is_available() is False); use cpu or cuda (cuda:N)"
    try:  # any other kind, or a CUDA index this machine lacks
        torch.empty(0, device=device)
    except Exception as e:  # noqa: BLE001 - RuntimeError, AssertionError, ModuleNotFoundError (hpu), ...
        why = str(e).strip().split(". ")[0].splitlines()[0] if str(e).strip() else type(e).__name__
        return f"{device}: cannot be used here ({why}); use cpu or cuda (cuda:N)"
    return None


def output_problem(path: str | Path, folder: bool = True) -> str | None:
    """Why results cannot be written at ``path`` (a folder, or a file's path when ``folder`` is False), or None. Tries
    what the run will do, so that an unwritable place is found before the work rather than after it: creates the
    missing folders and a temporary file in the last, then removes what it created. ``~`` is not expanded (the
    writers do not expand it either)."""
    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        return f"{path} is a file; a folder is expected"
    if not folder and path.is_dir():
        return f"{path} is a folder; a file path is expected"
    where = path if folder else path.parent
    created = [p for p in (where, *where.parents) if not p.exists()]
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as e:
        return f"{path} cannot be written ({e.strerror or e})"
    finally:
        for p in created:  # deepest first; only the folders made here, and only while empty
            with contextlib.suppress(OSError):
                p.rmdir()
    return None


def _lm_eval_settings(argv: list[str]) -> tuple[str | None, str | None, str | None]:
    """``(pretrained, device, output_path)`` of :func:`_lm_eval_run`, as strings; ``(None, None, None)`` when ``argv``
    is not a ``run`` that parses."""
    return _settings_of(_lm_eval_run(argv))


def _settings_of(run: dict | None) -> tuple[str | None, str | None, str | None]:
    """``(pretrained, device, output_path)`` of a :func:`_lm_eval_run` result, as strings (None where not given)."""
    run = run or {}
    return tuple(None if run.get(k) is None else str(run[k]) for k in ("pretrained", "device", "output_path"))


def _lm_eval_run(argv: list[str]) -> dict | None:
    """The settings lm-eval's own CLI will read from ``argv``: ``model``, ``model_args`` (a dict), ``pretrained``,
    ``device``, ``batch_size`` and ``output_path``; from its parser (so every form it takes counts: ``--model_args``
    with one or more ``key=value`` values or a JSON object, ``-a``, quoted values, abbreviations), and a ``--config``
    YAML file below the command line. None when ``argv`` is not a ``run`` that parses (help, another subcommand, an
    error: lm-eval's CLI then says so itself)."""
    import contextlib
    import io

    from lm_eval._cli import HarnessCLI
    from lm_eval.config.evaluate_config import EvaluatorConfig
    from lm_eval.utils import simple_parse_args_string

    cli = HarnessCLI()
    args = list(argv)
    if len(args) > 1 and args[0] not in cli._subparsers.choices:
        args.insert(0, "run")  # as lm-eval's CLI does for the legacy form
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            namespace = cli._parser.parse_args(args)
    except SystemExit:
        return None
    if getattr(namespace, "command", None) != "run":
        return None
    settings = {}
    config = getattr(namespace, "config", None)
    if config:
        with contextlib.suppress(Exception):  # lm-eval reports a bad file itself
            settings = EvaluatorConfig.load_yaml_config(config)
    # lm-eval takes the command line's model_args instead of the file's (EvaluatorConfig.from_cli), not merged
    model_args = getattr(namespace, "model_args", None) or settings.get("model_args") or {}
    if isinstance(model_args, str):
        model_args = simple_parse_args_string(model_args)
    batch_size = getattr(namespace, "batch_size", None)
    return dict(model=getattr(namespace, "model", None) or settings.get("model"), model_args=dict(model_args),
                pretrained=model_args.get("pretrained"),
                device=getattr(namespace, "device", None) or settings.get("device"),
                batch_size=settings.get("batch_size", 1) if batch_size is None else batch_size,
                output_path=getattr(namespace, "output_path", None) or settings.get("output_path"))


def config_problem(pretrained: str | None) -> str | None:
    """Why a local checkpoint's ``config.json`` cannot be read, or None (also for hub ids and folders without one):
    not UTF-8 JSON, or JSON that is not an object (transformers' and this module's readers failed with a bare
    ``JSONDecodeError`` or ``AttributeError`` traceback)."""
    config = Path(pretrained) / "config.json" if pretrained else None
    if config is None or not config.is_file():
        return None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return f"{config}: not a readable JSON file ({e})"
    if not isinstance(data, dict):
        return f"{config}: a JSON {type(data).__name__}, where a checkpoint's config is a JSON object"
    return None


def is_fla_checkpoint(pretrained: str | None) -> bool:
    """Whether a local checkpoint's ``model_type`` is not a transformers one (flash-linear-attention's models); hub
    ids, folders without a ``config.json``, unreadable configs (:func:`config_problem` reports those), configs without
    a ``model_type`` (transformers reports those) and remote-code configs (an ``auto_map``) count as transformers
    models."""
    if not pretrained or config_problem(pretrained) or not (Path(pretrained) / "config.json").is_file():
        return False
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    config = json.loads((Path(pretrained) / "config.json").read_text(encoding="utf-8"))
    model_type = config.get("model_type")
    return isinstance(model_type, str) and model_type not in CONFIG_MAPPING_NAMES and "auto_map" not in config


def main(argv: list[str] | None = None) -> None:
    """Run lm-eval's CLI (``lm_eval.__main__.cli_evaluate``) on ``argv`` (default ``sys.argv[1:]``) with ``hf-cached``
    registered. Exits as lm-eval's CLI does."""
    import torch

    from hf_deltalog.interpreter import collapse_autotuners, hide_fla_on_cpu, interpreting

    argv = list(sys.argv[1:] if argv is None else argv)
    problem = lm_eval_problem()
    if problem:
        raise SystemExit(problem)
    if not argv or "-h" in argv or "--help" in argv:  # what this entry adds, then lm-eval's own help
        print(f"{__doc__.strip()}\n\nlm-eval's own help follows.\n")
    run = _lm_eval_run(argv) or {}
    pretrained, device, output_path = _settings_of(run)
    problem = pretrained and (checkpoint_problem(pretrained) or config_problem(pretrained))
    if problem:
        raise SystemExit(f"--model_args pretrained={problem}")
    note = pretrained and checkpoint_note(pretrained)
    if note:
        print(note, file=sys.stderr)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    problem = device_problem(device)
    if problem:
        raise SystemExit(f"--device {problem}")
    if is_fla_checkpoint(pretrained):
        if torch.device(device).type == "cpu" and not interpreting():
            raise SystemExit(
                f"{pretrained} is a flash-linear-attention checkpoint: its Triton kernels need a GPU. On a CPU set "
                "TRITON_INTERPRET=1 (slow), or compare both caches with eval/lm_eval_parity.py, which runs FLA's "
                "PyTorch references there")
        import fla  # noqa: F401 - registers FLA's model types with transformers' Auto classes
    else:
        hide_fla_on_cpu(device)
    # lm-eval writes its results only after the evaluation, and logs a failure there without exiting non-zero. A path
    # ending in .json names a file, written beside it as <stem>_<date>.json; any other names a folder.
    problem = output_path and output_problem(output_path if Path(output_path).suffix != ".json"
                                             else Path(output_path).parent)
    if problem:
        raise SystemExit(f"--output_path: {problem}")
    if run.get("model") == "hf-cached":  # its arguments, before lm-eval loads the model (a traceback after it)
        from hf_deltalog.harness import check_arguments

        own = ("cache", "merge_interval", "deltalog_backend", "record_generations", "backend", "dtype")
        try:
            check_arguments(**{k: v for k, v in run["model_args"].items() if k in own}, device=device,
                            batch_size=run["batch_size"])
        except (TypeError, ValueError) as e:
            raise SystemExit(f"--model hf-cached: {e}") from None
    collapse_autotuners()  # only under TRITON_INTERPRET=1, where autotuners cannot time their configs

    from lm_eval.__main__ import cli_evaluate

    import hf_deltalog.harness  # noqa: F401 - registers the model "hf-cached" with lm-eval

    sys.argv = [sys.argv[0], *argv]
    cli_evaluate()


if __name__ == "__main__":
    main()
