//! `evenflush info`.

use std::path::Path;

use anyhow::Result;
use reconstruct::{Trace, info};

pub fn info(dir: &Path, json: bool) -> Result<()> {
    let trace = Trace::open(dir)?;
    let summary = info::summarize(&trace)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", info::render_table(&summary));
    }
    for skipped in &summary.skipped {
        eprintln!(
            "evenflush: warning: {}: byte {}: {}",
            skipped.file.display(),
            skipped.offset,
            skipped.what
        );
    }
    Ok(())
}
