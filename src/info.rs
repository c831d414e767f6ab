//! `evenflush info`.

use std::path::PathBuf;

use anyhow::Result;
use trace::{Trace, collect};
use views::info;

pub fn info(dirs: &[PathBuf], json: bool) -> Result<()> {
    let trace = match dirs {
        [dir] => Trace::open(dir)?,
        _ => collect::collect(dirs)?.trace()?,
    };
    let summary = info::summarize(&trace)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", info::render_table(&summary));
    }
    for dir in dirs {
        for spawned in spawned_worlds(dir) {
            eprintln!(
                "evenflush: note: {} holds the trace of a world started by MPI_Comm_spawn; \
                 read it on its own (evenflush info {})",
                spawned.display(),
                spawned.display()
            );
        }
    }
    for skipped in &summary.skipped {
        eprintln!("evenflush: warning: {skipped}");
    }
    Ok(())
}

/// The `spawn-KEY` subdirectories of a trace directory (format/FORMAT.md, "Files and naming").
fn spawned_worlds(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| format::naming::is_spawn_dir_name(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}
