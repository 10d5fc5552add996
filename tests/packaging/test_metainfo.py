"""The AppStream metainfo agrees with the desktop entry, the icons and the app."""

from __future__ import annotations

import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from app import APP_NAME, __version__
from tests.packaging.desktop_entry import read_entry

ROOT = Path(__file__).resolve().parents[2]
LINUX = ROOT / "packaging" / "linux"
ICONS = ROOT / "resources" / "icons"
COMPONENT_ID = "io.github.vram_steward.vram_steward"
METAINFO = LINUX / f"{COMPONENT_ID}.metainfo.xml"
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)


@pytest.fixture(scope="module")
def component() -> ET.Element:
    root = ET.parse(METAINFO).getroot()
    assert root.tag == "component"
    return root


def test_component_is_the_desktop_application_the_entry_launches(component: ET.Element) -> None:
    assert component.get("type") == "desktop-application"
    assert component.findtext("id") == COMPONENT_ID  # the file is named after its id
    launchable = component.find("launchable")
    assert launchable is not None and launchable.get("type") == "desktop-id"
    assert launchable.text == "vram-steward.desktop"
    assert (LINUX / launchable.text).is_file()


def test_names_and_licences_match_the_project(component: ET.Element) -> None:
    entry = read_entry(LINUX / "vram-steward.desktop")
    assert component.findtext("name") == entry["Name"] == APP_NAME
    assert component.findtext("summary") == entry["Comment"]
    assert component.findtext("project_license") == "MIT"
    assert component.findtext("metadata_license") == "CC0-1.0"
    description = component.find("description")
    assert description is not None and len("".join(description.itertext()).strip()) > 100


def test_latest_release_is_the_app_version(component: ET.Element) -> None:
    releases = component.findall("releases/release")
    assert releases and releases[0].get("version") == __version__


def test_command_and_categories_match_the_entry(component: ET.Element) -> None:
    entry = read_entry(LINUX / "vram-steward.desktop")
    assert component.findtext("provides/binary") == entry["Exec"]
    categories = [c.text for c in component.findall("categories/category")]
    assert categories == [c for c in entry["Categories"].split(";") if c]


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


@pytest.mark.parametrize("size", ICON_SIZES)
def test_the_entry_icon_exists_at_every_size_installed(size: int) -> None:
    icon = read_entry(LINUX / "vram-steward.desktop")["Icon"]
    assert png_size(ICONS / f"{icon}-{size}.png") == (size, size)


def test_windows_icon_holds_every_size_as_png() -> None:
    data = (ICONS / "vram-steward.ico").read_bytes()
    reserved, kind, count = struct.unpack_from("<HHH", data)
    assert (reserved, kind) == (0, 1)
    sizes = []
    for n in range(count):
        entry = struct.unpack_from("<BBBBHHII", data, 6 + 16 * n)
        width, length, offset = entry[0], entry[6], entry[7]
        assert data[offset:offset + 8] == b"\x89PNG\r\n\x1a\n"
        assert offset + length <= len(data)
        sizes.append(width or 256)
    assert sorted(sizes) == list(ICO_SIZES)


@pytest.mark.skipif(shutil.which("appstreamcli") is None, reason="appstreamcli is not installed")
def test_appstream_validator_accepts_it() -> None:
    result = subprocess.run(["appstreamcli", "validate", "--no-net", "--explain", str(METAINFO)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
