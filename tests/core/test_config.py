"""Settings validation: every out-of-range value is a ValueError that names the field."""
import math

import pytest

from playground.config import AppConfig, GenerationSettings, coerce_settings


@pytest.mark.parametrize("field,value", [
    ("max_new_tokens", 0), ("max_new_tokens", -5), ("max_new_tokens", 10**9), ("max_new_tokens", 2.5),
    ("max_new_tokens", "64"), ("max_new_tokens", True), ("max_new_tokens", math.nan),
    ("temperature", -0.1), ("temperature", math.nan), ("temperature", math.inf), ("temperature", 99.0),
    ("temperature", "hot"),
    ("top_k", -1), ("top_k", 10**6), ("top_k", 1.5),
    ("top_p", 0.0), ("top_p", -0.5), ("top_p", 1.01), ("top_p", math.nan),
    ("seed", -1), ("seed", 2**64), ("seed", 1.5),
    ("top_candidates", 0), ("top_candidates", 1000),
    ("chat", "yes"), ("system_prompt", 12),
])
def test_out_of_range_setting_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        GenerationSettings(**{field: value}).validate()


@pytest.mark.parametrize("values", [
    {}, {"temperature": 0.7, "top_k": 50, "top_p": 0.9, "seed": 1}, {"max_new_tokens": 2048},
    {"temperature": 5.0}, {"top_p": 1.0}, {"seed": 0},
])
def test_in_range_settings_pass(values):
    assert GenerationSettings(**values).validate() == GenerationSettings(**values)


def test_coerce_turns_whole_floats_from_sliders_into_ints():
    s = coerce_settings(max_new_tokens=32.0, top_k=5.0, seed=7.0, temperature=0.5)
    assert (s.max_new_tokens, s.top_k, s.seed) == (32, 5, 7)
    assert isinstance(s.max_new_tokens, int)
    with pytest.raises(ValueError, match="max_new_tokens"):
        coerce_settings(max_new_tokens=32.5)


def test_greedy_means_temperature_zero():
    assert GenerationSettings().greedy
    assert not GenerationSettings(temperature=0.3).greedy


def test_app_config_reads_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PLAYGROUND_MODEL", "tiny")
    monkeypatch.setenv("PLAYGROUND_BACKEND", "torch")
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    cfg = AppConfig.from_env()
    assert (cfg.model, cfg.backend, cfg.cache_dir) == ("tiny", "torch", tmp_path)
    assert AppConfig.from_env(model="other").model == "other"
