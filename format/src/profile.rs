//! The per-rank profile of a run (MPIPROF style), and its file `profile-NNNNN.json`.
//!
//! The statistics live in [`ProfileStats`], one per rank, fed event by event in constant memory
//! (it grows with the number of distinct functions, communicators, partner ranks and
//! suspensions, never with the number of calls). It depends only on the `format` event model and
//! on the name classification of [`crate::funcs`], so the recorder's profile mode can keep one in
//! each rank and write it at finalize as `profile-NNNNN.json` (see "Profile files" in
//! `format/FORMAT.md`); `reconstruct::report` reads such a directory back and renders the same
//! tables from it or from a full trace.
//!
//! Message sizes are binned in 24 power-of-two bins: bin 0 holds 0 and 1 byte, bin k (1..=22)
//! holds sizes in `[2^k, 2^(k+1))` (bin 22 is 4 MiB up to 8 MiB), bin 23 holds 8 MiB and more.

use std::collections::{BTreeMap, HashMap};

use crate::model::{Event, FunctionId, Marker, MpiCall, PollRun, Suspension};
use serde::{Deserialize, Serialize};

use crate::funcs::{Deferred, FuncClass};
use crate::requests::PersistentRequests;

/// Number of message-size bins.
pub const SIZE_BINS: usize = 24;

/// The size bin of a message of `bytes` bytes (see the module documentation).
pub fn size_bin(bytes: u64) -> usize {
    if bytes < 2 {
        return 0;
    }
    (63 - bytes.leading_zeros() as usize).min(SIZE_BINS - 1)
}

const COST_BINS: usize = 64;

fn cost_bin(ns: f64) -> usize {
    if ns < 2.0 {
        0
    } else {
        (63 - (ns as u64).leading_zeros() as usize).min(63)
    }
}

/// A human label of bin `k`: its lower bound ("0-1 B" for bin 0, ">=8 MiB" for the last).
pub fn size_bin_label(k: usize) -> String {
    match k {
        0 => "0-1B".into(),
        k if k >= SIZE_BINS - 1 => ">=8MiB".into(),
        k if k >= 20 => format!("{}MiB", 1u64 << (k - 20)),
        k if k >= 10 => format!("{}KiB", 1u64 << (k - 10)),
        k => format!("{}B", 1u64 << k),
    }
}

/// Statistics of one MPI function on one rank (or merged over ranks). Times in nanoseconds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FuncStats {
    pub count: u64,
    pub total_ns: f64,
    pub min_ns: f64,
    pub max_ns: f64,
    /// The recorder's own cost attributed to these calls (`MpiCall::cost`), summed.
    pub cost_ns: f64,
    /// Bytes as the call records them: sent, or for receive-only calls the buffer's capacity.
    pub bytes_total: u64,
    pub bytes_min: u64,
    pub bytes_max: u64,
    pub histogram: [u64; SIZE_BINS],
    /// Bytes actually received, from the statuses (completions) that follow the call: blocking
    /// receives, `Sendrecv`, and `Wait*`/`Test*` completing receive requests.
    pub recv_count: u64,
    pub recv_bytes_total: u64,
    pub recv_histogram: [u64; SIZE_BINS],
}

impl Default for FuncStats {
    fn default() -> Self {
        FuncStats {
            count: 0,
            total_ns: 0.0,
            min_ns: f64::INFINITY,
            max_ns: 0.0,
            cost_ns: 0.0,
            bytes_total: 0,
            bytes_min: u64::MAX,
            bytes_max: 0,
            histogram: [0; SIZE_BINS],
            recv_count: 0,
            recv_bytes_total: 0,
            recv_histogram: [0; SIZE_BINS],
        }
    }
}

