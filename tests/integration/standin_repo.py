"""A local, signed, flat apt repository of STAND-IN packages that carry NVIDIA's real package names
and versions, served over HTTP on the test bridge.

NVIDIA's CUDA repository cannot be reached from the test hosts, and its packages need a GPU to
be of any use, so the `nvidia-repo` method is tested against this: the same names and versions
(nvidia-open-<branch>, nvidia-kernel-open-dkms, nvidia-fabricmanager-<branch>, cuda-toolkit-X-Y,
cudnn9-cuda-12, ...), the same flat layout (``deb [signed-by=KEY] URL/ /``), signed with a
throwaway gpg key whose fingerprint the test pins like the real one. The "kernel module" is a
tiny ELF object whose .modinfo says the driver version, installed for a stand-in kernel, so the
role's `modinfo` check reads a real module header. Services are oneshot units that stay active.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import http.server
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path

STANDIN_KERNEL = "6.1.0-99-standin"


@dataclass(frozen=True)
class Deb:
    name: str
    version: str
    depends: str = ""
    files: tuple[tuple[str, str, int], ...] = ()  # (path, content, mode)
    postinst: str = ""
    extra: str = ""  # more control fields


def _module_ko(version: str, workdir: Path) -> bytes:
    """An ELF object with a .modinfo section: what modinfo reads from a real nvidia.ko."""
    src = workdir / "m.c"
    src.write_text("int provision_standin;\n")
    info = workdir / "modinfo.bin"
    info.write_bytes(f"version={version}\0license=NVIDIA\0name=nvidia\0description=stand-in\0".encode())
    obj, ko = workdir / "m.o", workdir / "nvidia.ko"
    subprocess.run(["gcc", "-c", str(src), "-o", str(obj)], check=True)
    subprocess.run(
        [
            "objcopy",
            "--add-section",
            f".modinfo={info}",
            "--set-section-flags",
            ".modinfo=alloc,readonly",
            str(obj),
            str(ko),
        ],
        check=True,
    )
    return ko.read_bytes()


def _unit(description: str) -> str:
    return (
        f"[Unit]\nDescription={description} (stand-in)\n[Service]\nType=oneshot\nRemainAfterExit=yes\n"
        "ExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"
    )


def driver_debs(version: str, kernel: str = STANDIN_KERNEL) -> list[Deb]:
    """The packages of one driver version, as NVIDIA's Debian repository names them (branches < 590)."""
    branch = version.split(".", maxsplit=1)[0]
    v = f"{version}-1"
    return [
        Deb(
            f"nvidia-open-{branch}",
            v,
            f"nvidia-kernel-open-dkms (= {v}), libnvidia-compute (= {v}), nvidia-persistenced (= {v})",
        ),
        Deb(
            "nvidia-kernel-open-dkms",
            v,
            "kmod",
            files=((f"/lib/modules/{kernel}/updates/dkms/nvidia.ko", "@ko", 0o644),),
            postinst=f"#!/bin/sh\ndepmod -a {kernel} 2>/dev/null || true\n",
        ),
        Deb("libnvidia-compute", v, files=((f"/usr/lib/x86_64-linux-gnu/libnvidia-compute.so.{version}", "", 0o644),)),
        Deb(
            "nvidia-persistenced",
            v,
            files=(("/lib/systemd/system/nvidia-persistenced.service", _unit("NVIDIA Persistence Daemon"), 0o644),),
        ),
        Deb(
            f"nvidia-fabricmanager-{branch}",
            v,
            files=(("/lib/systemd/system/nvidia-fabricmanager.service", _unit("NVIDIA Fabric Manager"), 0o644),),
            extra="Provides: nvidia-fabricmanager\nConflicts: nvidia-fabricmanager\n",
        ),
    ]


