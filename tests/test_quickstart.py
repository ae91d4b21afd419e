"""The README's first command: examples/quickstart.py runs on the bundled checkpoint, both caches give the same tokens,
and the decode times it prints are positive.

The quickstart subtracts a one-token generate from a full one. Without its warm-up call, the first of them carried the
first call's setup, and in a fresh environment (no bytecode caches yet) the default cache's time came out negative;
a warm test process does not show that setup cost, so this test checks the printed values, and the fresh-environment
run of the README is part of the release check."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

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
                          (["--model", str(ckpt)], "is a flash-linear-attention checkpoint")):
        run = subprocess.run(python_script_command(SCRIPT, *args, "--device", "cpu"), capture_output=True, text=True,
                             timeout=600)
        assert run.returncode == 2 and message in run.stderr, run.stderr[-2000:]
