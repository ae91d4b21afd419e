"""The README's first command: examples/quickstart.py runs on the bundled checkpoint, both caches give the same tokens,
and the decode times it prints are positive.

The quickstart reads the decode time within one generate call (a streamer's timestamps from the first generated token
to the last), after an untimed warm-up call. It used to subtract a separately timed one-token generate from a full one,
which printed negative times when the one-token call carried the first call's setup or a loaded CPU's noise."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import python_script_command

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"


def test_quickstart_runs_and_reports_positive_decode_times():
    # FLA hidden as in this process (conftest): the README's quickstart environment has no FLA
    run = subprocess.run(python_script_command(SCRIPT, "--new-tokens", "12", "--device", "cpu"), capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert "token agreement: 100.0% (identical)" in out, out
    # what the layers ran, read from the cache after generate (on the CPU the PyTorch backend logs at M = 8)
    assert "DeltaLog layers ran M = 8\n" in out, out
    times = re.search(r"decode ms per output token, median \(range\) of 3 runs: default cache (\S+) \(\S+\), "
                      r"DeltaLogCache (\S+) \(\S+\)", out)
    assert times is not None, out
    assert all(float(t) > 0 for t in times.groups()), times.group(0)


def test_quickstart_refuses_bad_options_and_fla_checkpoints():
    """--new-tokens 1 divided by zero; an FLA checkpoint failed in transformers' Auto classes (found by the fourteenth
    review). Both now exit with argparse's message."""
    ckpt = SCRIPT.parents[1] / "eval" / "checkpoints" / "rwkv6-shakespeare"
    for args, message in ((["--new-tokens", "1"], "--new-tokens must be at least 2"),
                          (["--model", str(ckpt)], "is a flash-linear-attention checkpoint"),
                          (["--merge-interval", "0"], "--merge-interval must be an integer in [1, 1024]"),
                          # a traceback from transformers ("Repo id must be in the form ...": 53rd review)
                          (["--model", "/nonexistent/ckpt"], "--model /nonexistent/ckpt: no such checkpoint folder"),
                          # argparse's Path dropped the ./, and the name went to the hub (56th review)
                          (["--model", "./nosuch/ckpt"], "--model ./nosuch/ckpt: no such checkpoint folder"),
                          # a tokenizer traceback after the imports (a breaker's find, 2026-12-04)
                          (["--model", str(SCRIPT.parent)], "a folder without config.json, not a checkpoint folder")):
        run = subprocess.run(python_script_command(SCRIPT, *args, "--device", "cpu"), capture_output=True, text=True,
                             timeout=600)
        assert run.returncode == 2 and message in run.stderr, run.stderr[-2000:]


def test_quickstart_decode_time_is_read_within_one_call(monkeypatch):
    """The decode time was (a full generate − a separately timed one-token generate) / (new tokens − 1): on a loaded
    CPU the one-token call could take longer than the full one and the quickstart printed negative times (31st
    review). It is now read within one call, from the first generated token to the last (a streamer's timestamps):
    a slow one-token call no longer enters it, and it cannot be negative. A fake clock makes the check exact: each
    reading advances it by 10 ms, and a one-token generate call by 1,000 s (the wall clock made this test fail once
    when a loaded CI machine took 570 ms per tiny-model token, above its old 500 ms sanity bound)."""
    import importlib.util
    import types

    from utils import prompt_ids, tiny_model

    spec = importlib.util.spec_from_file_location("quickstart", SCRIPT)
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    clock = types.SimpleNamespace(now=0.0)

    def perf_counter():
        clock.now += 0.010
        return clock.now

    monkeypatch.setattr(quickstart, "time", types.SimpleNamespace(perf_counter=perf_counter))
    model = tiny_model("qwen3_5")
    generate = type(model).generate

    def slow_one_token_calls(self, *args, **kwargs):
        if kwargs.get("max_new_tokens") == 1:
            clock.now += 1000.0
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "generate", slow_one_token_calls)
    inputs = {"input_ids": prompt_ids(2, 5), "attention_mask": torch.ones(2, 5, dtype=torch.long)}
    out, times = quickstart.timed_generate(model, inputs, None, new_tokens=4, repeats=2)
    assert out.shape == (2, 9)
    assert times == [pytest.approx(10.0), pytest.approx(10.0)]  # ms per token: three 10 ms readings apart