impl FuncStats {
    /// `sized`: whether the call moves a message (a wait or `MPI_Comm_rank` has no size to bin).
    fn add(&mut self, duration_ns: f64, cost_ns: f64, bytes: u64, sized: bool) {
        self.count += 1;
        self.total_ns += duration_ns;
        self.min_ns = self.min_ns.min(duration_ns);
        self.max_ns = self.max_ns.max(duration_ns);
        self.cost_ns += cost_ns;
        self.bytes_total += bytes;
        self.bytes_min = self.bytes_min.min(bytes);
        self.bytes_max = self.bytes_max.max(bytes);
        if sized {
            self.histogram[size_bin(bytes)] += 1;
        }
    }

    /// Adds `count` calls that took `busy_ns` and cost `cost_ns` together, whose single durations
    /// are not known (a folded run of polls): each is taken as the run's mean.
    fn add_run(&mut self, count: u64, busy_ns: f64, cost_ns: f64) {
        if count == 0 {
            return;
        }
        let mean = busy_ns / count as f64;
        self.count += count;
        self.total_ns += busy_ns;
        self.min_ns = self.min_ns.min(mean);
        self.max_ns = self.max_ns.max(mean);
        self.cost_ns += cost_ns;
        self.bytes_min = 0;
    }

    fn add_received(&mut self, bytes: u64) {
        self.recv_count += 1;
        self.recv_bytes_total += bytes;
        self.recv_histogram[size_bin(bytes)] += 1;
    }

    pub fn merge(&mut self, o: &FuncStats) {
        self.count += o.count;
        self.total_ns += o.total_ns;
        self.min_ns = self.min_ns.min(o.min_ns);
        self.max_ns = self.max_ns.max(o.max_ns);
        self.cost_ns += o.cost_ns;
        self.bytes_total += o.bytes_total;
        self.bytes_min = self.bytes_min.min(o.bytes_min);
        self.bytes_max = self.bytes_max.max(o.bytes_max);
        self.recv_count += o.recv_count;
        self.recv_bytes_total += o.recv_bytes_total;
        for k in 0..SIZE_BINS {
            self.histogram[k] += o.histogram[k];
            self.recv_histogram[k] += o.recv_histogram[k];
        }
    }

    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.total_ns / self.count as f64
        }
    }
}

/// Point-to-point traffic from one rank to one destination world rank.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartnerStats {
    pub messages: u64,
    pub bytes: u64,
}

/// One suspension as one rank saw it.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SuspensionRow {
    pub seq: u64,
    pub z_ns: u64,
    /// How long this rank actually stood still, ns.
    pub length_ns: f64,
    pub flushed: bool,
    pub bytes_raw: u64,
    pub bytes_stored: u64,
    pub write_ns: u64,
    pub overshoot_ns: u64,
}

/// A rank's profile, built event by event. See the module documentation.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProfileStats {
    pub rank: u32,
    pub world_size: u32,
    pub ns_per_tick: f64,
    /// By function name, so that ranks (and runs) with different function ids merge. Filled by
    /// [`ProfileStats::finish`] (the hot path accumulates by function id, without allocating).
    pub functions: BTreeMap<String, FuncStats>,
    /// Point-to-point sends of this rank by destination world rank.
    pub partners: BTreeMap<u32, PartnerStats>,
    /// End of `MPI_Init` to start of `MPI_Finalize`, ns (None until both markers are seen).
    pub span_ns: Option<f64>,
    /// Time inside MPI calls that started within that span, ns.
    pub mpi_in_span_ns: f64,
    /// Time this rank stood still in suspensions, ns.
    pub suspended_ns: f64,
    pub suspensions: Vec<SuspensionRow>,
    pub lost_events: u64,
    /// The recorder's cost per call in power-of-two bins of nanoseconds (bin k: `[2^k, 2^(k+1))`,
    /// bin 0 also holds 0): its median is robust to the rare very expensive first calls.
    #[serde(default)]
    pub cost_histogram: Vec<u64>,
    #[serde(skip)]
    names: HashMap<FunctionId, FuncInfo>,
    #[serde(skip)]
    by_id: HashMap<FunctionId, FuncStats>,
    /// Members of each communicator, and this rank's position in it (found once: searching a
    /// world of 10^4 ranks at every collective call would cost more than the rest of the call).
    #[serde(skip)]
    comms: BTreeMap<u32, (Vec<u32>, Option<u32>)>,
    /// The remote group of each intercommunicator: its peers are ranks of that group.
    #[serde(skip)]
    remote_groups: BTreeMap<u32, Vec<u32>>,
    #[serde(skip)]
    init_done: Option<u64>,
    #[serde(skip)]
    finalize_start: Option<u64>,
    #[serde(skip)]
    abnormal_end: Option<u64>,
    /// The last call seen per stream, to which the completions that follow it belong.
    #[serde(skip)]
    last_call: HashMap<u32, FunctionId>,
    /// A `Start` sends to the destination its request's `*_init` named.
    #[serde(skip)]
    persistent: PersistentRequests,
}

