"""Reads an OTF2 archive with the OTF2 project's Python reader (Debian's python3-otf2) and prints, as
JSON, what tests/otf2_records.rs and tests/p2p_views.rs check: event counts by record type, the
communicator, group, window and I/O handle definitions, whether every RMA and I/O operation has its
completions, and the point-to-point messages sent and received per (communicator, source world rank,
destination world rank, tag), as "comm:source:dest:tag" keys.

    /usr/bin/python3 otf2_records.py ARCHIVE/traces.otf2
"""

import json
import sys
from collections import Counter, defaultdict

import otf2
import otf2.definitions as defs

# python3-otf2 3.0.2 builds InterComm from Comm's fields followed by its own (name, group, parent,
# flags, groupA, groupB, parent, flags), so it reads an InterComm definition's groupB as a Comm
# and fails on every archive that has one. The archive is right (otf2-print reads it); the
# reader's field list is put right here. `patched` says whether that was needed.
patched = False
names = [f.name for f in defs.InterComm._fields]
if names == ["name", "group", "parent", "flags", "groupA", "groupB", "parent", "flags"]:
    defs.InterComm._fields = (defs.InterComm._fields[0],) + tuple(defs.InterComm._fields[4:])
    patched = True


def main():
    out = {"intercomm_reader_patched": patched}
    with otf2.reader.open(sys.argv[1]) as trace:
        d = trace.definitions
        world = []
        groups = []
        for g in d.groups:
            if g.group_type == otf2.GroupType.COMM_LOCATIONS:
                world = [m._ref for m in g.members]
        rank_of = {loc: r for r, loc in enumerate(world)}
        for g in d.groups:
            entry = {"id": g._ref, "type": str(g.group_type).split(".")[-1]}
            if g.group_type == otf2.GroupType.COMM_LOCATIONS:
                entry["locations"] = [m._ref for m in g.members]
            else:
                entry["ranks"] = [rank_of.get(m._ref, -1) for m in g.members]
            groups.append(entry)
        out["groups"] = groups
        out["locations"] = {str(loc._ref): loc.group._ref for loc in d.locations}
        out["comms"] = [
            {
                "id": c._ref,
                "name": c.name,
                "group": c.group._ref,
                "parent": None if c.parent is None else c.parent._ref,
            }
            for c in d.comms
            if not isinstance(c, defs.InterComm)
        ]
        out["inter_comms"] = [
            {"id": c._ref, "group_a": c.groupA._ref, "group_b": c.groupB._ref}
            for c in d.inter_comms
        ]
        out["rma_wins"] = [
            {"id": w._ref, "comm": w.comm._ref, "flags": str(w.flags)} for w in d.rma_wins
        ]
        out["io_handles"] = [
            {"id": h._ref, "comm": None if h.comm is None else h.comm._ref}
            for h in d.io_handles
        ]
        out["paradigms"] = [
            {"paradigm": str(p.paradigm), "class": str(p.paradigm_class)} for p in d.paradigms
        ]
        out["paradigm_properties"] = [
            {"paradigm": str(p.paradigm), "property": str(p.property), "value": str(p.value)}
            for p in d.paradigm_properties
        ]

        counts = Counter()
        # (location, window, matching id) -> [operations, local completions, remote completions]
        rma = defaultdict(lambda: [0, 0, 0])
        # (location, handle, matching id) -> [begins, completions]
        io = defaultdict(lambda: [0, 0])
        collective_received = 0
        members = {}
        for g in d.groups:
            if g.group_type != otf2.GroupType.COMM_LOCATIONS:
                members[g._ref] = [rank_of.get(m._ref, -1) for m in g.members]

        def peers(comm, me):
            """World ranks of the ranks a point-to-point call on `comm` names: on an
            intercommunicator those of the group `me` is not in."""
            if isinstance(comm, defs.InterComm):
                a, b = members[comm.groupA._ref], members[comm.groupB._ref]
                return b if me in a else a
            return members.get(comm.group._ref, [])

        p2p = {"sends": Counter(), "receives": Counter()}

        def message(side, comm, source, dest, tag):
            p2p[side]["%d:%d:%d:%d" % (comm._ref, source, dest, tag)] += 1

        for loc, e in trace.events:
            kind = type(e).__name__
            counts[kind] += 1
            if kind in ("RmaPut", "RmaGet", "RmaAtomic"):
                rma[(loc._ref, e.win._ref, e.matching_id)][0] += 1
            elif kind == "RmaOpCompleteNonBlocking":
                rma[(loc._ref, e.win._ref, e.matching_id)][1] += 1
            elif kind == "RmaOpCompleteRemote":
                rma[(loc._ref, e.win._ref, e.matching_id)][2] += 1
            elif kind == "IoOperationBegin":
                io[(loc._ref, e.handle._ref, e.matching_id)][0] += 1
            elif kind == "IoOperationComplete":
                io[(loc._ref, e.handle._ref, e.matching_id)][1] += 1
            elif kind == "MpiCollectiveEnd":
                collective_received += e.size_received
            elif kind in ("MpiSend", "MpiIsend"):
                me = loc.group._ref
                to = peers(e.communicator, me)
                dest = to[e.receiver] if e.receiver < len(to) else -1
                message("sends", e.communicator, me, dest, e.msg_tag)
            elif kind in ("MpiRecv", "MpiIrecv"):
                me = loc.group._ref
                fr = peers(e.communicator, me)
                source = fr[e.sender] if e.sender < len(fr) else -1
                message("receives", e.communicator, source, me, e.msg_tag)
        out["events"] = dict(counts)
        out["rma_incomplete"] = sum(1 for v in rma.values() if v != [1, 1, 1])
        out["io_incomplete"] = sum(1 for v in io.values() if v != [1, 1])
        out["collective_received"] = collective_received
        out["p2p"] = {side: dict(c) for side, c in p2p.items()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
