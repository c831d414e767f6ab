//! The wrappers themselves: one C function `MPI_*` calling `PMPI_*` and the Fortran symbols
//! calling the next definition, for every row the MPI's headers declare; the whole translation
//! unit.

use std::fmt::Write as _;

use super::args::Lang;
use super::record::body;
use super::table::{Func, Kind, Param};

fn fortran_decl(p: &Param) -> Option<String> {
    let n = &p.name;
    Some(match p.kind {
        Kind::Buf => format!("void *{n}"),
        Kind::Int | Kind::IntPtr | Kind::Handle(_) | Kind::HandlePtr(_) | Kind::Status => {
            format!("MPI_Fint *{n}")
        }
        Kind::Aint | Kind::AintPtr => format!("MPI_Aint *{n}"),
        Kind::Offset => format!("MPI_Offset *{n}"),
        Kind::Count | Kind::CountPtr => format!("MPI_Count *{n}"),
        Kind::Str | Kind::StrArray => format!("char *{n}"),
        Kind::Argc | Kind::Argv | Kind::VarArgs => return None,
    })
}

fn fortran_params(f: &Func) -> (Vec<String>, Vec<String>) {
    let mut decls: Vec<String> = f.params.iter().filter_map(fortran_decl).collect();
    let mut args: Vec<String> = f
        .params
        .iter()
        .filter(|p| !matches!(p.kind, Kind::Argc | Kind::Argv | Kind::VarArgs))
        .map(|p| p.name.clone())
        .collect();
    if f.role("fortran") != Some("noierr") {
        decls.push("MPI_Fint *ierr".into());
        args.push("ierr".into());
    }
    for p in f
        .params
        .iter()
        .filter(|p| matches!(p.kind, Kind::Str | Kind::StrArray))
    {
        decls.push(format!("size_t {}_len", p.name));
        args.push(format!("{}_len", p.name));
    }
    (decls, args)
}

