#!/usr/bin/env python3
"""Stored and raw bytes per event of a recorded trace, from `evenflush info --json`.

Usage: evenflush info --json DIR | benches/bytes_per_event.py [label]
The synthetic figure of paper-notes/format.md comes from `cargo bench --bench format_encode`;
this gives the same figure for traces of real programs.
"""
import json
import sys

d = json.load(sys.stdin)
ranks = d["per_rank"]
stored = sum(r["bytes_stored"] for r in ranks)
raw = sum(r["bytes_raw"] for r in ranks)
events = sum(r["events"] for r in ranks)
calls = sum(r["mpi_calls"] for r in ranks)
label = sys.argv[1] if len(sys.argv) > 1 else d["dir"]
print(f"{label}: {len(ranks)} ranks, {events} events ({calls} MPI calls); "
      f"stored {stored / events:.2f} B/event ({stored / max(calls, 1):.2f} B per MPI call), "
      f"raw {raw / events:.2f} B/event; zstd ratio {raw / max(stored, 1):.1f}")
