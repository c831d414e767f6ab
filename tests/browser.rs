//! The Chrome JSON export opened in a real viewer in a real browser: speedscope in headless
//! Chromium (`benches/views/speedscope.sh`, both installed by `scripts/setup.sh`), on a halo run
//! with flushes under each MPI. The viewer must import the file and find every slice nested
//! (message flow children at a call's own begin or end once made it nest every later call).

#[macro_use]
mod common;

use std::process::Command;

use common::{Mpi, mpi_lock, repo_root, run_traced, scratch, skip_or_fail};

fn opens_in_speedscope(mpi: Mpi) {
    let viewer = std::path::Path::new(
        "/var/cache/evenflush/speedscope/node_modules/speedscope/dist/release/index.html",
    );
    let has_chromium = Command::new("sh")
        .args(["-c", "command -v chromium"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !viewer.exists() || !has_chromium {
        skip_or_fail(
            "browser",
            "speedscope or chromium missing: run scripts/setup.sh",
        );
        return;
    }
    let dir = scratch(&format!("browser-{}", mpi.name()));
    {
        let _guard = mpi_lock();
        run_traced(
            mpi,
            4,
            "halo",
            &["--iterations", "1000"],
            &dir,
            &["--threshold", "64KiB"],
        );
    }
    let png = dir.with_extension("png");
    let out = Command::new("bash")
        .arg(repo_root().join("benches/views/speedscope.sh"))
        .arg(&dir)
        .arg(&png)
        .env(
            "CARGO_TARGET_DIR",
            common::evenflush_bin().parent().unwrap().parent().unwrap(),
        )
        .output()
        .expect("run speedscope.sh");
    assert!(
        out.status.success(),
        "speedscope.sh failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(size > 10_000, "screenshot of {size} bytes: a blank page?");
}

for_both_mpis!(opens_in_speedscope);
