"""The contract's time statements are generated from the recorded full runs (issue 26 item 7)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rank_lab.book import cli
from rank_lab.book.wall_times import (
    BEGIN,
    END,
    contract_path,
    recorded_wall_times,
    update_contract,
    wall_times_block,
)


def test_the_contract_states_the_recorded_wall_times() -> None:
    assert update_contract(), (
        "docs/book_contract.md is stale: python -m rank_lab.book wall-times --write"
    )
    text = contract_path().read_text(encoding="utf-8")
    assert "15 minutes" not in text  # no hand-written time that the records contradict
    rows = recorded_wall_times()
    assert rows and [r["wall_s"] for r in rows] == sorted(r["wall_s"] for r in rows)
    for r in rows:  # every record is in the table with its own wall time
        assert re.search(
            rf"^\| {r['notebook']} \| {r['wall_s'] / 60:.1f} \| {r['seeds']} \|", text, re.M
        )


def test_the_block_follows_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    book = tmp_path / "book"
    (book / "part" / "recorded").mkdir(parents=True)
    src = next(
        p
        for p in contract_path().parent.parent.joinpath("book").rglob("recorded/*.json")
        if "." not in p.stem
    )
    nb = next(contract_path().parent.parent.joinpath("book").rglob(f"{src.stem}.md"))
    (book / "part" / nb.name).write_text(nb.read_text())
    doc = json.loads(src.read_text())
    doc["provenance"]["wall_s"] = 90.0
    (book / "part" / "recorded" / src.name).write_text(json.dumps(doc))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "book_contract.md").write_text(
        f"# Contract\n\nbefore\n{BEGIN}\nstale\n{END}\nafter\n"
    )
    monkeypatch.setenv("RANK_LAB_BOOK", str(book))
    assert "took 1.5 to 1.5 minutes (median 1.5)" in wall_times_block()
    assert not update_contract()
    assert cli.main(["wall-times", "--write"]) == 0 and update_contract()
    text = (tmp_path / "docs" / "book_contract.md").read_text()
    assert (
        text.startswith("# Contract\n\nbefore\n")
        and text.endswith(f"{END}\nafter\n")
        and "stale" not in text
    )
    assert f"| {src.stem} | 1.5 |" in text
    (tmp_path / "docs" / "book_contract.md").write_text("no markers")
    with pytest.raises(ValueError, match="markers"):
        update_contract()
