#!/usr/bin/env python3
"""Dumps every operator schema torch ships, one str(schema) per line, sorted.

Usage: .venv/bin/python compiler/data/dump_schemas.py > compiler/data/torch-2.13-schemas.txt

The output is the test corpus of compiler/schema.c (tests/test_schema.c): each
line must parse and format back byte-for-byte. No schema string contains a
newline or a carriage return (checked below), so one line per schema is
unambiguous. Sorting by byte value makes the file deterministic across runs.
"""
import sys

import torch


def main():
    lines = sorted({str(s) for s in torch._C._jit_get_all_schemas()})
    for line in lines:
        if "\n" in line or "\r" in line:
            sys.exit("schema contains a line break: %r" % line)
    out = sys.stdout.buffer
    for line in lines:
        out.write(line.encode("utf-8") + b"\n")
    sys.stderr.write("torch %s: %d schemas\n" % (torch.__version__, len(lines)))


if __name__ == "__main__":
    main()