def toolkit_debs(cuda: str, cuda_full: str, cudnn: str, kernel: str = STANDIN_KERNEL) -> list[Deb]:
    major, minor = cuda.split(".")
    nvcc = f"#!/bin/sh\necho 'Cuda compilation tools, release {cuda}, V{cuda_full}'\n"
    return [
        Deb(
            f"linux-headers-{kernel}",
            "1.0",
            files=((f"/usr/src/linux-headers-{kernel}/Makefile", "", 0o644),),
            postinst=f"#!/bin/sh\nmkdir -p /lib/modules/{kernel}\nln -sfn /usr/src/linux-headers-{kernel} "
            f"/lib/modules/{kernel}/build\n",
        ),
        Deb(
            f"cuda-toolkit-{major}-{minor}",
            f"{cuda_full}-1",
            files=((f"/usr/local/cuda-{cuda}/bin/nvcc", nvcc, 0o755),),
        ),
        Deb(f"cudnn9-cuda-{major}", f"{cudnn}-1", f"libcudnn9-cuda-{major} (= {cudnn}-1)"),
        Deb(
            f"libcudnn9-cuda-{major}",
            f"{cudnn}-1",
            files=((f"/usr/lib/x86_64-linux-gnu/libcudnn.so.{cudnn}", "", 0o644),),
        ),
    ]


def _build(deb: Deb, out: Path, ko: dict[str, bytes], work: Path) -> Path:
    root = Path(tempfile.mkdtemp(dir=work))
    (root / "DEBIAN").mkdir()
    control = (
        f"Package: {deb.name}\nVersion: {deb.version}\nArchitecture: amd64\nMaintainer: provision tests "
        f"<tests@provision.invalid>\nDescription: STAND-IN for NVIDIA's {deb.name} (provision tests)\n"
    )
    if deb.depends:
        control += f"Depends: {deb.depends}\n"
    (root / "DEBIAN" / "control").write_text(control + deb.extra)
    if deb.postinst:
        (root / "DEBIAN" / "postinst").write_text(deb.postinst)
        (root / "DEBIAN" / "postinst").chmod(0o755)
    for path, content, mode in deb.files:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if content == "@ko":
            target.write_bytes(ko[deb.version])
        else:
            target.write_text(content)
        target.chmod(mode)
    pkg = out / f"{deb.name}_{deb.version}_amd64.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(pkg)], check=True, capture_output=True
    )
    return pkg


@dataclass(frozen=True)
class Repo:
    path: Path
    key: Path  # armored public key
    fingerprint: str


def build_repo(folder: Path, debs: list[Deb]) -> Repo:
    """Packages, Packages.gz, Release and InRelease, signed with a throwaway key."""
    folder.mkdir(parents=True, exist_ok=True)
    work = folder.parent / "build"
    work.mkdir(exist_ok=True)
    ko = {
        d.version: _module_ko(d.version.rsplit("-", 1)[0], Path(tempfile.mkdtemp(dir=work)))
        for d in debs
        if any(c == "@ko" for _, c, _ in d.files)
    }
    for deb in debs:
        _build(deb, folder, ko, work)
    packages = subprocess.run(
        ["dpkg-scanpackages", "-m", "."], cwd=folder, capture_output=True, text=True, check=True
    ).stdout
    (folder / "Packages").write_text(packages)
    (folder / "Packages.gz").write_bytes(gzip.compress(packages.encode()))
    lines = [
        "Origin: provision-tests",
        "Label: stand-in NVIDIA repository",
        "Architectures: amd64 all",
        f"Date: {formatdate(usegmt=True)}",
        "SHA256:",
    ]
    for name in ("Packages", "Packages.gz"):
        data = (folder / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    (folder / "Release").write_text("\n".join(lines) + "\n")
    home = folder.parent / "gnupg"
    # a fresh throwaway key every build; the agent of an earlier build must not outlive its home
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run(
        [*gpg, "--quick-gen-key", "provision stand-in repo <tests@provision.invalid>", "ed25519", "sign", "never"],
        env=env,
        check=True,
        capture_output=True,
    )
    colons = subprocess.run(
        ["gpg", "--batch", "--with-colons", "--list-keys"], env=env, capture_output=True, text=True, check=True
    ).stdout
    fingerprint = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
    key = folder / "standin-key.asc"
    key.write_text(
        subprocess.run(
            ["gpg", "--batch", "--armor", "--export", fingerprint], env=env, capture_output=True, text=True, check=True
        ).stdout
    )
    (folder / "InRelease").unlink(missing_ok=True)
    subprocess.run(
        [*gpg, "--clearsign", "-o", str(folder / "InRelease"), str(folder / "Release")],
        env=env,
        check=True,
        capture_output=True,
    )
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True)
    return Repo(folder, key, fingerprint)


@contextlib.contextmanager
def serve(folder: Path, address: str) -> Iterator[str]:
    """Serve ``folder`` over HTTP on ``address`` (the bridge) for the duration; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer((address, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass
