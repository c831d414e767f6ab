//! Turns on the OTF2 export (`cfg(have_otf2)`) when the `otf2` feature is on and the OTF2 library's
//! headers are installed (Debian: libopen-trace-format2-dev), and links the library then.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(have_otf2)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=OTF2_INCLUDE_DIR");
    if std::env::var_os("CARGO_FEATURE_OTF2").is_none() {
        return;
    }
    let include = std::env::var("OTF2_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    let header = std::path::Path::new(&include).join("otf2/otf2.h");
    println!("cargo::rerun-if-changed={}", header.display());
    if !header.exists() {
        // A header installed later keeps its package's old date, which cargo would take for
        // unchanged: watch the nearest directory that exists, whose date the install moves.
        if let Some(dir) = header.ancestors().skip(1).find(|d| d.is_dir()) {
            println!("cargo::rerun-if-changed={}", dir.display());
        }
        println!(
            "cargo::warning=OTF2 headers not found at {}: `evenflush export --format otf2` will be unavailable",
            header.display()
        );
        return;
    }
    // pkg-config knows the library's name and any extra search path; fall back to Debian's name.
    let libs = std::process::Command::new("pkg-config")
        .args(["--libs", "otf2"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|| "-lopen-trace-format2".into());
    for flag in libs.split_whitespace() {
        if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo::rustc-link-lib={lib}");
        } else if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo::rustc-link-search=native={dir}");
        }
    }
    println!("cargo::rustc-cfg=have_otf2");
}
