//! `evenflush info`.

use std::path::PathBuf;

use anyhow::Result;
use reconstruct::{Trace, collect, info};

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
    for skipped in &summary.skipped {
        eprintln!("evenflush: warning: {skipped}");
    }
    Ok(())
}
