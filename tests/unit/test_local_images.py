"""The local cluster's image housekeeping (pure functions of containerd's image list)."""

from __future__ import annotations

from localcluster.images import unnamed_images


def test_only_id_references_whose_image_lost_its_name_are_unnamed() -> None:
    targets = {
        "localhost/dtjob-trainer-torch:0.1.0": "sha256:new",
        "sha256:config-of-new": "sha256:new",  # the CRI's ID reference of the tagged image: kept
        "sha256:config-of-old": "sha256:old",  # the tag moved on: only this keeps the old content
        "127.0.0.1:5000/dtjob-operator@sha256:pushed": "sha256:pushed",  # a digest reference is a name
        "sha256:config-of-pushed": "sha256:pushed",
    }
    assert unnamed_images(targets) == ["sha256:config-of-old"]
    assert unnamed_images({}) == []
