"""Reads an OTF2 export with Pipit (hpcgroup/pipit) and compares what Pipit computes from it with
`evenflush report --json` of the same trace. Used by pipit_check.sh; prints one JSON object and
exits 1 when a figure disagrees that no stated difference of definition explains.

    python3 pipit_check.py OTF2_DIR REPORT_JSON

Compared:
- Pipit's `comm_matrix(output="count")` and `comm_matrix(output="size")` with the report's
  `partners` (messages and bytes per source -> destination pair);
- Pipit's `message_histogram(bins=...)`, given the report's own size bins as edges, with the sum
  of the report's per-function histograms of the point-to-point send functions.

Pipit's matrix puts a message at its sender's process and at the `receiver` field of the
MpiSend/MpiIsend record, which OTF2 defines as a rank of the record's communicator (on an
intercommunicator, of the other side's group): Pipit does not translate it to a world rank. The script therefore also builds the matrix with the receiver
translated through the archive's own Comm and Group definitions (as Pipit reads them); that one
must agree with the report exactly, and the untranslated one is reported as it is.
"""

import json
import sys

import _otf2.Config
import numpy as np
import otf2.definitions
import pipit

# python3-otf2 3.0.2 cannot print a bit set with more than one bit set (EnumBase.__str__ looks the
# value up among the single flags' names and raises KeyError), and Pipit prints every attribute
# of every event: an MPI_Win_fence (RmaCollectiveEnd, sync level PROCESS|MEMORY) or a nonblocking
# collective MPI-IO operation (NON_BLOCKING|COLLECTIVE) stops it. Score-P writes the same values.
# The flags are printed joined here.
_enum_str = _otf2.Config.EnumBase.__str__


def _bits_str(self):
    try:
        return _enum_str(self)
    except KeyError:
        names = getattr(type(self), "_names", {})
        bits = [n for v, n in sorted(names.items()) if v and self.value & v == v]
        return "{}.{}".format(type(self).__name__, "|".join(bits) or self.value)


_otf2.Config.EnumBase.__str__ = _bits_str

# python3-otf2 3.0.2 builds InterComm from Comm's fields followed by its own, reads an InterComm
# definition's second group as a Comm, and fails on every archive that has one (so Pipit does
# too). Its field list is put right here, as in tests/otf2_records.py.
_fields = otf2.definitions.InterComm._fields
if [f.name for f in _fields] == [
    "name", "group", "parent", "flags", "groupA", "groupB", "parent", "flags"
]:
    otf2.definitions.InterComm._fields = (_fields[0],) + tuple(_fields[4:])

# The report's size bins (format::profile::size_bin): bin 0 holds 0 and 1 byte, bin k (1..22)
# [2^k, 2^(k+1)), bin 23 everything from 8 MiB.
SIZE_BINS = 24
EDGES = [0.0] + [float(1 << k) for k in range(1, SIZE_BINS)] + [float(1 << 62)]

# The functions whose calls the report counts as point-to-point sends (format::funcs::FuncClass
# Send, Isend and SendRecv), the only ones the OTF2 export writes MpiSend/MpiIsend records for.
SENDS = {
    "MPI_Send", "MPI_Ssend", "MPI_Bsend", "MPI_Rsend",
    "MPI_Isend", "MPI_Issend", "MPI_Ibsend", "MPI_Irsend",
    "MPI_Sendrecv", "MPI_Sendrecv_replace",
}


def ref(value):
    """The id of a definition as Pipit's reader spells it ("Comm 3" -> 3)."""
    return int(str(value).rsplit(" ", 1)[-1])


def comm_members(trace):
    """Comm id -> its members as world ranks, from Pipit's definitions table. The python otf2
    reader gives a COMM_GROUP's members as the locations they index in the COMM_LOCATIONS group,
    whose position there is the MPI_COMM_WORLD rank. Communicators whose group is not a
    COMM_GROUP (the self-like group) map to None."""
    defs = trace.definitions
    groups = {}
    world = []
    for _, row in defs[defs["Definition Type"] == "Group"].iterrows():
        attrs = row["Attributes"]
        groups[int(row["ID"])] = attrs
        if "COMM_LOCATIONS" in str(attrs["group_type"]):
            world = [ref(m) for m in attrs["members"]]
    rank_of = {loc: r for r, loc in enumerate(world)}
    members = {}
    for _, row in defs[defs["Definition Type"] == "Comm"].iterrows():
        group = groups.get(ref(row["Attributes"]["group"]))
        if group is None or "COMM_GROUP" not in str(group["group_type"]):
            members[int(row["ID"])] = None
        else:
            members[int(row["ID"])] = [rank_of.get(ref(m), -1) for m in group["members"]]
    for _, row in defs[defs["Definition Type"] == "InterComm"].iterrows():
        # Peers on an intercommunicator are ranks of the other side's group: (side A, side B).
        sides = []
        for key in ("groupA", "groupB"):
            group = groups.get(ref(row["Attributes"][key]), {"members": []})
            sides.append([rank_of.get(ref(m), -1) for m in group["members"]])
        members[int(row["ID"])] = tuple(sides)
    return members


