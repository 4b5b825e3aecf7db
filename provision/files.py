"""The file edges: YAML a user hands provision, read within bounds, and the files provision owns,
written without writing through anything it did not make.

:func:`load_yaml` reads every YAML file and value a user gives (inventories and their
group_vars/host_vars, provision.yaml, ``--set``): a document may nest at most :data:`MAX_DEPTH`
levels and its aliases may stand for at most :data:`MAX_ALIASED` nodes beyond the document's own,
so a nine-line alias bomb or a deeply nested file is bad input in milliseconds instead of a
controller spinning on the expanded structure (or a RecursionError reported as an internal error).

Every file provision writes into a folder a user can hand it again (the run dir of `plan --out`,
the lock) goes through :func:`write_durably` or :func:`replace_file`: a new file beside the target,
renamed over it. rename(2) replaces the directory entry itself, so a symbolic or hard link planted
at the target's name is replaced, never followed; what it pointed at keeps its content and mode.
:func:`check_tree` is the check before the first write: a folder provision will write into and
delete from must be the user's own, closed to others, and hold no link at all (a link in it is
refused naming the link, and nothing is touched).

The lock file is read and written here (:func:`read_lock`, :func:`write_lock`): its bytes and its
one validating reader are :mod:`provision.model.lock`'s, which does no I/O.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.errors import BadInput
from provision.model.lock import Lock, dumps_lock, parse_lock

if TYPE_CHECKING:
    import yaml

# Well above any real inventory or config (a host's vars are a few levels deep), and far below
# Python's recursion limit, which the code walking a loaded document (json.dumps, copy.deepcopy,
# PyYAML's own composer) runs into at about 1000 levels.
MAX_DEPTH = 100
# The billion-laughs defence: what aliases add beyond the nodes written in the document. Anchors
# shared by a thousand hosts (`<<: *defaults` of ten keys) add about 20,000; a nine-line bomb of
# nine aliases a line adds 9**9. go-yaml v3 bounds the same thing (decode.go, allowedAliasRatio:
# "document contains excessive aliasing", 99% of 400,000 decodes may come from aliases).
MAX_ALIASED = 100_000


def load_yaml(text: str, where: str) -> Any:
    """``text`` as YAML (the safe loader's types), refused as bad input naming ``where`` when it
    nests deeper than :data:`MAX_DEPTH` or its aliases expand past :data:`MAX_ALIASED` nodes.

    Syntax errors stay :class:`yaml.YAMLError`, for the caller to say where in its own words.
    """
    import yaml  # noqa: PLC0415 (yaml is not loaded on every start: about 10 ms)

    loader = _bounded_loader()(text, where)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, where)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml's own limit (1000), met before ours
            raise _too_deep(where) from None
        raise
    finally:
        loader.dispose()


@cache
def _bounded_loader() -> Any:
    """PyYAML's safe loader with a depth-counting composer: events from libyaml where it is there
    (C speed, and its own nesting limit of 1000 in the scanner), nodes composed in Python."""
    import yaml  # noqa: PLC0415 (imported on first use: `provision resolve` and --help never load it)
    from yaml.composer import Composer  # noqa: PLC0415 (yaml is not loaded on every start: about 10 ms)
    from yaml.constructor import SafeConstructor  # noqa: PLC0415 (yaml is not loaded on every start: about 10 ms)
    from yaml.resolver import Resolver  # noqa: PLC0415 (yaml is not loaded on every start: about 10 ms)

    parser: type = yaml.SafeLoader
    if yaml.__with_libyaml__:
        from yaml._yaml import CParser  # noqa: PLC0415 (yaml is not loaded on every start: about 10 ms)

        parser = CParser

    class Bounded(parser, Composer, SafeConstructor, Resolver):  # type: ignore[misc]
        def __init__(self, text: str, where: str) -> None:
            super().__init__(text)  # type: ignore[call-arg]  # the parser: SafeLoader (all of it) or CParser
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self.where = where
            self.depth = 0

        # the Python composer's, not CParser's (which composes in C, past the depth count)
        get_single_node = Composer.get_single_node
        compose_document = Composer.compose_document

        def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    raise _too_deep(self.where)
                return Composer.compose_node(self, parent, index)
            finally:
                self.depth -= 1

    return Bounded


def _too_deep(where: str) -> BadInput:
    return BadInput(
        f"{where} nests deeper than {MAX_DEPTH} levels", "flatten it: no inventory or config needs that depth"
    )


def _check_expansion(root: yaml.Node, where: str) -> None:
    """Depth and size of the document as its aliases expand it, each node counted once (memo by
    identity), without recursion; an alias inside its own anchor (a cycle) is refused too."""
    import yaml  # noqa: PLC0415 (yaml is not loaded on every start: about 10 ms)

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        return []

    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_: set[int] = set()
    todo: list[tuple[yaml.Node, bool]] = [(root, False)]
    distinct = 0
    while todo:
        node, finished = todo.pop()
        key = id(node)
        if finished:
            open_.discard(key)
            below = children(node)
            size[key] = 1 + sum(size[id(c)] for c in below)
            depth[key] = 1 + max((depth[id(c)] for c in below), default=0)
            if depth[key] > MAX_DEPTH:
                raise _too_deep(where)
            continue
        if key in size:
            continue
        if key in open_:
            raise BadInput(f"{where} has an alias inside its own anchor", "write the value out instead of the alias")
        open_.add(key)
        distinct += 1
        todo.append((node, True))
        todo.extend((c, False) for c in children(node))
    if size[id(root)] - distinct > MAX_ALIASED:
        raise BadInput(
            f"{where}: its aliases expand to {size[id(root)]:,} values from {distinct:,} written (an alias bomb?)",
            f"write the values out, or use aliases for at most {MAX_ALIASED:,} values",
        )


def write_durably(p: Path, text: str) -> Path:
    """Replace ``p`` with ``text``: a temporary file in the same folder, fsync, rename, fsync the folder.

    rename(2) alone is atomic for readers, but after a power loss the new name can point at a
    file whose data never reached the disk (ext4 and XFS may order the rename first): a zero-length
    lock. fsync of the file before the rename, and of the folder after it (the rename is an entry
    in the folder), is the order POSIX and the filesystems promise to keep (fsync(2), rename(2)).
    """
    return replace_file(p, text, durable=True)


def write_lock(lock: Lock, path: Path | str) -> Path:
    """Write atomically and durably (a reader never sees half a lock, nor a crash an empty one)."""
    return write_durably(Path(path), dumps_lock(lock))


def read_lock(path: Path | str) -> Lock:
    """The lock at ``path``; BadInput when it is missing, unreadable or malformed."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"no lock file at {p}", "run `provision plan` first or pass --lock FILE") from None
    except OSError as exc:
        raise BadInput(f"cannot read lock file {p}: {exc.strerror}", "check the path and permissions") from None
    return parse_lock(text, str(p))


def replace_file(p: Path, text: str, *, durable: bool = False) -> Path:
    """Replace ``p`` with a new file holding ``text``, 0600 (its owner's only).

    The temporary file is made by mkstemp (O_CREAT|O_EXCL, never an existing name, never readable
    by others in between) and renamed over ``p``: a link at ``p`` is replaced, not written through.
    ``durable``: fsync the file and then its folder (:func:`write_durably`).
    """
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        dir_fd = os.open(p.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return p


def private_dir(path: Path) -> None:
    """Make ``path`` (and the folders it needs) and close it to group and others (0700 at most).

    A link at ``path`` is refused, not followed: chmod would close the folder it points at.
    """
    # mkdir(parents=True) makes the missing parents with the default mode (0755 under umask 022),
    # not ``mode``: each missing folder is made here, top down, 0700.
    for folder in [*reversed(path.parents), path]:
        if not folder.exists():
            folder.mkdir(mode=0o700, exist_ok=True)
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        raise BadInput(f"{path} is a symbolic link", f"remove the link {path}; provision writes only into real folders")
    if st.st_mode & 0o077:
        path.chmod(st.st_mode & 0o700)


def check_tree(root: Path, option: str) -> None:
    """Refuse, before anything is written, a folder provision may not write into or delete from.

    ``root`` (if it exists) must be a real folder owned by the user running provision, and so must
    everything in it: a symbolic link anywhere (to a file or a folder, at ``root`` itself too) is
    refused, naming it, because writing, chmod and deleting ``*.yml`` through it would change what
    it points at. A folder that holds anything and that group or others may write to is refused
    too (others could have put a link there). lstat only: nothing is followed.
    """
    try:
        st = root.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return  # nothing there to check; making it is the caller's (and its error, if it cannot)
    except OSError as exc:
        raise BadInput(f"cannot read {option} {root}: {exc.strerror}", f"give {option} a readable folder") from None
    if stat.S_ISLNK(st.st_mode):
        raise BadInput(
            f"{option} {root} is a symbolic link to {os.readlink(root)}",
            f"give {option} the folder's real path ({root.resolve()})",
        )
    if not stat.S_ISDIR(st.st_mode):
        return  # the caller says what a file there means
    me = os.geteuid()
    for folder, dirs, files in os.walk(root, onerror=_raise):
        here = Path(folder)
        _check_entry(here, here.lstat(), me, option, holds=bool(dirs or files))
        for name in [*dirs, *files]:
            path = here / name
            entry = path.lstat()
            if stat.S_ISLNK(entry.st_mode):
                fix = "remove the link, as provision writes and deletes only real files there"
                raise BadInput(
                    f"{option} {root} holds a symbolic link, {path} -> {os.readlink(path)}",
                    f"{fix}; or give {option} a new folder",
                )
            if not stat.S_ISDIR(entry.st_mode):
                _check_entry(path, entry, me, option, holds=False)


def _check_entry(path: Path, st: os.stat_result, me: int, option: str, *, holds: bool) -> None:
    if st.st_uid != me:
        raise BadInput(
            f"{option}: {path} belongs to uid {st.st_uid}, not to uid {me} running provision",
            f"give {option} a folder of your own (or `chown -R {me} {path}` if it is yours)",
        )
    if holds and st.st_mode & 0o022:
        raise BadInput(
            f"{option}: {path} is writable by group or others, so its files may not be yours",
            f"`chmod go-w {path}` after checking what it holds, or give {option} a new folder",
        )


def _raise(exc: OSError) -> None:
    raise BadInput(f"cannot read {exc.filename}: {exc.strerror}", "give a folder you can read") from None


def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB blocks (a wheel or a bundle can be gigabytes)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
