//! Generator for the recorder's C layer, shared by the build scripts of `recorder` (function name
//! table) and of the preload packages (C and Fortran wrappers). It reads `mpi_functions.tsv`, the one
//! table of wrapped functions; every wrapper body is derived from a row, none is written by hand.
//!
//! Roles (last column of the table) name the parameters the recorder reads:
//! - `comm`, `peer`, `tag`, `root`: copied into the call record (peer/tag wildcards and the
//!   `MPI_ROOT`/`MPI_PROC_NULL` roots mapped to the trace's values).
//! - `count`+`type`: bytes = count x `PMPI_Type_size(type)`; `vcounts`+`type`: the sum over the
//!   communicator's (remote) size; `inplace`: that buffer being `MPI_IN_PLACE` means bytes = 0
//!   (the count/type arguments are then not significant and may be garbage).
//! - `req`/`preq` (+`reqkind`): the call creates a request (persistent for `preq`); `start`,
//!   `startall`+`n`: the call starts persistent requests; `freereq`: the request is freed.
//! - `complete`: a Wait/Test family call; with `wreq` or `wreqs`+`n`, `status`/`statuses`, `flag`,
//!   `index`, `outcount`+`indices`. Each completed request becomes a `Completion` record.
//! - `recvstatus`: a blocking receive; its status becomes a `Completion` without request.
//! - `newcomm`: the call creates a communicator (defined right away); `freecomm`: frees one;
//!   `dupcomm`: the call returns a communicator with the group of `comm` that may not be used
//!   before a request completes (`MPI_Comm_idup`): it is defined from `comm`'s group at once.
//! - `win`: the call works on a window; the window's id goes into the record's `comm` field.
//!   `newwin` (with `comm`): the call creates a window over `comm`; `freewin`: frees one.
//!   `group` (with `win`): the group of a PSCW epoch (`Win_post`, `Win_start`), recorded as world
//!   ranks in an `EpochGroup` just before the call's record, so the reader can pair the epochs.
//! - `newmsg` (+ `comm`, optionally `flag`): a matched probe returns a message handle, remembered
//!   with its communicator; `msg`: `Mrecv`/`Imrecv` take it, and the record gets that communicator.
//! - receive bytes of collectives (the record's `recv_bytes`): `rcount`+`rtype` (type defaults
//!   to `type`), bytes of one piece; `rper=rank`: one piece from every rank of the (remote) group;
//!   `rvcounts`: the sum of a count array over the (remote) group; `rmine`: this rank's entry of a
//!   count array (`Reduce_scatter`). `rwhere=root`: only the root receives; `others`: every rank
//!   but the root (and, on an intercommunicator, only the root's remote group); `receivers`: all,
//!   except the root's group of an intercommunicator, whose receive arguments are not significant.
//!   `rinplace`: that buffer being `MPI_IN_PLACE` means nothing arrives.
//! - `partitions`: bytes are multiplied by the number of partitions (partitioned communication).
//! - `level`: `MPI_Pcontrol`'s level, stored in the record's `tag` field.
//! - `fortran=noierr`: the Fortran binding has no IERROR argument (`MPI_PCONTROL`).
//!
//! A row whose C function the MPI's headers do not declare is left out of that MPI's build (see
//! `declared_in`), so one table serves MPIs of different standard levels.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A choice buffer or other opaque pointer, forwarded untouched.
    Buf,
    Int,
    /// `int *`, `int[]`, `int[][3]`.
    IntPtr,
    /// An MPI handle by value; the string is the handle type without `MPI_`.
    Handle(String),
    /// Pointer to (or array of) MPI handles.
    HandlePtr(String),
    Aint,
    AintPtr,
    Offset,
    Status,
    /// `MPI_Count` by value, and pointer to (or array of) `MPI_Count`.
    Count,
    CountPtr,
    Str,
    /// `char *x[]`, `char **x[]`: arrays of strings (spawn commands and their arguments).
    StrArray,
    Argc,
    Argv,
    /// The `...` of `MPI_Pcontrol`: declared, never forwarded.
    VarArgs,
}

#[derive(Clone, Debug)]
pub struct Param {
    pub decl: String,
    pub name: String,
    pub kind: Kind,
}

#[derive(Clone, Debug)]
pub struct Func {
    pub id: u16,
    pub name: String,
    pub category: String,
    pub params: Vec<Param>,
    pub roles: BTreeMap<String, String>,
}

impl Func {
    pub fn role(&self, key: &str) -> Option<&str> {
        self.roles.get(key).map(String::as_str)
    }
    fn param(&self, name: &str) -> &Param {
        self.params
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("{}: role names unknown parameter {name}", self.name))
    }
    pub fn lower(&self) -> String {
        self.name.to_lowercase()
    }
}

