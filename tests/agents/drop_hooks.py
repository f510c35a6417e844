#!/usr/bin/env python3
"""Runs the agent command line it is given without runplane's hook flags: Claude Code's
`--settings JSON` and `--setting-sources ""`, Codex's `--dangerously-bypass-hook-trust`
(its hooks then count as untrusted and are skipped silently). It stands for everything
that can keep an agent's hooks from running; `runplane work` must refuse to let the agent
act when they do not.

Usage: drop_hooks.py AGENT [ARG...]
"""
import os
import sys

args = sys.argv[1:]
kept = []
skip = 0
for arg in args:
    if skip:
        skip -= 1
    elif arg in ("--settings", "--setting-sources"):
        skip = 1
    elif arg != "--dangerously-bypass-hook-trust":
        kept.append(arg)
os.execvp(kept[0], kept)
