import sys

import pytest

from tsw.core._progress import Progress


def test_silent_without_verbose(capsys):
    with Progress(False, 10, "job") as bar:
        for _ in range(10):
            bar.update(1, value=1.0)
    assert capsys.readouterr() == ("", "")


def test_printed_lines_without_tqdm(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # the import raises ImportError
    with Progress(True, 100, "job", unit="pairs") as bar:
        for _ in range(100):
            bar.update(1, value=0.5)
    lines = capsys.readouterr().out.splitlines()
    # a line every tenth of the run, the first step and the last included
    assert lines[0] == "job: 1/100 pairs, value 0.5"
    assert lines[-1] == "job: 100/100 pairs, value 0.5"
    assert len(lines) == 11


def test_tqdm_bar(capsys):
    pytest.importorskip("tqdm")
    with Progress(True, 4, "job") as bar:
        bar.update(2)
        bar.update(2, value=3.25)
    err = capsys.readouterr().err
    assert "job" in err
    assert "4/4" in err
