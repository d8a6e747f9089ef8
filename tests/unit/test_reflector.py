"""What a reader makes of a listing after a gap: only the news, and the deletions no watch delivered."""

from __future__ import annotations

from typing import Any

from dtjob.kube.reflector import object_key, relisted


def obj(name: str, version: str, namespace: str | None = "ns") -> dict[str, Any]:
    meta = {"name": name, "resourceVersion": version} | ({"namespace": namespace} if namespace else {})
    return {"metadata": meta}


def test_a_listing_after_a_gap_reports_what_changed_and_what_went_and_nothing_else() -> None:
    known = {"ns/kept": "5", "ns/edited": "6", "ns/deleted-in-the-gap": "7"}
    listing = [obj("kept", "5"), obj("edited", "9"), obj("created-in-the-gap", "10")]
    changed, gone, now = relisted(known, listing)
    assert [object_key(o) for o in changed] == ["ns/edited", "ns/created-in-the-gap"]
    assert gone == ["ns/deleted-in-the-gap"]
    assert now == {"ns/kept": "5", "ns/edited": "9", "ns/created-in-the-gap": "10"}


def test_a_first_listing_is_all_news_and_an_empty_one_deletes_everything_known() -> None:
    assert relisted({}, [obj("a", "1"), obj("node-1", "2", None)])[0] == [
        obj("a", "1"),
        obj("node-1", "2", None),
    ]
    assert relisted({"ns/a": "1", "node-1": "2"}, []) == ([], ["node-1", "ns/a"], {})
