"""lm-evaluation-harness's own command line with the model ``hf-cached`` (:class:`hf_deltalog.harness.CachedHFLM`).

``lm_eval --model hf-cached`` alone cannot find the model: lm-eval registers it only when ``hf_deltalog.harness`` is
imported in the same process. This entry imports it, then hands the arguments to lm-eval's CLI unchanged::

    python -m hf_deltalog.lm_eval_cli --model hf-cached \\
        --model_args pretrained=eval/checkpoints/gdn-shakespeare,cache=deltalog,deltalog_backend=torch \\
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

import json
import sys
from pathlib import Path

__all__ = ["is_fla_checkpoint", "main"]


def _lm_eval_settings(argv: list[str]) -> tuple[str | None, str | None]:
    """``(pretrained, device)`` as lm-eval's own CLI will read them from ``argv``: its parser (so every form it takes
    counts: ``--model_args`` with one or more ``key=value`` values or a JSON object, ``-a``, quoted values,
    abbreviations), and a ``--config`` YAML file below the command line. ``(None, None)`` when ``argv`` is not a
    ``run`` that parses (help, another subcommand, an error: lm-eval's CLI then says so itself)."""
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
        return None, None
    if getattr(namespace, "command", None) != "run":
        return None, None
    settings = {}
    config = getattr(namespace, "config", None)
    if config:
        with contextlib.suppress(Exception):  # lm-eval reports a bad file itself
            settings = EvaluatorConfig.load_yaml_config(config)
    # lm-eval takes the command line's model_args instead of the file's (EvaluatorConfig.from_cli), not merged
    model_args = getattr(namespace, "model_args", None) or settings.get("model_args") or {}
    if isinstance(model_args, str):
        model_args = simple_parse_args_string(model_args)
    pretrained = model_args.get("pretrained")
    device = getattr(namespace, "device", None) or settings.get("device")
    return (None if pretrained is None else str(pretrained)), (None if device is None else str(device))


def is_fla_checkpoint(pretrained: str | None) -> bool:
    """Whether a local checkpoint's ``model_type`` is not a transformers one (flash-linear-attention's models); hub
    ids and folders without a ``config.json`` count as transformers models."""
    config = Path(pretrained) / "config.json" if pretrained else None
    if config is None or not config.exists():
        return False
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return json.loads(config.read_text()).get("model_type") not in CONFIG_MAPPING_NAMES


def main(argv: list[str] | None = None) -> None:
    """Run lm-eval's CLI (``lm_eval.__main__.cli_evaluate``) on ``argv`` (default ``sys.argv[1:]``) with ``hf-cached``
    registered. Exits as lm-eval's CLI does."""
    import torch

    from hf_deltalog.interpreter import collapse_autotuners, hide_fla_on_cpu, interpreting

    argv = list(sys.argv[1:] if argv is None else argv)
    pretrained, device = _lm_eval_settings(argv)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if is_fla_checkpoint(pretrained):
        if torch.device(device).type == "cpu" and not interpreting():
            raise SystemExit(
                f"{pretrained} is a flash-linear-attention checkpoint: its Triton kernels need a GPU. On a CPU set "
                "TRITON_INTERPRET=1 (slow), or compare both caches with eval/lm_eval_parity.py, which runs FLA's "
                "PyTorch references there")
        import fla  # noqa: F401 - registers FLA's model types with transformers' Auto classes
    else:
        hide_fla_on_cpu(device)
    collapse_autotuners()  # only under TRITON_INTERPRET=1, where autotuners cannot time their configs

    from lm_eval.__main__ import cli_evaluate

    import hf_deltalog.harness  # noqa: F401 - registers the model "hf-cached" with lm-eval

    sys.argv = [sys.argv[0], *argv]
    cli_evaluate()


if __name__ == "__main__":
    main()
