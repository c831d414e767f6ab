//! The archive's global definitions, written once every event is: clock, strings, the MPI (and
//! MPI-IO) paradigm, regions, the system tree, location groups and locations, then the
//! communicators, groups and windows ([`super::comms`]) and the I/O handles ([`super::io`]).

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;

use super::comms::CommDefs;
use super::ffi::{self, Archive, check};
use super::io;
use super::location::location_id;
use crate::export::ExportError;
use trace::definitions::RankMeta;
use trace::funcs::{CollShape, FuncClass};

/// The archive's string table: each string once, numbered in order of first use.
#[derive(Default)]
struct Strings {
    ids: HashMap<String, u32>,
    list: Vec<CString>,
}

impl Strings {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.list.len() as u32;
        // Interior NULs cannot come from MPI names; replace rather than fail.
        self.list
            .push(CString::new(s.replace('\0', " ")).unwrap_or_default());
        self.ids.insert(s.to_string(), id);
        id
    }
}

/// The role OTF2 gives the region of a function of `class` named `name`.
fn region_role(class: FuncClass, name: &str) -> u8 {
    match class {
        FuncClass::Send
        | FuncClass::Isend
        | FuncClass::Recv
        | FuncClass::Irecv
        | FuncClass::SendRecv
        | FuncClass::Completion => ffi::OTF2_REGION_ROLE_POINT2POINT,
        FuncClass::Collective(_) if name.eq_ignore_ascii_case("MPI_Barrier") => {
            ffi::OTF2_REGION_ROLE_BARRIER
        }
        FuncClass::Collective(shape) | FuncClass::Icollective(shape) => match shape {
            CollShape::OneToAll => ffi::OTF2_REGION_ROLE_COLL_ONE2ALL,
            CollShape::AllToOne => ffi::OTF2_REGION_ROLE_COLL_ALL2ONE,
            CollShape::AllToAll => ffi::OTF2_REGION_ROLE_COLL_ALL2ALL,
            _ => ffi::OTF2_REGION_ROLE_COLL_OTHER,
        },
        FuncClass::Other => ffi::OTF2_REGION_ROLE_FUNCTION,
    }
}

/// What the definitions are made of, gathered while the events were written.
pub(super) struct Definitions<'a> {
    pub world_size: u32,
    pub metas: &'a [RankMeta],
    /// Every region, in id order, with the class of its function.
    pub region_names: &'a BTreeMap<String, FuncClass>,
    /// (rank, stream, location id, events)
    pub locations: &'a [(u32, u32, u64, u64)],
    pub comm_defs: &'a CommDefs,
    /// Ranks whose I/O handle was created, with their MPI_COMM_SELF.
    pub io_handles: &'a [(u32, Option<u32>)],
    /// Whether any I/O record was written: then the paradigm and the file are defined.
    pub any_io: bool,
    /// First and last time written (`u64::MAX` first when none was).
    pub time_range: (u64, u64),
}

