"""Benchmark the token estimate: throughput against tiktoken, accuracy against exact tokenizers.

Run from the repository root::

    .venv/bin/python benchmarks/bench_estimator.py

The corpus is ``../shared/data/text/{zh,en,code,json}/`` (override with the
``CAIRN_CORPUS`` environment variable). Without it a deterministic mixed corpus
is generated and the result records ``"corpus": "generated"``.

Throughput: ``estimate_tokens`` (``kind="json"`` for JSON files) and tiktoken's
cl100k (through ``get_tokenizer("cl100k")``) over the same files in the same
run, best of several repeats. MB means 10^6 bytes of UTF-8 text.

Accuracy: for every kind and every exact tokenizer, the relative error
``(estimate - exact) / exact`` of each file; ``mean_rel_err`` is the mean of the
absolute errors, ``max_rel_err`` the worst absolute error, ``bias`` the signed
mean (positive: the estimate over-counts).

Writes ``benchmarks/results/estimator.json`` and prints a table. The ≥20×
throughput target is reported as PASS or MISS; the script never fails on it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import string
import sys
import time
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cairn.tokens import TextKind, Tokenizer, TokenizerError, estimate_tokens, get_tokenizer

KINDS: tuple[str, ...] = ("zh", "en", "code", "json")
EXACT_TOKENIZERS: tuple[str, ...] = ("cl100k", "qwen3", "deepseek-v4")
TARGET_RATIO = 20.0
MB = 1_000_000

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "text"
DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "estimator.json"


@dataclass(frozen=True, slots=True)
class Doc:
    kind: str
    name: str
    text: str
    nbytes: int

    @property
    def estimate_kind(self) -> TextKind:
        return "json" if self.kind == "json" else "text"


Corpus = dict[str, list[Doc]]


# ---------------------------------------------------------------------------
# Corpus


def load_corpus(root: Path) -> Corpus | None:
    """Every file under ``root/<kind>/``; ``None`` when the corpus is absent."""
    if not all((root / kind).is_dir() for kind in KINDS):
        return None
    corpus: Corpus = {}
    for kind in KINDS:
        docs = []
        for path in sorted((root / kind).iterdir()):
            if not path.is_file():
                continue
            raw = path.read_bytes()
            docs.append(Doc(kind, path.name, raw.decode("utf-8"), len(raw)))
        corpus[kind] = docs
    if not any(corpus.values()):
        return None
    return corpus


def _doc(kind: str, name: str, text: str) -> Doc:
    return Doc(kind, name, text, len(text.encode("utf-8")))


def _word(rng: random.Random) -> str:
    syllables = ("ka", "te", "ro", "min", "sa", "lo", "re", "tion", "pre", "ing", "ver", "al", "st")
    return "".join(rng.choice(syllables) for _ in range(rng.randint(1, 3)))


def _english(rng: random.Random, n_words: int) -> str:
    words: list[str] = []
    for i in range(n_words):
        word = _word(rng)
        if i == 0 or words[-1].endswith("."):
            word = word.capitalize()
        if rng.random() < 0.08:
            word += rng.choice([".", ",", ";", "."])
        words.append(word)
    return " ".join(words) + "."


def _chinese(rng: random.Random, n_chars: int) -> str:
    # A few thousand common-range ideographs, punctuation and some inline ASCII.
    out: list[str] = []
    for _ in range(n_chars):
        r = rng.random()
        if r < 0.08:
            out.append(rng.choice("，。、：；（）"))
        elif r < 0.12:
            out.append(f" {_word(rng)} ")
        elif r < 0.13:
            out.append("\n")
        else:
            out.append(chr(rng.randint(0x4E00, 0x4E00 + 3500)))
    return "".join(out)


def _code(rng: random.Random, n_lines: int) -> str:
    lines: list[str] = []
    for _ in range(n_lines):
        indent = "    " * rng.randint(0, 3)
        name = "_".join(_word(rng) for _ in range(rng.randint(1, 3)))
        choice = rng.random()
        if choice < 0.15:
            args = ", ".join(_word(rng) for _ in range(rng.randint(0, 4)))
            lines.append(f"{indent}def {name}({args}) -> int:")
        elif choice < 0.5:
            lines.append(f"{indent}{name} = {_word(rng)}({rng.randint(0, 999)}, {_word(rng)!r})")
        elif choice < 0.7:
            lines.append(f"{indent}if {name} >= {rng.randint(0, 99)} and not {_word(rng)}:")
        elif choice < 0.85:
            lines.append(f"{indent}return {name}[{rng.randint(0, 9)}] + {rng.random():.3f}")
        else:
            lines.append(f"{indent}# {_english(rng, rng.randint(3, 10))}")
    return "\n".join(lines) + "\n"


def _json_value(rng: random.Random, depth: int) -> Any:
    r = rng.random()
    if depth <= 0 or r < 0.4:
        return rng.choice(
            [
                rng.randint(-1000, 100_000),
                round(rng.uniform(0, 1000), 2),
                _word(rng),
                _english(rng, rng.randint(2, 8)),
                rng.random() < 0.5,
                None,
                "".join(rng.choices(string.hexdigits.lower(), k=12)),
            ]
        )
    if r < 0.7:
        return [_json_value(rng, depth - 1) for _ in range(rng.randint(0, 5))]
    return {_word(rng): _json_value(rng, depth - 1) for _ in range(rng.randint(1, 6))}


def generate_corpus(seed: int = 20_240_601, files_per_kind: int = 24) -> Corpus:
    """A deterministic mixed corpus for when the shared one is absent."""
    rng = random.Random(seed)
    corpus: Corpus = {kind: [] for kind in KINDS}
    for i in range(files_per_kind):
        corpus["en"].append(_doc("en", f"en-{i:02d}.md", _english(rng, rng.randint(500, 4000))))
        corpus["zh"].append(_doc("zh", f"zh-{i:02d}.md", _chinese(rng, rng.randint(1000, 6000))))
        corpus["code"].append(_doc("code", f"code-{i:02d}.py", _code(rng, rng.randint(60, 500))))
        records = [
            {_word(rng): _json_value(rng, 3) for _ in range(rng.randint(2, 8))}
            for _ in range(rng.randint(5, 60))
        ]
        text = json.dumps(records, indent=2 if i % 2 else None, ensure_ascii=False)
        corpus["json"].append(_doc("json", f"json-{i:02d}.json", text))
    return corpus


# ---------------------------------------------------------------------------
# Measurements


def best_seconds(fn: Callable[[], object], repeat: int) -> float:
    """Best wall time of one call, over ``repeat`` timed batches (batches last ≥ 0.05 s)."""
    timer = timeit.Timer(fn)
    number = 1
    while True:
        elapsed = timer.timeit(number)
        if elapsed >= 0.05:
            break
        number *= 2 if elapsed > 0.01 else 10
    return min([elapsed, *timer.repeat(repeat - 1, number)]) / number


def _estimate_all(docs: Sequence[Doc]) -> int:
    return sum(estimate_tokens(d.text, d.estimate_kind) for d in docs)


def _count_all(tokenizer: Tokenizer, docs: Sequence[Doc]) -> int:
    return sum(tokenizer.count(d.text) for d in docs)


def measure_throughput(corpus: Corpus, repeat: int, console: Console) -> dict[str, Any]:
    try:
        tiktoken: Tokenizer | None = get_tokenizer("cl100k")
    except TokenizerError as exc:
        console.print(f"[yellow]cl100k unavailable, throughput has no baseline: {exc}[/]")
        tiktoken = None

    per_kind: dict[str, dict[str, float | int | None]] = {}
    est_total = tik_total = 0.0
    total_bytes = 0
    for kind in KINDS:
        docs = corpus[kind]
        nbytes = sum(d.nbytes for d in docs)
        total_bytes += nbytes
        est_s = best_seconds(partial(_estimate_all, docs), repeat)
        est_total += est_s
        row: dict[str, float | int | None] = {
            "bytes": nbytes,
            "files": len(docs),
            "estimator_mb_s": _mb_s(nbytes, est_s),
            "tiktoken_mb_s": None,
            "throughput_ratio": None,
        }
        if tiktoken is not None:
            tik_s = best_seconds(partial(_count_all, tiktoken, docs), repeat)
            tik_total += tik_s
            row["tiktoken_mb_s"] = _mb_s(nbytes, tik_s)
            row["throughput_ratio"] = round(tik_s / est_s, 1) if est_s > 0 else None
        per_kind[kind] = row

    estimator_mb_s = _mb_s(total_bytes, est_total)
    tiktoken_mb_s = _mb_s(total_bytes, tik_total) if tiktoken is not None else None
    ratio = round(tik_total / est_total, 1) if tiktoken is not None and est_total > 0 else None
    return {
        "bytes": total_bytes,
        "estimator_mb_s": estimator_mb_s,
        "tiktoken_mb_s": tiktoken_mb_s,
        "throughput_ratio": ratio,
        "per_kind": per_kind,
    }


def _mb_s(nbytes: int, seconds: float) -> float:
    return round(nbytes / MB / seconds, 2) if seconds > 0 else float("inf")


def measure_accuracy(corpus: Corpus, console: Console) -> dict[str, dict[str, dict[str, Any]]]:
    tokenizers: dict[str, Tokenizer] = {}
    for name in EXACT_TOKENIZERS:
        try:
            tokenizers[name] = get_tokenizer(name)
        except TokenizerError as exc:
            console.print(f"[yellow]skipping {name}: {exc}[/]")

    accuracy: dict[str, dict[str, dict[str, Any]]] = {}
    for kind in KINDS:
        docs = corpus[kind]
        estimates = [estimate_tokens(d.text, d.estimate_kind) for d in docs]
        accuracy[kind] = {}
        for name, tokenizer in tokenizers.items():
            started = time.perf_counter()
            exact = [tokenizer.count(d.text) for d in docs]
            seconds = time.perf_counter() - started
            errors = [(e - x) / x for e, x in zip(estimates, exact, strict=True) if x > 0]
            total_est, total_exact = sum(estimates), sum(exact)
            accuracy[kind][name] = {
                "files": len(errors),
                "mean_rel_err": round(statistics.fmean(abs(e) for e in errors), 4)
                if errors
                else None,
                "max_rel_err": round(max(abs(e) for e in errors), 4) if errors else None,
                "bias": round(statistics.fmean(errors), 4) if errors else None,
                "estimate_tokens": total_est,
                "exact_tokens": total_exact,
                "total_rel_err": round((total_est - total_exact) / total_exact, 4)
                if total_exact
                else None,
                "tokenizer_mb_s": _mb_s(sum(d.nbytes for d in docs), seconds),
            }
    return accuracy


# ---------------------------------------------------------------------------
# Report


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def print_report(result: dict[str, Any], console: Console) -> None:
    throughput = Table(title=f"Estimator throughput (corpus: {result['corpus']})")
    for column in ("kind", "files", "MB", "estimator MB/s", "tiktoken MB/s", "ratio"):
        throughput.add_column(column, justify="left" if column == "kind" else "right")
    for kind, row in result["per_kind"].items():
        throughput.add_row(
            kind,
            str(row["files"]),
            f"{row['bytes'] / MB:.2f}",
            _fmt(row["estimator_mb_s"], ",.1f"),
            _fmt(row["tiktoken_mb_s"], ",.2f"),
            _fmt(row["throughput_ratio"], ",.1f") + "×",
        )
    throughput.add_row(
        "[b]all[/]",
        str(sum(r["files"] for r in result["per_kind"].values())),
        f"{result['bytes'] / MB:.2f}",
        _fmt(result["estimator_mb_s"], ",.1f"),
        _fmt(result["tiktoken_mb_s"], ",.2f"),
        _fmt(result["throughput_ratio"], ",.1f") + "×",
    )
    console.print(throughput)

    ratio = result["throughput_ratio"]
    if ratio is None:
        console.print(f"target ≥ {TARGET_RATIO:.0f}×: [yellow]not measured[/] (no tiktoken)")
    else:
        verdict = "[green]PASS[/]" if ratio >= TARGET_RATIO else "[red]MISS[/]"
        console.print(f"throughput ratio {ratio:.1f}× vs target ≥ {TARGET_RATIO:.0f}×: {verdict}")

    accuracy = Table(title="Estimate accuracy: (estimate − exact) / exact per file")
    accuracy.add_column("kind")
    accuracy.add_column("tokenizer", no_wrap=True)
    for column in ("estimate", "exact", "bias", "mean|err|", "max|err|"):
        accuracy.add_column(column, justify="right", no_wrap=True)
    for kind, by_tokenizer in result["accuracy"].items():
        for name, row in by_tokenizer.items():
            accuracy.add_row(
                kind,
                name,
                f"{row['estimate_tokens']:,}",
                f"{row['exact_tokens']:,}",
                _fmt(row["bias"], "+.1%"),
                _fmt(row["mean_rel_err"], ".1%"),
                _fmt(row["max_rel_err"], ".1%"),
            )
    console.print(accuracy)


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for module in ("numpy", "tiktoken"):
        try:
            versions[module] = __import__(module).__version__
        except (ImportError, AttributeError):
            continue
    return versions


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=5, help="timed repeats (best is kept)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON path")
    args = parser.parse_args(argv)
    console = Console()
    started = time.perf_counter()

    env_corpus = os.environ.get("CAIRN_CORPUS")
    root = Path(env_corpus) if env_corpus else DEFAULT_CORPUS
    corpus = load_corpus(root)
    if corpus is None:
        console.print(f"[yellow]no corpus at {root}; generating a deterministic one[/]")
        corpus, corpus_label = generate_corpus(), "generated"
    else:
        corpus_label = env_corpus if env_corpus else "../shared/data/text"

    throughput = measure_throughput(corpus, max(1, args.repeat), console)
    accuracy = measure_accuracy(corpus, console)
    ratio = throughput["throughput_ratio"]
    result: dict[str, Any] = {
        "corpus": corpus_label,
        "files": {kind: len(docs) for kind, docs in corpus.items()},
        "bytes": throughput["bytes"],
        "estimator_mb_s": throughput["estimator_mb_s"],
        "tiktoken_mb_s": throughput["tiktoken_mb_s"],
        "throughput_ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "meets_target": None if ratio is None else ratio >= TARGET_RATIO,
        "per_kind": throughput["per_kind"],
        "accuracy": accuracy,
        "repeat": args.repeat,
        "versions": _versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    print_report(result, console)

    output: Path = args.output
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    console.print(f"wrote {output} in {result['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
