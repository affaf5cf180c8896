"""Which processes a test left behind: the child processes of a process, and what each runs
(Linux ``/proc``).

A test that starts servers, workers or forks asserts at its end that ``children() <= before``:
nothing it started is still running or unreaped. Tests that share the process with others (the
session's local Ray instance is a child of the test process too) compare against what was there
before, never against an empty set.
"""

from __future__ import annotations

import os

__all__ = ["children", "command_line"]


def children(pid: int | None = None) -> set[int]:
    """PIDs whose parent is ``pid`` (this process by default), running or not yet reaped.

    Every process's ``/proc/<pid>/stat`` names its parent, zombies' included, so a child forked
    by any thread is found. (The per-thread ``/proc/<pid>/task/<tid>/children`` lists are not
    used: a thread that ends between listing the tasks and reading its list makes the read fail,
    and its children move to another thread's list, which may have been read already.)
    """
    parent = os.getpid() if pid is None else pid
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue  # it ended (and was reaped) since /proc was listed
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")"
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 1 and fields[1] == str(parent):
            found.add(int(entry))
    return found


def command_line(pid: int) -> str:
    """The command line of ``pid``, its arguments joined by spaces; "" once it ended (a zombie's
    is empty too) or is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
