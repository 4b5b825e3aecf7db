"""A lock with a standalone CPython, bundled and installed from the bundle alone, on the controller.

The CPython is a STAND-IN (tests/hosts/standalone_python.py): python-build-standalone's releases
are out of reach here, so the site's mirror (a folder, ``file://``) holds an archive of the same
shape made from the CPython that runs the tests, and the site's download list (uv's format) names
it at python-build-standalone's release URL, as uv's own list names real builds. uv is the real
one, the knowledge's release from PyPI by its pinned sha256: it fetches the archive for the bundle
(checking the list's sha256), and then installs it again from the unpacked bundle with
``UV_OFFLINE`` and the sources python_env gets on a host (provision.fleet.bundle_host.host_vars).
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from provision.fleet import bundle_python
from tests.cli_run import provision
from tests.hosts import standalone_python as standin
from tests.wheels import make_wheel, sha256

pytestmark = pytest.mark.network  # uv's wheel comes from PyPI (by its pinned hash)


def test_the_bundle_carries_the_archive_uv_installs_and_a_list_that_points_uv_at_it(tmp_path: Path) -> None:
    site = tmp_path / "pbs"  # the site's python-build-standalone mirror
    archive = standin.build_archive(site)
    listing = standin.downloads_json(archive, bundle_python.RELEASES)
    (site / "downloads.json").write_text(json.dumps(listing))
    house = tmp_path / "house"
    make_wheel(house, "torch", "2.13.0+cpu")
    (tmp_path / "provision.yaml").write_text(
        json.dumps(
            {
                "stack": {"frameworks": ["torch==2.13.0+cpu"], "python": standin.minor()},
                "install": {
                    "lock_closure": "always",
                    "pip": {"find_links": [str(house)]},
                    "python_source": "standalone",
                    "python_mirror": f"file://{site}",
                    "python_downloads_json": f"file://{site}/downloads.json",
                },
            }
        )
    )
    no_index = ("--set", "frameworks_no_index=true")
    assume = ("--assume", f"os=debian-12,python={standin.minor()},name=a")
    r = provision("plan", *assume, "-c", "provision.yaml", "--out", "run", *no_index, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = provision(
        "bundle", "provision.lock", "-c", "provision.yaml", "-o", "site.tar.gz", *no_index, "--json",
        cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)["info"]
    member = f"python/{standin.BUILD}/{archive.name}"
    [group] = info["groups"].values()
    assert group["standalone_python"] == member, info

    unpacked = tmp_path / "unpacked"
    with tarfile.open(tmp_path / "site.tar.gz") as tar:
        tar.extractall(unpacked, filter="data")
    # the archive is the site's, byte for byte; the bundle's list names it alone, by that sha256,
    # at the release URL a mirror replaces
    assert sha256(unpacked / member) == sha256(archive)
    [(key, entry)] = json.loads((unpacked / "python/downloads.json").read_text()).items()
    [(site_key, site_entry)] = listing.items()
    assert key == site_key and entry["sha256"] == sha256(archive)
    assert entry["url"] == f"{bundle_python.RELEASES}/{standin.BUILD}/{archive.name.replace('+', '%2B')}"
    assert {k: entry[k] for k in ("major", "minor", "patch", "build")} == {
        k: site_entry[k] for k in ("major", "minor", "patch", "build")
    }

    # as python_env runs it on a host: only the bundle's sources, no network, no site settings
    sources = bundle_python.host_sources(str(unpacked))
    uv = bundle_python.uv_binary(next(unpacked.glob("uv/*")), tmp_path / "uvbin")
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env.update(
        UV_OFFLINE="1",
        UV_NO_CONFIG="1",
        UV_CACHE_DIR=str(tmp_path / "uvcache"),
        UV_PYTHON_INSTALL_DIR=str(tmp_path / "pythons"),
        UV_PYTHON_INSTALL_MIRROR=sources["python_env_python_mirror"],
        UV_PYTHON_DOWNLOADS_JSON_URL=sources["python_env_python_downloads_json"],
    )
    installed = subprocess.run(
        [str(uv), "python", "install", standin.minor(), "--no-bin"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    assert f"Installed Python {standin.version()}" in installed.stderr
    found = subprocess.run(
        [str(uv), "python", "find", "--managed-python", standin.minor()], env=env, capture_output=True, text=True
    )
    assert found.stdout.strip().startswith(str(tmp_path / "pythons")), found
    ran = subprocess.run([found.stdout.strip(), "-c", "import platform; print(platform.python_version())"],
                         capture_output=True, text=True)  # fmt: skip
    assert ran.stdout.strip() == standin.version(), ran.stderr


@pytest.mark.parametrize(
    "url",
    [
        "https://example.org/x.tar.gz",  # no release tag before the file
        "https://example.org/20261202/notes.txt",  # not an archive
        "https://example.org/20261202/.hidden.tar.gz",
    ],
)
def test_a_download_url_that_is_not_a_release_file_is_refused(url: str) -> None:
    with pytest.raises(bundle_python.OperationFailed, match="is not a release file"):
        bundle_python._build_and_file(url)
