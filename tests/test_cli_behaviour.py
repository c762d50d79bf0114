"""The command line's behaviour pinned byte for byte: what each ``checkworthy`` invocation prints on
stdout and stderr, its exit status, the files it writes and the figures it stores.

A refactor proves it changed no behaviour by this file passing before and after. Each invocation
of :data:`CALLS` runs the real console script (``.venv/bin/checkworthy``) in a process of its own,
as an operator runs it, on small real CLEF 2024 files and a fresh database of the session's
embedded Postgres; the result is compared with ``tests/golden/<name>.json``, captured on the code
before the refactor. For ``calibrate`` and ``predict`` the OUT file and the stored run (its params,
its metrics and every claim's score, theta, interval, decision, kNN mean, neighbours and distances,
by ``repr``) are pinned too, so that the last digit of the arithmetic is covered.

Starting Python, torch and Prefect afresh for each of 114 invocations would take over ten minutes
on a loaded machine, so the process is a fork of ``tests/golden/console.py``, which imported the
slow libraries once and runs the console script as ``__main__`` in each fork, with its own file
descriptors and exit status; invocations marked ``exec`` execute the script itself, and
``CHECKWORTHY_GOLDEN_EXEC=1`` makes every invocation do so (to check that the forks print what
the script prints). The environment is the test's, with ``DATABASE_URL`` the fresh database and no
``CHECKWORTHY_*``, ``PREFECT_*`` or ``COLUMNS`` (help is wrapped at 80 columns, as in a pipe).

Invocations that use the store run in the order of :data:`CALLS` (each after every earlier one
that uses the store, so that run and claim ids are those of the golden files, whichever test is
selected); the others run alone. Only what truly varies from run to run is normalised, by the
substitutions of :data:`VOLATILE`: the scratch folder, the checkout's path and git revision, clock
times, durations and rates, and an API key's secret. Ids (runs, claims, label sets, predictions)
are not normalised: in a fresh database they are the same on every run of the same commands.
MiniLM's float32 vectors depend on the CPU's kernels (torch's CPU capability: AVX-512, AVX2, ...),
and every figure after them with it: on the capability the golden files were captured on
(:data:`CAPTURED_ON`) everything is compared byte for byte; on another, numbers are compared to
:data:`DIGITS` significant digits (and the test says so), the rest still byte for byte.

To (re)write the golden files, on code whose behaviour is the reference:
``CHECKWORTHY_GOLDEN_UPDATE=1 .venv/bin/python -m pytest tests/test_cli_behaviour.py``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, create_engine, text

from checkworthy.config import CODE_ROOT
from checkworthy.data.datasets import load_clef
from checkworthy.testing.claims import write_csv
from checkworthy.testing.datasets import raw_path
from checkworthy.testing.scratch_project import VENV_BIN, fresh_database

GOLDEN = Path(__file__).parent / "golden"
#: the console script an operator runs
SCRIPT = VENV_BIN / "checkworthy"
UPDATE = os.environ.get("CHECKWORTHY_GOLDEN_UPDATE") == "1"
#: execute the console script for every invocation (slow), not only for those marked ``exec``
EXEC_ALL = os.environ.get("CHECKWORTHY_GOLDEN_EXEC") == "1"
#: the folder of the input files and outputs, as the golden files spell it
DATA = "<DATA>"
#: torch's CPU capability the golden files were captured on (written with them)
CAPTURED_ON = GOLDEN / "cpu_capability.txt"
#: significant digits numbers are compared to on another CPU capability
DIGITS = 6
#: a decimal number in a printed or stored figure
NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")
#: the claim ``explain`` asks about (``{claim}``): a CLEF 2024 dev-test claim of U, not of PU
EXPLAINED = "38421"


@dataclass(frozen=True)
class Call:
    """One invocation: ``argv`` after ``checkworthy`` (``{d}`` is the data folder, ``{run:NAME}``
    the run id that invocation NAME printed); ``store``: it uses the store (run in order);
    ``out``: a file it writes (in the data folder), pinned; ``figures``: the run it prints, pinned
    as stored; ``exec``: run by executing the console script itself (else in a fork of
    ``tests/golden/console.py``)."""

    name: str
    argv: tuple[str, ...]
    store: bool = False
    out: str | None = None
    figures: bool = False
    exec: bool = False


def call(name: str, *argv: str, store: bool = False, out: str | None = None, figures: bool = False,
         exec: bool = False) -> Call:
    return Call(name, argv, store, out, figures, exec)


CAL = ("calibrate", "--labeled", "{d}/L.csv", "--unlabeled", "{d}/U.csv")
PRED = ("predict", "--labeled", "{d}/PL.csv", "--unlabeled", "{d}/PU.csv", "--model", "classifier:minilm-lr",
        "--score-kind", "p_positive")
HELP = ("", "run", "labels", "labels add", "labels versions", "review", "review export", "review import",
        "label-studio-backend", "calibrate", "predict", "evaluate", "compare", "report", "explain", "serve",
        "keys", "keys create", "keys revoke", "keys list", "score", "train-classifier", "adapt", "models",
        "models list", "models promote", "models retire", "demonstrations")

CALLS: tuple[Call, ...] = (
    call("help", "--help"),
    *(call("help-" + "-".join(cmd.split()), *cmd.split(), "--help") for cmd in HELP[1:]),
    # refusals by argparse: one line, status 2
    call("no-command"),
    call("unknown-command", "frobnicate"),
    call("labels-no-subcommand", "labels"),
    call("calibrate-no-labeled", "calibrate", "--unlabeled", "{d}/U.csv", "--k", "5", "--out", "{d}/o.csv"),
    call("calibrate-k-zero", *CAL, "--k", "0", "--out", "{d}/o.csv"),
    call("calibrate-k-not-a-number", *CAL, "--k", "five", "--out", "{d}/o.csv"),
    call("calibrate-alpha-one", *CAL, "--k", "5", "--alpha", "1", "--out", "{d}/o.csv"),
    call("calibrate-threshold-nan", *CAL, "--k", "5", "--threshold", "nan", "--out", "{d}/o.csv"),
    call("calibrate-bad-name", *CAL, "--k", "5", "--out", "{d}/o.csv", "--name", "desk a"),
    call("calibrate-bad-knn", *CAL, "--k", "5", "--out", "{d}/o.csv", "--knn", "ivf"),
    call("predict-prior-uniform", *PRED, "--out", "{d}/o.csv", "--prior", "uniform"),
    call("explain-bad-id", "explain", "id:12x"),
    call("serve-port-too-large", "serve", "--port", "70000"),
    call("review-export-bad-format", "review", "export", "--format", "xml", "--out", "{d}/q.csv"),
    call("keys-create-bad-role", "keys", "create", "bob", "--role", "admin"),
    # refusals of the commands themselves, before the store: one line, status 2
    call("calibrate-max-risk-zero", *CAL, "--k", "5", "--out", "{d}/o.csv", "--max-risk", "0"),
    call("calibrate-delta-too-large", *CAL, "--k", "5", "--out", "{d}/o.csv", "--delta", "1.5"),
    call("calibrate-unknown-review-risk", *CAL, "--k", "5", "--out", "{d}/o.csv", "--review-risk", "cost"),
    call("calibrate-unknown-interval", *CAL, "--k", "5", "--out", "{d}/o.csv", "--interval", "bootstrap"),
    call("calibrate-unknown-correction", *CAL, "--k", "5", "--out", "{d}/o.csv", "--correction", "magic"),
    call("calibrate-out-is-a-folder", *CAL, "--k", "5", "--out", "{d}"),
    call("calibrate-out-is-an-input", *CAL, "--k", "5", "--out", "{d}/U.csv"),
    call("calibrate-out-folder-missing", *CAL, "--k", "5", "--out", "{d}/nowhere/o.csv"),
    call("calibrate-labeled-missing", "calibrate", "--labeled", "{d}/missing.csv", "--unlabeled", "{d}/U.csv",
         "--k", "5", "--out", "{d}/o.csv"),
    call("calibrate-score-out-of-range", "calibrate", "--labeled", "{d}/bad-score.csv", "--unlabeled",
         "{d}/U.csv", "--k", "5", "--out", "{d}/o.csv"),
    call("calibrate-score-not-a-number", "calibrate", "--labeled", "{d}/text-score.csv", "--unlabeled",
         "{d}/U.csv", "--k", "5", "--out", "{d}/o.csv"),
    call("calibrate-label-two", "calibrate", "--labeled", "{d}/bad-label.csv", "--unlabeled", "{d}/U.csv",
         "--k", "5", "--out", "{d}/o.csv"),
    call("calibrate-empty-id", "calibrate", "--labeled", "{d}/empty-id.csv", "--unlabeled", "{d}/U.csv",
         "--k", "5", "--out", "{d}/o.csv"),
    call("calibrate-duplicate-id", "calibrate", "--labeled", "{d}/dup-id.csv", "--unlabeled", "{d}/U.csv",
         "--k", "5", "--out", "{d}/o.csv"),
    call("calibrate-no-score-column", "calibrate", "--labeled", "{d}/PL.csv", "--unlabeled", "{d}/U.csv",
         "--k", "5", "--out", "{d}/o.csv"),
    call("calibrate-extra-column", "calibrate", "--labeled", "{d}/extra-column.csv", "--unlabeled",
         "{d}/U.csv", "--k", "5", "--out", "{d}/o.csv"),
    call("calibrate-short-row", "calibrate", "--labeled", "{d}/short-row.csv", "--unlabeled", "{d}/U.csv",
         "--k", "5", "--out", "{d}/o.csv"),
    call("calibrate-id-in-both-files", "calibrate", "--labeled", "{d}/L.csv", "--unlabeled", "{d}/L.csv",
         "--k", "5", "--out", "{d}/o.csv"),
    call("calibrate-k-too-large", *CAL, "--k", "71", "--out", "{d}/o.csv", exec=True),
    call("predict-params-missing", *PRED, "--out", "{d}/o.csv", "--params", "{d}/no-params.yaml"),
    call("predict-unknown-model", "predict", "--labeled", "{d}/PL.csv", "--unlabeled", "{d}/PU.csv",
         "--model", "nonsense:x", "--score-kind", "p_positive", "--out", "{d}/o.csv"),
    call("predict-unknown-score-kind", *PRED[:-1], "verbalised", "--out", "{d}/o.csv"),
    call("score-unknown-model", "score", "--params", "", "--model", "nonsense:x", "--input", "{d}/S.csv",
         "--out", "{d}/o.csv"),
    call("score-no-classifier", "score", "--params", "", "--model", "classifier:does-not-exist",
         "--input", "{d}/S.csv", "--out", "{d}/o.csv"),
    call("score-duplicate-id", "score", "--params", "", "--model", "file:{d}/scores.csv", "--input",
         "{d}/dup-id.csv", "--out", "{d}/o.csv"),
    call("score-bad-opt", "score", "--params", "", "--model", "file:{d}/scores.csv", "--input", "{d}/S.csv",
         "--out", "{d}/o.csv", "--opt", "temperature"),
    call("labels-add-missing-file", "labels", "add", "{d}/no-labels.csv"),
    call("labels-add-empty-id", "labels", "add", "{d}/labels-empty-id.csv"),
    call("review-export-wrong-suffix", "review", "export", "--format", "csv", "--out", "{d}/q.json"),
    call("compare-bad-run", "compare", "--run", "one"),
    call("report-out-is-a-file", "report", "run:1", "--out", "{d}/L.csv"),
    call("evaluate-bad-models", "evaluate", "--models", "classifier:minilm-lr", "--out", "{d}/held"),
    call("demonstrations-not-yaml", "demonstrations", "--out", "{d}/demo.txt"),
    call("adapt-nothing-to-adapt", "adapt"),
    call("label-studio-backend-no-secret", "label-studio-backend", "--project", "1"),
    # through the store, in this order
    call("calibrate", *CAL, "--k", "5", "--out", "{d}/OUT.csv", store=True, out="OUT.csv", figures=True),
    call("calibrate-again", *CAL, "--k", "5", "--out", "{d}/OUT.csv", store=True, out="OUT.csv"),
    call("calibrate-review-miss", *CAL, "--k", "5", "--out", "{d}/OUT-miss.csv", "--review-risk", "miss",
         "--max-risk", "0.2", "--delta", "0.2", store=True, out="OUT-miss.csv", figures=True),
    call("calibrate-mondrian-platt", *CAL, "--k", "3", "--out", "{d}/OUT-platt.csv", "--interval", "mondrian",
         "--correction", "platt", store=True, out="OUT-platt.csv", figures=True),
    call("calibrate-unlabelled-without-labels", "calibrate", "--labeled", "{d}/L.csv", "--unlabeled",
         "{d}/U-nolabel.csv", "--k", "3", "--out", "{d}/OUT-nolabel.csv", store=True, out="OUT-nolabel.csv",
         figures=True),
    call("calibrate-text-of-a-labelled-claim", "calibrate", "--labeled", "{d}/L.csv", "--unlabeled",
         "{d}/U-copy.csv", "--k", "3", "--out", "{d}/OUT-copy.csv", store=True, out="OUT-copy.csv",
         figures=True),
    call("calibrate-named", *CAL, "--k", "5", "--out", "{d}/OUT-named.csv", "--name", "desk-a", store=True,
         out="OUT-named.csv"),
    call("calibrate-name-of-other-labels", "calibrate", "--labeled", "{d}/L2.csv", "--unlabeled", "{d}/U.csv",
         "--k", "5", "--out", "{d}/o.csv", "--name", "desk-a", store=True),
    call("predict", *PRED, "--k", "5", "--out", "{d}/POUT.csv", store=True, out="POUT.csv", figures=True),
    call("predict-batch-prior", *PRED, "--k", "5", "--out", "{d}/POUT-batch.csv", "--prior", "batch",
         "--correction", "platt", store=True, out="POUT-batch.csv", figures=True),
    call("predict-paper-z", *PRED, "--k", "5", "--out", "{d}/POUT-paper.csv", "--correction", "paper",
         "--interval", "z", store=True, out="POUT-paper.csv", figures=True),
    call("labels-versions", "labels", "versions", store=True),
    call("labels-versions-named", "labels", "versions", "desk-a", store=True),
    call("labels-add-unknown-claim", "labels", "add", "{d}/labels-unknown-claim.csv", store=True),
    call("explain", "explain", "{claim}", store=True),
    call("explain-run", "explain", "{claim}", "--run", "{run:calibrate}", store=True),
    call("explain-no-such-claim", "explain", "no-such-claim", store=True),
    call("explain-not-in-run", "explain", "{claim}", "--run", "{run:predict}", store=True),
    call("review-export-csv", "review", "export", "--format", "csv", "--limit", "4", "--out", "{d}/queue.csv",
         store=True, out="queue.csv"),
    call("review-export-label-studio", "review", "export", "--limit", "3", "--out", "{d}/queue.json",
         store=True, out="queue.json"),
    call("keys-create", "keys", "create", "alice", "--role", "scorer", store=True),
    call("keys-create-again", "keys", "create", "alice", "--role", "auditor", store=True),
    call("keys-create-bad-name", "keys", "create", "al ice", "--role", "auditor", store=True),
    call("keys-list", "keys", "list", store=True),
    call("keys-revoke", "keys", "revoke", "alice", store=True),
    call("keys-revoke-again", "keys", "revoke", "alice", store=True),
    call("keys-revoke-unknown", "keys", "revoke", "nobody", store=True),
    call("keys-list-after-revoke", "keys", "list", store=True),
    call("models-list", "models", "list", store=True),
    call("models-list-unknown-lineage", "models", "list", "--lineage", "desk-z", store=True),
    call("models-promote-unknown", "models", "promote", "7", store=True),
    call("score-file", "score", "--params", "", "--model", "file:{d}/scores.csv", "--input", "{d}/S.csv",
         "--out", "{d}/SOUT.csv", store=True, out="SOUT.csv"),
    call("score-file-again", "score", "--params", "", "--model", "file:{d}/scores.csv", "--input",
         "{d}/S.csv", "--out", "{d}/SOUT.csv", store=True, out="SOUT.csv"),
    call("score-classifier", "score", "--model", "classifier:minilm-lr", "--kind", "p_positive", "--input",
         "{d}/S.csv", "--out", "{d}/SOUT-clf.csv", store=True, out="SOUT-clf.csv"),
    call("report-unknown", "report", "no-such-report", store=True),
    call("report-unknown-run", "report", "run:999", "--out", "{d}/reports", store=True),
)

#: what varies from one run to the next, and what the golden files hold instead
VOLATILE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?(\+00:00)?"), "<TIME>"),  # clock times
    (re.compile(r"in \d+\.\d s ->"), "in <SECONDS> s ->"),  # score's duration
    (re.compile(r"\(\d+(\.\d+)?/s\)"), "(<RATE>/s)"),  # ... and its texts a second
    (re.compile(r"\bcode [0-9a-f]{7,40}\S*"), "code <REV>"),  # the checkout's git revision (explain)
    (re.compile(r"(key alice \(scorer\)): \S+"), r"\1: <SECRET>"),  # a new API key's secret
    (re.compile(r"(alice\tscorer\t)\S+(\.\.\.\t)"), r"\1<PREFIX>\2"),  # ... and its first characters
)


def normalise(out: str, folder: Path) -> str:
    """``out`` with the scratch folder and the checkout spelled as in the golden files and the
    substitutions of :data:`VOLATILE` made."""
    out = out.replace(str(folder), DATA).replace(str(CODE_ROOT), "<CODE>")
    for pattern, repl in VOLATILE:
        out = pattern.sub(repl, out)
    return out


def lines(out: str) -> list[str]:
    """One JSON string a line, the last one empty when ``out`` ends with a newline (so that a
    missing or extra final newline shows)."""
    return out.split("\n")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The input files, real CLEF 2024 claims: L (70 scored, labelled), U (30 scored, labelled),
    PL and PU (60 and 16 unscored, for predict), and malformed ones."""
    d = tmp_path_factory.mktemp("golden")
    rows, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    rng = np.random.default_rng(3)
    claims = [(c.source_id, c.text, round(float(np.clip(0.55 + 0.2 * c.label + rng.normal(0, 0.2), 0, 1)), 4),
               c.label) for c in rows[:100]]
    head = ["id", "text", "score", "label"]
    write_csv(d / "L.csv", head, claims[:70])
    write_csv(d / "L2.csv", head, claims[:60])
    write_csv(d / "U.csv", head, claims[70:])
    write_csv(d / "U-nolabel.csv", head[:3], [c[:3] for c in claims[70:80]])
    write_csv(d / "U-copy.csv", head[:3], [("again", claims[3][1], claims[3][2]),
                                           (claims[80][0], claims[80][1], "-0")])
    write_csv(d / "PL.csv", ["id", "text", "label"], [(c[0], c[1], c[3]) for c in claims[:60]])
    write_csv(d / "PU.csv", ["id", "text", "label"], [(c[0], c[1], c[3]) for c in claims[60:76]])
    write_csv(d / "S.csv", ["id", "text"], [(c[0], c[1]) for c in claims[90:96]])
    write_csv(d / "scores.csv", ["id", "text", "score"], [c[:3] for c in claims[90:95]])
    broken = {"bad-score": (2, 2, "1.4"), "text-score": (1, 2, "high"), "bad-label": (3, 3, "2"),
              "empty-id": (2, 0, "")}
    for name, (row, col, value) in broken.items():
        bad = [list(c) for c in claims[:70]]
        bad[row][col] = value
        write_csv(d / f"{name}.csv", head, bad)
    write_csv(d / "dup-id.csv", head, [*claims[:5], (claims[1][0], *claims[5][1:])])
    write_csv(d / "extra-column.csv", [*head, "note"], [(*c, "x") for c in claims[:70]])
    (d / "short-row.csv").write_text(
        "id,text,score,label\n" + f"{claims[0][0]},a claim,0.5,1\n" + f"{claims[1][0]},a claim\n",
        encoding="utf-8")
    (d / "labels-empty-id.csv").write_text("id,dataset,label\n101,clef2024,1\n,clef2024,0\n", encoding="utf-8")
    (d / "labels-unknown-claim.csv").write_text("id,dataset,label\nno-such-id,clef2024,1\n", encoding="utf-8")
    (d / "demo.txt").write_text("not a demonstrations file\n", encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def database(owner_url) -> Iterator[tuple[str, Engine]]:
    """A fresh database of its own: ids and lists are those of the golden files, whatever else ran."""
    with fresh_database(owner_url, f"checkworthy_golden_{os.getpid()}") as url:
        engine = create_engine(url)
        try:
            yield url, engine
        finally:
            engine.dispose()


class Runner:
    """Runs the invocations, each at most once; one that uses the store runs after every earlier
    one that does."""

    def __init__(self, folder: Path, url: str, engine: Engine, scratch: Path) -> None:
        self.folder, self.engine, self.scratch = folder, engine, scratch
        self.done: dict[str, dict[str, Any]] = {}
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("PREFECT_", "CHECKWORTHY_")) and k not in ("DATABASE_URL", "COLUMNS")}
        self.env.update(DATABASE_URL=url, PREFECT_HOME=str(scratch / "prefect-home"),
                        PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1")
        self.forks = Forks(self.env)

    def result(self, c: Call) -> dict[str, Any]:
        if c.store:
            for before in CALLS[:CALLS.index(c)]:
                if before.store and before.name not in self.done:
                    self.done[before.name] = self.run(before)
        if c.name not in self.done:
            self.done[c.name] = self.run(c)
        return self.done[c.name]

    def argv(self, c: Call) -> list[str]:
        """``c.argv`` with its placeholders filled in."""
        def fill(arg: str) -> str:
            m = re.fullmatch(r"\{run:([\w-]+)\}", arg)
            if m:
                return str(run_id(self.done[m[1]]))
            return arg.replace("{d}", str(self.folder)).replace("{claim}", EXPLAINED)
        return [fill(a) for a in c.argv]

    def run(self, c: Call) -> dict[str, Any]:
        argv = self.argv(c)
        stdout, stderr = self.scratch / "stdout", self.scratch / "stderr"
        if c.exec or EXEC_ALL:
            with open(stdout, "wb") as out, open(stderr, "wb") as err:
                status = subprocess.run([str(SCRIPT), *argv], env=self.env, cwd=CODE_ROOT, stdout=out,
                                        stderr=err, stdin=subprocess.DEVNULL, timeout=600).returncode
        else:
            status = self.forks.run(argv, stdout, stderr)
        printed = stdout.read_bytes().decode("utf-8", "surrogateescape")
        got: dict[str, Any] = {
            "argv": list(c.argv), "exit": status,
            "stdout": lines(normalise(printed, self.folder)),
            "stderr": lines(normalise(stderr.read_bytes().decode("utf-8", "surrogateescape"), self.folder)),
        }
        if c.out:
            written = self.folder / c.out
            got["out"] = lines(normalise(written.read_text(encoding="utf-8"), self.folder)) if written.exists() \
                else None
        if c.figures and status == 0:
            got["stored"] = stored_run(self.engine, run_id({"stdout": [printed]}))
        return got


class Forks:
    """``tests/golden/console.py``: the console script run in a forked process per invocation."""

    def __init__(self, env: dict[str, str]) -> None:
        self.server = subprocess.Popen([sys.executable, str(GOLDEN / "console.py"), str(SCRIPT)], env=env,
                                       cwd=CODE_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, argv: list[str], stdout: Path, stderr: Path) -> int:
        """The exit status of ``checkworthy ARGV``, its output written to ``stdout`` and ``stderr``."""
        assert self.server.stdin and self.server.stdout
        self.server.stdin.write(json.dumps({"argv": argv, "stdout": str(stdout), "stderr": str(stderr)}) + "\n")
        self.server.stdin.flush()
        answer = self.server.stdout.readline()
        assert answer, f"the fork server died (status {self.server.wait()})"
        return int(answer)

    def close(self) -> None:
        assert self.server.stdin
        self.server.stdin.close()
        self.server.wait(timeout=60)


def run_id(result: dict[str, Any]) -> int:
    """The run id ``calibrate`` and ``predict`` print: ``calibrated N claims (run ID, ...)``."""
    m = re.search(r"\(run (\d+), ", "\n".join(result["stdout"]))
    assert m, result["stdout"]
    return int(m[1])


def stored_run(engine: Engine, run: int) -> dict[str, Any]:
    """What the store holds of a run, floats by ``repr``: its methods and params, its metrics, and
    per claim (in claim id order) score, theta, interval, decision, kNN mean, neighbours and their
    distances."""
    with engine.connect() as conn:
        head = conn.execute(text("SELECT mode, status, k, params FROM calibration_runs WHERE id = :r"),
                            {"r": run}).one()
        metrics = conn.execute(text("SELECT method, metric, class, value FROM evaluation_metrics "
                                    "WHERE run_id = :r ORDER BY method, metric, class"), {"r": run}).all()
        results = conn.execute(text(
            """SELECT c.source_id, r.score, r.theta, r.ci_low, r.ci_high, r.decision, r.knn_mean,
                      ARRAY(SELECT n.source_id FROM unnest(r.neighbour_ids) WITH ORDINALITY u(id, i)
                            JOIN claims n ON n.id = u.id ORDER BY u.i) AS neighbours,
                      r.neighbour_distances
               FROM calibrated_results r JOIN claims c ON c.id = r.claim_id
               WHERE r.run_id = :r ORDER BY r.claim_id"""), {"r": run}).all()
    return {
        "run": f"{head.mode} {head.status} k={head.k}",
        "params": head.params,
        "metrics": [f"{method} {metric} class {cls}: {value!r}" for method, metric, cls, value in metrics],
        "results": [f"{r.source_id}: score {r.score!r} theta {r.theta!r} ci [{r.ci_low!r}, {r.ci_high!r}] "
                    f"decision {r.decision} knn_mean {r.knn_mean!r} neighbours {r.neighbours} "
                    f"distances {[repr(x) for x in r.neighbour_distances]}" for r in results],
    }


@pytest.fixture(scope="module")
def runner(folder, database, tmp_path_factory) -> Iterator[Runner]:
    url, engine = database
    runner = Runner(folder, url, engine, tmp_path_factory.mktemp("golden-scratch"))
    yield runner
    runner.forks.close()


def cpu_capability() -> str:
    """torch's CPU capability here (the kernels MiniLM's vectors come from)."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def rounded(value: Any) -> Any:
    """``value`` (a golden file's JSON) with every decimal number to :data:`DIGITS` significant digits."""
    text_ = json.dumps(value, ensure_ascii=False)
    return json.loads(NUMBER.sub(lambda m: f"{float(m[0]):.{DIGITS - 1}e}", text_))


@pytest.mark.parametrize("c", CALLS, ids=[c.name for c in CALLS])
def test_invocation_behaves_as_before(runner: Runner, c: Call) -> None:
    got = runner.result(c)
    path = GOLDEN / f"{c.name}.json"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        CAPTURED_ON.write_text(cpu_capability() + "\n")
        return
    assert path.exists(), f"no golden file {path.name}: CHECKWORTHY_GOLDEN_UPDATE=1 writes it"
    want = json.loads(path.read_text(encoding="utf-8"))
    same_cpu = CAPTURED_ON.read_text().strip() == cpu_capability()
    for key in ("argv", "exit", "stderr", "stdout", "out", "stored"):
        if same_cpu:
            assert got.get(key) == want.get(key), f"{c.name}: {key} differs from the golden file"
        else:
            assert rounded(got.get(key)) == rounded(want.get(key)), (
                f"{c.name}: {key} differs from the golden file beyond {DIGITS} significant digits "
                f"(captured on {CAPTURED_ON.read_text().strip()}, this CPU is {cpu_capability()})")