pub const CATEGORIES: &[&str] = &[
    "init",
    "finalize",
    "abort",
    "p2p-blocking",
    "probe",
    "p2p-nonblocking",
    "persistent",
    "start",
    "completion",
    "request",
    "collective-blocking",
    "collective-nonblocking",
    "neighbor-blocking",
    "neighbor-nonblocking",
    "comm-query",
    "comm",
    "group",
    "io",
    "io-nonblocking",
    "rma-window",
    "rma-comm",
    "rma-sync",
    "persistent-collective",
    "partitioned",
    "session-init",
    "session-finalize",
    "session",
    "io-split",
    "dynamic",
    "fault-tolerance",
    "profiling",
];

const ROLE_KEYS: &[&str] = &[
    "comm",
    "peer",
    "tag",
    "root",
    "count",
    "type",
    "inplace",
    "vcounts",
    "req",
    "preq",
    "reqkind",
    "start",
    "startall",
    "n",
    "freereq",
    "complete",
    "wreq",
    "wreqs",
    "status",
    "statuses",
    "flag",
    "index",
    "outcount",
    "indices",
    "recvstatus",
    "newcomm",
    "freecomm",
    "dupcomm",
    "win",
    "newwin",
    "freewin",
    "group",
    "newmsg",
    "msg",
    "partitions",
    "level",
    "fortran",
    "rcount",
    "rtype",
    "rvcounts",
    "rmine",
    "rper",
    "rwhere",
    "rinplace",
];

fn classify(decl: &str) -> Result<Param, String> {
    let decl = decl.trim().to_string();
    if decl == "..." {
        return Ok(Param {
            decl,
            name: String::new(),
            kind: Kind::VarArgs,
        });
    }
    let (base, array) = match decl.find('[') {
        Some(i) => (decl[..i].trim(), true),
        None => (decl.as_str(), false),
    };
    let name_start = base
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    let name = base[name_start..].to_string();
    let ty = base[..name_start].replace("const", "").replace(' ', "");
    let ty = if array { format!("{ty}*") } else { ty };
    let kind = match ty.as_str() {
        "void*" => Kind::Buf,
        "int" => Kind::Int,
        "int*" => Kind::IntPtr,
        "MPI_Aint" => Kind::Aint,
        "MPI_Aint*" => Kind::AintPtr,
        "MPI_Offset" => Kind::Offset,
        "MPI_Count" => Kind::Count,
        "MPI_Count*" => Kind::CountPtr,
        "char**" => Kind::StrArray,
        "char***" if name != "argv" => Kind::StrArray,
        "MPI_Status*" => Kind::Status,
        "char*" => Kind::Str,
        "char***" => Kind::Argv,
        t if t.starts_with("MPI_") && t.ends_with('*') => {
            Kind::HandlePtr(t[4..t.len() - 1].to_string())
        }
        t if t.starts_with("MPI_") => Kind::Handle(t[4..].to_string()),
        _ => return Err(format!("unsupported parameter type in `{decl}`")),
    };
    let kind = if kind == Kind::IntPtr && name == "argc" {
        Kind::Argc
    } else {
        kind
    };
    Ok(Param { decl, name, kind })
}

pub fn parse(tsv: &str) -> Result<Vec<Func>, String> {
    let mut funcs = Vec::new();
    for (lineno, line) in tsv.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() < 3 {
            return Err(format!(
                "line {}: expected 4 tab-separated columns",
                lineno + 1
            ));
        }
        let name = cols[0].trim().to_string();
        let category = cols[1].trim().to_string();
        if !CATEGORIES.contains(&category.as_str()) {
            return Err(format!("line {}: unknown category {category}", lineno + 1));
        }
        let params = if cols[2].trim().is_empty() {
            Vec::new()
        } else {
            cols[2]
                .split(',')
                .map(classify)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("line {}: {e}", lineno + 1))?
        };
        let mut roles = BTreeMap::new();
        for item in cols.get(3).copied().unwrap_or("").split_whitespace() {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("line {}: role `{item}` lacks `=`", lineno + 1))?;
            if !ROLE_KEYS.contains(&k) {
                return Err(format!("line {}: unknown role {k}", lineno + 1));
            }
            roles.insert(k.to_string(), v.to_string());
        }
        let id = u16::try_from(funcs.len()).map_err(|_| "too many functions".to_string())?;
        let f = Func {
            id,
            name,
            category,
            params,
            roles,
        };
        for (k, v) in &f.roles {
            if !matches!(
                k.as_str(),
                "complete" | "reqkind" | "fortran" | "rper" | "rwhere"
            ) && !f.params.iter().any(|p| &p.name == v)
            {
                return Err(format!("{}: role {k} names unknown parameter {v}", f.name));
            }
        }
        funcs.push(f);
    }
    Ok(funcs)
}

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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Lang {
    C,
    Fortran,
}

