#!/usr/bin/env python3
"""Decodes an `evenflush export --format perfetto` file with Perfetto's own protobuf classes and
prints what tests/views.rs compares with the trace, as JSON.

It follows the format as trace_processor does: compressed_packets inflated, per-sequence
incremental state (interned names, defaults, the incremental clock), slices stacked per track
in time order. Anything malformed raises, which fails the test.

Usage: perfetto_decode.py FILE FUNCTION_NAME...
"""

import json
import sys
import zlib
from collections import Counter, defaultdict

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2
FIXED_NAMES = {"suspension", "flush"}


def packets(data):
    trace = pb.Trace()
    trace.ParseFromString(data)
    for p in trace.packet:
        if p.HasField("compressed_packets"):
            yield from packets(zlib.decompress(p.compressed_packets))
        else:
            yield p


def main():
    path, functions = sys.argv[1], set(sys.argv[2:])
    with open(path, "rb") as f:
        data = f.read()
    tracks = {}  # uuid -> ("process", pid) | ("thread", pid, tid) | ("counter", parent)
    seqs = {}  # sequence id -> state
    events = []  # (track uuid, ts, order, kind, name)
    flow_out, flow_in = Counter(), Counter()
    counters = 0
    n_packets = 0
    for order, p in enumerate(packets(data)):
        n_packets += 1
        sid = p.trusted_packet_sequence_id
        assert sid, "every packet is on a sequence"
        if p.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED:
            seqs[sid] = {"names": {}, "annotations": {}, "clock": None, "last": None,
                         "track": None}
        st = seqs.get(sid)
        if p.HasField("trace_packet_defaults"):
            d = p.trace_packet_defaults
            st["clock"] = d.timestamp_clock_id
            st["track"] = d.track_event_defaults.track_uuid
        if p.HasField("clock_snapshot"):
            for c in p.clock_snapshot.clocks:
                if c.is_incremental:
                    assert c.clock_id == st["clock"], "the incremental clock is the default"
                    st["last"] = c.timestamp
        if p.HasField("interned_data"):
            for n in p.interned_data.event_names:
                st["names"][n.iid] = n.name
            for n in p.interned_data.debug_annotation_names:
                st["annotations"][n.iid] = n.name
        if p.HasField("track_descriptor"):
            t = p.track_descriptor
            if t.HasField("process"):
                tracks[t.uuid] = ("process", t.process.pid)
            elif t.HasField("thread"):
                assert tracks.get(t.parent_uuid, ("",))[0] == "process"
                tracks[t.uuid] = ("thread", t.thread.pid, t.thread.tid)
            elif t.HasField("counter"):
                tracks[t.uuid] = ("counter", t.parent_uuid)
        if not p.HasField("track_event"):
            continue
        assert p.sequence_flags & SEQ_NEEDS_INCREMENTAL_STATE, "event without the flag"
        assert st is not None, "event before its sequence was started"
        clock = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else st["clock"]
        if clock == st["clock"]:
            st["last"] += p.timestamp
            ts = st["last"]
        else:
            assert clock == 6, f"unexpected clock {clock}"
            ts = p.timestamp
        e = p.track_event
        track = e.track_uuid if e.HasField("track_uuid") else st["track"]
        assert track in tracks, f"event on unknown track {track}"
        for a in e.debug_annotations:
            assert a.name_iid in st["annotations"], "annotation name not interned"
        if e.type == pb.TrackEvent.TYPE_COUNTER:
            assert tracks[track][0] == "counter"
            counters += 1
            continue
        name = None
        if e.type in (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_INSTANT):
            if e.HasField("name"):
                # Edge marks of a windowed export carry their own (unique) names.
                name = e.name
            else:
                assert e.name_iid in st["names"], f"name iid {e.name_iid} not interned"
                name = st["names"][e.name_iid]
        for i in e.flow_ids:
            flow_out[i] += 1
        for i in e.terminating_flow_ids:
            flow_in[i] += 1
        seq = None
        for a in e.debug_annotations:
            if st["annotations"].get(a.name_iid) == "seq":
                seq = a.int_value
        events.append((track, ts, order, e.type, name, list(e.flow_ids),
                       list(e.terminating_flow_ids), seq))

    # Slices per track in time order (ties in file order), as trace_processor stacks them.
    events.sort(key=lambda x: (x[0], x[1], x[2]))
    begins = Counter()
    edge_marks = 0
    slice_ts = []  # times of every slice begin and end, instant and counter-free
    calls_begin = []  # (pid, ts) of every call slice's begin
    region_names = Counter()
    stacks = defaultdict(list)
    flow_start_ts, flow_end_ts = {}, {}
    instants = defaultdict(list)
    suspensions = []  # [seq, pid, begin, end]
    flow_start_pid, flow_end_pid = {}, {}
    for track, ts, _, typ, name, outs, ins, seq in events:
        pid = tracks[track][1]
        if typ == pb.TrackEvent.TYPE_INSTANT and name is not None:
            instants[name].append(ts)
        if name is not None and name.endswith("(outside window)"):
            edge_marks += 1
        elif typ != pb.TrackEvent.TYPE_COUNTER:
            slice_ts.append(ts)
        if typ == pb.TrackEvent.TYPE_SLICE_BEGIN and name in functions:
            calls_begin.append((pid, ts, name))
        if typ == pb.TrackEvent.TYPE_SLICE_BEGIN:
            stacks[track].append((ts, name, seq))
            if name in functions:
                begins[("call", pid)] += 1
            elif name in FIXED_NAMES:
                begins[(name, pid)] += 1
            else:
                begins[("region", pid)] += 1
                region_names[name] += 1
        elif typ == pb.TrackEvent.TYPE_SLICE_END:
            assert stacks[track], f"slice end without begin on track {track} at {ts}"
            begin, bname, bseq = stacks[track].pop()
            assert begin <= ts
            if bname == "suspension":
                suspensions.append([bseq, pid, begin, ts])
        for i in outs:
            flow_start_ts[i] = ts
            flow_start_pid[i] = pid
        for i in ins:
            flow_end_ts[i] = ts
            flow_end_pid[i] = pid
    assert all(not s for s in stacks.values()), "slices left open"
    # A flow whose end came before its start would be dropped by trace_processor.
    backwards = sum(1 for i, t in flow_end_ts.items() if t < flow_start_ts.get(i, t))
    kinds = Counter(t[0] for t in tracks.values())
    calls_per_pid = defaultdict(int)
    for (kind, pid), n in begins.items():
        if kind == "call":
            calls_per_pid[pid] += n
    print(json.dumps({
        "packets": n_packets,
        "processes": kinds["process"],
        "threads": kinds["thread"],
        "counter_tracks": kinds["counter"],
        "calls_per_pid": {str(k): v for k, v in sorted(calls_per_pid.items())},
        "calls": sum(calls_per_pid.values()),
        "regions": sum(n for (k, _), n in begins.items() if k == "region"),
        "region_names": dict(sorted(region_names.items())),
        "suspensions": sum(n for (k, _), n in begins.items() if k == "suspension"),
        "flushes": sum(n for (k, _), n in begins.items() if k == "flush"),
        "flows": len(flow_in),
        "flow_ends_repeated": sum(n - 1 for n in flow_in.values()),
        "flows_without_start": sum(1 for i in flow_in if i not in flow_out),
        "flows_backwards": backwards,
        "counters": counters,
        "edge_marks": edge_marks,
        "min_ts": min(slice_ts, default=None),
        "max_ts": max(slice_ts, default=None),
        "call_begins": sorted(calls_begin),
        # [send pid, send ts, receive pid, receive ts] of every flow with both ends.
        "flow_pairs": sorted([flow_start_pid[i], flow_start_ts[i], flow_end_pid[i], flow_end_ts[i]]
                             for i in flow_end_ts if i in flow_start_ts),
        "suspension_slices": sorted(suspensions),
        "instants": {k: sorted(v) for k, v in sorted(instants.items())},
    }))


if __name__ == "__main__":
    main()