/// What the profile needs to know about a function, decided once from its name.
#[derive(Clone, Debug)]
struct FuncInfo {
    name: String,
    class: FuncClass,
    deferred: Option<Deferred>,
    received: Received,
}

/// How many bytes a collective call brings into the calling rank, from the one size the trace
/// records (`count x type` of the buffer the recorder's table names, see
/// `recorder/mpi_functions.tsv`). Only where MPI fixes it from that size alone; the v-variants
/// and `Reduce_scatter*` have per-rank counts the trace does not hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Received {
    /// Not a collective, or not derivable.
    Unknown,
    /// The recorded size, at every rank (`Allreduce`, `Scan`, `Exscan`, `Scatter`).
    Same,
    /// The recorded size, at every rank but the root (`Bcast`).
    SameExceptRoot,
    /// The recorded size, at the root only (`Reduce`).
    SameAtRoot,
    /// Communicator size times the recorded size, at every rank (`Allgather`, `Alltoall`).
    Times,
    /// Communicator size times the recorded size, at the root only (`Gather`).
    TimesAtRoot,
}

impl Received {
    fn of(name: &str) -> Received {
        let Some(base) = name.strip_prefix("MPI_") else {
            return Received::Unknown;
        };
        let lower = base.to_ascii_lowercase();
        // Nonblocking collectives record the same sizes as their blocking forms.
        let lower = match lower.strip_prefix('i') {
            Some(rest) if !matches!(lower.as_str(), "isend" | "irecv") => rest.to_string(),
            _ => lower,
        };
        match lower.as_str() {
            "allreduce" | "scan" | "exscan" | "scatter" => Received::Same,
            "bcast" => Received::SameExceptRoot,
            "reduce" => Received::SameAtRoot,
            "allgather" | "alltoall" => Received::Times,
            "gather" => Received::TimesAtRoot,
            _ => Received::Unknown,
        }
    }
}

impl ProfileStats {
    pub fn new(rank: u32, world_size: u32, ns_per_tick: f64) -> ProfileStats {
        ProfileStats {
            rank,
            world_size,
            ns_per_tick,
            ..Default::default()
        }
    }