def main():
    otf2_dir, report_path = sys.argv[1], sys.argv[2]
    with open(report_path) as f:
        report = json.load(f)
    trace = pipit.Trace.from_otf2(otf2_dir)

    ranks = sorted(int(p) for p in set(trace.events["Process"]))
    n = max(ranks) + 1 if ranks else 0
    out = {"ranks": len(ranks)}
    ok = True

    count = np.asarray(trace.comm_matrix(output="count"))
    size = np.asarray(trace.comm_matrix(output="size"))

    want_count = np.zeros((n, n))
    want_size = np.zeros((n, n))
    for p in report["partners"]:
        want_count[p["source"], p["dest"]] += p["messages"]
        want_size[p["source"], p["dest"]] += p["bytes"]

    # The same matrix, receivers translated to world ranks.
    members = comm_members(trace)
    sends = trace.events[trace.events["Name"].isin(["MpiSend", "MpiIsend"])]
    t_count = np.zeros((n, n))
    t_size = np.zeros((n, n))
    unresolved = 0
    for proc, attrs in zip(sends["Process"], sends["Attributes"]):
        group = members.get(ref(attrs["communicator"]))
        if isinstance(group, tuple):
            group = group[1] if int(proc) in group[0] else group[0]
        if group is None or attrs["receiver"] >= len(group) or group[attrs["receiver"]] < 0:
            unresolved += 1
            continue
        dest = group[attrs["receiver"]]
        t_count[int(proc), dest] += 1
        t_size[int(proc), dest] += attrs["msg_length"]

    out["evenflush_messages"] = int(want_count.sum())
    out["evenflush_bytes"] = int(want_size.sum())
    out["pipit_messages"] = int(count.sum())
    out["pipit_bytes"] = int(size.sum())
    out["pairs"] = int((want_count > 0).sum())
    out["pipit_matrix_equal"] = bool(
        count.shape == want_count.shape
        and np.array_equal(count, want_count)
        and np.array_equal(size, want_size)
    )
    out["pipit_cells_differing"] = (
        int((count != want_count).sum() + (size != want_size).sum())
        if count.shape == want_count.shape
        else None
    )
    out["translated_matrix_equal"] = bool(
        np.array_equal(t_count, want_count) and np.array_equal(t_size, want_size)
    )
    out["unresolved_receivers"] = unresolved
    ok &= out["translated_matrix_equal"] and unresolved == 0
    # Totals do not depend on where the receiver lands.
    ok &= out["pipit_messages"] == out["evenflush_messages"]
    ok &= out["pipit_bytes"] == out["evenflush_bytes"]

    hist, _ = trace.message_histogram(bins=EDGES)
    want_hist = np.zeros(SIZE_BINS, dtype=np.int64)
    for f in report["functions"]:
        if f["name"] in SENDS:
            want_hist += np.asarray(f["histogram"], dtype=np.int64)
    out["pipit_histogram"] = [int(x) for x in hist]
    out["evenflush_histogram"] = [int(x) for x in want_hist]
    out["histogram_equal"] = bool(np.array_equal(hist, want_hist))
    # The report's histograms count send calls, also those to MPI_PROC_NULL, which carry no
    # message and have no MpiSend record; the partners count only messages.
    out["send_calls_without_message"] = int(want_hist.sum() - want_count.sum())
    if not out["histogram_equal"]:
        diff = want_hist - hist
        ok &= bool((diff >= 0).all()) and int(diff.sum()) == out["send_calls_without_message"]
    default_hist, default_edges = trace.message_histogram()
    out["pipit_default_histogram"] = {
        "counts": [int(x) for x in default_hist],
        "edges": [float(x) for x in default_edges],
    }
    out["agree"] = bool(ok)
    print(json.dumps(out))
    print(
        f"pipit: {out['pipit_messages']} messages, {out['pipit_bytes']} bytes; evenflush report: "
        f"{out['evenflush_messages']} messages, {out['evenflush_bytes']} bytes over "
        f"{out['pairs']} pairs; matrix as pipit computes it equal: {out['pipit_matrix_equal']}, "
        f"with receivers as world ranks: {out['translated_matrix_equal']}; size histogram equal: "
        f"{out['histogram_equal']}; {'AGREE' if ok else 'DISAGREE'}",
        file=sys.stderr,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
