//! The recorder's side of the aggregated layout (`--layout node|shared`, format: `format::group`):
//! the ranks of a group write one file together, with one collective MPI-IO write per flush.
//! Flushes happen at the same collective on every rank (the suspension), which is what makes a
//! collective write possible there; it costs an exclusive prefix sum and two small reductions,
//! all O(log P), and creates one file per group instead of two per rank.
//!
//! What cannot be collective goes elsewhere: a rank flushing alone (the hard memory limit, an
//! abnormal end) writes its own part files from then on (see `sink.rs`), and what a rank records
//! after `MPI_Finalize` goes into a slot of [`TAIL_SLOT_BYTES`] kept for it at the end of the
//! group file, with a plain `pwrite`.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use format::group::{GroupHeader, TAIL_SLOT_BYTES, encode_group_header, group_file_name};
use format::{EncodedChunk, encode_file_header};
use offload::writer::OutputPlan;

use crate::mpi_link::{GroupPlace, Link, LinkError};

enum State {
    /// Nothing written yet: the group is formed at the first collective write.
    Unformed,
    Open {
        link: Link,
        place: GroupPlace,
        path: PathBuf,
        /// Where the next collective write starts.
        base: u64,
    },
    /// Closed at `MPI_Finalize`; what this rank records afterwards goes at `offset` of `path`.
    Tail { path: PathBuf, offset: u64 },
    /// Some member's write failed; every member agreed, and writes files of its own.
    Failed,
}

pub enum GroupOutcome {
    Written,
    /// The same on every member of the group.
    Failed {
        reason: String,
        out_of_space: bool,
    },
}

pub struct GroupFile {
    per_node: bool,
    state: State,
    /// This rank's rank header is in the file (it goes right before its first chunk).
    header_written: bool,
    /// The `Writer` record naming the group file was written.
    noted: bool,
    /// The group communicator and file still need their collective close (not yet closed, and a
    /// failure did not happen before they existed).
    needs_close: bool,
}

impl GroupFile {
    pub fn new(per_node: bool) -> GroupFile {
        GroupFile {
            per_node,
            state: State::Unformed,
            header_written: false,
            noted: false,
            needs_close: false,
        }
    }

    /// Whether the next flush of all ranks together is a collective write (every member agrees
    /// on this: the state changes only on collectively agreed outcomes).
    pub fn is_collective(&self) -> bool {
        matches!(self.state, State::Unformed | State::Open { .. })
    }

    pub fn noted(&self) -> bool {
        self.noted
    }

    pub fn has_tail_slot(&self) -> bool {
        matches!(self.state, State::Tail { .. })
    }

    fn fail(&mut self, link: Option<&Link>, why: &str, e: LinkError) -> GroupOutcome {
        self.state = State::Failed;
        GroupOutcome::Failed {
            reason: format!("{why}: MPI error class {}", e.0),
            out_of_space: link.is_some_and(|l| l.is_out_of_space(e)),
        }
    }

    /// Forms the group and opens its file, collectively.
    fn form(&mut self, plan: &OutputPlan) -> Result<(), GroupOutcome> {
        let Some(link) = crate::mpi_link::link() else {
            self.state = State::Failed;
            return Err(GroupOutcome::Failed {
                reason: "the recorder's private MPI communicator is not set up".into(),
                out_of_space: false,
            });
        };
        let place = link
            .group_setup(self.per_node)
            .map_err(|e| self.fail(Some(&link), "forming the group", e))?;
        self.needs_close = true;
        let dir = plan.dirs.first().cloned().unwrap_or_default();
        let path = dir.join(group_file_name(place.leader));
        if let Err(e) = link.group_open(&path) {
            let outcome = self.fail(Some(&link), &format!("opening {}", path.display()), e);
            return Err(outcome);
        }
        self.state = State::Open {
            link,
            place,
            path,
            base: 0,
        };
        Ok(())
    }

    /// One collective write: this rank's `chunks` (possibly none) after the lower members'.
    pub fn write_round(&mut self, plan: &OutputPlan, chunks: &[EncodedChunk]) -> GroupOutcome {
        if matches!(self.state, State::Unformed)
            && let Err(outcome) = self.form(plan)
        {
            return outcome;
        }
        let State::Open {
            link,
            place,
            path,
            base,
        } = &mut self.state
        else {
            return GroupOutcome::Failed {
                reason: "the group file is no longer written collectively".into(),
                out_of_space: false,
            };
        };
        let mut bytes = Vec::new();
        if *base == 0 && place.rank == 0 {
            bytes.extend(encode_group_header(&GroupHeader {
                world_size: plan.header.world_size,
                group_size: place.size,
                leader: place.leader,
                created_unix_ns: plan.header.created_unix_ns,
                producer: plan.header.producer.clone(),
            }));
        }
        let adds_header = !chunks.is_empty() && !self.header_written;
        if adds_header {
            bytes.extend(encode_file_header(&plan.header));
        }
        for c in chunks {
            bytes.extend_from_slice(&c.bytes);
        }
        let link = *link;
        match link.group_write(*base, &bytes) {
            Ok((_, total)) => {
                *base += total;
                self.header_written |= adds_header;
                self.noted |= !chunks.is_empty();
                GroupOutcome::Written
            }
            Err(e) => {
                let why = format!("writing {}", path.display());
                self.fail(Some(&link), &why, e)
            }
        }
    }

    /// At `MPI_Finalize` (after the last collective write): closes the file and the group
    /// collectively, and keeps this rank's slot for what it records afterwards.
    pub fn close(&mut self) {
        if !std::mem::replace(&mut self.needs_close, false) {
            return;
        }
        let Some(link) = crate::mpi_link::link() else {
            return;
        };
        let closed = link.group_close();
        if let State::Open {
            place, path, base, ..
        } = &self.state
        {
            self.state = match closed {
                Ok(()) => State::Tail {
                    path: path.clone(),
                    offset: *base + u64::from(place.rank) * TAIL_SLOT_BYTES,
                },
                Err(_) => State::Failed,
            };
        }
    }

    /// Writes what this rank recorded after `MPI_Finalize` into its slot; an error (it does not
    /// fit, or the write failed) says why, and the caller writes the chunks elsewhere.
    pub fn write_tail(&mut self, chunks: &[EncodedChunk]) -> Result<(), String> {
        let State::Tail { path, offset } = &self.state else {
            return Err("no slot in the group file".into());
        };
        let mut bytes = Vec::new();
        if !chunks.is_empty() && !self.header_written {
            // Cannot happen after a collective write with data, but a rank header must precede
            // any chunk; the slot is then too small for the promise, so go elsewhere.
            return Err("this rank has no header in the group file".into());
        }
        for c in chunks {
            bytes.extend_from_slice(&c.bytes);
        }
        if bytes.len() as u64 > TAIL_SLOT_BYTES {
            return Err(format!(
                "{} bytes recorded after MPI_Finalize do not fit the {TAIL_SLOT_BYTES}-byte slot \
                 kept in the group file",
                bytes.len()
            ));
        }
        // Used once: a second remainder (there is none in a normal end) goes elsewhere.
        let (path, offset) = (path.clone(), *offset);
        self.state = State::Failed;
        if bytes.is_empty() {
            return Ok(());
        }
        let written = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| {
                f.write_all_at(&bytes, offset)?;
                f.sync_data()
            });
        written.map_err(|e| format!("writing the slot in {}: {e}", path.display()))
    }
}