/// Expression giving the C value of an integer parameter.
/// The C expression of the bytes a collective delivers to this rank (the `r*` roles), if the
/// row names them. Where and in-place tests come first, so arguments that are not significant on
/// this rank (and may be garbage) are never read.
fn recv_bytes_expr(lang: Lang, f: &Func) -> Option<String> {
    let comm = || handle_of(lang, f.param(f.role("comm").unwrap()), "Comm");
    let ty = || {
        let t = f.role("rtype").or(f.role("type")).unwrap();
        handle_of(lang, f.param(t), "Datatype")
    };
    // A function of a count array, the type and the communicator: `evf_vbytes` (the sum over
    // the group) or `evf_mine_bytes` (this rank's entry), `_c` for MPI_Count arrays (Fortran
    // passes those as such too, INTEGER(KIND=MPI_COUNT_KIND)).
    let of_counts = |p: &Param, fun: &str| {
        let (suffix, cast) = if p.kind == Kind::CountPtr {
            ("_c", "const MPI_Count *")
        } else {
            ("", "const int *")
        };
        format!("{fun}{suffix}(({cast}){}, {}, {})", p.name, ty(), comm())
    };
    let amount = if let Some(c) = f.role("rcount") {
        let per_rank = match f.role("rper") {
            Some("rank") => 1,
            None => 0,
            Some(other) => panic!("{}: rper={other} (only rank)", f.name),
        };
        format!(
            "evf_recv_bytes({}, {}, {}, {per_rank})",
            count_of(lang, f.param(c)),
            ty(),
            comm()
        )
    } else if let Some(v) = f.role("rvcounts") {
        of_counts(f.param(v), "evf_vbytes")
    } else if let Some(v) = f.role("rmine") {
        of_counts(f.param(v), "evf_mine_bytes")
    } else {
        return None;
    };
    let amount = match f.role("rinplace") {
        Some(ip) => match lang {
            Lang::C => format!("({ip} == MPI_IN_PLACE ? 0 : {amount})"),
            Lang::Fortran => format!("(evf_f_in_place({ip}) ? 0 : {amount})"),
        },
        None => amount,
    };
    Some(match f.role("rwhere") {
        None => amount,
        Some(w) => {
            let mode = match w {
                "root" => "EVF_RECV_AT_ROOT",
                "others" => "EVF_RECV_BESIDE_ROOT",
                "receivers" => "EVF_RECV_UNLESS_ROOT_GROUP",
                other => panic!("{}: rwhere={other}", f.name),
            };
            let root = int_of(lang, f.param(f.role("root").unwrap()));
            format!("(evf_receives({mode}, {root}, {}) ? {amount} : 0)", comm())
        }
    })
}

fn int_of(lang: Lang, p: &Param) -> String {
    match (lang, &p.kind) {
        (Lang::C, Kind::Int) => p.name.clone(),
        (Lang::C, Kind::IntPtr) => format!("(*{})", p.name),
        (Lang::Fortran, Kind::Int | Kind::IntPtr) => format!("((int)*{})", p.name),
        _ => panic!("{} is not an int", p.name),
    }
}

/// Expression giving a count as `int64_t` (an `int` or, in the large-count `_c` variants, an
/// `MPI_Count`).
fn count_of(lang: Lang, p: &Param) -> String {
    match (lang, &p.kind) {
        (Lang::C, Kind::Count) => format!("((int64_t){})", p.name),
        (Lang::Fortran, Kind::Count) => format!("((int64_t)*{})", p.name),
        _ => format!("((int64_t){})", int_of(lang, p)),
    }
}

/// Expression giving the C handle of a handle parameter (by value or through a pointer).
fn handle_of(lang: Lang, p: &Param, expected: &str) -> String {
    let (ty, ptr) = match &p.kind {
        Kind::Handle(t) => (t.as_str(), false),
        Kind::HandlePtr(t) => (t.as_str(), true),
        _ => panic!("{} is not a handle", p.name),
    };
    assert_eq!(ty, expected, "{}: expected MPI_{expected}", p.name);
    match lang {
        Lang::C if ptr => format!("(*{})", p.name),
        Lang::C => p.name.clone(),
        Lang::Fortran => {
            let f2c = match ty {
                "Comm" => "PMPI_Comm_f2c",
                "Datatype" => "PMPI_Type_f2c",
                "Request" => "PMPI_Request_f2c",
                "Win" => "PMPI_Win_f2c",
                "Message" => "PMPI_Message_f2c",
                "Group" => "PMPI_Group_f2c",
                other => panic!("no f2c for {other}"),
            };
            format!("{f2c}(*{})", p.name)
        }
    }
}

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