    /// Takes one event of stream `stream` of this rank, in the stream's order.
    pub fn add_event(&mut self, stream: u32, e: &Event) {
        match e {
            Event::FunctionDef { id, name } => {
                self.names.insert(
                    *id,
                    FuncInfo {
                        name: name.clone(),
                        class: FuncClass::of(name),
                        deferred: Deferred::of(name),
                        received: Received::of(name),
                    },
                );
            }
            Event::CommDef { id, members } => {
                let me = if members.get(self.rank as usize) == Some(&self.rank) {
                    Some(self.rank)
                } else {
                    members
                        .iter()
                        .position(|&m| m == self.rank)
                        .map(|p| p as u32)
                };
                self.comms.insert(*id, (members.clone(), me));
            }
            Event::RemoteGroup { id, members } => {
                self.remote_groups.insert(*id, members.clone());
            }
            Event::Call(c) => self.add_call(stream, c),
            Event::Polls(p) => self.add_polls(stream, p),
            Event::Completion(done) => {
                // Completions of sends carry no source; only receives count as received bytes.
                if done.cancelled || done.source < 0 {
                    return;
                }
                if let Some(id) = self.last_call.get(&stream)
                    && let Some(f) = self.by_id.get_mut(id)
                {
                    f.add_received(done.bytes);
                }
            }
            Event::Suspension(s) => self.add_suspension(s),
            Event::Marker(m) => match *m {
                Marker::InitDone { time } => {
                    self.init_done.get_or_insert(time);
                    self.update_span();
                }
                Marker::FinalizeStart { time } => {
                    self.finalize_start.get_or_insert(time);
                    self.update_span();
                }
                Marker::AbnormalEnd { time, .. } => {
                    self.abnormal_end.get_or_insert(time);
                    self.update_span();
                }
                Marker::Lost { events, .. } => self.lost_events += events,
                _ => {}
            },
            _ => {}
        }
    }

    fn update_span(&mut self) {
        if let (Some(a), Some(b)) = (
            self.init_done,
            crate::span_end(self.finalize_start, self.abnormal_end),
        ) {
            self.span_ns = Some(b.saturating_sub(a) as f64 * self.ns_per_tick);
        }
    }

    fn add_call(&mut self, stream: u32, c: &MpiCall) {
        let (class, deferred, received) = self
            .names
            .get(&c.func)
            .map_or((FuncClass::Other, None, Received::Unknown), |f| {
                (f.class, f.deferred, f.received)
            });
        let duration_ns = c.end.saturating_sub(c.start) as f64 * self.ns_per_tick;
        let cost_ns = f64::from(c.cost) * self.ns_per_tick;
        let sized = !matches!(class, FuncClass::Completion | FuncClass::Other);
        let arrived = self.collective_received(received, c);
        let f = self.by_id.entry(c.func).or_default();
        f.add(duration_ns, cost_ns, c.bytes, sized);
        if let Some(bytes) = arrived {
            f.add_received(bytes);
        }
        self.cost_histogram.resize(COST_BINS, 0);
        self.cost_histogram[cost_bin(cost_ns)] += 1;
        let in_span = self.init_done.is_some_and(|t| c.start >= t)
            && self.finalize_start.is_none_or(|t| c.start < t);
        if in_span {
            self.mpi_in_span_ns += duration_ns;
        }
        let sent = match deferred {
            Some(kind @ (Deferred::SendInit | Deferred::RecvInit)) => {
                self.persistent.init(kind == Deferred::SendInit, c);
                None
            }
            Some(Deferred::Start) => self
                .persistent
                .started(c)
                .and_then(|p| p.send.then_some(p.call)),
            _ => matches!(
                class,
                FuncClass::Send | FuncClass::Isend | FuncClass::SendRecv
            )
            .then_some(*c),
        };
        if let Some(m) = sent
            && m.peer >= 0
            && let Some(dest) = self.world_rank(m.comm, m.peer)
        {
            let p = self.partners.entry(dest).or_default();
            p.messages += 1;
            p.bytes += m.bytes;
        }
        self.last_call.insert(stream, c.func);
    }

    fn add_polls(&mut self, stream: u32, p: &PollRun) {
        let busy_ns = p.busy as f64 * self.ns_per_tick;
        let cost_ns = (p.inner_cost as f64 + f64::from(p.cost)) * self.ns_per_tick;
        self.by_id
            .entry(p.func)
            .or_default()
            .add_run(p.count, busy_ns, cost_ns);
        if p.count > 0 {
            self.cost_histogram.resize(COST_BINS, 0);
            self.cost_histogram[cost_bin(cost_ns / p.count as f64)] += p.count;
        }
        let in_span = self.init_done.is_some_and(|t| p.start >= t)
            && self.finalize_start.is_none_or(|t| p.start < t);
        if in_span {
            self.mpi_in_span_ns += busy_ns;
        }
        self.last_call.insert(stream, p.func);
    }

