"""Unpacking the committed fixture archives (tests/*/fixtures/*.tar.xz): plain files only, each by
its own name into one folder (a member with a folder in its name or of another kind is skipped)."""
import os
import tarfile


def unpack(archive, work):
    """Writes the plain files of `archive` into `work`."""
    os.makedirs(work, exist_ok=True)
    with tarfile.open(archive) as t:
        for m in t.getmembers():
            name = m.name.removeprefix("./")
            if m.isfile() and os.path.basename(name) == name:
                with open(os.path.join(work, name), "wb") as f:
                    f.write(t.extractfile(m).read())
