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


def _option(argv: list[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in ``argv`` (the last one), else None."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1:]
    return value


def _model_args(argv: list[str]) -> list[str]:
    """The values of every ``--model_args`` / ``-a`` in ``argv``: lm-eval takes one or more after the flag (up to the
    next option), or ``--model_args=VALUE``."""
    values, taking = [], False
    for arg in argv:
        if arg in ("--model_args", "-a"):
            taking = True
        elif arg.startswith("--model_args="):
            values.append(arg[len("--model_args="):])
            taking = False
        elif taking and not arg.startswith("-"):
            values.append(arg)
        else:
            taking = False
    return values


def _pretrained(model_args: str | list[str] | None) -> str | None:
    """``pretrained`` of lm-eval ``--model_args`` values (the last one given): ``key=value`` pairs separated by commas,
    or a JSON object (which lm-eval's CLI takes too)."""
    found = None
    for text in [model_args] if isinstance(model_args, str) else (model_args or []):
        text = text.strip()
        if text.startswith("{"):
            try:
                value = json.loads(text).get("pretrained")
            except (ValueError, AttributeError):
                continue  # lm-eval reports the malformed argument itself
            found = found if value is None else str(value)
            continue
        for pair in text.split(","):
            key, _, value = pair.partition("=")
            if key.strip() == "pretrained":
                found = value.strip()
    return found


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
    device = _option(argv, "--device") or ("cuda" if torch.cuda.is_available() else "cpu")
    pretrained = _pretrained(_model_args(argv))
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

    import hf_deltalog.harness  # noqa: F401 - registers the model "hf-cached" with lm-eval
    from lm_eval.__main__ import cli_evaluate

    sys.argv = [sys.argv[0], *argv]
    cli_evaluate()


if __name__ == "__main__":
    main()