    /// Bytes a collective call brought into this rank: recorded since chunk version 6
    /// (`MpiCall::recv_bytes`), else derived from the one recorded size where that tells.
    fn collective_received(&self, rule: Received, c: &MpiCall) -> Option<u64> {
        if c.recv_bytes > 0 {
            return Some(c.recv_bytes);
        }
        if rule == Received::Unknown {
            return None;
        }
        let (size, me) = match self.comms.get(&c.comm) {
            Some((members, me)) => (members.len() as u64, (*me)? as i32),
            None if c.comm == 0 => (u64::from(self.world_size), self.rank as i32),
            None => return None,
        };
        let at_root = me == c.root;
        // A zero size at the root of Gather/Scatter or anywhere for Allgather/Alltoall means an
        // MPI_IN_PLACE buffer: what arrived is then not known.
        match rule {
            Received::Same if c.bytes == 0 && at_root => None,
            Received::Same => Some(c.bytes),
            Received::SameExceptRoot => (!at_root).then_some(c.bytes),
            Received::SameAtRoot => at_root.then_some(c.bytes),
            Received::Times => (c.bytes > 0).then_some(c.bytes * size),
            Received::TimesAtRoot => (at_root && c.bytes > 0).then_some(c.bytes * size),
            Received::Unknown => None,
        }
    }

    /// Moves the statistics gathered by function id under the functions' names. Call before
    /// reading `functions` or serialising (the readers and [`ProfileStats::to_json`] do).
    pub fn finish(&mut self) {
        for (id, stats) in self.by_id.drain() {
            let name = self
                .names
                .get(&id)
                .map_or_else(|| format!("function#{id}"), |f| f.name.clone());
            self.functions.entry(name).or_default().merge(&stats);
        }
    }

    /// Whether every statistic is under its function's name already (see
    /// [`ProfileStats::finish`]): readers can then use the profile without a finished copy.
    pub fn is_finished(&self) -> bool {
        self.by_id.is_empty()
    }

    /// [`ProfileStats::finish`], and lets go of what only further events of the rank would need
    /// (communicator member lists: O(world size) each, so O(R²) over a whole run's profiles;
    /// function names by id). For a reader done with the rank's events: events added afterwards
    /// lose their function names and communicator translation.
    pub fn seal(&mut self) {
        self.finish();
        self.comms = BTreeMap::new();
        self.remote_groups = BTreeMap::new();
        self.last_call = HashMap::new();
        self.persistent = PersistentRequests::default();
        self.by_id = HashMap::new();
        self.names = HashMap::new();
    }

    /// World rank of `peer` in communicator `comm`: communicator 0 is the world itself; on an
    /// intercommunicator a peer is a rank of the remote group.
    fn world_rank(&self, comm: u32, peer: i32) -> Option<u32> {
        let peer = u32::try_from(peer).ok()?;
        if let Some(remote) = self.remote_groups.get(&comm) {
            return remote.get(peer as usize).copied();
        }
        match self.comms.get(&comm) {
            Some((members, _)) => members.get(peer as usize).copied(),
            None if comm == 0 => Some(peer),
            None => None,
        }
    }

    fn add_suspension(&mut self, s: &Suspension) {
        let length_ns = s.end.saturating_sub(s.start) as f64 * self.ns_per_tick;
        self.suspended_ns += length_ns;
        self.suspensions.push(SuspensionRow {
            seq: s.seq,
            z_ns: s.z_ns,
            length_ns,
            flushed: s.flushed,
            bytes_raw: s.bytes_raw,
            bytes_stored: s.bytes_stored,
            write_ns: s.write_ns,
            overshoot_ns: s.overshoot_ns,
        });
    }

