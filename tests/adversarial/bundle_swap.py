#!/usr/bin/env python3
"""Adversarial bundle folder. Class: time of check to time of use (issue 40 item 1).

Cheat: while kwb keep runs on a genuine bundle's path, exchange that folder with a forged one (renameat2 with
RENAME_EXCHANGE: one atomic swap of two names) as fast as possible, so that a keep that verified one folder and then
read the path again to promote would promote the forgery. With USER, it runs as that unprivileged user, who needs
only to own the folder both bundles sit in (an agent that chose validate's --output-dir).
Defense: keep reads the bundle once, through one descriptor, into a private copy (record/bundle_snapshot.h), and
verifies and promotes that copy alone.
Expected: every keep promotes the genuine candidate or refuses the forged bundle; the forgery never becomes an
incumbent.

Usage: bundle_swap.py A B STOP_FILE [USER]
It swaps until STOP_FILE exists (or for 300 s at most), swaps once more if that leaves the names exchanged, and prints the number of swaps.
"""
import ctypes
import os
import pwd
import sys
import time

AT_FDCWD = -100
RENAME_EXCHANGE = 2


def main() -> int:
    if len(sys.argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 64
    a, b, stop = (os.fsencode(p) for p in sys.argv[1:4])
    if len(sys.argv) == 5:
        user = pwd.getpwnam(sys.argv[4])
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)
    libc = ctypes.CDLL(None, use_errno=True)
    swaps = 0

    def swap() -> None:
        if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), sys.argv[1])

    deadline = time.monotonic() + 300
    while not os.path.exists(stop) and time.monotonic() < deadline:
        swap()
        swaps += 1
    if swaps % 2:
        swap()
        swaps += 1
    print(swaps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
