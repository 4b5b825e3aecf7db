#!/usr/bin/python
"""Ansible module: disable the host's other apt entries for the repository signed_repo adds.

Why: images that already carry NVIDIA's repository (AWS DLAMI, Azure HPC and GCP DLVM images,
a `cuda-keyring` install) have an entry for the same URL with another `signed-by`, and a second
entry makes every `apt-get update` fail with "E: Conflicting values set for option Signed-By
regarding source <url>" (NVIDIA/cuda-repo-management#4, NVIDIA/libnvidia-container#194). An
entry for the same URL left in place also means the repository's packages stay trusted through
a keyring that is not the pinned one. So every other entry for the URL is disabled and ours is
the one that remains.

What counts as the same URL: the URI with its trailing slashes and its scheme dropped
(`http://` and `https://` name one repository; apt would not call that a conflict, but a second
entry trusted through another keyring defeats the pin just the same).

How an entry is disabled, so that it can be put back by hand and a second run finds nothing:
- one-line style (`/etc/apt/sources.list`, `sources.list.d/*.list`): the line is commented out
  behind a `# provision (...) disabled:` prefix;
- deb822 style (`sources.list.d/*.sources`): the URI is removed from the stanza's `URIs:`, and a
  stanza left with no other URI gets `Enabled: no`.
The file as it was is copied into O(backup_dir) first (not beside it: apt reads every `*.list` and
`*.sources` there, and warns about other names). O(keep), signed_repo's own file, is not touched.

Runs on the managed host (Debian/Ubuntu): stdlib only.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: signed_repo_apt_conflicts
short_description: Disable other apt entries for a repository URL (they conflict on Signed-By)
options:
  url: {description: The repository URL signed_repo adds., type: str, required: true}
  keep: {description: signed_repo's own sources file (left alone)., type: path, required: true}
  name: {description: signed_repo's repository name (written into the disabling comment)., type: str, required: true}
  apt_dir: {description: apt's configuration directory., type: path, default: /etc/apt}
  backup_dir: {description: Where the files as they were are copied., type: path, default: /var/backups/provision-apt}
"""

RETURN = r"""
disabled: {description: "One entry per disabled source: {path, entry}.", type: list, returned: always}
backups: {description: Copies of the files as they were., type: list, returned: changed}
"""

_ONE_LINE = re.compile(r"^\s*(deb|deb-src)\s+(\[[^\]]*\]\s+)?(\S+)")
_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):(.*)$")


def same_repository(a: str, b: str) -> bool:
    """Whether two apt URIs name one repository (scheme and trailing slashes aside)."""

    def key(uri: str) -> str:
        return re.sub(r"^[a-z][a-z0-9+.-]*://", "", uri.strip().lower()).rstrip("/")

    return key(a) == key(b)


@dataclass
class Edit:
    """A file's new text and what was disabled in it."""

    text: str
    disabled: list[str] = field(default_factory=list)


def disable_one_line(text: str, url: str, name: str) -> Edit:
    """One-line style: comment out every active `deb`/`deb-src` line for ``url``."""
    edit = Edit("")
    lines = []
    for line in text.splitlines(keepends=True):
        m = _ONE_LINE.match(line)
        if m and same_repository(m.group(3), url):
            edit.disabled.append(line.strip())
            lines.append(f"# provision (signed_repo {name}) disabled: {line.lstrip()}")
        else:
            lines.append(line)
    edit.text = "".join(lines)
    return edit


def _stanzas(text: str) -> list[list[str]]:
    """deb822 paragraphs, blank lines kept as their own one-line chunks (so the text rejoins)."""
    chunks: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.strip():
            current.append(line)
            continue
        if current:
            chunks.append(current)
            current = []
        chunks.append([line])
    if current:
        chunks.append(current)
    return chunks


