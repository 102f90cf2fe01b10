"""Which processes are alive: the tests' way to prove nothing was left running."""

from pathlib import Path


def processes_matching(text):
    """pids of live (non-zombie) processes whose command line contains text."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text in cmd and state != "Z":
            found.append(int(d.name))
    return found
