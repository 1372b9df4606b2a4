"""A rebuild does not leave the image it superseded behind (each one kept 2-6 GB of disk)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from scripts import build_images

pytestmark = [pytest.mark.pods, pytest.mark.timeout(900)]


def _foreign_untagged_image(tool: build_images.Tool, tmp_path: Path) -> str:
    """An untagged image this project did not build (no build-key label): not ours to remove."""
    (tmp_path / "hello").write_text("not ours\n")
    tar = tmp_path / "foreign.tar"
    with tarfile.open(tar, "w") as t:
        t.add(tmp_path / "hello", arcname="hello")
    name = "localhost/distrs-prune-foreign:test"
    tool.run("import", str(tar), name, capture=True)
    image_id = tool.image_id(name)
    assert image_id
    tool.run("untag", name, capture=True)
    return image_id


def _build(tool: build_images.Tool, dockerfile: Path, image: str, base: str, stamp: str) -> str:
    tool.build(
        dockerfile, image, {"BASE_IMAGE": base, "STAMP": stamp}, {build_images.KEY_LABEL: "prune-check"}
    )
    image_id = tool.image_id(image)
    assert image_id
    return image_id


def test_rebuild_prunes_the_superseded_image_and_keeps_others(
    pod_tool: build_images.Tool, pod_images: dict[str, str], tmp_path: Path
) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nARG STAMP\nRUN echo $STAMP > /stamp\n")
    image, base = "localhost/distrs-prune-check:test", pod_images["redis"]
    made = [image]
    try:
        with build_images.build_lock():  # no other build's prune in between
            foreign = _foreign_untagged_image(pod_tool, tmp_path)
            made.append(foreign)
            first = _build(pod_tool, dockerfile, image, base, "one")
            made.append(first)
            second = _build(pod_tool, dockerfile, image, base, "two")
            made.append(second)
            assert first != second
            assert pod_tool.image_id(first) == first  # untagged, still on disk before the prune

            pod_tool.prune_superseded()

        assert pod_tool.image_id(first) is None
        assert pod_tool.image_id(image) == second
        assert pod_tool.image_id(base) is not None
        assert pod_tool.image_id(foreign) == foreign
    finally:
        for ref in made:
            pod_tool.run("rmi", "--force", ref, check=False, capture=True)