    /// Adds another profile's functions, partners and times to this one (e.g. all ranks into one).
    pub fn merge(&mut self, o: &ProfileStats) {
        self.finish();
        let mut finished;
        let o = if o.by_id.is_empty() {
            o
        } else {
            finished = o.clone();
            finished.finish();
            &finished
        };
        for (name, f) in &o.functions {
            self.functions.entry(name.clone()).or_default().merge(f);
        }
        for (dest, p) in &o.partners {
            let mine = self.partners.entry(*dest).or_default();
            mine.messages += p.messages;
            mine.bytes += p.bytes;
        }
        self.mpi_in_span_ns += o.mpi_in_span_ns;
        self.suspended_ns += o.suspended_ns;
        self.lost_events += o.lost_events;
        self.suspensions.extend_from_slice(&o.suspensions);
        self.cost_histogram.resize(COST_BINS, 0);
        for (mine, theirs) in self.cost_histogram.iter_mut().zip(&o.cost_histogram) {
            *mine += theirs;
        }
    }

    /// The recorder's mean cost per recorded call, ns. One-time costs (the first call of a rank
    /// sets up the recorder) can dominate it: see [`ProfileStats::typical_cost_ns`].
    pub fn mean_cost_ns(&self) -> f64 {
        let (n, cost) = self
            .functions
            .values()
            .chain(self.by_id.values())
            .fold((0u64, 0.0), |(n, c), f| (n + f.count, c + f.cost_ns));
        if n == 0 { 0.0 } else { cost / n as f64 }
    }

    /// The recorder's median cost per call, ns, to within a factor of sqrt(2) (the geometric
    /// middle of its power-of-two bin).
    pub fn typical_cost_ns(&self) -> f64 {
        let n: u64 = self.cost_histogram.iter().sum();
        if n == 0 {
            return 0.0;
        }
        let mut seen = 0;
        for (k, &c) in self.cost_histogram.iter().enumerate() {
            seen += c;
            if seen * 2 >= n {
                return if k == 0 {
                    1.0
                } else {
                    (1u64 << k) as f64 * std::f64::consts::SQRT_2
                };
            }
        }
        0.0
    }

    /// The compact on-disk form (`profile-NNNNN.json`).
    pub fn to_json(&self) -> String {
        let mut done = self.clone();
        done.finish();
        serde_json::to_string(&done).unwrap_or_else(|_| "{}".into())
    }

    pub fn from_json(text: &str) -> Result<ProfileStats, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// `profile-NNNNN.json`, the name of rank `rank`'s profile file.
pub fn profile_file_name(rank: u32) -> String {
    format!("profile-{rank:05}.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partners_count_started_persistent_sends_and_large_count_sends() {
        let mut p = ProfileStats::new(0, 4, 1.0);
        for (id, name) in [
            (1, "MPI_Send_init"),
            (2, "MPI_Recv_init"),
            (3, "MPI_Start"),
            (4, "MPI_Send_c"),
        ] {
            p.add_event(
                0,
                &Event::FunctionDef {
                    id,
                    name: name.into(),
                },
            );
        }
        let call = |func, peer, request, bytes| {
            Event::Call(MpiCall {
                func,
                peer,
                request,
                bytes,
                tag: 1,
                ..MpiCall::default()
            })
        };
        p.add_event(0, &call(1, 1, 10, 16));
        p.add_event(0, &call(2, 3, 11, 16));
        // Two starts of the send request, one of the receive request.
        for request in [10, 11, 10] {
            p.add_event(0, &call(3, -1, request, 0));
        }
        p.add_event(0, &call(4, 2, 0, 8));
        assert_eq!(
            p.partners.get(&1),
            Some(&PartnerStats {
                messages: 2,
                bytes: 32
            })
        );
        assert_eq!(
            p.partners.get(&2),
            Some(&PartnerStats {
                messages: 1,
                bytes: 8
            })
        );
        assert_eq!(p.partners.len(), 2);
    }
}