/// Writes the global definitions, in the order OTF2 requires.
pub(super) fn write_definitions(archive: &Archive, defs: Definitions) -> Result<(), ExportError> {
    let Definitions {
        world_size,
        metas,
        region_names,
        locations,
        comm_defs,
        io_handles,
        any_io,
        time_range: (min_ts, max_ts),
    } = defs;
    let mut strings = Strings::default();
    let mpi = strings.id("MPI");
    let machine = strings.id("machine");
    let region_ids: Vec<(u32, u8)> = region_names
        .iter()
        .map(|(n, class)| (strings.id(n), region_role(*class, n)))
        .collect();
    let rank_names: Vec<u32> = metas
        .iter()
        .map(|m| strings.id(&format!("rank {}", m.rank)))
        .collect();
    let loc_names: Vec<u32> = locations
        .iter()
        .map(|(r, s, _, _)| strings.id(&format!("rank {r} thread {s}")))
        .collect();
    let empty = strings.id("");
    let comm_names: Vec<String> = comm_defs.names().map(str::to_string).collect();
    for n in &comm_names {
        strings.id(n);
    }
    // Score-P's templates for the names of unnamed communicators and windows.
    let comm_template = strings.id("Comm ${id}");
    let win_template = strings.id("Win ${id}");
    let io_names = any_io.then(|| {
        (
            strings.id("MPI-IO"),
            strings.id("MPI-IO files (names are not in the trace)"),
        )
    });
    let handle_names: Vec<u32> = io_handles
        .iter()
        .map(|(r, _)| strings.id(&format!("MPI-IO files of rank {r}")))
        .collect();
    let Some(gw) = archive.global_def_writer() else {
        return Err(ExportError::Other(
            "OTF2: no global definition writer".into(),
        ));
    };
    let (offset, length) = if min_ts == u64::MAX {
        (0, 1)
    } else {
        (min_ts, max_ts - min_ts + 1)
    };
    {
        check(
            gw.write_clock_properties(1_000_000_000, offset, length, ffi::OTF2_UNDEFINED_TIMESTAMP),
            "WriteClockProperties",
        )?;
        for (id, s) in strings.list.iter().enumerate() {
            check(gw.write_string(id as u32, s), "WriteString")?;
        }
        check(
            gw.write_paradigm(
                ffi::OTF2_PARADIGM_MPI,
                mpi,
                ffi::OTF2_PARADIGM_CLASS_PROCESS,
            ),
            "WriteParadigm",
        )?;
        for (property, value) in [
            (
                ffi::OTF2_PARADIGM_PROPERTY_COMM_NAME_TEMPLATE,
                comm_template,
            ),
            (
                ffi::OTF2_PARADIGM_PROPERTY_RMA_WIN_NAME_TEMPLATE,
                win_template,
            ),
        ] {
            check(
                gw.write_paradigm_property(
                    ffi::OTF2_PARADIGM_MPI,
                    property,
                    ffi::OTF2_TYPE_STRING,
                    ffi::OTF2_AttributeValue { string_ref: value },
                ),
                "WriteParadigmProperty",
            )?;
        }
        if let Some((paradigm, _)) = io_names {
            check(
                gw.write_io_paradigm(
                    io::PARADIGM,
                    paradigm,
                    paradigm,
                    ffi::OTF2_IO_PARADIGM_CLASS_PARALLEL,
                    ffi::OTF2_IO_PARADIGM_FLAG_NONE,
                ),
                "WriteIoParadigm",
            )?;
        }
        for (i, &(name, role)) in region_ids.iter().enumerate() {
            check(
                gw.write_region(
                    i as u32,
                    name,
                    name,
                    empty,
                    role,
                    ffi::OTF2_PARADIGM_MPI,
                    ffi::OTF2_REGION_FLAG_NONE,
                    empty,
                    0,
                    0,
                ),
                "WriteRegion",
            )?;
        }
        check(
            gw.write_system_tree_node(0, machine, machine, ffi::OTF2_UNDEFINED_SYSTEM_TREE_NODE),
            "WriteSystemTreeNode",
        )?;
        for (m, &name) in metas.iter().zip(&rank_names) {
            check(
                gw.write_location_group(
                    m.rank,
                    name,
                    ffi::OTF2_LOCATION_GROUP_TYPE_PROCESS,
                    0,
                    ffi::OTF2_UNDEFINED_LOCATION_GROUP,
                ),
                "WriteLocationGroup",
            )?;
        }
        for (&(rank, _, loc, events), &name) in locations.iter().zip(&loc_names) {
            check(
                gw.write_location(loc, name, ffi::OTF2_LOCATION_TYPE_CPU_THREAD, events, rank),
                "WriteLocation",
            )?;
        }
        // The MPI ranks' locations, indexed by world rank: each rank's first stream.
        let mut by_rank: Vec<u64> = Vec::new();
        for r in 0..world_size {
            let loc = locations
                .iter()
                .filter(|l| l.0 == r)
                .map(|l| l.2)
                .min()
                .unwrap_or_else(|| location_id(r, 0));
            by_rank.push(loc);
        }
        let name = |n: &str| strings.ids.get(n).copied().unwrap_or(empty);
        comm_defs.write(&gw, &by_rank, &name)?;
        if let Some((_, file)) = io_names {
            check(
                gw.write_io_regular_file(io::FILE, file, 0),
                "WriteIoRegularFile",
            )?;
            for (&(rank, comm_self), &handle_name) in io_handles.iter().zip(&handle_names) {
                check(
                    gw.write_io_handle(
                        rank,
                        handle_name,
                        io::FILE,
                        io::PARADIGM,
                        ffi::OTF2_IO_HANDLE_FLAG_NONE,
                        comm_self.unwrap_or(ffi::OTF2_UNDEFINED_COMM),
                        ffi::OTF2_UNDEFINED_IO_HANDLE,
                    ),
                    "WriteIoHandle",
                )?;
            }
        }
    }
    Ok(())
}
