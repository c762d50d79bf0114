"""A ``models:`` entry is one pass: its options come from that entry alone (over ``scoring:``),
never from another entry of the same spec, and two entries that would be one pass are refused."""

from pathlib import Path

import pytest
import yaml

from checkworthy.cli.main import main
from checkworthy.config import CODE_ROOT, load_params, model_name
from checkworthy.scorers.registry import configured_scorer, model_options

PARAMS = CODE_ROOT / "params.yaml"
PRODUCTION = CODE_ROOT / "params.production.yaml"


def write_params(tmp_path: Path, models: list[dict]) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(load_params(PARAMS) | {"models": models}), encoding="utf-8")
    return path


@pytest.mark.parametrize("path", [PARAMS, PRODUCTION])
def test_each_entry_of_a_shared_spec_keeps_its_own_sampling(path):
    params = load_params(path)
    names = [model_name(m) for m in params["models"]]
    assert len(set(names)) == len(names)
    paper, ablation = [n for n in names if n.startswith(params["models"][0]["spec"])]
    assert "sampling" not in model_options(params, paper)  # the paper's T = 0.8, not the ablation's
    assert model_options(params, ablation)["sampling"] == "t0.1"
    assert ablation == f"{params['models'][0]['spec']}#t0.1"


def test_the_embedded_passes_sample_at_the_papers_and_the_ablations_temperature():
    """What the paper table is computed from: the scorers' own sampling parameters."""
    params = load_params(PARAMS)
    got = {}
    for name in ("embedded:gemma3-270m", "embedded:gemma3-270m#t0.1"):
        scorer, _ = configured_scorer(params, name)
        p = scorer.params()
        got[name] = (p["temperature"], p["top_k"], p["top_p"])
    assert got == {"embedded:gemma3-270m": (0.8, 64, 0.95), "embedded:gemma3-270m#t0.1": (0.1, 64, 0.95)}


def test_a_bare_spec_gets_scoring_options_only(tmp_path):
    params = load_params(write_params(tmp_path, [{"spec": "ollama:gemma3:270m", "sampling": "t0.1"}]))
    assert "sampling" not in model_options(params, "ollama:gemma3:270m")
    assert model_options(params, "ollama:gemma3:270m#t0.1")["sampling"] == "t0.1"


@pytest.mark.parametrize("models, says", [
    ([{"spec": "embedded:gemma3-270m"}, {"spec": "embedded:gemma3-270m"}],
     "entries 1 and 2 have the same options (embedded:gemma3-270m): one pass twice; drop one"),
    ([{"spec": "embedded:gemma3-270m", "name": "a"}, {"spec": "embedded:gemma3-270m", "name": "b"}],
     "entries 1 and 2 have the same options"),
    ([{"spec": "classifier:minilm-lr"}, {"spec": "embedded:gemma3-270m", "name": "classifier:minilm-lr"}],
     "entries 1 and 2 are both 'classifier:minilm-lr': give one a name: of its own"),
    ([{"spec": "classifier:minilm-lr"}, {"sampling": "t0.1"}], "entry 2 has no spec:"),
])
def test_two_entries_of_one_pass_are_refused_in_one_line(tmp_path, capsys, models, says):
    path = write_params(tmp_path, models)
    (tmp_path / "in.csv").write_text("id,text\n1,Taxes rose by 4% last year.\n", encoding="utf-8")
    for argv in (["run", "--params", str(path), "--limit", "4"],
                 ["score", "--params", str(path), "--model", "classifier:minilm-lr",
                  "--input", str(tmp_path / "in.csv"), "--out", str(tmp_path / "out.csv")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and says in err and f"{path}, field 'models':" in err, err
    assert not (tmp_path / "out.csv").exists()