def _fields(stanza: list[str]) -> dict[str, tuple[int, int, str]]:
    """Field name (lower case) -> (first line, line after the last, value) of a stanza."""
    found: dict[str, tuple[int, int, str]] = {}
    i = 0
    while i < len(stanza):
        m = _FIELD.match(stanza[i])
        if not m or stanza[i].startswith("#"):
            i += 1
            continue
        end = i + 1
        value = m.group(2).strip()
        while end < len(stanza) and stanza[end][:1] in (" ", "\t"):  # continuation lines
            value += " " + stanza[end].strip()
            end += 1
        found[m.group(1).lower()] = (i, end, value)
        i = end
    return found


def disable_deb822(text: str, url: str, name: str) -> Edit:
    """deb822 style: drop ``url`` from each enabled stanza's URIs; disable a stanza left without any."""
    edit = Edit("")
    out: list[str] = []
    for stanza in _stanzas(text):
        fields = _fields(stanza)
        uris_at = fields.get("uris")
        enabled = fields.get("enabled", (0, 0, "yes"))[2].lower() not in ("no", "false", "0")
        if uris_at is None or not enabled:
            out.extend(stanza)
            continue
        start, end, value = uris_at
        uris = value.split()
        keep = [u for u in uris if not same_repository(u, url)]
        if len(keep) == len(uris):
            out.extend(stanza)
            continue
        edit.disabled.append(" ".join(line.strip() for line in stanza if not line.startswith("#")))
        note = f"# provision (signed_repo {name}) disabled {url} here (was URIs: {value})\n"
        if keep:
            new = [*stanza[:start], note, f"URIs: {' '.join(keep)}\n", *stanza[end:]]
        else:
            new = [line for line in stanza if not _is_field(line, "enabled")]
            new = [note, *new, "Enabled: no\n"] if new[-1].endswith("\n") else [note, *new, "\nEnabled: no\n"]
        out.extend(new)
    edit.text = "".join(out)
    return edit


def _is_field(line: str, name: str) -> bool:
    m = _FIELD.match(line)
    return m is not None and m.group(1).lower() == name


def source_files(apt_dir: str) -> list[str]:
    """The files apt reads entries from, in apt's order."""
    files = [os.path.join(apt_dir, "sources.list")]
    parts = os.path.join(apt_dir, "sources.list.d")
    files += sorted(glob.glob(os.path.join(parts, "*.list")) + glob.glob(os.path.join(parts, "*.sources")))
    return [f for f in files if os.path.isfile(f)]


def plan(apt_dir: str, url: str, keep: str, name: str) -> dict[str, Edit]:
    """Path -> its edit, for every file with an entry to disable."""
    edits = {}
    for path in source_files(apt_dir):
        if os.path.realpath(path) == os.path.realpath(keep):
            continue
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            text = fh.read()
        edit = disable_deb822(text, url, name) if path.endswith(".sources") else disable_one_line(text, url, name)
        if edit.disabled:
            edits[path] = edit
    return edits


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "keep": {"type": "path", "required": True},
            "name": {"type": "str", "required": True},
            "apt_dir": {"type": "path", "default": "/etc/apt"},
            "backup_dir": {"type": "path", "default": "/var/backups/provision-apt"},
        },
        supports_check_mode=True,
    )
    p = module.params
    edits = plan(p["apt_dir"], p["url"], p["keep"], p["name"])
    disabled = [{"path": path, "entry": entry} for path, edit in edits.items() for entry in edit.disabled]
    backups = []
    if edits and not module.check_mode:
        os.makedirs(p["backup_dir"], mode=0o755, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for path, edit in edits.items():
            backup = os.path.join(p["backup_dir"], f"{os.path.basename(path)}.{stamp}")
            shutil.copy2(path, backup)
            backups.append(backup)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".provision-sources-")
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(edit.text)
            shutil.copymode(path, tmp)
            module.atomic_move(tmp, path)
    module.exit_json(changed=bool(edits), disabled=disabled, backups=backups)


if __name__ == "__main__":
    main()
