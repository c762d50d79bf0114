"""params.yaml as one typed object: its values are the settings' defaults, and a bad value is
refused in one line naming the file and the field."""

from __future__ import annotations

import pytest
import yaml

from checkworthy.cli.main import main
from checkworthy.config import CODE_ROOT
from checkworthy.errors import DataError
from checkworthy.runs.adapt import AdaptSettings
from checkworthy.runs.predict import Recommended
from checkworthy.settings import Settings, load_settings

PARAMS = CODE_ROOT / "params.yaml"


def test_the_defaults_are_params_yaml():
    """A section left out of a params file means what params.yaml says, in every layer that reads it."""
    settings = load_settings(PARAMS)
    assert settings.model_dump() == Settings().model_dump()
    assert Recommended() == Recommended.of(settings.predict) == Recommended.from_params(settings.params)
    assert Recommended().model == "classifier:minilm-student" and Recommended().score_kind == "p_positive"
    assert AdaptSettings() == AdaptSettings.of(settings.adapt) == AdaptSettings.from_params(settings.params)
    assert (AdaptSettings().folds, AdaptSettings().epochs) == (3, 1)


def test_production_extends_params_yaml():
    production = load_settings(CODE_ROOT / "params.production.yaml")
    assert [m.spec for m in production.models][0] == "ollama:gemma3:270m"
    assert production.model_dump(exclude={"models"}) == Settings().model_dump(exclude={"models"})


@pytest.mark.parametrize("override, message", [
    ({"predict": {"k": 0}}, "field 'predict.k': must be greater than 0, got 0"),
    ({"predict": {"k": "5"}}, "field 'predict.k': must be a valid integer, got '5'"),
    ({"predict": {"prior": "uniform"}}, "field 'predict.prior': must be 'labelled', 'batch', 'f1' or 'auto', got 'uniform'"),
    ({"adapt": {"folds": 1}}, "field 'adapt.folds': must be greater than or equal to 2, got 1"),
    ({"adapt": {"epoch": 2}}, "field 'adapt.epoch': not a known option (a misspelt key?)"),
    ({"alpha": 1.5}, "field 'alpha': must be less than 1, got 1.5"),
    ({"sampling": {"clef2024": {"n_per_class": -1}}},
     "field 'sampling.clef2024.n_per_class': must be greater than 0, got -1"),
    ({"models": [{"spec": "classifier:minilm-lr", "sampling": 3}]},
     "field 'models[1].sampling': must be a valid string, got 3"),
])
def test_a_bad_value_is_refused_in_one_line(tmp_path, override, message):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"extends": str(PARAMS)} | override), encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_settings(path)
    assert str(err.value) == f"{path}, {message}"


def test_predict_refuses_a_bad_params_file_before_reading_its_inputs(tmp_path, capsys):
    path = tmp_path / "params.yaml"
    path.write_text(f"extends: {PARAMS}\npredict: {{max_risk: 2}}\n", encoding="utf-8")
    argv = ["predict", "--labeled", str(tmp_path / "L.csv"), "--unlabeled", str(tmp_path / "U.csv"),
            "--out", str(tmp_path / "OUT.csv"), "--params", str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}, field 'predict.max_risk': must be less than 1, got 2" in err
