//! What the Rust core and the documentation get from the table: the name table by function id
//! and `FUNCTIONS.md`.

use std::fmt::Write as _;

use super::table::Func;

/// Rust source: the name and category of every function id.
pub fn rust_table(funcs: &[Func]) -> String {
    let mut s =
        String::from("/// Generated from mpi_functions.tsv: (name, category) by function id.\n");
    s.push_str("pub const FUNCTIONS: &[(&str, &str)] = &[\n");
    for f in funcs {
        let _ = writeln!(s, "    ({:?}, {:?}),", f.name, f.category);
    }
    s.push_str("];\n");
    s
}

/// The covered-functions document.
pub fn functions_md(funcs: &[Func]) -> String {
    let mut s = String::new();
    s.push_str("# Functions wrapped by the evenflush recorder\n\n");
    s.push_str(
        "Generated from `recorder/mpi_functions.tsv` (do not edit by hand; regenerate with\n",
    );
    s.push_str(
        "`EVENFLUSH_BLESS=1 cargo test -p recorder functions_md`). The id is the `FunctionId`\n",
    );
    s.push_str("stored in traces. Every function is wrapped under its C name and under the Fortran names\n");
    s.push_str(
        "`mpi_xxx_` (mpif.h / `use mpi`), `mpi_xxx_f08_` and `mpi_xxx_f08ts_` (`use mpi_f08`); the\n",
    );
    s.push_str(
        "MPI-4 large-count variants `MPI_xxx_c` exist in Fortran only in `use mpi_f08`, as\n",
    );
    s.push_str("`mpi_xxx_f08ts_large_` / `mpi_xxx_f08_large_`.\n\n");
    s.push_str(
        "The table spans MPI-4 and the MPIX_ extensions of both MPIs: each preload library wraps\n",
    );
    s.push_str(
        "the rows whose C function its MPI's `mpi.h` (Open MPI: and `mpi-ext.h`) declares, so\n",
    );
    s.push_str("Open MPI 4.1 gets no `_c`, sessions or partitioned wrappers, and MPICH no `MPIX_*_init`.\n");
    s.push_str(
        "Every function an installed MPI exports that is not here is listed, with the reason, in\n",
    );
    s.push_str(
        "`recorder/mpi_excluded.tsv`; `recorder/tests/exports.rs` checks both lists against\n",
    );
    s.push_str("`nm -D` of each libmpi.\n\n");
    let _ = writeln!(s, "{} functions.\n", funcs.len());
    s.push_str("| id | function | category | recorded arguments |\n|---:|---|---|---|\n");
    for f in funcs {
        let roles: Vec<String> = f.roles.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            s,
            "| {} | `{}` | {} | {} |",
            f.id,
            f.name,
            f.category,
            roles.join(" ")
        );
    }
    s.push_str("\nNotes: `bytes` is count x type size of the named arguments (0 when the named buffer is\n");
    s.push_str("`MPI_IN_PLACE`); blocking receives add a `Completion` (no request) with the actual source,\n");
    s.push_str("tag and byte count; `MPI_Startall` adds one call record per started request.\n");
    s.push_str(
        "Partitioned calls count partitions x count x type size. One-sided calls (`win`) carry\n",
    );
    s.push_str(
        "the window id in `comm`; `MPI_Mrecv`/`MPI_Imrecv` (`msg`) the communicator of the probe\n",
    );
    s.push_str(
        "that returned the message; `MPI_Pcontrol` (`level`) its level in `tag`. A program that\n",
    );
    s.push_str("never calls `MPI_Init` is recorded from its first `MPI_Session_init` to the\n");
    s.push_str(
        "`MPI_Session_finalize` of its last open session (`session-init`, `session-finalize`).\n",
    );
    s
}