/// The shared body between "call the real function" and "return": record the call.
/// `call` is the statement performing the real call and leaving its result in `evf_rc`.
fn body(f: &Func, lang: Lang, call: &str, out: &mut String) {
    let fid = f.id;
    let cat = f.category.as_str();
    let w = |out: &mut String, s: &str| {
        out.push_str("    ");
        out.push_str(s);
        out.push('\n');
    };
    let status_ignore = |p: &Param| match lang {
        Lang::C => format!("{} == MPI_STATUS_IGNORE", p.name),
        Lang::Fortran => format!("evf_f_status_ignored({})", p.name),
    };

    match cat {
        "init" => {
            w(out, "evf_init_begin();");
            w(out, "uint64_t evf_t0 = evf_now();");
            w(out, call);
            w(out, "uint64_t evf_t1 = evf_now();");
            let provided = f
                .params
                .iter()
                .find(|p| p.name == "provided")
                .map(|p| format!("(evf_rc == MPI_SUCCESS ? {} : -1)", int_of(lang, p)))
                .unwrap_or_else(|| "-1".into());
            w(
                out,
                &format!("evf_init_end({fid}, evf_t0, evf_t1, evf_rc, {provided});"),
            );
            return;
        }
        "finalize" => {
            w(out, "evf_finalize_begin();");
            w(out, &format!("evf_call_t evf_r = evf_call_blank({fid});"));
            w(out, "evf_r.start = evf_now();");
            w(out, call);
            w(out, "evf_r.end = evf_now();");
            w(out, "evf_record_call(&evf_r);");
            w(out, "evf_finalize_end();");
            return;
        }
        "session-init" => {
            // The first session of a program that never calls MPI_Init starts the recorder.
            w(out, "int evf_first = evf_session_init_begin();");
            w(out, "uint64_t evf_t0 = evf_now();");
            w(out, call);
            w(out, "uint64_t evf_t1 = evf_now();");
            w(
                out,
                &format!("evf_session_init_end({fid}, evf_first, evf_t0, evf_t1, evf_rc);"),
            );
            return;
        }
        "session-finalize" => {
            // Finalising the program's last session ends a recorder that a session started; the
            // flush runs before, while the recorder's own session still works.
            w(out, "int evf_last = evf_session_finalize_begin();");
            w(out, &format!("evf_call_t evf_r = evf_call_blank({fid});"));
            w(out, "evf_r.start = evf_now();");
            w(out, call);
            w(out, "evf_r.end = evf_now();");
            w(out, "evf_record_call(&evf_r);");
            w(out, "if (evf_last) evf_session_finalize_end();");
            return;
        }
        "abort" => {
            w(out, &format!("evf_call_t evf_r = evf_call_blank({fid});"));
            let c = f.param(f.role("comm").unwrap());
            w(
                out,
                &format!("evf_r.comm = evf_comm_id({});", handle_of(lang, c, "Comm")),
            );
            w(out, "evf_r.start = evf_now(); evf_r.end = evf_r.start;");
            w(out, "evf_record_call(&evf_r);");
            w(out, "evf_abnormal_end(-1);");
            w(out, call);
            return;
        }
        _ => {}
    }

    w(out, &format!("evf_call_t evf_r = evf_call_blank({fid});"));

    // Values that the call overwrites are captured first.
    if let Some(c) = f.role("freecomm") {
        let h = handle_of(lang, f.param(c), "Comm");
        w(out, &format!("MPI_Comm evf_freed = {h};"));
        w(out, "evf_r.comm = evf_comm_id(evf_freed);");
    }
    if let Some(r) = f.role("freereq") {
        let h = handle_of(lang, f.param(r), "Request");
        w(out, &format!("evf_r.req_handle = EVF_REQ_H({h});"));
        w(out, "evf_r.req_op = EVF_REQ_FREE;");
    }
    if let Some(wn) = f.role("freewin") {
        let h = handle_of(lang, f.param(wn), "Win");
        w(out, &format!("MPI_Win evf_freed_win = {h};"));
        w(out, "evf_r.comm = evf_win_id(evf_freed_win);");
    }
    if let Some(m) = f.role("msg") {
        // MPI resets the handle to MPI_MESSAGE_NULL, so the probe's communicator is looked up now.
        let h = handle_of(lang, f.param(m), "Message");
        w(
            out,
            &format!("evf_r.comm = evf_msg_take({h}, &evf_r.peer);"),
        );
    }
    let completion = f.role("complete");
    if completion.is_some() {
        // Requests are saved because MPI resets completed ones to MPI_REQUEST_NULL; a status array
        // is supplied when the application passed MPI_STATUS(ES)_IGNORE, so completions always
        // carry the actual source, tag and size.
        let n = match f.role("n") {
            Some(n) => int_of(lang, f.param(n)),
            None => "1".into(),
        };
        w(out, &format!("int evf_n = {n};"));
        w(
            out,
            "uint64_t evf_saved_small[EVF_SMALL]; uint64_t *evf_saved = evf_n <= EVF_SMALL ? evf_saved_small : (uint64_t *)malloc(sizeof(uint64_t) * (size_t)evf_n);",
        );
        if let Some(r) = f.role("wreq") {
            let h = handle_of(lang, f.param(r), "Request");
            w(
                out,
                &format!("if (evf_saved) evf_saved[0] = EVF_REQ_H({h});"),
            );
        } else {
            let p = f.param(f.role("wreqs").unwrap());
            let elem = match lang {
                Lang::C => format!("{}[evf_i]", p.name),
                Lang::Fortran => format!("PMPI_Request_f2c({}[evf_i])", p.name),
            };
            w(
                out,
                &format!(
                    "if (evf_saved) for (int evf_i = 0; evf_i < evf_n; evf_i++) evf_saved[evf_i] = EVF_REQ_H({elem});"
                ),
            );
        }
        let (sp, multi) = match (f.role("status"), f.role("statuses")) {
            (Some(s), _) => (f.param(s), false),
            (None, Some(s)) => (f.param(s), true),
            _ => panic!("{}: completion without status", f.name),
        };
        let count = if multi { "evf_n" } else { "1" };
        w(out, &format!("int evf_nst_cap = {count};"));
        w(out, "int evf_saved_ok_st = 1;");
        match lang {
            Lang::C => {
                let ignored = if multi {
                    format!("{} == MPI_STATUSES_IGNORE", sp.name)
                } else {
                    status_ignore(sp)
                };
                w(out, "MPI_Status evf_st_small[EVF_SMALL];");
                w(out, &format!("MPI_Status *evf_st = {};", sp.name));
                w(
                    out,
                    &format!(
                        "if ({ignored}) evf_st = evf_nst_cap <= EVF_SMALL ? evf_st_small : (MPI_Status *)malloc(sizeof(MPI_Status) * (size_t)evf_nst_cap);"
                    ),
                );
                // Out of memory for the substitute: pass the application's argument through; the
                // completions of this call are then counted as lost.
                w(
                    out,
                    &format!(
                        "if (evf_st == NULL) {{ evf_st = {}; evf_saved_ok_st = 0; }}",
                        sp.name
                    ),
                );
                w(out, &format!("MPI_Status *{} = evf_st;", evf_alias(sp)));
            }
            Lang::Fortran => {
                w(out, "MPI_Fint evf_fst_small[EVF_SMALL * EVF_FSTAT_INTS];");
                w(out, &format!("MPI_Fint *evf_fst = {};", sp.name));
                w(
                    out,
                    &format!(
                        "if ({}) evf_fst = evf_nst_cap <= EVF_SMALL ? evf_fst_small : (MPI_Fint *)malloc(sizeof(MPI_Fint) * EVF_FSTAT_INTS * (size_t)evf_nst_cap);",
                        status_ignore(sp)
                    ),
                );
                w(
                    out,
                    &format!(
                        "if (evf_fst == NULL) {{ evf_fst = {}; evf_saved_ok_st = 0; }}",
                        sp.name
                    ),
                );
                w(out, &format!("MPI_Fint *{} = evf_fst;", evf_alias(sp)));
            }
        }
    }
    if let Some(s) = f.role("recvstatus") {
        let sp = f.param(s);
        match lang {
            Lang::C => {
                w(out, "MPI_Status evf_st_one;");
                w(
                    out,
                    &format!(
                        "MPI_Status *{} = {} ? &evf_st_one : {};",
                        evf_alias(sp),
                        status_ignore(sp),
                        sp.name
                    ),
                );
            }
            Lang::Fortran => {
                w(out, "MPI_Fint evf_fst_one[EVF_FSTAT_INTS];");
                w(
                    out,
                    &format!(
                        "MPI_Fint *{} = {} ? evf_fst_one : {};",
                        evf_alias(sp),
                        status_ignore(sp),
                        sp.name
                    ),
                );
            }
        }
    }

    w(out, "evf_r.start = evf_now();");
    // The watchdog (off unless --watchdog is set) is told what the call waits for before it
    // blocks; the arguments are read only when it is on.
    let arg = |role: &str, conv: &dyn Fn(&Param) -> String, none: &str| {
        f.role(role)
            .map(|r| conv(f.param(r)))
            .unwrap_or_else(|| none.to_string())
    };
    let watch_comm = arg(
        "comm",
        &|p| format!("evf_comm_id({})", handle_of(lang, p, "Comm")),
        "0xFFFFFFFFu",
    );
    let watch_peer = arg("peer", &|p| format!("evf_peer({})", int_of(lang, p)), "-1");
    let watch_tag = arg("tag", &|p| format!("evf_tag({})", int_of(lang, p)), "-1");
    w(
        out,
        &format!(
            "if (EVF_UNLIKELY(evf_watching)) evf_rust_watch_begin({fid}, evf_r.start, {watch_comm}, {watch_peer}, {watch_tag});"
        ),
    );
    w(out, call);
    w(out, "evf_r.end = evf_now();");
    w(out, "if (EVF_UNLIKELY(evf_watching)) evf_rust_watch_end();");
    // This wrapper is the function the program called, so its return address is the call site
    // (for the Fortran bindings: the caller of `mpi_x_`, the program or its MPI module).
    w(
        out,
        "if (EVF_UNLIKELY(evf_callsites)) evf_r.site = (uint64_t)(uintptr_t)__builtin_return_address(0);",
    );

    if let Some(c) = f.role("comm") {
        let h = handle_of(lang, f.param(c), "Comm");
        w(out, &format!("evf_r.comm = evf_comm_id({h});"));
    }
    if let Some(wn) = f.role("win") {
        let h = handle_of(lang, f.param(wn), "Win");
        w(out, &format!("evf_r.comm = evf_win_id({h});"));
    }
    if let Some(l) = f.role("level") {
        w(out, &format!("evf_r.tag = {};", int_of(lang, f.param(l))));
    }
    if let Some(p) = f.role("peer") {
        w(
            out,
            &format!("evf_r.peer = evf_peer({});", int_of(lang, f.param(p))),
        );
    }
    if let Some(t) = f.role("tag") {
        w(
            out,
            &format!("evf_r.tag = evf_tag({});", int_of(lang, f.param(t))),
        );
    }
    if let Some(r) = f.role("root") {
        w(
            out,
            &format!("evf_r.root = evf_root({});", int_of(lang, f.param(r))),
        );
    }
    let bytes = if let Some(t) = f.role("type") {
        let ty = handle_of(lang, f.param(t), "Datatype");
        if let Some(c) = f.role("count") {
            let count = count_of(lang, f.param(c));
            let count = match f.role("partitions") {
                Some(n) => format!("{count} * {}", count_of(lang, f.param(n))),
                None => count,
            };
            Some(format!("evf_bytes({count}, {ty})"))
        } else if let Some(v) = f.role("vcounts") {
            let comm = handle_of(lang, f.param(f.role("comm").unwrap()), "Comm");
            let vp = f.param(v);
            // Fortran passes MPI_Count arrays as such too (INTEGER(KIND=MPI_COUNT_KIND)).
            let fun = if vp.kind == Kind::CountPtr {
                "evf_vbytes_c((const MPI_Count *)"
            } else {
                "evf_vbytes((const int *)"
            };
            Some(format!("{fun}{}, {ty}, {comm})", vp.name))
        } else {
            Some(format!("evf_bytes(1, {ty})"))
        }
    } else {
        None
    };
    if let Some(b) = bytes {
        match f.role("inplace") {
            Some(ip) => {
                let test = match lang {
                    Lang::C => format!("{} == MPI_IN_PLACE", ip),
                    Lang::Fortran => format!("evf_f_in_place({ip})"),
                };
                w(out, &format!("evf_r.bytes = ({test}) ? 0 : {b};"));
            }
            None => w(out, &format!("evf_r.bytes = {b};")),
        }
    }
    if let Some(recv) = recv_bytes_expr(lang, f) {
        w(out, &format!("evf_r.recv_bytes = {recv};"));
    }
    if let Some(nc) = f.role("newcomm") {
        let h = handle_of(lang, f.param(nc), "Comm");
        w(
            out,
            &format!(
                "if (evf_rc == MPI_SUCCESS) {{ MPI_Comm evf_nc = {h}; if (evf_nc != MPI_COMM_NULL) (void)evf_comm_id(evf_nc); }}"
            ),
        );
    }
    if let Some(nc) = f.role("dupcomm") {
        let h = handle_of(lang, f.param(nc), "Comm");
        let old = handle_of(lang, f.param(f.role("comm").unwrap()), "Comm");
        w(
            out,
            &format!(
                "if (evf_rc == MPI_SUCCESS) {{ MPI_Comm evf_nc = {h}; if (evf_nc != MPI_COMM_NULL) evf_comm_define_like(evf_nc, {old}); }}"
            ),
        );
    }
    if let Some(wn) = f.role("newwin") {
        let h = handle_of(lang, f.param(wn), "Win");
        w(
            out,
            &format!(
                "if (evf_rc == MPI_SUCCESS) {{ MPI_Win evf_nw = {h}; if (evf_nw != MPI_WIN_NULL) evf_win_define(evf_nw, evf_r.comm); }}"
            ),
        );
    }
    if let Some(g) = f.role("group") {
        let h = handle_of(lang, f.param(g), "Group");
        w(
            out,
            &format!("if (evf_rc == MPI_SUCCESS) evf_epoch_group({h}, evf_r.comm);"),
        );
    }
    if let Some(m) = f.role("newmsg") {
        let h = handle_of(lang, f.param(m), "Message");
        let matched = match f.role("flag") {
            Some(p) => format!(" && {} != 0", int_of(lang, f.param(p))),
            None => String::new(),
        };
        w(
            out,
            &format!("if (evf_rc == MPI_SUCCESS{matched}) evf_msg_put({h}, evf_r.comm);"),
        );
    }
    for (key, op) in [
        ("req", "EVF_REQ_NEW"),
        ("preq", "EVF_REQ_NEW_PERSISTENT"),
        ("start", "EVF_REQ_START"),
    ] {
        if let Some(r) = f.role(key) {
            let h = handle_of(lang, f.param(r), "Request");
            w(
                out,
                &format!(
                    "if (evf_rc == MPI_SUCCESS) {{ evf_r.req_handle = EVF_REQ_H({h}); evf_r.req_op = {op}; }}"
                ),
            );
        }
    }
    if let Some(k) = f.role("reqkind") {
        let kind = match k {
            "send" => "EVF_KIND_SEND",
            "recv" => "EVF_KIND_RECV",
            _ => "EVF_KIND_OTHER",
        };
        w(out, &format!("evf_r.req_kind = {kind};"));
    }

    // Polls that found nothing are folded by the recorder; a poll is a call with a `flag` (Test,
    // Testany, Testall, Iprobe, Improbe, ...) or an `outcount` (Testsome) and no completion.
    if cat != "collective-blocking" && cat != "collective-nonblocking" {
        if let Some(p) = f.role("flag") {
            let flag = int_of(lang, f.param(p));
            w(
                out,
                &format!("evf_r.idle = (evf_rc == MPI_SUCCESS && {flag} == 0);"),
            );
        } else if let (Some(p), Some("some")) = (f.role("outcount"), f.role("complete")) {
            let outcount = int_of(lang, f.param(p));
            w(
                out,
                &format!(
                    "evf_r.idle = (evf_rc == MPI_SUCCESS && ({outcount} == 0 || {outcount} == MPI_UNDEFINED));"
                ),
            );
        }
    }
    let single_completion =
        f.role("recvstatus").is_some() || matches!(completion, Some("single" | "any"));
    if let Some(sa) = f.role("startall") {
        let p = f.param(sa);
        let n = int_of(lang, f.param(f.role("n").unwrap()));
        let elem = match lang {
            Lang::C => format!("{}[evf_i]", p.name),
            Lang::Fortran => format!("PMPI_Request_f2c({}[evf_i])", p.name),
        };
        w(out, "evf_r.req_op = EVF_REQ_START;");
        w(
            out,
            &format!(
                "for (int evf_i = 0; evf_i < {n}; evf_i++) {{ evf_r.req_handle = EVF_REQ_H({elem}); evf_record_call(&evf_r); }}"
            ),
        );
        w(out, &format!("if ({n} <= 0) evf_record_call(&evf_r);"));
    } else if cat == "collective-blocking" || cat == "neighbor-blocking" || single_completion {
        // A sampled cost ends after the protocol hook below, or after the processing of the one
        // request a call completes (Wait, Test, Waitany, Testany, a blocking receive's status),
        // which it then covers too: that processing costs about the same every time, so it is
        // estimated with the call instead of being timed by two more clock reads at every call.
        w(out, "int evf_sample = evf_record_call_s(&evf_r);");
    } else {
        w(
            out,
            "if (EVF_UNLIKELY(evf_record_call_s(&evf_r))) evf_sample_end(&evf_r);",
        );
    }

    if f.role("freecomm").is_some() {
        w(
            out,
            "if (evf_rc == MPI_SUCCESS) evf_comm_forget(evf_freed);",
        );
    }
    if f.role("freewin").is_some() {
        w(
            out,
            "if (evf_rc == MPI_SUCCESS) evf_win_forget(evf_freed_win);",
        );
    }
    if let Some(s) = f.role("recvstatus") {
        let alias = evf_alias(f.param(s));
        match lang {
            Lang::C => w(
                out,
                &format!("if (evf_rc == MPI_SUCCESS) evf_complete_blocking({alias});"),
            ),
            Lang::Fortran => w(
                out,
                &format!(
                    "if (evf_rc == MPI_SUCCESS) {{ MPI_Status evf_cs; PMPI_Status_f2c({alias}, &evf_cs); evf_complete_blocking(&evf_cs); }}"
                ),
            ),
        }
    }
    if let Some(kind) = completion {
        let flag = match f.role("flag") {
            Some(p) => format!("({} != 0)", int_of(lang, f.param(p))),
            None => "1".into(),
        };
        let index = match f.role("index") {
            Some(p) => int_of(lang, f.param(p)),
            None => "0".into(),
        };
        let outcount = match f.role("outcount") {
            Some(p) => int_of(lang, f.param(p)),
            None => "0".into(),
        };
        let indices = match f.role("indices") {
            Some(p) => format!("(const int *){}", f.param(p).name),
            None => "NULL".into(),
        };
        let base = if lang == Lang::Fortran { 1 } else { 0 };
        let ck = match kind {
            "single" => "EVF_DONE_SINGLE",
            "all" => "EVF_DONE_ALL",
            "any" => "EVF_DONE_ANY",
            "some" => "EVF_DONE_SOME",
            other => panic!("{}: unknown completion kind {other}", f.name),
        };
        let sp = f.param(f.role("status").or(f.role("statuses")).unwrap());
        let alias = evf_alias(sp);
        let statuses = match lang {
            Lang::C => format!("{alias}, NULL"),
            Lang::Fortran => format!("NULL, {alias}"),
        };
        w(
            out,
            &format!(
                "if (evf_rc == MPI_SUCCESS) {{ if (evf_saved && evf_saved_ok_st) evf_complete_set({ck}, evf_n, evf_saved, {statuses}, {flag}, {index}, {outcount}, {indices}, {base}); else evf_completions_lost(evf_n); }}"
            ),
        );
        // MPI_ERR_IN_STATUS (the array completions only): the statuses say which requests
        // completed; without this their completions were lost and their table entries stale.
        let in_status = match kind {
            "all" => Some("EVF_DONE_ALL_IN_STATUS"),
            "some" => Some("EVF_DONE_SOME"),
            _ => None,
        };
        if let Some(ck) = in_status {
            w(
                out,
                &format!(
                    "else if (evf_rc == MPI_ERR_IN_STATUS) {{ if (evf_saved && evf_saved_ok_st) evf_complete_set({ck}, evf_n, evf_saved, {statuses}, 1, {index}, {outcount}, {indices}, {base}); else evf_completions_lost(evf_n); }}"
                ),
            );
        }
        w(out, "if (evf_saved != evf_saved_small) free(evf_saved);");
        match lang {
            Lang::C => w(
                out,
                &format!(
                    "if (evf_st != {} && evf_st != evf_st_small) free(evf_st);",
                    sp.name
                ),
            ),
            Lang::Fortran => w(
                out,
                &format!(
                    "if (evf_fst != {} && evf_fst != evf_fst_small) free(evf_fst);",
                    sp.name
                ),
            ),
        }
    }
    let collective = cat == "collective-blocking" || cat == "neighbor-blocking";
    if single_completion && f.role("startall").is_none() && !collective {
        w(out, "if (EVF_UNLIKELY(evf_sample)) evf_sample_end(&evf_r);");
    }
    if cat == "collective-blocking" || cat == "neighbor-blocking" {
        // A decision point is measured and charged on its own: not part of the sample.
        w(
            out,
            &format!(
                "if (EVF_UNLIKELY(evf_after_blocking_collective(evf_r.comm, {fid}))) evf_sample = 0;"
            ),
        );
        w(out, "if (EVF_UNLIKELY(evf_sample)) evf_sample_end(&evf_r);");
    }
}

/// Name of the local that replaces a status parameter in the real call.
fn evf_alias(p: &Param) -> String {
    format!("evf_use_{}", p.name)
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
/// are recorded before the recorder is active; a session's start may also be the recorder's.
fn guard(f: &Func) -> &'static str {
    match f.category.as_str() {
        "init" => "evf_depth != 0 || evf_initialized",
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
