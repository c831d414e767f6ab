//! C expressions for a row's arguments, in a C wrapper (arguments by value) or a Fortran one
//! (arguments by reference, handles converted with `*_f2c`).

use super::table::{Func, Kind, Param};

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Lang {
    C,
    Fortran,
}

/// The C expression of the bytes a collective delivers to this rank (the `r*` roles), if the
/// row names them. Where and in-place tests come first, so arguments that are not significant on
/// this rank (and may be garbage) are never read.
pub(super) fn recv_bytes_expr(lang: Lang, f: &Func) -> Option<String> {
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

/// Expression giving the C value of an integer parameter.
pub(super) fn int_of(lang: Lang, p: &Param) -> String {
    match (lang, &p.kind) {
        (Lang::C, Kind::Int) => p.name.clone(),
        (Lang::C, Kind::IntPtr) => format!("(*{})", p.name),
        (Lang::Fortran, Kind::Int | Kind::IntPtr) => format!("((int)*{})", p.name),
        _ => panic!("{} is not an int", p.name),
    }
}

/// Expression giving a count as `int64_t` (an `int` or, in the large-count `_c` variants, an
/// `MPI_Count`).
pub(super) fn count_of(lang: Lang, p: &Param) -> String {
    match (lang, &p.kind) {
        (Lang::C, Kind::Count) => format!("((int64_t){})", p.name),
        (Lang::Fortran, Kind::Count) => format!("((int64_t)*{})", p.name),
        _ => format!("((int64_t){})", int_of(lang, p)),
    }
}

/// Expression giving the C handle of a handle parameter (by value or through a pointer).
pub(super) fn handle_of(lang: Lang, p: &Param, expected: &str) -> String {
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
