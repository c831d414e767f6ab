//! `evenflush dump`: every event of a trace as text, one per line, for reading a trace by eye
//! (the counterpart of `otf2-print`).

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use format::Event;
use trace::Trace;
use trace::open::for_each_event;

pub fn dump(dir: &Path, only_rank: Option<u32>) -> Result<()> {
    let trace = Trace::open(dir)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for files in trace
        .ranks
        .iter()
        .filter(|f| only_rank.is_none_or(|r| r == f.rank))
    {
        let mut names = std::collections::HashMap::new();
        let mut failed = None;
        let (_, skipped) = for_each_event(
            files,
            |_| {},
            |stream, event| {
                if let Event::FunctionDef { id, name } = event {
                    names.insert(*id, name.clone());
                }
                let line = match event {
                    Event::Call(c) => format!(
                        "{} {:<22} start={} end={} comm={} peer={} tag={} bytes={} root={} req={} cost={}",
                        files.rank,
                        names.get(&c.func).map_or("?", String::as_str),
                        c.start,
                        c.end,
                        c.comm,
                        c.peer,
                        c.tag,
                        c.bytes,
                        c.root,
                        c.request,
                        c.cost
                    ),
                    Event::User(u) => format!(
                        "{} user name={} time={} payload={} bytes",
                        files.rank,
                        u.name,
                        u.time,
                        u.payload.len()
                    ),
                    other => format!("{} {other:?}", files.rank),
                };
                if failed.is_none()
                    && let Err(e) = writeln!(out, "[{stream}] {line}")
                {
                    failed = Some(e);
                }
            },
        )?;
        if let Some(e) = failed {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(e.into());
        }
        for s in skipped {
            eprintln!("evenflush: warning: {s}");
        }
    }
    Ok(())
}