/// The argument list for the real call, with status parameters replaced by their aliases when the
/// wrapper substitutes a buffer.
fn call_args(f: &Func, names: &[String]) -> String {
    let substituted: Vec<&str> = ["recvstatus", "status", "statuses"]
        .iter()
        .filter(|k| f.role("complete").is_some() || **k == "recvstatus")
        .filter_map(|k| f.role(k))
        .collect();
    names
        .iter()
        .map(|n| {
            if substituted.contains(&n.as_str()) {
                format!("evf_use_{n}")
            } else {
                n.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// When a wrapper only forwards: inside the recorder (depth), or while not recording. Init calls
/// are recorded before the recorder is active; a session's start may also be the recorder's, and
/// then a later `MPI_Init` joins its recording.
fn guard(f: &Func) -> &'static str {
    match f.category.as_str() {
        "init" => "evf_depth != 0 || (evf_initialized && !evf_session_mode)",
        "session-init" => "evf_depth != 0",
        _ => "evf_depth != 0 || !evf_active",
    }
}

fn c_wrapper(f: &Func, out: &mut String) {
    let decls: Vec<&str> = f.params.iter().map(|p| p.decl.as_str()).collect();
    let names: Vec<String> = f
        .params
        .iter()
        .filter(|p| p.kind != Kind::VarArgs)
        .map(|p| p.name.clone())
        .collect();
    let plain = names.join(", ");
    let decl = if decls.is_empty() {
        "void".to_string()
    } else {
        decls.join(", ")
    };
    let _ = writeln!(out, "int {}({decl})\n{{", f.name);
    let guard = guard(f);
    let _ = writeln!(
        out,
        "    if (EVF_UNLIKELY({guard})) return P{}({plain});",
        f.name
    );
    out.push_str("    evf_depth++;\n");
    let call = format!("int evf_rc = P{}({});", f.name, call_args(f, &names));
    body(f, Lang::C, &call, out);
    out.push_str("    evf_depth--;\n    return evf_rc;\n}\n\n");
}

fn fortran_wrapper(f: &Func, symbol: &str, out: &mut String) {
    let (decls, args) = fortran_params(f);
    let plain = args.join(", ");
    let types: Vec<String> = decls
        .iter()
        .map(|d| {
            let cut = d
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap();
            d[..=cut].trim().to_string()
        })
        .collect();
    let _ = writeln!(out, "void {symbol}({})\n{{", decls.join(", "));
    let _ = writeln!(out, "    typedef void (*evf_real_t)({});", types.join(", "));
    let _ = writeln!(out, "    static evf_real_t evf_real;");
    let _ = writeln!(
        out,
        "    if (EVF_UNLIKELY(evf_real == NULL)) evf_real = (evf_real_t)evf_next_symbol(\"{symbol}\");"
    );
    let guard = guard(f);
    let _ = writeln!(
        out,
        "    if (EVF_UNLIKELY({guard})) {{ evf_real({plain}); return; }}"
    );
    out.push_str("    evf_depth++;\n");
    let call = if f.role("fortran") == Some("noierr") {
        format!(
            "evf_real({}); int evf_rc = MPI_SUCCESS; (void)evf_rc;",
            call_args(f, &args)
        )
    } else {
        out.push_str(
            "    MPI_Fint evf_ierr_local = 0;\n    if (ierr == NULL) ierr = &evf_ierr_local;\n",
        );
        format!(
            "evf_real({}); int evf_rc = (int)*ierr; (void)evf_rc;",
            call_args(f, &args)
        )
    };
    body(f, Lang::Fortran, &call, out);
    out.push_str("    evf_depth--;\n}\n\n");
}

/// Whether a large-count variant (`MPI_Send_c`): the name of its `int`-count row plus `_c`.
pub fn is_large_count(f: &Func) -> bool {
    f.name.ends_with("_c")
        && f.params
            .iter()
            .any(|p| matches!(p.kind, Kind::Count | Kind::CountPtr | Kind::Aint))
}

/// The Fortran symbols wrapped for a row: `mpi_xxx_` (mpif.h / `use mpi`), `mpi_xxx_f08_` and
/// `mpi_xxx_f08ts_` (`use mpi_f08`). Large-count variants exist only in `use mpi_f08`, under the
/// name of the `int` version with `_large` (MPICH: `mpi_send_f08ts_large_`).
pub fn fortran_symbols(f: &Func) -> Vec<String> {
    let lower = f.lower();
    match lower.strip_suffix("_c").filter(|_| is_large_count(f)) {
        Some(base) => vec![format!("{base}_f08_large_"), format!("{base}_f08ts_large_")],
        None => ["_", "_f08_", "_f08ts_"]
            .iter()
            .map(|suffix| format!("{lower}{suffix}"))
            .collect(),
    }
}

/// Whether preprocessed `mpi.h` text declares the profiling entry point of `f`: rows the MPI
/// lacks (MPI-4 functions in Open MPI 4.1, Open MPI's `MPIX_` ones in MPICH) are not generated.
pub fn declared_in(preprocessed: &str, f: &Func) -> bool {
    let needle = format!("P{}", f.name);
    preprocessed.match_indices(&needle).any(|(i, _)| {
        let before = preprocessed[..i].chars().next_back();
        let after = preprocessed[i + needle.len()..].trim_start().chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') && after == Some('(')
    })
}

/// The whole generated C translation unit (includes the hand-written runtime header), for the
/// rows `available` accepts.
pub fn c_layer(funcs: &[Func], available: &dyn Fn(&Func) -> bool) -> String {
    let mut out = String::new();
    out.push_str(
        "/* Generated by recorder/codegen/gen.rs from mpi_functions.tsv. Do not edit. */\n",
    );
    out.push_str("#include \"evf_runtime.h\"\n\n");
    let funcs: Vec<&Func> = funcs.iter().filter(|f| available(f)).collect();
    for f in &funcs {
        c_wrapper(f, &mut out);
    }
    for f in &funcs {
        for symbol in fortran_symbols(f) {
            fortran_wrapper(f, &symbol, &mut out);
        }
    }
    out
}
