"""Which record a command uses, and a record URL as dse prints and records it: never with
its password."""

from __future__ import annotations

import pytest

import dse
from dse.model._errors import ConfigError
from dse.record._open import RECORD_ENV, record_url
from dse.record.postgres import shown


@pytest.mark.parametrize(("url", "printed"), [
    ("postgresql://alice:secret@db:5432/dse?sslmode=require",
     "postgresql://alice@db:5432/dse?sslmode=require"),
    ("postgresql://alice@db/dse", "postgresql://alice@db/dse"),
    ("postgresql://db/dse?password=secret&sslmode=require",
     "postgresql://db/dse?sslmode=require"),
    ("postgres://a:b@/dse?host=/run/postgresql", "postgres://a@/dse?host=/run/postgresql"),
])
def test_a_url_is_printed_without_its_password(url: str, printed: str) -> None:
    assert shown(url) == printed
    assert "secret" not in shown(url)


def test_the_flag_comes_before_the_environment_before_the_campaign_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(RECORD_ENV, raising=False)
    assert record_url(None, None) is None
    assert record_url(None, "postgresql://file/db") == "postgresql://file/db"
    monkeypatch.setenv(RECORD_ENV, "postgresql://env/db")
    assert record_url(None, "postgresql://file/db") == "postgresql://env/db"
    assert record_url("postgresql://flag/db", "postgresql://file/db") == "postgresql://flag/db"
    monkeypatch.setenv(RECORD_ENV, "mysql://env/db")
    with pytest.raises(ConfigError, match=f"^{RECORD_ENV}: 'mysql://env/db' is not a record"):
        record_url(None, None)


@pytest.mark.parametrize("url", ["postgresql://alice:secret@db/dse",
                                 "postgresql://db/dse?password=secret"])
def test_a_campaign_file_may_not_hold_the_records_password(url: str) -> None:
    with pytest.raises(ConfigError, match="record: the record URL holds a password"):
        dse.campaign_from_dict({
            "campaign": {"name": "c", "record": url},
            "space": {"x": {"type": "int", "low": 0, "high": 3}},
            "objectives": [{"metric": "v"}],
        })
    c = dse.campaign_from_dict({
        "campaign": {"name": "c", "record": "postgresql://alice@db/dse"},
        "space": {"x": {"type": "int", "low": 0, "high": 3}},
        "objectives": [{"metric": "v"}],
    })
    assert c.record == "postgresql://alice@db/dse"
