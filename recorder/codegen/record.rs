//! The recording body every wrapper shares, C or Fortran: from the real call to the call record,
//! its request bookkeeping and completions, derived from the row's roles.

use super::args::{Lang, count_of, handle_of, int_of, recv_bytes_expr};
use super::table::{Func, Kind, Param};

/// The shared body between "call the real function" and "return": record the call.
/// `call` is the statement performing the real call and leaving its result in `evf_rc`.
pub(super) fn body(f: &Func, lang: Lang, call: &str, out: &mut String) {
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
            // A program whose session started the recorder may finalize the world model first:
            // the recording then goes on until its last session ends.
            w(out, "int evf_last = evf_finalize_begin();");
            w(out, &format!("evf_call_t evf_r = evf_call_blank({fid});"));
            w(out, "evf_r.start = evf_now();");
            w(out, call);
            w(out, "evf_r.end = evf_now();");
            w(out, "evf_record_call(&evf_r);");
            w(out, "if (evf_last) evf_finalize_end();");
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

    if f.role("cancel").is_some() {
        // Before the call: a completion of the cancelled request may come on another thread.
        w(out, "evf_note_cancel();");
    }
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
    let origin = comm_origin(lang, f);
    if let Some(nc) = f.role("newcomm") {
        let h = handle_of(lang, f.param(nc), "Comm");
        w(
            out,
            &match &origin {
                None => format!(
                    "if (evf_rc == MPI_SUCCESS) {{ MPI_Comm evf_nc = {h}; if (evf_nc != MPI_COMM_NULL) (void)evf_comm_id(evf_nc); }}"
                ),
                Some(o) => format!(
                    "if (evf_rc == MPI_SUCCESS) {{ MPI_Comm evf_nc = {h}; uint32_t evf_nid = evf_nc != MPI_COMM_NULL ? evf_comm_id(evf_nc) : EVF_NO_COMM; {o} }}"
                ),
            },
        );
    }
    if let Some(nc) = f.role("dupcomm") {
        let h = handle_of(lang, f.param(nc), "Comm");
        let old = handle_of(lang, f.param(f.role("comm").unwrap()), "Comm");
        w(
            out,
            &match &origin {
                None => format!(
                    "if (evf_rc == MPI_SUCCESS) {{ MPI_Comm evf_nc = {h}; if (evf_nc != MPI_COMM_NULL) (void)evf_comm_define_like(evf_nc, {old}); }}"
                ),
                Some(o) => format!(
                    "if (evf_rc == MPI_SUCCESS) {{ MPI_Comm evf_nc = {h}; uint32_t evf_nid = evf_nc != MPI_COMM_NULL ? evf_comm_define_like(evf_nc, {old}) : EVF_NO_COMM; {o} }}"
                ),
            },
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
    if let Some(r) = f.role("ureq") {
        // Looked up whatever the call returned: a failed Pready still names the request it was
        // given, which ties it to its Psend_init in the trace.
        let h = handle_of(lang, f.param(r), "Request");
        w(
            out,
            &format!("evf_r.req_handle = EVF_REQ_H({h}); evf_r.req_op = EVF_REQ_USE;"),
        );
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

/// The call recording a new communicator's `CommOrigin` (`origin` role), with `evf_nid` its id
/// (`EVF_NO_COMM` when this rank got `MPI_COMM_NULL`, which still counts on the parent).
fn comm_origin(lang: Lang, f: &Func) -> Option<String> {
    let form = f.role("origin")?;
    Some(match form {
        "parent" => "evf_rec_comm_origin(evf_nid, 0, evf_r.comm, 0, NULL, 0);".to_string(),
        "group" => {
            assert!(
                f.role("tag").is_some(),
                "{}: origin=group needs tag",
                f.name
            );
            "evf_rec_comm_origin(evf_nid, 1, evf_r.comm, evf_r.tag, NULL, 0);".to_string()
        }
        "tagged" => {
            let p = f
                .role("stringtag")
                .unwrap_or_else(|| panic!("{}: origin=tagged needs stringtag", f.name));
            let len = match lang {
                Lang::C => format!("{p} != NULL ? strlen({p}) : 0"),
                Lang::Fortran => format!("{p}_len"),
            };
            format!("evf_rec_comm_origin(evf_nid, 2, EVF_NO_COMM, 0, {p}, {len});")
        }
        other => panic!("{}: unknown origin {other}", f.name),
    })
}
