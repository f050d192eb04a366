"""`benchmarks/qwen_vocab_model.py` builds the Qwen-vocabulary model once."""

import runpy
import sys


def test_qwen_vocab_model_is_built_once(tmp_path, monkeypatch, capsys):
    """`benchmarks/qwen_vocab_model.py DIR` leaves a directory that already holds a model as it is."""
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(sys, "argv", ["qwen_vocab_model.py", str(tmp_path)])
    runpy.run_path("benchmarks/qwen_vocab_model.py", run_name="__main__")
    assert "nothing to do" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == [tmp_path / "config.json"]
