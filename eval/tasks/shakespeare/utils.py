"""Documents of the local tiny-shakespeare tasks: `shakespeare_test.jsonl` beside this file, built from the held-out
test split by `python eval/shakespeare.py build-tasks` (fields: id, line, context, next_line, choices, label)."""

import json
from pathlib import Path

DOCS = Path(__file__).resolve().parent / "shakespeare_test.jsonl"


def load_docs(**kwargs):
    """The documents as a `datasets.DatasetDict` with one split, "test" (read from disk; no download)."""
    import datasets

    rows = [json.loads(line) for line in DOCS.read_text(encoding="utf-8").splitlines()]
    return datasets.DatasetDict(test=datasets.Dataset.from_list(rows))
